// Package toolexec is the tool-executor worker: it takes tool calls from the
// PARLEY_TOOLS work queue (durable "toolexec", subjects
// parley.tool.call.<tool>), runs built-in tools, and publishes each MCP
// CallToolResult (or input-required result) on parley.tool.result.<run>.
//
// At start-up it registers its tools' trusted definitions in the
// parley_tools bucket. Results are recorded in parley_tool_results by run,
// call and round before they are published, so a redelivered call reuses
// the recorded result instead of running the tool again; mutating built-in
// tools are idempotent per call ID as well (see builtin).
package toolexec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/bus"
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
}

// Executor is the tool-executor worker.
type Executor struct {
	bus     *bus.Client
	tools   map[string]builtin.Tool
	results *kvstate.Bucket[events.ToolResult]
	reg     *kvstate.ToolRegistry
	opts    Options
	log     *slog.Logger
}

// New opens the executor's buckets and registers tools.
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
	js := b.JetStream()
	results, err := kvstate.OpenBucket[events.ToolResult](ctx, js, kvstate.BucketToolResults,
		kvstate.BucketOptions{Storage: b.Storage(), Replicas: b.Replicas(), TTL: o.ResultTTL})
	if err != nil {
		return nil, err
	}
	reg, err := kvstate.OpenTools(ctx, js, b.Storage(), b.Replicas())
	if err != nil {
		return nil, err
	}
	x := &Executor{bus: b, tools: map[string]builtin.Tool{}, results: results, reg: reg, opts: o, log: o.Logger}
	for _, t := range tools {
		def := t.Definition()
		if err := events.ValidToken("tool name", def.Name); err != nil {
			return nil, err
		}
		if err := reg.Register(ctx, def); err != nil {
			return nil, fmt.Errorf("registering tool %s: %w", def.Name, err)
		}
		x.tools[def.Name] = t
	}
	return x, nil
}

// Run consumes tool calls until ctx is cancelled, then drains.
func (x *Executor) Run(ctx context.Context) error {
	return x.bus.Consume(ctx, bus.ConsumerSpec{
		Stream: events.StreamTools, Durable: "toolexec", Concurrency: x.opts.Concurrency,
		OnDeadLetter: x.onDeadLetter,
	}, x.Handle)
}

// Handle runs one tool call.
func (x *Executor) Handle(ctx context.Context, d *bus.Delivery) error {
	if d.Event.Type() != events.TypeToolCallRequested {
		return bus.Permanent(fmt.Errorf("type: %q is not handled by the tool-executor", d.Event.Type()))
	}
	in, err := events.Data[events.ToolCallRequested](d.Event)
	if err != nil {
		return bus.Permanent(err)
	}
	if in.RunID == "" || in.Call.ID == "" {
		return bus.Permanent(errors.New("data: runId and call.id are required"))
	}
	key := "r" + events.DerivedID(in.RunID, in.Call.ID, fmt.Sprint(in.Round))
	res, _, err := x.results.Get(ctx, key)
	switch {
	case errors.Is(err, kvstate.ErrNotFound):
		if res, err = x.execute(ctx, in); err != nil {
			return err // infrastructure failure: retried, then dead-lettered
		}
		if _, err := x.results.Put(ctx, key, res); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		x.log.InfoContext(ctx, "reusing recorded tool result", "tool", in.Call.Name, "run_id", in.RunID)
	}
	return x.publish(ctx, d.Event.Subject(), res)
}

func (x *Executor) execute(ctx context.Context, in events.ToolCallRequested) (events.ToolResult, error) {
	out := events.ToolResult{RunID: in.RunID, CallID: in.Call.ID, Round: in.Round}
	t, ok := x.tools[in.Call.Name]
	if !ok {
		out.Result = schema.ErrorResult("Unknown tool " + in.Call.Name)
		return out, nil
	}
	start := time.Now()
	r, err := t.Call(ctx, builtin.Request{RunID: in.RunID, CallID: in.Call.ID, Round: in.Round, Arguments: in.Call.Arguments,
		InputResponses: in.InputResponses, RequestState: in.RequestState})
	if err != nil {
		return out, fmt.Errorf("running %s: %w", in.Call.Name, err)
	}
	out.Result, out.InputRequired = r.Call, r.InputRequired
	x.log.InfoContext(ctx, "tool executed", "tool", in.Call.Name, "run_id", in.RunID, "round", in.Round,
		"input_required", out.InputRequired != nil, "duration", time.Since(start))
	return out, nil
}

func (x *Executor) publish(ctx context.Context, thread string, res events.ToolResult) error {
	e, err := events.NewWithID(events.DerivedID("tool.result", res.RunID, res.CallID, fmt.Sprint(res.Round)),
		events.SourceToolexec, events.TypeToolResultReady, thread, res)
	if err != nil {
		return err
	}
	e.SetExtension(events.ExtRunID, res.RunID)
	_, err = x.bus.Publish(ctx, events.ToolResultSubject(res.RunID), e)
	return err
}

// onDeadLetter answers the agent with an error result so the run goes on.
func (x *Executor) onDeadLetter(ctx context.Context, d *bus.Delivery, reason error) {
	if d.Event == nil {
		return
	}
	in, err := events.Data[events.ToolCallRequested](d.Event)
	if err != nil || in.RunID == "" {
		return
	}
	res := events.ToolResult{RunID: in.RunID, CallID: in.Call.ID, Round: in.Round,
		Result: schema.ErrorResult(fmt.Sprintf("%s could not be executed: %v", in.Call.Name, reason))}
	_ = x.publish(ctx, d.Event.Subject(), res)
}
