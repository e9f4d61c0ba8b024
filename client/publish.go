package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
)

// Defaults of RetryPolicy.
const (
	// DefaultPublishBudget is how long a publish retries by default: long
	// enough for a JetStream stream leader election (4-8 s on a 3-node
	// cluster) or a NATS server restart.
	DefaultPublishBudget = 30 * time.Second
	// DefaultAttemptTimeout is how long one try waits for its PubAck.
	DefaultAttemptTimeout = 3 * time.Second
)

// RetryPolicy bounds the retries of Publish.
type RetryPolicy struct {
	// Budget is the total time Publish may spend, from its first try to
	// its last PubAck wait. Optional. Default: DefaultPublishBudget.
	Budget time.Duration
	// AttemptTimeout is how long one try waits for the PubAck (capped by
	// what is left of Budget). Optional. Default: DefaultAttemptTimeout.
	AttemptTimeout time.Duration
	// OnRetry, if set, is called (on Publish's goroutine) after a try
	// failed with a transient error and before the next one, with the
	// number of the failed try (from 1) and its error. CLIs use it to say
	// "not confirmed yet".
	OnRetry func(attempt int, err error)
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Budget <= 0 {
		p.Budget = DefaultPublishBudget
	}
	if p.AttemptTimeout <= 0 {
		p.AttemptTimeout = DefaultAttemptTimeout
	}
	return p
}

// ErrNotConfirmed is matched (errors.Is) by the error of a Publish whose
// budget ran out, or whose context ended, before JetStream acknowledged
// the event. The event may still have been stored (a PubAck can be lost,
// and a publish made while disconnected is sent on reconnect); publishing
// the same event again (same ID) within the stream's duplicate window is
// safe: JetStream drops the copy.
var ErrNotConfirmed = errors.New("not confirmed")

// UnconfirmedError is the error of a Publish that got no PubAck: it names
// the event, how many tries were made over how long, and the last error.
// It matches ErrNotConfirmed and unwraps to the last error.
type UnconfirmedError struct {
	// EventID is the CloudEvents id (= Nats-Msg-Id) of the event.
	EventID string
	// Subject is the NATS subject it was published on.
	Subject string
	// Attempts is how many tries were made; Elapsed how long they took.
	Attempts int
	Elapsed  time.Duration
	// Err is the error of the last try (or the context's error).
	Err error
}

func (e *UnconfirmedError) Error() string {
	return fmt.Sprintf("event %s on %s not confirmed by JetStream after %d tries in %s: %s",
		e.EventID, e.Subject, e.Attempts, roundWait(e.Elapsed), Explain(e.Err))
}

// Unwrap returns ErrNotConfirmed and the last error.
func (e *UnconfirmedError) Unwrap() []error { return []error{ErrNotConfirmed, e.Err} }

// ErrNoStream is matched by the error of a Publish to a subject that no
// JetStream stream stores (the server said so, until the budget ran out;
// nothing was stored): parley's streams are created by its workers, so
// none has started. OnRetry sees it too, while Publish still waits for the
// stream to appear (workers starting at the same time).
var ErrNoStream = errors.New("no JetStream stream stores the subject")

// Publish publishes e on subject with b.Publish (Nats-Msg-Id = e.ID()),
// retrying the transient failures of a JetStream publish — no responders
// (no stream leader, e.g. during an election), a PubAck that does not come
// in time, a connection being re-established, a 503 from JetStream, "this
// message ID is still in process" (an earlier try being stored) — with
// the same event, so a retry can never store a duplicate, until policy's
// budget runs out. It returns the PubAck (Duplicate set when an earlier
// try, or an earlier run, had stored the event).
//
// Errors: an *UnconfirmedError (matching ErrNotConfirmed) when the budget
// runs out or ctx ends first; an error matching ErrNoStream when the budget
// runs out and the server says no stream stores subject; any other error (a closed connection, a payload over
// the server's limit, a JetStream API refusal other than 503) at once.
func Publish(ctx context.Context, b *bus.Client, subject string, e *event.Event, policy RetryPolicy) (*jetstream.PubAck, error) {
	p := policy.withDefaults()
	start := time.Now()
	tries, missing := 1, false
	noStream := func() error {
		return fmt.Errorf("%w: %s (parley's workers create the streams: are they started, e.g. `parley dev`?)", ErrNoStream, subject)
	}
	onRetry := func(try int, err error) {
		tries = try + 1
		// Ask once whether the subject has a stream at all: no stream
		// (yet; the workers may be starting) is not an election. Keep
		// trying, but say so.
		if try == 1 {
			missing = streamMissing(ctx, b, subject)
		}
		if missing {
			err = noStream()
		}
		if p.OnRetry != nil {
			p.OnRetry(try, err)
		}
	}
	// The one retry loop: the bus's, with this policy.
	ack, err := b.PublishWith(ctx, subject, e, bus.PublishPolicy{Budget: p.Budget, AttemptTimeout: p.AttemptTimeout, OnRetry: onRetry})
	if err == nil {
		return ack, nil
	}
	var gaveUp *bus.RetryError
	switch {
	case ctx.Err() != nil:
		return nil, &UnconfirmedError{EventID: e.ID(), Subject: subject, Attempts: tries, Elapsed: time.Since(start), Err: ctx.Err()}
	case errors.As(err, &gaveUp):
		// Ask again before giving up.
		if streamMissing(ctx, b, subject) {
			return nil, fmt.Errorf("publishing %s after %s: %w", e.Type(), p.Budget, noStream())
		}
		return nil, &UnconfirmedError{EventID: e.ID(), Subject: subject, Attempts: gaveUp.Tries, Elapsed: gaveUp.Elapsed, Err: gaveUp.Last}
	}
	return nil, err
}

func noResponders(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// streamMissing asks the server (briefly) whether any stream stores
// subject; only a definite "no" counts (an election or an outage that
// leaves the question unanswered is not a missing stream).
func streamMissing(ctx context.Context, b *bus.Client, subject string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := b.JetStream().StreamNameBySubject(ctx, subject)
	return errors.Is(err, jetstream.ErrStreamNotFound)
}

// Explain turns the errors of NATS and of contexts into words for a
// person: "context deadline exceeded" says nothing to someone who typed a
// command. Other errors are returned as they are.
func Explain(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case noResponders(err):
		return "no JetStream stream answered (the stream has no leader yet, e.g. during an election, or the server is restarting)"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "no answer from the NATS server in time (it may be down, restarting or electing a leader)"
	case errors.Is(err, nats.ErrConnectionClosed):
		return "the NATS connection is closed"
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return "not connected to NATS (reconnecting)"
	case errors.Is(err, nats.ErrNoServers):
		return "no NATS server is reachable"
	}
	return err.Error()
}
