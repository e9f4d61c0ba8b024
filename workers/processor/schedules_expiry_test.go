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
// markers on: when a thread's last expiry goes, the server stores a
// MaxAge marker on its subject, "<thread>.pause.expired", which
// processor-timers' filter matches (kvstate
// TestScheduledExpiriesLeaveOneMarkerPerKey). That marker is no record's
// expiry: HandleExpiry must ack it as nothing. Read as the expiry of a
// record, it ends nothing, but it loads the thread and, on a thread
// running a turn, published that turn's run.requested again: a day after
// a pause, any turn of the thread that has run longer than PARLEY_AGENT's
// duplicate window got its run stored a second time (the agent calls the
// model again and re-dispatches the step's tool calls).
func TestMarkerOfAnExpiryIsNoExpiry(t *testing.T) {
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
		if err := h.p.HandleExpiry(h.ctx, expiryDelivery(pauseExpiryKey(key), marker)); err != nil {
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
	if err := h.p.HandleExpiry(h.ctx, expiryDelivery(pauseExpiryKey(key),
		nats.Header{kvstate.SchedulerHeader: []string{pausedSubjects + "." + key}})); err != nil {
		t.Fatal(err)
	}
	if len(h.pub.of(events.TypeElicitationExpired)) != 1 {
		t.Errorf("the expiry of %s did not end its pause", key)
	}
}

// A pause is recorded once: a run.paused redelivered after its pause
// record expired (its processor died between the record and the thread
// write, and every processor stayed down past the record's expiry) ends
// the turn as unknown_or_expired instead of pausing again. With a per-key
// TTL the key's expiry marker refused the second write, for a minute; a
// scheduled record leaves no entry under its key when it fires (the
// server purges it), so the redelivery wrote the record again, with a
// fresh expiry counted from its own handling, and the thread asked
// questions that had expired. The pause now counts from when PARLEY_RUNS
// stored run.paused (bus.Delivery.Stored), the same on every delivery,
// so the redelivery's record is refused by its expiry (kvstate.ErrExpired),
// with a per-key TTL and with a message schedule alike.
func TestScheduledRecordWrittenOnce(t *testing.T) {
	for _, schedules := range []bool{false, true} {
		t.Run(fmt.Sprintf("schedules=%v", schedules), func(t *testing.T) {
			_, js := bustest.NewServer(t).JetStream(t)
			b, err := openPauses(t.Context(), js, jetstream.MemoryStorage, 1, schedules)
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t)
			h.p = newProcessor(Options{PauseTTL: time.Second, DefaultAgent: "default", OrderWait: time.Second,
				Logger: h.p.log}, nil, h.pub, h.threads, b, h.chat)
			if err := h.message("m1", 1); err != nil {
				t.Fatal(err)
			}
			turn := turnOf("m1")
			in := events.RunPaused{RunID: turn, TurnID: turn, Agent: "default", Snapshot: []byte(`{}`),
				Elicitations: []events.PendingElicitation{confirmation("q1")}}
			e, err := events.NewWithID("p1", events.SourceAgent, events.TypeRunPaused, "t", in)
			if err != nil {
				t.Fatal(err)
			}
			stored := time.Now()
			// The first delivery stores the record, and its processor dies
			// before the thread write.
			key := h.p.pauses.key("t", 3)
			rec := &pauseRecord{Thread: "t", TurnID: turn, RunID: turn, RunSeq: 3, ExpiresAt: stored.Add(time.Second), Snapshot: []byte(`{}`)}
			if err := h.p.pauses.save(h.ctx, key, rec, recordUntil(rec.ExpiresAt, time.Second)); err != nil {
				t.Fatal(err)
			}
			h.p.pauses.cache.Drop(key) // another replica's
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if _, err := b.Load(t.Context(), key); errors.Is(err, kvstate.ErrNotFound) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the record did not expire within 5 s")
				}
			}
			// The redelivery.
			if err := h.p.HandleRun(h.ctx, &bus.Delivery{Event: e, Subject: "parley.agent.run.paused", StreamSeq: 3,
				NumDelivered: 2, Stored: stored}); err != nil {
				t.Fatal(err)
			}
			if n := len(h.pub.of(events.TypeElicitationRequested)); n != 0 {
				t.Errorf("%d questions asked again after their pause expired, want 0", n)
			}
			failed := h.pub.of(events.TypeTurnFailed)
			if len(failed) != 1 {
				t.Fatalf("%d turn.failed, want 1", len(failed))
			}
			if d, _ := events.Data[events.TurnFailed](failed[0]); d.Reason != events.RejectUnknownOrExpired {
				t.Errorf("turn.failed %+v, want unknown_or_expired", d)
			}
			if th := h.stored(); th.State == ThreadPaused {
				t.Errorf("thread paused again on %s", th.Paused.Record)
			}
		})
	}
}
