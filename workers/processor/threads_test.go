package processor

import (
	"encoding/json"
	"testing"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// The thread cache saves the reads of a replica that wrote the record
// last: a message and a pause then read nothing; a completion reads once
// (it announces before it writes, so it reads afresh).
func TestThreadCacheSavesReads(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	turn := events.DerivedID("turn", "m1")
	h.run(events.TypeRunCompleted, "c1", 10, events.RunCompleted{RunID: turn, TurnID: turn,
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	h.threads.loads = 0
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	if h.threads.loads != 0 {
		t.Errorf("a message on a thread this replica wrote last read it %d times, want 0", h.threads.loads)
	}
	h.pause("m2", "p2", 11, "q2")
	if h.threads.loads != 0 {
		t.Errorf("a pause read the thread %d times, want 0", h.threads.loads)
	}
	turn2 := events.DerivedID("turn", "m2")
	h.answer("a2", "q2")
	if h.threads.loads != 0 {
		t.Errorf("an answer read the thread %d times, want 0", h.threads.loads)
	}
	h.run(events.TypeRunCompleted, "c2", 12, events.RunCompleted{RunID: turn2, TurnID: turn2,
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	if h.threads.loads != 1 {
		t.Errorf("a completion read the thread %d times, want 1", h.threads.loads)
	}
	if n := len(h.pub.of(events.TypeTurnCompleted)); n != 2 {
		t.Errorf("%d turn.completed, want 2", n)
	}
}

// Another replica's write makes the cached record stale: the message
// still queues behind the turn that replica started (the write from the
// cache conflicts and is redone on a fresh read).
func TestThreadCacheStaleEntry(t *testing.T) {
	h := newHarness(t)
	other := h.p.threadStore(h.threads, true) // a second replica
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	turn := events.DerivedID("turn", "m1")
	h.run(events.TypeRunCompleted, "c1", 10, events.RunCompleted{RunID: turn, TurnID: turn,
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	// The other replica starts m2's turn; this replica's cache says idle.
	mine := h.p.threads
	h.p.threads = other
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	h.p.threads = mine
	if err := h.message("m3", 3); err != nil {
		t.Fatal(err)
	}
	th, _, _ := h.p.threads.Get(h.ctx, "t")
	if th.StartedBy != "m2" || len(th.Queue) != 1 || th.Queue[0].EventID != "m3" {
		t.Fatalf("thread after a stale cache: started by %q, queue %+v; want m2 running, m3 queued", th.StartedBy, th.Queue)
	}
	if n := len(h.pub.of(events.TypeRunRequested)); n != 2 {
		t.Errorf("%d run.requested, want 2 (m1, m2): m3 must not start over m2", n)
	}
}

// The caches at a pause and its answer: the pause writes its record once
// and reads nothing; the answer reads neither the thread nor the pause
// record (both cached) and consumes in one write. An answer that a stale
// cached thread would take loses to the one another replica stored, and
// one it would refuse is decided again on a fresh read.
func TestPauseAndAnswerFromCaches(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	h.answer("a1", "q1")
	turn := events.DerivedID("turn", "m1")
	h.run(events.TypeRunCompleted, "c1", 11, events.RunCompleted{RunID: turn, TurnID: turn,
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	h.pauses.loads, h.pauses.creates, h.threads.loads = 0, 0, 0
	h.pause("m2", "p2", 12, "q2", "q3")
	if h.pauses.creates != 1 || h.pauses.loads != 0 || h.threads.loads != 0 {
		t.Errorf("second pause: %d Create, %d pause Load, %d thread Load; want 1, 0, 0",
			h.pauses.creates, h.pauses.loads, h.threads.loads)
	}
	h.answer("a3", "q3")
	if h.pauses.loads != 0 || h.threads.loads != 0 || rejectedFor(h, "a3") != "" {
		t.Errorf("answer: %d pause Load, %d thread Load (rejected %q), want 0, 0 and consumed",
			h.pauses.loads, h.threads.loads, rejectedFor(h, "a3"))
	}
	// Another replica consumes q2 first: this replica's cached thread
	// still has it pending, and its answer must not win.
	func() {
		h.threads.mu.Lock()
		defer h.threads.mu.Unlock()
		th, _ := h.threads.load("t")
		el := th.Paused.Find("q2")
		el.Status, el.ResponseEventID = StatusConsumed, "elsewhere"
		el.Result = &schema.ElicitResult{Action: schema.ActionAccept}
		resumePaused(th)
		data, _ := json.Marshal(th)
		h.threads.rev++
		h.threads.recs["t"] = memRecord{data, h.threads.rev}
	}()
	h.answer("a2", "q2")
	if got := rejectedFor(h, "a2"); got != events.RejectAlreadyConsumed {
		t.Errorf("an answer on a stale cached thread: rejected %q, want %q", got, events.RejectAlreadyConsumed)
	}
	if n := len(h.pub.of(events.TypeRunResumed)); n != 1 {
		t.Errorf("%d run.resumed, want 1 (the first pause's; the other replica resumed the second)", n)
	}
	h.threads.loads = 0
	h.answer("a4", "q2")
	if h.threads.loads != 1 || rejectedFor(h, "a4") != events.RejectAlreadyConsumed {
		t.Errorf("an answer the cached thread would refuse: %d thread Load, rejected %q; want 1 (decided again on a fresh read), already_consumed",
			h.threads.loads, rejectedFor(h, "a4"))
	}
}
