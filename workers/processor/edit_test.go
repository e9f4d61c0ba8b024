package processor

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// deleteConfirmation is a thread paused on the confirmation q1 of
// delete_entities {"ids": ["article-1", "article-2"]}, as the agent asks
// it (with the tool's input schema).
func deleteConfirmation() *Thread {
	t := pausedOn(running(), 10, 1, "q1")
	tool := &schema.Tool{Name: "delete_entities", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"ids":{"type":"array","items":{"type":"string"},"minItems":1}},"required":["ids"]}`)}
	req := schema.NewConfirmationRequest(tool, schema.ToolCall{ID: "call_0_0", Name: "delete_entities",
		Arguments: json.RawMessage(`{"ids":["article-1","article-2"]}`)})
	el := t.Paused.Find("q1")
	el.Kind, el.Tool, el.Request = events.KindToolConfirmation, "delete_entities", *req
	return t
}

func editAnswer(action schema.ElicitAction, args string) events.ElicitationResponded {
	in := events.ElicitationResponded{ElicitationID: "q1", Action: action}
	if args != "" {
		in.Meta = schema.Meta{schema.MetaArguments: json.RawMessage(args)}
	}
	return in
}

// An accepted edit is checked against the confirmation's input schema:
// an invalid one is refused naming the field, the question stays open,
// and a valid one then binds the answer to exactly the edited call.
func TestAnswerEditBindsArguments(t *testing.T) {
	th := deleteConfirmation()
	who := events.Identity{Principal: "integrator"}
	now := time.Now()

	v := applyAnswer(th, "r1", editAnswer(schema.ActionAccept, `{"ids":[]}`), who, now)
	if v.reason != events.RejectInvalidContent || len(v.errors) == 0 || v.errors[0].Path != `_meta["dev.parley/arguments"].ids` {
		t.Fatalf("invalid edit: verdict %+v, want invalid_content naming _meta[\"dev.parley/arguments\"].ids", v)
	}
	if el := th.Paused.Find("q1"); el.Status != StatusPending || v.write {
		t.Fatalf("invalid edit: question %s (write %v), want still pending", el.Status, v.write)
	}

	v = applyAnswer(th, "r2", editAnswer(schema.ActionAccept, `{ "ids" : ["article-2"] }`), who, now)
	if !v.consumed || v.reason != "" {
		t.Fatalf("valid edit: verdict %+v, want consumed", v)
	}
	el := th.Paused.Find("q1")
	if string(el.Arguments) != `{"ids":["article-2"]}` {
		t.Errorf("bound arguments = %s, want the edit, canonical", el.Arguments)
	}
	if _, ok := el.Result.Meta[schema.MetaArguments]; ok {
		t.Errorf("the stored result keeps a second copy of the edit in _meta")
	}

	// A racing answer with other edits loses: exactly one answer binds.
	v = applyAnswer(th, "r3", editAnswer(schema.ActionAccept, `{"ids":["article-1"]}`), who, now)
	if v.reason != events.RejectAlreadyConsumed || string(th.Paused.Find("q1").Arguments) != `{"ids":["article-2"]}` {
		t.Errorf("second answer: verdict %+v, arguments %s; want already_consumed, the first edit kept", v, th.Paused.Find("q1").Arguments)
	}
}

// Edits the answer cannot carry: on a form (never a confirmation), an
// edit equal to the call (no edit), and a decline's (dropped: a decline
// is always honoured).
func TestAnswerEditOnlyOnAcceptedConfirmation(t *testing.T) {
	who := events.Identity{Principal: "integrator"}
	form := pausedOn(running(), 10, 1, "q1")
	form.Paused.Find("q1").Request = schema.ElicitRequestParams{Message: "m", RequestedSchema: schema.RequestedSchema{Type: "object"}}
	v := applyAnswer(form, "r1", editAnswer(schema.ActionAccept, `{"ids":["a"]}`), who, time.Now())
	if v.reason != events.RejectInvalidContent || len(v.errors) == 0 || v.errors[0].Path != schema.EditPath {
		t.Errorf("edit on a form: verdict %+v, want invalid_content naming %s", v, schema.EditPath)
	}

	same := deleteConfirmation()
	v = applyAnswer(same, "r1", editAnswer(schema.ActionAccept, `{"ids":["article-1","article-2"]}`), who, time.Now())
	if !v.consumed || same.Paused.Find("q1").Arguments != nil {
		t.Errorf("edit equal to the call: verdict %+v, arguments %s; want a plain accept", v, same.Paused.Find("q1").Arguments)
	}

	dec := deleteConfirmation()
	v = applyAnswer(dec, "r1", editAnswer(schema.ActionDecline, `{"ids":["article-2"]}`), who, time.Now())
	if !v.consumed || dec.Paused.Find("q1").Arguments != nil || len(v.dropped) != 1 || v.dropped[0] != schema.EditPath {
		t.Errorf("decline with an edit: verdict %+v; want honoured, the edit dropped", v)
	}
}

// editableConfirmation is a confirmation of delete_entities with the
// tool's input schema, as the agent asks it.
func editableConfirmation(id string) events.PendingElicitation {
	tool := &schema.Tool{Name: "delete_entities", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"ids":{"type":"array","items":{"type":"string"},"minItems":1},"n":{"type":"integer"}},"required":["ids"]}`)}
	req := schema.NewConfirmationRequest(tool, schema.ToolCall{ID: "call-" + id, Name: "delete_entities",
		Arguments: json.RawMessage(`{"ids":["article-2","article-4"]}`)})
	return events.PendingElicitation{ID: id, Kind: events.KindToolConfirmation, Tool: "delete_entities", Request: *req}
}

// editedAnswer handles answer id accepting question with the edited
// arguments args, as the JSON an integrator sends.
func (h *harness) editedAnswer(id, question, args string) error {
	h.t.Helper()
	data := json.RawMessage(`{"elicitationId":"` + question + `","action":"accept","_meta":{"dev.parley/arguments":` + args + `}}`)
	e, err := events.NewWithID(id, "/test", events.TypeElicitationResponded, "t", data)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatElicitationResponded),
		StreamSeq: 100, NumDelivered: 1})
}

// An edited answer whose processor dies after consuming it (run.resumed
// not published) is finished by its redelivery: one run.resumed, carrying
// exactly the edit as sent (numbers as written); a racing answer with
// other edits is already_consumed, and nothing of it reaches the agent.
func TestCrashEditedAnswerRedelivered(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	turn := events.DerivedID("turn", "m1")
	h.run(events.TypeRunPaused, "p1", 10, events.RunPaused{RunID: turn, TurnID: turn, Agent: "default",
		Snapshot: json.RawMessage(`{}`), Elicitations: []events.PendingElicitation{editableConfirmation("q1")}})

	const edit = `{"ids":["article-2"],"n":10000000000000001}`
	h.pub.fail = func(e *event.Event) bool { return events.TypeOf(e) == events.TypeRunResumed }
	if err := h.editedAnswer("a1", "q1", edit); err == nil {
		t.Fatal("answer a1 handled although its resume was lost")
	}
	h.pub.fail = nil
	h.p.threads.Forget("t") // another replica takes the next deliveries
	if err := h.editedAnswer("a2", "q1", `{"ids":["article-4"]}`); err != nil {
		t.Fatal(err)
	}
	if err := h.editedAnswer("a1", "q1", edit); err != nil { // the redelivery
		t.Fatalf("redelivery of a1: %v", err)
	}
	resumed := h.pub.of(events.TypeRunResumed)
	if len(resumed) != 1 {
		t.Fatalf("%d run.resumed, want 1", len(resumed))
	}
	rr, err := events.Data[events.RunResumed](resumed[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.Answers) != 1 || string(rr.Answers[0].Arguments) != `{"ids":["article-2"],"n":10000000000000001}` {
		t.Errorf("resume answers %+v, want a1's edit exactly", rr.Answers)
	}
	rej := h.pub.of(events.TypeElicitationRejected)
	if len(rej) != 1 {
		t.Fatalf("%d rejections, want a2's", len(rej))
	}
	if d, _ := events.Data[events.ElicitationRejected](rej[0]); d.RespondedEventID != "a2" || d.Reason != events.RejectAlreadyConsumed {
		t.Errorf("rejection %+v, want a2 already_consumed", d)
	}
}

// An accept whose edit is under a key that only looks like
// _meta["dev.parley/arguments"] (another case, spaces, or nested under
// "dev.parley") is refused naming that key: read as a plain accept it
// would run the model's call unedited, which its sender did not confirm.
func TestAnswerEditMisspelledKeyRefused(t *testing.T) {
	who := events.Identity{Principal: "integrator"}
	for _, key := range []string{"Dev.Parley/Arguments", "DEV.PARLEY/ARGUMENTS", " dev.parley/arguments", "dev.parley"} {
		th := deleteConfirmation()
		value := json.RawMessage(`{"ids":["article-2"]}`)
		if key == "dev.parley" {
			value = json.RawMessage(`{"arguments":{"ids":["article-2"]}}`)
		}
		in := events.ElicitationResponded{ElicitationID: "q1", Action: schema.ActionAccept, Meta: schema.Meta{key: value}}
		v := applyAnswer(th, "r1", in, who, time.Now())
		want := `_meta["` + key + `"]`
		if v.reason != events.RejectInvalidContent || len(v.errors) == 0 || v.errors[0].Path != want {
			t.Errorf("key %q: verdict %+v, want invalid_content naming %s", key, v, want)
		}
		if el := th.Paused.Find("q1"); el.Status != StatusPending {
			t.Errorf("key %q: question %s, want still pending", key, el.Status)
		}
	}
	// A decline is honoured whatever it carries: it runs nothing.
	th := deleteConfirmation()
	in := events.ElicitationResponded{ElicitationID: "q1", Action: schema.ActionDecline,
		Meta: schema.Meta{"Dev.Parley/Arguments": json.RawMessage(`{"ids":["article-2"]}`)}}
	if v := applyAnswer(th, "r1", in, who, time.Now()); !v.consumed {
		t.Errorf("decline with a look-alike key: verdict %+v, want honoured", v)
	}
}
