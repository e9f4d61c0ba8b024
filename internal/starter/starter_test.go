package starter

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
)

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// until runs until ctx is cancelled and counts the roles that were.
func until(stopped *atomic.Int32) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		stopped.Add(1)
		return nil
	}
}

// waitResult runs g.Wait, failing the test when it does not return within d.
func waitResult(t *testing.T, g *Group, d time.Duration) error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- g.Wait() }()
	select {
	case err := <-res:
		return err
	case <-time.After(d):
		t.Fatalf("Wait still waiting after %v", d)
		return nil
	}
}

// A role that fails, or returns unasked, stops the others; Wait's error
// names the role and says why, and the death is logged.
func TestRoleDeathStopsTheOthers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		run  func(context.Context) error
		want string
	}{
		{"error", func(context.Context) error { return errors.New("consumer gone") }, "worker agent stopped: consumer gone"},
		{"return", func(context.Context) error { return nil }, "worker agent stopped: it returned before being asked to stop"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stopped atomic.Int32
			var logs syncBuffer
			g := Start(t.Context(), &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
				Role{Name: "processor", Run: until(&stopped)},
				Role{Name: "gate", Run: until(&stopped)},
				Role{Name: "agent", Run: func(ctx context.Context) error { time.Sleep(20 * time.Millisecond); return tt.run(ctx) }},
			)
			err := waitResult(t, g, 5*time.Second)
			var se *StoppedError
			if err == nil || err.Error() != tt.want || !errors.As(err, &se) || se.Role != "agent" {
				t.Fatalf("Wait = %v, want a *StoppedError %q", err, tt.want)
			}
			if n := stopped.Load(); n != 2 {
				t.Errorf("%d other roles were stopped, want 2", n)
			}
			if l := logs.String(); !strings.Contains(l, "a worker stopped; stopping the others") || !strings.Contains(l, "worker=agent") {
				t.Errorf("the log does not say which role stopped:\n%s", l)
			}
			if g.Context().Err() == nil {
				t.Error("the group's context is not cancelled after a death")
			}
		})
	}
}

// Cancelling the parent is a clean stop: Wait returns nil once every role
// returned, and a role's context.Canceled is not an error.
func TestCleanStop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var stopped atomic.Int32
	g := Start(ctx, nil, Role{Name: "a", Run: until(&stopped)},
		Role{Name: "b", Run: func(ctx context.Context) error { <-ctx.Done(); stopped.Add(1); return ctx.Err() }})
	cancel()
	if err := waitResult(t, g, 5*time.Second); err != nil {
		t.Fatalf("Wait after a clean stop = %v, want nil", err)
	}
	if n := stopped.Load(); n != 2 {
		t.Errorf("%d roles stopped, want 2", n)
	}
	if err := g.Wait(); err != nil {
		t.Errorf("a second Wait = %v, want the same nil", err)
	}
}

// A role that hangs on shutdown does not hold Wait past the drain timeout:
// Wait returns a *DrainError naming it (wrapping ErrDrainTimeout), and the
// roles that did stop are not reported.
func TestHangingRoleIsBoundedAndReported(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	var stopped atomic.Int32
	var logs syncBuffer
	g := Start(t.Context(), &Options{DrainTimeout: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		Role{Name: "agent", Run: until(&stopped)},
		Role{Name: "toolexec", Run: func(ctx context.Context) error { <-ctx.Done(); <-release; return nil }},
	)
	start := time.Now()
	err := g.Stop()
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Stop took %v with a drain timeout of 200ms", el)
	}
	var de *DrainError
	if !errors.As(err, &de) || de.Role != "toolexec" || !errors.Is(err, ErrDrainTimeout) {
		t.Fatalf("Stop = %v, want a *DrainError for toolexec wrapping ErrDrainTimeout", err)
	}
	if strings.Contains(err.Error(), "agent") {
		t.Errorf("Stop = %v reports agent, which stopped cleanly", err)
	}
	if !strings.Contains(logs.String(), "a worker did not stop in time") {
		t.Errorf("the hang is not logged:\n%s", logs.String())
	}
}

// A role that returns an error while draining (such as an unclean drain
// of its consumer) is reported, beside the death that stopped the group.
func TestUncleanDrainReported(t *testing.T) {
	t.Parallel()
	var unclean error = &bus.UncleanDrainError{Consumer: "processor", Running: 1, Timeout: 30 * time.Second}
	g := Start(t.Context(), nil,
		Role{Name: "processor", Run: func(ctx context.Context) error { <-ctx.Done(); return unclean }},
		Role{Name: "agent", Run: func(context.Context) error { return errors.New("model gone") }},
	)
	err := waitResult(t, g, 5*time.Second)
	var se *StoppedError
	var de *DrainError
	var ud *bus.UncleanDrainError
	if !errors.As(err, &se) || se.Role != "agent" || !errors.As(err, &de) || de.Role != "processor" || !errors.As(err, &ud) {
		t.Fatalf("Wait = %v, want agent's death and processor's unclean drain", err)
	}
}

// A role stopped alone is not a death: the group keeps running, and a
// replacement can be started (a processor restart).
func TestStopOneRole(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var stopped atomic.Int32
	g := New(ctx, nil)
	g.Go(Role{Name: "gate", Run: until(&stopped)})
	stop1 := g.Go(Role{Name: "processor-1", Run: until(&stopped)})
	if err := stop1(); err != nil {
		t.Fatalf("stopping processor-1 = %v, want nil", err)
	}
	if n := stopped.Load(); n != 1 {
		t.Fatalf("%d roles stopped, want only processor-1", n)
	}
	if g.Context().Err() != nil {
		t.Fatal("stopping one role stopped the group")
	}
	g.Go(Role{Name: "processor-2", Run: until(&stopped)})
	cancel()
	if err := waitResult(t, g, 5*time.Second); err != nil {
		t.Fatalf("Wait = %v, want nil", err)
	}
	if n := stopped.Load(); n != 3 {
		t.Errorf("%d roles stopped, want 3", n)
	}
	if err := g.Go(Role{Name: "late", Run: until(&stopped)})(); !errors.Is(err, ErrGroupStopped) {
		t.Errorf("Go after the stop: stop = %v, want ErrGroupStopped", err)
	}
}

// Stopping one role that hangs is bounded too.
func TestStopOneHangingRole(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	g := New(t.Context(), &Options{DrainTimeout: 100 * time.Millisecond})
	stop := g.Go(Role{Name: "processor-1", Run: func(ctx context.Context) error { <-ctx.Done(); <-release; return nil }})
	err := stop()
	var de *DrainError
	if !errors.As(err, &de) || de.Role != "processor-1" || !errors.Is(err, ErrDrainTimeout) {
		t.Fatalf("stop = %v, want a *DrainError for processor-1 wrapping ErrDrainTimeout", err)
	}
}
