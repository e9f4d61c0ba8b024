package kvstate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus/bustest"
)

type rec struct {
	N int    `json:"n"`
	S string `json:"s,omitempty"`
}

func newJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	_, js := bustest.NewServer(t).JetStream(t)
	return js
}

func openRec(t *testing.T, js jetstream.JetStream, name string, opts BucketOptions) *Bucket[rec] {
	t.Helper()
	if opts.Storage == 0 {
		opts.Storage = jetstream.MemoryStorage
	}
	b, err := OpenBucket[rec](t.Context(), js, name, opts)
	if err != nil {
		t.Fatalf("OpenBucket(%s): %v", name, err)
	}
	return b
}

// eventually polls cond every 20ms until it holds, failing after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holds polls cond every 50ms for d and fails as soon as it does not hold.
func holds(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !cond() {
			t.Fatalf("%s stopped holding", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func gone[T any](t *testing.T, b *Bucket[T], key string) func() bool {
	return func() bool {
		_, _, err := b.Get(t.Context(), key)
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(%s): %v", key, err)
		}
		return errors.Is(err, ErrNotFound)
	}
}

func TestBucketCAS(t *testing.T) {
	t.Parallel()
	for _, perKey := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "perkey"}[perKey]
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			b := openRec(t, newJS(t), "cas", BucketOptions{PerKeyTTL: perKey})
			ttl := time.Duration(0)
			if perKey {
				ttl = time.Hour // exercises the raw TTL-preserving publish
			}

			if _, _, err := b.Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get(missing) error = %v, want ErrNotFound", err)
			}
			rev1, err := b.Create(ctx, "k", rec{N: 1}, ttl)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if _, err := b.Create(ctx, "k", rec{N: 99}, ttl); !errors.Is(err, ErrConflict) {
				t.Errorf("Create over a live key error = %v, want ErrConflict", err)
			}
			v, rev, err := b.Get(ctx, "k")
			if err != nil || v.N != 1 || rev != rev1 {
				t.Fatalf("Get = %+v, %d, %v, want {N:1}, %d", v, rev, err, rev1)
			}

			rev2, err := b.Update(ctx, "k", rec{N: 2}, rev1, ttl)
			if err != nil {
				t.Fatalf("Update: %v", err)
			}
			if rev2 <= rev1 {
				t.Errorf("Update revision = %d, want > %d", rev2, rev1)
			}
			for _, tt := range []time.Duration{0, ttl} {
				if tt == 0 && perKey {
					continue // ttl 0 on a TTL key is TestUpdateWithoutTTLDropsTTL
				}
				if _, err := b.Update(ctx, "k", rec{N: 3}, rev1, tt); !errors.Is(err, ErrConflict) {
					t.Errorf("Update(stale revision, ttl %v) error = %v, want ErrConflict", tt, err)
				}
			}
			if _, err := b.Update(ctx, "absent", rec{N: 3}, rev2, ttl); !errors.Is(err, ErrConflict) {
				t.Errorf("Update(absent key) error = %v, want ErrConflict", err)
			}
			if v, rev, _ := b.Get(ctx, "k"); v.N != 2 || rev != rev2 {
				t.Errorf("after a lost update Get = %+v @%d, want {N:2} @%d", v, rev, rev2)
			}

			if err := b.Delete(ctx, "k", rev1); !errors.Is(err, ErrConflict) {
				t.Errorf("Delete(stale revision) error = %v, want ErrConflict", err)
			}
			if err := b.Delete(ctx, "k", rev2); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, _, err := b.Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get(deleted) error = %v, want ErrNotFound", err)
			}
			// Create works again on a deleted key.
			if _, err := b.Create(ctx, "k", rec{N: 4}, ttl); err != nil {
				t.Errorf("Create(deleted key): %v", err)
			}
			if _, err := b.Put(ctx, "k", rec{N: 5}); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if err := b.Delete(ctx, "k", 0); err != nil {
				t.Errorf("Delete(rev 0): %v", err)
			}
		})
	}
}

func TestBucketGetUndecodable(t *testing.T) {
	t.Parallel()
	b := openRec(t, newJS(t), "junk", BucketOptions{})
	rev, err := b.KV().Put(t.Context(), "k", []byte("{not json"))
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	_, got, err := b.Get(t.Context(), "k")
	if !errors.Is(err, ErrIncompatible) {
		t.Errorf("Get(undecodable) error = %v, want ErrIncompatible", err)
	}
	if got != rev {
		t.Errorf("Get(undecodable) revision = %d, want %d (so the record can be replaced)", got, rev)
	}
}

func TestRoundTTL(t *testing.T) {
	tests := map[time.Duration]time.Duration{
		time.Millisecond:        time.Second,
		time.Second:             time.Second,
		1500 * time.Millisecond: 2 * time.Second,
		time.Hour:               time.Hour,
		-time.Second:            time.Second,
	}
	for in, want := range tests {
		if got := roundTTL(in); got != want {
			t.Errorf("roundTTL(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestUpdateWithTTLKeepsTTL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := openRec(t, newJS(t), "ttl_keep", BucketOptions{PerKeyTTL: true})
	rev, err := b.Create(ctx, "k", rec{N: 1}, time.Second)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := b.Update(ctx, "k", rec{N: 2}, rev, time.Second); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if v, _, err := b.Get(ctx, "k"); err != nil || v.N != 2 {
		t.Fatalf("Get after Update = %+v, %v, want {N:2}", v, err)
	}
	eventually(t, 4*time.Second, "the updated key to expire", gone(t, b, "k"))
}

// TestUpdateWithoutTTLDropsTTL documents the nats.go pitfall: kv.Update
// (Bucket.Update with ttl 0) writes a revision without Nats-TTL, so a key
// created with a per-key TTL never expires after it. Pass the TTL again.
func TestUpdateWithoutTTLDropsTTL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := openRec(t, newJS(t), "ttl_drop", BucketOptions{PerKeyTTL: true})
	rev, err := b.Create(ctx, "updated", rec{N: 1}, time.Second)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := b.Create(ctx, "control", rec{N: 1}, time.Second); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := b.Update(ctx, "updated", rec{N: 2}, rev, 0); err != nil {
		t.Fatalf("Update: %v", err)
	}
	eventually(t, 4*time.Second, "the control key to expire", gone(t, b, "control"))
	holds(t, 1500*time.Millisecond, "the key updated without TTL", func() bool { return !gone(t, b, "updated")() })
}

func TestWatchExpired(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	b := openRec(t, newJS(t), "watch", BucketOptions{PerKeyTTL: true})

	type watcher struct {
		mu   sync.Mutex
		seen map[string]int
		done chan error
	}
	ws := []*watcher{{seen: map[string]int{}, done: make(chan error, 1)}, {seen: map[string]int{}, done: make(chan error, 1)}}
	for _, w := range ws {
		go func() {
			w.done <- b.WatchExpired(ctx, func(key string) {
				w.mu.Lock()
				w.seen[key]++
				w.mu.Unlock()
			})
		}()
	}
	if _, err := b.Create(ctx, "expires", rec{N: 1}, time.Second); err != nil {
		t.Fatalf("Create: %v", err)
	}
	// Neither a deleted nor an updated key is an expiry.
	rev, err := b.Create(ctx, "deleted", rec{N: 1}, 0)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := b.Delete(ctx, "deleted", rev); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	rev, err = b.Create(ctx, "updated", rec{N: 1}, time.Hour)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := b.Update(ctx, "updated", rec{N: 2}, rev, time.Hour); err != nil {
		t.Fatalf("Update: %v", err)
	}

	for _, w := range ws {
		eventually(t, 4*time.Second, "watcher to see the expiry", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.seen["expires"] > 0
		})
	}
	// Give a duplicate notification time to show up.
	holds(t, 500*time.Millisecond, "exactly one expiry per watcher", func() bool {
		for _, w := range ws {
			w.mu.Lock()
			ok := len(w.seen) == 1 && w.seen["expires"] == 1
			w.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	})
	for i, w := range ws {
		w.mu.Lock()
		if len(w.seen) != 1 || w.seen["expires"] != 1 {
			t.Errorf("watcher %d saw %v, want exactly {expires:1}", i, w.seen)
		}
		w.mu.Unlock()
	}
	cancel()
	for i, w := range ws {
		select {
		case err := <-w.done:
			if err != nil {
				t.Errorf("watcher %d WatchExpired = %v, want nil after cancel", i, err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("watcher %d did not return after cancel", i)
		}
	}
}

func TestOpenBucketIdempotent(t *testing.T) {
	t.Parallel()
	js := newJS(t)
	a := openRec(t, js, "same", BucketOptions{PerKeyTTL: true})
	if _, err := a.Create(t.Context(), "k", rec{N: 1}, 0); err != nil {
		t.Fatalf("Create: %v", err)
	}
	b := openRec(t, js, "same", BucketOptions{PerKeyTTL: true})
	if v, _, err := b.Get(t.Context(), "k"); err != nil || v.N != 1 {
		t.Errorf("reopened bucket Get = %+v, %v, want the stored value", v, err)
	}
	st, err := b.KV().Status(t.Context())
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.History() != 1 || st.LimitMarkerTTL() != markerTTL {
		t.Errorf("bucket History %d, LimitMarkerTTL %v, want 1 and %v", st.History(), st.LimitMarkerTTL(), markerTTL)
	}
	if _, err := OpenBucket[rec](t.Context(), js, "bad name!", BucketOptions{}); err == nil {
		t.Error("OpenBucket(invalid name) succeeded")
	}
}

// TestTTLUntil: the TTL for an expiry time is rounded up to whole seconds
// (never expiring early, outliving expiresAt by under one second), and an
// expiry at or before now is ErrExpired, never a TTL of 0 (= no TTL).
func TestTTLUntil(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in      time.Duration
		want    time.Duration
		expired bool
	}{
		{-time.Second, 0, true},
		{-time.Nanosecond, 0, true},
		{0, 0, true},
		{time.Nanosecond, time.Second, false},
		{999 * time.Millisecond, time.Second, false},
		{time.Second, time.Second, false},
		{time.Second + time.Nanosecond, 2 * time.Second, false},
		{24 * time.Hour, 24 * time.Hour, false},
	}
	for _, tt := range tests {
		got, err := TTLUntil(now.Add(tt.in), now)
		if tt.expired {
			if !errors.Is(err, ErrExpired) {
				t.Errorf("TTLUntil(now%+v) = %v, %v, want ErrExpired", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("TTLUntil(now%+v) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
		if got < tt.in || got-tt.in >= time.Second {
			t.Errorf("TTLUntil(now%+v) = %v: outlives expiresAt by %v (bound: under 1s)", tt.in, got, got-tt.in)
		}
	}
}

// TestUpdateUntilCarriesTTL: UpdateUntil writes the Nats-TTL header the
// expiry time asks for, and refuses a past expiry without writing.
func TestUpdateUntilCarriesTTL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	js := newJS(t)
	b := openRec(t, js, "ttl_until", BucketOptions{PerKeyTTL: true})
	rev, err := b.CreateUntil(ctx, "k", rec{N: 1}, time.Now().Add(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := b.UpdateUntil(ctx, "k", rec{N: 2}, rev, time.Now().Add(2500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_ttl_until")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "$KV.ttl_until.k")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get("Nats-TTL"); got != "3s" && got != "3" {
		t.Errorf("Nats-TTL of the rewrite = %q, want 3s", got)
	}
	if _, err := b.UpdateUntil(ctx, "k", rec{N: 3}, rev2, time.Now().Add(-time.Millisecond)); !errors.Is(err, ErrExpired) {
		t.Errorf("UpdateUntil(past) = %v, want ErrExpired", err)
	}
	if v, r, err := b.Get(ctx, "k"); err != nil || v.N != 2 || r != rev2 {
		t.Errorf("after a refused UpdateUntil: Get = %+v @%d, %v, want {N:2} @%d", v, r, err, rev2)
	}
	eventually(t, 5*time.Second, "the key to expire", gone(t, b, "k"))
}
