package kvstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/bus"
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
	old := &oldV
	if err == nil && old.Format != PausedFormat {
		err = fmt.Errorf("paused turn of %s has format %d, want %d: %w", p.Thread, old.Format, PausedFormat, ErrIncompatible)
	}
	if err == nil && old.TurnID == p.TurnID && old.RunID == p.RunID && sameIDs(old, p) {
		return oldRev, nil // a redelivered pause: already stored
	}
	// PARLEY_RUNS order decides, whatever the turn: a pause read from an
	// earlier stream position than the stored record's (a processor that
	// froze past AckWait, say) is stale even when the stored record is a
	// later turn's, and must not replace it.
	if err == nil && p.RunSeq != 0 && p.RunSeq <= old.RunSeq {
		return 0, fmt.Errorf("thread %s: pause at runs sequence %d is not newer than the stored one (%d, turn %s): %w",
			p.Thread, p.RunSeq, old.RunSeq, old.TurnID, ErrStale)
	}
	if err == nil && old.TurnID == p.TurnID && !old.Settled() {
		return 0, fmt.Errorf("thread %s already has pending elicitations %v: %w", p.Thread, old.PendingIDs(), ErrConflict)
	}
	return s.b.UpdateUntil(ctx, p.Thread, *p, oldRev, p.ExpiresAt)
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
	for range 20 {
		p, rev, err := s.Load(ctx, thread)
		if err != nil {
			return nil, err
		}
		if err := fn(p); err != nil {
			if errors.Is(err, ErrNoChange) {
				return p, nil
			}
			return nil, err
		}
		if _, err := s.Update(ctx, p, rev); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return nil, err
		}
		return p, nil
	}
	return nil, fmt.Errorf("updating the paused turn of %s: too many concurrent writers: %w", thread, ErrConflict)
}

// Delete removes the record of thread if still at rev.
func (s *PausedStore) Delete(ctx context.Context, thread string, rev uint64) error {
	return s.b.Delete(ctx, thread, rev)
}

// WatchExpired calls fn(thread) for every paused turn the server expired.
func (s *PausedStore) WatchExpired(ctx context.Context, fn func(thread string)) error {
	return s.b.WatchExpired(ctx, fn)
}

// Thread states.
const (
	ThreadIdle    = "idle"
	ThreadRunning = "running"
	ThreadPaused  = "paused"
)

// QueuedMessage is a user message waiting for the thread's active turn.
type QueuedMessage struct {
	EventID string `json:"eventId"`
	// TraceParent is the trace context the message arrived in.
	TraceParent string             `json:"traceparent,omitempty"`
	Agent       string             `json:"agent"`
	User        string             `json:"user,omitempty"`
	Message     schema.ChatMessage `json:"message"`
}

// Expiry names a paused turn that expired and its questions.
type Expiry struct {
	TurnID         string    `json:"turnId"`
	ElicitationIDs []string  `json:"elicitationIds"`
	At             time.Time `json:"at"`
}

// Supersession is a paused turn ended by a new user message.
type Supersession struct {
	// TurnID is the superseded turn.
	TurnID string `json:"turnId"`
	// By is the turn.requested event ID of the superseding message.
	By string `json:"by"`
	// Started is the turn.requested event ID of the turn started then (the
	// head of the queue, which is By only when nothing was queued).
	Started string `json:"started,omitempty"`
	// Cancelled are the questions withdrawn; Expired those found expired.
	Cancelled []string `json:"cancelled,omitempty"`
	Expired   []string `json:"expired,omitempty"`
}

// ThreadFormat is the format version of Thread.
const ThreadFormat = 1

// Thread is a conversation: its state, bounded history, active turn and the
// messages queued behind it (FIFO).
type Thread struct {
	Format int    `json:"format"`
	ID     string `json:"id"`
	State  string `json:"state"`
	Agent  string `json:"agent,omitempty"`
	TurnID string `json:"turnId,omitempty"`
	RunID  string `json:"runId,omitempty"`
	// LastTurnSeq is the highest PARLEY_INPUT stream sequence of a
	// turn.requested recorded for the thread (started, queued, rejected or
	// dead-lettered): later messages wait for earlier ones (FIFO).
	LastTurnSeq uint64 `json:"lastTurnSeq,omitempty"`
	// InputSeqs says LastTurnSeq and PauseMark are PARLEY_INPUT sequences;
	// a record without it was written when input was in PARLEY_CHAT, and
	// its sequences do not compare with PARLEY_INPUT's.
	InputSeqs bool `json:"inputSeqs,omitempty"`
	// RunSeq is the PARLEY_RUNS stream sequence of the last run outcome
	// applied to the thread (any turn): an outcome at or below it is stale
	// (a redelivery after the turn moved on) and is not applied again.
	RunSeq uint64 `json:"runSeq,omitempty"`
	// PauseMark is, while the active turn is paused, the stream sequence
	// of the thread's last turn.requested when the pause was recorded: a
	// message at or below it was sent before the turn paused and queues
	// behind it; only a later message supersedes the paused turn.
	PauseMark uint64 `json:"pauseMark,omitempty"`
	// Superseded records the last paused turn a new message superseded and
	// what that withdrew, so a redelivery of the message announces it.
	Superseded *Supersession `json:"superseded,omitempty"`
	// TraceParent is the W3C trace context the active turn started in.
	TraceParent string `json:"traceparent,omitempty"`
	// Owner is the party whose turn.requested started the thread (set by
	// the first message recorded); Shared the parties it granted the
	// thread to (TurnRequested.Share, at most events.MaxShares). Anyone
	// else's message or answer is rejected forbidden. A record without an
	// Owner (written before ownership existed) is claimed by its next
	// message.
	Owner  *events.Identity  `json:"owner,omitempty"`
	Shared []events.Identity `json:"shared,omitempty"`
	// StartedBy is the ID of the turn.requested event that started the
	// active turn.
	StartedBy string               `json:"startedBy,omitempty"`
	History   []schema.ChatMessage `json:"history,omitempty"`
	Queue     []QueuedMessage      `json:"queue,omitempty"`
	// Pending lists the elicitation IDs the paused turn waits on.
	Pending []string `json:"pending,omitempty"`
	// Expired records the last paused turn that expired, so every replica
	// that sees the expiry marker announces the same event.
	Expired *Expiry `json:"expired,omitempty"`
	// Refused lists recent turn.requested event IDs refused as thread_busy,
	// so a redelivery repeats the refusal.
	Refused []string `json:"refused,omitempty"`
	// Handled lists recent event IDs already applied (dedup on redelivery).
	Handled   []string  `json:"handled,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// MaxHistory bounds Thread.History (oldest messages drop first).
const MaxHistory = 50

// MaxQueue bounds Thread.Queue: a message beyond it is rejected. With
// message texts of at most 32 KiB the queue stays under 512 KiB.
const MaxQueue = 16

// MaxHistoryBytes bounds the text of Thread.History: the oldest messages
// drop first, so the thread record stays well under the KV value limit.
const MaxHistoryBytes = 256 << 10

const maxHandled = 64

// Append adds messages to the history, keeping at most MaxHistory.
func (t *Thread) Append(msgs ...schema.ChatMessage) {
	t.History = append(t.History, msgs...)
	if n := len(t.History); n > MaxHistory {
		t.History = append([]schema.ChatMessage(nil), t.History[n-MaxHistory:]...)
	}
	size := 0
	for _, m := range t.History {
		size += historySize(m)
	}
	drop := 0
	for size > MaxHistoryBytes && drop < len(t.History)-1 {
		size -= historySize(t.History[drop])
		drop++
	}
	if drop > 0 {
		t.History = append([]schema.ChatMessage(nil), t.History[drop:]...)
	}
}

// historySize is what m counts against MaxHistoryBytes: its text and the
// JSON of its content blocks and _meta.
func historySize(m schema.ChatMessage) int {
	n := len(m.Text)
	if len(m.Content) > 0 {
		b, _ := json.Marshal(m.Content)
		n += len(b)
	}
	if len(m.Meta) > 0 {
		b, _ := json.Marshal(m.Meta)
		n += len(b)
	}
	return n
}

// MarkHandled records an applied event ID; Seen reports one.
func (t *Thread) MarkHandled(id string) {
	t.Handled = append(t.Handled, id)
	if n := len(t.Handled); n > maxHandled {
		t.Handled = append([]string(nil), t.Handled[n-maxHandled:]...)
	}
}

// Refuse records a refused message ID (bounded like Handled).
func (t *Thread) Refuse(id string) {
	t.Refused = append(t.Refused, id)
	if n := len(t.Refused); n > maxHandled {
		t.Refused = append([]string(nil), t.Refused[n-maxHandled:]...)
	}
}

// Seen reports whether the event ID was already applied to the thread.
func (t *Thread) Seen(id string) bool {
	for _, h := range t.Handled {
		if h == id {
			return true
		}
	}
	return false
}

// ThreadStore keeps threads.
type ThreadStore struct {
	b *Bucket[Thread]
}

// OpenThreads creates or updates the threads bucket; ttl bounds how long an
// untouched thread is kept (0: forever).
func OpenThreads(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int, ttl time.Duration) (*ThreadStore, error) {
	b, err := OpenBucket[Thread](ctx, js, BucketThreads, BucketOptions{Storage: storage, Replicas: replicas, TTL: ttl})
	if err != nil {
		return nil, err
	}
	return &ThreadStore{b: b}, nil
}

// Load returns the thread (a new idle one, revision 0, if absent).
func (s *ThreadStore) Load(ctx context.Context, id string) (*Thread, uint64, error) {
	t, rev, err := s.b.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return &Thread{Format: ThreadFormat, ID: id, State: ThreadIdle}, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if t.Format != ThreadFormat {
		return nil, 0, fmt.Errorf("thread %s has format %d, want %d: %w", id, t.Format, ThreadFormat, ErrIncompatible)
	}
	return &t, rev, nil
}

// Save writes t if it is still at rev (0: must not exist); ErrConflict otherwise.
func (s *ThreadStore) Save(ctx context.Context, t *Thread, rev uint64) (uint64, error) {
	t.Format = ThreadFormat
	t.UpdatedAt = time.Now().UTC()
	if rev == 0 {
		return s.b.Create(ctx, t.ID, *t, 0)
	}
	return s.b.Update(ctx, t.ID, *t, rev, 0)
}

// Reset replaces the thread with a new idle one, whatever is stored (used
// when the stored record is incompatible, so the thread stays usable).
func (s *ThreadStore) Reset(ctx context.Context, id string) error {
	_, err := s.b.Put(ctx, id, Thread{Format: ThreadFormat, ID: id, State: ThreadIdle, UpdatedAt: time.Now().UTC()})
	return err
}

// ErrNoChange may be returned by a Mutate function to skip the write.
var ErrNoChange = errors.New("kvstate: no change")

// Mutate loads the thread, applies fn and saves it with a revision check,
// retrying on conflict (up to 20 times). fn may run more than once and must
// only change t. If fn returns ErrNoChange nothing is written and Mutate
// returns the loaded thread and nil; any other error is returned as is.
func (s *ThreadStore) Mutate(ctx context.Context, id string, fn func(t *Thread) error) (*Thread, error) {
	return s.mutate(ctx, id, nil, 0, fn)
}

// MutateAt is Mutate starting from t as Load returned it at rev, which
// saves the first read when the caller has just loaded the thread: fn is
// applied to t itself first (t is changed), and a revision conflict
// reloads as Mutate does.
func (s *ThreadStore) MutateAt(ctx context.Context, t *Thread, rev uint64, fn func(t *Thread) error) (*Thread, error) {
	return s.mutate(ctx, t.ID, t, rev, fn)
}

func (s *ThreadStore) mutate(ctx context.Context, id string, loaded *Thread, loadedRev uint64, fn func(t *Thread) error) (*Thread, error) {
	for range 20 {
		t, rev := loaded, loadedRev
		loaded = nil
		if t == nil {
			var err error
			if t, rev, err = s.Load(ctx, id); err != nil {
				return nil, err
			}
		}
		if err := fn(t); err != nil {
			if errors.Is(err, ErrNoChange) {
				return t, nil
			}
			return nil, err
		}
		if _, err := s.Save(ctx, t, rev); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return nil, err
		}
		return t, nil
	}
	return nil, fmt.Errorf("updating thread %s: too many concurrent writers: %w", id, ErrConflict)
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
