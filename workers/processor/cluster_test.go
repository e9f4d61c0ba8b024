package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// Two processors, each connected to another node of a 3-node cluster,
// take two answers to one question at once (a double click delivered to
// two replicas) on a replicated (R3) threads bucket, where a lost
// compare-and-set is reported with another code than on one server. Each
// time exactly one answer consumes the question and resumes the turn; the
// other is refused as already consumed; neither handler fails.
func TestAnswerRaceOnReplicatedBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := bustest.NewCluster(t, 3)
	var buckets []*kvstate.Bucket[json.RawMessage]
	for range 2 {
		_, js := cl.JetStream(t)
		b, err := kvstate.OpenBucket[json.RawMessage](t.Context(), js, kvstate.BucketThreads,
			kvstate.BucketOptions{Storage: jetstream.MemoryStorage, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		// A new R3 bucket answers reads on every node once its stream
		// has a leader they know of.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, _, err := b.Get(t.Context(), "warm")
			if errors.Is(err, kvstate.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the replicated bucket does not answer reads: %v", err)
			}
		}
		buckets = append(buckets, b)
	}
	conflicts := make([]*conflictCount, 2)
	for i := range conflicts {
		conflicts[i] = &conflictCount{Records: buckets[i]}
	}
	defer func() { t.Logf("writes that lost a race: %d, %d", conflicts[0].n.Load(), conflicts[1].n.Load()) }()
	for i := range 10 {
		if err := buckets[0].Delete(t.Context(), "t", 0); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t)
		h.p.threads = h.p.threadStore(conflicts[0], false)
		other := newProcessor(Options{PauseTTL: time.Hour, DefaultAgent: "default", OrderWait: time.Second,
			Logger: slog.New(slog.DiscardHandler)}, nil, h.pub, conflicts[1], h.pauses, h.chat)
		if err := h.message("m1", 1); err != nil {
			t.Fatal(err)
		}
		h.pause("m1", "p1", 10, "q1")

		errs := make(chan error, 2)
		start := make(chan struct{})
		for n, p := range []*Processor{h.p, other} {
			id := fmt.Sprintf("a%d-%d", i, n)
			go func() {
				e, err := events.NewWithID(id, "/test", events.TypeElicitationResponded, "t",
					events.ElicitationResponded{ElicitationID: "q1", Action: schema.ActionAccept})
				if err != nil {
					errs <- err
					return
				}
				<-start
				errs <- p.HandleInput(t.Context(), &bus.Delivery{Event: e, StreamSeq: 100, NumDelivered: 1,
					Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatElicitationResponded)})
			}()
		}
		close(start)
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("race %d: an answer's handler failed: %v (a lost compare-and-set taken for a failure)", i, err)
			}
		}
		if n := len(h.pub.of(events.TypeRunResumed)); n != 1 {
			t.Fatalf("race %d: %d run.resumed, want 1", i, n)
		}
		rejected := h.pub.of(events.TypeElicitationRejected)
		if len(rejected) != 1 {
			t.Fatalf("race %d: %d elicitation.rejected, want 1 (the losing answer)", i, len(rejected))
		}
		if d, _ := events.Data[events.ElicitationRejected](rejected[0]); d.Reason != events.RejectAlreadyConsumed {
			t.Fatalf("race %d: the losing answer was rejected %q, want %q", i, d.Reason, events.RejectAlreadyConsumed)
		}
		th, _, err := h.p.threads.Get(t.Context(), "t")
		if err != nil {
			t.Fatal(err)
		}
		if el := th.Paused.Find("q1"); el == nil || el.Status != StatusConsumed {
			t.Fatalf("race %d: q1 after the race: %+v, want consumed", i, el)
		}
	}
}

// conflictCount counts the revision-checked updates of its Records that
// lost a race.
type conflictCount struct {
	kvstate.Records
	n atomic.Int32
}

func (c *conflictCount) Update(ctx context.Context, key string, v json.RawMessage, rev uint64, ttl time.Duration) (uint64, error) {
	r, err := c.Records.Update(ctx, key, v, rev, ttl)
	if errors.Is(err, kvstate.ErrConflict) {
		c.n.Add(1)
	}
	return r, err
}
