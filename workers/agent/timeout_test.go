package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// hungProvider never answers and ignores its context.
type hungProvider struct{ release chan struct{} }

func (h hungProvider) Complete(context.Context, model.Request) (model.Response, error) {
	<-h.release
	return model.Response{Text: "too late"}, nil
}

// A model call that hangs (even one ignoring its context) ends the run
// after ModelTimeout with run.failed, reason model_timeout, which the
// processor turns into turn.failed with the same reason.
func TestHungModelFailsTheRun(t *testing.T) {
	r := newRig(t, oneCall("x", `{}`), allowAll)
	release := make(chan struct{})
	defer close(release)
	r.a.provider = hungProvider{release}
	r.a.opts.ModelTimeout = 200 * time.Millisecond
	start := time.Now()
	if err := r.request("run-hung", user("hello")); err != nil {
		t.Fatalf("Handle = %v, want nil (the run fails, the event is settled)", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Handle took %v, want about the 200ms timeout", took)
	}
	e := r.outcome()
	if events.TypeOf(e) != events.TypeRunFailed {
		t.Fatalf("outcome %s: %s, want run.failed", e.Type(), e.Data())
	}
	f, err := events.Data[events.RunFailed](e)
	if err != nil {
		t.Fatal(err)
	}
	if f.Reason != ReasonModelTimeout || !strings.Contains(f.Detail, "200ms") {
		t.Errorf("run.failed = %+v, want reason %s and the timeout in the detail", f, ReasonModelTimeout)
	}
}

// The handler deadline leaves room for the model call and the step's
// pre-execute requests.
func TestHandlerTimeoutCoversCalls(t *testing.T) {
	a := &Agent{opts: Options{ModelTimeout: time.Minute, PreExecuteTimeout: 2 * time.Second}}
	if got, min := a.handlerTimeout(), time.Minute+16*3*2*time.Second; got <= min {
		t.Errorf("handlerTimeout = %v, want above %v", got, min)
	}
}

// A run paused before its first checkpoint is resumed without reading its
// record; the resume creates it before the call is dispatched, and a
// redelivered run.resumed finds the resume applied and dispatches nothing
// new.
func TestResumeWithoutCheckpoint(t *testing.T) {
	confirm := func(events.PreExecuteRequest) any {
		return events.PolicyDecision{Decision: events.DecisionConfirm, Policy: "test", ConfigVersion: "v1"}
	}
	r := newRig(t, oneCall("w", `{}`), confirm, tool("w", false, `{"type":"object"}`))
	if err := r.request("run-p", user("write it")); err != nil {
		t.Fatal(err)
	}
	e := r.outcome()
	if events.TypeOf(e) != events.TypeRunPaused {
		t.Fatalf("outcome %s, want run.paused", e.Type())
	}
	p, err := events.Data[events.RunPaused](e)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.a.runs.Get(r.ctx, "run-p"); !errors.Is(err, kvstate.ErrNotFound) {
		t.Fatalf("run record before the resume: %v, want none (paused before any checkpoint)", err)
	}
	res, err := events.New("/test/processor", events.TypeRunResumed, "t1", events.RunResumed{RunID: "run-p", TurnID: "turn-run-p",
		Thread: "t1", Agent: "default", Snapshot: p.Snapshot, Answers: []events.Answer{{ElicitationID: p.Elicitations[0].ID,
			Result: schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{}}}}})
	if err != nil {
		t.Fatal(err)
	}
	d := &bus.Delivery{Event: res, Subject: events.SubjectRunResumed, NumDelivered: 1}
	if err := r.a.Handle(r.ctx, d); err != nil {
		t.Fatalf("resume: %v", err)
	}
	run, rev, err := r.a.runs.Get(r.ctx, "run-p")
	if err != nil || !run.resumed(res.ID()) || run.Calls[0].Status != callDispatched || !run.Checkpointed {
		t.Fatalf("record after the resume: %+v, %v; want the call dispatched and the resume recorded", run, err)
	}
	if err := r.a.Handle(r.ctx, d); err != nil {
		t.Fatalf("redelivered resume: %v", err)
	}
	if _, rev2, _ := r.a.runs.Get(r.ctx, "run-p"); rev2 != rev {
		t.Errorf("a redelivered resume rewrote the record (revision %d → %d)", rev, rev2)
	}
}
