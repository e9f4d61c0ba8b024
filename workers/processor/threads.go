package processor

import (
	"context"
	"errors"
	"sync"

	"github.com/parley-dev/parley/kvstate"
)

// threadRecords is where thread records are stored: threadBucket on NATS,
// an in-memory fake in the package tests. Save is revision-checked
// (kvstate.ErrConflict when the record moved past rev).
type threadRecords interface {
	Load(ctx context.Context, id string) (*Thread, uint64, error)
	Save(ctx context.Context, t *Thread, rev uint64) (uint64, error)
	Reset(ctx context.Context, id string) error
}

var _ threadRecords = (*threadBucket)(nil)

// threads is the processor's access to thread records: every
// read-modify-write goes through kvstate.Mutate, and the records last read
// or written are cached with their KV revision.
//
// The cache is correct under several replicas because it is never
// trusted on its own: a write starting from a cached record is
// revision-checked (a conflict reads the record again), a write function
// that finds nothing to change on a cached record, or fails, is run again
// on a fresh read, and the handlers (turns.go, pause.go) read afresh before any
// decision a cached record would make differently from the current one:
// waiting, refusing, withdrawing a pause, or ignoring an outcome as stale.
type threads struct {
	recs  threadRecords
	cache *revCache[Thread] // nil: caching off
	// adopt, if set, completes a record as read from the bucket (an
	// earlier version's paused turn: Processor.adoptLegacy).
	adopt func(ctx context.Context, t *Thread) error

	// writes wakes the handlers of this replica that wait for a thread's
	// record to change (changed): closed and dropped on each write.
	mu     sync.Mutex
	writes map[string]chan struct{}
}

func newThreads(recs threadRecords, cache bool) *threads {
	return &threads{recs: recs, cache: newRevCache[Thread](cache), writes: map[string]chan struct{}{}}
}

// changed returns a channel closed at this replica's next write of
// thread id's record (another replica's writes are seen only by
// reading).
func (s *threads) changed(id string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.writes[id]
	if !ok {
		ch = make(chan struct{})
		s.writes[id] = ch
	}
	return ch
}

// wrote wakes the waiters of changed(id).
func (s *threads) wrote(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.writes[id]; ok {
		close(ch)
		delete(s.writes, id)
	}
}

// errCachedNoChange: a write function found nothing to change on a cached
// record, or refused it, which must be confirmed on a fresh read.
var errCachedNoChange = errors.New("no write decided on a cached record")

// inputSeqs makes t's sequences PARLEY_INPUT's: a record written when
// integrator input was in PARLEY_CHAT has PARLEY_CHAT sequences in
// LastTurnSeq and PauseMark, which do not compare with PARLEY_INPUT's;
// they are read as unset (the order of the thread's messages then comes
// from PARLEY_INPUT alone), and every write marks the record's sequences
// as PARLEY_INPUT's.
func inputSeqs(t *Thread) {
	if t != nil && !t.InputSeqs {
		t.LastTurnSeq, t.PauseMark, t.InputSeqs = 0, 0, true
	}
}

// Load reads the thread from the bucket (a new idle one at revision 0 if
// absent) and caches it.
func (s *threads) Load(ctx context.Context, id string) (*Thread, uint64, error) {
	t, rev, err := s.load(ctx, id)
	if err != nil {
		s.forget(id)
		return nil, 0, err
	}
	s.remember(t, rev)
	return t, rev, nil
}

// load reads the thread from the bucket, as this version reads it.
func (s *threads) load(ctx context.Context, id string) (*Thread, uint64, error) {
	t, rev, err := s.recs.Load(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	inputSeqs(t)
	if s.adopt != nil {
		if err := s.adopt(ctx, t); err != nil {
			return nil, 0, err
		}
	}
	return t, rev, nil
}

// view returns the thread as cached (cached true), else as Load reads it.
// A cached record may be behind the bucket: see threads.
func (s *threads) view(ctx context.Context, id string) (t *Thread, rev uint64, cached bool, err error) {
	if t, rev, ok := s.lookup(id); ok {
		return t, rev, true, nil
	}
	t, rev, err = s.Load(ctx, id)
	return t, rev, false, err
}

// Mutate applies fn to the thread (from the cache when there) and saves
// it revision-checked, retrying on conflict (kvstate.Mutate); fn may run
// more than once and must only change t. kvstate.ErrNoChange from fn
// writes nothing and returns the thread fn saw, as current in the bucket;
// any other error of fn is returned as fn gave it on a current record.
func (s *threads) Mutate(ctx context.Context, id string, fn func(t *Thread) error) (*Thread, error) {
	if t, rev, ok := s.lookup(id); ok {
		return s.mutate(ctx, id, t, rev, true, fn)
	}
	return s.mutate(ctx, id, nil, 0, false, fn)
}

// MutateAt is Mutate starting from t as view or Load returned it at rev
// (cached: from the cache); t is changed.
func (s *threads) MutateAt(ctx context.Context, t *Thread, rev uint64, cached bool, fn func(t *Thread) error) (*Thread, error) {
	return s.mutate(ctx, t.ID, t, rev, cached, fn)
}

func (s *threads) mutate(ctx context.Context, id string, from *Thread, rev uint64, cached bool, fn func(t *Thread) error) (*Thread, error) {
	var start *kvstate.Versioned[Thread]
	if from != nil {
		start = &kvstate.Versioned[Thread]{Value: from, Rev: rev}
	}
	first := cached
	m := kvstate.Mutator[Thread]{
		Load: func(ctx context.Context) (*Thread, uint64, error) {
			return s.load(ctx, id)
		},
		Save: func(ctx context.Context, t *Thread, rev uint64) (uint64, error) {
			inputSeqs(t)
			return s.recs.Save(ctx, t, rev)
		},
	}
	v, err := kvstate.Mutate(ctx, "thread "+id, m, start, func(t *Thread) error {
		err := fn(t)
		if first && err != nil {
			// No change, or a refusal, decided on a cached record:
			// decide again on a fresh read.
			err = errCachedNoChange
		}
		first = false
		return err
	})
	if errors.Is(err, errCachedNoChange) {
		return s.mutate(ctx, id, nil, 0, false, fn)
	}
	if err != nil {
		s.forget(id)
		return nil, err
	}
	s.remember(v.Value, v.Rev)
	s.wrote(id)
	return v.Value, nil
}

// Reset replaces the thread with a new idle one (see threadBucket.Reset).
func (s *threads) Reset(ctx context.Context, id string) error {
	s.forget(id)
	return s.recs.Reset(ctx, id)
}

func (s *threads) lookup(id string) (*Thread, uint64, bool) { return s.cache.get(id) }

func (s *threads) remember(t *Thread, rev uint64) {
	if t != nil {
		s.cache.put(t.ID, t, rev)
	}
}

func (s *threads) forget(id string) { s.cache.drop(id) }
