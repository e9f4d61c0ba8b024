package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/parley-dev/parley/events"
)

// sseRaw opens thread's event stream with the Last-Event-ID header set to
// lastID verbatim; a status other than 200 is returned with its body and
// no events.
func (x *gw) sseRaw(ctx context.Context, token, thread, lastID string) (int, string, <-chan sseEvent) {
	x.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", x.srv.URL+"/v1/threads/"+thread+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Last-Event-ID", lastID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		x.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b), nil
	}
	out := make(chan sseEvent, 256)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.data != nil {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id, _ = strconv.ParseUint(line[4:], 10, 64)
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(line[6:]), &ev.data)
			}
		}
	}()
	return resp.StatusCode, "", out
}

// Whatever Last-Event-ID a client sends (past the end of the stream, 0,
// negative, huge, beyond 64 bits, not a number), the gateway either
// refuses it with a 4xx naming the header, or resumes so that the
// thread's new events arrive, each once and after the header's position.
func TestGatewaySSELastEventIDEdges(t *testing.T) {
	s := start(t, options{})
	g := s.startGateway(nil)
	g.send(aliceToken, "le", "list everything")
	s.completed("le", 1)
	end := s.storedSeqs(events.ChatThreadSubjects("le"))
	last := end[len(end)-1]
	cases := []string{
		strconv.FormatUint(last+1, 10), strconv.FormatUint(last+1000, 10), "0", "-1", "-9999",
		"18446744073709551615", "99999999999999999999999", "abc", "1e3", " 3", "",
	}
	turns := 1
	for _, v := range cases {
		t.Run(fmt.Sprintf("%q", v), func(t *testing.T) {
			ctx, cancel := context.WithCancel(s.ctx)
			defer cancel()
			status, body, ch := g.sseRaw(ctx, aliceToken, "le", v)
			if status != http.StatusOK {
				if status < 400 || status >= 500 || !strings.Contains(body, "Last-Event-ID") {
					t.Fatalf("Last-Event-ID %q: %d %s, want 200 or a 4xx naming the header", v, status, body)
				}
				return
			}
			turns++
			g.send(aliceToken, "le", "list everything")
			s.completed("le", turns)
			want := lastCompleted(s, "le")
			seen := map[uint64]bool{}
			var prev uint64
			for {
				got := awaitType(t, ch, events.TypeTurnCompleted)
				for _, ev := range got {
					if seen[ev.id] || ev.id <= prev {
						t.Errorf("Last-Event-ID %q: event %d after %d", v, ev.id, prev)
					}
					seen[ev.id], prev = true, ev.id
				}
				if prev == want {
					break // the new turn's end arrived
				}
				if prev > want {
					t.Fatalf("Last-Event-ID %q: turn.completed %d is past the new one %d", v, prev, want)
				}
			}
		})
	}
}

// lastCompleted is the stream sequence of thread's last turn.completed.
func lastCompleted(s *system, thread string) uint64 {
	seqs := s.storedSeqs(events.ChatSubject(thread, events.ChatTurnCompleted))
	return seqs[len(seqs)-1]
}
