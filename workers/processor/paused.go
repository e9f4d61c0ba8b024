package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// The paused turn is part of the thread record (Thread.Paused): whether a
// thread is paused, on which questions and what became of each is stored
// once, and every transition (pause, answer, resume, withdraw, expire) is
// one revision-checked write of the thread. What the thread record does
// not hold is the paused run's snapshot, which may be large
// (agent.MaxRunBytes): it is written once per pause, before the thread
// records the pause, as the pause record in kvstate.BucketPaused under
// "<thread>.<PARLEY_RUNS sequence>" with a per-key TTL until resumeGrace
// after the pause expires. The record's expiry marker is what ends the
// pause for the thread (onExpired); answers stop at the pause's ExpiresAt.

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
	// Arguments are the edited arguments of a confirmation accepted with
	// changes (schema.CheckEdit: canonical, checked against the
	// confirmation's input schema), handed to the agent as
	// events.Answer.Arguments: the call runs with these. Absent when the
	// person did not change the arguments.
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// PausedTurn is a turn waiting for the user: Thread.Paused. It stays in
// the thread after the pause is settled (answered, withdrawn, expired),
// so a late or repeated answer gets the verdict the first one got, until
// the thread's next pause replaces it.
type PausedTurn struct {
	TurnID    string    `json:"turnId"`
	RunID     string    `json:"runId"`
	Agent     string    `json:"agent"`
	CreatedAt time.Time `json:"createdAt"`
	// ExpiresAt is when the questions stop taking answers; the pause
	// record's TTL ends resumeGrace later (recordUntil), to the second.
	ExpiresAt    time.Time     `json:"expiresAt"`
	Elicitations []Elicitation `json:"elicitations"`
	// TraceParent is the W3C trace context the turn started in, so the
	// resume joins the same trace.
	TraceParent string `json:"traceparent,omitempty"`
	// Resumed is set once every elicitation is settled and the turn
	// resumed (in the same write).
	Resumed bool `json:"resumed,omitempty"`
	// RunSeq is the PARLEY_RUNS stream sequence of the run.paused event.
	RunSeq uint64 `json:"runSeq,omitempty"`
	// WithdrawnBy is the turn.requested event whose message superseded the
	// turn, and Withdrawn the questions it withdrew, so a redelivery of
	// that message announces them even if the first attempt died before
	// announcing.
	WithdrawnBy string   `json:"withdrawnBy,omitempty"`
	Withdrawn   []string `json:"withdrawn,omitempty"`
	// Grants is how many of the thread's grants (Thread.Shared) may
	// answer these questions besides the owner: those made before the
	// turn's message was sent (QueuedMessage.Grants). A share covers the
	// questions of the owner's messages sent after it, never a question
	// of an earlier message (mayAnswer). nil (a pause recorded in the
	// thread by a version before grants): every grant. A pause adopted
	// from an earlier version's record of its own gets the grants made
	// before its adoption when the thread lost its turn's (adoptLegacy).
	Grants *int `json:"grants,omitempty"`
	// Record is the key of the pause record in kvstate.BucketPaused (the
	// snapshot; its expiry ends the pause): scheduledPauseKey(thread,
	// RunSeq), or pauseKey(thread, RunSeq) on a server without message
	// schedules (and as the release before them wrote it), or the thread
	// ID for a pause an earlier version stored (adoptLegacy).
	Record string `json:"record"`
	// Effects are the tool calls the turn's run executed before it
	// paused (run.paused), and EffectsOmitted how many more ran: the
	// history gets them when the turn ends without its run's outcome
	// (superseded, expired, abandoned).
	Effects        []events.ToolEffect `json:"effects,omitempty"`
	EffectsOmitted int                 `json:"effectsOmitted,omitempty"`
}

// Find returns the elicitation with id, or nil (also on a nil p).
func (p *PausedTurn) Find(id string) *Elicitation {
	if p == nil {
		return nil
	}
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

// pauseKey is the key of a pause record with a per-key TTL:
// "<thread>.<runSeq>" (thread IDs have no dots), one key per pause, so a
// record is written once.
func pauseKey(thread string, runSeq uint64) string {
	return thread + "." + strconv.FormatUint(runSeq, 10)
}

// scheduledToken ends the key of a scheduled pause record
// (scheduledPauseKey).
const scheduledToken = "pause"

// scheduledPauseKey is the key of a pause record that expires by a
// message schedule: "<thread>.<runSeq>.pause". Its third token keeps it
// out of the expiry-marker watcher's filter ("$KV.parley_paused.*" and
// ".*.*", the keys of records with a TTL), so that watcher is not
// delivered its write; its expiry is stored under pauseExpiryKey, which
// the other watcher receives.
func scheduledPauseKey(thread string, runSeq uint64) string {
	return pauseKey(thread, runSeq) + "." + scheduledToken
}

// pauseExpirySuffix ends the key of a thread's pause expiries
// (pauseExpiryKey); its token count (3, with the thread's) is no record
// key's, and its second token no run sequence.
const pauseExpirySuffix = "." + scheduledToken + ".expired"

// pauseExpiryKey is the key under which the expiries of a thread's
// scheduled pause records are stored (kvstate.BucketOptions.ExpiryKey):
// "<thread>.pause.expired", one key per thread, so the bucket keeps one
// expiry per thread (the latest: a thread pauses again only after its
// earlier pause ended, so a replaced expiry that was never read changed
// nothing) and the server stores one marker per thread when it goes.
// The expiry names its record (kvstate.ExpiredValueKey). The one case
// where a replaced expiry mattered: a later pause under a shorter
// --pause-ttl expiring before the earlier pause's record, and no
// processor running between the two expiries; that pause then ends
// with the thread's next message (announced as expired then).
func pauseExpiryKey(recordKey string) string {
	return threadOfPauseKey(recordKey) + pauseExpirySuffix
}

// threadOfPauseKey returns the thread of a pause record's key (a key
// without a dot is an earlier version's record, named by its thread).
func threadOfPauseKey(key string) string {
	thread, _, _ := strings.Cut(key, ".")
	return thread
}

// pauseFormat is the format version of the pause records this code
// writes; legacyPauseFormat is the earlier version's, whose record was the
// whole paused turn (read by adoptLegacy). Any other fails closed with
// kvstate.ErrIncompatible.
const (
	pauseFormat       = 2
	legacyPauseFormat = 1
)

// pauseRecord is the record of one pause in kvstate.BucketPaused: what the
// run needs to resume. Written once, never changed; it expires with the
// pause.
type pauseRecord struct {
	Format    int             `json:"format"`
	Thread    string          `json:"thread"`
	TurnID    string          `json:"turnId"`
	RunID     string          `json:"runId"`
	RunSeq    uint64          `json:"runSeq,omitempty"`
	ExpiresAt time.Time       `json:"expiresAt"`
	Snapshot  json.RawMessage `json:"snapshot"`
}

// pauseBucket keeps pause records in kvstate.BucketPaused.
type pauseBucket struct {
	b *kvstate.Bucket[json.RawMessage]
}

// openPauses creates or updates the pause records' bucket (per-key TTL,
// and message schedules when schedules is set and the server has them).
func openPauses(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int, schedules bool) (*pauseBucket, error) {
	b, err := kvstate.OpenBucket[json.RawMessage](ctx, js, kvstate.BucketPaused,
		kvstate.BucketOptions{Storage: storage, Replicas: replicas, PerKeyTTL: true, Schedules: schedules, ExpiryKey: pauseExpiryKey})
	if err != nil {
		return nil, err
	}
	return &pauseBucket{b: b}, nil
}

// Scheduled reports whether records expire by message schedules
// (scheduledPauseKey) rather than per-key TTLs (pauseKey).
func (s *pauseBucket) Scheduled() bool { return s.b.Scheduled() }

// Create stores rec under key with a TTL until until, in one write; a
// live record already under key (a redelivered pause: the same content,
// from an earlier attempt) counts as stored, and rec's ExpiresAt becomes
// the stored one's (the record's TTL was set by it). kvstate.ErrExpired
// when until has passed or the key's record expired already (a pause
// redelivered after its TTL: a key is written once).
func (s *pauseBucket) Create(ctx context.Context, key string, rec *pauseRecord, until time.Time) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = s.b.CreateNewUntil(ctx, key, data, until)
	if !errors.Is(err, kvstate.ErrConflict) {
		return err
	}
	switch raw, _, err := s.b.Get(ctx, key); {
	case err == nil:
		keepStoredExpiry(key, raw, rec)
		return nil
	case errors.Is(err, kvstate.ErrNotFound):
		return fmt.Errorf("the pause record %s expired before the thread recorded the pause: %w", key, kvstate.ErrExpired)
	case errors.Is(err, kvstate.ErrIncompatible):
		return nil // stored; whoever reads it fails closed
	default:
		return err
	}
}

// Extend rewrites the record under key, unchanged (its content is written
// once), with a TTL until until: the record of a resumed pause outlives a
// short pause's grace by resumeGrace, so the resuming answer's
// redelivery after a crash still finds the run's snapshot
// (Processor.keepForResume). kvstate.ErrNotFound when the record
// expired. A record rewritten meanwhile (by another replica's extension)
// is left as it is.
func (s *pauseBucket) Extend(ctx context.Context, key string, until time.Time) error {
	raw, rev, err := s.b.Get(ctx, key)
	if err != nil && !errors.Is(err, kvstate.ErrIncompatible) {
		return err
	}
	_, err = s.b.UpdateUntil(ctx, key, raw, rev, until)
	if errors.Is(err, kvstate.ErrConflict) {
		// Rewritten meanwhile (another replica's extension), or expired
		// (its marker is the key's last entry).
		_, _, err = s.b.Get(ctx, key)
		if errors.Is(err, kvstate.ErrIncompatible) {
			return nil
		}
	}
	return err
}

// keepStoredExpiry sets rec's ExpiresAt to that of the record raw already
// stored under key, when this version reads it.
func keepStoredExpiry(key string, raw json.RawMessage, rec *pauseRecord) {
	if stored, _, err := decodePause(key, raw); err == nil && !stored.ExpiresAt.IsZero() {
		rec.ExpiresAt = stored.ExpiresAt
	}
}

// Load returns the raw record under key: kvstate.ErrNotFound when there is
// none (expired).
func (s *pauseBucket) Load(ctx context.Context, key string) (json.RawMessage, error) {
	v, _, err := s.b.Get(ctx, key)
	return v, err
}

// resumeGrace is how long a pause record outlives its pause's expiresAt
// (at most the pause's TTL): an answer accepted in the pause's last
// moments, whose resume a crash delayed until the redelivery (after
// AckWait), still finds the run's snapshot. The pause ends for answers at
// expiresAt; the record's expiry, which announces it, comes this much
// later.
const resumeGrace = 2 * bus.DefaultAckWait

// recordUntil is when the record of a pause of ttl expiring at expiresAt
// expires.
func recordUntil(expiresAt time.Time, ttl time.Duration) time.Time {
	return expiresAt.Add(min(resumeGrace, ttl))
}

// pauseRecords is the processor's access to pause records: the store and a
// cache of the records this replica wrote or read. A record's content is
// written once under a key of its own and never changed (an extension
// rewrites it unchanged, with a later TTL), so a cached one is always
// current while it lives.
type pauseRecords struct {
	store pauseStore
	cache *kvstate.RevCache[pauseRecord] // nil: caching off
	// scheduled: the store's records expire by message schedules.
	scheduled bool
}

// newPauseRecords wraps store, with a cache when cache is set. A store
// with a Scheduled method reporting true gets scheduledPauseKey keys.
func newPauseRecords(store pauseStore, cache bool) *pauseRecords {
	s, ok := store.(interface{ Scheduled() bool })
	return &pauseRecords{store: store, cache: kvstate.NewRevCache[pauseRecord](cache), scheduled: ok && s.Scheduled()}
}

// key is the key of the record of thread's pause by the run.paused at
// runSeq.
func (r *pauseRecords) key(thread string, runSeq uint64) string {
	if r.scheduled {
		return scheduledPauseKey(thread, runSeq)
	}
	return pauseKey(thread, runSeq)
}

// save stores rec until until (pauseBucket.Create) and caches it.
func (r *pauseRecords) save(ctx context.Context, key string, rec *pauseRecord, until time.Time) error {
	rec.Format = pauseFormat
	if err := r.store.Create(ctx, key, rec, until); err != nil {
		return err
	}
	r.cache.Put(key, rec, 1)
	return nil
}

// load returns the record under key (cached, or read): kvstate.ErrNotFound
// when it expired, kvstate.ErrIncompatible when it has a format this code
// does not read. A cached record past its ExpiresAt is read again, so an
// expiry is seen as the server decides it.
func (r *pauseRecords) load(ctx context.Context, key string) (*pauseRecord, *legacyPause, error) {
	if rec, _, ok := r.cache.Get(key); ok && time.Now().Before(rec.ExpiresAt) {
		return rec, nil, nil
	}
	raw, err := r.store.Load(ctx, key)
	if err != nil {
		r.cache.Drop(key)
		return nil, nil, err
	}
	rec, legacy, err := decodePause(key, raw)
	if err != nil {
		return nil, nil, err
	}
	r.cache.Put(key, rec, 1)
	return rec, legacy, nil
}
