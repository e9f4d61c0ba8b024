package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/internal/natsserver"
	"github.com/parley-dev/parley/internal/telemetry"
)

type devCmd struct {
	DataDir string `name:"data-dir" env:"PARLEY_DATA_DIR" default:".parley" help:"JetStream file store directory."`
	Listen  string `name:"listen" env:"PARLEY_LISTEN" default:"127.0.0.1:4222" help:"Client address of the embedded NATS server."`
	Gateway string `name:"gateway-listen" env:"PARLEY_GATEWAY_LISTEN" default:"127.0.0.1:8080" help:"HTTP address of the gateway and web chat ('off' to not start it)."`
	storeFlags
	processorFlags
	agentFlags
	gateFlags
	mcpFlags
	toolexecFlags
	opsFlags
}

// Validate checks the flags (kong calls it after parsing).
func (c *devCmd) Validate() error {
	return firstErr(c.storeFlags.check(), c.processorFlags.check(), c.agentFlags.check(), c.mcpFlags.check(), c.toolexecFlags.check(), c.opsFlags.check())
}

func (c *devCmd) Run(e *env) error {
	shutdown, _ := telemetry.Setup(e.ctx, "parley-dev")
	defer func() { _ = shutdown(context.Background()) }()
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return fmt.Errorf("data-dir: %w", err)
	}
	abs, _ := filepath.Abs(c.DataDir)
	unlock, err := lockDataDir(abs)
	if err != nil {
		return err
	}
	defer unlock()
	srv, err := natsserver.Start(natsserver.Options{Listen: c.Listen, DataDir: abs})
	if err != nil {
		return err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	url := srv.ClientURL()
	cfg := roleConfig{store: c.storeFlags, processor: c.processorFlags, agent: c.agentFlags, gate: c.gateFlags, mcp: c.mcpFlags, toolexec: c.toolexecFlags}
	roles := []string{"gate", "toolexec", "agent", "processor"}
	hs, stopOps, err := startOps(e.ctx, "parley-dev", c.opsFlags, roles, e.logger(e.stderr))
	if err != nil {
		return err
	}
	defer stopOps()
	wait, err := startWorkers(health.With(e.ctx, hs), url, roles, cfg, e)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "parley dev: NATS with JetStream on %s (data in %s); processor, agent, toolexec and gate running.\n", url, abs)
	fmt.Fprintf(e.stdout, "Try: parley chat --nats %s   (Ctrl-C stops)\n", url)
	if c.Gateway != "off" {
		gw, err := startDevGateway(e.ctx, url, abs, c.Gateway, c.storeFlags, e)
		if err != nil {
			return err
		}
		defer func() { _ = gw() }()
	}
	return wait()
}

// runRoleFunc runs a role for startWorkers (tests replace it).
var runRoleFunc = runRole

// startWorkers runs each role on its own NATS connection to url (so every
// hop crosses the server) until ctx is cancelled. A role that stops on its
// own (an error, a return, or its connection closed for good) stops every
// other: wait then returns an error naming the role ("worker agent
// stopped: ..."), after the others have drained. After ctx is cancelled,
// wait returns nil once every role has stopped.
func startWorkers(ctx context.Context, url string, roles []string, cfg roleConfig, e *env) (wait func() error, err error) {
	log := e.logger(e.stderr)
	ctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	died := func(role string, err error) {
		if ctx.Err() != nil {
			return // stopping anyway: not a death
		}
		log.Error("a worker stopped; stopping the others", "worker", role, "error", err)
		cancel(&workerStopped{role: role, err: err})
	}
	for _, role := range roles {
		nc, err := client.Connect(url, "parley-"+role)
		if err != nil {
			cancel(err)
			wg.Wait()
			return nil, err
		}
		nc.SetClosedHandler(func(*nats.Conn) { died(role, errors.New("its NATS connection was closed")) })
		health.AddConn(ctx, nc)
		wg.Go(func() {
			defer nc.Close()
			err := runRoleFunc(ctx, role, nc, cfg, log)
			if err == nil {
				err = errors.New("it returned before being asked to stop")
			}
			died(role, err)
		})
	}
	return func() error {
		<-ctx.Done()
		wg.Wait()
		var ws *workerStopped
		if cause := context.Cause(ctx); errors.As(cause, &ws) {
			return ws
		}
		return nil
	}, nil
}

// workerStopped says which role of startWorkers stopped on its own, and why.
type workerStopped struct {
	role string
	err  error
}

func (w *workerStopped) Error() string { return fmt.Sprintf("worker %s stopped: %v", w.role, w.err) }
func (w *workerStopped) Unwrap() error { return w.err }
