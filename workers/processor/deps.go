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

// threadStore keeps thread records (kvstate.ThreadStore).
type threadStore interface {
	Load(ctx context.Context, id string) (*kvstate.Thread, uint64, error)
	Mutate(ctx context.Context, id string, fn func(t *kvstate.Thread) error) (*kvstate.Thread, error)
	MutateAt(ctx context.Context, t *kvstate.Thread, rev uint64, fn func(t *kvstate.Thread) error) (*kvstate.Thread, error)
	Reset(ctx context.Context, id string) error
}

// pausedStore keeps paused turns (kvstate.PausedStore).
type pausedStore interface {
	Load(ctx context.Context, thread string) (*kvstate.PausedTurn, uint64, error)
	Save(ctx context.Context, p *kvstate.PausedTurn) (uint64, error)
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
	_ threadStore = (*kvstate.ThreadStore)(nil)
	_ pausedStore = (*kvstate.PausedStore)(nil)
	_ inputReader = jetstream.Stream(nil)
)

// inputSeqThreads is the thread store as the processor sees it: a record
// written when integrator input was in PARLEY_CHAT has PARLEY_CHAT
// sequences in LastTurnSeq and PauseMark, which do not compare with
// PARLEY_INPUT's; they are read as unset (the order of the thread's
// messages then comes from PARLEY_INPUT alone), and every write marks the
// record's sequences as PARLEY_INPUT's.
type inputSeqThreads struct{ threadStore }

func inputSeqs(t *kvstate.Thread) {
	if t != nil && !t.InputSeqs {
		t.LastTurnSeq, t.PauseMark, t.InputSeqs = 0, 0, true
	}
}

func (s inputSeqThreads) Load(ctx context.Context, id string) (*kvstate.Thread, uint64, error) {
	t, rev, err := s.threadStore.Load(ctx, id)
	inputSeqs(t)
	return t, rev, err
}

func (s inputSeqThreads) Mutate(ctx context.Context, id string, fn func(t *kvstate.Thread) error) (*kvstate.Thread, error) {
	return s.threadStore.Mutate(ctx, id, func(t *kvstate.Thread) error {
		inputSeqs(t)
		return fn(t)
	})
}
