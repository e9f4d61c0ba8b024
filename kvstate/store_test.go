package kvstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus/bustest"
)

func openStore(t *testing.T, js jetstream.JetStream, name string, bo BucketOptions, so StoreOptions[rec]) *Store[rec] {
	t.Helper()
	if bo.Storage == 0 {
		bo.Storage = jetstream.MemoryStorage
	}
	b, err := OpenBucket[json.RawMessage](t.Context(), js, name, bo)
	if err != nil {
		t.Fatalf("OpenBucket(%s): %v", name, err)
	}
	return NewStore(b, so)
}

// raceIncrements has n writers add 1 to one record at once through
// stores: every Mutate must succeed (a lost compare-and-set read again,
// never an error) and the record must count n.
func raceIncrements(t *testing.T, stores []*Store[rec], key string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			_, _, err := s.Mutate(t.Context(), key, func(r *rec) error { r.N++; return nil })
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Mutate racing %d writers: %v", n, err)
		}
	}
	got, _, err := stores[0].Get(t.Context(), key)
	if err != nil || got.N != n {
		t.Fatalf("Get(%s) after %d increments = %+v, %v; want N=%d", key, n, got, err, n)
	}
}

func TestStoreMutate(t *testing.T) {
	js := newJS(t)
	s := openStore(t, js, "st", BucketOptions{}, StoreOptions[rec]{New: func(string) *rec { return &rec{} }})
	raceIncrements(t, []*Store[rec]{s, NewStore(s.Records(), StoreOptions[rec]{New: func(string) *rec { return &rec{} }})}, "k", 12)

	// ErrNoChange writes nothing and returns the record as read.
	_, rev, _ := s.Get(t.Context(), "k")
	v, nrev, err := s.Mutate(t.Context(), "k", func(*rec) error { return ErrNoChange })
	if err != nil || nrev != rev || v.N != 12 {
		t.Fatalf("Mutate(ErrNoChange) = %+v, %d, %v; want N=12 at %d", v, nrev, err, rev)
	}
	// fn's own error comes back as is.
	boom := errors.New("boom")
	if _, _, err := s.Mutate(t.Context(), "k", func(*rec) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Mutate(boom) = %v", err)
	}
	// Without New a missing key is ErrNotFound.
	plain := NewStore(s.Records(), StoreOptions[rec]{})
	if _, _, err := plain.Mutate(t.Context(), "absent", func(*rec) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Mutate(absent) = %v, want ErrNotFound", err)
	}
	// Create refuses a live key.
	if _, err := plain.Create(t.Context(), "k", &rec{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("Create(existing) = %v, want ErrConflict", err)
	}
}

// A cached record behind the bucket (another replica wrote since) is
// written revision-checked, so the write reads again; a function that
// decides nothing on the cached record is run again on a fresh read.
func TestStoreCacheIsNeverTrustedAlone(t *testing.T) {
	js := newJS(t)
	opts := StoreOptions[rec]{New: func(string) *rec { return &rec{} }, Cache: true}
	a := openStore(t, js, "cached", BucketOptions{}, opts)
	b := NewStore(a.Records(), opts)
	if _, _, err := a.Mutate(t.Context(), "k", func(r *rec) error { r.N = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Mutate(t.Context(), "k", func(r *rec) error { r.N = 5; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, cached, _ := a.View(t.Context(), "k"); !cached {
		t.Fatal("a's record is not cached")
	}
	v, _, err := a.Mutate(t.Context(), "k", func(r *rec) error { r.N++; return nil })
	if err != nil || v.N != 6 {
		t.Fatalf("Mutate from a stale cache = %+v, %v; want N=6", v, err)
	}
	if _, _, err := b.Mutate(t.Context(), "k", func(r *rec) error { r.S = "b"; return nil }); err != nil {
		t.Fatal(err)
	}
	seen := ""
	if _, _, err := a.Mutate(t.Context(), "k", func(r *rec) error { seen = r.S; return ErrNoChange }); err != nil || seen != "b" {
		t.Fatalf("ErrNoChange on a cached record: last run saw %q, %v; want the fresh record (S=b)", seen, err)
	}
}

// A store whose records expire keeps the TTL on every write: a Mutate
// neither drops it nor extends it past ExpiresAt.
func TestStoreMutateKeepsTTL(t *testing.T) {
	js := newJS(t)
	until := time.Now().Add(2 * time.Second)
	s := openStore(t, js, "ttl", BucketOptions{PerKeyTTL: true},
		StoreOptions[rec]{New: func(string) *rec { return &rec{} }, ExpiresAt: func(*rec) time.Time { return until }})
	for range 3 {
		if _, _, err := s.Mutate(t.Context(), "k", func(r *rec) error { r.N++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	plain := NewStore(s.Records(), StoreOptions[rec]{})
	eventually(t, 5*time.Second, "the mutated record to expire", func() bool {
		_, _, err := plain.Get(t.Context(), "k")
		return errors.Is(err, ErrNotFound)
	})
}

// Decode is the one reader of older formats: it sees every stored record.
func TestStoreDecodeHook(t *testing.T) {
	js := newJS(t)
	s := openStore(t, js, "dec", BucketOptions{}, StoreOptions[rec]{})
	if _, err := s.Create(t.Context(), "old", &rec{N: 1}); err != nil {
		t.Fatal(err)
	}
	up := NewStore(s.Records(), StoreOptions[rec]{Decode: func(_ context.Context, key string, data []byte) (*rec, error) {
		var r rec
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, err
		}
		if r.S == "" {
			r.S = "upgraded"
		}
		return &r, nil
	}, BeforeWrite: func(r *rec) { r.N += 100 }})
	v, _, err := up.Mutate(t.Context(), "old", func(r *rec) error { return nil })
	if err != nil || v.S != "upgraded" || v.N != 101 {
		t.Fatalf("Mutate through Decode and BeforeWrite = %+v, %v", v, err)
	}
}

func TestStoreDeleteIf(t *testing.T) {
	js := newJS(t)
	s := openStore(t, js, "del", BucketOptions{}, StoreOptions[rec]{})
	if _, err := s.Create(t.Context(), "k", &rec{N: 1}); err != nil {
		t.Fatal(err)
	}
	v, rev, _ := s.Get(t.Context(), "k")
	if _, _, err := s.Mutate(t.Context(), "k", func(r *rec) error { r.N = 2; return nil }); err != nil {
		t.Fatal(err)
	}
	// From a stale revision: read again, keep no longer holds.
	if got, err := s.DeleteIf(t.Context(), "k", v, rev, func(r *rec) bool { return r.N == 1 }); err != nil || got != nil {
		t.Fatalf("DeleteIf(stale, keep fails) = %+v, %v; want nothing deleted", got, err)
	}
	if got, err := s.DeleteIf(t.Context(), "k", v, rev, func(r *rec) bool { return r.N >= 1 }); err != nil || got == nil || got.N != 2 {
		t.Fatalf("DeleteIf(stale, keep holds) = %+v, %v; want the current record deleted", got, err)
	}
	if got, err := s.DeleteIf(t.Context(), "k", nil, 0, func(*rec) bool { return true }); err != nil || got != nil {
		t.Fatalf("DeleteIf(gone) = %+v, %v", got, err)
	}
	// Deleted by another writer after keep held: the record as last read.
	if _, err := s.Create(t.Context(), "k2", &rec{N: 3}); err != nil {
		t.Fatal(err)
	}
	v, rev, _ = s.Get(t.Context(), "k2")
	if err := s.Records().Delete(t.Context(), "k2", 0); err != nil {
		t.Fatal(err)
	}
	if got, err := s.DeleteIf(t.Context(), "k2", v, rev, func(*rec) bool { return true }); err != nil || got == nil || got.N != 3 {
		t.Fatalf("DeleteIf(deleted meanwhile) = %+v, %v; want the record last read", got, err)
	}
}

// On a replicated (R3) bucket a lost compare-and-set is reported with
// another error code than on one server; Mutate reads it as a lost race
// all the same: racing writers on three connections, one to each node,
// all succeed and none is lost.
func TestStoreMutateOnReplicatedBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := bustest.NewCluster(t, 3)
	var stores []*Store[rec]
	for i := range 3 {
		_, js := cl.JetStream(t)
		b, err := OpenBucket[json.RawMessage](t.Context(), js, "r3", BucketOptions{Storage: jetstream.MemoryStorage, Replicas: 3})
		if err != nil {
			t.Fatalf("OpenBucket on node %d: %v", i, err)
		}
		s := NewStore(b, StoreOptions[rec]{New: func(string) *rec { return &rec{} }})
		// A new R3 bucket answers reads on every node once its stream
		// has a leader they know of.
		eventually(t, 10*time.Second, "the replicated bucket to answer reads", func() bool {
			_, _, err := s.Get(t.Context(), "warm")
			return err == nil
		})
		stores = append(stores, s)
	}
	for i := range 3 {
		raceIncrements(t, stores, fmt.Sprintf("k%d", i), 9)
	}
}

// Replace writes over whatever is under the key (nothing, a record, or
// bytes Decode cannot read) and keeps the TTL ExpiresAt asks for; a
// passed expiry is ErrExpired.
func TestStoreReplace(t *testing.T) {
	js := newJS(t)
	until := time.Now().Add(2 * time.Second)
	s := openStore(t, js, "repl", BucketOptions{PerKeyTTL: true},
		StoreOptions[rec]{ExpiresAt: func(r *rec) time.Time {
			if r.S == "past" {
				return time.Now().Add(-time.Second)
			}
			return until
		}})
	ctx := t.Context()
	if _, err := s.Replace(ctx, "k", &rec{N: 1}); err != nil {
		t.Fatalf("Replace(absent) = %v", err)
	}
	if _, err := s.Replace(ctx, "k", &rec{N: 2}); err != nil {
		t.Fatalf("Replace(a record) = %v", err)
	}
	if v, _, err := s.Get(ctx, "k"); err != nil || v.N != 2 {
		t.Fatalf("Get after Replace = %+v, %v; want N=2", v, err)
	}
	if _, err := s.Records().Put(ctx, "bad", json.RawMessage(`"not a rec"`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "bad"); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("Get(unreadable) = %v, want ErrIncompatible", err)
	}
	if _, err := s.Replace(ctx, "bad", &rec{N: 3}); err != nil {
		t.Fatalf("Replace(unreadable) = %v", err)
	}
	if _, err := s.Replace(ctx, "late", &rec{S: "past"}); !errors.Is(err, ErrExpired) {
		t.Fatalf("Replace(expired) = %v, want ErrExpired", err)
	}
	// Racing replacers all succeed (a lost race reads again).
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			_, err := s.Replace(ctx, "race", &rec{N: i})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("racing Replace = %v", err)
		}
	}
	eventually(t, 5*time.Second, "the replaced records to expire", func() bool {
		_, _, e1 := s.Get(ctx, "k")
		_, _, e2 := s.Get(ctx, "bad")
		return errors.Is(e1, ErrNotFound) && errors.Is(e2, ErrNotFound)
	})
}
