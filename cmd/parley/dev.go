package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/internal/natsserver"
	"github.com/parley-dev/parley/internal/telemetry"
)

type devCmd struct {
	DataDir string `name:"data-dir" env:"PARLEY_DATA_DIR" default:".parley" help:"JetStream file store directory."`
	Listen  string `name:"listen" env:"PARLEY_LISTEN" default:"127.0.0.1:4222" help:"Client address of the embedded NATS server."`
	Gateway string `name:"gateway-listen" env:"PARLEY_GATEWAY_LISTEN" default:"127.0.0.1:8080" help:"HTTP address of the gateway and web chat ('off' to not start it)."`
	NoAuth  bool   `name:"no-auth" env:"PARLEY_DEV_NO_AUTH" help:"Serve NATS without authentication (anyone who can connect may do anything; refused unless --listen is a loopback address). Default: every role, and every client, needs its credentials from <data-dir>/auth."`
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
	so := natsserver.Options{Listen: c.Listen, DataDir: abs}
	creds := func(string) natsauth.Credentials { return natsauth.Credentials{} }
	authDir := devAuthDir(abs)
	if !c.NoAuth {
		// Secure by default: one nkey per role, generated at first start
		// and kept; the server refuses anonymous clients.
		if _, err := natsauth.Init(authDir, natsauth.Roles()); err != nil {
			return err
		}
		so.AuthConfig = filepath.Join(authDir, natsauth.AuthFile)
		creds = func(role string) natsauth.Credentials {
			return natsauth.Credentials{NKeyFile: filepath.Join(authDir, natsauth.SeedFile(role)), Principal: role}
		}
	}
	srv, err := natsserver.Start(so)
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
	wait, err := startWorkersAs(health.With(e.ctx, hs), url, creds, roles, cfg, e)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "parley dev: NATS with JetStream on %s (data in %s); processor, agent, toolexec and gate running.\n", url, abs)
	try := "parley chat --nats " + url
	if !c.NoAuth {
		fmt.Fprintf(e.stdout, "Credentials: %s (one nkey seed per principal; anonymous clients are refused).\n", authDir)
		if fallback, _ := filepath.Abs(devAuthDir(devDataDir())); fallback != authDir {
			try += " --nats-nkey " + filepath.Join(authDir, natsauth.SeedFile(natsauth.Integrator))
		}
	}
	fmt.Fprintf(e.stdout, "Try: %s   (Ctrl-C stops)\n", try)
	if c.Gateway != "off" {
		// The gateway stops with the workers: when one dies, wait returns
		// and dev exits rather than serving a web chat with nothing behind.
		gctx, stopGateway := context.WithCancel(e.ctx)
		defer stopGateway()
		gw, err := startDevGateway(gctx, url, abs, c.Gateway, c.storeFlags, creds(natsauth.Gateway), e)
		if err != nil {
			return err
		}
		defer func() { stopGateway(); _ = gw() }()
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
	return startWorkersAs(ctx, url, nil, roles, cfg, e)
}

// startWorkersAs is startWorkers with each role connecting with
// creds(role) (nil: no credentials).
func startWorkersAs(ctx context.Context, url string, creds func(role string) natsauth.Credentials, roles []string, cfg roleConfig, e *env) (wait func() error, err error) {
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
		var c natsauth.Credentials
		if creds != nil {
			c = creds(role)
		}
		nc, err := natsauth.Connect(url, "parley-"+role, c, log.With("worker", role))
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
