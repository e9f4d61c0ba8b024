package agent

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
)

// Eight agents starting at once on a fresh 3-node cluster all open the
// result object store (replicas 3): create before update, retried, never a
// racing create-or-update that times out.
func TestOpenResultsConcurrentOnFreshCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := bustest.NewCluster(t, 3)
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		_, js := cl.JetStream(t)
		wg.Go(func() {
			<-start
			ctx := bus.WithStartupPolicy(t.Context(), bus.RetryPolicy{Timeout: time.Minute})
			if _, err := openResults(ctx, js, jetstream.FileStorage, 3, time.Hour); err != nil {
				errs <- err
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
