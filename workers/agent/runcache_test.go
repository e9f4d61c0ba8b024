package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// stepModel answers its n-th call with steps[n-1], and anything after the
// last step with a text that says it was called too often. Several
// replicas may share one: the calls are counted across them.
type stepModel struct {
	mu    sync.Mutex
	steps []model.Response
	reqs  []model.Request
}

const calledTooOften = "the model was called more often than the run needs"

func (m *stepModel) Complete(_ context.Context, req model.Request) (model.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs = append(m.reqs, req)
	if n := len(m.reqs); n <= len(m.steps) {
		return m.steps[n-1], nil
	}
	return model.Response{Text: calledTooOften}, nil
}

// calls returns the number of model calls so far.
func (m *stepModel) calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.reqs)
}

// toolResults returns the tool messages of the n-th request (from 1).
func (m *stepModel) toolResults(n int) []model.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []model.Message
	for _, msg := range m.reqs[n-1].Messages {
		if msg.Role == model.RoleTool {
			out = append(out, msg)
		}
	}
	return out
}

func callTools(names ...string) model.Response {
	var r model.Response
	for _, n := range names {
		r.ToolCalls = append(r.ToolCalls, schema.ToolCall{ID: "m-" + n, Name: n, Arguments: json.RawMessage(`{}`)})
	}
	return r
}

// runReads counts the reads of parley_runs records (KV direct gets on the
// server) made from now on, by any agent on the rig's connection: the
// returned function gives the count since the previous call.
func (r *rig) runReads(t *testing.T) func() int {
	t.Helper()
	nc := r.b.Conn()
	sub, err := nc.SubscribeSync("$JS.API.DIRECT.GET.KV_" + kvstate.BucketRuns + ".>")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() int {
		t.Helper()
		// The requests were published on this connection before: once
		// the server answered the flush, their copies are queued here.
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			if _, err := sub.NextMsg(20 * time.Millisecond); err != nil {
				if err != nats.ErrTimeout {
					t.Fatal(err)
				}
				return n
			}
			n++
		}
	}
}

// deliver hands agent a the tool result res as the n-th delivery of its
// message.
func (r *rig) deliver(a *Agent, res events.ToolResult, n uint64) error {
	r.t.Helper()
	e, err := events.New("/test/toolexec", events.TypeToolResultReady, "t1", res)
	if err != nil {
		r.t.Fatal(err)
	}
	return a.Handle(r.ctx, &bus.Delivery{Event: e, Subject: events.ToolResultSubject(res.RunID), NumDelivered: n})
}

// replica starts a second agent on the rig's bus (another replica of the
// agent, with its own memory), calling provider.
func (r *rig) replica(provider model.Provider) *Agent {
	r.t.Helper()
	a, err := New(r.ctx, r.b, provider, &Options{PreExecuteTimeout: 2 * time.Second, Policies: []string{"test"}})
	if err != nil {
		r.t.Fatal(err)
	}
	return a
}

// noOutcome fails when the agents publish a run outcome within d.
func (r *rig) noOutcome(d time.Duration, why string) {
	r.t.Helper()
	select {
	case e := <-r.outcomes:
		r.t.Fatalf("%s: outcome %s %s, want none", why, e.Type(), e.Data())
	case <-time.After(d):
	}
}

func okResult(runID, callID, text string) events.ToolResult {
	return events.ToolResult{RunID: runID, CallID: callID, Result: &schema.CallToolResult{
		Content: schema.ContentList{schema.Text(text)}}}
}

// The agent that checkpointed a run before dispatching its tool call
// applies the call's result, on its first delivery, without reading the
// run record back (one KV read less per turn).
func TestFirstResultReadsNoRunRecord(t *testing.T) {
	r := newRig(t, oneCall("look", `{}`), allowAll, tool("look", true, `{"type":"object"}`))
	reads := r.runReads(t)
	if err := r.request("run-c1", user("look")); err != nil {
		t.Fatal(err)
	}
	reads()
	if err := r.deliver(r.a, okResult("run-c1", "call_0_0", "seen"), 1); err != nil {
		t.Fatal(err)
	}
	if n := reads(); n != 0 {
		t.Errorf("%d reads of the run record for the first delivery of a result to the agent that wrote it, want 0", n)
	}
	if done := r.completed(); done.Message.Text != "seen" {
		t.Errorf("final = %q, want the tool's result", done.Message.Text)
	}
}

// A redelivered result is applied from the run record, never from the
// agent's memory: here another replica (b) took the result's first
// delivery and the run's next step, so the record moved on while a's
// memory still shows the call dispatched. The redelivery to a must be
// ignored as already applied (no model call, no outcome); folded again
// from memory, it would repeat the step, and the model, answering
// differently this time, would end the run while its next call runs.
//
// Then the next call's result reaches a first: a's memory does not know
// the call, which proves nothing (a's record is behind), so a reads the
// record and applies it; taken as "already applied", the result would be
// dropped and the run never end.
func TestStaleMemoryNeverDecides(t *testing.T) {
	r := newRig(t, `{"rules":[],"fallback":"?"}`, allowAll, tool("look", true, `{"type":"object"}`))
	m := &stepModel{steps: []model.Response{callTools("look"), callTools("look"), {Text: "done"}}}
	r.a.provider = m
	b := r.replica(m)
	reads := r.runReads(t)
	if err := r.request("run-c2", user("look twice")); err != nil {
		t.Fatal(err)
	}
	if err := r.deliver(b, okResult("run-c2", "call_0_0", "first"), 1); err != nil {
		t.Fatal(err)
	}
	if m.calls() != 2 {
		t.Fatalf("%d model calls after the first result, want 2", m.calls())
	}
	reads()
	if err := r.deliver(r.a, okResult("run-c2", "call_0_0", "first"), 2); err != nil {
		t.Fatal(err)
	}
	if n := reads(); n != 1 {
		t.Errorf("%d reads of the run record for a redelivered result, want 1", n)
	}
	r.noOutcome(300*time.Millisecond, "a redelivered result already applied by another replica")
	if m.calls() != 2 {
		t.Errorf("%d model calls after the redelivery, want still 2 (the result was applied already)", m.calls())
	}
	if err := r.deliver(r.a, okResult("run-c2", "call_1_0", "second"), 1); err != nil {
		t.Fatal(err)
	}
	if done := r.completed(); done.Message.Text != "done" {
		t.Errorf("final = %q, want done", done.Message.Text)
	}
	if got := m.toolResults(3); len(got) != 2 || got[0].Text != "first" || got[1].Text != "second" {
		t.Errorf("the last model call read the tool results %+v, want first and second once each", got)
	}
}

// Two calls of one step, their results handled by two replicas: b
// applies one (and writes), then a, which wrote the record before the
// calls, applies the other's first delivery from memory. a's write
// conflicts (b's write came between), so a reads the record and applies
// its result once, on top of b's.
func TestConflictReadsAndAppliesOnce(t *testing.T) {
	r := newRig(t, `{"rules":[],"fallback":"?"}`, allowAll, tool("look", true, `{"type":"object"}`), tool("find", true, `{"type":"object"}`))
	m := &stepModel{steps: []model.Response{callTools("look", "find"), {Text: "done"}}}
	r.a.provider = m
	b := r.replica(m)
	reads := r.runReads(t)
	if err := r.request("run-c3", user("look and find")); err != nil {
		t.Fatal(err)
	}
	if err := r.deliver(b, okResult("run-c3", "call_0_1", "found"), 1); err != nil {
		t.Fatal(err)
	}
	reads()
	if err := r.deliver(r.a, okResult("run-c3", "call_0_0", "looked"), 1); err != nil {
		t.Fatal(err)
	}
	if n := reads(); n != 1 {
		t.Errorf("%d reads of the run record after a's write conflicted, want 1", n)
	}
	if done := r.completed(); done.Message.Text != "done" {
		t.Errorf("final = %q, want done", done.Message.Text)
	}
	if m.calls() != 2 {
		t.Errorf("%d model calls, want 2", m.calls())
	}
	if got := m.toolResults(2); len(got) != 2 || got[0].Text != "looked" || got[1].Text != "found" {
		t.Errorf("the last model call read the tool results %+v, want looked and found once each", got)
	}
	r.noOutcome(200*time.Millisecond, "a second outcome")
}

// A record remembered for longer than the window, or remembered across a
// reconnect, is not trusted even on a first delivery: the result reads
// the record. So does every result with Options.NoRunCache.
func TestOldMemoryReadsTheRecord(t *testing.T) {
	for name, age := range map[string]func(r *rig){
		"window passed": func(r *rig) {
			r.a.runCache.now = func() time.Time { return time.Now().Add(runCacheWindow) }
		},
		"reconnected": func(r *rig) {
			r.a.runCache.epoch = func() uint64 { return 1 }
		},
		"NoRunCache": func(r *rig) {
			if r.a.runCache.len() != 1 {
				r.t.Fatalf("%d records remembered after the checkpoint, want 1", r.a.runCache.len())
			}
			r.a.runCache = nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, oneCall("look", `{}`), allowAll, tool("look", true, `{"type":"object"}`))
			reads := r.runReads(t)
			if err := r.request("run-c4", user("look")); err != nil {
				t.Fatal(err)
			}
			age(r)
			reads()
			if err := r.deliver(r.a, okResult("run-c4", "call_0_0", "seen"), 1); err != nil {
				t.Fatal(err)
			}
			if n := reads(); n != 1 {
				t.Errorf("%d reads of the run record, want 1", n)
			}
			if done := r.completed(); done.Message.Text != "seen" {
				t.Errorf("final = %q, want the tool's result", done.Message.Text)
			}
		})
	}
	a, err := New(t.Context(), newRig(t, `{"rules":[],"fallback":"?"}`, allowAll).b, &stepModel{}, &Options{NoRunCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.runCache != nil {
		t.Error("Options.NoRunCache: the agent remembers run records")
	}
}

// The cache hands out copies, keeps the newest revision, forgets what is
// older than its window, and holds at most maxCachedRuns records (the
// oldest evicted first).
func TestRunCacheBounds(t *testing.T) {
	now := time.Now()
	c := newRunCache(true, nil)
	c.now = func() time.Time { return now }
	at := func(d time.Duration) stamp { return stamp{at: now.Add(d)} }
	c.put("r", &Run{RunID: "r", Step: 2}, 5, at(0))
	c.put("r", &Run{RunID: "r", Step: 1}, 4, at(0)) // a late put of an older write
	run, rev, ok := c.fresh("r")
	if !ok || rev != 5 || run.Step != 2 {
		t.Fatalf("fresh = %+v, %d, %v; want step 2 at revision 5", run, rev, ok)
	}
	run.Step = 9
	if again, _, _ := c.fresh("r"); again.Step != 2 {
		t.Errorf("a caller's change reached the cache: step %d", again.Step)
	}
	c.drop("r")
	if _, _, ok := c.fresh("r"); ok {
		t.Error("a dropped record is still remembered")
	}

	c.put("old", &Run{RunID: "old"}, 1, at(-runCacheWindow))
	now = now.Add(runCacheWindow) // the next put sweeps
	c.put("new", &Run{RunID: "new"}, 1, at(0))
	if c.len() != 1 {
		t.Errorf("%d records after a window passed, want 1 (the old one swept)", c.len())
	}
	for i := range maxCachedRuns + 10 {
		c.put(fmt.Sprint("run", i), &Run{RunID: "x"}, 1, at(time.Duration(i)))
	}
	if c.len() != maxCachedRuns {
		t.Errorf("%d records, want the bound %d", c.len(), maxCachedRuns)
	}
	if _, _, ok := c.fresh("run0"); ok {
		t.Error("the oldest record survived the bound")
	}
	if _, _, ok := c.fresh(fmt.Sprint("run", maxCachedRuns+9)); !ok {
		t.Error("the newest record was evicted")
	}
	var off *runCache
	off.put("r", &Run{}, 1, stamp{})
	if _, _, ok := off.fresh("r"); ok {
		t.Error("a nil cache remembered a record")
	}
}

// A tool result stored twice (the tool executor published it again after
// a crash, a whole duplicate window after the first copy) must not be
// applied again from memory refreshed by a later write of the same step.
// Here a dispatches look and find; look's result reaches a after a's
// memory of the dispatch aged out, so a reads the record, applies it and
// writes (remembering that write, which dispatched nothing); b applies
// find's first copy and starts the next step (more). find's second copy,
// stored a duplicate window after the first, reaches a within a window
// of a's last write: the window of rule 2 counts from the write that
// dispatched the call, not from any later write, so a must read the
// record (find is applied there) and take no decision from memory. From
// memory, a applies find again, calls the model for the step b already
// took, and ends the run while more still runs.
func TestSecondCopyAfterWindowNeverDecides(t *testing.T) {
	r := newRig(t, `{"rules":[],"fallback":"?"}`, allowAll, tool("look", true, `{"type":"object"}`),
		tool("find", true, `{"type":"object"}`), tool("more", true, `{"type":"object"}`))
	m := &stepModel{steps: []model.Response{callTools("look", "find"), callTools("more"), {Text: "done"}}}
	r.a.provider = m
	b := r.replica(m)
	if err := r.request("run-c6", user("look and find")); err != nil {
		t.Fatal(err)
	}
	// a's clock: the dispatch at 0; look's result at 1.5 windows (find's
	// first copy was stored just after the dispatch, its second copy a
	// duplicate window later, at 2 windows and a bit).
	r.a.runCache.now = func() time.Time { return time.Now().Add(runCacheWindow * 3 / 2) }
	if err := r.deliver(r.a, okResult("run-c6", "call_0_0", "looked"), 1); err != nil {
		t.Fatal(err)
	}
	if err := r.deliver(b, okResult("run-c6", "call_0_1", "found"), 1); err != nil {
		t.Fatal(err)
	}
	if m.calls() != 2 {
		t.Fatalf("%d model calls after both results, want 2 (the step with more)", m.calls())
	}
	r.a.runCache.now = func() time.Time { return time.Now().Add(2*runCacheWindow + 5*time.Second) }
	if err := r.deliver(r.a, okResult("run-c6", "call_0_1", "found"), 1); err != nil {
		t.Fatal(err)
	}
	r.noOutcome(300*time.Millisecond, "find's second copy, already applied, while more runs")
	if m.calls() != 2 {
		t.Errorf("%d model calls after find's second copy, want still 2 (it was applied already)", m.calls())
	}
	if err := r.deliver(b, okResult("run-c6", "call_1_0", "more"), 1); err != nil {
		t.Fatal(err)
	}
	if done := r.completed(); done.Message.Text != "done" {
		t.Errorf("final = %q, want done", done.Message.Text)
	}
}
