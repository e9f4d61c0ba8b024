package processor

import (
	"context"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/kvstate"
)

// What the processor's handlers need of the outside world, as small
// consumer-side interfaces: New wires the NATS-backed implementations
// (kvstate stores, the bus client, the PARLEY_INPUT stream); the package
// tests use in-memory fakes.

// pausedStore keeps paused turns (kvstate.PausedStore).
type pausedStore interface {
	Load(ctx context.Context, thread string) (*kvstate.PausedTurn, uint64, error)
	Save(ctx context.Context, p *kvstate.PausedTurn) (uint64, error)
	Update(ctx context.Context, p *kvstate.PausedTurn, rev uint64) (uint64, error)
	Mutate(ctx context.Context, thread string, fn func(p *kvstate.PausedTurn) error) (*kvstate.PausedTurn, error)
	Delete(ctx context.Context, thread string, rev uint64) error
	ConsumeExpired(ctx context.Context, durable string, fn func(ctx context.Context, thread string) error) error
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
	_ pausedStore = (*kvstate.PausedStore)(nil)
	_ inputReader = jetstream.Stream(nil)
)
