package mcpclient

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec"
)

// cancelRig is an executor running the in-memory test server's tools on
// an embedded NATS server, with a long call timeout (so only the end of
// the turn can end a hung call early).
type cancelRig struct {
	s    *Server
	x    *toolexec.Executor
	b    *bus.Client
	srv  *bustest.Server
	deci *kvstate.Decisions
}

func newCancelRig(t *testing.T) *cancelRig {
	t.Helper()
	var count atomic.Int32
	mcpSrv := newTestServer(&count)
	// ask-then-work asks the person, then works until it is cancelled.
	mcpSrv.AddTool(&mcp.Tool{Name: "ask-then-work", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			_, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Go on?", RequestedSchema: map[string]any{
				"type": "object", "properties": map[string]any{}}})
			if err == nil {
				<-ctx.Done()
			}
			// notifications/cancelled may arrive before or after the
			// answer to the elicitation: either way the work ends.
			if ctx.Err() != nil {
				workCancelled <- struct{}{}
				return nil, ctx.Err()
			}
			return nil, err
		})
	s, err := Start(t.Context(), "test", ServerConfig{Command: "unused", Trusted: true, CallTimeout: "60s"},
		Options{ProtocolVersion: "2025-11-25", Transport: inMemory(t, mcpSrv)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	srv := bustest.NewServer(t)
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
	_, js := srv.JetStream(t)
	decisions, err := kvstate.OpenDecisions(t.Context(), js, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &cancelRig{s: s, x: x, b: b, srv: srv, deci: decisions}
}

// start delivers a call of tool (allowed by a decision record) to the
// executor; the returned channel gets Handle's error.
func (r *cancelRig) start(t *testing.T, run, tool string) <-chan error {
	t.Helper()
	args := json.RawMessage(`{}`)
	sum, err := schema.ArgumentsSHA256(args)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.deci.Record(t.Context(), kvstate.CallDecision{Format: kvstate.DecisionFormat, Run: run, Call: "c1",
		Tool: tool, ArgumentsSHA256: sum, Decision: events.DecisionAllow, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	e, err := events.New(events.SourceAgent, events.TypeToolCallRequested, "th", events.ToolCallRequested{
		RunID: run, Thread: "th", Call: schema.ToolCall{ID: "c1", Name: tool, Arguments: args}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- r.x.Handle(t.Context(), &bus.Delivery{Event: e, Subject: events.ToolCallSubject(tool), NumDelivered: 1})
	}()
	return done
}

// announce publishes a chat event of the thread "th" about turn.
func (r *cancelRig) announce(t *testing.T, suffix string, typ events.Type, turn string, data any) {
	t.Helper()
	e, err := events.New(events.SourceProcessor, typ, "th", data)
	if err != nil {
		t.Fatal(err)
	}
	e.SetExtension(events.ExtTurnID, turn)
	if _, err := r.b.Publish(t.Context(), events.ChatSubject("th", suffix), e); err != nil {
		t.Fatal(err)
	}
}

// results collects the tool results published for run.
func (r *cancelRig) results(t *testing.T, run string) <-chan events.ToolResult {
	t.Helper()
	ch := make(chan events.ToolResult, 4)
	sub, err := r.b.Conn().Subscribe(events.ToolResultSubject(run), func(m *nats.Msg) {
		e, err := events.Decode(events.Header(m.Header), m.Data)
		if err != nil {
			return
		}
		if res, err := events.Data[events.ToolResult](e); err == nil {
			ch <- res
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// workCancelled receives when an "ask-then-work" call is cancelled on the
// server.
var workCancelled = make(chan struct{}, 1)

func drainHangCancelled() {
	select {
	case <-hangCancelled:
	default:
	}
}

// When the turn of a running MCP call ends (here: turn.failed, e.g. the
// turn timed out), the server is sent notifications/cancelled at once —
// not after the call's 60 s timeout — and the call's recorded result says
// why. An event of another turn of the same thread cancels nothing.
func TestTurnEndCancelsRunningCall(t *testing.T) {
	r := newCancelRig(t)
	drainHangCancelled()
	results := r.results(t, "run-cancel")
	done := r.start(t, "run-cancel", "test__hang")
	eventually(t, 5*time.Second, "the call to start", func() bool { return r.s.Running() == 1 })

	// Another turn's failure (a queued message that was dead-lettered, an
	// old turn's late announcement) leaves the call alone.
	r.announce(t, events.ChatTurnFailed, events.TypeTurnFailed, "other-turn", events.TurnFailed{TurnID: "other-turn", Reason: "x"})
	select {
	case <-hangCancelled:
		t.Fatal("another turn's turn.failed cancelled the call")
	case <-time.After(300 * time.Millisecond):
	}

	r.announce(t, events.ChatTurnFailed, events.TypeTurnFailed, "run-cancel", events.TurnFailed{TurnID: "run-cancel", Reason: "timeout"})
	select {
	case <-hangCancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the server never got notifications/cancelled after the turn failed")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Handle: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Handle still running after the turn ended")
	}
	select {
	case res := <-results:
		if res.Result == nil || !res.Result.IsError || !strings.Contains(mustJSON(t, res.Result), "cancelled because its turn ended") {
			t.Fatalf("recorded result: %s", mustJSON(t, res))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no tool result published")
	}
}

// A newer message superseding the paused turn (elicitation.cancelled)
// while a server's elicitation waits for the person: the server's request
// is answered "cancel" and its tools/call is cancelled (notifications/
// cancelled), so no call is left running for a turn that is over.
func TestSupersedeCancelsWaitingCall(t *testing.T) {
	r := newCancelRig(t)
	results := r.results(t, "run-sup")
	done := r.start(t, "run-sup", "test__ask-then-work")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Handle: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no input-required result")
	}
	select {
	case res := <-results:
		if res.InputRequired == nil {
			t.Fatalf("want input required, got %s", mustJSON(t, res))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no tool result published")
	}
	if n := r.s.Running(); n != 1 {
		t.Fatalf("%d calls running while the person decides, want 1", n)
	}
	r.announce(t, events.ChatElicitationCancelled, events.TypeElicitationCancelled, "run-sup",
		events.ElicitationCancelled{TurnID: "run-sup", ElicitationIDs: []string{"e1"}, Reason: "a new user message started a new turn"})
	select {
	case <-workCancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the server never got notifications/cancelled after the turn was superseded")
	}
	eventually(t, 5*time.Second, "the waiting call to end", func() bool { return r.s.Running() == 0 })
	r.s.pmu.Lock()
	n := len(r.s.pending)
	r.s.pmu.Unlock()
	if n != 0 {
		t.Fatalf("%d calls still pending", n)
	}
}

// ofRun ties a chat event to a call's run by its runid extension, else its
// turn (turnid extension, else data turnId); an event naming neither is
// about no run.
func TestOfRun(t *testing.T) {
	mk := func(turn, runid, turnid string, data any) bool {
		e, err := events.New(events.SourceProcessor, events.TypeTurnFailed, "th", data)
		if err != nil {
			t.Fatal(err)
		}
		if runid != "" {
			e.SetExtension(events.ExtRunID, runid)
		}
		if turnid != "" {
			e.SetExtension(events.ExtTurnID, turnid)
		}
		return ofRun(e, "r1", turn)
	}
	// turn is the call's turnId: "" from an agent before per-thread run
	// IDs (its run ID is the turn's); with one, the turn events name the
	// turn, never the run.
	for _, tt := range []struct {
		name                string
		turn, runid, turnid string
		data                any
		want                bool
	}{
		{"runid", "", "r1", "", events.TurnFailed{}, true},
		{"other runid", "", "r2", "r1", events.TurnFailed{}, false},
		{"turnid", "", "", "r1", events.TurnFailed{}, true},
		{"other turnid", "", "", "r2", events.TurnFailed{TurnID: "r1"}, false},
		{"data turnId", "", "", "", events.TurnFailed{TurnID: "r1"}, true},
		{"no turn", "", "", "", events.TurnFailed{RequestEventID: "x", Reason: "dead_lettered"}, false},
		{"call's turn: runid", "t1", "r1", "", events.TurnFailed{}, true},
		{"call's turn: turnid of the run's turn", "t1", "", "t1", events.TurnFailed{}, true},
		{"call's turn: turnid equal to the run ID", "t1", "", "r1", events.TurnFailed{}, false},
		{"call's turn: data turnId", "t1", "", "", events.TurnFailed{TurnID: "t1"}, true},
		{"call's turn: other turn", "t1", "", "t2", events.TurnFailed{TurnID: "t1"}, false},
	} {
		if got := mk(tt.turn, tt.runid, tt.turnid, tt.data); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
