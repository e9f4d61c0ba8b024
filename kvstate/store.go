package kvstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrNoChange may be returned by a Mutate function to skip the write.
var ErrNoChange = errors.New("kvstate: no change")

// MaxMutateAttempts bounds Mutate's compare-and-swap attempts: past it
// Mutate fails with ErrConflict ("too many concurrent writers").
const MaxMutateAttempts = 20

// Records is what a Store keeps its encoded records in: a bucket
// (*Bucket[json.RawMessage]), or an in-memory fake in a worker's tests.
// Get fails with ErrNotFound for a missing key; Create, Update, CreateUntil
// and UpdateUntil with ErrConflict when the key is not at the revision
// they expect (Create: absent; CreateNew: never written), Delete with ErrConflict when rev > 0 and
// the key moved past it. ttl > 0 keeps a per-key TTL; the Until writes
// expire at expiresAt (ErrExpired when it has passed).
type Records interface {
	Get(ctx context.Context, key string) (json.RawMessage, uint64, error)
	Create(ctx context.Context, key string, v json.RawMessage, ttl time.Duration) (uint64, error)
	CreateNew(ctx context.Context, key string, v json.RawMessage) (uint64, error)
	Update(ctx context.Context, key string, v json.RawMessage, rev uint64, ttl time.Duration) (uint64, error)
	CreateUntil(ctx context.Context, key string, v json.RawMessage, expiresAt time.Time) (uint64, error)
	UpdateUntil(ctx context.Context, key string, v json.RawMessage, rev uint64, expiresAt time.Time) (uint64, error)
	Put(ctx context.Context, key string, v json.RawMessage) (uint64, error)
	Delete(ctx context.Context, key string, rev uint64) error
}

var _ Records = (*Bucket[json.RawMessage])(nil)

// StoreOptions configures a Store of records of type T. Every field is
// optional.
type StoreOptions[T any] struct {
	// New returns the record of a key never written: Get and Mutate then
	// start from it at revision 0 (Mutate's write creates the key).
	// Default: nil, and a missing key is ErrNotFound.
	New func(key string) *T
	// Decode reads a stored record. It is the hook for records of an
	// older format: the reader of every format a store still accepts
	// lives in the function passed here, and nowhere else. It fails
	// with an error wrapping ErrIncompatible for a format it does not
	// read. Default: json.Unmarshal.
	Decode func(ctx context.Context, key string, data []byte) (*T, error)
	// BeforeWrite completes a record just before each write (its format
	// version, its update time). Default: none.
	BeforeWrite func(v *T)
	// AfterWrite is called after each write of the store with the key
	// written (to wake what waits for a record to change). Default: none.
	AfterWrite func(key string)
	// ExpiresAt returns when a record must expire: a write then keeps
	// (sets) a TTL until that time (Records.CreateUntil, UpdateUntil),
	// never drops it. A zero time means no expiry. Default: records do
	// not expire.
	ExpiresAt func(v *T) time.Time
	// Cache keeps the records last read or written, with their revision,
	// up to MaxCached. A cached record is never trusted on its own: a
	// write from it is revision-checked, and a Mutate function that finds
	// nothing to change on it, or fails, runs again on a fresh read.
	// Default: off.
	Cache bool
	// Name names the records in errors ("thread"). Default: "record".
	Name string
}

// Store is a bucket of typed records of one kind, with parley's one
// read-modify-write loop (Mutate): a revision-checked write that reads
// again and reapplies the change when another writer got there first.
// Library conflicts (jetstream.ErrKeyRevisionMismatch, ErrKeyExists, and
// the wrong-last-sequence answers of both single and replicated streams)
// are handled here and nowhere else; callers see ErrConflict only from
// Create, and from Mutate past MaxMutateAttempts.
type Store[T any] struct {
	recs  Records
	opts  StoreOptions[T]
	cache *RevCache[T]
}

// NewStore returns a Store of the records in recs.
func NewStore[T any](recs Records, opts StoreOptions[T]) *Store[T] {
	if recs == nil {
		panic("kvstate: NewStore with nil Records")
	}
	if opts.Name == "" {
		opts.Name = "record"
	}
	return &Store[T]{recs: recs, opts: opts, cache: NewRevCache[T](opts.Cache)}
}

// Records returns where the store keeps its records.
func (s *Store[T]) Records() Records { return s.recs }

// Get reads the record under key (fresh, not from the cache) and its
// revision: ErrNotFound when absent (unless StoreOptions.New gives a
// record, at revision 0), an error wrapping ErrIncompatible when Decode
// cannot read it.
func (s *Store[T]) Get(ctx context.Context, key string) (*T, uint64, error) {
	data, rev, err := s.recs.Get(ctx, key)
	if errors.Is(err, ErrNotFound) && s.opts.New != nil {
		s.cache.Drop(key)
		return s.opts.New(key), 0, nil
	}
	if err != nil {
		s.cache.Drop(key)
		return nil, 0, err
	}
	v, err := s.decode(ctx, key, data)
	if err != nil {
		s.cache.Drop(key)
		return nil, rev, err
	}
	s.cache.Put(key, v, rev)
	return v, rev, nil
}

// View returns the record under key as cached (cached true), else as Get
// reads it. A cached record may be behind the bucket.
func (s *Store[T]) View(ctx context.Context, key string) (v *T, rev uint64, cached bool, err error) {
	if v, rev, ok := s.cache.Get(key); ok {
		return v, rev, true, nil
	}
	v, rev, err = s.Get(ctx, key)
	return v, rev, false, err
}

func (s *Store[T]) decode(ctx context.Context, key string, data []byte) (*T, error) {
	if s.opts.Decode != nil {
		return s.opts.Decode(ctx, key, data)
	}
	v := new(T)
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("decoding %s %s: %w (%w)", s.opts.Name, key, err, ErrIncompatible)
	}
	return v, nil
}

// Create stores v under key when no live record is there (ErrConflict
// otherwise), with the TTL StoreOptions.ExpiresAt asks for, and returns
// its revision.
func (s *Store[T]) Create(ctx context.Context, key string, v *T) (uint64, error) {
	rev, err := s.write(ctx, key, v, 0)
	if err != nil {
		return 0, err
	}
	s.cache.Put(key, v, rev)
	s.wrote(key)
	return rev, nil
}

// CreateNew stores v under key, without a TTL, when the key never held a
// record: ErrConflict when it has any entry, a live record or the marker
// of one deleted or expired (so a record deleted since is not brought
// back). It returns the new revision.
func (s *Store[T]) CreateNew(ctx context.Context, key string, v *T) (uint64, error) {
	data, err := s.encode(key, v)
	if err != nil {
		return 0, err
	}
	rev, err := s.recs.CreateNew(ctx, key, data)
	if err != nil {
		return 0, err
	}
	s.cache.Put(key, v, rev)
	s.wrote(key)
	return rev, nil
}

// Replace stores v under key whatever is there (nothing, a record, or
// one Decode cannot read), with the TTL StoreOptions.ExpiresAt asks for,
// unlike Put: a revision-checked write at the revision read, reading
// again when another writer got there first, up to MaxMutateAttempts
// (then an error wrapping ErrConflict). ErrExpired when the expiry has
// passed. It returns the new revision.
func (s *Store[T]) Replace(ctx context.Context, key string, v *T) (uint64, error) {
	for conflicts := 0; conflicts < MaxMutateAttempts; {
		_, rev, err := s.recs.Get(ctx, key)
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrIncompatible) {
			return 0, err
		}
		nrev, err := s.write(ctx, key, v, rev)
		if errors.Is(err, ErrConflict) {
			s.cache.Drop(key)
			conflicts++
			if err := backOff(ctx, conflicts); err != nil {
				return 0, err
			}
			continue
		}
		if err != nil {
			s.cache.Drop(key)
			return 0, err
		}
		s.cache.Put(key, v, nrev)
		s.wrote(key)
		return nrev, nil
	}
	return 0, fmt.Errorf("replacing %s %s: too many concurrent writers: %w", s.opts.Name, key, ErrConflict)
}

// Put stores v under key whatever is there (a record replaced because it
// cannot be read), without a TTL, and returns its revision.
func (s *Store[T]) Put(ctx context.Context, key string, v *T) (uint64, error) {
	s.cache.Drop(key)
	data, err := s.encode(key, v)
	if err != nil {
		return 0, err
	}
	rev, err := s.recs.Put(ctx, key, data)
	if err != nil {
		return 0, err
	}
	s.wrote(key)
	return rev, nil
}

// encode completes v (BeforeWrite) and encodes it.
func (s *Store[T]) encode(key string, v *T) ([]byte, error) {
	if s.opts.BeforeWrite != nil {
		s.opts.BeforeWrite(v)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s: %w", s.opts.Name, key, err)
	}
	return data, nil
}

func (s *Store[T]) wrote(key string) {
	if s.opts.AfterWrite != nil {
		s.opts.AfterWrite(key)
	}
}

// write stores v under key at rev (0: create).
func (s *Store[T]) write(ctx context.Context, key string, v *T, rev uint64) (uint64, error) {
	data, err := s.encode(key, v)
	if err != nil {
		return 0, err
	}
	var until time.Time
	if s.opts.ExpiresAt != nil {
		until = s.opts.ExpiresAt(v)
	}
	switch {
	case until.IsZero() && rev == 0:
		return s.recs.Create(ctx, key, data, 0)
	case until.IsZero():
		return s.recs.Update(ctx, key, data, rev, 0)
	case rev == 0:
		return s.recs.CreateUntil(ctx, key, data, until)
	default:
		return s.recs.UpdateUntil(ctx, key, data, rev, until)
	}
}

// errCachedNoChange: a Mutate function found nothing to change on a
// cached record, or refused it, which must be confirmed on a fresh read.
var errCachedNoChange = errors.New("kvstate: no write decided on a cached record")

// Mutate reads the record under key (from the cache when there), applies
// fn and writes the result at the revision read, reading again and
// reapplying fn when another writer got there first, up to
// MaxMutateAttempts (then an error wrapping ErrConflict). fn may run more
// than once and must only change its argument. When fn returns
// ErrNoChange nothing is written and Mutate returns the record fn saw and
// its revision, with nil; any other error of fn, or of reading (such as
// ErrNotFound when StoreOptions.New is nil), is returned as is. A
// function that returns an error on a cached record is run again on a
// fresh read, so the error (or ErrNoChange) is decided on the current
// record. It returns the record as written and its new revision.
func (s *Store[T]) Mutate(ctx context.Context, key string, fn func(v *T) error) (*T, uint64, error) {
	if v, rev, ok := s.cache.Get(key); ok {
		return s.MutateFrom(ctx, key, v, rev, true, fn)
	}
	return s.MutateFrom(ctx, key, nil, 0, false, fn)
}

// MutateFrom is Mutate starting from v at rev, as Get or View returned it
// (cached: View's cached; v nil: read first). v is changed.
func (s *Store[T]) MutateFrom(ctx context.Context, key string, v *T, rev uint64, cached bool, fn func(v *T) error) (*T, uint64, error) {
	conflicts := 0
	for range MaxMutateAttempts {
		if v == nil {
			var err error
			if v, rev, err = s.Get(ctx, key); err != nil {
				return nil, 0, err
			}
			cached = false
		}
		if err := fn(v); err != nil {
			if cached {
				v, cached = nil, false // decide again on a fresh read
				continue
			}
			if errors.Is(err, ErrNoChange) {
				return v, rev, nil
			}
			return nil, 0, err
		}
		nrev, err := s.write(ctx, key, v, rev)
		if errors.Is(err, ErrConflict) {
			s.cache.Drop(key)
			v, cached = nil, false
			conflicts++
			if err := backOff(ctx, conflicts); err != nil {
				return nil, 0, err
			}
			continue
		}
		if err != nil {
			s.cache.Drop(key) // the bucket may hold anything now
			return nil, 0, err
		}
		s.cache.Put(key, v, nrev)
		s.wrote(key)
		return v, nrev, nil
	}
	return nil, 0, fmt.Errorf("updating %s %s: too many concurrent writers: %w", s.opts.Name, key, ErrConflict)
}

// backOff waits before the write after the n-th lost race: not at all
// after the first (the writer that won is done), then a random 0 to n-1
// milliseconds, so that many writers of one key (and a replica whose
// reads lag behind the leader's) stop colliding. It returns ctx's error
// when ctx ends first.
func backOff(ctx context.Context, n int) error {
	if n < 2 {
		return nil
	}
	t := time.NewTimer(time.Duration(rand.N(n)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// DeleteIf deletes the record under key while keep holds for it,
// starting from v at rev (nil: read first) and reading again when another
// writer changed it. It returns the record deleted: by this call, or by
// another writer after keep last held for it (the record as last read).
// It returns nil when keep did not hold, or the key was absent at the
// first read; ErrNotFound is not an error here.
func (s *Store[T]) DeleteIf(ctx context.Context, key string, v *T, rev uint64, keep func(v *T) bool) (*T, error) {
	var last *T
	for range MaxMutateAttempts {
		if v == nil {
			var err error
			v, rev, err = s.Get(ctx, key)
			if errors.Is(err, ErrNotFound) || (err == nil && rev == 0) {
				return last, nil
			}
			if err != nil {
				return nil, err
			}
		}
		if !keep(v) {
			return nil, nil
		}
		last = v
		err := s.recs.Delete(ctx, key, rev)
		s.cache.Drop(key)
		if errors.Is(err, ErrConflict) {
			v = nil
			continue
		}
		if err != nil {
			return nil, err
		}
		s.wrote(key)
		return v, nil
	}
	return nil, fmt.Errorf("deleting %s %s: too many concurrent writers: %w", s.opts.Name, key, ErrConflict)
}

// Forget drops key from the cache (a record replaced out of band).
func (s *Store[T]) Forget(key string) { s.cache.Drop(key) }

// Remember caches v as the record under key at rev (a record read out of
// band); nothing when the cache is off.
func (s *Store[T]) Remember(key string, v *T, rev uint64) { s.cache.Put(key, v, rev) }
