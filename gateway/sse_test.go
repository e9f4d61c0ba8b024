package gateway

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
)

// openEvents opens thread's event stream on srv with Last-Event-ID
// lastID and returns the response and its lines, read until ctx ends.
func openEvents(t *testing.T, ctx context.Context, srv *httptest.Server, thread, lastID string) (*http.Response, <-chan string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/threads/"+thread+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+devTok)
	req.Header.Set("Last-Event-ID", lastID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return resp, lines
}

// A Last-Event-ID past the end of the stream (a stream that was
// recreated, a typo, the largest sequence there is) resumes from the
// stream's end: the events stored after the request arrive, and none of
// those before it is replayed.
func TestEventsResumePastTheEnd(t *testing.T) {
	g := newTestGateway(t, &Options{Heartbeat: time.Hour})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(g.Close)
	if w := request(t, g.Handler(), "POST", "/v1/threads/r1/messages", devTok, `{"text":"first"}`, nil); w.Code != 202 {
		t.Fatalf("post = %d %s", w.Code, w.Body)
	}
	echoInput(t, g, "r1", events.ChatTurnRequested)
	for _, lastID := range []string{"1000", "18446744073709551615"} {
		t.Run(lastID, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			resp, lines := openEvents(t, ctx, srv, "r1", lastID)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET events with Last-Event-ID %s = %d, want 200", lastID, resp.StatusCode)
			}
			// The stream is open once its first line (retry:) is read.
			if l := <-lines; !strings.HasPrefix(l, "retry:") {
				t.Fatalf("first line %q, want retry:", l)
			}
			text := "after " + lastID
			if w := request(t, g.Handler(), "POST", "/v1/threads/r1/messages", devTok, `{"text":"`+text+`"}`, nil); w.Code != 202 {
				t.Fatalf("post = %d %s", w.Code, w.Body)
			}
			echoInput(t, g, "r1", events.ChatTurnRequested)
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatal("the stream ended")
					}
					if strings.Contains(l, `"first"`) {
						t.Fatalf("an event before the resume point was replayed: %s", l)
					}
					if strings.Contains(l, text) {
						return
					}
				case <-ctx.Done():
					t.Fatalf("the message sent after the stream opened never arrived")
				}
			}
		})
	}
}

// A malformed Last-Event-ID is refused 400, naming the header: a sign,
// spaces, a fraction, letters, a number past 2^64-1.
func TestEventsMalformedLastEventID(t *testing.T) {
	g := newTestGateway(t, nil)
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(g.Close)
	if w := request(t, g.Handler(), "POST", "/v1/threads/r2/messages", devTok, `{"text":"hi"}`, nil); w.Code != 202 {
		t.Fatalf("post = %d %s", w.Code, w.Body)
	}
	echoInput(t, g, "r2", events.ChatTurnRequested)
	for _, v := range []string{"-1", "+1", "1 2", "1.5", "abc", "0x10", "18446744073709551616", "1e3", "١"} {
		for _, query := range []bool{false, true} {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			path := srv.URL + "/v1/threads/r2/events"
			if query {
				path += "?lastEventId=" + url.QueryEscape(v)
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", path, nil)
			req.Header.Set("Authorization", "Bearer "+devTok)
			if !query {
				req.Header.Set("Last-Event-ID", v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			cancel()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Last-Event-ID") {
				t.Errorf("Last-Event-ID %q (query %v) = %d %s, want 400 naming Last-Event-ID", v, query, resp.StatusCode, body)
			}
		}
	}
}
