package gateway

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// The agent publishes message.delta with a core NATS publish (no ack);
// the subject lies in PARLEY_CHAT, so the thread's event stream forwards
// the deltas to the browser like any stored event, in order, resumable.
func TestEventStreamForwardsDeltas(t *testing.T) {
	srv := bustest.NewServer(t)
	b, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(t.Context()); err != nil { // the workers' job
		t.Fatal(err)
	}
	g, err := New(t.Context(), b, StaticTokens{devTok: "dev"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := request(t, g.Handler(), "POST", "/v1/threads/d1/messages", devTok, `{"text":"hi"}`, nil); w.Code != 202 {
		t.Fatalf("post = %d %s", w.Code, w.Body)
	}
	echoInput(t, g, "d1", events.ChatTurnRequested) // the processor accepted dev's message
	agent, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range []string{"Hel", "lo!"} {
		e, err := events.New(events.SourceAgent, events.TypeMessageDelta, "d1", events.MessageDelta{TurnID: "turn-1", RunID: "run-1",
			Step: 1, Generation: "g1", Attempt: 1, Seq: i, Chunk: schema.ChatMessage{Role: schema.RoleAssistant, Text: text}})
		if err != nil {
			t.Fatal(err)
		}
		if err := agent.PublishCore(t.Context(), events.ChatSubject("d1", events.ChatMessageDelta), e); err != nil {
			t.Fatal(err)
		}
	}
	hs := httptest.NewServer(g.Handler())
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+"/v1/threads/d1/events", nil)
	req.Header.Set("Authorization", "Bearer "+devTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var deltas []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for len(deltas) < 2 && sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"type":"dev.parley.message.delta"`) {
			deltas = append(deltas, line)
		}
	}
	if len(deltas) != 2 || !strings.Contains(deltas[0], `"text":"Hel"`) || !strings.Contains(deltas[1], `"text":"lo!"`) ||
		!strings.Contains(deltas[1], `"seq":1`) {
		t.Fatalf("deltas on the event stream = %q (scan error %v), want Hel then lo!", deltas, sc.Err())
	}
}
