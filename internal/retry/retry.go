package retry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultStartupTimeout is how long start-up steps (connecting, creating
// streams, buckets and consumers) retry by default: long enough for a
// JetStream cluster to elect a meta leader and stream leaders (a few seconds
// each) after a node loss, and for a node that is restarting to come back.
const DefaultStartupTimeout = 2 * time.Minute

// Policy bounds an operation retried with exponential backoff and
// jitter.
type Policy struct {
	// Timeout is the whole budget, measured from the first try: no try
	// starts after it. Zero means DefaultStartupTimeout; negative means a
	// single try.
	Timeout time.Duration
	// AttemptTimeout bounds one try (capped by what is left of Timeout).
	// Optional. Default: 5s, nats.go's JetStream API timeout: on a
	// cluster, a create that races another replica's identical create
	// can go unanswered, and the next try finds the stream created.
	AttemptTimeout time.Duration
	// InitialBackoff is the wait after the first failed try; it doubles
	// after every further failure up to MaxBackoff. Each wait is drawn at
	// random between half of it and all of it (jitter), so replicas that
	// failed together do not retry together. Optional. Defaults: 100ms and
	// 5s.
	InitialBackoff, MaxBackoff time.Duration
	// Deadline, when set, also ends the retrying: a worker sets it once
	// for its whole start-up, so the steps share one budget instead of
	// each having Timeout. The first try is made even after it.
	// Optional.
	Deadline time.Time
	// Logger receives one warning per failed try that will be retried.
	// Optional. Default: discard.
	Logger *slog.Logger
}

// WithDefaults returns p with every unset field at its default.
func (p Policy) WithDefaults() Policy {
	if p.Timeout == 0 {
		p.Timeout = DefaultStartupTimeout
	}
	if p.AttemptTimeout <= 0 {
		p.AttemptTimeout = 5 * time.Second
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = 100 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 5 * time.Second
	}
	if p.MaxBackoff < p.InitialBackoff {
		p.MaxBackoff = p.InitialBackoff
	}
	return p
}

// Budget is the time from the first try after which no try starts; for
// a single try (Timeout < 0) it is that try's AttemptTimeout.
func (p Policy) Budget() time.Duration {
	if p.Timeout < 0 {
		return p.AttemptTimeout
	}
	return p.Timeout
}

// Backoff returns the jittered wait after the n-th failed try (n from 1).
func (p Policy) Backoff(n int) time.Duration {
	d := p.InitialBackoff
	for i := 1; i < n && d < p.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

type startupKey struct{}

// WithStartupPolicy returns ctx carrying p as the start-up retry policy:
// bus.EnsureStreams, bus.EnsureConsumer (so bus.Consume) and kvstate.OpenBucket called
// with the returned context use it instead of their defaults. A worker sets
// it once, from its --startup-timeout flag, on the context it runs with.
func WithStartupPolicy(ctx context.Context, p Policy) context.Context {
	return context.WithValue(ctx, startupKey{}, p)
}

// StartupPolicy returns the start-up retry policy carried by ctx (see
// WithStartupPolicy), or def when ctx carries none.
func StartupPolicy(ctx context.Context, def Policy) Policy {
	if p, ok := ctx.Value(startupKey{}).(Policy); ok {
		return p
	}
	return def
}

// Error is returned by Do when the budget ran out: what was tried,
// how often, for how long, and the last error (Unwrap).
type Error struct {
	// What names the operation ("creating stream PARLEY_CHAT").
	What string
	// Tries is the number of tries made.
	Tries int
	// Elapsed is the time from the first try to giving up.
	Elapsed time.Duration
	// Last is the last try's error.
	Last error
}

// Error formats the failure as "<what>: gave up after N tries in D: <last>".
func (e *Error) Error() string {
	return fmt.Sprintf("%s: gave up after %d tries in %v: %v", e.What, e.Tries, e.Elapsed.Round(time.Millisecond), e.Last)
}

// Unwrap returns the last try's error.
func (e *Error) Unwrap() error { return e.Last }

// Do runs op until it returns nil, an error marked Permanent or one
// IsRetryable rejects (returned at once, wrapped with what, so IsPermanent
// still reports it), or the policy's Timeout runs out (a *Error
// wrapping the last error). Each try gets a context bounded by
// AttemptTimeout; ctx's cancellation ends the retrying with ctx's error.
// Every failed try that will be retried is logged to p.Logger at warn
// level with what, the try number, the wait and the error, so an operator
// sees a worker waiting for NATS (or for a leader) and why.
func Do(ctx context.Context, what string, p Policy, op func(ctx context.Context) error) error {
	p = p.WithDefaults()
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	deadline := start.Add(p.Budget())
	if !p.Deadline.IsZero() && p.Deadline.Before(deadline) {
		deadline = p.Deadline
	}
	for try := 1; ; try++ {
		at := p.AttemptTimeout
		if try > 1 {
			at = min(at, max(time.Until(deadline), time.Millisecond))
		}
		actx, cancel := context.WithTimeout(ctx, at)
		err := op(actx)
		cancel()
		if err == nil {
			if try > 1 {
				log.Info("succeeded after retries", "op", what, "tries", try, "elapsed", time.Since(start).Round(time.Millisecond).String())
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		}
		if IsPermanent(err) || !IsRetryable(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		wait := p.Backoff(try)
		if p.Timeout < 0 || time.Now().Add(wait).After(deadline) {
			return &Error{What: what, Tries: try, Elapsed: time.Since(start), Last: err}
		}
		log.Warn("not done yet; retrying", "op", what, "try", try, "retry_in", wait.Round(time.Millisecond).String(),
			"budget_left", time.Until(deadline).Round(time.Second).String(), "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// IsRetryable reports whether err may go away by itself on a NATS
// JetStream cluster (a leader election, a node restarting, a lost
// acknowledgement, a connection being (re-)established), so the operation
// is worth another try. The JetStream API's own answers follow its status
// codes: 5xx ("JetStream system temporarily unavailable", "insufficient
// resources" while nodes join) is retryable except "replicas > 1 not
// supported in non-clustered mode"; 4xx is final except "no suitable peers
// for placement" (a starting cluster) and the "already in use / exists"
// answers of a lost creation race. Final too: a closed connection, bad
// credentials, invalid names, subjects and options rejected by nats.go
// before sending, and errors marked Permanent. Anything else (timeouts, no
// responders, dial errors) is retryable.
func IsRetryable(err error) bool {
	if err == nil || IsPermanent(err) {
		return false
	}
	for _, final := range finalErrors {
		if errors.Is(err, final) {
			return false
		}
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && api.Code != 0 {
		switch api.ErrorCode {
		case jsErrReplicasNotSupported:
			return false
		case jsErrNoSuitablePeers, jetstream.JSErrCodeStreamNameInUse, jetstream.JSErrCodeConsumerExists,
			jetstream.JSErrCodeConsumerNameExists, jetstream.JSErrCodeConsumerAlreadyExists:
			return true
		}
		return api.Code >= 500
	}
	return true
}

// NotVisibleYet turns the "not found" answer (stream, consumer, bucket) to
// a read of something that was just created, or that a create said
// exists, into a retryable error: on a cluster, the server that answers
// may not have applied the assignment yet, or the new stream may not have a
// leader. Any other error is returned as it is.
func NotVisibleYet(err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("created, but not visible yet: %v", err)
	}
	return err
}

// finalErrors are the client-side errors no retry changes.
var finalErrors = []error{
	nats.ErrConnectionClosed, nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked,
	nats.ErrBadSubject, nats.ErrMaxPayload, nats.ErrInvalidContext,
	jetstream.ErrInvalidBucketName, jetstream.ErrInvalidStreamName, jetstream.ErrInvalidConsumerName,
	jetstream.ErrStreamNameRequired, jetstream.ErrInvalidSubject, jetstream.ErrKeyValueConfigRequired,
	jetstream.ErrHistoryTooLarge, jetstream.ErrLimitMarkerTTLNotSupported, jetstream.ErrInvalidOption,
	jetstream.ErrConnectionClosed,
}

// JetStream API error codes without a constant in nats.go (from
// nats-server's errors.json).
const (
	jsErrReplicasNotSupported jetstream.ErrorCode = 10074 // replicas > 1 not supported in non-clustered mode
	jsErrNoSuitablePeers      jetstream.ErrorCode = 10005 // {err}: no suitable peers for placement
)

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying: Do returns it at once, and a
// bus handler returning it dead-letters its message at once. nil stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err was wrapped with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// RefusedUpdate marks err, the error of a stream, consumer or bucket
// update, Permanent when the server refused the update for a reason no
// retry changes (a 400 answer other than "no suitable peers"); other errors
// are returned as they are.
func RefusedUpdate(err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.Code == 400 && api.ErrorCode != jsErrNoSuitablePeers {
		return Permanent(fmt.Errorf("the server refused the update: %w", err))
	}
	return err
}

// RequestTimeout bounds one JetStream API request or KV operation (a get,
// a create, an update, a delete): 5 s, nats.go's own default for a
// context without a deadline. A request whose reply is lost with a NATS
// node (killed between receiving it and answering, or the connection
// dropped while it was in flight) is never answered, and a handler's
// context lasts as long as its heartbeat keeps the message from
// redelivery: without this bound one lost reply holds a message, and
// every later message of its thread, for minutes.
const RequestTimeout = 5 * time.Second

// WithRequestTimeout returns ctx bounded by RequestTimeout (or by ctx's own
// deadline when that is sooner), for one JetStream API request or KV
// operation; the caller must call cancel. The request then fails with
// context.DeadlineExceeded, and the caller's retry (a nak and redelivery,
// a compare-and-set loop reading again) decides what happened to it.
func WithRequestTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, RequestTimeout)
}
