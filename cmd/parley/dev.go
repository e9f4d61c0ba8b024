package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/parley-dev/parley/client"
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
}

// Validate checks the flags (kong calls it after parsing).
func (c *devCmd) Validate() error {
	return firstErr(c.storeFlags.check(), c.processorFlags.check(), c.agentFlags.check(), c.mcpFlags.check(), c.toolexecFlags.check())
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
	wait, err := startWorkers(e.ctx, url, []string{"gate", "toolexec", "agent", "processor"}, cfg, e)
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

// startWorkers runs each role on its own NATS connection to url (so every
// hop crosses the server) until ctx is cancelled. wait returns the first
// error.
func startWorkers(ctx context.Context, url string, roles []string, cfg roleConfig, e *env) (wait func() error, err error) {
	log := e.logger(e.stderr)
	var wg sync.WaitGroup
	errs := make(chan error, len(roles))
	for _, role := range roles {
		nc, err := client.Connect(url, "parley-"+role)
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
