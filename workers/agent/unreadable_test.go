package agent

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
)

// A model step whose tool calls could not be read (a stream the provider
// could not assemble) runs none of them, asks no policy, and tells the
// model why in each call's result; the model's next answer ends the run.
func TestUnreadableToolCallsRunNothing(t *testing.T) {
	var asked atomic.Int32
	policy := func(events.PreExecuteRequest) any { asked.Add(1); return allowAll(events.PreExecuteRequest{}) }
	r := newRig(t, `{"rules":[],"fallback":"?"}`, policy, tool("look", true, `{"type":"object"}`), tool("remove", false, `{"type":"object"}`))
	why := "tool call 3 (index 1): arguments arrived for a call the stream never opened with an id or a name"
	step := callTools("look", "remove")
	step.ToolCallsError = why
	m := &stepModel{steps: []model.Response{step, {Text: "done"}}}
	r.a.provider = m
	if err := r.request("run-u1", user("look and remove")); err != nil {
		t.Fatal(err)
	}
	done := r.completed()
	if done.Message.Text != "done" {
		t.Errorf("final = %q, want the model's next answer", done.Message.Text)
	}
	if len(done.Decisions) != 0 || asked.Load() != 0 {
		t.Errorf("decisions %+v, policy asked %d times: want none (nothing may run)", done.Decisions, asked.Load())
	}
	got := m.toolResults(2)
	if len(got) != 2 {
		t.Fatalf("the second model call read %d tool results, want one per call (2)", len(got))
	}
	for _, res := range got {
		if !strings.Contains(res.Text, "could not be read") || !strings.Contains(res.Text, why) || !strings.Contains(res.Text, "was not run") ||
			res.Result == nil || !res.Result.IsError {
			t.Errorf("result of %s = %q (error %v), want a tool error saying the calls could not be read and why", res.ToolName, res.Text, res.Result != nil && res.Result.IsError)
		}
	}
}

// With not one call readable there is nothing to answer: the run fails
// with the reason, never runs a call and never ends as an empty answer.
func TestNoReadableToolCallFailsRun(t *testing.T) {
	r := newRig(t, `{"rules":[],"fallback":"?"}`, allowAll, tool("look", true, `{"type":"object"}`))
	r.a.provider = &stepModel{steps: []model.Response{{ToolCallsError: "tool call 1: the call has no name"}}}
	if err := r.request("run-u2", user("look")); err != nil {
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
	if f.Reason != model.ReasonRejected || !strings.Contains(f.Detail, "could not be read") || !strings.Contains(f.Detail, "has no name") {
		t.Errorf("run.failed = %+v, want model_rejected saying the tool calls could not be read and why", f)
	}
}
