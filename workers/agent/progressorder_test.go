package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// lookProvider calls the tool look on a run's first model call and
// answers after that; every call after the first two (a redelivery
// repeating the run's last step) lasts slow.
type lookProvider struct {
	slow  time.Duration
	mu    sync.Mutex
	calls map[string]int // by the user's text, one per run
}

func (p *lookProvider) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	key := lastUser(req)
	p.mu.Lock()
	p.calls[key]++
	n := p.calls[key]
	p.mu.Unlock()
	switch {
	case n == 1:
		return model.Response{ToolCalls: []schema.ToolCall{{ID: "m1", Name: "look", Arguments: []byte(`{}`)}}}, nil
	case n > 2:
		select {
		case <-time.After(p.slow):
		case <-ctx.Done():
			return model.Response{}, ctx.Err()
		}
	}
	return model.Response{Text: "done"}, nil
}

// No progress event of a run is stored after the run's end: a tool that
// finishes just under and just over the progress delay, the turn's end
// published where the processor publishes it (turn.completed in
// PARLEY_CHAT, once run.completed is out), then the tool's result
// delivered again (a redelivery, which repeats the run's last step, here
// with a model step that lasts past the delay): in PARLEY_CHAT's stream
// order, no progress of the run follows its turn.completed.
func TestNoProgressAfterTheTurnEnds(t *testing.T) {
	r := newRig(t, `{"rules":[],"fallback":"?"}`, allowAll, tool("look", true, `{"type":"object"}`))
	r.a.provider = &lookProvider{slow: 2 * DefaultProgressDelay, calls: map[string]int{}}
	for _, took := range []time.Duration{DefaultProgressDelay - 5*time.Millisecond, DefaultProgressDelay + 5*time.Millisecond} {
		run := fmt.Sprintf("run-%v", took)
		if err := r.request(run, user(run)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(took) // the tool runs
		res := events.ToolResult{RunID: run, CallID: "call_0_0", Result: &schema.CallToolResult{Content: schema.ContentList{schema.Text("ok")}}}
		if err := r.result(res); err != nil {
			t.Fatal(err)
		}
		r.completed()
		// The processor's turn.completed.
		e, err := events.KindTurnCompleted.New(events.SourceProcessor, events.DerivedID("turn.completed", "t1", "turn-"+run), "t1",
			events.TurnCompleted{TurnID: "turn-" + run, Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
		if err != nil {
			t.Fatal(err)
		}
		e.SetExtension(events.ExtTurnID, "turn-"+run)
		if _, err := bus.PublishTo(r.ctx, r.b, events.StreamChat, e, "t1"); err != nil {
			t.Fatal(err)
		}
		// The result again: the run's last step is repeated.
		re, _ := events.New("/test/toolexec", events.TypeToolResultReady, "t1", res)
		if err := r.a.Handle(r.ctx, &bus.Delivery{Event: re, Subject: events.ToolResultSubject(run), NumDelivered: 2}); err != nil {
			t.Fatal(err)
		}
		r.outcome() // its run.completed again (a duplicate the stream drops)
	}
	time.Sleep(3 * DefaultProgressDelay) // any timer left would fire

	cons, err := r.b.JetStream().OrderedConsumer(r.ctx, events.StreamChat, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"parley.chat.t1.>"}})
	if err != nil {
		t.Fatal(err)
	}
	ended := map[string]bool{}
	var order []string
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			break
		}
		e, err := events.Decode(events.Header(m.Headers()), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		turn, _ := e.Extensions()[events.ExtTurnID].(string)
		order = append(order, string(events.TypeOf(e))+" "+turn)
		switch events.TypeOf(e) {
		case events.TypeTurnCompleted:
			ended[turn] = true
		case events.TypeProgress:
			if ended[turn] {
				t.Errorf("progress of %s stored after its turn.completed; stream order: %q", turn, order)
			}
		}
	}
	if len(ended) != 2 {
		t.Fatalf("stream order %q: want both turns' turn.completed", order)
	}
	t.Logf("stream order: %q", order)
}
