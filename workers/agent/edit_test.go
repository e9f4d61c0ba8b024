package agent

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// editRig runs delete_entities {"ids":["a1","a2"]} to its confirmation
// under policy, and records every pre-execute request the policy saw and
// every call the agent dispatched.
type editRig struct {
	*rig
	paused events.RunPaused
	mu     sync.Mutex
	asked  []events.PreExecuteRequest
	calls  chan events.ToolCallRequested
}

func newEditRig(t *testing.T, policy func(events.PreExecuteRequest) any) *editRig {
	t.Helper()
	er := &editRig{calls: make(chan events.ToolCallRequested, 4)}
	er.rig = newRig(t, oneCall("delete_entities", `{"ids":["a1","a2"]}`), func(in events.PreExecuteRequest) any {
		er.mu.Lock()
		er.asked = append(er.asked, in)
		er.mu.Unlock()
		return policy(in)
	}, deleteTool())
	sub, err := er.b.Conn().Subscribe("parley.tool.call.>", func(m *nats.Msg) {
		e, err := events.Decode(events.Header(m.Header), m.Data)
		if err != nil {
			t.Errorf("undecodable call: %v", err)
			return
		}
		in, _ := events.Data[events.ToolCallRequested](e)
		er.calls <- in
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := er.request("run-edit", user("delete the drafts")); err != nil {
		t.Fatal(err)
	}
	er.paused = er.pausedOutcome()
	return er
}

func (er *editRig) pausedOutcome() events.RunPaused {
	er.t.Helper()
	e := er.outcome()
	if events.TypeOf(e) != events.TypeRunPaused {
		er.t.Fatalf("outcome %s: %s, want run.paused", e.Type(), e.Data())
	}
	p, err := events.Data[events.RunPaused](e)
	if err != nil {
		er.t.Fatal(err)
	}
	return p
}

// accept resumes the paused run with an accept of its question carrying
// the edited arguments args (as the processor binds them).
func (er *editRig) accept(p events.RunPaused, args string) {
	er.t.Helper()
	ans := events.Answer{ElicitationID: p.Elicitations[0].ID, Result: schema.ElicitResult{Action: schema.ActionAccept},
		AnsweredBy: events.Identity{Principal: "alice"}, AnsweredAt: time.Now().UTC()}
	if args != "" {
		ans.Arguments = json.RawMessage(args)
	}
	e, err := events.New("/test/processor", events.TypeRunResumed, "t1", events.RunResumed{RunID: "run-edit",
		TurnID: "turn-run-edit", Thread: "t1", Agent: "default", Snapshot: p.Snapshot, Answers: []events.Answer{ans}})
	if err != nil {
		er.t.Fatal(err)
	}
	if err := er.a.Handle(er.ctx, &bus.Delivery{Event: e, Subject: events.SubjectRunResumed, NumDelivered: 1}); err != nil {
		er.t.Fatal(err)
	}
}

func (er *editRig) requests() []events.PreExecuteRequest {
	er.mu.Lock()
	defer er.mu.Unlock()
	return append([]events.PreExecuteRequest(nil), er.asked...)
}

// An accept with edited arguments runs exactly the edit: the policies
// are asked again about the edited call (a confirm is satisfied by the
// person's own acceptance), the decision record binds the edit, the
// dispatched call carries it, and the model and the decisions say the
// person changed the arguments.
func TestEditedCallRuns(t *testing.T) {
	er := newEditRig(t, decide("test", events.DecisionConfirm, "destructive"))
	er.accept(er.paused, `{"ids":["a2"]}`)

	var call events.ToolCallRequested
	select {
	case call = <-er.calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the edited call was not dispatched (asked to confirm the edit again?)")
	}
	if string(call.Call.Arguments) != `{"ids":["a2"]}` {
		t.Fatalf("dispatched arguments %s, want the edit", call.Call.Arguments)
	}
	asked := er.requests()
	if len(asked) != 2 || asked[1].Edited == nil || string(asked[1].Call.Arguments) != `{"ids":["a2"]}` ||
		string(asked[1].Edited.OriginalArguments) != `{"ids":["a1","a2"]}` || asked[1].Edited.By.Principal != "alice" {
		t.Fatalf("pre-execute requests %+v, want a second one about the edited call", asked)
	}
	rec, err := er.a.decisions.Get(er.ctx, "run-edit", "call_0_0", 0)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := schema.ArgumentsSHA256(json.RawMessage(`{"ids":["a2"]}`))
	if rec.ArgumentsSHA256 != sum || rec.Decision != events.DecisionConfirm || rec.ConfirmedBy == nil || rec.ConfirmedBy.Principal != "alice" {
		t.Errorf("decision record %+v, want the edit confirmed by alice", rec)
	}
	if err := er.result(events.ToolResult{RunID: "run-edit", CallID: "call_0_0",
		Result: &schema.CallToolResult{Content: schema.ContentList{schema.Text("Deleted 1 entity: a2")}}}); err != nil {
		t.Fatal(err)
	}
	done := er.completed()
	if !strings.Contains(done.Message.Text, `from {"ids":["a1","a2"]} to {"ids":["a2"]}`) || !strings.Contains(done.Message.Text, "Deleted 1 entity: a2") {
		t.Errorf("final %q does not say the person changed the arguments and what ran", done.Message.Text)
	}
	if len(done.Decisions) != 1 || !done.Decisions[0].Edited || string(done.Decisions[0].OriginalArguments) != `{"ids":["a1","a2"]}` {
		t.Errorf("decisions %+v, want the call marked edited with the model's arguments", done.Decisions)
	}
	if len(done.Effects) != 1 || string(done.Effects[0].Arguments) != `{"ids":["a2"]}` || done.Effects[0].Summary != "Deleted 1 entity: a2" {
		t.Errorf("effects %+v, want the edited call with its result's summary", done.Effects)
	}
}

// A policy that vetoes the edited call stops it: nothing is dispatched
// and the model reads the veto and the edit.
func TestEditedCallVetoed(t *testing.T) {
	er := newEditRig(t, func(in events.PreExecuteRequest) any {
		if in.Edited != nil && strings.Contains(string(in.Call.Arguments), "a1") && !strings.Contains(string(in.Call.Arguments), "a2") {
			return events.PolicyDecision{Policy: "test", Decision: events.DecisionVeto, Reason: "a1 is protected"}
		}
		return events.PolicyDecision{Policy: "test", Decision: events.DecisionConfirm}
	})
	er.accept(er.paused, `{"ids":["a1"]}`)
	done := er.completed()
	if !strings.Contains(done.Message.Text, "was denied: a1 is protected") || !strings.Contains(done.Message.Text, `to {"ids":["a1"]}`) {
		t.Errorf("final %q, want the veto of the edited call", done.Message.Text)
	}
	select {
	case c := <-er.calls:
		t.Errorf("a vetoed edit was dispatched: %+v", c)
	default:
	}
	if len(done.Decisions) != 1 || done.Decisions[0].Decision != events.DecisionVeto || !done.Decisions[0].Edited {
		t.Errorf("decisions %+v, want the edited call's veto", done.Decisions)
	}
}

// A confirm with reconfirm asks the person again about the edited call,
// under a question ID of its own; their plain accept then runs the edit.
func TestEditedCallReconfirmed(t *testing.T) {
	er := newEditRig(t, func(in events.PreExecuteRequest) any {
		return events.PolicyDecision{Policy: "test", Decision: events.DecisionConfirm, Reconfirm: true}
	})
	er.accept(er.paused, `{"ids":["a2"]}`)
	again := er.pausedOutcome()
	if again.Elicitations[0].ID == er.paused.Elicitations[0].ID {
		t.Fatalf("the second confirmation reuses the first question's ID %s", again.Elicitations[0].ID)
	}
	tc, err := again.Elicitations[0].Request.Meta.ToolCall()
	if err != nil || string(tc.Arguments) != `{"ids":["a2"]}` {
		t.Fatalf("second confirmation shows %+v (%v), want the edited call", tc, err)
	}
	er.accept(again, "")
	select {
	case call := <-er.calls:
		if string(call.Call.Arguments) != `{"ids":["a2"]}` {
			t.Errorf("dispatched %s, want the edit", call.Call.Arguments)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reconfirmed edit was not dispatched")
	}
}
