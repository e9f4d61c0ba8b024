package bus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
)

// BoundedKV's single-request operations fail within bus.RequestTimeout
// when the reply is lost (the server is gone), under a long deadline.
func TestBoundedKVFailsWhenTheReplyIsLost(t *testing.T) {
	srv := bustest.NewServer(t)
	_, js := srv.JetStream(t)
	raw, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "bounded", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	kv := bus.BoundedKV(raw)
	rev, err := kv.Put(t.Context(), "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ops := map[string]func() error{
		"Get":    func() error { _, err := kv.Get(ctx, "k"); return err },
		"Create": func() error { _, err := kv.Create(ctx, "new", []byte("2")); return err },
		"Update": func() error { _, err := kv.Update(ctx, "k", []byte("3"), rev); return err },
		"Delete": func() error { return kv.Delete(ctx, "k") },
	}
	var wg sync.WaitGroup
	for name, op := range ops {
		wg.Go(func() {
			start := time.Now()
			err := op()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s with the reply lost: error %v, want one wrapping context.DeadlineExceeded", name, err)
			}
			if took := time.Since(start); took > bus.RequestTimeout+3*time.Second {
				t.Errorf("%s with the reply lost returned after %v, want within %v", name, took.Round(time.Millisecond), bus.RequestTimeout)
			}
		})
	}
	wg.Wait()
}
