package starter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/workers/agent"
	"github.com/parley-dev/parley/workers/gate"
	"github.com/parley-dev/parley/workers/processor"
	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// The four worker roles, and the principal (internal/natsauth) each
// connects as.
const (
	RoleProcessor = "processor"
	RoleAgent     = "agent"
	RoleToolexec  = "toolexec"
	RoleGate      = "gate"
)

// ConnectFunc opens the NATS connection of one role instance: name is the
// connection name ("parley-processor-2"), principal whose credentials it
// uses (a natsauth principal: processor, agent, toolexec, gate, gateway).
// Every instance gets its own connection, so every hop crosses the server
// and every role is held to its own permissions.
type ConnectFunc func(ctx context.Context, name, principal string) (*nats.Conn, error)

// Worker runs a role on nc until ctx is cancelled, then drains and returns
// (nil after a clean drain). Processor, Agent, Toolexec and Gate build one.
type Worker func(ctx context.Context, nc *nats.Conn) error

// ErrConnClosed is the death of a role whose NATS connection was closed
// for good (it no longer reconnects).
var ErrConnClosed = errors.New("its NATS connection was closed")

// Connected returns the Role name that connects with connect (as
// principal, connection name "parley-"+name) and then runs w like OnConn.
// An error connecting is the role's death.
func Connected(name, principal string, connect ConnectFunc, w Worker) Role {
	return Role{Name: name, Run: func(ctx context.Context) error {
		nc, err := connect(ctx, "parley-"+name, principal)
		if err != nil {
			return err
		}
		return OnConn(name, nc, w).Run(ctx)
	}}
}

// OnConn returns the Role name that runs w on the open connection nc,
// registers nc with the health state on ctx (health.AddConn), and closes
// nc when w returns. nc closed for good before the role is asked to stop
// is the role's death (ErrConnClosed). OnConn replaces nc's closed
// handler.
func OnConn(name string, nc *nats.Conn, w Worker) Role {
	return Role{Name: name, Run: func(ctx context.Context) error {
		defer nc.Close()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var lost atomic.Bool // closed for good while the role ran
		nc.SetClosedHandler(func(*nats.Conn) { lost.Store(true); cancel() })
		if nc.IsClosed() {
			lost.Store(true)
			cancel()
		}
		health.AddConn(ctx, nc)
		err := w(ctx, nc)
		if lost.Load() {
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("%w: %w", ErrConnClosed, err)
			}
			return ErrConnClosed
		}
		return err
	}}
}

// Common are the settings every role shares.
type Common struct {
	// Logger receives the role's logs (the caller adds the role's name).
	// Optional. Default: discard.
	Logger *slog.Logger
	// Bus are the bus options of the role's connection (Logger is
	// replaced by Common.Logger). Bus.StartupTimeout > 0 also bounds every
	// start-up step (streams, buckets, consumers) together, from the
	// role's start, unless ctx already carries a bus.WithStartupPolicy.
	Bus bus.Options
	// NoStreams skips creating the streams (EnsureStreams): someone else
	// (an operator, a test's driver) has created them.
	NoStreams bool
	// Started, when set, is called with the role's name (RoleProcessor,
	// ...) once the role has finished its start-up (streams, buckets,
	// consumers' configuration, tool registration) and is about to run;
	// see AwaitStarted. Optional.
	Started func(role string)
}

// started reports role's start-up (health and Started).
func (c Common) started(ctx context.Context, role string, nc *nats.Conn, consumes bool) {
	health.Started(ctx, role, nc, consumes)
	if c.Started != nil {
		c.Started(role)
	}
}

// AwaitStarted waits until n roles have reported their start-up on
// started (a channel Common.Started sends the role's name to), and returns
// nil; or returns the cause when g stops first (a role died), or ctx's
// error when it ends first.
func AwaitStarted(ctx context.Context, g *Group, started <-chan string, n int) error {
	for range n {
		select {
		case <-started:
		case <-g.Context().Done():
			return fmt.Errorf("starting: %w", context.Cause(g.Context()))
		case <-ctx.Done():
			return fmt.Errorf("starting: %w", context.Cause(ctx))
		}
	}
	return nil
}

// start connects the bus of a role on nc, sets the start-up policy on ctx
// and creates the streams (unless streams is false or c.NoStreams).
func (c Common) start(ctx context.Context, nc *nats.Conn, streams bool) (context.Context, *bus.Client, *slog.Logger, error) {
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := c.Bus
	o.Logger = log
	b, err := bus.New(nc, &o)
	if err != nil {
		return ctx, nil, log, err
	}
	if o.StartupTimeout > 0 {
		// Every start-up step retries through a leader election or a
		// concurrent start of other replicas until StartupTimeout after
		// the start (sharing a single-role command's connection
		// deadline when it set one).
		p := bus.StartupPolicy(ctx, bus.RetryPolicy{Timeout: o.StartupTimeout, Deadline: time.Now().Add(o.StartupTimeout)})
		p.Logger = log
		ctx = bus.WithStartupPolicy(ctx, p)
	}
	if streams && !c.NoStreams {
		if err := b.EnsureStreams(ctx); err != nil {
			return ctx, nil, log, err
		}
	}
	return ctx, b, log, nil
}

// worker is the Worker of role: it starts the role's bus (creating the
// streams when streams), builds the role with build (given the role's
// context, bus and logger), reports its start-up (consumes: whether it runs
// consumers, for readiness) and runs what build returned.
func worker(c Common, role string, streams, consumes bool,
	build func(ctx context.Context, b *bus.Client, log *slog.Logger) (run func(context.Context) error, err error)) Worker {
	return func(ctx context.Context, nc *nats.Conn) error {
		ctx, b, log, err := c.start(ctx, nc, streams)
		if err != nil {
			return err
		}
		run, err := build(ctx, b, log)
		if err != nil {
			return err
		}
		c.started(ctx, role, nc, consumes)
		log.Info("worker starting", "nats", nc.ConnectedUrlRedacted())
		defer log.Info("worker stopped")
		return run(ctx)
	}
}

// orLog is l, or log when l is nil.
func orLog(l, log *slog.Logger) *slog.Logger {
	if l == nil {
		return log
	}
	return l
}

// Processor is the processor role with opts (see processor.New; a nil
// Logger is Common.Logger's).
func Processor(c Common, opts processor.Options) Worker {
	return worker(c, RoleProcessor, true, true, func(ctx context.Context, b *bus.Client, log *slog.Logger) (func(context.Context) error, error) {
		opts.Logger = orLog(opts.Logger, log)
		p, err := processor.New(ctx, b, &opts)
		if err != nil {
			return nil, err
		}
		return p.Run, nil
	})
}

// Agent is the agent role calling provider, with opts (see agent.New; a
// nil Logger is Common.Logger's).
func Agent(c Common, provider model.Provider, opts agent.Options) Worker {
	return worker(c, RoleAgent, true, true, func(ctx context.Context, b *bus.Client, log *slog.Logger) (func(context.Context) error, error) {
		if provider == nil {
			return nil, errors.New("starter: agent without a model provider")
		}
		opts.Logger = orLog(opts.Logger, log)
		a, err := agent.New(ctx, b, provider, &opts)
		if err != nil {
			return nil, err
		}
		return a.Run, nil
	})
}

// ToolexecConfig is what the tool-executor role serves.
type ToolexecConfig struct {
	// Tools are the built-in tools. Optional. Default (nil): Site's.
	Tools []builtin.Tool
	// Site is the demo site, whose read-only entity lookup (the gateway's
	// /v1/lookup/entities) the role serves beside the tools. Optional.
	// Default (nil, and Tools nil): the site opened on the role's
	// connection with SiteOptions; with Tools set, no site and no lookup.
	Site *builtin.Site
	// SiteOptions open the demo site when Tools and Site are nil.
	// Optional. Default: the site's defaults, on Common.Bus's storage and
	// replicas.
	SiteOptions builtin.SiteOptions
	// Sources open further tool sources (MCP servers) when the role
	// starts; close is called when it stops. Optional.
	Sources func(ctx context.Context, log *slog.Logger) (sources []toolexec.Source, close func(), err error)
	// Options are the executor's (see toolexec.New; a nil Logger is
	// Common.Logger's; Sources are appended to those opened by Sources).
	Options toolexec.Options
}

// Toolexec is the tool-executor role with cfg.
func Toolexec(c Common, cfg ToolexecConfig) Worker {
	return worker(c, RoleToolexec, true, true, func(ctx context.Context, b *bus.Client, log *slog.Logger) (_ func(context.Context) error, err error) {
		opts := cfg.Options
		opts.Logger = orLog(opts.Logger, log)
		tools, site := cfg.Tools, cfg.Site
		if tools == nil && site == nil {
			so := cfg.SiteOptions
			if so == (builtin.SiteOptions{}) {
				so.Storage, so.Replicas = c.Bus.Storage, c.Bus.Replicas
			}
			if site, err = builtin.OpenSite(ctx, b.JetStream(), &so); err != nil {
				return nil, err
			}
		}
		if tools == nil {
			tools = site.Tools()
		}
		closeSources := func() {}
		if cfg.Sources != nil {
			var sources []toolexec.Source
			if sources, closeSources, err = cfg.Sources(ctx, log); err != nil {
				return nil, err
			}
			opts.Sources = append(append([]toolexec.Source(nil), opts.Sources...), sources...)
		}
		x, err := toolexec.New(ctx, b, tools, &opts)
		if err != nil {
			closeSources()
			return nil, err
		}
		return func(ctx context.Context) error {
			defer closeSources()
			if site != nil {
				// Without the lookup the web chat shows plain fields: a
				// warning, not the role's death.
				go func() {
					if err := site.ServeLookup(ctx, b); err != nil {
						log.Warn("entity lookup not served", "error", err)
					}
				}()
			}
			return x.Run(ctx)
		}, nil
	})
}

// Gate is the gate role deciding with cfg (nil: gate.DefaultConfig), with
// opts (see gate.NewWithOptions; a nil Logger is Common.Logger's). The gate
// answers requests on core NATS and owns no stream: it creates none (its
// principal may not).
func Gate(c Common, cfg *gate.Config, opts gate.Options) Worker {
	return worker(c, RoleGate, false, false, func(_ context.Context, b *bus.Client, log *slog.Logger) (func(context.Context) error, error) {
		opts.Logger = orLog(opts.Logger, log)
		g, err := gate.NewWithOptions(b, cfg, &opts)
		if err != nil {
			return nil, err
		}
		return g.Run, nil
	})
}

// WaitService waits until the NATS micro service name (gate.ServiceName,
// ...) answers discovery ($SRV.PING.<name>) on nc: the moment a role that
// serves requests (the gate) takes them, which its start-up report
// (Common.Started) precedes. It gives up when g stops (a role died: the
// cause), when ctx ends, or after timeout.
func WaitService(ctx context.Context, g *Group, nc *nats.Conn, name string, timeout time.Duration) error {
	subject, err := micro.ControlSubject(micro.PingVerb, name, "")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		if _, err := nc.Request(subject, nil, 200*time.Millisecond); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", name, context.Cause(ctx))
		case <-g.Context().Done():
			return fmt.Errorf("waiting for %s: %w", name, context.Cause(g.Context()))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer %s within %v", name, subject, timeout)
		}
	}
}
