package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
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
	if e.Type() != events.TypeRunFailed {
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
