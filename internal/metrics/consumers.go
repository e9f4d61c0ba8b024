package metrics

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ConsumerPollInterval is how often a watched consumer's info is read
// (one CONSUMER.INFO request per consumer per interval, whatever the
// scrape or probe rate). Tests may shorten it before watching.
var ConsumerPollInterval = 5 * time.Second

// ConsumerState is what the last poll of a consumer's info said.
type ConsumerState struct {
	// Stream and Durable name the consumer.
	Stream, Durable string
	// Polled is false until the first poll finished (successfully or not).
	Polled bool
	// Err is the last poll's error (nil when it succeeded): the consumer
	// or its stream is missing, or NATS did not answer.
	Err error
	// Pending is num_pending: messages not yet delivered.
	Pending uint64
	// AckPending is num_ack_pending: delivered, not yet acknowledged.
	AckPending int
	// LastProgress is when the consumer was last seen idle (nothing
	// pending) or advancing (its delivered or ack floor sequence moved).
	LastProgress time.Time
	// PolledAt is when the last poll finished.
	PolledAt time.Time
}

// Stalled reports whether the consumer has work but has not advanced for
// at least after (measured at now).
func (c ConsumerState) Stalled(now time.Time, after time.Duration) bool {
	return c.Err == nil && c.Polled && now.Sub(c.LastProgress) >= after
}

type watched struct {
	mu              sync.Mutex
	state           ConsumerState
	delivered, acks uint64
}

var (
	watchMu sync.Mutex
	watches = map[*watched]struct{}{}
)

// ConsumerInfoer is the part of jetstream.Consumer the watcher uses.
type ConsumerInfoer interface {
	Info(ctx context.Context) (*jetstream.ConsumerInfo, error)
}

// WatchConsumer polls cons's info every ConsumerPollInterval until ctx is
// done or stop is called, feeding the pending and ack-pending gauges and
// the readiness check (Consumers). bus.Client.Consume calls it for each
// consumer it runs.
func WatchConsumer(ctx context.Context, stream, durable string, cons ConsumerInfoer) (stop func()) {
	w := &watched{state: ConsumerState{Stream: stream, Durable: durable, LastProgress: time.Now()}}
	watchMu.Lock()
	watches[w] = struct{}{}
	watchMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(ConsumerPollInterval)
		defer t.Stop()
		for {
			w.poll(ctx, cons)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		watchMu.Lock()
		delete(watches, w)
		watchMu.Unlock()
	}
}

func (w *watched) poll(ctx context.Context, cons ConsumerInfoer) {
	pctx, cancel := context.WithTimeout(ctx, min(ConsumerPollInterval, 5*time.Second))
	info, err := cons.Info(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &w.state
	s.Polled, s.PolledAt, s.Err = true, now, err
	if err != nil {
		return
	}
	s.Pending, s.AckPending = info.NumPending, info.NumAckPending
	moved := info.Delivered.Stream != w.delivered || info.AckFloor.Stream != w.acks
	w.delivered, w.acks = info.Delivered.Stream, info.AckFloor.Stream
	if moved || (info.NumPending == 0 && info.NumAckPending == 0) {
		s.LastProgress = now
	}
}

// Consumers returns the state of every watched consumer of this process,
// sorted by stream and durable.
func Consumers() []ConsumerState {
	watchMu.Lock()
	out := make([]ConsumerState, 0, len(watches))
	for w := range watches {
		w.mu.Lock()
		out = append(out, w.state)
		w.mu.Unlock()
	}
	watchMu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Stream != out[j].Stream {
			return out[i].Stream < out[j].Stream
		}
		return out[i].Durable < out[j].Durable
	})
	return out
}
