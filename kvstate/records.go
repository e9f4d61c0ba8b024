package kvstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Bucket names.
const (
	BucketPaused      = "parley_paused"
	BucketThreads     = "parley_threads"
	BucketRuns        = "parley_runs"
	BucketToolResults = "parley_tool_results"
	BucketTools       = "parley_tools"
)

// PausedFormat is the format version of PausedTurn this code writes and
// reads. A record of another version fails closed with ErrIncompatible.
const PausedFormat = 1

// Elicitation statuses.
const (
	StatusPending   = "pending"
	StatusConsumed  = "consumed"
	StatusCancelled = "cancelled"
)

// Elicitation is one question of a paused turn and what became of it.
type Elicitation struct {
	events.PendingElicitation
	// Status is pending, consumed (answered) or cancelled.
	Status string `json:"status"`
	// Result is the accepted answer, once consumed.
	Result *schema.ElicitResult `json:"result,omitempty"`
	// AnsweredBy is who answered, as authenticated (the principal of the
	// responded event's input subject, and the end user it spoke for when
	// trusted to); AnsweredAt when.
	AnsweredBy events.Identity `json:"answeredBy,omitzero"`
	AnsweredAt time.Time       `json:"answeredAt,omitzero"`
	// ResponseEventID is the elicitation.responded event that consumed it.
	ResponseEventID string `json:"responseEventId,omitempty"`
}

// PausedTurn is the record of a turn waiting for the user, stored under the
// thread ID with a per-key TTL.
type PausedTurn struct {
	// Format is PausedFormat.
	Format       int             `json:"format"`
	Thread       string          `json:"thread"`
	TurnID       string          `json:"turnId"`
	RunID        string          `json:"runId"`
	Agent        string          `json:"agent"`
	CreatedAt    time.Time       `json:"createdAt"`
	ExpiresAt    time.Time       `json:"expiresAt"`
	Elicitations []Elicitation   `json:"elicitations"`
	Snapshot     json.RawMessage `json:"snapshot"`
	// TraceParent is the W3C trace context the turn started in, so the
	// resume joins the same trace.
	TraceParent string `json:"traceparent,omitempty"`
	// Resumed is set once every elicitation is settled and the resume was
	// published; the record then only answers late submits.
	Resumed bool `json:"resumed,omitempty"`
	// RunSeq is the PARLEY_RUNS stream sequence of the run.paused event
	// this record stores: a pause of the same turn at or below the stored
	// one is stale and never replaces it (ErrStale).
	RunSeq uint64 `json:"runSeq,omitempty"`
	// WithdrawnBy is the turn.requested event whose message superseded the
	// turn, and Withdrawn the questions it withdrew (stored in the same
	// write that marked them cancelled), so a redelivery of that message
	// announces them even if the first attempt died before announcing.
	WithdrawnBy string   `json:"withdrawnBy,omitempty"`
	Withdrawn   []string `json:"withdrawn,omitempty"`
}

// Find returns the elicitation with id, or nil.
func (p *PausedTurn) Find(id string) *Elicitation {
	for i := range p.Elicitations {
		if p.Elicitations[i].ID == id {
			return &p.Elicitations[i]
		}
	}
	return nil
}

// Settled reports whether no elicitation is pending.
func (p *PausedTurn) Settled() bool {
	for _, e := range p.Elicitations {
		if e.Status == StatusPending {
			return false
		}
	}
	return true
}

// PendingIDs lists the IDs still pending.
func (p *PausedTurn) PendingIDs() []string {
	var ids []string
	for _, e := range p.Elicitations {
		if e.Status == StatusPending {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// ErrStale is returned by PausedStore.Save for a pause older than the one
// stored for the same turn (a late redelivery): it must be ignored.
var ErrStale = errors.New("kvstate: stale pause")

// PausedStore keeps paused turns.
type PausedStore struct {
	b *Bucket[PausedTurn]
}

// OpenPaused creates or updates the paused-turns bucket.
func OpenPaused(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int) (*PausedStore, error) {
	b, err := OpenBucket[PausedTurn](ctx, js, BucketPaused, BucketOptions{Storage: storage, Replicas: replicas, PerKeyTTL: true})
	if err != nil {
		return nil, err
	}
	return &PausedStore{b: b}, nil
}

// Load returns the paused turn of thread and its revision: ErrNotFound when
// there is none (or it expired), ErrIncompatible when its format is not
// PausedFormat.
func (s *PausedStore) Load(ctx context.Context, thread string) (*PausedTurn, uint64, error) {
	p, rev, err := s.b.Get(ctx, thread)
	if err != nil {
		return nil, rev, err // rev of an undecodable record, so Save can replace it
	}
	if p.Format != PausedFormat {
		return &p, rev, fmt.Errorf("paused turn of %s has format %d, want %d: %w", thread, p.Format, PausedFormat, ErrIncompatible)
	}
	return &p, rev, nil
}

// Save stores p under its thread with a TTL until p.ExpiresAt (ErrExpired
// when that has passed). A live record already there is replaced if it is
// settled (the previous pause of the turn) or belongs to another turn (the
// thread moved on from it); a record of the same turn still pending fails
// with ErrConflict, and a pause at or below the stored record's RunSeq
// (of any turn: PARLEY_RUNS order is total) fails with ErrStale. The caller checks that p's turn is the thread's
// active one and that the pause is not stale.
func (s *PausedStore) Save(ctx context.Context, p *PausedTurn) (uint64, error) {
	p.Format = PausedFormat
	// One write for a new key; one read more (the last entry, markers
	// included) when the thread paused before.
	rev, err := s.b.createUntilStrict(ctx, p.Thread, *p, p.ExpiresAt)
	if !errors.Is(err, ErrConflict) {
		return rev, err
	}
	oldV, oldRev, live, err := s.b.latest(ctx, p.Thread)
	switch {
	case err == nil && !live:
		// Deleted or expired (a marker), or gone since: replace at its revision.
		return s.b.UpdateUntil(ctx, p.Thread, *p, oldRev, p.ExpiresAt)
	case err != nil && !errors.Is(err, ErrIncompatible):
		return 0, err
	}
	if err != nil { // unreadable: replace it
		return s.b.UpdateUntil(ctx, p.Thread, *p, oldRev, p.ExpiresAt)
	}
	switch err := CheckReplace(&oldV, p); {
	case errors.Is(err, ErrAlreadyStored):
		return oldRev, nil // a redelivered pause: already stored
	case err != nil:
		return 0, err
	}
	return s.b.UpdateUntil(ctx, p.Thread, *p, oldRev, p.ExpiresAt)
}

// ErrAlreadyStored is CheckReplace's answer for a pause that is the
// stored one (a redelivery): nothing to write.
var ErrAlreadyStored = errors.New("kvstate: pause already stored")

// CheckReplace applies Save's rules to the live record old and the pause
// p that would replace it: nil when p replaces it (also when old has
// another format: a record this version cannot read is replaced); ErrAlreadyStored when
// p is the stored pause (same turn, run and questions); ErrStale when p is at or below old's
// PARLEY_RUNS sequence (of any turn: PARLEY_RUNS order is total, so a
// pause read from an earlier position, by a processor that froze past
// AckWait say, never replaces a later one); ErrConflict when old is the
// same turn with questions still pending.
func CheckReplace(old, p *PausedTurn) error {
	switch {
	case old.Format != PausedFormat:
		return nil
	case old.TurnID == p.TurnID && old.RunID == p.RunID && sameIDs(old, p):
		return ErrAlreadyStored
	case p.RunSeq != 0 && p.RunSeq <= old.RunSeq:
		return fmt.Errorf("thread %s: pause at runs sequence %d is not newer than the stored one (%d, turn %s): %w",
			p.Thread, p.RunSeq, old.RunSeq, old.TurnID, ErrStale)
	case old.TurnID == p.TurnID && !old.Settled():
		return fmt.Errorf("thread %s already has pending elicitations %v: %w", p.Thread, old.PendingIDs(), ErrConflict)
	}
	return nil
}

func sameIDs(a, b *PausedTurn) bool {
	if len(a.Elicitations) != len(b.Elicitations) {
		return false
	}
	for i := range a.Elicitations {
		if a.Elicitations[i].ID != b.Elicitations[i].ID {
			return false
		}
	}
	return true
}

// Update writes p if the record is still at rev (ErrConflict otherwise),
// keeping its TTL until p.ExpiresAt. Past p.ExpiresAt it writes nothing
// and fails with ErrExpired: the record is expired (the key may live up to
// one second longer, the server's TTL granularity), and a rewrite would
// otherwise carry no TTL at all.
func (s *PausedStore) Update(ctx context.Context, p *PausedTurn, rev uint64) (uint64, error) {
	return s.b.UpdateUntil(ctx, p.Thread, *p, rev, p.ExpiresAt)
}

// Mutate loads the paused record of thread, applies fn and writes it back
// if it is still at the revision read, with its TTL until ExpiresAt,
// retrying on conflict (up to 20 times). fn may run more than once and
// must only change p. If fn returns ErrNoChange nothing is written and
// Mutate returns the record read and nil; any other error is returned as
// is. A missing record is ErrNotFound and an unreadable one
// ErrIncompatible (fn is not called); a write past ExpiresAt fails with
// ErrExpired (see Update).
func (s *PausedStore) Mutate(ctx context.Context, thread string, fn func(p *PausedTurn) error) (*PausedTurn, error) {
	v, err := Mutate(ctx, "the paused turn of "+thread, Mutator[PausedTurn]{
		Load: func(ctx context.Context) (*PausedTurn, uint64, error) { return s.Load(ctx, thread) },
		Save: func(ctx context.Context, p *PausedTurn, rev uint64) (uint64, error) { return s.Update(ctx, p, rev) },
	}, nil, fn)
	return v.Value, err
}

// Delete removes the record of thread if still at rev.
func (s *PausedStore) Delete(ctx context.Context, thread string, rev uint64) error {
	return s.b.Delete(ctx, thread, rev)
}

// WatchExpired calls fn(thread) for every paused turn the server expired.
func (s *PausedStore) WatchExpired(ctx context.Context, fn func(thread string)) error {
	return s.b.WatchExpired(ctx, fn)
}

// ConsumeExpired calls fn(thread) for every paused turn the server expires,
// through the durable consumer durable on the bucket's stream (headers
// only), until ctx is cancelled. Unlike a watcher, a durable consumer
// remembers its position: an expiry that happens while every processor is
// down is delivered when one starts. Replicas share the consumer; fn must
// still be idempotent (delivery is at least once). An fn error naks the
// marker for a retry.
func (s *PausedStore) ConsumeExpired(ctx context.Context, durable string, fn func(ctx context.Context, thread string) error) error {
	stream := "KV_" + BucketPaused
	prefix := "$KV." + BucketPaused + "."
	cons, err := bus.EnsureConsumer(ctx, s.b.js, bus.StartupPolicy(ctx, bus.RetryPolicy{}), stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxDeliver: 10, DeliverPolicy: jetstream.DeliverNewPolicy, HeadersOnly: true,
		FilterSubject: prefix + ">",
		Description:   "parley processors: expiry markers of paused turns",
	})
	if err != nil {
		return err
	}
	base := context.WithoutCancel(ctx)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if m.Headers().Get(jetstream.MarkerReasonHeader) != "MaxAge" {
			_ = m.Ack() // a write, delete or purge: not an expiry
			return
		}
		if err := fn(base, strings.TrimPrefix(m.Subject(), prefix)); err != nil {
			_ = m.NakWithDelay(time.Second)
			return
		}
		_ = m.Ack()
	}, jetstream.PullMaxMessages(64))
	if err != nil {
		return fmt.Errorf("consuming %s: %w", durable, err)
	}
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
	return nil
}
