package kvstate

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
)

func openPaused(t *testing.T) *PausedStore {
	t.Helper()
	s, err := OpenPaused(t.Context(), newJS(t), jetstream.MemoryStorage, 1)
	if err != nil {
		t.Fatalf("OpenPaused: %v", err)
	}
	return s
}

func paused(thread, turn string, ttl time.Duration, ids ...string) *PausedTurn {
	p := &PausedTurn{
		Thread: thread, TurnID: turn, RunID: "run-" + turn, Agent: "default",
		CreatedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(ttl).UTC(),
		Snapshot: json.RawMessage(`{"step":1}`),
	}
	for _, id := range ids {
		p.Elicitations = append(p.Elicitations, Elicitation{
			PendingElicitation: events.PendingElicitation{ID: id, Kind: events.KindForm},
			Status:             StatusPending,
		})
	}
	return p
}

func TestPausedStoreSaveLoad(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPaused(t)
	if _, _, err := s.Load(ctx, "t1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load(missing) error = %v, want ErrNotFound", err)
	}
	p := paused("t1", "turn-1", time.Hour, "e1", "e2")
	rev, err := s.Save(ctx, p)
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	got, grev, err := s.Load(ctx, "t1")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if grev != rev || got.Format != PausedFormat || got.TurnID != "turn-1" || string(got.Snapshot) != `{"step":1}` ||
		!slices.Equal(got.PendingIDs(), []string{"e1", "e2"}) || got.Settled() {
		t.Errorf("Load = %+v @%d, want turn-1 with e1, e2 pending @%d", got, grev, rev)
	}
	if e := got.Find("e2"); e == nil || e.ID != "e2" {
		t.Errorf("Find(e2) = %v", e)
	}
	if got.Find("nope") != nil {
		t.Error("Find(nope) != nil")
	}

	// A redelivered pause (same turn, run and elicitations) is a no-op.
	again, err := s.Save(ctx, paused("t1", "turn-1", time.Hour, "e1", "e2"))
	if err != nil || again != rev {
		t.Errorf("Save(same pause) = %d, %v, want %d, nil", again, err, rev)
	}
	if _, r, _ := s.Load(ctx, "t1"); r != rev {
		t.Errorf("Save(same pause) wrote a new revision %d (was %d)", r, rev)
	}

	// Same turn but other elicitations is not the same pause: refused
	// while the first one's questions are pending.
	if _, err := s.Save(ctx, paused("t1", "turn-1", time.Hour, "e1")); !errors.Is(err, ErrConflict) {
		t.Errorf("Save(same turn, other ids, over pending) error = %v, want ErrConflict", err)
	}

	// Settle it; then a new pause replaces it.
	got.Elicitations[0].Status = StatusConsumed
	got.Elicitations[1].Status = StatusCancelled
	got.Resumed = true
	rev2, err := s.Update(ctx, got, rev)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if _, err := s.Update(ctx, got, rev); !errors.Is(err, ErrConflict) {
		t.Errorf("Update(stale revision) error = %v, want ErrConflict", err)
	}
	if _, err := s.Save(ctx, paused("t1", "turn-2", time.Hour, "e3")); err != nil {
		t.Fatalf("Save(over settled): %v", err)
	}
	got, rev3, err := s.Load(ctx, "t1")
	if err != nil || got.TurnID != "turn-2" || rev3 <= rev2 || !slices.Equal(got.PendingIDs(), []string{"e3"}) {
		t.Errorf("after replacing: Load = %+v @%d, %v, want turn-2 with e3 pending", got, rev3, err)
	}

	if err := s.Delete(ctx, "t1", rev2); !errors.Is(err, ErrConflict) {
		t.Errorf("Delete(stale) error = %v, want ErrConflict", err)
	}
	if err := s.Delete(ctx, "t1", rev3); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Save(ctx, paused("t1", "turn-3", time.Hour, "e4")); err != nil {
		t.Errorf("Save(after delete): %v", err)
	}
}

func TestPausedStoreIncompatible(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPaused(t)
	old := paused("t-fmt", "turn-0", time.Hour, "e0")
	old.Format = PausedFormat + 1
	b, _ := json.Marshal(old)
	if _, err := s.b.KV().Put(ctx, "t-fmt", b); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if _, err := s.b.KV().Put(ctx, "t-junk", []byte("\x00not json")); err != nil {
		t.Fatalf("Put: %v", err)
	}
	for _, thread := range []string{"t-fmt", "t-junk"} {
		t.Run(thread, func(t *testing.T) {
			if _, _, err := s.Load(ctx, thread); !errors.Is(err, ErrIncompatible) {
				t.Fatalf("Load error = %v, want ErrIncompatible", err)
			}
			// Save replaces an incompatible record (it cannot be pending in
			// any way this code understands).
			if _, err := s.Save(ctx, paused(thread, "turn-1", time.Hour, "e1")); err != nil {
				t.Fatalf("Save over incompatible record: %v", err)
			}
			p, _, err := s.Load(ctx, thread)
			if err != nil || p.TurnID != "turn-1" {
				t.Errorf("Load after Save = %+v, %v, want turn-1", p, err)
			}
		})
	}
}

func TestPausedStoreTTL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPaused(t)
	p := paused("t-ttl", "turn-1", time.Second, "e1")
	rev, err := s.Save(ctx, p)
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	// An answer recorded with Update keeps the TTL.
	p.Elicitations[0].Status = StatusConsumed
	if _, err := s.Update(ctx, p, rev); err != nil {
		t.Fatalf("Update: %v", err)
	}
	expired := make(chan string, 4)
	go func() {
		_ = s.WatchExpired(ctx, func(thread string) { expired <- thread })
	}()
	eventually(t, 4*time.Second, "the paused turn to expire", func() bool {
		_, _, err := s.Load(ctx, "t-ttl")
		return errors.Is(err, ErrNotFound)
	})
	select {
	case th := <-expired:
		if th != "t-ttl" {
			t.Errorf("WatchExpired reported %q, want t-ttl", th)
		}
	case <-time.After(2 * time.Second):
		t.Error("WatchExpired did not report the expiry")
	}
	// A new pause of the thread after expiry (the expiry marker is still
	// there) is stored, with its TTL.
	if _, err := s.Save(ctx, paused("t-ttl", "turn-2", time.Second, "e2")); err != nil {
		t.Fatalf("Save after expiry: %v", err)
	}
	eventually(t, 4*time.Second, "the second paused turn to expire", func() bool {
		_, _, err := s.Load(ctx, "t-ttl")
		return errors.Is(err, ErrNotFound)
	})
}

func TestPausedStoreReplacesOtherTurn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPaused(t)
	if _, err := s.Save(ctx, paused("t1", "turn-1", time.Hour, "e1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, paused("t1", "turn-2", time.Hour, "e2")); err != nil {
		t.Fatalf("Save(other turn over pending) = %v, want it replaced", err)
	}
	got, _, err := s.Load(ctx, "t1")
	if err != nil || got.TurnID != "turn-2" || !slices.Equal(got.PendingIDs(), []string{"e2"}) {
		t.Errorf("Load = %+v, %v, want turn-2 with e2 pending", got, err)
	}
}

// TestPausedStoreRewriteAfterExpiresAt: a record rewritten after its
// expiresAt (the key still lives, its TTL rounded up to whole seconds) is
// not written at all (ErrExpired) and still expires; before the fix the
// rewrite carried no TTL and the record lived forever.
func TestPausedStoreRewriteAfterExpiresAt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPaused(t)
	p := paused("t-late", "turn-1", 300*time.Millisecond, "e1") // key TTL: 1s
	rev, err := s.Save(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(p.ExpiresAt) + 50*time.Millisecond)
	if _, _, err := s.Load(ctx, "t-late"); err != nil {
		t.Skipf("the key expired before the rewrite (%v): the boundary was not reached on this machine", err)
	}
	p.Elicitations[0].Status = StatusCancelled
	if _, err := s.Update(ctx, p, rev); !errors.Is(err, ErrExpired) {
		t.Fatalf("Update after expiresAt = %v, want ErrExpired", err)
	}
	if _, err := s.Save(ctx, paused("t-late", "turn-1", -time.Millisecond, "e9")); !errors.Is(err, ErrExpired) {
		t.Errorf("Save with a past expiresAt = %v, want ErrExpired", err)
	}
	eventually(t, 3*time.Second, "the record to expire", func() bool {
		_, _, err := s.Load(ctx, "t-late")
		return errors.Is(err, ErrNotFound)
	})
}

// PausedStore.Mutate: one winner among concurrent writers (CAS), no write
// on ErrNoChange, ErrNotFound for a missing record, TTL kept.
func TestPausedStoreMutate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPaused(t)
	if _, err := s.Mutate(ctx, "none", func(*PausedTurn) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("Mutate(missing) = %v, want ErrNotFound", err)
	}
	rev, err := s.Save(ctx, paused("t-m", "turn-1", 2*time.Second, "e1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mutate(ctx, "t-m", func(*PausedTurn) error { return ErrNoChange }); err != nil {
		t.Fatal(err)
	}
	if _, r, _ := s.Load(ctx, "t-m"); r != rev {
		t.Errorf("ErrNoChange wrote revision %d (was %d)", r, rev)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			won := false
			_, err := s.Mutate(ctx, "t-m", func(p *PausedTurn) error {
				won = false
				if p.Elicitations[0].Status != StatusPending {
					return ErrNoChange
				}
				p.Elicitations[0].Status, won = StatusConsumed, true
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			if won {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Errorf("%d writers consumed the elicitation, want exactly 1", wins.Load())
	}
	eventually(t, 5*time.Second, "the mutated record to expire", func() bool {
		_, _, err := s.Load(ctx, "t-m")
		return errors.Is(err, ErrNotFound)
	})
}

// TestPausedStoreStaleAcrossTurns: a pause from an earlier PARLEY_RUNS
// position never replaces a later one, even of another turn (a processor
// that froze past AckWait on turn 1's pause must not overwrite turn 2's
// questions); the later one still replaces the earlier.
func TestPausedStoreStaleAcrossTurns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPaused(t)
	p2 := paused("t1", "turn-2", time.Hour, "q2")
	p2.RunSeq = 12
	if _, err := s.Save(ctx, p2); err != nil {
		t.Fatal(err)
	}
	p1 := paused("t1", "turn-1", time.Hour, "q1")
	p1.RunSeq = 10
	if _, err := s.Save(ctx, p1); !errors.Is(err, ErrStale) {
		t.Fatalf("Save(turn 1 at seq 10 over turn 2 at seq 12) = %v, want ErrStale", err)
	}
	got, _, err := s.Load(ctx, "t1")
	if err != nil || got.TurnID != "turn-2" || !slices.Equal(got.PendingIDs(), []string{"q2"}) {
		t.Errorf("Load = %+v, %v, want turn-2 with q2 pending", got, err)
	}
	p3 := paused("t1", "turn-3", time.Hour, "q3")
	p3.RunSeq = 14
	if _, err := s.Save(ctx, p3); err != nil {
		t.Fatalf("Save(turn 3 at seq 14) = %v, want it to replace turn 2", err)
	}
}
