package agent

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// The bus work of a step with tool calls: a read-only
// call gets no decision record (the tool-executor never reads one for it)
// while a call that is not read-only does, and the last tool call's
// "finished" progress announces the model step instead of a second
// "Thinking…".
func TestToolStepBusWork(t *testing.T) {
	rules := `{"rules":[{"name":"r","match":".","steps":[{"tool_calls":[
	  {"name":"look","arguments":{}},{"name":"edit","arguments":{}}]},
	  {"text":"done"}]}],"fallback":"?"}`
	r := newRig(t, rules, allowAll, tool("look", true, `{"type":"object"}`), tool("edit", false, `{"type":"object"}`))
	// Every phase here is instant, so with the default ProgressDelay none
	// would publish progress (TestInstantPhasesPublishNoProgress); this
	// test pins the order and the fold of each phase's progress, so it
	// has them published at once.
	r.a.opts.ProgressDelay = -1
	var (
		mu       sync.Mutex
		statuses []string
		messages []string
	)
	r.watchProgress(t, func(st, msg string) {
		mu.Lock()
		statuses, messages = append(statuses, st), append(messages, msg)
		mu.Unlock()
	})
	if err := r.request("run7", user("go")); err != nil {
		t.Fatal(err)
	}
	decisions, err := kvstate.OpenDecisions(r.ctx, r.b.JetStream(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decisions.Get(r.ctx, "run7", "call_0_0", 0); !errors.Is(err, kvstate.ErrNotFound) {
		t.Errorf("decision record of the read-only call: %v, want none (ErrNotFound)", err)
	}
	if rec, err := decisions.Get(r.ctx, "run7", "call_0_1", 0); err != nil || rec.Tool != "edit" {
		t.Errorf("decision record of the call that is not read-only: %+v, %v; want one for edit", rec, err)
	}
	for _, id := range []string{"call_0_0", "call_0_1"} {
		if err := r.result(events.ToolResult{RunID: "run7", CallID: id, Result: &schema.CallToolResult{
			Content: schema.ContentList{schema.Text("ok")}}}); err != nil {
			t.Fatal(err)
		}
	}
	if done := r.completed(); done.Message.Text != "done" {
		t.Fatalf("final = %q", done.Message.Text)
	}
	want := "Thinking…|Checking look|Checking edit|Running look|Running edit|look finished|edit finished"
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		got, last := strings.Join(statuses, "|"), ""
		if len(messages) > 0 {
			last = messages[len(messages)-1]
		}
		mu.Unlock()
		if got == want && strings.Contains(last, "the model is working on step 2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("progress statuses %q (last message %q), want %q, the last announcing step 2", got, last, want)
		}
	}
}

// watchProgress calls f with the status item and message of each progress
// event the agent publishes on thread t1.
func (r *rig) watchProgress(t *testing.T, f func(status, message string)) {
	t.Helper()
	sub, err := r.b.Conn().Subscribe(events.ChatSubject("t1", events.ChatProgress), func(m *nats.Msg) {
		e, err := events.Decode(events.Header(m.Header), m.Data)
		if err != nil {
			t.Errorf("progress: %v", err)
			return
		}
		p, _ := events.Data[schema.Progress](e)
		st, _ := p.Meta.StatusItem()
		f(st, p.Message)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// A turn whose phases all end within DefaultProgressDelay (model, policy
// check, tool call, model) publishes no progress at all, and leaves
// nothing pending.
func TestInstantPhasesPublishNoProgress(t *testing.T) {
	rules := `{"rules":[{"name":"r","match":".","steps":[{"tool_calls":[{"name":"look","arguments":{}}]},
	  {"text":"done"}]}],"fallback":"?"}`
	r := newRig(t, rules, allowAll, tool("look", true, `{"type":"object"}`))
	var n atomic.Int32
	r.watchProgress(t, func(string, string) { n.Add(1) })
	if err := r.request("run8", user("go")); err != nil {
		t.Fatal(err)
	}
	if err := r.result(events.ToolResult{RunID: "run8", CallID: "call_0_0", Result: &schema.CallToolResult{
		Content: schema.ContentList{schema.Text("ok")}}}); err != nil {
		t.Fatal(err)
	}
	if done := r.completed(); done.Message.Text != "done" {
		t.Fatalf("final = %q", done.Message.Text)
	}
	time.Sleep(3 * DefaultProgressDelay)
	if got := n.Load(); got != 0 {
		t.Errorf("%d progress events for a turn of instant phases, want 0", got)
	}
	if p := r.a.pending.size(); p != 0 {
		t.Errorf("%d progress notifications still pending after the run completed, want 0", p)
	}
}

// A phase that lasts longer than DefaultProgressDelay still shows: a tool
// call whose result comes after 4 delays gets its "Running" progress
// (once), while the instant phases around it publish none.
func TestSlowPhaseShowsProgress(t *testing.T) {
	rules := `{"rules":[{"name":"r","match":".","steps":[{"tool_calls":[{"name":"look","arguments":{}}]},
	  {"text":"done"}]}],"fallback":"?"}`
	r := newRig(t, rules, allowAll, tool("look", true, `{"type":"object"}`))
	var (
		mu       sync.Mutex
		statuses []string
	)
	r.watchProgress(t, func(st, _ string) {
		mu.Lock()
		statuses = append(statuses, st)
		mu.Unlock()
	})
	start := time.Now()
	if err := r.request("run9", user("go")); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > DefaultProgressDelay {
		t.Skip("the instant phases took longer than the delay (a loaded machine)")
	}
	time.Sleep(4 * DefaultProgressDelay) // the tool runs
	if err := r.result(events.ToolResult{RunID: "run9", CallID: "call_0_0", Result: &schema.CallToolResult{
		Content: schema.ContentList{schema.Text("ok")}}}); err != nil {
		t.Fatal(err)
	}
	r.completed()
	time.Sleep(2 * DefaultProgressDelay)
	mu.Lock()
	got := strings.Join(statuses, "|")
	mu.Unlock()
	if got != "Running look" {
		t.Errorf("progress statuses %q, want only the slow phase's \"Running look\"", got)
	}
}
