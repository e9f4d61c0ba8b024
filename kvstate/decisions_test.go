package kvstate

import (
	"errors"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
)

// Recording a decision is idempotent for the same decision (a redelivered
// dispatch), and never overwrites a different one.
func TestDecisionsRecordIdempotent(t *testing.T) {
	srv := bustest.NewServer(t)
	_, js := srv.JetStream(t)
	s, err := OpenDecisions(t.Context(), js, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := CallDecision{Format: DecisionFormat, Run: "run-1", Call: "call_0_0", Round: 1, Tool: "delete_entities", ArgumentsSHA256: "ab",
		Decision: events.DecisionConfirm, Policies: []events.PolicyDecision{{Policy: "gate", Decision: events.DecisionConfirm}},
		ConfirmedBy: &Answerer{Principal: "gateway", OnBehalfOf: "alice"}, At: time.Now()}
	if err := s.Record(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	again := d
	again.At = d.At.Add(time.Minute)
	if err := s.Record(t.Context(), again); err != nil {
		t.Fatalf("recording the same decision again: %v", err)
	}
	other := d
	other.ArgumentsSHA256 = "cd"
	if err := s.Record(t.Context(), other); !errors.Is(err, ErrDecisionDiffers) {
		t.Fatalf("recording a different decision: %v, want ErrDecisionDiffers", err)
	}
	got, err := s.Get(t.Context(), "run-1", "call_0_0", 1)
	if err != nil || !got.Same(d) || got.Format != DecisionFormat {
		t.Fatalf("Get = %+v, %v; want the first record", got, err)
	}
	if _, err := s.Get(t.Context(), "run-1", "call_0_0", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another round: %v, want ErrNotFound", err)
	}
}
