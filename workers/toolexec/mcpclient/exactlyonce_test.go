package mcpclient

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec"
)

// One call of a counting MCP tool, delivered twice at once to two
// executors, runs once on the server; both deliveries end up publishing
// the one result. The tool is registered namespaced, with its annotations.
func TestConcurrentCallOfMCPToolRunsOnce(t *testing.T) {
	s, count := startInMemory(t, true, Options{})
	srv := bustest.NewServer(t)
	newExec := func() *toolexec.Executor {
		b, err := bus.New(srv.Connect(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.EnsureStreams(t.Context()); err != nil {
			t.Fatal(err)
		}
		x, err := toolexec.New(t.Context(), b, nil, &toolexec.Options{Sources: []toolexec.Source{s}})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	a, b := newExec(), newExec()

	_, js := srv.JetStream(t)
	reg, err := kvstate.OpenTools(t.Context(), js, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	def, err := reg.Get(t.Context(), "test__count")
	if err != nil {
		t.Fatal(err)
	}
	if def.Annotations.Destructive() || def.Annotations.Idempotent() {
		t.Fatalf("registered annotations %+v", def.Annotations)
	}

	e, err := events.New(events.SourceAgent, events.TypeToolCallRequested, "th", events.ToolCallRequested{
		RunID: "run-1", Thread: "th", Call: schema.ToolCall{ID: "c1", Name: "test__count", Arguments: json.RawMessage(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	// The agent's decision record for the call (test__count is not
	// read-only, so the executor runs it only with one).
	decisions, err := kvstate.OpenDecisions(t.Context(), js, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := schema.ArgumentsSHA256(json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := decisions.Record(t.Context(), kvstate.CallDecision{Format: kvstate.DecisionFormat, Run: "run-1", Call: "c1",
		Tool: "test__count", ArgumentsSHA256: sum, Decision: events.DecisionAllow, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	d := &bus.Delivery{Event: e, Subject: events.ToolCallSubject("test__count"), NumDelivered: 1}
	var wg sync.WaitGroup
	var errs [2]error
	wg.Go(func() { errs[0] = a.Handle(t.Context(), d) })
	wg.Go(func() { errs[1] = b.Handle(t.Context(), d) })
	wg.Wait()
	if n := count.Load(); n != 1 {
		t.Fatalf("MCP tool ran %d times, want 1 (errors %v)", n, errs)
	}
	// The delivery told to wait comes back and gets the recorded result.
	for i, err := range errs {
		if err == nil {
			continue
		}
		if !strings.Contains(err.Error(), "is running on executor") {
			t.Fatalf("delivery %d: %v", i, err)
		}
		time.Sleep(10 * time.Millisecond)
		if err := []*toolexec.Executor{a, b}[i].Handle(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	if n := count.Load(); n != 1 {
		t.Fatalf("MCP tool ran %d times after redelivery, want 1", n)
	}
}
