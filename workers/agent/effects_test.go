package agent

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// deleteThenProvider asks for one delete on its first call and answers
// every later call with fail (or "done" when fail is nil); it keeps the
// requests it got.
type deleteThenProvider struct {
	fail error
	mu   sync.Mutex
	reqs []model.Request
}

func (p *deleteThenProvider) Complete(_ context.Context, req model.Request) (model.Response, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, req)
	if len(p.reqs) == 1 && !strings.Contains(lastUser(req), "again") {
		return model.Response{ToolCalls: []schema.ToolCall{{ID: "m1", Name: "delete_entities", Arguments: json.RawMessage(`{"ids":["3"]}`)}}}, nil
	}
	if p.fail != nil {
		return model.Response{}, p.fail
	}
	return model.Response{Text: "done"}, nil
}

func (p *deleteThenProvider) last() model.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reqs[len(p.reqs)-1]
}

func lastUser(req model.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == model.RoleUser {
			return req.Messages[i].Text
		}
	}
	return ""
}

// A tool call that ran stays with the run whatever ends it: every way a
// run can end without an answer after its delete ran (the model failing
// on every attempt, the step limit, a dead letter while the result is
// awaited) reports the delete in run.failed, with its arguments and its
// result (or that its outcome is unknown), and the next turn's model
// request, built from the history the processor keeps of it, holds the
// call and its result as the assistant's tool call and a tool message.
func TestEffectsSurviveAFailedRun(t *testing.T) {
	deleted := &schema.CallToolResult{Content: schema.ContentList{schema.Text("Deleted 1 entity: 3.\nIt is gone.")}}
	cases := []struct {
		name       string
		fail       error
		maxSteps   int
		deadLetter bool // no result comes back: the agent dead-letters the run
		reason     string
		unknown    bool
	}{
		{name: "model unavailable", fail: &model.Error{Reason: model.ReasonUnavailable, Err: errString("HTTP 500 on 4 attempts")}, reason: model.ReasonUnavailable},
		{name: "step limit", maxSteps: 1, reason: "max_steps"},
		{name: "dead letter while the result is awaited", deadLetter: true, reason: "dead_lettered", unknown: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, oneCall("x", `{}`), allowAll, tool("delete_entities", false, `{"type":"object"}`))
			prov := &deleteThenProvider{fail: tc.fail}
			r.a.provider = prov
			if tc.maxSteps > 0 {
				r.a.opts.MaxSteps = tc.maxSteps
			}
			if err := r.request("run-fx", user("delete entity 3")); err != nil {
				t.Fatal(err)
			}
			if tc.deadLetter {
				e, _ := events.New("/test/toolexec", events.TypeToolResultReady, "t1", events.ToolResult{RunID: "run-fx", CallID: "call_0_0"})
				if err := r.a.onDeadLetter(r.ctx, &bus.Delivery{Event: e}, errString("poisoned")); err != nil {
					t.Fatal(err)
				}
			} else if err := r.result(events.ToolResult{RunID: "run-fx", CallID: "call_0_0", Result: deleted}); err != nil {
				t.Fatal(err)
			}
			e := r.outcome()
			if events.TypeOf(e) != events.TypeRunFailed {
				t.Fatalf("outcome %s: %s, want run.failed", e.Type(), e.Data())
			}
			f, err := events.Data[events.RunFailed](e)
			if err != nil {
				t.Fatal(err)
			}
			if f.Reason != tc.reason || len(f.Effects) != 1 {
				t.Fatalf("run.failed = %s, want reason %s and the delete among its effects", e.Data(), tc.reason)
			}
			fx := f.Effects[0]
			if fx.CallID != "call_0_0" || fx.Tool != "delete_entities" || string(fx.Arguments) != `{"ids":["3"]}` || fx.OutcomeUnknown != tc.unknown {
				t.Errorf("effect = %+v, want the delete of 3 (outcome unknown: %v)", fx, tc.unknown)
			}
			if !tc.unknown && (fx.Summary != "Deleted 1 entity: 3." || !strings.Contains(fx.Text, "It is gone.")) {
				t.Errorf("effect summary %q, text %q; want the result's first line and its text", fx.Summary, fx.Text)
			}

			// The next turn: the history as the processor keeps it.
			note := "[parley: this turn ended before an answer (" + tc.reason + "); the tool calls above ran.]"
			hist := []schema.ChatMessage{user("delete entity 3"),
				{Role: schema.RoleAssistant, Text: note, Meta: schema.Meta{events.MetaToolEffects: f.Effects}},
				user("delete it again?")}
			raw, _ := json.Marshal(hist) // as run.requested carries it
			_ = json.Unmarshal(raw, &hist)
			prov.fail = nil
			if err := r.request("run-next", hist...); err != nil {
				t.Fatal(err)
			}
			r.completed()
			msgs := prov.last().Messages
			var roles []string
			for _, m := range msgs {
				roles = append(roles, m.Role)
			}
			if got := strings.Join(roles, ","); got != "user,assistant,tool,assistant,user" {
				t.Fatalf("next model request roles = %s, want user,assistant,tool,assistant,user", got)
			}
			call, res := msgs[1], msgs[2]
			if len(call.ToolCalls) != 1 || call.ToolCalls[0].Name != "delete_entities" || string(call.ToolCalls[0].Arguments) != `{"ids":["3"]}` {
				t.Errorf("assistant message = %+v, want the delete call", call)
			}
			if res.ToolCallID != call.ToolCalls[0].ID || res.Text != fx.Text {
				t.Errorf("tool message = %+v, want the delete's result for call %s", res, call.ToolCalls[0].ID)
			}
			if msgs[3].Text != note {
				t.Errorf("after the result: %q, want the note %q", msgs[3].Text, note)
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }
