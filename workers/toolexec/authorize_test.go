package toolexec

import (
	"context"
	"encoding/json"
	"strings"
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

// siteRig is a running tool-executor (its real consumer on PARLEY_TOOLS)
// with the built-in demo site, and a client that publishes tool calls as
// an attacker (or the agent) would.
type siteRig struct {
	x       *Executor
	b       *bus.Client
	site    *builtin.Site
	results chan events.ToolResult
	dead    chan events.DeadLetter
}

func newSiteRig(t *testing.T) *siteRig {
	t.Helper()
	srv := bustest.NewServer(t)
	nc := srv.Connect(t)
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	site, err := builtin.OpenSite(ctx, b.JetStream(), nil)
	if err != nil {
		t.Fatal(err)
	}
	x, err := New(ctx, b, site.Tools(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &siteRig{x: x, b: b, site: site, results: make(chan events.ToolResult, 8), dead: make(chan events.DeadLetter, 8)}
	decode := func(m *nats.Msg) (*eventData, bool) {
		e, err := events.Decode(events.Header(m.Header), m.Data)
		if err != nil {
			t.Errorf("decoding %s: %v", m.Subject, err)
			return nil, false
		}
		return &eventData{raw: e.Data()}, true
	}
	for subj, fn := range map[string]func(*eventData){
		events.ToolResultSubject(">"): func(e *eventData) {
			var res events.ToolResult
			_ = json.Unmarshal(e.raw, &res)
			r.results <- res
		},
		events.SubjectDeadLetters: func(e *eventData) {
			var dl events.DeadLetter
			_ = json.Unmarshal(e.raw, &dl)
			r.dead <- dl
		},
	} {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			if e, ok := decode(m); ok {
				fn(e)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = x.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

type eventData struct{ raw json.RawMessage }

// publish sends a tool call on subject as the agent would, with call.
func (r *siteRig) publish(t *testing.T, subject, callID string, call schema.ToolCall) events.ToolCallRequested {
	t.Helper()
	call.ID = callID
	in := events.ToolCallRequested{RunID: "run-1", Thread: "thread-1", Agent: "default", Call: call}
	e, err := events.New(events.SourceAgent, events.TypeToolCallRequested, "thread-1", in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.b.Publish(t.Context(), subject, e); err != nil {
		t.Fatal(err)
	}
	return in
}

func (r *siteRig) deadLetter(t *testing.T) events.DeadLetter {
	t.Helper()
	select {
	case dl := <-r.dead:
		return dl
	case <-time.After(10 * time.Second):
		t.Fatal("no dead letter within 10s")
		return events.DeadLetter{}
	}
}

func (r *siteRig) result(t *testing.T) events.ToolResult {
	t.Helper()
	select {
	case res := <-r.results:
		return res
	case <-time.After(10 * time.Second):
		t.Fatal("no tool result within 10s")
		return events.ToolResult{}
	}
}

// liveEntities counts the site's entities.
func (r *siteRig) liveEntities(t *testing.T) int {
	t.Helper()
	es, err := r.site.Entities(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// firstIDs returns the IDs of the first n entities.
func (r *siteRig) firstIDs(t *testing.T, n int) json.RawMessage {
	t.Helper()
	es, err := r.site.Entities(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range es[:n] {
		ids = append(ids, e.ID)
	}
	raw, _ := json.Marshal(map[string]any{"ids": ids})
	return raw
}

// TestForgedCallsAreNotRun: each forged call is
// dead-lettered with its reason, the agent gets an isError result (the
// turn goes on), and nothing is deleted; the decided call runs.
func TestForgedCallsAreNotRun(t *testing.T) {
	r := newSiteRig(t)
	before := r.liveEntities(t)
	args := r.firstIDs(t, 3)
	del := schema.ToolCall{Name: builtin.ToolDeleteEntities, Arguments: args}
	for _, tt := range []struct {
		name, subject, reason string
		decide                func(in events.ToolCallRequested)
	}{
		{"delete on the list_entities subject", events.ToolCallSubject("list_entities"), events.ReasonToolSubjectMismatch,
			func(in events.ToolCallRequested) {
				recordDecision(t, r.x.decisions, in, in.Call.Name, in.Call.Arguments)
			}},
		{"delete with no decision record", events.ToolCallSubject(del.Name), events.ReasonNoDecision, nil},
		{"delete decided for other arguments", events.ToolCallSubject(del.Name), events.ReasonDecisionMismatch,
			func(in events.ToolCallRequested) {
				recordDecision(t, r.x.decisions, in, in.Call.Name, json.RawMessage(`{"ids":["nothing-real"]}`))
			}},
		{"delete decided as another tool", events.ToolCallSubject(del.Name), events.ReasonDecisionMismatch,
			func(in events.ToolCallRequested) {
				recordDecision(t, r.x.decisions, in, "list_entities", in.Call.Arguments)
			}},
		// The registry entry was rewritten to say read-only, so the
		// policies allowed the delete unconfirmed: the executor's own
		// definition says otherwise.
		{"delete decided on a definition claiming read-only", events.ToolCallSubject(del.Name), events.ReasonDecisionMismatch,
			func(in events.ToolCallRequested) {
				sum, _ := schema.ArgumentsSHA256(in.Call.Arguments)
				if err := r.x.decisions.Record(t.Context(), kvstate.CallDecision{Format: kvstate.DecisionFormat, Run: in.RunID,
					Call: in.Call.ID, Tool: in.Call.Name, ArgumentsSHA256: sum, Decision: events.DecisionAllow,
					Annotations: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true)}, At: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			callID := "call-" + strings.ReplaceAll(tt.name, " ", "-")
			in := events.ToolCallRequested{RunID: "run-1", Call: schema.ToolCall{ID: callID, Name: del.Name, Arguments: del.Arguments}}
			if tt.decide != nil {
				tt.decide(in)
			}
			r.publish(t, tt.subject, callID, del)
			dl := r.deadLetter(t)
			if !strings.HasPrefix(dl.Reason, tt.reason+":") || dl.Subject != tt.subject {
				t.Errorf("dead letter reason %q on %s, want %s on %s", dl.Reason, dl.Subject, tt.reason, tt.subject)
			}
			res := r.result(t)
			if res.CallID != callID || res.Result == nil || !res.Result.IsError || !strings.Contains(text(res), tt.reason) {
				t.Errorf("result %+v %q, want an isError result naming %s", res, text(res), tt.reason)
			}
			if n := r.liveEntities(t); n != before {
				t.Fatalf("%d entities left, want %d: the forged call deleted", n, before)
			}
		})
	}
	t.Run("decided delete runs", func(t *testing.T) {
		in := events.ToolCallRequested{RunID: "run-1", Call: schema.ToolCall{ID: "call-decided", Name: del.Name,
			Arguments: json.RawMessage(" {\n \"ids\" : " + string(mustField(t, args, "ids")) + "}")}}
		// Recorded from a different encoding of the same arguments: the
		// canonical form is what is hashed.
		recordDecision(t, r.x.decisions, in, del.Name, args)
		r.publish(t, events.ToolCallSubject(del.Name), "call-decided", in.Call)
		if res := r.result(t); res.Result == nil || res.Result.IsError {
			t.Fatalf("decided call: %+v %q", res, text(res))
		}
		if n := r.liveEntities(t); n != before-3 {
			t.Fatalf("%d entities left, want %d", n, before-3)
		}
	})
	t.Run("read-only tool needs no decision", func(t *testing.T) {
		r.publish(t, events.ToolCallSubject("list_entities"), "call-list", schema.ToolCall{Name: "list_entities", Arguments: json.RawMessage(`{}`)})
		if res := r.result(t); res.Result == nil || res.Result.IsError {
			t.Fatalf("list_entities: %+v %q", res, text(res))
		}
	})
}

func mustField(t *testing.T, raw json.RawMessage, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m[name]
}
