package metrics

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultConsumerPollInterval is how often a watched consumer's info is
// read unless SetConsumerPollInterval says otherwise: one CONSUMER.INFO
// request per consumer per interval, whatever the scrape or probe rate.
const DefaultConsumerPollInterval = 5 * time.Second

var pollInterval atomic.Int64

func init() { pollInterval.Store(int64(DefaultConsumerPollInterval)) }

// SetConsumerPollInterval sets the poll interval of consumers watched from
// now on (tests shorten it) and returns the previous one.
func SetConsumerPollInterval(d time.Duration) (previous time.Duration) {
	return time.Duration(pollInterval.Swap(int64(d)))
}

func consumerPollInterval() time.Duration { return time.Duration(pollInterval.Load()) }

// ConsumerState is what the last poll of a consumer's info said.
type ConsumerState struct {
	// Conn is the connection the consumer is consumed over.
	Conn *nats.Conn
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

// Watch is a consumer registered with WatchConsumer.
type Watch struct {
	w      *watched
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// WatchConsumer registers the durable consumer on stream, consumed over
// nc, at once ("not checked yet" until its first poll, so readiness waits
// for it while it is being created); Consuming starts polling its info
// every poll interval (5 s), which feeds the pending and ack-pending
// gauges and the readiness check (Consumers), until ctx is done or Stop.
// bus.Client.Consume calls it for each consumer it runs.
func WatchConsumer(ctx context.Context, nc *nats.Conn, stream, durable string) *Watch {
	w := &watched{state: ConsumerState{Conn: nc, Stream: stream, Durable: durable, LastProgress: time.Now()}}
	watchMu.Lock()
	watches[w] = struct{}{}
	watchMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	return &Watch{w: w, ctx: ctx, cancel: cancel}
}

// Consuming starts polling cons (once; later calls do nothing).
func (x *Watch) Consuming(cons ConsumerInfoer) {
	x.once.Do(func() {
		every := consumerPollInterval()
		x.wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				x.w.poll(x.ctx, cons, every)
				select {
				case <-x.ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	})
}

// Stop stops polling and unregisters the consumer.
func (x *Watch) Stop() {
	x.cancel()
	x.wg.Wait()
	watchMu.Lock()
	delete(watches, x.w)
	watchMu.Unlock()
}

func (w *watched) poll(ctx context.Context, cons ConsumerInfoer, every time.Duration) {
	pctx, cancel := context.WithTimeout(ctx, min(every, 5*time.Second))
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
