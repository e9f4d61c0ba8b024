package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/internal/natsserver"
	"github.com/parley-dev/parley/internal/starter"
	"github.com/parley-dev/parley/internal/telemetry"
)

type devCmd struct {
	DataDir string `name:"data-dir" env:"PARLEY_DATA_DIR" default:".parley" help:"JetStream file store directory."`
	Listen  string `name:"listen" env:"PARLEY_LISTEN" default:"127.0.0.1:4222" help:"Client address of the embedded NATS server."`
	Gateway string `name:"gateway-listen" env:"PARLEY_GATEWAY_LISTEN" default:"127.0.0.1:8080" help:"HTTP address of the gateway and web chat ('off' to not start it)."`
	NoAuth  bool   `name:"no-auth" env:"PARLEY_DEV_NO_AUTH" help:"Serve NATS without authentication (anyone who can connect may do anything; refused unless --listen is a loopback address). Default: every role, and every client, needs its credentials from <data-dir>/auth."`
	storeFlags
	processorFlags
	// Forms default to 2025-11-25 here: the web chat and `parley chat`,
	// the clients dev serves, render it (prefilled defaults included).
	agentFlags `set:"form_revision=2025-11-25"`
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
		// A principal for every policy the agent expects and the gate's
		// own name: only policy P's principal may answer as P.
		gateName := c.PolicyName
		if gateName == "" {
			gateName = natsauth.Gate // a config built in code: the gate's default
		}
		ps, err := natsauth.Set(nil, devPolicies(c.Policies, gateName))
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--policies/--policy-name: %w", err)}
		}
		if _, err := natsauth.Init(authDir, ps); err != nil {
			return err
		}
		so.AuthConfig = filepath.Join(authDir, natsauth.AuthFile)
		creds = func(role string) natsauth.Credentials {
			if role == starter.RoleGate {
				role = gateName // the gate answers as its policy's principal
			}
			return natsauth.Credentials{NKeyFile: filepath.Join(authDir, natsauth.SeedFile(role)), Principal: role}
		}
	}
	srv, err := natsserver.Start(so)
	if err != nil {
		return listenHint(err, "--listen", "127.0.0.1:4223")
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	url := srv.ClientURL()
	cfg := devRoleConfig(c)
	roles := []string{"gate", "toolexec", "agent", "processor"}
	hs, stopOps, err := startOps(e.ctx, "parley-dev", c.opsFlags, roles, e.logger(e.stderr))
	if err != nil {
		return err
	}
	defer stopOps()
	// Every role, and the gateway, runs in one group: when one dies, dev
	// stops the rest and exits with an error naming it.
	g, err := startRoles(health.With(e.ctx, hs), url, creds, roles, cfg, e)
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
	if c.GateConfig == "" {
		fmt.Fprintln(e.stdout, "Policy: the demo policy (workers/gate/dev-policy.json): publishing is vetoed, and the agent support may not delete; --gate-config for your own.")
	}
	fmt.Fprintf(e.stdout, "Try: %s   (Ctrl-C stops)\n", try)
	if c.Gateway != "off" {
		// The gateway serves until the group stops; its Serve returning
		// before that is its death.
		gw, err := startDevGateway(g.Context(), url, abs, c.Gateway, c.storeFlags, creds(natsauth.Gateway), e)
		if err != nil {
			// A worker that died while the gateway started cancelled the
			// gateway's start: the death is the cause to report.
			if gerr := g.Stop(); gerr != nil && g.Context().Err() != nil {
				return gerr
			}
			return err
		}
		g.Go(starter.Role{Name: natsauth.Gateway, Run: func(context.Context) error { return gw() }})
	}
	return g.Wait()
}

// devPolicies are the policy principals parley dev adds to its roles: the
// agent's expected policies and the gate's policy name, but the gate
// (a role already), once each.
func devPolicies(expected []string, gateName string) []string {
	var out []string
	for _, p := range append(slices.Clone(expected), gateName) {
		if p != "" && p != natsauth.Gate && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// devRoleConfig is the configuration of dev's roles: its flags, with
// gate.DevConfig as the policy unless --gate-config names a file.
func devRoleConfig(c *devCmd) roleConfig {
	cfg := roleConfig{store: c.storeFlags, processor: c.processorFlags, agent: c.agentFlags, gate: c.gateFlags, mcp: c.mcpFlags, toolexec: c.toolexecFlags}
	cfg.gate.devPolicy = true
	return cfg
}

// runRoleFunc runs a role for startWorkers (tests replace it).
var runRoleFunc = runRole

// startWorkers runs each role on its own NATS connection to url (so every
// hop crosses the server) until ctx is cancelled. A role that stops on its
// own (an error, a return, or its connection closed for good) stops every
// other: wait then returns an error naming the role ("worker agent
// stopped: ..."), after the others have drained. After ctx is cancelled,
// wait returns nil once every role has stopped cleanly (see starter.Group).
func startWorkers(ctx context.Context, url string, roles []string, cfg roleConfig, e *env) (wait func() error, err error) {
	return startWorkersAs(ctx, url, nil, roles, cfg, e)
}

// startWorkersAs is startWorkers with each role connecting with
// creds(role) (nil: no credentials). Every role is connected before any
// starts; an error connecting is returned at once.
func startWorkersAs(ctx context.Context, url string, creds func(role string) natsauth.Credentials, roles []string, cfg roleConfig, e *env) (wait func() error, err error) {
	g, err := startRoles(ctx, url, creds, roles, cfg, e)
	if err != nil {
		return nil, err
	}
	return g.Wait, nil
}

// startRoles is startWorkersAs returning the group the roles run in.
func startRoles(ctx context.Context, url string, creds func(role string) natsauth.Credentials, roles []string, cfg roleConfig, e *env) (*starter.Group, error) {
	var rs []connectedRole
	for _, role := range roles {
		r, err := workerRole(role, role, url, creds, cfg, e)
		if err != nil {
			for _, r := range rs {
				r.nc.Close()
			}
			return nil, err
		}
		rs = append(rs, r)
	}
	// The streams exist before startRoles returns, so that a client
	// started at once (dev's "Try: parley chat") finds them; each role
	// ensures them again (a no-op) at its start.
	for _, r := range rs {
		if r.role == starter.RoleGate {
			continue // its principal may not create streams
		}
		o := cfg.common(e.logger(e.stderr)).Bus
		b, err := bus.New(r.nc, &o)
		if err == nil {
			err = b.EnsureStreams(ctx)
		}
		if err != nil {
			for _, r := range rs {
				r.nc.Close()
			}
			return nil, fmt.Errorf("worker %s: %w", r.Name, err)
		}
		break
	}
	g := startGroup(ctx, e)
	for _, r := range rs {
		g.Go(r.Role)
	}
	return g, nil
}

// startGroup is the starter.Group of dev and demo, logging to e.
func startGroup(ctx context.Context, e *env) *starter.Group {
	return starter.New(ctx, &starter.Options{Logger: e.logger(e.stderr)})
}

// connectedRole is a role instance whose connection is open.
type connectedRole struct {
	starter.Role
	role string     // the role it runs
	nc   *nats.Conn // its connection (closed by Role.Run)
}

// workerRole connects the role instance name to url as principal role
// with creds(role), and returns it running role (runRoleFunc) on that
// connection.
func workerRole(name, role, url string, creds func(role string) natsauth.Credentials, cfg roleConfig, e *env) (connectedRole, error) {
	log := e.logger(e.stderr)
	var c natsauth.Credentials
	if creds != nil {
		c = creds(role)
	}
	nc, err := natsauth.Connect(url, "parley-"+name, c, log.With("worker", name))
	if err != nil {
		return connectedRole{}, fmt.Errorf("worker %s: %w", name, err)
	}
	return connectedRole{Role: starter.OnConn(name, nc, func(ctx context.Context, nc *nats.Conn) error {
		return runRoleFunc(ctx, role, nc, cfg, log)
	}), role: role, nc: nc}, nil
}
