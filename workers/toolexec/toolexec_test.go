package toolexec

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// countingTool counts its executions and takes hold to finish.
type countingTool struct {
	name string
	ann  *schema.ToolAnnotations
	n    atomic.Int32
	hold time.Duration
	err  error
}

func (c *countingTool) Definition() schema.Tool {
	return schema.Tool{Name: c.name, InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: c.ann}
}

func (c *countingTool) Call(ctx context.Context, _ builtin.Request) (builtin.Result, error) {
	n := c.n.Add(1)
	select {
	case <-time.After(c.hold):
	case <-ctx.Done():
		return builtin.Result{}, ctx.Err()
	}
	if c.err != nil {
		return builtin.Result{}, c.err
	}
	return builtin.Result{Call: &schema.CallToolResult{Content: schema.ContentList{schema.Text("ran " + string(rune('0'+n)))}}}, nil
}

// fakeSource is a Source with fixed tools.
type fakeSource struct {
	name  string
	tools []builtin.Tool
}

func (f *fakeSource) Name() string             { return f.name }
func (f *fakeSource) Tools() []builtin.Tool    { return f.tools }
func (f *fakeSource) Changed() <-chan struct{} { return nil }

type fixture struct {
	x       *Executor
	results chan events.ToolResult
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	srv := bustest.NewServer(t)
	nc := srv.Connect(t)
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	x, err := New(ctx, b, nil, &opts)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{x: x, results: make(chan events.ToolResult, 16)}
	sub, err := nc.Subscribe(events.ToolResultSubject(">"), func(m *nats.Msg) {
		e, err := events.Decode(events.Header(m.Header), m.Data)
		if err != nil {
			t.Errorf("decoding result: %v", err)
			return
		}
		r, err := events.Data[events.ToolResult](e)
		if err != nil {
			t.Errorf("decoding result: %v", err)
			return
		}
		f.results <- r
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return f
}

func delivery(t *testing.T, tool string) *bus.Delivery {
	t.Helper()
	e, err := events.New(events.SourceAgent, events.TypeToolCallRequested, "thread-1", events.ToolCallRequested{
		RunID: "run-1", Thread: "thread-1", Agent: "a", Call: schema.ToolCall{ID: "call-1", Name: tool, Arguments: json.RawMessage(`{}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &bus.Delivery{Event: e, Subject: events.ToolCallSubject(tool), NumDelivered: 1}
}

// decide records the agent's allow decision for d's call, as the agent
// does before it dispatches a call.
func (f *fixture) decide(t *testing.T, d *bus.Delivery) *bus.Delivery {
	t.Helper()
	in, err := events.Data[events.ToolCallRequested](d.Event)
	if err != nil {
		t.Fatal(err)
	}
	recordDecision(t, f.x.decisions, in, in.Call.Name, in.Call.Arguments)
	return d
}

// recordDecision records an allow decision for in's dispatch, naming tool
// and args (the agent's record: the call's own tool and arguments).
func recordDecision(t testing.TB, s *kvstate.Decisions, in events.ToolCallRequested, tool string, args json.RawMessage) {
	t.Helper()
	sum, err := schema.ArgumentsSHA256(args)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Record(context.Background(), kvstate.CallDecision{Format: kvstate.DecisionFormat, Run: in.RunID, Call: in.Call.ID,
		Round: in.Round, Tool: tool, ArgumentsSHA256: sum, Decision: events.DecisionAllow,
		Policies: []events.PolicyDecision{{Policy: "gate", Decision: events.DecisionAllow}}, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) result(t *testing.T) events.ToolResult {
	t.Helper()
	select {
	case r := <-f.results:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no tool result published")
		return events.ToolResult{}
	}
}

func text(r events.ToolResult) string {
	if r.Result == nil || len(r.Result.Content) == 0 {
		return ""
	}
	if t, ok := r.Result.Content[0].(*schema.TextContent); ok {
		return t.Text
	}
	return ""
}

// One call delivered twice at once (two executors, or a redelivery racing
// the first delivery) runs the tool once; the second delivery waits and
// then publishes the recorded result.
func TestConcurrentDeliveriesRunOnce(t *testing.T) {
	tool := &countingTool{name: "count", hold: 500 * time.Millisecond} // unannotated: not idempotent
	f := newFixture(t, Options{Sources: []Source{&fakeSource{name: "srv", tools: []builtin.Tool{tool}}}})
	d := f.decide(t, delivery(t, "srv__count"))

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { errs[i] = f.x.Handle(t.Context(), d) })
	}
	wg.Wait()
	if got := tool.n.Load(); got != 1 {
		t.Fatalf("tool ran %d times, want 1", got)
	}
	waiting := 0
	for _, err := range errs {
		if err != nil {
			if !strings.Contains(err.Error(), "is running on executor") {
				t.Fatalf("unexpected error: %v", err)
			}
			waiting++
		}
	}
	if waiting != 1 {
		t.Fatalf("%d deliveries were told to wait, want 1 (errors %v)", waiting, errs)
	}
	first := f.result(t)
	// The waiting delivery comes back: it gets the recorded result.
	if err := f.x.Handle(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	second := f.result(t)
	if tool.n.Load() != 1 || text(first) != "ran 1" || text(second) != text(first) {
		t.Fatalf("runs %d, results %q and %q", tool.n.Load(), text(first), text(second))
	}
}

// staleClaim leaves a claim for d's call as a dead executor would, and
// waits until it is stale.
func staleClaim(t *testing.T, f *fixture, lease time.Duration) {
	t.Helper()
	key := "r" + events.DerivedID("run-1", "call-1", "0")
	if _, err := f.x.results.Create(t.Context(), key, callRecord{State: stateClaimed, Owner: "dead",
		ToolResult: events.ToolResult{RunID: "run-1", CallID: "call-1"}}, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lease + 100*time.Millisecond)
}

// A non-idempotent tool whose executor died mid-call is not run again: the
// model is told the outcome is unknown.
func TestStaleClaimNonIdempotentIsOutcomeUnknown(t *testing.T) {
	tool := &countingTool{name: "count", ann: &schema.ToolAnnotations{IdempotentHint: schema.Bool(false)}}
	f := newFixture(t, Options{ClaimLease: time.Second, Sources: []Source{&fakeSource{name: "srv", tools: []builtin.Tool{tool}}}})
	d := f.decide(t, delivery(t, "srv__count"))
	// While the claim is fresh, the delivery waits for its holder.
	key := "r" + events.DerivedID("run-1", "call-1", "0")
	if _, err := f.x.results.Create(t.Context(), key, callRecord{State: stateClaimed, Owner: "dead",
		ToolResult: events.ToolResult{RunID: "run-1", CallID: "call-1"}}, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.x.Handle(t.Context(), d); err == nil || !strings.Contains(err.Error(), "running on executor dead") {
		t.Fatalf("fresh claim: got %v, want a retry-later error", err)
	}
	time.Sleep(1100 * time.Millisecond)
	if err := f.x.Handle(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	r := f.result(t)
	if tool.n.Load() != 0 || r.Result == nil || !r.Result.IsError || !strings.HasPrefix(text(r), "Outcome unknown: srv__count") {
		t.Fatalf("runs %d, result %+v", tool.n.Load(), r.Result)
	}
	// It stays that way on redelivery.
	if err := f.x.Handle(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	if r2 := f.result(t); text(r2) != text(r) || tool.n.Load() != 0 {
		t.Fatalf("redelivery: runs %d, result %q", tool.n.Load(), text(r2))
	}
}

// An idempotent tool (or a read-only one) whose executor died mid-call is
// run again.
func TestStaleClaimIdempotentReruns(t *testing.T) {
	for _, ann := range []*schema.ToolAnnotations{
		{IdempotentHint: schema.Bool(true), ReadOnlyHint: schema.Bool(false)},
		{ReadOnlyHint: schema.Bool(true)},
	} {
		tool := &countingTool{name: "count", ann: ann}
		f := newFixture(t, Options{ClaimLease: time.Second, Sources: []Source{&fakeSource{name: "srv", tools: []builtin.Tool{tool}}}})
		staleClaim(t, f, time.Second)
		if err := f.x.Handle(t.Context(), f.decide(t, delivery(t, "srv__count"))); err != nil {
			t.Fatal(err)
		}
		if r := f.result(t); tool.n.Load() != 1 || text(r) != "ran 1" {
			t.Fatalf("annotations %+v: runs %d, result %q", ann, tool.n.Load(), text(r))
		}
	}
}

// A non-idempotent tool that fails mid-call (its server went away) is
// reported as outcome unknown rather than retried; an idempotent one is
// retried (the claim is released).
func TestFailureMidCall(t *testing.T) {
	lost := errors.New("connection lost")
	tool := &countingTool{name: "write", err: lost}
	idem := &countingTool{name: "read", err: lost, ann: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true)}}
	f := newFixture(t, Options{Sources: []Source{&fakeSource{name: "srv", tools: []builtin.Tool{tool, idem}}}})
	if err := f.x.Handle(t.Context(), f.decide(t, delivery(t, "srv__write"))); err != nil {
		t.Fatal(err)
	}
	if r := f.result(t); !r.Result.IsError || !strings.Contains(text(r), "Outcome unknown") || !strings.Contains(text(r), "connection lost") {
		t.Fatalf("result %q", text(r))
	}
	d := delivery(t, "srv__read")
	d.Event, _ = events.New(events.SourceAgent, events.TypeToolCallRequested, "thread-1", events.ToolCallRequested{
		RunID: "run-1", Thread: "thread-1", Call: schema.ToolCall{ID: "call-2", Name: "srv__read"}})
	if err := f.x.Handle(t.Context(), d); !errors.Is(err, lost) {
		t.Fatalf("idempotent tool: got %v, want the failure (retried)", err)
	}
	idem.err = nil
	if err := f.x.Handle(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	if r := f.result(t); text(r) != "ran 2" {
		t.Fatalf("retry result %q", text(r))
	}
}

// Source tools are registered namespaced; untrusted definitions arrive
// without annotations (the Source strips them), and bad names are left out.
func TestSourceToolsRegistered(t *testing.T) {
	good := &countingTool{name: "echo", ann: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true)}}
	bad := &countingTool{name: "has.dot"}
	huge := &hugeTool{}
	f := newFixture(t, Options{Sources: []Source{&fakeSource{name: "everything", tools: []builtin.Tool{good, bad, huge}}}})
	if _, err := f.x.reg.Get(t.Context(), "everything__huge"); err == nil {
		t.Fatal("tool with an oversized definition was registered")
	}
	def, err := f.x.reg.Get(t.Context(), "everything__echo")
	if err != nil {
		t.Fatal(err)
	}
	if !def.Annotations.ReadOnly() {
		t.Fatalf("annotations lost: %+v", def.Annotations)
	}
	if _, err := f.x.reg.Get(t.Context(), "everything__has.dot"); err == nil {
		t.Fatal("tool with an invalid namespaced name was registered")
	}
	// A source that drops a tool unregisters it.
	src := &fakeSource{name: "everything"}
	if err := f.x.SyncSource(t.Context(), src); err != nil {
		t.Fatal(err)
	}
	if _, err := f.x.reg.Get(t.Context(), "everything__echo"); err == nil {
		t.Fatal("dropped tool still registered")
	}
}

// BenchmarkHandle measures one call through the exactly-once path (claim
// create, result update, publish) with a tool that does nothing.
func BenchmarkHandle(b *testing.B) {
	srv := bustest.NewServer(b)
	bc, err := bus.New(srv.Connect(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	if err := bc.EnsureStreams(ctx); err != nil {
		b.Fatal(err)
	}
	tool := &countingTool{name: "noop", ann: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true)}}
	x, err := New(ctx, bc, nil, &Options{Sources: []Source{&fakeSource{name: "srv", tools: []builtin.Tool{tool}}}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		e, err := events.New(events.SourceAgent, events.TypeToolCallRequested, "th", events.ToolCallRequested{
			RunID: "run", Thread: "th", Call: schema.ToolCall{ID: "c" + strconv.Itoa(i), Name: "srv__noop"}})
		if err != nil {
			b.Fatal(err)
		}
		if err := x.Handle(ctx, &bus.Delivery{Event: e, Subject: events.ToolCallSubject("srv__noop"), NumDelivered: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandleDecided is BenchmarkHandle for a tool that is not
// read-only: each call also reads and checks its decision record.
func BenchmarkHandleDecided(b *testing.B) {
	srv := bustest.NewServer(b)
	bc, err := bus.New(srv.Connect(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	if err := bc.EnsureStreams(ctx); err != nil {
		b.Fatal(err)
	}
	tool := &countingTool{name: "noop"}
	x, err := New(ctx, bc, nil, &Options{Sources: []Source{&fakeSource{name: "srv", tools: []builtin.Tool{tool}}}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		in := events.ToolCallRequested{RunID: "run", Thread: "th", Call: schema.ToolCall{ID: "c" + strconv.Itoa(i), Name: "srv__noop"}}
		b.StopTimer()
		recordDecision(b, x.decisions, in, in.Call.Name, in.Call.Arguments)
		b.StartTimer()
		e, err := events.New(events.SourceAgent, events.TypeToolCallRequested, "th", in)
		if err != nil {
			b.Fatal(err)
		}
		if err := x.Handle(ctx, &bus.Delivery{Event: e, Subject: events.ToolCallSubject("srv__noop"), NumDelivered: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// hugeTool has a definition larger than the registry accepts.
type hugeTool struct{ countingTool }

func (h *hugeTool) Definition() schema.Tool {
	return schema.Tool{Name: "huge", Description: strings.Repeat("x", kvstate.MaxToolDefinitionBytes),
		InputSchema: json.RawMessage(`{"type":"object"}`)}
}

// A read-only call is neither claimed nor recorded in parley_tool_results
// (package documentation, "Exactly once"): a redelivery runs it again and
// publishes its result again, and its key never exists.
func TestReadOnlyCallNotRecorded(t *testing.T) {
	tool := &countingTool{name: "read", ann: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true)}}
	f := newFixture(t, Options{Sources: []Source{&fakeSource{name: "srv", tools: []builtin.Tool{tool}}}})
	d := delivery(t, "srv__read") // no decision: a read-only call needs none
	for i := 1; i <= 2; i++ {
		if err := f.x.Handle(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		if r := f.result(t); text(r) != "ran "+strconv.Itoa(i) || r.CallID != "call-1" {
			t.Fatalf("delivery %d: result %q for call %q", i, text(r), r.CallID)
		}
	}
	if got := tool.n.Load(); got != 2 {
		t.Fatalf("tool ran %d times, want 2 (once per delivery)", got)
	}
	key := "r" + events.DerivedID("run-1", "call-1", "0")
	if _, _, err := f.x.results.Get(t.Context(), key); !errors.Is(err, kvstate.ErrNotFound) {
		t.Fatalf("%s/%s: got %v, want no record of a read-only call", kvstate.BucketToolResults, key, err)
	}
}
