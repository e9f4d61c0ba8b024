package agent

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// A paused run's snapshot stores its policy decision once: the stored
// layout leaves out the copies (the call's policy, the awaiting entry's
// decision, a one-policy list), and reading it restores them, so the run
// decodes as written.
func TestSnapshotStoresTheDecisionOnce(t *testing.T) {
	r := newRig(t, oneCall("delete_entities", `{"ids":["a1","a2"]}`), decide("test", events.DecisionConfirm, "destructive"), deleteTool())
	if err := r.request("run-confirm", user("delete a1 and a2")); err != nil {
		t.Fatal(err)
	}
	paused, err := events.Data[events.RunPaused](r.outcome())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(paused.Snapshot), `"destructive"`); n != 1 {
		t.Errorf("the decision's reason is stored %d times in the snapshot, want once:\n%s", n, paused.Snapshot)
	}
	run, err := decodeSnapshot(paused.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if run.Format != RunFormat {
		t.Errorf("format %d, want %d", run.Format, RunFormat)
	}
	c := run.Calls[0]
	want := &events.Decision{Decision: events.DecisionConfirm, Reason: "destructive", Policy: "test", ConfigVersion: "test-v1",
		Policies: []events.PolicyDecision{{Policy: "test", Decision: events.DecisionConfirm, Reason: "destructive", ConfigVersion: "test-v1"}}}
	for name, got := range map[string]*events.Decision{"decision": c.Decision, "policy": c.Policy, "awaiting": c.Awaiting[0].Decision} {
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s read back (-want +got):\n%s", name, diff)
		}
	}
	if c.Policy == c.Decision || c.Awaiting[0].Decision == c.Decision {
		t.Error("restored copies share the call's decision; they must be copies")
	}
	// The elicitations the run.paused event carries still name the decision.
	if paused.Elicitations[0].Decision == nil || paused.Elicitations[0].Decision.Reason != "destructive" {
		t.Errorf("run.paused elicitation decision %+v", paused.Elicitations[0].Decision)
	}
	// Writing what was read and reading it again gives the same run.
	again, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	run2, err := decodeSnapshot(again)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(run, run2, cmpopts.IgnoreUnexported(Run{})); diff != "" {
		t.Errorf("run read back after a second write (-first +second):\n%s", diff)
	}
}

// A paused turn written by the previous release (RunFormat 1: every copy
// of the decision stored) still resumes: its snapshot decodes with the
// same decisions, and the person's accept records the decision and
// dispatches the call.
func TestPreviousFormatSnapshotResumes(t *testing.T) {
	old, err := os.ReadFile("testdata/snapshot-format1.json")
	if err != nil {
		t.Fatal(err)
	}
	run, err := decodeSnapshot(old)
	if err != nil {
		t.Fatalf("previous format: %v", err)
	}
	c := run.Calls[0]
	if c.Policy == nil || c.Decision == nil || c.Awaiting[0].Decision == nil || len(c.Policy.Policies) != 1 ||
		c.Decision.Reason != "destructive" || c.ModelCallID != "call_0_0" {
		t.Fatalf("previous format read as %+v", c)
	}

	args := `{"ids":["a1","a2"]}`
	r := newRig(t, oneCall("delete_entities", args), decide("test", events.DecisionConfirm, "destructive"), deleteTool())
	id := c.Awaiting[0].ID
	resumed, err := events.New("/test/processor", events.TypeRunResumed, "t1", json.RawMessage(`{"runId":"run-confirm",
	  "turnId":"turn-run-confirm","thread":"t1","agent":"default","snapshot":`+string(old)+`,
	  "answers":[{"elicitationId":"`+id+`","result":{"action":"accept"},"answeredBy":{"principal":"alice"},"answeredAt":"2026-11-30T12:00:00Z"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.a.Handle(r.ctx, &bus.Delivery{Event: resumed, Subject: events.SubjectRunResumed, NumDelivered: 1}); err != nil {
		t.Fatal(err)
	}
	rec, err := r.a.decisions.Get(r.ctx, "run-confirm", "call_0_0", 0)
	if err != nil {
		t.Fatalf("decision record after the accept: %v", err)
	}
	sum, _ := schema.ArgumentsSHA256(json.RawMessage(args))
	if rec.Tool != "delete_entities" || rec.ArgumentsSHA256 != sum || rec.Decision != events.DecisionConfirm ||
		rec.ConfirmedBy == nil || rec.ConfirmedBy.Principal != "alice" || len(rec.Policies) != 1 || rec.Policies[0].Policy != "test" {
		t.Errorf("decision record %+v", rec)
	}
}
