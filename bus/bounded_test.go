package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
)

// A handler still running at the drain timeout makes Consume fail with an
// *UncleanDrainError naming the consumer and the count.
func TestConsumeUncleanDrainIsAnError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.c.Publish(t.Context(), events.SubjectRunRequested, runRequested(t, "hung")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	spec := agentSpec()
	spec.DrainTimeout = 200 * time.Millisecond
	stop, _ := e.consume(t, spec, func(context.Context, *Delivery) error {
		close(started)
		<-release // ignores its context: a hung call
		return nil
	})
	select {
	case <-started:
	case <-time.After(3 * time.Second):
		t.Fatal("handler not started")
	}
	err := stop()
	var ud *UncleanDrainError
	if !errors.As(err, &ud) {
		t.Fatalf("Consume = %v, want an *UncleanDrainError", err)
	}
	if ud.Consumer != "agent" || ud.Running != 1 || ud.Timeout != spec.DrainTimeout {
		t.Errorf("UncleanDrainError = %+v, want consumer agent, 1 running, timeout %v", ud, spec.DrainTimeout)
	}
}

// A handler's context ends at HandlerTimeout, and the failure is retried
// like any other (the second delivery succeeds).
func TestConsumeHandlerTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.c.Publish(t.Context(), events.SubjectRunRequested, runRequested(t, "slow")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	spec := agentSpec()
	spec.HandlerTimeout = 150 * time.Millisecond
	var calls atomic.Int32
	done := make(chan time.Duration, 5)
	stop, _ := e.consume(t, spec, func(ctx context.Context, d *Delivery) error {
		n := calls.Add(1)
		start := time.Now()
		if n == 1 {
			<-ctx.Done() // hangs until its deadline
			done <- time.Since(start)
			return ctx.Err()
		}
		return nil
	})
	select {
	case took := <-done:
		if took > time.Second {
			t.Errorf("handler ran %v, want it cut at about %v", took, spec.HandlerTimeout)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the hung handler's context was not cancelled")
	}
	waitFor(t, 3*time.Second, "the retried message to be acked", func() bool {
		return e.consumerInfo(t, events.StreamAgent, "agent").AckFloor.Stream == 1
	})
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("handler called %d times, want 2 (timed out, then retried)", n)
	}
}

// A failing compensation is retried with backoff, and the message is
// terminated only once it succeeded.
func TestConsumeCompensationRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ack, err := e.c.Publish(t.Context(), events.SubjectRunRequested, runRequested(t, "doomed"))
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	spec := agentSpec()
	spec.CompensateRetry = RetryPolicy{Timeout: 2 * time.Second, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	var tries atomic.Int32
	compensated := make(chan struct{})
	spec.Compensate = func(_ context.Context, d *Delivery, reason error) error {
		if tries.Add(1) < 3 {
			return errors.New("the result stream is electing a leader")
		}
		close(compensated)
		return nil
	}
	stop, _ := e.consume(t, spec, func(context.Context, *Delivery) error { return Permanent(errors.New("bad run")) })
	select {
	case <-compensated:
	case <-time.After(3 * time.Second):
		t.Fatalf("compensation not retried to success (%d tries)", tries.Load())
	}
	waitFor(t, 2*time.Second, "the message to be terminated", func() bool {
		_, err := e.streamMsg(t, events.StreamAgent, ack.Sequence)
		return err != nil
	})
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
}

// A compensation that keeps failing past its budget does not lose the
// message: it comes back and is compensated again.
func TestConsumeCompensationNotDiscarded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.c.Publish(t.Context(), events.SubjectRunRequested, runRequested(t, "doomed")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	spec := agentSpec()
	spec.Backoff = []time.Duration{50 * time.Millisecond}
	spec.CompensateRetry = RetryPolicy{Timeout: 100 * time.Millisecond, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	var deliveries atomic.Int32
	ok := make(chan uint64, 1)
	spec.Compensate = func(_ context.Context, d *Delivery, reason error) error {
		if d.NumDelivered < 2 {
			return errors.New("still down")
		}
		select {
		case ok <- d.NumDelivered:
		default:
		}
		return nil
	}
	stop, _ := e.consume(t, spec, func(context.Context, *Delivery) error {
		deliveries.Add(1)
		return Permanent(errors.New("bad run"))
	})
	select {
	case n := <-ok:
		if n != 2 {
			t.Errorf("compensated at delivery %d, want 2", n)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("the message did not come back for another compensation (%d deliveries)", deliveries.Load())
	}
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
}

// PublishAsync stores events in call order, deduplicated by event ID, and
// reports a refusal to onErr.
func TestPublishAsyncOrderAndDedup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	subject := events.ChatSubject("async-thread", events.ChatProgress)
	var evs []*event.Event
	for i := range 5 {
		ev, err := events.NewWithID(fmt.Sprint("p", i), "/test", events.TypeProgress, "async-thread", map[string]int{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	fail := func(err error) { t.Errorf("onErr: %v", err) }
	for _, ev := range evs {
		e.c.PublishAsync(t.Context(), subject, ev, 5*time.Second, fail)
	}
	e.c.PublishAsync(t.Context(), subject, evs[2], 5*time.Second, fail) // a copy: dropped
	if _, err := e.c.Publish(t.Context(), subject, runRequested(t, "after")); err != nil {
		t.Fatal(err)
	}
	s, err := e.js.Stream(t.Context(), events.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for seq := uint64(1); ; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			break
		}
		got = append(got, m.Header.Get("Nats-Msg-Id"))
	}
	if want := []string{"p0", "p1", "p2", "p3", "p4"}; len(got) != 6 || strings.Join(got[:5], ",") != strings.Join(want, ",") {
		t.Errorf("stored %v, want %v then the synchronous publish", got, want)
	}
	refused := make(chan error, 1)
	e.c.PublishAsync(t.Context(), "parley.nowhere.stored", evs[0], time.Second, func(err error) { refused <- err })
	select {
	case err := <-refused:
		if err == nil {
			t.Error("onErr(nil)")
		}
	case <-time.After(3 * time.Second):
		t.Error("a publish no stream takes was not reported")
	}
}

// NATS not answering (a lost reply bounded by RequestTimeout, no
// responders, the connection down) is not the message's fault: the
// message is retried past MaxDeliver, so an outage longer than the
// backoff does not fail the turn; a handler's own deadline still counts.
func TestConsumeUnavailableIsNotAFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		err     error
		handled bool // retried until handled, or dead-lettered at MaxDeliver
	}{
		{"lost reply", fmt.Errorf("reading parley_threads/t: %w", context.DeadlineExceeded), true},
		{"no responders", fmt.Errorf("checking earlier messages: %w", nats.ErrNoResponders), true},
		{"no stream response", fmt.Errorf("publishing: %w", jetstream.ErrNoStreamResponse), true},
		{"handler's own deadline", nil, false},
		{"the message at fault", errors.New("data.turnId: required"), false},
		{"a full work queue", fmt.Errorf("publishing: %w", &jetstream.APIError{Code: 503, ErrorCode: 10077,
			Description: "maximum bytes exceeded"}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if _, err := e.c.Publish(t.Context(), events.SubjectRunRequested, runRequested(t, "r1")); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			spec := agentSpec() // MaxDeliver 3
			spec.Backoff = []time.Duration{20 * time.Millisecond}
			spec.HandlerTimeout = 100 * time.Millisecond
			dead := make(chan struct{}, 10)
			spec.OnDeadLetter = func(context.Context, *Delivery, error) { dead <- struct{}{} }
			var calls atomic.Int32
			handled := make(chan struct{})
			stop, _ := e.consume(t, spec, func(ctx context.Context, d *Delivery) error {
				n := calls.Add(1)
				switch {
				case n < 6 && tc.err != nil:
					return tc.err
				case n < 6:
					<-ctx.Done()
					return ctx.Err()
				case n == 6:
					close(handled)
				}
				return nil
			})
			defer func() {
				if err := stop(); err != nil {
					t.Errorf("Consume: %v", err)
				}
			}()
			select {
			case <-handled:
				if !tc.handled {
					t.Errorf("retried %d times past MaxDeliver %d", calls.Load()-1, spec.MaxDeliver)
				}
			case <-dead:
				if tc.handled {
					t.Errorf("dead-lettered after %d deliveries: NATS not answering counted as the message's failure", calls.Load())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("neither handled nor dead-lettered")
			}
		})
	}
}
