package bus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/internal/retry"
)

// RequestTimeout is retry.RequestTimeout.
const RequestTimeout = retry.RequestTimeout

// WithRequestTimeout is retry.WithRequestTimeout.
func WithRequestTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return retry.WithRequestTimeout(ctx)
}

// BoundedKV wraps kv so that each of its single-request operations (Get,
// GetRevision, Put, PutString, Create, Update, Delete, Purge, Status) is
// bounded by RequestTimeout, as WithRequestTimeout. Watches, listings and
// History stream for as long as the caller's context allows and are not
// bounded here.
func BoundedKV(kv jetstream.KeyValue) jetstream.KeyValue { return boundedKV{kv} }

type boundedKV struct{ jetstream.KeyValue }

func (b boundedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	ctx, cancel := WithRequestTimeout(ctx)
	defer cancel()
	return b.KeyValue.Get(ctx, key)
}

func (b boundedKV) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	ctx, cancel := WithRequestTimeout(ctx)
	defer cancel()
	return b.KeyValue.GetRevision(ctx, key, revision)
}

func (b boundedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ctx, cancel := WithRequestTimeout(ctx)
	defer cancel()
	return b.KeyValue.Put(ctx, key, value)
}

func (b boundedKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	ctx, cancel := WithRequestTimeout(ctx)
	defer cancel()
	return b.KeyValue.PutString(ctx, key, value)
}

func (b boundedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	ctx, cancel := WithRequestTimeout(ctx)
	defer cancel()
	return b.KeyValue.Create(ctx, key, value, opts...)
}

func (b boundedKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	ctx, cancel := WithRequestTimeout(ctx)
	defer cancel()
	return b.KeyValue.Update(ctx, key, value, revision)
}

func (b boundedKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	ctx, cancel := WithRequestTimeout(ctx)
	defer cancel()
	return b.KeyValue.Delete(ctx, key, opts...)
}

func (b boundedKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	ctx, cancel := WithRequestTimeout(ctx)
	defer cancel()
	return b.KeyValue.Purge(ctx, key, opts...)
}

func (b boundedKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	ctx, cancel := WithRequestTimeout(ctx)
	defer cancel()
	return b.KeyValue.Status(ctx)
}

// isUnavailable reports whether a handler's error is NATS not answering
// rather than the message being at fault: a request or publish that got
// no answer in time (a lost reply, bounded by RequestTimeout), no
// responders (a stream without a leader), the connection being down, or
// JetStream's 503 (temporarily unavailable) — the errors a publish is
// retried on (IsPublishRetryable) — except a full stream's refusal (also
// a 503): a queue kept full (an integrator can fill one) must not make
// every message that publishes into it come back 100 times. The consumer
// retries such a message without counting it toward
// ConsumerSpec.MaxDeliver.
func isUnavailable(err error) bool { return IsPublishRetryable(err) && !isStreamFull(err) }
