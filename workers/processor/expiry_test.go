package processor

import (
	"testing"

	"github.com/parley-dev/parley/events"
)

// The expiry of an answered pause's record (every record expires, a grace
// after its pause's expiresAt, however the pause ended) finds the thread
// running the resumed turn: it changes nothing and publishes nothing. It
// used to republish the running turn's run.requested, which JetStream
// stores again once the turn has run past the duplicate window, so the
// agent handled the run's start a second time.
func TestAnsweredPauseRecordExpiryPublishesNothing(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 2, "q1")
	h.answer("a1", "q1")
	if th := h.stored(); th.State != ThreadRunning {
		t.Fatalf("thread %s after the answer, want running", th.State)
	}
	h.pub.mu.Lock()
	before := len(h.pub.sent)
	h.pub.mu.Unlock()
	if err := h.p.onExpired(h.ctx, h.p.pauses.key("t", 2)); err != nil {
		t.Fatal(err)
	}
	h.pub.mu.Lock()
	got := h.pub.sent[before:]
	h.pub.mu.Unlock()
	for _, e := range got {
		t.Errorf("published %s after the answered pause's record expired", e.Type())
	}
	if th := h.stored(); th.State != ThreadRunning {
		t.Errorf("thread %s after the stale expiry, want running", th.State)
	}
	if n := len(h.pub.of(events.TypeRunRequested)); n != 1 {
		t.Errorf("%d run.requested, want 1", n)
	}
}
