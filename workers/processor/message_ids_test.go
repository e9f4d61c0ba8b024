package processor

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Message IDs in the processor's state machine: a stranger's message under
// an ID the thread knows, and a party's message under the ID of the running
// turn's own outcome.

// deliverAs hands e (a turn.requested of thread t) published by principal
// at PARLEY_INPUT sequence seq, delivered the n-th time, to the processor.
func (h *harness) deliverAs(principal string, e *event.Event, seq, n uint64) error {
	h.t.Helper()
	return h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(principal, "t", events.ChatTurnRequested),
		StreamSeq: seq, NumDelivered: n})
}

// turnEvent is a turn.requested id on ce-subject subject with data in.
func turnEvent(t *testing.T, id, subject string, in events.TurnRequested) *event.Event {
	t.Helper()
	if in.Message.Text == "" {
		in.Message = schema.ChatMessage{Role: schema.RoleUser, Text: "message " + id}
	}
	e, err := events.NewWithID(id, "/test", events.TypeTurnRequested, subject, in)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// FIFO and no lost message, against a stranger's message under an ID the
// thread handled (the processor refuses it, silently, and records its
// sequence; it drops a redelivery at or below the thread's last sequence
// as a message the thread recorded already). alice's m1 runs;
// her m2 is in PARLEY_INPUT, its processor died holding it. mallory reads
// m1's ID in PARLEY_CHAT and publishes her own message under it (valid,
// invalid or forbidden). The predecessor check takes an ID the thread
// handled for "recorded already" and lets mallory's message go without
// waiting for m2: its refusal records the thread's last sequence past m2,
// and m2's redelivery is then taken for a repeat and dropped: never
// queued, never run, no verdict.
func TestStrangerUnderHandledIDDoesNotSkipEarlierMessage(t *testing.T) {
	for _, kind := range []string{"valid", "invalid", "claim"} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t)
			h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
			q := withWorkQueue(h)
			alice := events.TurnRequested{User: "alice"}
			q.add(1)
			if err := h.deliverAs(events.PrincipalGateway, turnEvent(t, "m1", "t", alice), 1, 1); err != nil {
				t.Fatal(err)
			}
			q.ack(1)
			q.add(2, 3) // m2 (alice's, its processor died) and mallory's
			var evil *event.Event
			switch kind {
			case "valid":
				evil = turnEvent(t, "m1", "t", events.TurnRequested{})
			case "invalid": // its ce-subject is not the thread
				evil = turnEvent(t, "m1", "elsewhere", events.TurnRequested{})
			case "claim": // a claim mallory may not make: forbidden
				evil = turnEvent(t, "m1", "t", events.TurnRequested{User: "alice"})
			}
			todo := []struct {
				who string
				e   *event.Event
				seq uint64
				n   uint64
			}{{events.PrincipalIntegrator, evil, 3, 1}, {events.PrincipalGateway, turnEvent(t, "m2", "t", alice), 2, 2}}
			for round := 0; len(todo) > 0; round++ {
				if round == 5 {
					t.Fatalf("%d messages never acked", len(todo))
				}
				again := todo[:0:0]
				for _, m := range todo {
					if err := h.deliverAs(m.who, m.e, m.seq, m.n); err != nil {
						m.n++
						again = append(again, m)
						continue
					}
					q.ack(m.seq)
				}
				todo = again
			}
			if got := queueIDs(h.stored()); !slices.Equal(got, []string{"m2"}) {
				t.Fatalf("queue %v; want alice's m2 waiting behind m1 (it was dropped as a message the thread recorded already)", got)
			}
			if r := turnRejectedFor(h, "m1"); r != "" {
				t.Errorf("a refusal naming m1 (%s), which runs", r)
			}
		})
	}
}

// No refusal names a message the thread took (announceRefusal), also once
// its ID aged out of the thread's last 64 (the record's holds still name
// it where it put it). alice's
// m1 runs; a burst of her messages (queued, then refused thread_busy)
// pushes m1 out of Handled. mallory publishes her own message under m1's
// ID (valid, or invalid): its refusal must not name m1, whose turn runs
// (every reader's fold closes the message a turn.rejected names).
func TestRefusalSilentForHeldIDAgedOutOfHandled(t *testing.T) {
	for _, kind := range []string{"valid", "invalid"} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t)
			h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
			alice := events.TurnRequested{User: "alice"}
			if err := h.messageAs(events.PrincipalGateway, "m1", 1, alice); err != nil {
				t.Fatal(err)
			}
			seq := uint64(1)
			for range maxHandled {
				seq++
				if err := h.messageAs(events.PrincipalGateway, fmt.Sprint("m", seq), seq, alice); err != nil {
					t.Fatal(err)
				}
			}
			if th := h.stored(); th.Seen("m1") || th.StartedBy != "m1" {
				t.Fatalf("setup: m1 seen %v, active turn started by %s; want m1 running, aged out of Handled", th.Seen("m1"), th.StartedBy)
			}
			seq++
			h.inStream(seq)
			subject := "t"
			if kind == "invalid" {
				subject = "elsewhere"
			}
			if err := h.deliverAs(events.PrincipalIntegrator, turnEvent(t, "m1", subject, events.TurnRequested{}), seq, 1); err != nil {
				t.Fatal(err)
			}
			if r := turnRejectedFor(h, "m1"); r != "" {
				t.Errorf("mallory's message under m1's ID: a refusal naming m1 (%s), whose turn runs", r)
			}
			if th := h.stored(); th.StartedBy != "m1" || th.LastTurnSeq != seq {
				t.Errorf("after mallory's message: turn of %s, last sequence %d; want m1's still running, the message dealt with (%d)",
					th.StartedBy, th.LastTurnSeq, seq)
			}
		})
	}
}

// A share covers only the questions of messages sent after it
// (the share's grants), also for a paused turn stored in the old format
// (legacy adoption). alice's m1
// runs; her m2, sharing the thread with bob, is in the stream before m1's
// turn pauses; a processor writing the old format records the pause (its record of its
// own, and a thread write that drops the grants it does not know). A new
// processor then queues m2 behind the pause, adopting the legacy pause in
// the same write, and bob answers m1's question: the adopted pause has no
// grants (nil: every grant, also those made after it), so bob may.
func TestShareDoesNotOpenAdoptedLegacyPause(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	bob := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}
	if err := h.messageAs(events.PrincipalGateway, "m1", 1, events.TurnRequested{User: "alice"}); err != nil {
		t.Fatal(err)
	}
	h.inStream(2) // m2 is published before the pause
	h.pause("m1", "p1", 10, "q1")
	h.legacy(nil)
	func() { // the old format's thread write knew no grants
		h.threads.mu.Lock()
		defer h.threads.mu.Unlock()
		th, _ := h.threads.load("t")
		th.TurnGrants = nil
		data, _ := json.Marshal(th)
		h.threads.rev++
		h.threads.recs["t"] = memRecord{data, h.threads.rev}
	}()
	h.p.threads.Forget("t")
	if err := h.messageAs(events.PrincipalGateway, "m2", 2, events.TurnRequested{User: "alice", Share: []events.Identity{bob}}); err != nil {
		t.Fatal(err)
	}
	if th := h.stored(); !slices.Equal(queueIDs(th), []string{"m2"}) || th.State != ThreadPaused {
		t.Fatalf("setup: thread %s, queue %v; want m1's turn paused, m2 queued", th.State, queueIDs(th))
	}
	h.answerAs(events.PrincipalGateway, "b1", "q1", "bob")
	if r := rejectedFor(h, "b1"); r != events.RejectForbidden {
		t.Errorf("bob's answer to m1's question (asked before m2 shared the thread): rejection %q, want forbidden", r)
	}
	if el := h.paused().Find("q1"); el.Status != StatusPending {
		t.Fatalf("q1 = %s answered by %v; want still pending, alice's to answer", el.Status, el.AnsweredBy)
	}
}

// The thread's recent IDs (Handled) hold the IDs its input's senders
// chose beside those of the run outcomes it applied, and an outcome whose
// ID is there counts as applied (a repeat). A run outcome's ID derives
// from the run ID, which derives from the thread and the turn,
// so a party of the thread computes the ID of the running turn's
// run.completed and sends a message under it: it queues (a party's
// message is taken), and the turn's completion is then taken for a
// repeat, never applied: the turn never ends, nor does anything queued
// behind it run.
func TestMessageUnderRunOutcomeIDDoesNotWedgeTheTurn(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	bob := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}
	if err := h.messageAs(events.PrincipalGateway, "m1", 1, events.TurnRequested{User: "alice", Share: []events.Identity{bob}}); err != nil {
		t.Fatal(err)
	}
	th := h.stored()
	completedID := events.DerivedID("run.completed", th.RunID)
	if err := h.messageAs(events.PrincipalGateway, completedID, 2, events.TurnRequested{User: "bob"}); err != nil {
		t.Fatal(err)
	}
	h.run(events.TypeRunCompleted, completedID, 10, events.RunCompleted{RunID: th.RunID, TurnID: th.TurnID,
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	if n := len(h.pub.of(events.TypeTurnCompleted)); n != 1 {
		t.Errorf("%d turn.completed for m1's turn, want 1", n)
	}
	if after := h.stored(); after.TurnID == th.TurnID {
		t.Fatalf("after m1's run completed: thread %s on m1's turn, queue %v; want bob's message's turn running", after.State, queueIDs(after))
	}
}

// The same for a pause: run.paused's ID derives from the run ID, the step
// and its first question's ID (itself derived from the run ID and the
// call's position), which a party of the thread computes as well. Under
// it, bob's message made the running turn's pause count as one the thread
// had applied already (stale): no question was asked, the turn stayed
// running for ever, and nothing queued behind it ran.
func TestMessageUnderRunPausedIDDoesNotWedgeTheTurn(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	bob := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}
	if err := h.messageAs(events.PrincipalGateway, "m1", 1, events.TurnRequested{User: "alice", Share: []events.Identity{bob}}); err != nil {
		t.Fatal(err)
	}
	th := h.stored()
	q1 := events.DerivedID("elicitation", th.RunID, "call_1_0", "0", "confirm")
	pausedID := events.DerivedID("run.paused", th.RunID, "1", q1)
	if err := h.messageAs(events.PrincipalGateway, pausedID, 2, events.TurnRequested{User: "bob"}); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", pausedID, 10, q1)
	if n := len(h.pub.of(events.TypeElicitationRequested)); n != 1 {
		t.Errorf("%d questions asked, want m1's turn's 1", n)
	}
	if after := h.stored(); after.State != ThreadPaused || after.Paused == nil || after.Paused.Find(q1) == nil {
		t.Fatalf("after m1's run paused: thread %s; want paused on %s", after.State, q1)
	}
}
