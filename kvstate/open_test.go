package kvstate

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/internal/retry"
)

// Replicas of several roles opening the same R3 buckets at the same moment
// on a fresh 3-node cluster all succeed.
func TestOpenBucketConcurrentOnFreshCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	t.Parallel()
	cl := bustest.NewCluster(t, 3)
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 24)
	for i := range 8 {
		_, js := cl.JetStream(t)
		wg.Go(func() {
			<-start
			for _, name := range []string{BucketPaused, BucketThreads, "tools-" + string(rune('a'+i%2))} {
				if _, err := OpenBucket[rec](t.Context(), js, name, BucketOptions{Replicas: 3, PerKeyTTL: name == BucketPaused,
					StartupTimeout: time.Minute}); err != nil {
					errs <- err
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A bucket the server holds with other storage fails at once, naming the
// bucket and the field; a changeable difference (TTL) is updated.
func TestOpenBucketConfigDifferences(t *testing.T) {
	t.Parallel()
	js := newJS(t)
	if _, err := OpenBucket[rec](t.Context(), js, "mem", BucketOptions{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := OpenBucket[rec](t.Context(), js, "mem", BucketOptions{Storage: jetstream.FileStorage})
	if err == nil || !strings.Contains(err.Error(), "bucket mem") || !strings.Contains(err.Error(), "storage") || !retry.IsPermanent(err) {
		t.Fatalf("OpenBucket(other storage) = %v, want a permanent error naming the bucket and storage", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v (retried?)", el)
	}
	b, err := OpenBucket[rec](t.Context(), js, "mem", BucketOptions{Storage: jetstream.MemoryStorage, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.KV().Status(t.Context())
	if err != nil || st.TTL() != time.Hour {
		t.Errorf("bucket TTL after reopening with 1h = %v (%v), want 1h", st.TTL(), err)
	}
}
