package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/workers/processor"
)

// delivered returns how many messages the consumer durable of the pause
// records' bucket has been delivered.
func (s *system) delivered(durable string) uint64 {
	s.t.Helper()
	c, err := s.bus.JetStream().Consumer(s.ctx, "KV_"+kvstate.BucketPaused, durable)
	if err != nil {
		s.t.Fatalf("consumer %s: %v", durable, err)
	}
	info, err := c.Info(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return info.Delivered.Consumer
}

// A pause record with a per-key TTL (as the release before message
// schedules wrote it, and as a processor writes it on a server before
// nats-server 2.12) still ends its pause once a processor that schedules
// its records took over; that processor's own records expire by message
// schedule, and the expiry-marker watcher is not delivered their writes
// (2 bus messages fewer per pause).
func TestPauseExpiryTTLAndScheduledRecords(t *testing.T) {
	s := start(t, options{pauseTTL: 2 * time.Second, noSchedules: true})
	s.send("x1", deleteDrafts)
	s.question("x1", 1)
	th, _, _ := s.storedThread("x1")
	if th.Paused == nil || strings.Count(th.Paused.Record, ".") != 1 {
		t.Fatalf("pause record of x1 = %+v, want <thread>.<seq> (a per-key TTL)", th.Paused)
	}
	s.stopProcessor("A")
	s.startProcessorWith("B", processor.Options{PauseTTL: 2 * time.Second})
	s.rec.await(t, 15*time.Second, "x1", events.TypeElicitationExpired, 1)

	expiry, timers := s.delivered("processor-expiry"), s.delivered("processor-timers")
	s.send("x2", deleteDrafts)
	s.question("x2", 1)
	th, _, _ = s.storedThread("x2")
	if th.Paused == nil || !strings.HasSuffix(th.Paused.Record, ".pause") {
		t.Fatalf("pause record of x2 = %+v, want <thread>.<seq>.pause (a message schedule)", th.Paused)
	}
	kv, err := s.bus.JetStream().KeyValue(s.ctx, kvstate.BucketPaused)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(s.ctx, th.Paused.Record); err != nil {
		t.Fatalf("the scheduled pause record %s: %v", th.Paused.Record, err)
	}
	s.rec.await(t, 15*time.Second, "x2", events.TypeElicitationExpired, 1)
	if _, err := kv.Get(s.ctx, th.Paused.Record); err != jetstream.ErrKeyNotFound {
		t.Errorf("the scheduled pause record %s after its expiry: %v, want it gone", th.Paused.Record, err)
	}
	if got := s.delivered("processor-expiry") - expiry; got != 0 {
		t.Errorf("processor-expiry was delivered %d messages for a scheduled record, want 0", got)
	}
	if got := s.delivered("processor-timers") - timers; got != 1 {
		t.Errorf("processor-timers was delivered %d messages, want 1 (the expiry)", got)
	}
	// The thread is usable again.
	s.send("x2", "hello")
	s.rec.await(t, 10*time.Second, "x2", events.TypeTurnCompleted, 1)
}
