package processor

import (
	"testing"

	"github.com/parley-dev/parley/events"
)

// Session 12 attack: a share covers the questions of the owner's messages
// sent after it; a question of a message sent before the share stays the
// owner's (docs/openapi.yaml, shareThread; e2e TestGatewayShares). Here
// alice's next message carries the share to the processor while her
// earlier message's turn still runs: it queues behind the turn, the turn
// then pauses, and bob (whom alice shared the thread with after sending
// the message whose turn asks) answers its question. His answer must be
// refused forbidden and consume nothing.
func TestShareInQueuedMessageDoesNotOpenEarlierQuestion(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	bob := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}
	if err := h.messageAs(events.PrincipalGateway, "m1", 1, events.TurnRequested{User: "alice"}); err != nil {
		t.Fatal(err)
	}
	// Shared after m1 was sent: m2 carries the share, and queues.
	if err := h.messageAs(events.PrincipalGateway, "m2", 2, events.TurnRequested{User: "alice", Share: []events.Identity{bob}}); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	h.answerAs(events.PrincipalGateway, "b1", "q1", "bob")
	if r := rejectedFor(h, "b1"); r != events.RejectForbidden {
		t.Errorf("bob's answer to the question of m1 (sent before the share): rejection %q, want forbidden", r)
	}
	if el := h.paused().Find("q1"); el.Status != StatusPending {
		t.Fatalf("q1 = %s answered by %v; want still pending, alice's to answer", el.Status, el.AnsweredBy)
	}
	// alice answers; m2's turn then starts, and its question is bob's too.
	h.answerAs(events.PrincipalGateway, "a1", "q1", "alice")
	if r := rejectedFor(h, "a1"); r != "" {
		t.Fatalf("alice's answer rejected %q", r)
	}
	turn := events.DerivedID("turn", "m1")
	h.run(events.TypeRunCompleted, "c1", 11, events.RunCompleted{RunID: turn, TurnID: turn})
	h.pause("m2", "p2", 12, "q2")
	h.answerAs(events.PrincipalGateway, "b2", "q2", "bob")
	if r := rejectedFor(h, "b2"); r != "" {
		t.Fatalf("bob's answer to the question of m2 (which shared the thread with him) rejected %q", r)
	}
}

// The same through a message refused thread_busy: the queue behind the
// paused turn is full, alice's message carrying the share is refused, and
// bob answers the question alice's earlier message asked.
func TestShareInRefusedMessageDoesNotOpenEarlierQuestion(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	bob := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}
	alice := events.TurnRequested{User: "alice"}
	if err := h.messageAs(events.PrincipalGateway, "m0", 1, alice); err != nil {
		t.Fatal(err)
	}
	seq := uint64(1)
	for range MaxQueue {
		seq++
		if err := h.messageAs(events.PrincipalGateway, "w"+string(rune('a'+seq)), seq, alice); err != nil {
			t.Fatal(err)
		}
	}
	h.pause("m0", "p1", 100, "q1")
	seq++
	if err := h.messageAs(events.PrincipalGateway, "m1", seq, events.TurnRequested{User: "alice", Share: []events.Identity{bob}}); err != nil {
		t.Fatal(err)
	}
	if r := turnRejectedFor(h, "m1"); r != events.RejectThreadBusy {
		t.Fatalf("m1: rejection %q, want thread_busy", r)
	}
	h.answerAs(events.PrincipalGateway, "b1", "q1", "bob")
	if r := rejectedFor(h, "b1"); r != events.RejectForbidden {
		t.Errorf("bob's answer to the question of m0 (sent before the share): rejection %q, want forbidden", r)
	}
	if el := h.paused().Find("q1"); el.Status != StatusPending {
		t.Fatalf("q1 = %s answered by %v; want still pending", el.Status, el.AnsweredBy)
	}
}
