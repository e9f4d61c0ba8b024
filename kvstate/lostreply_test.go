package kvstate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/internal/retry"
)

// A request whose reply is lost (here: the server is gone; in production
// a NATS node killed between receiving a request and answering it) fails
// each operation within retry.RequestTimeout, even under a handler's long
// deadline, instead of holding the handler (and its heartbeated message)
// until that deadline.
func TestOperationsFailWhenTheReplyIsLost(t *testing.T) {
	srv := bustest.NewServer(t)
	_, js := srv.JetStream(t)
	b := openRec(t, js, "lost_reply", BucketOptions{})
	rev, err := b.Put(t.Context(), "k", rec{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(t.Context(), "k"); err != nil { // the stream handle is cached
		t.Fatal(err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a handler's deadline
	defer cancel()
	ops := map[string]func() error{
		"Get":         func() error { _, _, err := b.Get(ctx, "k"); return err },
		"Create":      func() error { _, err := b.Create(ctx, "new", rec{N: 2}, 0); return err },
		"Update":      func() error { _, err := b.Update(ctx, "k", rec{N: 3}, rev, 0); return err },
		"Put":         func() error { _, err := b.Put(ctx, "k", rec{N: 4}); return err },
		"Delete":      func() error { return b.Delete(ctx, "k", rev) },
		"CreateUntil": func() error { _, err := b.CreateUntil(ctx, "ttl", rec{N: 5}, time.Now().Add(time.Hour)); return err },
	}
	var wg sync.WaitGroup
	for name, op := range ops {
		wg.Go(func() {
			start := time.Now()
			err := op()
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s with the reply lost: error %v, want one wrapping context.DeadlineExceeded", name, err)
			}
			if took > retry.RequestTimeout+3*time.Second {
				t.Errorf("%s with the reply lost returned after %v, want within retry.RequestTimeout (%v)", name, took.Round(time.Millisecond), retry.RequestTimeout)
			}
		})
	}
	wg.Wait()
}
