// Package gate is parley's default pre-execute policy service (the seeds'
// ToolConfirmationSubscriber): it answers requests on
// parley.tool.pre_execute.<agent>.<tool> with allow, veto or confirm, from
// the gating configuration (design section 4). The answer is a decision
// only (events.PolicyDecision): the agent words every confirmation itself.
// It is a NATS micro service ("parley-gate", queue group = its policy name,
// "gate" by default), so replicas share the load and other policy
// services (other names) answer next to it; agents wait for the policies
// they expect (docs/POLICY.md).
//
// It owns its gating configuration and no state. Of parley's packages it
// imports only bus, events and schema; it must not import kvstate, another
// worker, client, gateway or a composition root (internal/layers checks the
// direction of imports).
package gate

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Tool gating modes.
const (
	// ModeByAnnotation confirms unless the tool is annotated readOnlyHint: true.
	ModeByAnnotation = "by_annotation"
	// ModeAlways always confirms.
	ModeAlways = "always"
	// ModeNever never confirms.
	ModeNever = "never"
	// ModeDeny vetoes the tool (a parley extension of the three modes).
	ModeDeny = "deny"
)

// AgentConfig is the gating of one agent.
type AgentConfig struct {
	// RequireToolConfirmation turns gating on for the agent. Default: false
	// (every call is allowed, except tools in ModeDeny).
	RequireToolConfirmation bool `json:"require_tool_confirmation"`
	// Tools maps a tool name to its mode. Default per tool: by_annotation.
	Tools map[string]string `json:"tools,omitempty"`
	// DenyReasons optionally explains a deny, per tool.
	DenyReasons map[string]string `json:"deny_reasons,omitempty"`
	// AskEveryTime lists tools whose confirmations no standing approval
	// may cover: the decision carries askEveryTime, and a person is asked
	// on every call (docs/POLICY.md). Optional. Default: none.
	AskEveryTime []string `json:"ask_every_time,omitempty"`
	// StandingApprovals false forbids standing approvals for every tool
	// of the agent (every confirm carries askEveryTime). Optional.
	// Default: true.
	StandingApprovals *bool `json:"standing_approvals,omitempty"`
}

// Config is the gating configuration: per agent, with "*" as the fallback
// for agents not listed.
type Config struct {
	Agents map[string]AgentConfig `json:"agents"`
}

// ParseConfig reads a JSON configuration; errors name the field and rule.
func ParseConfig(data []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	// A misspelt key must not silently turn confirmation off.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("gating config: %w", err)
	}
	if dec.More() {
		return nil, errors.New("gating config: unexpected data after the JSON object")
	}
	if c.Agents == nil {
		return nil, fmt.Errorf(`gating config: "agents": required`)
	}
	return &c, c.Validate()
}

// LoadConfig reads the configuration file at path; "" means DefaultConfig.
func LoadConfig(path string) (*Config, error) {
	if path == "" {
		return DefaultConfig(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading gating config: %w", err)
	}
	return ParseConfig(data)
}

// DefaultConfig gates every agent by annotation, except that creating an
// event (an additive tool that asks its own questions) runs unconfirmed.
func DefaultConfig() *Config {
	return &Config{Agents: map[string]AgentConfig{
		"*": {RequireToolConfirmation: true, Tools: map[string]string{"create_event": ModeNever}},
	}}
}

// devPolicy is DevConfig's file, shipped beside this package so that it
// can be read, copied and passed to --gate-config.
//
//go:embed dev-policy.json
var devPolicy []byte

// DevConfig is the policy `parley dev` runs without --gate-config
// (workers/gate/dev-policy.json): DefaultConfig's confirmations, plus
// vetoes a newcomer meets at once. Publishing (publish_entities) is denied
// to every agent, "publishing is not allowed here"; the agent "support"
// runs every other tool unconfirmed but may neither publish nor delete
// (delete_entities: "support agents never delete content").
func DevConfig() *Config {
	c, err := ParseConfig(devPolicy)
	if err != nil {
		panic("gate: dev-policy.json: " + err.Error()) // a test keeps the file valid
	}
	return c
}

// Validate checks agent names and modes.
func (c *Config) Validate() error {
	for name, a := range c.Agents {
		if name != "*" {
			if err := events.ValidToken("agents key", name); err != nil {
				return fmt.Errorf("gating config: %w", err)
			}
		}
		for i, tool := range a.AskEveryTime {
			if err := events.ValidToken("tool", tool); err != nil {
				return fmt.Errorf("gating config: agents.%s.ask_every_time[%d]: %w", name, i, err)
			}
		}
		for tool, mode := range a.Tools {
			switch mode {
			case ModeAlways, ModeNever, ModeByAnnotation, ModeDeny:
			default:
				return fmt.Errorf("gating config: agents.%s.tools.%s: mode %q must be always, never, by_annotation or deny", name, tool, mode)
			}
		}
	}
	return nil
}

// Version is a short hash of the configuration, recorded on every decision
// so a resume knows which configuration decided.
func (c *Config) Version() string {
	names := make([]string, 0, len(c.Agents))
	for n := range c.Agents {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, _ := json.Marshal(c.Agents[n]) // map keys marshal sorted
		fmt.Fprintf(h, "%s=%s\n", n, b)
	}
	return "cfg-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// Decide applies the configuration to one pre-execute request, as the
// policy PolicyName. The answer is a decision only: the agent words any
// confirmation itself.
func (c *Config) Decide(req events.PreExecuteRequest) events.PolicyDecision {
	return c.decide(req, PolicyName, c.Version())
}

func (c *Config) decide(req events.PreExecuteRequest, policy, version string) events.PolicyDecision {
	a, ok := c.Agents[req.Agent]
	if !ok {
		a = c.Agents["*"]
	}
	d := events.PolicyDecision{Policy: policy, ConfigVersion: version}
	mode := a.Tools[req.Call.Name]
	if mode == "" {
		mode = ModeByAnnotation
	}
	switch {
	case mode == ModeDeny:
		d.Decision = events.DecisionVeto
		d.Reason = a.DenyReasons[req.Call.Name]
		if d.Reason == "" {
			d.Reason = "the gating configuration denies this tool for agent " + req.Agent
		}
	case !a.RequireToolConfirmation || mode == ModeNever:
		d.Decision = events.DecisionAllow
	case mode == ModeAlways || schema.ConfirmByAnnotation(req.Tool.Annotations):
		d.Decision = events.DecisionConfirm
		d.Reason = "the gating configuration asks a person to confirm " + req.Call.Name
		d.AskEveryTime = (a.StandingApprovals != nil && !*a.StandingApprovals) || slices.Contains(a.AskEveryTime, req.Call.Name)
	default:
		d.Decision = events.DecisionAllow
	}
	return d
}

// PolicyName is the default policy name the gate signs its decisions
// with: the name agents expect by default (agent --policies).
const PolicyName = "gate"

// ServiceName is the NATS micro service name of every gate, whatever its
// policy name ($SRV.PING|INFO|STATS.parley-gate).
const ServiceName = "parley-gate"

// Options configures a Gate.
type Options struct {
	// Logger. Optional. Default: discard.
	Logger *slog.Logger
	// Name is the policy name signed on every decision and the queue
	// group replicas of this policy share; agents list it in their
	// expected policies. A subject token. Optional. Default: PolicyName.
	Name string
}

// Gate is the policy service.
type Gate struct {
	bus     *bus.Client
	cfg     *Config
	name    string
	version string // cfg.Version(), computed once
	log     *slog.Logger
}

// New returns the gate named PolicyName with cfg (nil: DefaultConfig).
func New(b *bus.Client, cfg *Config, logger *slog.Logger) *Gate {
	g, err := NewWithOptions(b, cfg, &Options{Logger: logger})
	if err != nil {
		panic(err) // the default name is valid
	}
	return g
}

// NewWithOptions returns a gate with cfg (nil: DefaultConfig) and opts
// (nil: defaults). It fails when opts.Name is not a valid subject token.
func NewWithOptions(b *bus.Client, cfg *Config, opts *Options) (*Gate, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if cfg == nil {
		cfg = DefaultConfig()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Name == "" {
		o.Name = PolicyName
	}
	if err := events.ValidToken("policy name", o.Name); err != nil {
		return nil, err
	}
	return &Gate{bus: b, cfg: cfg, name: o.Name, version: cfg.Version(), log: o.Logger}, nil
}

// Run serves pre-execute requests until ctx is cancelled. Replicas of one
// policy share the queue group named after it, so each request gets one
// answer per policy.
func (g *Gate) Run(ctx context.Context) error {
	g.log.Info("gate serving", "policy", g.name, "config_version", g.version)
	if _, ok := g.cfg.Agents["*"]; !ok {
		g.log.Warn(`the gating configuration has no "*" entry: agents it does not list get no confirmation at all`)
	}
	return g.bus.Serve(ctx, bus.Endpoint{
		Service: ServiceName, Version: "0.2.0", Name: "pre_execute", Subject: events.SubjectPreExecAll,
		QueueGroup: g.name, Description: "parley pre-execute policy " + g.name + ": allow, veto or confirm tool calls",
		// The agent reads the answering policy from the subject, and only
		// this policy's principal may publish there (docs/SECURITY.md).
		ReplyAs: g.name,
	}, g.decide)
}

func (g *Gate) decide(ctx context.Context, req *event.Event) (*event.Event, error) {
	in, err := g.decodeRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	d := g.cfg.decide(in, g.name, g.version)
	g.log.InfoContext(ctx, "pre-execute decided", "agent", in.Agent, "tool", in.Call.Name, "decision", d.Decision,
		"config_version", d.ConfigVersion, "run_id", in.RunID)
	return events.KindPreExecuteDecided.New(events.SourceGate, events.DerivedID("decided", req.ID()), req.Subject(), d)
}

// decodeRequest reads a pre-execute request. The tool definition is read
// tolerantly (schema.DecodeToolTolerant): an unreadable annotation, such as
// "readOnlyHint": "true", is treated as absent, so the tool counts as
// destructive and by_annotation asks for confirmation; it is logged, never
// an error reply. A definition unreadable even so is replaced by the bare
// call name (no annotations: confirm). Only a request whose other members
// are unreadable is refused.
func (g *Gate) decodeRequest(ctx context.Context, req *event.Event) (events.PreExecuteRequest, error) {
	in, err := events.Data[events.PreExecuteRequest](req)
	if err == nil {
		return in, nil
	}
	var raw struct {
		events.PreExecuteRequest
		Tool json.RawMessage `json:"tool"` // shadows PreExecuteRequest.Tool
	}
	if json.Unmarshal(req.Data(), &raw) != nil {
		return in, err // the request itself is unreadable
	}
	in = raw.PreExecuteRequest
	tool, ignored, terr := schema.DecodeToolTolerant(raw.Tool)
	if terr != nil {
		g.log.ErrorContext(ctx, "pre-execute request carries an unreadable tool definition; treating it as unannotated",
			"tool", in.Call.Name, "run_id", in.RunID, "error", terr)
		tool = schema.Tool{Name: in.Call.Name}
	}
	for _, v := range ignored {
		g.log.ErrorContext(ctx, "pre-execute request: tool definition member unreadable; treated as absent",
			"tool", in.Call.Name, "run_id", in.RunID, "violation", v.String())
	}
	in.Tool = tool
	return in, nil
}
