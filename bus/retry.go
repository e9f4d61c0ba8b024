package bus

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/internal/retry"
)

// The retry policy lives in internal/retry, below bus and kvstate alike;
// these names are its bus spelling, so that workers and commands name one
// package for their transport.

// DefaultStartupTimeout is retry.DefaultStartupTimeout.
const DefaultStartupTimeout = retry.DefaultStartupTimeout

// DefaultPublishRetry is how long Publish retries a JetStream publish that
// got no acknowledgement (no responders while a stream elects a leader, a
// timeout) by default. A stream leader election on a 3-node cluster takes
// a few seconds.
const DefaultPublishRetry = 20 * time.Second

// RetryPolicy is retry.Policy.
type RetryPolicy = retry.Policy

// RetryError is retry.Error.
type RetryError = retry.Error

// Retry is retry.Do.
func Retry(ctx context.Context, what string, p RetryPolicy, op func(ctx context.Context) error) error {
	return retry.Do(ctx, what, p, op)
}

// IsRetryable is retry.IsRetryable.
func IsRetryable(err error) bool { return retry.IsRetryable(err) }

// NotVisibleYet is retry.NotVisibleYet.
func NotVisibleYet(err error) error { return retry.NotVisibleYet(err) }

// WithStartupPolicy is retry.WithStartupPolicy.
func WithStartupPolicy(ctx context.Context, p RetryPolicy) context.Context {
	return retry.WithStartupPolicy(ctx, p)
}

// StartupPolicy is retry.StartupPolicy.
func StartupPolicy(ctx context.Context, def RetryPolicy) RetryPolicy {
	return retry.StartupPolicy(ctx, def)
}

// Permanent marks err as not worth retrying (retry.Permanent): a handler
// returning it sends the message to the dead-letter subject at once.
func Permanent(err error) error { return retry.Permanent(err) }

// IsPermanent reports whether err was wrapped with Permanent.
func IsPermanent(err error) bool { return retry.IsPermanent(err) }

// RefusedUpdate is retry.RefusedUpdate.
func RefusedUpdate(err error) error { return retry.RefusedUpdate(err) }

// jsErrStreamStoreFailed: {err}: storing a message failed (503), from
// nats-server's errors.json (no constant in nats.go).
const jsErrStreamStoreFailed jetstream.ErrorCode = 10077

// isStreamFull reports whether err is a stream's refusal to store a
// message because a DiscardNew limit is reached (JSStreamStoreFailedF,
// err_code 10077, "maximum messages exceeded" / "maximum bytes exceeded" /
// "maximum messages per subject exceeded"). The server answers it with
// code 503, so the publish is retried like an election (a work queue may
// drain within the budget); when the budget runs out the event was
// certainly not stored, which the error says.
func isStreamFull(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jsErrStreamStoreFailed &&
		strings.Contains(api.Description, "exceeded")
}

// IsPublishRetryable reports whether a JetStream publish that failed with
// err may be sent again: nobody answered (no responders while the stream
// has no leader, or the connection is reconnecting) or the ack did not come
// in time (the message may or may not be stored; the same Nats-Msg-Id makes
// a second copy a duplicate the stream drops). An error the stream sent
// back (a wrong expected sequence, a message too large) is final.
func IsPublishRetryable(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode != 0 {
		// JetStream not enabled / temporarily unavailable (503) come back
		// during an election, and "duplicate message id is in process"
		// (an earlier try of this event still being stored) is answered
		// with its PubAck (Duplicate) on the next try; anything else is
		// the stream's answer.
		return api.Code == 503 || api.ErrorCode == jsErrDuplicateInProcess
	}
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrStaleConnection) || errors.Is(err, jetstream.ErrInvalidJSAck)
}

// jsErrDuplicateInProcess is nats-server's JSStreamDuplicateMessageConflict
// ("duplicate message id is in process").
const jsErrDuplicateInProcess jetstream.ErrorCode = 10158
