package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

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
}

// Validate checks the flags (kong calls it after parsing).
func (c *devCmd) Validate() error {
	return firstErr(c.storeFlags.check(), c.processorFlags.check(), c.agentFlags.check(), c.mcpFlags.check())
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
	cfg := roleConfig{store: c.storeFlags, processor: c.processorFlags, agent: c.agentFlags, gate: c.gateFlags, mcp: c.mcpFlags}
	wait, err := startWorkersAs(e.ctx, url, creds, []string{"gate", "toolexec", "agent", "processor"}, cfg, e)
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
		gw, err := startDevGateway(e.ctx, url, abs, c.Gateway, c.storeFlags, creds(natsauth.Gateway), e)
		if err != nil {
			return err
		}
		defer func() { _ = gw() }()
	}
	return wait()
}

// startWorkers runs each role on its own NATS connection to url (so every
// hop crosses the server) until ctx is cancelled. wait returns the first
// error.
func startWorkers(ctx context.Context, url string, roles []string, cfg roleConfig, e *env) (wait func() error, err error) {
	return startWorkersAs(ctx, url, nil, roles, cfg, e)
}

// startWorkersAs is startWorkers with each role connecting with
// creds(role) (nil: no credentials).
func startWorkersAs(ctx context.Context, url string, creds func(role string) natsauth.Credentials, roles []string, cfg roleConfig, e *env) (wait func() error, err error) {
	log := e.logger(e.stderr)
	var wg sync.WaitGroup
	errs := make(chan error, len(roles))
	for _, role := range roles {
		var c natsauth.Credentials
		if creds != nil {
			c = creds(role)
		}
		nc, err := natsauth.Connect(url, "parley-"+role, c, log.With("worker", role))
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			defer nc.Close()
			if err := runRole(ctx, role, nc, cfg, log); err != nil {
				errs <- fmt.Errorf("%s: %w", role, err)
			}
		})
	}
	return func() error {
		wg.Wait()
		close(errs)
		return <-errs
	}, nil
}
