package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/internal/natsserver"
)

// logSink is a bytes.Buffer safe for a logger and a reader at once.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A worker started before NATS waits for it, logging each try, and
// connects once it is up (it used to exit at once).
func TestWorkerWaitsForNATS(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	var logs logSink
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	type result struct {
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		nc, err := connectWorker(t.Context(), "nats://"+addr, "parley-test", bus.RetryPolicy{Timeout: 30 * time.Second, Logger: log})
		if err == nil {
			nc.Close()
		}
		done <- result{err, time.Now()}
	}()
	time.Sleep(1500 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("connectWorker returned before NATS was up: %v", r.err)
	default:
	}
	up := time.Now()
	srv, err := natsserver.Start(natsserver.Options{Listen: addr, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("connectWorker = %v, want a connection once NATS is up", r.err)
		}
		t.Logf("connected %v after NATS came up", r.at.Sub(up).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("connectWorker still waiting 15s after NATS came up")
	}
	if n := strings.Count(logs.String(), `"op":"waiting for NATS"`); n < 2 {
		t.Errorf("logged %d retries, want one per try:\n%s", n, logs.String())
	}
}

// When the start-up budget runs out the error says what gave up after how
// many tries.
func TestWorkerStartupBudget(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := connectWorker(context.Background(), "nats://"+freeAddr(t), "parley-test", bus.RetryPolicy{Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "waiting for NATS: gave up after") {
		t.Fatalf("connectWorker with nothing listening = %v, want a gave-up error", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("took %v with a 1s budget", el)
	}
}

func TestStartupFlagsUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ args, want string }{
		{"processor --startup-timeout 0s", "--startup-timeout must be at least 1s"},
		{"gate --publish-retry=-1s", "--publish-retry must not be negative"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append(strings.Fields(tt.args), "--nats=nats://127.0.0.1:1"), strings.NewReader(""), &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
	if s := (storeFlags{PublishRetry: 0}).publishRetry(); s >= 0 {
		t.Errorf("--publish-retry 0 maps to %v, want a single try (negative)", s)
	}
}
