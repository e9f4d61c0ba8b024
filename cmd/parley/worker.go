package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/internal/starter"
	"github.com/parley-dev/parley/internal/telemetry"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/agent"
	"github.com/parley-dev/parley/workers/gate"
	"github.com/parley-dev/parley/workers/processor"
	"github.com/parley-dev/parley/workers/toolexec"
)

// storeFlags choose where streams and buckets live, and how long a worker
// waits for NATS at start-up and for a JetStream acknowledgement.
type storeFlags struct {
	Storage        string        `name:"storage" env:"PARLEY_STORAGE" default:"file" enum:"file,memory" help:"JetStream storage of streams and buckets (${enum})."`
	Replicas       int           `name:"replicas" env:"PARLEY_REPLICAS" default:"1" help:"Replicas of streams and buckets, 1 to 5 (3 on a cluster)."`
	StartupTimeout time.Duration `name:"startup-timeout" env:"PARLEY_STARTUP_TIMEOUT" default:"2m" help:"How long start-up retries connecting to NATS and creating streams, buckets and consumers (through a leader election or a node restart) before the worker exits 1."`
	PublishRetry   time.Duration `name:"publish-retry" env:"PARLEY_PUBLISH_RETRY" default:"20s" help:"How long a JetStream publish is retried (same Nats-Msg-Id, so never stored twice) while a stream has no leader; 0 disables retries."`
}

func (s storeFlags) storage() jetstream.StorageType {
	if s.Storage == "memory" {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

type processorFlags struct {
	PauseTTL    time.Duration `name:"pause-ttl" env:"PARLEY_PAUSE_TTL" default:"24h" help:"How long a paused turn waits for answers (at least 1s)."`
	Concurrency int           `name:"concurrency" env:"PARLEY_CONCURRENCY" default:"8" help:"Events handled at once per consumer (at least 1)."`
	// TrustedPrincipals: see processor.Options.TrustedPrincipals.
	TrustedPrincipals []string `name:"trusted-principals" env:"PARLEY_TRUSTED_PRINCIPALS" default:"gateway" help:"NATS principals trusted to name the end user they act for (onBehalfOf), comma-separated; a name from any other principal is rejected forbidden."`
	// NoStandingApprovals, StandingTTLs: see
	// processor.Options.NoStandingApprovals and StandingTTLs.
	NoStandingApprovals bool            `name:"no-standing-approvals" env:"PARLEY_NO_STANDING_APPROVALS" help:"Offer no standing approvals (\"allow this tool for this thread\"), and run no call under one granted before."`
	StandingTTLs        []time.Duration `name:"standing-ttl" env:"PARLEY_STANDING_TTLS" help:"Shorter lifetimes a confirmation offers for a standing approval besides the default (e.g. 1h: \"for 1 hour\"), comma-separated whole seconds; the default lasts the pause TTL for a destructive tool, the thread TTL otherwise."`
}

type agentFlags struct {
	Rules             string        `name:"rules" env:"PARLEY_MODEL_RULES" type:"existingfile" help:"Scripted model rules file (JSON); default: the built-in demo rules."`
	PreExecuteTimeout time.Duration `name:"pre-execute-timeout" env:"PARLEY_PRE_EXECUTE_TIMEOUT" default:"2s" help:"How long to wait for the policy services."`
	PreExecuteSettle  time.Duration `name:"pre-execute-settle" env:"PARLEY_PRE_EXECUTE_SETTLE" default:"100ms" help:"How long to keep listening after every expected policy answered (unless one vetoed, or the tool is read-only): a second answer of a policy in that time still counts, the stricter one winning. 0: the default."`
	Policies          []string      `name:"policies" env:"PARLEY_POLICIES" default:"gate" help:"Policy services every tool call waits for (comma-separated names); one that does not answer vetoes a tool that is not read-only."`
	ModelCallTimeout  time.Duration `name:"model-call-timeout" env:"PARLEY_MODEL_CALL_TIMEOUT" default:"10m" help:"How long one model call, all its attempts and retry waits included, may take; after it the turn fails with reason model_timeout."`
	// ProgressDelay: see agent.Options.ProgressDelay; 0 or less here
	// announces every phase at once.
	ProgressDelay time.Duration `name:"progress-delay" env:"PARLEY_PROGRESS_DELAY" default:"200ms" help:"How long a phase of a turn (a model call, a policy check, a tool call) must last before its progress is published; shorter phases publish none. 0: every phase's progress at once."`
	// FormRevision: see agent.Options.FormRevision. Its default is the
	// kong variable form_revision: 2025-06-18 (formRevisionVar), set to
	// 2025-11-25 by `parley dev`, whose clients render that.
	FormRevision string `name:"form-revision" env:"PARLEY_FORM_REVISION" default:"${form_revision}" enum:"2025-06-18,2025-11-25,2026-07-28" help:"The MCP revision the people's clients render forms in (${enum}): a question (a tool's, a policy's or an MCP server's elicitation) that needs a later one fails the call instead of pausing; a string, number or enum default (a 2025-11-25 prefill) is dropped for 2025-06-18 rather than failing. parley chat and the web chat render 2025-11-25 (titled and multi-select enums, defaults)."`
	modelFlags
}

// toolexecFlags configure the tool-executor's bounds.
type toolexecFlags struct {
	ToolTimeout time.Duration `name:"tool-timeout" env:"PARLEY_TOOL_TIMEOUT" default:"2m" help:"How long one tool call may run; after it the call is abandoned and the model gets an error result saying so."`
}

func (t toolexecFlags) check() error {
	if t.ToolTimeout < 0 { // 0: the executor's default
		return fmt.Errorf("--tool-timeout must not be negative, got %v", t.ToolTimeout)
	}
	return nil
}

type gateFlags struct {
	GateConfig string `name:"gate-config" env:"PARLEY_GATE_CONFIG" type:"existingfile" help:"Gating configuration (JSON); default: confirm every tool that is not read-only, except create_event (never); parley dev also vetoes publish_entities, and delete_entities for the agent support (workers/gate/dev-policy.json)."`
	PolicyName string `name:"policy-name" env:"PARLEY_POLICY_NAME" default:"gate" help:"Policy name the gate signs decisions with (agents list it in --policies); replicas with one name share the load."`
	// devPolicy makes gate.DevConfig the policy when GateConfig is empty
	// (parley dev); otherwise it is gate.DefaultConfig.
	devPolicy bool
}

// config returns the gating configuration of the flags: the file of
// --gate-config, else gate.DevConfig for parley dev, else
// gate.DefaultConfig.
func (g gateFlags) config() (*gate.Config, error) {
	if g.GateConfig == "" && g.devPolicy {
		return gate.DevConfig(), nil
	}
	return gate.LoadConfig(g.GateConfig)
}

// check rejects values no worker can run with (kong reports the error as
// a usage error, exit status 2).
func (s storeFlags) check() error {
	if s.Replicas < 1 || s.Replicas > 5 {
		return fmt.Errorf("--replicas must be 1 to 5 (JetStream allows at most 5), got %d", s.Replicas)
	}
	if s.StartupTimeout < time.Second {
		return fmt.Errorf("--startup-timeout must be at least 1s, got %v", s.StartupTimeout)
	}
	if s.PublishRetry < 0 {
		return fmt.Errorf("--publish-retry must not be negative, got %v", s.PublishRetry)
	}
	return nil
}

// startupPolicy is the start-up retry policy of the flags, logging to log:
// every step (connecting, streams, buckets, consumers) shares one deadline,
// --startup-timeout from now.
func (s storeFlags) startupPolicy(log *slog.Logger) bus.RetryPolicy {
	return bus.RetryPolicy{Timeout: s.StartupTimeout, Deadline: time.Now().Add(s.StartupTimeout), Logger: log}
}

// publishRetry is bus.Options.PublishRetry for the flag (0: no retry).
func (s storeFlags) publishRetry() time.Duration {
	if s.PublishRetry == 0 {
		return -1
	}
	return s.PublishRetry
}

func (p processorFlags) check() error {
	if p.Concurrency < 1 {
		return fmt.Errorf("--concurrency must be at least 1, got %d", p.Concurrency)
	}
	if p.PauseTTL < time.Second {
		return fmt.Errorf("--pause-ttl must be at least 1s, got %v", p.PauseTTL)
	}
	for _, d := range p.StandingTTLs {
		if d < time.Second || d%time.Second != 0 {
			return fmt.Errorf("--standing-ttl: %v must be whole seconds, at least 1s", d)
		}
	}
	for _, tp := range p.TrustedPrincipals {
		if tp == "" {
			continue // --trusted-principals "": none
		}
		if err := events.ValidToken("--trusted-principals", tp); err != nil {
			return err
		}
	}
	return nil
}

func (a agentFlags) check() error {
	if a.PreExecuteTimeout <= 0 {
		return fmt.Errorf("--pre-execute-timeout must be positive, got %v", a.PreExecuteTimeout)
	}
	if a.PreExecuteSettle < 0 || a.PreExecuteSettle >= a.PreExecuteTimeout {
		return fmt.Errorf("--pre-execute-settle must be at least 0 and less than --pre-execute-timeout (%v), got %v", a.PreExecuteTimeout, a.PreExecuteSettle)
	}
	if a.ModelCallTimeout < 0 { // 0: the agent's default
		return fmt.Errorf("--model-call-timeout must not be negative, got %v", a.ModelCallTimeout)
	}
	return a.modelFlags.check()
}

// progressDelay is the agent's Options.ProgressDelay for --progress-delay:
// 0 or less announces every phase at once (the agent's negative value).
func (a agentFlags) progressDelay() time.Duration {
	if a.ProgressDelay <= 0 {
		return -1
	}
	return a.ProgressDelay
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// roleConfig is everything a worker role needs.
type roleConfig struct {
	store     storeFlags
	processor processorFlags
	agent     agentFlags
	gate      gateFlags
	mcp       mcpFlags
	toolexec  toolexecFlags
	ops       opsFlags
}

// common are the starter settings every role of cfg shares.
func (cfg roleConfig) common(log *slog.Logger) starter.Common {
	return starter.Common{Logger: log, Bus: bus.Options{Storage: cfg.store.storage(), Replicas: cfg.store.Replicas,
		StartupTimeout: cfg.store.StartupTimeout, PublishRetry: cfg.store.publishRetry()}}
}

// roleWorker turns cfg into the starter.Worker of role: the one place the
// commands (the single-role commands, dev, demo) build a role. It checks
// the configuration (gating file, model) before anything touches the bus,
// so a bad file is reported as such and not as a connection problem.
func roleWorker(role string, cfg roleConfig, log *slog.Logger) (starter.Worker, error) {
	c := cfg.common(log)
	switch role {
	case starter.RoleProcessor:
		var trusted []string // nil (a config built in code: dev, demo): the default
		for _, tp := range cfg.processor.TrustedPrincipals {
			if tp != "" {
				trusted = append(trusted, tp)
			}
		}
		if trusted == nil && cfg.processor.TrustedPrincipals != nil {
			trusted = []string{} // --trusted-principals "": none
		}
		return starter.Processor(c, processor.Options{Logger: log, PauseTTL: cfg.processor.PauseTTL, Concurrency: cfg.processor.Concurrency,
			TrustedPrincipals: trusted, NoStandingApprovals: cfg.processor.NoStandingApprovals,
			StandingTTLs: cfg.processor.StandingTTLs}), nil
	case starter.RoleAgent:
		provider, err := newProvider(cfg.agent, log)
		if err != nil {
			return nil, err
		}
		return starter.Agent(c, provider, agent.Options{Logger: log, PreExecuteTimeout: cfg.agent.PreExecuteTimeout,
			PreExecuteSettle: cfg.agent.PreExecuteSettle,
			Policies:         cfg.agent.Policies, ModelTimeout: cfg.agent.ModelCallTimeout,
			FormRevision: schema.Revision(cfg.agent.FormRevision), ProgressDelay: cfg.agent.progressDelay()}), nil
	case starter.RoleToolexec:
		return starter.Toolexec(c, starter.ToolexecConfig{
			Sources: func(ctx context.Context, log *slog.Logger) ([]toolexec.Source, func(), error) {
				return startMCP(ctx, cfg.mcp, log)
			},
			Options: toolexec.Options{Logger: log, CallTimeout: cfg.toolexec.ToolTimeout},
		}), nil
	case starter.RoleGate:
		gc, err := cfg.gate.config()
		if err != nil {
			return nil, err
		}
		return starter.Gate(c, gc, gate.Options{Logger: log, Name: cfg.gate.PolicyName}), nil
	}
	return nil, fmt.Errorf("unknown worker role %q", role)
}

// runRole runs one worker role on nc until ctx is cancelled.
func runRole(ctx context.Context, role string, nc *nats.Conn, cfg roleConfig, log *slog.Logger) error {
	w, err := roleWorker(role, cfg, log.With("worker", role))
	if err != nil {
		return err
	}
	return w(ctx, nc)
}

// serveRole connects to url and runs role until ctx is cancelled (SIGTERM
// drains: no new work is taken, in-flight work finishes or is left for
// redelivery, bounded by starter.DefaultDrainTimeout), then closes the
// connection. The role runs in a starter.Group of one, like the roles of
// parley dev: its connection closed for good, or a return before SIGTERM,
// ends the command with an error.
func serveRole(e *env, role string, cfg roleConfig) error {
	log := e.logger(e.stderr)
	shutdown, err := telemetry.Setup(e.ctx, "parley-"+role)
	if err != nil {
		log.Warn("tracing disabled", "error", err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	if role == starter.RoleGate {
		// A bad gating configuration is a usage error, reported before
		// connecting.
		if _, err := gate.LoadConfig(cfg.gate.GateConfig); err != nil {
			return &exitError{code: 2, err: err}
		}
		if err := checkPolicyPrincipal(cfg.gate.PolicyName, e.credentials(role)); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	w, err := roleWorker(role, cfg, log.With("worker", role))
	if err != nil {
		return err
	}
	// Health and metrics are served before connecting: /livez answers and
	// /readyz says "waiting for NATS" while connectWorker retries.
	hs, stopOps, err := startOps(e.ctx, "parley-"+role, cfg.ops, []string{role}, log)
	if err != nil {
		return err
	}
	defer stopOps()
	startup := cfg.store.startupPolicy(log)
	connect := func(ctx context.Context, name, principal string) (*nats.Conn, error) {
		return connectWorkerAs(ctx, e.NATS, name, e.credentials(principal), log, startup)
	}
	ctx := health.With(bus.WithStartupPolicy(e.ctx, startup), hs)
	err = starter.Start(ctx, &starter.Options{Logger: log}, starter.Connected(role, role, connect, w)).Wait()
	var se *starter.StoppedError
	if errors.As(err, &se) && err == error(se) {
		return se.Err // the command's own error, as the role said it
	}
	return err
}

// checkPolicyPrincipal refuses a gate whose policy name is not its
// principal's: NATS lets only policy P's principal answer as P (the agent
// reads the policy from the subject a reply arrives on,
// _INBOX_agent.pre_execute.*.P), so such a gate's every answer would be
// refused and count as P not answering. Without credentials (no
// authorization) any name goes.
func checkPolicyPrincipal(policy string, c natsauth.Credentials) error {
	if !c.Authenticated() || c.Principal == policy {
		return nil
	}
	return fmt.Errorf("--policy-name %s: the gate connects as principal %s, and the NATS server lets only principal %s "+
		"answer as policy %s: run it with %s's credentials (--nats-nkey <dir>/%s, from parley auth init --policy %s), "+
		"or with --policy-name %s", policy, c.Principal, policy, policy, policy, natsauth.SeedFile(policy), policy, c.Principal)
}

// connectWorker connects to url like client.Connect (reconnecting for
// ever once connected), retrying a failed first connection with backoff
// and jitter, each try logged, until p's deadline: a worker started before
// NATS (or while its node restarts) waits for it instead of exiting.
// Bad credentials fail at once.
func connectWorker(ctx context.Context, url, name string, p bus.RetryPolicy) (*nats.Conn, error) {
	return connectWorkerAs(ctx, url, name, natsauth.Credentials{}, p.Logger, p)
}

// connectWorkerAs is connectWorker with credentials; asynchronous NATS
// errors (permissions violations) are logged to log.
func connectWorkerAs(ctx context.Context, url, name string, c natsauth.Credentials, log *slog.Logger, p bus.RetryPolicy) (*nats.Conn, error) {
	if err := c.Check(); err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	var nc *nats.Conn
	p.AttemptTimeout = 5 * time.Second
	err := bus.Retry(ctx, "waiting for NATS", p, func(context.Context) error {
		var err error
		nc, err = natsauth.Connect(url, name, c, log)
		return err
	})
	if errors.Is(err, nats.ErrAuthorization) {
		return nil, fmt.Errorf("%w\n%s", err, credentialsHint(c))
	}
	return nc, err
}

// credentialsHint says which credentials a worker refused by the server
// (Authorization Violation) should pass.
func credentialsHint(c natsauth.Credentials) string {
	seed := natsauth.SeedFile(c.Principal)
	if !c.Authenticated() {
		return fmt.Sprintf("no credentials were given: pass the %s principal's with --nats-nkey (%s, as 'parley auth init' or 'parley dev' writes it, e.g. %s) or --nats-creds",
			c.Principal, seed, filepath.Join(devAuthDir(devDataDir()), seed))
	}
	return fmt.Sprintf("the server refused the credentials given for principal %s: check --nats-nkey/--nats-creds (%s) against the server's authorization", c.Principal, seed)
}

type workerCmd struct {
	storeFlags
	processorFlags
	opsFlags
}

// Validate checks the flags (kong calls it after parsing).
func (c *workerCmd) Validate() error {
	return firstErr(c.storeFlags.check(), c.processorFlags.check(), c.opsFlags.check())
}

func (c *workerCmd) Run(e *env) error {
	return serveRole(e, "processor", roleConfig{store: c.storeFlags, processor: c.processorFlags, ops: c.opsFlags})
}

type agentCmd struct {
	storeFlags
	agentFlags
	opsFlags
}

// Validate checks the flags (kong calls it after parsing).
func (c *agentCmd) Validate() error {
	return firstErr(c.storeFlags.check(), c.agentFlags.check(), c.opsFlags.check())
}

func (c *agentCmd) Run(e *env) error {
	return serveRole(e, "agent", roleConfig{store: c.storeFlags, agent: c.agentFlags, ops: c.opsFlags})
}

type toolexecCmd struct {
	storeFlags
	mcpFlags
	toolexecFlags
	opsFlags
}

// Validate checks the flags (kong calls it after parsing).
func (c *toolexecCmd) Validate() error {
	return firstErr(c.storeFlags.check(), c.mcpFlags.check(), c.toolexecFlags.check(), c.opsFlags.check())
}

func (c *toolexecCmd) Run(e *env) error {
	return serveRole(e, "toolexec", roleConfig{store: c.storeFlags, mcp: c.mcpFlags, toolexec: c.toolexecFlags, ops: c.opsFlags})
}

type gateCmd struct {
	storeFlags
	gateFlags
	opsFlags
}

// Validate checks the flags (kong calls it after parsing).
func (c *gateCmd) Validate() error { return firstErr(c.storeFlags.check(), c.opsFlags.check()) }

func (c *gateCmd) Run(e *env) error {
	return serveRole(e, "gate", roleConfig{store: c.storeFlags, gate: c.gateFlags, ops: c.opsFlags})
}
