package kvstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/internal/retry"
)

// BucketOptions configures a bucket.
type BucketOptions struct {
	// Storage. Optional. Default: jetstream.FileStorage.
	Storage jetstream.StorageType
	// Replicas. Optional. Default: 1.
	Replicas int
	// TTL is the bucket-wide maximum age of a value. Optional. Default: none.
	TTL time.Duration
	// PerKeyTTL enables per-key TTLs and expiry markers (LimitMarkerTTL).
	PerKeyTTL bool
	// Schedules makes the bucket's expiring writes (CreateNewUntil,
	// UpdateUntil) JetStream message schedules instead of per-key TTLs,
	// where the server has them (API level 2, nats-server 2.12+; see
	// Bucket.Scheduled): the value is stored with "Nats-Schedule: @at
	// <expiry>", and at that time the server removes it and stores an
	// empty value with the header SchedulerHeader (naming the value's
	// subject: ExpiredValueKey) under ExpiryKey(key), kept ExpiryKeep. A
	// consumer filtered on the expiry keys then sees each expiry and none
	// of the writes, where an expiry marker shares its key's subject with
	// every write of the key. OpenBucket turns the stream's
	// AllowMsgSchedules on (it cannot be turned off again) with
	// DiscardOld (the server refuses schedules with DiscardNew; the
	// bucket has no message or byte limit, so nothing is discarded
	// either way). Requires PerKeyTTL. Optional. Default: off.
	Schedules bool
	// ExpiryKey names the key under which the expiry of the scheduled
	// value under key is stored. Expiries stored under one key keep only
	// the latest (a rollup: an earlier one not yet read by a consumer is
	// replaced), and the server stores an expiry marker on that key only
	// when the latest goes, ExpiryKeep after it: so a key shared by many
	// values (a thread's pauses) bounds both the expiries kept and the
	// markers to one per shared key. It must not return a key the bucket
	// stores values under. Optional. Default: key + ".expired".
	ExpiryKey func(key string) string
	// StartupTimeout bounds how long OpenBucket retries (a context
	// carrying retry.WithStartupPolicy overrides it). Optional. Default:
	// retry.DefaultStartupTimeout; negative: one try.
	StartupTimeout time.Duration
}

// Bucket is a JSON-valued KV bucket with revision-checked writes.
type Bucket[T any] struct {
	kv        jetstream.KeyValue
	js        jetstream.JetStream
	name      string
	perKey    bool
	scheduled bool
	expiryKey func(string) string
}

// markerTTL is how long an expiry marker lives (the server's minimum is 1s).
const markerTTL = time.Minute

// OpenBucket creates the bucket name, or updates it when it exists with a
// different configuration (history, TTL, storage, replicas, maximum value
// size, limit-marker TTL), and returns it. Like bus.Client.EnsureStreams it
// is safe for every replica at once on a fresh cluster: it creates first
// (an existing bucket with the same configuration counts as created) and
// retries with backoff and jitter until the start-up policy's deadline
// (retry.StartupPolicy of ctx, else opts.StartupTimeout), every try logged to
// the policy's logger. A storage difference, which JetStream cannot change
// in place, fails at once with an error naming the bucket and the field.
func OpenBucket[T any](ctx context.Context, js jetstream.JetStream, name string, opts BucketOptions) (*Bucket[T], error) {
	if opts.Replicas <= 0 {
		opts.Replicas = 1
	}
	cfg := jetstream.KeyValueConfig{
		Bucket: name, History: 1, TTL: opts.TTL, Storage: opts.Storage, Replicas: opts.Replicas,
		MaxValueSize: 1 << 20,
	}
	if opts.PerKeyTTL {
		cfg.LimitMarkerTTL = markerTTL
	}
	p := retry.StartupPolicy(ctx, retry.Policy{Timeout: opts.StartupTimeout})
	health.RequireStream(js, "KV_"+name)
	var kv jetstream.KeyValue
	scheduled := false
	err := retry.Do(ctx, "ensuring bucket "+name, p, func(ctx context.Context) error {
		var err error
		if kv, err = js.CreateKeyValue(ctx, cfg); err == nil {
			// A new replicated bucket answers reads once its stream has
			// a leader: wait for that here, so the first Get of the
			// caller does not meet "no responders".
			if _, err = kv.Status(ctx); err != nil {
				return retry.NotVisibleYet(err)
			}
		} else if !errors.Is(err, jetstream.ErrBucketExists) {
			return err
		} else if kv, err = js.KeyValue(ctx, name); err != nil {
			return retry.NotVisibleYet(err)
		} else if err = updateBucket(ctx, js, kv, cfg, p.Logger); err != nil {
			return err
		}
		if !opts.Schedules || !opts.PerKeyTTL {
			return nil
		}
		scheduled, err = enableSchedules(ctx, js, name, p.Logger)
		return err
	})
	if err != nil {
		return nil, err
	}
	expiryKey := opts.ExpiryKey
	if expiryKey == nil {
		expiryKey = func(key string) string { return key + ".expired" }
	}
	return &Bucket[T]{kv: kv, js: js, name: name, perKey: opts.PerKeyTTL, scheduled: scheduled, expiryKey: expiryKey}, nil
}

// BucketOf returns the Bucket over kv, a bucket its owner opened itself
// (with a configuration OpenBucket does not make), on js.
func BucketOf[T any](js jetstream.JetStream, kv jetstream.KeyValue) *Bucket[T] {
	return &Bucket[T]{kv: kv, js: js, name: kv.Bucket(), expiryKey: func(key string) string { return key + ".expired" }}
}

// updateBucket brings the existing bucket kv to cfg where they differ
// (BucketConfigChanges). A stream with message schedules on is updated
// from its own configuration: jetstream.UpdateKeyValue would turn them
// off, which the server refuses.
func updateBucket(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, cfg jetstream.KeyValueConfig, log *slog.Logger) error {
	st, err := kv.Status(ctx)
	if err != nil {
		return retry.NotVisibleYet(err)
	}
	changes, err := BucketConfigChanges(st.Config(), cfg)
	if err != nil || len(changes) == 0 {
		return err
	}
	if log != nil {
		log.Info("updating bucket configuration", "bucket", cfg.Bucket, "changes", changes)
	}
	s, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if err != nil {
		return retry.NotVisibleYet(err)
	}
	sc := s.CachedInfo().Config
	if !sc.AllowMsgSchedules {
		_, err = js.UpdateKeyValue(ctx, cfg)
		return retry.RefusedUpdate(err)
	}
	// The fields BucketConfigChanges compares, mapped as
	// jetstream.UpdateKeyValue maps them.
	sc.MaxMsgsPerSubject = int64(max(cfg.History, 1))
	sc.MaxAge = cfg.TTL
	sc.Duplicates = 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < sc.Duplicates {
		sc.Duplicates = cfg.TTL
	}
	sc.Replicas = max(cfg.Replicas, 1)
	sc.MaxMsgSize = cfg.MaxValueSize
	if sc.MaxMsgSize == 0 {
		sc.MaxMsgSize = -1
	}
	sc.SubjectDeleteMarkerTTL = cfg.LimitMarkerTTL
	sc.Description = cfg.Description
	_, err = js.UpdateStream(ctx, sc)
	return retry.RefusedUpdate(err)
}

// minScheduleAPILevel is the JetStream API level of message schedules
// (nats-server 2.12).
const minScheduleAPILevel = 2

// enableSchedules turns message schedules on for bucket's stream (with
// DiscardOld, which they require) and reports whether it has them: false
// when the server's JetStream API level is below minScheduleAPILevel
// (logged once per call: the bucket's writes then use per-key TTLs).
func enableSchedules(ctx context.Context, js jetstream.JetStream, bucket string, log *slog.Logger) (bool, error) {
	stream := "KV_" + bucket
	ai, err := js.AccountInfo(ctx)
	if err != nil {
		return false, retry.NotVisibleYet(err)
	}
	if ai.API.Level < minScheduleAPILevel {
		if log != nil {
			log.Warn("the NATS server has no message schedules (nats-server 2.12+, JetStream API level 2); "+
				"values of this bucket expire by per-key TTL, and its watcher receives every write",
				"stream", stream, "api_level", ai.API.Level)
		}
		return false, nil
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return false, retry.NotVisibleYet(err)
	}
	sc := s.CachedInfo().Config
	if !sc.AllowMsgSchedules {
		if log != nil {
			log.Info("turning message schedules on", "stream", stream)
		}
		sc.AllowMsgSchedules, sc.Discard = true, jetstream.DiscardOld
		info, err := js.UpdateStream(ctx, sc)
		if err != nil {
			return false, retry.RefusedUpdate(err)
		}
		if !info.CachedInfo().Config.AllowMsgSchedules {
			return false, nil
		}
	}
	// The empty value every expiry copies (expirySourceKey).
	_, err = js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + bucket + "." + expirySourceKey},
		jetstream.WithExpectLastSequencePerSubject(0))
	if err != nil && !IsConflict(err) {
		return false, err
	}
	return true, nil
}

// expirySourceKey holds the empty value a scheduled expiry copies
// (Nats-Schedule-Source), so that an expiry does not store the expired
// value's content a second time. It is written once, when the bucket is
// opened with schedules. The '=' keeps it apart from any key made of
// tokens (A-Z a-z 0-9 _ -). Should it be gone, an expiry copies the
// expired value instead, which changes nothing but its size.
const expirySourceKey = "=expiry-source"

// ExpiryKeep is how long the expiry of a scheduled value is kept
// (Nats-Schedule-TTL): a watcher that starts within ExpiryKeep of an
// expiry is still delivered it (a durable consumer that was down), unless
// a later expiry under the same key replaced it.
const ExpiryKeep = 24 * time.Hour

// Scheduled reports whether the bucket's expiring writes are message
// schedules (BucketOptions.Schedules, on a server that has them): an
// expiry is then stored under BucketOptions.ExpiryKey(key), not as a
// marker on key.
func (b *Bucket[T]) Scheduled() bool { return b.scheduled }

// SchedulerHeader names, on a scheduled value's expiry, the subject of
// the value that expired ("$KV.<bucket>.<key>").
const SchedulerHeader = "Nats-Scheduler"

// ExpiredValueKey returns the key of the value of bucket whose expiry a
// message with headers h is (from SchedulerHeader); ok is false for any
// other message, such as the marker stored when the expiry itself goes.
func ExpiredValueKey(bucket string, h nats.Header) (key string, ok bool) {
	key, ok = strings.CutPrefix(h.Get(SchedulerHeader), "$KV."+bucket+".")
	return key, ok && key != ""
}

// expiryOpts are the publish options that make a value written now expire
// at expiresAt: a message schedule firing at expiresAt rounded up to the
// second (the schedule's granularity) when the bucket is scheduled, else
// a per-key TTL (TTLUntil). ErrExpired when expiresAt has passed.
func (b *Bucket[T]) expiryOpts(key string, expiresAt time.Time) ([]jetstream.PublishOpt, error) {
	ttl, err := TTLUntil(expiresAt, time.Now())
	if err != nil {
		return nil, err
	}
	if !b.scheduled {
		return []jetstream.PublishOpt{jetstream.WithMsgTTL(ttl)}, nil
	}
	return ScheduleOpts(b.name, b.expiryKey(key), expiresAt), nil
}

// ScheduleOpts are the publish options that store a value in the
// scheduled bucket (BucketOptions.Schedules) so that it expires at
// expiresAt, rounded up to the second (the schedule's granularity), with
// its expiry stored under expiryKey (BucketOptions.ExpiryKey of the
// value's key): "@at" schedule, that target with a rollup, source
// expirySourceKey, kept ExpiryKeep. CreateNewUntil and UpdateUntil use
// them; a writer that publishes straight to the bucket (the bench's
// seeder) uses them too.
func ScheduleOpts(bucket, expiryKey string, expiresAt time.Time) []jetstream.PublishOpt {
	at := expiresAt.UTC()
	if t := at.Truncate(time.Second); !t.Equal(at) {
		at = t.Add(time.Second)
	}
	return []jetstream.PublishOpt{jetstream.WithScheduleAt(at),
		jetstream.WithScheduleTarget("$KV." + bucket + "." + expiryKey), jetstream.WithScheduleRollup(),
		jetstream.WithScheduleSource("$KV." + bucket + "." + expirySourceKey),
		jetstream.WithScheduleTTL(ExpiryKeep)}
}

// BucketConfigChanges lists the fields of want that differ in have, as
// "field: have → want". A storage difference (JetStream cannot change it
// in place) is a permanent error naming the bucket and the field.
func BucketConfigChanges(have, want jetstream.KeyValueConfig) ([]string, error) {
	if have.Storage != want.Storage {
		return nil, retry.Permanent(fmt.Errorf("bucket %s: storage is %s on the server but %s is configured (--storage): "+
			"JetStream cannot change a bucket's storage; use --storage %s, or back up and delete the bucket",
			want.Bucket, have.Storage, want.Storage, have.Storage))
	}
	var out []string
	diff := func(field string, h, w any) { out = append(out, fmt.Sprintf("%s: %v → %v", field, h, w)) }
	if max(have.History, 1) != max(want.History, 1) {
		diff("history", have.History, want.History)
	}
	if have.TTL != want.TTL {
		diff("ttl", have.TTL, want.TTL)
	}
	if max(have.Replicas, 1) != max(want.Replicas, 1) {
		diff("replicas", have.Replicas, want.Replicas)
	}
	if want.MaxValueSize != 0 && have.MaxValueSize != want.MaxValueSize {
		diff("max_value_size", have.MaxValueSize, want.MaxValueSize)
	}
	if have.LimitMarkerTTL != want.LimitMarkerTTL {
		diff("limit_marker_ttl", have.LimitMarkerTTL, want.LimitMarkerTTL)
	}
	if have.Description != want.Description {
		diff("description", have.Description, want.Description)
	}
	return out, nil
}

// KV returns the underlying key-value store.
func (b *Bucket[T]) KV() jetstream.KeyValue { return b.kv }

// Get returns the value under key and its revision, or ErrNotFound.
func (b *Bucket[T]) Get(ctx context.Context, key string) (T, uint64, error) {
	ctx, cancel := retry.WithRequestTimeout(ctx) // a lost reply fails, not hangs
	defer cancel()
	var v T
	e, err := b.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return v, 0, ErrNotFound
	}
	if err != nil {
		return v, 0, fmt.Errorf("reading %s/%s: %w", b.name, key, err)
	}
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		// The revision lets a caller replace the record it cannot read.
		return v, e.Revision(), fmt.Errorf("decoding %s/%s: %w (%w)", b.name, key, err, ErrIncompatible)
	}
	return v, e.Revision(), nil
}

// Create stores v under key if no live value is there (ErrConflict
// otherwise). ttl > 0 sets a per-key TTL (whole seconds, at least 1s;
// the bucket must have PerKeyTTL).
func (b *Bucket[T]) Create(ctx context.Context, key string, v T, ttl time.Duration) (uint64, error) {
	ctx, cancel := retry.WithRequestTimeout(ctx) // a lost reply fails, not hangs
	defer cancel()
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encoding %s/%s: %w", b.name, key, err)
	}
	var opts []jetstream.KVCreateOpt
	if ttl > 0 {
		opts = append(opts, jetstream.KeyTTL(roundTTL(ttl)))
	}
	rev, err := b.kv.Create(ctx, key, data, opts...)
	if IsConflict(err) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("creating %s/%s: %w", b.name, key, err)
	}
	return rev, nil
}

// Update replaces the value under key if its revision is still rev
// (ErrConflict otherwise). ttl > 0 keeps a per-key TTL: kv.Update would drop
// it, so the write goes straight to the KV subject with Nats-TTL and an
// expected last subject sequence. ttl <= 0 writes the value WITHOUT a TTL
// (it lives until deleted): a record that must expire is rewritten with
// UpdateUntil, which refuses a past expiry instead.
func (b *Bucket[T]) Update(ctx context.Context, key string, v T, rev uint64, ttl time.Duration) (uint64, error) {
	if ttl > 0 {
		return b.publish(ctx, "updating", key, v, rev, jetstream.WithMsgTTL(roundTTL(ttl)))
	}
	ctx, cancel := retry.WithRequestTimeout(ctx) // a lost reply fails, not hangs
	defer cancel()
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encoding %s/%s: %w", b.name, key, err)
	}
	nrev, err := b.kv.Update(ctx, key, data, rev)
	if IsConflict(err) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("updating %s/%s: %w", b.name, key, err)
	}
	return nrev, nil
}

// ErrExpired is returned by CreateUntil and UpdateUntil when the record's
// expiry time has passed: the record must be treated as expired, never
// written without a TTL.
var ErrExpired = errors.New("kvstate: record expired")

// TTLUntil returns the per-key TTL that makes a value written at now live
// until expiresAt: rounded up to whole seconds (the server's granularity),
// so the key outlives expiresAt by less than one second and never expires
// before it. It fails with ErrExpired when expiresAt is not after now: a
// TTL of zero would mean "no TTL", and the value would never expire.
func TTLUntil(expiresAt, now time.Time) (time.Duration, error) {
	d := expiresAt.Sub(now)
	if d <= 0 {
		return 0, fmt.Errorf("expired at %s, %v ago: %w", expiresAt.UTC().Format(time.RFC3339Nano), -d, ErrExpired)
	}
	return roundTTL(d), nil
}

// CreateUntil is Create with a per-key TTL until expiresAt (see TTLUntil):
// ErrExpired when expiresAt has passed.
func (b *Bucket[T]) CreateUntil(ctx context.Context, key string, v T, expiresAt time.Time) (uint64, error) {
	ttl, err := TTLUntil(expiresAt, time.Now())
	if err != nil {
		return 0, fmt.Errorf("creating %s/%s: %w", b.name, key, err)
	}
	return b.Create(ctx, key, v, ttl)
}

// UpdateUntil is Update of a value that expires at expiresAt: a per-key
// TTL (see TTLUntil), or a message schedule in a scheduled bucket
// (BucketOptions.Schedules). ErrExpired when expiresAt has passed, so a
// rewrite never drops the expiry.
func (b *Bucket[T]) UpdateUntil(ctx context.Context, key string, v T, rev uint64, expiresAt time.Time) (uint64, error) {
	return b.writeUntil(ctx, "updating", key, v, rev, expiresAt)
}

// CreateNewUntil is CreateUntil in one write, for a key written once: it
// fails with ErrConflict when the key has any entry, a live value or a
// delete, purge or expiry marker, and with ErrExpired when expiresAt has
// passed. In a scheduled bucket (BucketOptions.Schedules) the value
// expires by a message schedule, and a key whose value expired has no
// entry left: a caller that must not write a key twice refuses it by
// expiresAt (for which it must compute the same expiresAt each time).
func (b *Bucket[T]) CreateNewUntil(ctx context.Context, key string, v T, expiresAt time.Time) (uint64, error) {
	return b.writeUntil(ctx, "creating", key, v, 0, expiresAt)
}

// CreateNew stores v under key, without a TTL, if the key never held a
// value: ErrConflict when it has any entry, a live value or a delete,
// purge or expiry marker (unlike Create, which writes over a marker), so
// a value deleted since is not brought back.
func (b *Bucket[T]) CreateNew(ctx context.Context, key string, v T) (uint64, error) {
	return b.publish(ctx, "creating", key, v, 0)
}

// writeUntil stores v under key if the key's last entry is at rev (0:
// none), expiring at expiresAt (expiryOpts).
func (b *Bucket[T]) writeUntil(ctx context.Context, verb, key string, v T, rev uint64, expiresAt time.Time) (uint64, error) {
	opts, err := b.expiryOpts(key, expiresAt)
	if err != nil {
		return 0, fmt.Errorf("%s %s/%s: %w", verb, b.name, key, err)
	}
	return b.publish(ctx, verb, key, v, rev, opts...)
}

// publish writes v under key straight to the bucket's subject with the
// publish options opts, if the key's last entry is at rev (0: none):
// ErrConflict otherwise. verb names the write in errors.
func (b *Bucket[T]) publish(ctx context.Context, verb, key string, v T, rev uint64, opts ...jetstream.PublishOpt) (uint64, error) {
	ctx, cancel := retry.WithRequestTimeout(ctx) // a lost reply fails, not hangs
	defer cancel()
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encoding %s/%s: %w", b.name, key, err)
	}
	ack, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + b.name + "." + key, Data: data},
		append(opts, jetstream.WithExpectLastSequencePerSubject(rev))...)
	if IsConflict(err) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("%s %s/%s: %w", verb, b.name, key, err)
	}
	return ack.Sequence, nil
}

// Put stores v under key unconditionally.
func (b *Bucket[T]) Put(ctx context.Context, key string, v T) (uint64, error) {
	ctx, cancel := retry.WithRequestTimeout(ctx) // a lost reply fails, not hangs
	defer cancel()
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encoding %s/%s: %w", b.name, key, err)
	}
	rev, err := b.kv.Put(ctx, key, data)
	if err != nil {
		return 0, fmt.Errorf("writing %s/%s: %w", b.name, key, err)
	}
	return rev, nil
}

// Delete removes key if its revision is still rev (rev 0: unconditionally).
func (b *Bucket[T]) Delete(ctx context.Context, key string, rev uint64) error {
	ctx, cancel := retry.WithRequestTimeout(ctx) // a lost reply fails, not hangs
	defer cancel()
	var opts []jetstream.KVDeleteOpt
	if rev > 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	err := b.kv.Delete(ctx, key, opts...)
	if IsConflict(err) {
		return ErrConflict
	}
	if err != nil {
		return fmt.Errorf("deleting %s/%s: %w", b.name, key, err)
	}
	return nil
}

// IsConflict reports whether err is JetStream refusing a revision-checked
// write because another writer got there first: a KV Create over an
// existing key (jetstream.ErrKeyExists), an Update or Delete whose
// expected revision is no longer the key's (jetstream.ErrKeyRevisionMismatch),
// or a publish whose expected last subject sequence is not the stream's.
// The server reports the last as API error 10071 on a single server and
// 10164 on a replicated (R>1) stream; both count. It is the one
// classifier of write conflicts in parley: callers retry (or give way)
// on true.
func IsConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrConflict) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var ae *jetstream.APIError
	return errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// roundTTL rounds up to whole seconds, minimum 1s (the server truncates to
// seconds and rejects less than one).
func roundTTL(d time.Duration) time.Duration {
	if d < time.Second {
		return time.Second
	}
	return ((d + time.Second - 1) / time.Second) * time.Second
}

// WatchExpired calls fn with the key of every value the server expired
// (per-key TTL or bucket max age), until ctx is cancelled. Every watcher
// sees every expiry, so fn must be idempotent.
func (b *Bucket[T]) WatchExpired(ctx context.Context, fn func(key string)) error {
	w, err := b.kv.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("watching %s: %w", b.name, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e != nil && e.Operation() == jetstream.KeyValuePurge {
				fn(e.Key())
			}
		}
	}
}
