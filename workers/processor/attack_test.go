package processor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
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

// workQueue is PARLEY_INPUT as awaitPredecessors reads it: the
// turn.requested messages of thread t not yet acknowledged.
type workQueue struct {
	memChat
	mu      sync.Mutex
	present map[uint64]bool
}

func (w *workQueue) GetMsg(_ context.Context, seq uint64, _ ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var next uint64
	for s := range w.present {
		if s >= seq && (next == 0 || s < next) {
			next = s
		}
	}
	if next == 0 {
		return nil, jetstream.ErrMsgNotFound
	}
	return &jetstream.RawStreamMsg{Subject: events.InputThreadSubjects("t", events.ChatTurnRequested), Sequence: next}, nil
}

// deliver handles e, published by principal at PARLEY_INPUT sequence seq
// on thread t, and acknowledges it (removes it from the queue) when the
// handler succeeds.
func (w *workQueue) deliver(h *harness, principal string, e *event.Event, seq uint64) error {
	err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(principal, "t", events.ChatTurnRequested),
		StreamSeq: seq, NumDelivered: 1})
	if err == nil {
		w.mu.Lock()
		delete(w.present, seq)
		w.mu.Unlock()
	}
	return err
}

// Messages of a thread run in stream order (FIFO), whichever replica
// takes them: a message waits until every earlier turn.requested of its
// thread is recorded. An invalid turn.requested (here one whose ce-subject
// is not its thread), which anyone who can publish input can put on any
// thread's subject, is recorded as dealt with at once, without waiting:
// the thread's LastTurnSeq jumps past the victim's messages still in
// flight, so the victim's second message stops waiting for its first and
// starts its turn before it.
func TestInvalidMessageDoesNotReorderEarlierMessages(t *testing.T) {
	h := newHarness(t)
	h.p.opts.OrderWait = 50 * time.Millisecond
	wq := &workQueue{memChat: memChat{last: map[string]uint64{}}, present: map[uint64]bool{1: true, 2: true, 3: true}}
	h.p.input = wq
	msg := func(id, subject string) *event.Event {
		e, err := events.NewWithID(id, "/test", events.TypeTurnRequested, subject, events.TurnRequested{
			Message: schema.ChatMessage{Role: schema.RoleUser, Text: "message " + id}})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	m1, m2 := msg("m1", "t"), msg("m2", "t")
	x := msg("x", "elsewhere") // invalid: its ce-subject is not the thread
	// The replicas take x first, then m2, while m1 is still on its way.
	_ = wq.deliver(h, "mallory", x, 3)
	_ = wq.deliver(h, events.PrincipalIntegrator, m2, 2)
	if err := wq.deliver(h, events.PrincipalIntegrator, m1, 1); err != nil {
		t.Fatal(err)
	}
	// Redeliveries of whatever was released to wait.
	for range 3 {
		_ = wq.deliver(h, events.PrincipalIntegrator, m2, 2)
		_ = wq.deliver(h, "mallory", x, 3)
	}
	if r := turnRejectedFor(h, "x"); r != events.RejectInvalidEvent {
		t.Fatalf("x: rejection %q, want invalid_event", r)
	}
	want := []string{events.DerivedID("turn", "m1")}
	if got := h.runsStarted(); len(got) == 0 || got[0] != want[0] {
		t.Fatalf("turns started %v; want m1's turn (%s) first: m2 was sent after it", got, want[0])
	}
	if th := h.stored(); len(th.Queue) != 1 || th.Queue[0].EventID != "m2" {
		t.Fatalf("queue %v; want m2 waiting behind m1's turn", th.Queue)
	}
}
