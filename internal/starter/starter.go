// Package starter starts parley's roles (processor, agent, tool-executor,
// gate, and optionally the gateway) and supervises them as one group: when
// one role stops on its own, the group says which role and why, cancels
// every other role and waits, for a bounded time, until they have drained.
//
// It is the one way the system is started: `parley dev`, `parley demo`,
// `parley bench` and the e2e harness run their roles in a Group, and the
// single-role commands (`parley processor`, ... — the processes the chaos
// test and a deployment run) build their role with the same constructors
// (Processor, Agent, Toolexec, Gate).
//
// A Group is like golang.org/x/sync/errgroup.WithContext, with three
// differences a supervisor needs: a role that returns nil before it was
// asked to stop is a failure too (a worker never finishes on its own); a
// role may be stopped and replaced alone (a processor restart) without
// stopping the group; and the wait for the others is bounded by
// Options.DrainTimeout, a role still running after it being reported
// rather than waited for forever.
//
// It is a composition root: it may import any of parley's packages; only
// cmd/parley and internal/bench import it.
package starter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultDrainTimeout is Options.DrainTimeout's default: how long a Group
// waits for its roles to return once they are asked to stop. It is longer
// than bus.ConsumerSpec's default drain timeout (30s), so that a consumer's
// own *bus.UncleanDrainError is reported before the group gives up on it,
// and shorter than the deployments' grace period before SIGKILL (40s,
// deploy/base), so that the report is written.
const DefaultDrainTimeout = 35 * time.Second

// ErrDrainTimeout is wrapped by the *DrainError of a role still running
// when Options.DrainTimeout ran out.
var ErrDrainTimeout = errors.New("still running after the drain timeout")

// ErrGroupStopped is the error of a stop function returned by Group.Go
// after the group had already stopped: the role was not started.
var ErrGroupStopped = errors.New("starter: the group has stopped")

// Role is one named unit a Group runs: Run runs until ctx is cancelled and
// then returns nil once it has drained (in-flight work finished or left
// for redelivery). An error, or a return before ctx is cancelled, is the
// role's death.
type Role struct {
	// Name names the role in errors and logs ("processor", "processor-2").
	Name string
	// Run runs the role until ctx is cancelled.
	Run func(ctx context.Context) error
}

// Options configure a Group. The zero value is usable.
type Options struct {
	// Logger receives the group's reports (a role died, a role did not
	// drain). Optional. Default: discard.
	Logger *slog.Logger
	// DrainTimeout bounds how long stopping waits for the roles to
	// return. Optional. Default: DefaultDrainTimeout.
	DrainTimeout time.Duration
}

// StoppedError is the error of Group.Wait when a role stopped on its own:
// it names the role and says why (Unwrap: the role's error).
type StoppedError struct {
	// Role is the role's name.
	Role string
	// Err is the role's error, or a description of how it stopped.
	Err error
}

// Error reads "worker <role> stopped: <why>".
func (e *StoppedError) Error() string { return fmt.Sprintf("worker %s stopped: %v", e.Role, e.Err) }

// Unwrap returns the role's error.
func (e *StoppedError) Unwrap() error { return e.Err }

// DrainError reports a role that did not stop cleanly once asked to: it
// returned an error while draining (such as a *bus.UncleanDrainError: work
// was left for redelivery), or it was still running when the drain timeout
// ran out (Err wraps ErrDrainTimeout; the role's goroutine is left behind).
type DrainError struct {
	// Role is the role's name.
	Role string
	// Err is the role's error, or wraps ErrDrainTimeout.
	Err error
}

// Error reads "worker <role> did not drain cleanly: <why>".
func (e *DrainError) Error() string {
	return fmt.Sprintf("worker %s did not drain cleanly: %v", e.Role, e.Err)
}

// Unwrap returns the role's error.
func (e *DrainError) Unwrap() error { return e.Err }

// errReturned is the death of a role that returned nil unasked.
var errReturned = errors.New("it returned before being asked to stop")

// Group runs roles until its context is cancelled or one of them stops on
// its own; see the package documentation. Its methods are safe for
// concurrent use.
type Group struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	log    *slog.Logger
	drain  time.Duration

	mu      sync.Mutex
	stopped bool // Wait began stopping: Go starts nothing more
	running map[*instance]struct{}
	drainEr []error // DrainErrors of roles that returned during the group's stop

	waitOnce sync.Once
	result   error // Wait's
}

// instance is one running role.
type instance struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	asked  bool  // stopped alone by its stop function (under Group.mu)
	err    error // Run's result, set before done is closed
}

// New returns a Group whose roles run until ctx is cancelled.
func New(ctx context.Context, opts *Options) *Group {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	ctx, cancel := context.WithCancelCause(ctx)
	return &Group{ctx: ctx, cancel: cancel, log: o.Logger, drain: o.DrainTimeout, running: map[*instance]struct{}{}}
}

// Start returns a Group running roles (see New and Go).
func Start(ctx context.Context, opts *Options, roles ...Role) *Group {
	g := New(ctx, opts)
	for _, r := range roles {
		g.Go(r)
	}
	return g
}

// Context is the group's context: cancelled when the group stops (its
// parent was cancelled, Stop was called, or a role died).
func (g *Group) Context() context.Context { return g.ctx }

// Go starts r in the group. stop stops r alone: it cancels r's context and
// waits (up to the drain timeout) until r returned; its error is nil after
// a clean drain, else a *DrainError (a *StoppedError when r had already
// died). A role stopped this way is not a death. After the group has
// stopped, r is not started and stop returns ErrGroupStopped.
func (g *Group) Go(r Role) (stop func() error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped || g.ctx.Err() != nil {
		return func() error { return ErrGroupStopped }
	}
	ctx, cancel := context.WithCancel(g.ctx)
	in := &instance{name: r.Name, cancel: cancel, done: make(chan struct{})}
	g.running[in] = struct{}{}
	go func() {
		err := r.Run(ctx)
		g.mu.Lock()
		in.err = err
		delete(g.running, in)
		asked, groupStopping := in.asked, g.ctx.Err() != nil
		switch {
		case asked:
		case !groupStopping:
			if err == nil {
				err = errReturned
			}
			g.log.Error("a worker stopped; stopping the others", "worker", r.Name, "error", err)
			g.cancel(&StoppedError{Role: r.Name, Err: err})
		case err != nil && !errors.Is(err, context.Canceled):
			g.drainEr = append(g.drainEr, &DrainError{Role: r.Name, Err: err})
		}
		g.mu.Unlock()
		cancel()
		close(in.done)
	}()
	return func() error { return g.stopOne(in) }
}

// stopOne stops one instance alone (Go's stop).
func (g *Group) stopOne(in *instance) error {
	g.mu.Lock()
	select {
	case <-in.done:
		g.mu.Unlock()
		if in.asked || in.err == nil {
			return nil
		}
		return &StoppedError{Role: in.name, Err: in.err}
	default:
	}
	in.asked = true
	g.mu.Unlock()
	in.cancel()
	t := time.NewTimer(g.drain)
	defer t.Stop()
	select {
	case <-in.done:
		if in.err != nil && !errors.Is(in.err, context.Canceled) {
			return &DrainError{Role: in.name, Err: in.err}
		}
		return nil
	case <-t.C:
		err := &DrainError{Role: in.name, Err: fmt.Errorf("%w of %v", ErrDrainTimeout, g.drain)}
		g.log.Error("a worker did not stop in time", "worker", in.name, "error", err)
		return err
	}
}

// Stop stops the group (as when its context is cancelled) and returns
// Wait's result.
func (g *Group) Stop() error {
	g.cancel(nil)
	return g.Wait()
}

// Wait waits until the group's context is cancelled or a role stops on
// its own, stops every role and waits (up to the drain timeout) until they
// returned. It returns nil after a clean stop; else the *StoppedError of
// the role that died, joined (errors.Join) with a *DrainError for each role
// that did not drain cleanly. Wait may be called more than once; the later
// calls return at once with the same result.
func (g *Group) Wait() error {
	g.waitOnce.Do(func() { g.result = g.wait() })
	return g.result
}

func (g *Group) wait() error {
	<-g.ctx.Done()
	g.mu.Lock()
	g.stopped = true
	var waiting []*instance
	for in := range g.running {
		waiting = append(waiting, in)
	}
	g.mu.Unlock()
	deadline := time.NewTimer(g.drain)
	defer deadline.Stop()
	expired := false
	var late []error
	for _, in := range waiting {
		if !expired {
			select {
			case <-in.done:
				continue
			case <-deadline.C:
				expired = true
			}
		}
		select {
		case <-in.done:
		default:
			err := &DrainError{Role: in.name, Err: fmt.Errorf("%w of %v", ErrDrainTimeout, g.drain)}
			g.log.Error("a worker did not stop in time", "worker", in.name, "error", err)
			late = append(late, err)
		}
	}
	var errs []error
	var died *StoppedError
	if errors.As(context.Cause(g.ctx), &died) {
		errs = append(errs, died)
	}
	g.mu.Lock()
	errs = append(errs, g.drainEr...)
	g.mu.Unlock()
	errs = append(errs, late...)
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
