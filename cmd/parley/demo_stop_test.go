package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A worker that dies during the demo ends it at once, failed, naming the
// worker: the scenarios do not wait out their timeouts, and the workers'
// stop is reported.
func TestDemoStopsWhenAWorkerDies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo")
	}
	prev := runRoleFunc
	runRoleFunc = func(ctx context.Context, role string, nc *nats.Conn, cfg roleConfig, log *slog.Logger) error {
		if role == "agent" {
			time.Sleep(200 * time.Millisecond)
			return errors.New("model gone")
		}
		return runRole(ctx, role, nc, cfg, log)
	}
	t.Cleanup(func() { runRoleFunc = prev })
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run([]string{"demo", "--timeout", "20s"}, strings.NewReader(""), &stdout, &stderr)
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("the demo took %v after its agent died, want it to stop at once", el)
	}
	if code != 1 {
		t.Fatalf("demo exited %d, want 1\n%s\n%s", code, stdout.String(), stderr.String())
	}
	// Before the scenarios the set-up fails with the worker's death; during
	// them the scenario and the workers' verdict say it.
	if out := stdout.String() + stderr.String(); !strings.Contains(out, "worker agent stopped: model gone") {
		t.Errorf("the demo does not name the dead worker:\n%s", out)
	}
}
