package processor

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
)

// What the processor's handlers need of the outside world, as small
// consumer-side interfaces: New wires the NATS-backed implementations
// (kvstate stores, the bus client, the PARLEY_INPUT stream); the package
// tests use in-memory fakes.

// pauseStore keeps pause records (pauseBucket): each written once under
// a key of its own, with a TTL; Load fails with kvstate.ErrNotFound once
// the record expired (its expiry marker reaches HandleExpiry).
type pauseStore interface {
	Create(ctx context.Context, key string, rec *pauseRecord, until time.Time) error
	Load(ctx context.Context, key string) (json.RawMessage, error)
	// Extend rewrites the record under key, unchanged, with a TTL until
	// until (pauseBucket.Extend); kvstate.ErrNotFound when it expired.
	Extend(ctx context.Context, key string, until time.Time) error
}

// publisher stores events on their subjects (bus.Client).
type publisher interface {
	Publish(ctx context.Context, subject string, e *event.Event) (*jetstream.PubAck, error)
}

// inputReader reads PARLEY_INPUT by position (jetstream.Stream).
type inputReader interface {
	GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error)
	GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error)
}

var (
	_ pauseStore  = (*pauseBucket)(nil)
	_ inputReader = jetstream.Stream(nil)
)
