package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// The minimal floor is the least a turn needs on NATS, written with
// nats.go only: the chain turn.requested → processor → agent →
// pre-execute request-reply → tool-executor → agent → processor →
// turn.completed, that is 6 JetStream publishes (each consumed by a
// durable pull consumer and acked, except the driver's), 1 request-reply
// and 3 KV writes:
//
//	driver    publish turn.requested
//	processor put thread (the turn is running), publish run.requested
//	agent     request pre-execute, put run (the checkpoint before the
//	          call is dispatched), publish tool.call
//	toolexec  publish tool.result
//	agent     publish run.completed (what it needs rides in the events)
//	processor put thread (idle), publish turn.completed
//	driver    receive turn.completed
//
// A confirm cycle: the agent's pre-execute answer is confirm, so it puts
// the run and publishes run.paused; the processor creates the paused
// record (TTL) and publishes elicitation.requested; the answer
// (elicitation.responded) makes the processor get the paused record and
// delete it at that revision (exactly one resumer), and publish
// run.resumed; the agent publishes tool.call, and the turn ends as a read
// turn does. Payloads have the sizes measured on parley, on streams and
// buckets of the same configuration (storage, retention, duplicate
// window, TTLs). No CompareAndSwap loops, no thread history, no
// CloudEvents, no progress events, no tracing.
//
// Where the floor (floor.go) replays parley's own operation mix, this one
// is the design's lower bound: the ratio against it is what parley's
// design costs, not only its code.

const (
	minPrefix = "benchmin"
	minChat   = "BENCH_MIN_CHAT"
	minAgent  = "BENCH_MIN_AGENT"
	minRuns   = "BENCH_MIN_RUNS"
	minTools  = "BENCH_MIN_TOOLS"

	minThreads = "bench_min_threads"
	minRunsKV  = "bench_min_runs"
	minPaused  = "bench_min_paused"
)

// minFloor is the minimal nats.go system.
type minFloor struct {
	*floor
}

// minRole is one worker of the minimal floor.
type minRole struct {
	m       *minFloor
	nc      *nats.Conn
	js      jetstream.JetStream
	threads jetstream.KeyValue
	runs    jetstream.KeyValue
	paused  jetstream.KeyValue
}

// minChain is the minimal floor's chain.
var minChain = chainSpec{label: "minimal floor", prefix: minPrefix,
	streams: [4]string{minChat, minAgent, minRuns, minTools},
	buckets: []jetstream.KeyValueConfig{
		{Bucket: minThreads, TTL: 30 * 24 * time.Hour},
		{Bucket: minRunsKV, TTL: 48 * time.Hour},
		{Bucket: minPaused, LimitMarkerTTL: time.Minute},
	}}

func startMinFloor(ctx context.Context, env *benchEnv, opts *Options, sizes *floorSizes) (m *minFloor, err error) {
	f, wctx, err := newFloor(ctx, env, opts, sizes, minChain)
	defer func() {
		if err != nil && f != nil {
			f.stop()
		}
	}()
	if err != nil {
		return nil, err
	}
	m = &minFloor{floor: f}
	roles := map[string]*minRole{}
	for _, name := range []string{"min-processor", "min-agent", "min-toolexec"} {
		nc, js, err := f.role(name)
		if err != nil {
			return nil, err
		}
		r := &minRole{m: m, nc: nc, js: js}
		for _, b := range []struct {
			kv   *jetstream.KeyValue
			name string
		}{{&r.threads, minThreads}, {&r.runs, minRunsKV}, {&r.paused, minPaused}} {
			if *b.kv, err = js.KeyValue(ctx, b.name); err != nil {
				return nil, err
			}
		}
		roles[name] = r
	}
	for _, c := range []struct {
		role, stream, durable string
		filter                []string
		h                     func(*minRole, context.Context, jetstream.Msg) error
	}{
		{"min-toolexec", minTools, "min-toolexec", nil, (*minRole).toolexec},
		{"min-agent", minAgent, "min-agent", nil, (*minRole).agent},
		{"min-processor", minChat, "min-processor", []string{minPrefix + ".chat.*.turn.requested", minPrefix + ".chat.*.elicitation.responded"}, (*minRole).chat},
		{"min-processor", minRuns, "min-processor-runs", nil, (*minRole).outcome},
	} {
		r := roles[c.role]
		if err := f.consume(wctx, r.js, c.stream, c.durable, c.filter, func(ctx context.Context, msg jetstream.Msg) error { return c.h(r, ctx, msg) }); err != nil {
			return nil, err
		}
	}
	f.disp, err = newDispatcher(ctx, f.drv, minChat, []string{minPrefix + ".chat.*.turn.completed", minPrefix + ".chat.*.elicitation.requested"})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (r *minRole) publish(ctx context.Context, subject string, h nats.Header, size int) error {
	return r.m.publish(ctx, r.js, subject, h, size)
}

// chat is the processor's chat consumer: turn.requested and
// elicitation.responded.
func (r *minRole) chat(ctx context.Context, msg jetstream.Msg) error {
	parts := strings.SplitN(msg.Subject(), ".", 4)
	thread, suffix := parts[2], parts[3]
	sz := r.m.sizes
	switch suffix {
	case "turn.requested":
		if _, err := r.threads.Put(ctx, thread, r.m.pad(sz.kvThread)); err != nil {
			return err
		}
		return r.publish(ctx, minPrefix+".agent.run.requested", hdr(thread, nuid.Next(), msg.Headers().Get(hdrTool)), sz.runRequested)
	case "elicitation.responded":
		e, err := r.paused.Get(ctx, thread)
		if err != nil {
			return fmt.Errorf("paused record of %s: %w", thread, err)
		}
		run, tool, _ := strings.Cut(string(e.Value()[:min(len(e.Value()), 64)]), " ")
		tool, _, _ = strings.Cut(tool, " ")
		if err := r.paused.Delete(ctx, thread, jetstream.LastRevision(e.Revision())); err != nil {
			return err
		}
		return r.publish(ctx, minPrefix+".agent.run.resumed", hdr(thread, run, tool), sz.runResumed)
	}
	return fmt.Errorf("unexpected %s", msg.Subject())
}

// outcome is the processor's run-outcome consumer.
func (r *minRole) outcome(ctx context.Context, msg jetstream.Msg) error {
	h := msg.Headers()
	thread, sz := h.Get(hdrThread), r.m.sizes
	chat := minPrefix + ".chat." + thread + "."
	if strings.HasSuffix(msg.Subject(), ".run.paused") {
		// The record starts with "<run> <tool> " so the answer can resume it.
		rec := append([]byte(h.Get(hdrRun)+" "+h.Get(hdrTool)+" "), r.m.pad(sz.kvPaused)...)[:max(sz.kvPaused, 64)]
		// One write with a per-message TTL (the processor owns the thread,
		// so no create-if-absent check; a KV Create over a deleted key
		// costs nats.go a get and an update).
		if _, err := r.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + minPaused + "." + thread, Data: rec},
			jetstream.WithMsgTTL(24*time.Hour)); err != nil {
			return err
		}
		return r.publish(ctx, chat+"elicitation.requested", nil, sz.elicitationRequested)
	}
	if _, err := r.threads.Put(ctx, thread, r.m.pad(sz.kvThread)); err != nil {
		return err
	}
	return r.publish(ctx, chat+"turn.completed", nil, sz.turnCompleted)
}

// agent is the agent's work-queue consumer.
func (r *minRole) agent(ctx context.Context, msg jetstream.Msg) error {
	h := msg.Headers()
	thread, run, tool := h.Get(hdrThread), h.Get(hdrRun), h.Get(hdrTool)
	sz := r.m.sizes
	toolCall := func() error {
		return r.publish(ctx, minPrefix+".tool.call."+tool, hdr(thread, run, tool), sz.toolCall)
	}
	switch {
	case strings.HasSuffix(msg.Subject(), ".run.requested"):
		reply, err := r.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: minPrefix + ".pre_execute.default." + tool, Data: r.m.pad(sz.preExecute)})
		if err != nil {
			return err
		}
		if _, err := r.runs.Put(ctx, run, r.m.pad(sz.kvRun)); err != nil {
			return err
		}
		if reply.Header.Get(hdrDec) == "confirm" {
			return r.publish(ctx, minPrefix+".agent.run.paused", hdr(thread, run, tool), sz.runPaused)
		}
		return toolCall()
	case strings.HasSuffix(msg.Subject(), ".run.resumed"):
		return toolCall()
	default: // tool.result
		return r.publish(ctx, minPrefix+".agent.run.completed", hdr(thread, run, tool), sz.runCompleted)
	}
}

// toolexec is the tool-executor's work-queue consumer.
func (r *minRole) toolexec(ctx context.Context, msg jetstream.Msg) error {
	h := msg.Headers()
	return r.publish(ctx, minPrefix+".tool.result."+h.Get(hdrRun), h, r.m.sizes.toolResult)
}
