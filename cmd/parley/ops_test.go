package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/internal/metrics"
	"github.com/parley-dev/parley/internal/natsserver"
)

// probe GETs url and returns the status code and body (0 when nothing
// answers).
func probe(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus polls url until it answers want, failing after d.
func waitStatus(t *testing.T, url string, want int, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		code, body := probe(url)
		if code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d %s after %v, want %d", url, code, body, d, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A worker started 10 s before NATS serves /livez at once, is not ready
// while it waits, becomes ready once NATS is up (no restart), is not ready
// while NATS is down, and is ready again when NATS comes back on the same
// port and store.
func TestReadyzFollowsNATS(t *testing.T) {
	prevPoll := metrics.SetConsumerPollInterval(300 * time.Millisecond)
	t.Cleanup(func() { metrics.SetConsumerPollInterval(prevPoll) })
	addr, haddr, dir := freeAddr(t), freeAddr(t), t.TempDir()
	var logs logSink
	ctx, cancel := context.WithCancel(t.Context())
	e := &env{Globals: &Globals{NATS: "nats://" + addr, LogLevel: "info", LogFormat: "json"}, ctx: ctx, stderr: &logs}
	cfg := roleConfig{
		store:     storeFlags{Storage: "file", Replicas: 1, StartupTimeout: time.Minute, PublishRetry: 20 * time.Second},
		processor: processorFlags{PauseTTL: time.Minute, Concurrency: 2},
		ops:       opsFlags{HealthListen: haddr, StallAfter: time.Minute},
	}
	done := make(chan error, 1)
	go func() { done <- serveRole(e, "processor", cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serveRole = %v", err)
			}
		case <-time.After(40 * time.Second):
			t.Error("serveRole did not return after cancel")
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	livez, readyz := "http://"+haddr+"/livez", "http://"+haddr+"/readyz"

	waitStatus(t, livez, http.StatusOK, 5*time.Second)
	if body := waitStatus(t, readyz, http.StatusServiceUnavailable, time.Second); !strings.Contains(body, "waiting for NATS") {
		t.Errorf("readyz before NATS = %s, want it to say it waits for NATS", body)
	}
	time.Sleep(10 * time.Second)
	if code, body := probe(readyz); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz 10s before NATS = %d %s, want 503", code, body)
	}
	select {
	case err := <-done:
		t.Fatalf("the worker exited before NATS came up: %v", err)
	default:
	}

	srv, err := natsserver.Start(natsserver.Options{Listen: addr, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	body := waitStatus(t, readyz, http.StatusOK, 30*time.Second)
	t.Logf("ready %v after NATS came up", time.Since(up).Round(time.Millisecond))
	var r struct {
		Status string
		Checks []struct {
			Name string
			OK   bool
		}
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range r.Checks {
		names = append(names, c.Name)
	}
	for _, want := range []string{"start-up processor", "stream PARLEY_CHAT", "stream KV_parley_paused", "consumer PARLEY_INPUT/", "consumer PARLEY_RUNS/"} {
		if !strings.Contains(strings.Join(names, "\n"), want) {
			t.Errorf("ready report lacks %q: %v", want, names)
		}
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	waitStatus(t, readyz, http.StatusServiceUnavailable, 10*time.Second)
	if code, body := probe(livez); code != http.StatusOK {
		t.Errorf("livez while NATS is down = %d %s, want 200 (the client reconnects)", code, body)
	}

	srv, err = natsserver.Start(natsserver.Options{Listen: addr, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	up = time.Now()
	waitStatus(t, readyz, http.StatusOK, 30*time.Second)
	t.Logf("ready again %v after NATS restarted", time.Since(up).Round(time.Millisecond))
}

// parley dev stops with an error naming the role when one of its workers
// dies: by returning an error, by returning early, or by losing its
// connection for good. The other workers are stopped, not left running.
func TestDevStopsWhenAWorkerDies(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	for _, tt := range []struct {
		name string
		die  func(ctx context.Context, nc *nats.Conn) error
		want string
	}{
		{"error", func(context.Context, *nats.Conn) error { return errors.New("consumer gone") }, "worker agent stopped: consumer gone"},
		{"return", func(context.Context, *nats.Conn) error { return nil }, "worker agent stopped: it returned before being asked to stop"},
		{"connection closed", func(ctx context.Context, nc *nats.Conn) error { nc.Close(); <-ctx.Done(); return nil },
			"worker agent stopped: its NATS connection was closed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stopped atomic.Int32
			prev := runRoleFunc
			runRoleFunc = func(ctx context.Context, role string, nc *nats.Conn, _ roleConfig, _ *slog.Logger) error {
				if role == "agent" {
					time.Sleep(300 * time.Millisecond)
					return tt.die(ctx, nc)
				}
				<-ctx.Done()
				stopped.Add(1)
				return nil
			}
			t.Cleanup(func() { runRoleFunc = prev })
			var logs logSink
			e := &env{Globals: &Globals{LogLevel: "info", LogFormat: "text"}, ctx: t.Context(), stderr: &logs}
			wait, err := startWorkers(t.Context(), srv.ClientURL(), []string{"gate", "toolexec", "agent", "processor"}, roleConfig{}, e)
			if err != nil {
				t.Fatal(err)
			}
			res := make(chan error, 1)
			go func() { res <- wait() }()
			select {
			case err := <-res:
				if err == nil || err.Error() != tt.want {
					t.Fatalf("wait = %v, want %q", err, tt.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("startWorkers kept running 10s after the agent died")
			}
			if n := stopped.Load(); n != 3 {
				t.Errorf("%d other workers stopped, want 3", n)
			}
			if !strings.Contains(logs.String(), "a worker stopped; stopping the others") || !strings.Contains(logs.String(), "worker=agent") {
				t.Errorf("logs do not say which worker stopped:\n%s", logs.String())
			}
		})
	}
}

// A clean stop (ctx cancelled) is not a death: wait returns nil.
func TestDevCleanStop(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	prev := runRoleFunc
	runRoleFunc = func(ctx context.Context, _ string, _ *nats.Conn, _ roleConfig, _ *slog.Logger) error {
		<-ctx.Done()
		return nil
	}
	t.Cleanup(func() { runRoleFunc = prev })
	ctx, cancel := context.WithCancel(t.Context())
	e := &env{Globals: &Globals{LogLevel: "info", LogFormat: "text"}, ctx: ctx, stderr: io.Discard}
	wait, err := startWorkers(ctx, srv.ClientURL(), []string{"gate", "agent"}, roleConfig{}, e)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := wait(); err != nil {
		t.Fatalf("wait after a clean stop = %v, want nil", err)
	}
}

func TestOpsFlagsUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ args, want string }{
		{"processor --stall-after 1s", "--stall-after must be at least 10s"},
		{"gate --health-listen 8081", `--health-listen: "8081" is not host:port`},
		{"agent --metrics-listen nope", `--metrics-listen: "nope" is not host:port`},
	} {
		var stdout, stderr strings.Builder
		code := run(append(strings.Fields(tt.args), "--nats=nats://127.0.0.1:1"), strings.NewReader(""), &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}
