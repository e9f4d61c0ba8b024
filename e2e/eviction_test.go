package e2e

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/gateway"
	"github.com/parley-dev/parley/schema"
)

// A flood of another thread fills PARLEY_CHAT to its byte limit and the
// oldest events — alice's question among them — are dropped. Her thread
// is still paused on that question at the processor, and the gateway says
// so (GET reads the processor's record, not a fold of what is left of the
// events); her answer is taken
// and the turn completes. Before, GET showed the thread idle with nothing
// pending, while the processor still took an answer.
func TestEvictedQuestionStaysPendingAndAnswerable(t *testing.T) {
	s := start(t, options{streamMaxBytes: 256 << 10})
	g := s.startGateway(nil)
	g.send(aliceToken, "v1", deleteDrafts)
	id, _ := s.question("v1", 1)

	stream, err := s.bus.JetStream().Stream(s.ctx, events.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	evicted := func() bool {
		_, err := stream.GetLastMsgForSubject(s.ctx, events.ChatSubject("v1", events.ChatElicitationRequested))
		return errors.Is(err, jetstream.ErrMsgNotFound)
	}
	big := strings.Repeat("flood ", 5000) // 30 KB
	for i := 0; i < 40 && !evicted(); i++ {
		e, err := s.client.TurnRequest("flood", "", big, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.Publish(s.ctx, e); err != nil {
			t.Fatal(err)
		}
		if i%8 == 7 {
			s.awaitInputHandled()
		}
	}
	s.awaitInputHandled()
	if !evicted() {
		t.Fatal("the flood did not evict alice's question from PARLEY_CHAT")
	}

	resp, body := g.do("GET", "/v1/threads/v1", aliceToken, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET v1 = %d %s", resp.StatusCode, body)
	}
	var st gateway.ThreadState
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	ids := func(ps []schema.ElicitRequestParams) []string {
		var out []string
		for _, p := range ps {
			s, _ := p.Meta[schema.MetaElicitationID].(string)
			out = append(out, s)
		}
		return out
	}
	if st.State != gateway.StatePaused || !slices.Contains(ids(st.Pending), id) || st.Source != gateway.SourceRecord {
		t.Errorf("GET v1 after the eviction: state %q, pending %v, source %q; want paused on %s from the record",
			st.State, ids(st.Pending), st.Source, id)
	}
	// The processor tells a thread's state only to its parties.
	if _, err := s.client.ThreadState(s.ctx, "v1", ""); !errors.Is(err, client.ErrNotAParty) {
		t.Errorf("the integrator's ThreadState of alice's thread: %v, want ErrNotAParty", err)
	}
	if resp, body := g.do("POST", "/v1/threads/v1/elicitations/"+id, aliceToken, map[string]any{"action": "accept"}); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("alice's answer after the eviction = %d %s, want 202", resp.StatusCode, body)
	}
	if text := s.completed("v1", 1); !strings.Contains(text, "Deleted 10") {
		t.Fatalf("completed = %q", text)
	}
}
