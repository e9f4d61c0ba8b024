package processor

import (
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
	other := newThreads(h.threads, true) // a second replica
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
	th, _, _ := h.threads.Load(h.ctx, "t")
	if th.StartedBy != "m2" || len(th.Queue) != 1 || th.Queue[0].EventID != "m3" {
		t.Fatalf("thread after a stale cache: started by %q, queue %+v; want m2 running, m3 queued", th.StartedBy, th.Queue)
	}
	if n := len(h.pub.of(events.TypeRunRequested)); n != 2 {
		t.Errorf("%d run.requested, want 2 (m1, m2): m3 must not start over m2", n)
	}
}
