package processor

import (
	"errors"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
)

// A dead-lettered event's compensation reports its failure (so bus
// retries it before terminating the message): a thread whose run outcome
// was dead-lettered while PARLEY_CHAT had no leader still gets its
// turn.failed, its turn ends and the queued message starts; a
// dead-lettered user message still gets its turn.failed and is recorded,
// so later messages stop waiting for it.
func TestCompensationFailureIsRetried(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	if err := h.message("m2", 2); err != nil { // queued behind m1
		t.Fatal(err)
	}
	turn := events.DerivedID("turn", "m1")
	outcome, err := events.NewWithID("c1", events.SourceAgent, events.TypeRunCompleted, "t",
		events.RunCompleted{RunID: turn, TurnID: turn})
	if err != nil {
		t.Fatal(err)
	}
	d := &bus.Delivery{Event: outcome, Subject: "parley.agent.run.completed", StreamSeq: 7, NumDelivered: 5}
	h.pub.fail = func(e *event.Event) bool { return events.TypeOf(e) == events.TypeTurnFailed }
	if err := h.p.compensate(h.ctx, d, errors.New("poison")); err == nil {
		t.Fatal("compensate returned nil although turn.failed was not published")
	}
	h.pub.fail = nil
	if err := h.p.compensate(h.ctx, d, errors.New("poison")); err != nil {
		t.Fatalf("compensate, retried: %v", err)
	}
	if n := len(h.pub.of(events.TypeTurnFailed)); n != 1 {
		t.Errorf("%d turn.failed published, want 1", n)
	}
	if got := h.runsStarted(); len(got) != 2 || got[1] != events.DerivedID("turn", "m2") {
		t.Errorf("runs started %v, want m1's then m2's turn", got)
	}

	// A dead-lettered user message: turn.failed, and its sequence recorded.
	msg, err := events.NewWithID("m3", "/test", events.TypeTurnRequested, "t", events.TurnRequested{})
	if err != nil {
		t.Fatal(err)
	}
	in := &bus.Delivery{Event: msg, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatTurnRequested),
		StreamSeq: 9, NumDelivered: 5}
	h.pub.fail = func(e *event.Event) bool { return events.TypeOf(e) == events.TypeTurnFailed }
	if err := h.p.compensate(h.ctx, in, errors.New("poison")); err == nil {
		t.Fatal("compensate of a user message returned nil although turn.failed was not published")
	}
	h.pub.fail = nil
	if err := h.p.compensate(h.ctx, in, errors.New("poison")); err != nil {
		t.Fatalf("compensate of a user message, retried: %v", err)
	}
	if th, _ := h.threads.load("t"); th.LastTurnSeq != 9 {
		t.Errorf("LastTurnSeq %d after the dead-lettered message at 9, want 9", th.LastTurnSeq)
	}
}
