package processor

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
)

// headerMsg is a delivered message of the pause records' bucket stream
// (headers only), as HandleExpiry reads it.
type headerMsg struct {
	jetstream.Msg
	h nats.Header
}

func (m headerMsg) Headers() nats.Header { return m.h }

// expiryDelivery is a headers-only delivery of the bucket stream on key.
func expiryDelivery(key string, h nats.Header) *bus.Delivery {
	return &bus.Delivery{Subject: pausedSubjects + "." + key, Msg: headerMsg{h: h}, NumDelivered: 1}
}

// The expiry of a scheduled pause record is itself kept only
// kvstate.ExpiryKeep (24 h, its Nats-TTL), and the bucket has expiry
// markers on: when it goes, the server stores a MaxAge marker on its
// subject, "<thread>.<seq>.pause.expired", which processor-timers'
// filter matches (checked on nats-server 2.15 with a 2 s keep). That
// marker is no record's expiry: HandleExpiry must ack it as nothing. Read
// as the expiry of a record named "<thread>.<seq>.pause.expired", it ends
// nothing, but it loads the thread and, on a thread running a turn,
// publishes that turn's run.requested again: a day after a pause, any
// turn of the thread that has run longer than PARLEY_AGENT's duplicate
// window gets its run stored a second time (the agent calls the model
// again and re-dispatches the step's tool calls).
func TestReviewMarkerOfAnExpiryIsNoExpiry(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	h.answer("a1", "q1") // resumed: the turn runs on
	started := len(h.runsStarted())
	sent := len(h.pub.sent)
	marker := nats.Header{jetstream.MarkerReasonHeader: []string{"MaxAge"}}
	for _, key := range []string{scheduledPauseKey("t", 10), "t"} {
		if err := h.p.HandleExpiry(h.ctx, expiryDelivery(kvstate.ExpiredKey(key), marker)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.runsStarted()); n != started {
		t.Errorf("run.requested published %d times after the marker of an expiry, want %d (none again)", n, started)
	}
	if n := len(h.pub.sent); n != sent {
		t.Errorf("%d events published for the marker of an expiry, want none", n-sent)
	}
	if th := h.stored(); th.State != ThreadRunning {
		t.Errorf("thread %s, want running", th.State)
	}

	// A scheduled record's expiry itself still ends its pause.
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	h.run(events.TypeRunCompleted, "c1", 11, events.RunCompleted{RunID: turnOf("m1"), TurnID: turnOf("m1")})
	h.pause("m2", "p2", 12, "q2")
	key := h.paused().Record
	if err := h.p.HandleExpiry(h.ctx, expiryDelivery(kvstate.ExpiredKey(key),
		nats.Header{kvstate.SchedulerHeader: []string{pausedSubjects + "." + key}})); err != nil {
		t.Fatal(err)
	}
	if len(h.pub.of(events.TypeElicitationExpired)) != 1 {
		t.Errorf("the expiry of %s did not end its pause", key)
	}
}

// A pause record is written once: pauseBucket.Create refuses a key whose
// record expired already (kvstate.ErrExpired), so a run.paused
// redelivered after its record's expiry (its processor died between the
// record and the thread write) ends the turn as unknown_or_expired. With
// a per-key TTL the key's expiry marker refuses the create; a scheduled
// record leaves no entry under its key when it fires (the server purges
// it), so the create succeeded and the pause was recorded again under
// the same key, while the first record's expiry, still stored under
// "<key>.expired" (and pending for processor-timers when every processor
// was down), ends whichever pause the thread holds under that key: the
// re-recorded one, at once.
func TestReviewScheduledRecordWrittenOnce(t *testing.T) {
	for _, schedules := range []bool{false, true} {
		t.Run(fmt.Sprintf("schedules=%v", schedules), func(t *testing.T) {
			_, js := bustest.NewServer(t).JetStream(t)
			b, err := openPauses(t.Context(), js, jetstream.MemoryStorage, 1, schedules)
			if err != nil {
				t.Fatal(err)
			}
			key := newPauseRecords(b, false).key("t", 3)
			rec := func(until time.Time) *pauseRecord {
				return &pauseRecord{Format: pauseFormat, Thread: "t", TurnID: "turn", RunID: "turn", RunSeq: 3,
					ExpiresAt: until, Snapshot: []byte(`{"step":1}`)}
			}
			until := time.Now().Add(time.Second)
			if err := b.Create(t.Context(), key, rec(until), until); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if _, err := b.Load(t.Context(), key); errors.Is(err, kvstate.ErrNotFound) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the record did not expire within 5 s")
				}
			}
			until = time.Now().Add(time.Hour) // the redelivery's pause
			if err := b.Create(t.Context(), key, rec(until), until); !errors.Is(err, kvstate.ErrExpired) {
				t.Errorf("creating %s again after its record expired: %v, want kvstate.ErrExpired (written once)", key, err)
			}
		})
	}
}
