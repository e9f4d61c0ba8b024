// Package toolexec is the tool-executor worker: it takes tool calls from the
// PARLEY_TOOLS work queue (durable "toolexec", subjects
// parley.tool.call.<tool>), runs built-in tools, and publishes each MCP
// CallToolResult (or input-required result) on parley.tool.result.<run>.
//
// At start-up it registers its tools' trusted definitions in the
// parley_tools bucket: the built-in tools under their own names, and the
// tools of each configured Source (an MCP server, see package mcp) under
// "<source>__<tool>".
//
// # Exactly once
//
// Every call of a tool that is not read-only runs at most once per (run,
// call, round). The executor claims the call before running it by creating its key in
// parley_tool_results (a KV create: exactly one executor wins), refreshes
// the claim while the tool runs, and replaces the claim with the result
// before publishing it. A redelivered call whose key holds a result
// publishes that result again; one whose claim is still being refreshed is
// retried later (the executor holding it is alive); one whose claim went
// stale (the executor holding it died mid-call, see Options.ClaimLease) is
// re-run only when that is safe: a built-in tool (idempotent per call ID by
// its own ledger, see builtin) or a tool whose registered definition says
// idempotentHint or readOnlyHint true. Any other tool is never run twice:
// the model gets an isError result saying the outcome is unknown.
//
// A read-only call (readOnlyHint true in the definition this executor
// registered: a built-in tool's own, or a trusted MCP server's) is neither
// claimed nor recorded: reading twice changes nothing, so a redelivered
// read-only call simply runs again and publishes its result again. Both
// results carry the same derived event ID (JetStream drops the second
// within the stream's duplicate window), and the agent applies only the
// first result of a call (its run record marks the call done), so the
// model never sees two. This saves the claim's create and the result's
// write in parley_tool_results per read-only call (docs/RELIABILITY.md).
//
// # Only what was decided
//
// Before claiming a call the executor checks it (see authorize): the
// call's tool name must be the tool token of its subject
// (parley.tool.call.<tool>), else tool_subject_mismatch; and a tool that is
// not read-only (readOnlyHint true in its registered definition; an
// untrusted MCP server's annotations are removed before registration, so
// they never count) runs only when the agent's decision record for that
// run, call and round exists in parley_decisions and names the same tool
// and the same arguments (schema.ArgumentsSHA256), else no_decision or
// decision_mismatch. A refused call is dead-lettered at once with the
// reason, and the agent gets an isError result saying it was not run, so
// the turn goes on instead of waiting.
//
// It owns the tool registry's definitions it writes (parley_tools) and the
// recorded results of the calls it ran (parley_tool_results). Of parley's
// packages it imports only bus, events, internal/metrics, kvstate, schema
// and workers/toolexec/builtin; it must not import another worker
// (processor, agent, gate), client, gateway or a composition root
// (internal/layers checks the direction of imports).
package toolexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/metrics"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// Options configures an Executor.
type Options struct {
	// Logger. Optional. Default: discard.
	Logger *slog.Logger
	// Concurrency is the number of calls run at once. Optional. Default: 8.
	Concurrency int
	// ResultTTL bounds how long results are kept for dedup. Optional.
	// Default: 48h.
	ResultTTL time.Duration
	// ClaimLease is how long a call's claim stays valid without a refresh;
	// the executor running a call refreshes its claim every ClaimLease/3.
	// A claim older than this belongs to an executor that died mid-call.
	// Optional. Default: 30s (two missed refreshes and a margin).
	ClaimLease time.Duration
	// Sources supply tools from outside the process, such as MCP servers.
	// Their tools are registered as "<source>__<tool>". Optional.
	Sources []Source
	// InstanceID names this executor in claims and logs. Optional.
	// Default: a random NUID.
	InstanceID string
	// CallTimeout bounds one tool call. A call still running after it is
	// abandoned (its context is cancelled, its result no longer awaited)
	// and the model gets an isError result saying the tool did not finish
	// in time (for a tool that is not safe to re-run, that its outcome is
	// unknown); it is recorded and never re-run. The consumer's handler
	// deadline is CallTimeout + 1 minute. Optional. Default:
	// DefaultCallTimeout.
	CallTimeout time.Duration
}

// DefaultCallTimeout is Options.CallTimeout's default: 2 minutes.
const DefaultCallTimeout = 2 * time.Minute

// Source supplies tools from outside the process, such as the tools of one
// MCP server (package mcp).
type Source interface {
	// Name is the source's name: 1 to 64 characters of A-Z a-z 0-9 - (no
	// "__"), the prefix of its tools' registered names.
	Name() string
	// Tools returns the source's current tools with their definitions
	// under their own (not namespaced) names. Definitions from an
	// untrusted source must already have their annotations removed.
	Tools() []builtin.Tool
	// Changed receives a value whenever Tools may have changed (MCP
	// notifications/tools/list_changed, a reconnect). It may be nil.
	Changed() <-chan struct{}
}

// Separator joins a source's name and its tool's name in the registered
// name of the tool: "<source>__<tool>".
const Separator = "__"

// Claim states of a callRecord.
const (
	// stateClaimed: an executor is running the call.
	stateClaimed = "claimed"
	// stateDone (""): the record holds the result; records written before
	// claims existed have no state and are results too.
	stateDone = ""
)

// callRecord is the value under a call's key in parley_tool_results: a
// claim while the call runs, then its result.
type callRecord struct {
	// State is stateClaimed or stateDone.
	State string `json:"state,omitempty"`
	// Owner is the InstanceID of the executor holding the claim.
	Owner string `json:"owner,omitempty"`
	events.ToolResult
}

// entry is a tool the executor runs.
type entry struct {
	tool builtin.Tool
	def  schema.Tool // as registered (namespaced name)
	// builtin tools are idempotent per call ID by their own ledger.
	builtin bool
}

// rerunnable reports whether running e again after an unknown outcome is
// safe: a built-in tool, or a tool whose registered definition (with an
// untrusted source's annotations already removed) is idempotent or
// read-only.
func (e entry) rerunnable() bool {
	return e.builtin || e.def.Annotations.Idempotent() || e.def.Annotations.ReadOnly()
}

// Executor is the tool-executor worker.
type Executor struct {
	bus *bus.Client
	// router routes Handle's events (newRouter), built on first use.
	routerOnce sync.Once
	router     *bus.Router
	results    *kvstate.Bucket[callRecord]
	reg        *kvstate.ToolRegistry
	// decisions is parley_decisions, the agent's decision records.
	decisions *kvstate.Decisions
	defs      *kvstate.Bucket[schema.Tool] // parley_tools, for removing tools a source dropped
	opts      Options
	log       *slog.Logger

	mu    sync.RWMutex
	tools map[string]entry
	// bySource lists the registered names of each source's tools.
	bySource map[string][]string
}

// New opens the executor's buckets and registers tools: the built-in tools
// and those of opts.Sources.
func New(ctx context.Context, b *bus.Client, tools []builtin.Tool, opts *Options) (*Executor, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ResultTTL <= 0 {
		o.ResultTTL = 48 * time.Hour
	}
	if o.ClaimLease <= 0 {
		o.ClaimLease = 30 * time.Second
	}
	if o.InstanceID == "" {
		o.InstanceID = nuid.Next()
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	js := b.JetStream()
	results, err := kvstate.OpenBucket[callRecord](ctx, js, kvstate.BucketToolResults,
		kvstate.BucketOptions{Storage: b.Storage(), Replicas: b.Replicas(), TTL: o.ResultTTL})
	if err != nil {
		return nil, err
	}
	reg, err := kvstate.OpenTools(ctx, js, b.Storage(), b.Replicas())
	if err != nil {
		return nil, err
	}
	defs, err := kvstate.OpenBucket[schema.Tool](ctx, js, kvstate.BucketTools,
		kvstate.BucketOptions{Storage: b.Storage(), Replicas: b.Replicas()})
	if err != nil {
		return nil, err
	}
	decisions, err := kvstate.OpenDecisions(ctx, js, b.Storage(), b.Replicas())
	if err != nil {
		return nil, err
	}
	x := &Executor{bus: b, results: results, reg: reg, defs: defs, decisions: decisions, opts: o, log: o.Logger,
		tools: map[string]entry{}, bySource: map[string][]string{}}
	for _, t := range tools {
		def := t.Definition()
		if err := events.ValidToken("tool name", def.Name); err != nil {
			return nil, err
		}
		if err := reg.Register(ctx, def); err != nil {
			return nil, fmt.Errorf("registering tool %s: %w", def.Name, err)
		}
		x.tools[def.Name] = entry{tool: t, def: def, builtin: true}
	}
	seen := map[string]bool{}
	for _, s := range o.Sources {
		if err := ValidSourceName(s.Name()); err != nil {
			return nil, err
		}
		if seen[s.Name()] {
			return nil, fmt.Errorf("source %q: duplicate name", s.Name())
		}
		seen[s.Name()] = true
		if err := x.SyncSource(ctx, s); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// ValidSourceName checks a source (MCP server) name: 1 to 64 characters of
// A-Z a-z 0-9 -, so that "<source>__<tool>" splits at the first "__".
func ValidSourceName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("server name %q: must be 1 to 64 characters of A-Z a-z 0-9 -", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("server name %q: must be 1 to 64 characters of A-Z a-z 0-9 -", name)
		}
	}
	return nil
}

// SyncSource registers the current tools of s under "<source>__<tool>" and
// removes from the registry the tools s no longer has. A tool whose
// namespaced name is not a valid parley tool name (1 to 128 characters of
// A-Z a-z 0-9 _ -, since names are NATS subject tokens), whose definition
// is invalid, or whose encoding exceeds kvstate.MaxToolDefinitionBytes is
// left out with a warning.
func (x *Executor) SyncSource(ctx context.Context, s Source) error {
	src := s.Name()
	next := map[string]entry{}
	for _, t := range s.Tools() {
		def := t.Definition()
		name := src + Separator + def.Name
		if err := events.ValidToken("tool name", name); err != nil {
			x.log.WarnContext(ctx, "MCP tool left out: its namespaced name is not a valid tool name",
				"server", src, "tool", def.Name, "error", err)
			continue
		}
		def.Name = name
		if err := schema.ValidateTool(&def); err != nil {
			x.log.WarnContext(ctx, "MCP tool left out: invalid definition", "server", src, "tool", def.Name, "error", err)
			continue
		}
		if data, err := json.Marshal(def); err != nil || len(data) > kvstate.MaxToolDefinitionBytes {
			x.log.WarnContext(ctx, "MCP tool left out: definition too large", "server", src, "tool", def.Name,
				"bytes", len(data), "max", kvstate.MaxToolDefinitionBytes)
			continue
		}
		next[name] = entry{tool: t, def: def}
	}
	for name, e := range next {
		if err := x.reg.Register(ctx, e.def); err != nil {
			return fmt.Errorf("registering tool %s: %w", name, err)
		}
	}
	x.mu.Lock()
	old := x.bySource[src]
	var names []string
	for name, e := range next {
		x.tools[name] = e
		names = append(names, name)
	}
	var gone []string
	for _, name := range old {
		if _, ok := next[name]; !ok {
			delete(x.tools, name)
			gone = append(gone, name)
		}
	}
	x.bySource[src] = names
	x.mu.Unlock()
	for _, name := range gone {
		if err := x.defs.Delete(ctx, name, 0); err != nil {
			x.log.WarnContext(ctx, "could not unregister a removed tool", "tool", name, "error", err)
		}
	}
	x.log.InfoContext(ctx, "tools registered", "server", src, "tools", len(next), "removed", len(gone))
	return nil
}

// Run consumes tool calls until ctx is cancelled, then drains. It also
// re-registers a source's tools whenever the source says they changed.
func (x *Executor) Run(ctx context.Context) error {
	for _, s := range x.opts.Sources {
		if ch := s.Changed(); ch != nil {
			go x.watchSource(ctx, s, ch)
		}
	}
	return x.bus.Consume(ctx, bus.ConsumerSpec{
		Stream: events.StreamTools, Durable: "toolexec", Concurrency: x.opts.Concurrency,
		Compensate: x.onDeadLetter, HandlerTimeout: x.opts.CallTimeout + time.Minute,
	}, x.Handle)
}

func (x *Executor) watchSource(ctx context.Context, s Source, ch <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			if err := x.SyncSource(ctx, s); err != nil {
				x.log.ErrorContext(ctx, "re-registering tools failed", "server", s.Name(), "error", err)
			}
		}
	}
}

// Handle handles one event of the tool-executor's work queue: a
// tool.call.requested goes to onToolCall; any other type is dead-lettered
// (see bus.Router).
func (x *Executor) Handle(ctx context.Context, d *bus.Delivery) error {
	x.routerOnce.Do(func() { x.router = x.newRouter() })
	return x.router.Handle(ctx, d)
}

// newRouter routes the tool-executor's work queue by event type.
func (x *Executor) newRouter() *bus.Router {
	r := bus.NewRouter()
	bus.On(r, events.KindToolCallRequested, x.onToolCall)
	return r
}

// onToolCall runs one tool call: a read-only one each time it is
// delivered, any other at most once per (run, call, round). See the
// package documentation.
func (x *Executor) onToolCall(ctx context.Context, d *bus.Delivery, in events.ToolCallRequested) error {
	if in.RunID == "" || in.Call.ID == "" {
		return bus.Permanent(errors.New("data: runId and call.id are required"))
	}
	key := "r" + events.DerivedID(in.RunID, in.Call.ID, fmt.Sprint(in.Round))
	x.mu.RLock()
	e, known := x.tools[in.Call.Name]
	x.mu.RUnlock()
	if err := x.authorize(ctx, d.Subject, in, e, known); err != nil {
		return err
	}
	if known && e.def.Annotations.ReadOnly() {
		// Safe to run again: no claim, no record (package documentation,
		// "Exactly once"). A failure is returned as is, so the call is
		// retried and then dead-lettered like any other.
		res, err := x.execute(ctx, in, e, known)
		if err != nil {
			return err
		}
		return x.publish(ctx, d.Event.Subject(), x.bound(ctx, in.Call.Name, res))
	}

	claim := callRecord{State: stateClaimed, Owner: x.opts.InstanceID,
		ToolResult: events.ToolResult{RunID: in.RunID, CallID: in.Call.ID, Round: in.Round}}
	rev, err := x.results.Create(ctx, key, claim, 0)
	switch {
	case errors.Is(err, kvstate.ErrConflict):
		var res events.ToolResult
		var run bool
		res, rev, run, err = x.recorded(ctx, key, in, e, known)
		if err != nil {
			return err
		}
		if !run {
			return x.publish(ctx, d.Event.Subject(), res)
		}
	case err != nil:
		return err
	}

	res, err := x.run(ctx, key, rev, in, e, known)
	if err != nil {
		return err
	}
	return x.publish(ctx, d.Event.Subject(), res)
}

// recorded handles a call whose key exists: it returns the recorded result
// (run false), or takes over a stale claim (run true, with the new
// revision) when re-running is safe, or records an outcome-unknown result.
func (x *Executor) recorded(ctx context.Context, key string, in events.ToolCallRequested, e entry, known bool) (events.ToolResult, uint64, bool, error) {
	rec, rev, err := x.results.Get(ctx, key)
	if errors.Is(err, kvstate.ErrNotFound) {
		// The claim was released (a re-runnable call failed) between our
		// create and this read: try again soon.
		return events.ToolResult{}, 0, false, bus.RetryLater(errors.New("call claim released; retrying"), time.Second)
	}
	if err != nil {
		return events.ToolResult{}, 0, false, err
	}
	if rec.State == stateDone {
		x.log.InfoContext(ctx, "reusing recorded tool result", "tool", in.Call.Name, "run_id", in.RunID)
		return rec.ToolResult, rev, false, nil
	}
	age, err := x.claimAge(ctx, key)
	if err != nil {
		return events.ToolResult{}, 0, false, err
	}
	if age < x.opts.ClaimLease {
		return events.ToolResult{}, 0, false, bus.RetryLater(
			fmt.Errorf("call %s of run %s is running on executor %s", in.Call.ID, in.RunID, rec.Owner), x.opts.ClaimLease/3)
	}
	if known && e.rerunnable() {
		claim := callRecord{State: stateClaimed, Owner: x.opts.InstanceID, ToolResult: rec.ToolResult}
		nrev, err := x.results.Update(ctx, key, claim, rev, 0)
		if errors.Is(err, kvstate.ErrConflict) {
			return events.ToolResult{}, 0, false, bus.RetryLater(errors.New("stale claim taken over by another executor"), x.opts.ClaimLease/3)
		}
		if err != nil {
			return events.ToolResult{}, 0, false, err
		}
		x.log.WarnContext(ctx, "re-running a call whose executor died; the tool is safe to re-run",
			"tool", in.Call.Name, "run_id", in.RunID, "previous_owner", rec.Owner)
		return events.ToolResult{}, nrev, true, nil
	}
	x.log.WarnContext(ctx, "call's executor died mid-call; reporting the outcome as unknown",
		"tool", in.Call.Name, "run_id", in.RunID, "previous_owner", rec.Owner)
	res := events.ToolResult{RunID: in.RunID, CallID: in.Call.ID, Round: in.Round,
		Result: OutcomeUnknown(in.Call.Name, "the tool-executor running it stopped before recording a result")}
	return x.record(ctx, key, rev, res)
}

// claimAge is how long ago the record under key was last written (by the
// server's clock, so executors' clocks need not agree).
func (x *Executor) claimAge(ctx context.Context, key string) (time.Duration, error) {
	ctx, cancel := bus.WithRequestTimeout(ctx)
	defer cancel()
	ent, err := x.results.KV().Get(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("reading %s/%s: %w", kvstate.BucketToolResults, key, err)
	}
	return time.Since(ent.Created()), nil
}

// OutcomeUnknown is the isError result a model gets for a call that was
// started but whose result was lost, and that is not safe to run again.
func OutcomeUnknown(tool, why string) *schema.CallToolResult {
	return schema.ErrorResult(fmt.Sprintf("Outcome unknown: %s was started but %s, so it may or may not have "+
		"taken effect. It was not run again because it is not idempotent; check its effect before calling it again.", tool, why))
}

// record replaces the claim at rev with the result res. If the claim is no
// longer ours (another executor took it over as stale), the record now
// under key wins: its result is returned, or the call is retried later.
func (x *Executor) record(ctx context.Context, key string, rev uint64, res events.ToolResult) (events.ToolResult, uint64, bool, error) {
	_, err := x.results.Update(ctx, key, callRecord{ToolResult: res}, rev, 0)
	if errors.Is(err, kvstate.ErrConflict) {
		cur, _, gerr := x.results.Get(ctx, key)
		if gerr == nil && cur.State == stateDone {
			return cur.ToolResult, 0, false, nil
		}
		return events.ToolResult{}, 0, false, bus.RetryLater(errors.New("call claim lost to another executor"), x.opts.ClaimLease/3)
	}
	if err != nil {
		return events.ToolResult{}, 0, false, err
	}
	return res, 0, false, nil
}

// run executes a claimed call, refreshing the claim while the tool runs,
// and records its result.
func (x *Executor) run(ctx context.Context, key string, rev uint64, in events.ToolCallRequested, e entry, known bool) (events.ToolResult, error) {
	var (
		mu  sync.Mutex
		cur = rev
	)
	refreshCtx, stop := context.WithCancel(ctx)
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		t := time.NewTicker(x.opts.ClaimLease / 3)
		defer t.Stop()
		claim := callRecord{State: stateClaimed, Owner: x.opts.InstanceID,
			ToolResult: events.ToolResult{RunID: in.RunID, CallID: in.Call.ID, Round: in.Round}}
		for {
			select {
			case <-refreshCtx.Done():
				return
			case <-t.C:
				mu.Lock()
				n, err := x.results.Update(refreshCtx, key, claim, cur, 0)
				if err == nil {
					cur = n
				}
				mu.Unlock()
				if err != nil && refreshCtx.Err() == nil {
					x.log.WarnContext(ctx, "could not refresh the call's claim", "tool", in.Call.Name, "run_id", in.RunID, "error", err)
				}
			}
		}
	}()
	res, err := x.execute(ctx, in, e, known)
	stop()
	<-refreshed
	// Settle the claim even when ctx is done (shutdown): a claim left
	// behind would make the call wait ClaimLease for nothing.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err != nil {
		if !known || e.rerunnable() || notStarted(err) {
			if derr := x.results.Delete(sctx, key, cur); derr != nil {
				x.log.WarnContext(ctx, "could not release the call's claim", "tool", in.Call.Name, "error", derr)
			}
			return events.ToolResult{}, err // infrastructure failure: retried, then dead-lettered
		}
		x.log.WarnContext(ctx, "tool call failed mid-call; reporting the outcome as unknown",
			"tool", in.Call.Name, "run_id", in.RunID, "error", err)
		res = events.ToolResult{RunID: in.RunID, CallID: in.Call.ID, Round: in.Round,
			Result: OutcomeUnknown(in.Call.Name, fmt.Sprintf("failed before returning a result (%v)", err))}
	}
	res = x.bound(ctx, in.Call.Name, res) // within MaxResultBytes (limits.go)
	out, _, _, err := x.record(sctx, key, cur, res)
	return out, err
}

// callTimedOut is the isError result of a call abandoned after timeout.
func callTimedOut(tool string, timeout time.Duration, rerunnable bool) *schema.CallToolResult {
	if rerunnable {
		return schema.ErrorResult(fmt.Sprintf("%s did not finish within %v and was stopped; it returned no result.", tool, timeout))
	}
	return OutcomeUnknown(tool, fmt.Sprintf("did not finish within %v and was abandoned", timeout))
}

// notStarted reports whether err says the tool call was never sent (such
// an error implements NotStarted() bool), so running it again is safe.
func notStarted(err error) bool {
	var ns interface{ NotStarted() bool }
	return errors.As(err, &ns) && ns.NotStarted()
}

func (x *Executor) execute(ctx context.Context, in events.ToolCallRequested, e entry, known bool) (events.ToolResult, error) {
	out := events.ToolResult{RunID: in.RunID, CallID: in.Call.ID, Round: in.Round}
	if !known {
		out.Result = schema.ErrorResult(fmt.Sprintf("There is no tool named %q here, so nothing was run. Use one of the tools listed.", in.Call.Name))
		return out, nil
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(context.WithValue(ctx, callKey{}, callInfo{call: in, bus: x.bus}), x.opts.CallTimeout)
	defer cancel()
	type outcome struct {
		r   builtin.Result
		err error
	}
	// The call runs on its own goroutine so that a tool ignoring its
	// context cannot hold the handler past CallTimeout.
	done := make(chan outcome, 1)
	go func() {
		r, err := e.tool.Call(cctx, builtin.Request{RunID: in.RunID, CallID: in.Call.ID, Round: in.Round, Arguments: in.Call.Arguments,
			InputResponses: in.InputResponses, RequestState: in.RequestState})
		done <- outcome{r, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-cctx.Done():
		if ctx.Err() != nil { // the handler's own deadline or a shutdown
			return out, fmt.Errorf("running %s: %w", in.Call.Name, ctx.Err())
		}
		x.log.WarnContext(ctx, "tool call timed out; abandoned", "tool", in.Call.Name, "run_id", in.RunID,
			"timeout", x.opts.CallTimeout)
		out.Result = callTimedOut(in.Call.Name, x.opts.CallTimeout, e.rerunnable())
		return out, nil
	}
	r, err := o.r, o.err
	metrics.ToolCall(ctx, in.Call.Name, time.Since(start), err, r.Call != nil && r.Call.IsError, r.InputRequired != nil)
	if err != nil {
		return out, fmt.Errorf("running %s: %w", in.Call.Name, err)
	}
	out.Result, out.InputRequired = r.Call, r.InputRequired
	x.log.InfoContext(ctx, "tool executed", "tool", in.Call.Name, "run_id", in.RunID, "round", in.Round,
		"input_required", out.InputRequired != nil, "duration", time.Since(start))
	return out, nil
}

type callKey struct{}

// callInfo is what a running tool can learn from its ctx.
type callInfo struct {
	call events.ToolCallRequested
	bus  *bus.Client // nil: progress is dropped
}

// WithCall puts the call being executed into ctx, for tools that need the
// thread or report progress (see CallFrom and ReportProgress). Progress
// reported under a ctx from WithCall alone is dropped; the executor's own
// ctx publishes it.
func WithCall(ctx context.Context, in events.ToolCallRequested) context.Context {
	return context.WithValue(ctx, callKey{}, callInfo{call: in})
}

// CallFrom returns the tool call a Tool.Call is executing (thread, run,
// agent, call), if the executor put one in ctx.
func CallFrom(ctx context.Context) (events.ToolCallRequested, bool) {
	info, ok := ctx.Value(callKey{}).(callInfo)
	return info.call, ok
}

// ReportProgress publishes p for the call running under ctx (see
// PublishProgress); without a call in ctx it does nothing.
func ReportProgress(ctx context.Context, p schema.Progress) error {
	info, ok := ctx.Value(callKey{}).(callInfo)
	if !ok || info.bus == nil {
		return nil
	}
	return PublishProgress(ctx, info.bus, info.call, p)
}

func (x *Executor) publish(ctx context.Context, thread string, res events.ToolResult) error {
	e, err := events.KindToolResultReady.New(events.SourceToolexec,
		events.DerivedID("tool.result", res.RunID, res.CallID, fmt.Sprint(res.Round)), thread, res)
	if err != nil {
		return err
	}
	e.SetExtension(events.ExtRunID, res.RunID)
	_, err = bus.PublishTo(ctx, x.bus, events.StreamAgent, e, res.RunID)
	return err
}

// onDeadLetter answers the agent with an error result so the run goes on.
// A failed publish is returned: the bus retries it with backoff (see
// bus.ConsumerSpec.Compensate), so the run is never left waiting.
func (x *Executor) onDeadLetter(ctx context.Context, d *bus.Delivery, reason error) error {
	if d.Event == nil {
		return nil
	}
	in, err := events.Data[events.ToolCallRequested](d.Event)
	if err != nil || in.RunID == "" {
		return nil
	}
	res := events.ToolResult{RunID: in.RunID, CallID: in.Call.ID, Round: in.Round,
		Result: schema.ErrorResult(fmt.Sprintf("%s could not be executed: %v", in.Call.Name, reason))}
	return x.publish(ctx, d.Event.Subject(), res)
}

// PublishProgress publishes p, a progress notification of the running call,
// as dev.parley.progress on parley.chat.<thread>.progress (kept by
// PARLEY_CHAT like the agent's progress events). It returns once the
// stream stored it (within progressTimeout, else an error: progress is
// advisory), so a caller that publishes the call's result after it
// (mcpclient) never has the progress stored after the result and the
// turn's end that follows it. Its progressToken is the call's
// ID (the agent's own progress uses the turn ID), and _meta gets
// "dev.parley/phase": "tool" and a "drupal.org/ai.status_item" line
// naming the tool, unless the server set them.
func PublishProgress(ctx context.Context, b *bus.Client, call events.ToolCallRequested, p schema.Progress) error {
	if call.Thread == "" {
		return errors.New("progress: the call has no thread")
	}
	p.Meta = p.Meta.Clone()
	if p.Meta == nil {
		p.Meta = schema.Meta{}
	}
	if _, ok := p.Meta[events.MetaPhase]; !ok {
		p.Meta[events.MetaPhase] = events.PhaseTool
	}
	if _, ok := p.Meta[schema.MetaStatusItem]; !ok {
		status := "Running " + call.Call.Name
		if p.Message != "" {
			status += ": " + p.Message
		}
		p.Meta[schema.MetaStatusItem] = status
	}
	e, err := events.KindProgress.New(events.SourceToolexec, "", call.Thread, p)
	if err != nil {
		return err
	}
	e.SetExtension(events.ExtRunID, call.RunID)
	subject, err := events.SubjectOf(e, events.StreamChat, call.Thread)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, progressTimeout)
	defer cancel()
	_, err = b.Publish(pctx, subject, e)
	return err
}

// progressTimeout bounds the wait for a progress event's acknowledgement
// (PublishProgress).
const progressTimeout = 2 * time.Second

// WatchThread calls fn with each chat event of the running call's thread
// (core NATS, live events only) until stop is called; a tool that waits
// for a person uses it to learn that the turn went on without it. Under a
// ctx that is not the executor's it does nothing.
func WatchThread(ctx context.Context, fn func(e *event.Event)) (stop func(), err error) {
	info, ok := ctx.Value(callKey{}).(callInfo)
	if !ok || info.bus == nil || info.call.Thread == "" {
		return func() {}, nil
	}
	sub, err := info.bus.Conn().Subscribe(events.ChatThreadSubjects(info.call.Thread), func(m *nats.Msg) {
		if e, err := events.Decode(events.Header(m.Header), m.Data); err == nil {
			fn(e)
		}
	})
	if err != nil {
		return func() {}, fmt.Errorf("watching thread %s: %w", info.call.Thread, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}
