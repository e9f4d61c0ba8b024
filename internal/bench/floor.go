package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/parley-dev/parley/kvstate"
)

// The floor is a minimal program of the same operation mix as a parley
// turn, written with nats.go only: the same JetStream publishes (with
// Nats-Msg-Id) and work-queue consumes (pull, 8 at a time, explicit ack),
// the same pre-execute request-reply, and the same KV reads and writes on
// buckets of the same configuration, each role on its own connection,
// with payloads of the sizes the probe measured on parley. It has no
// CloudEvents, no JSON, no tracing and no agent logic.
//
// Per read turn (the count of parley before it cut its bus work to the
// probe's figures in docs/BENCHMARKS.md; the floor keeps that heavier mix,
// so parley ÷ floor now reads below 1 where parley does less; the minimal
// floor is the reference):
//
//	driver    publish turn.requested
//	processor get thread, get the thread's next turn.requested from the stream
//	          (the FIFO check), get thread, get thread, update thread,
//	          publish run.requested
//	agent     get run (miss), create run, get tool ×2 (the model step's tool list),
//	          update run, get tool, request pre-execute, update run, publish tool.call
//	toolexec  get result (miss), put result, publish tool.result
//	agent     get run, update run ×3, get tool ×2, update run, publish run.completed
//	processor get thread, publish turn.completed, get thread, update thread
//	driver    receive turn.completed
//
// Each publish is consumed by a durable pull consumer and acked; that is
// 6 JetStream publishes (the driver's included), 13 KV gets, 10 KV writes, 1
// stream get and 1 request-reply per turn.
//
// A confirm cycle replaces the agent's tool.call by run.paused, after which
// the processor gets the thread, stores the paused record (create, or on a
// thread paused before: create fails, get, update with TTL), gets and
// updates the thread, and publishes elicitation.requested and turn.paused;
// the answer (elicitation.responded) makes it get and update the paused
// record, get and update the thread and publish run.resumed; the agent gets
// and updates the run, gets the tool, updates the run and publishes
// tool.call, and the turn ends as a read turn does.
//
// What the floor leaves out of parley's operations: the key listing behind
// the agent's tool list (an ordered consumer created and deleted per model
// step, see the report's ops), and the heartbeat goroutine per delivery.

const (
	floorPrefix = "benchfloor"
	floorChat   = "BENCH_FLOOR_CHAT"
	floorAgent  = "BENCH_FLOOR_AGENT"
	floorRuns   = "BENCH_FLOOR_RUNS"
	floorTools  = "BENCH_FLOOR_TOOLS"

	floorThreads = "bench_floor_threads"
	floorRunsKV  = "bench_floor_runs"
	floorResults = "bench_floor_results"
	floorPaused  = "bench_floor_paused"
	floorToolsKV = "bench_floor_tools"

	hdrThread = "Bench-Thread"
	hdrRun    = "Bench-Run"
	hdrTool   = "Bench-Tool"
	hdrDec    = "Bench-Decision"
)

// floorSizes are the payload sizes (headers and data) of each message and
// KV value, as measured on parley.
type floorSizes struct {
	turnRequested, runRequested, preExecute, preExecuteReply, toolCall, toolResult int
	runCompleted, turnCompleted, runPaused, elicitationRequested, turnPaused       int
	elicitationResponded, runResumed                                               int
	kvThread, kvRun, kvResult, kvPaused, kvTool                                    int
}

func newFloorSizes(m map[string][]int) *floorSizes {
	avg := func(class string, def int) int {
		vs := m[class]
		if len(vs) == 0 {
			return def
		}
		n := 0
		for _, v := range vs {
			n += v
		}
		return n / len(vs)
	}
	return &floorSizes{
		turnRequested:        avg("chat.turn.requested", 600),
		runRequested:         avg("agent.run.requested", 1500),
		preExecute:           avg("pre_execute", 1100),
		preExecuteReply:      avg("pre_execute.reply", 600),
		toolCall:             avg("tool.call", 700),
		toolResult:           avg("tool.result", 600),
		runCompleted:         avg("agent.run.completed", 650),
		turnCompleted:        avg("chat.turn.completed", 650),
		runPaused:            avg("agent.run.paused", 3000),
		elicitationRequested: avg("chat.elicitation.requested", 900),
		turnPaused:           avg("chat.turn.paused", 800),
		elicitationResponded: avg("chat.elicitation.responded", 550),
		runResumed:           avg("agent.run.resumed", 2500),
		kvThread:             avg("kv.parley_threads", 2500),
		kvRun:                avg("kv.parley_runs", 2000),
		kvResult:             avg("kv.parley_tool_results", 150),
		kvPaused:             avg("kv.parley_paused", 4000),
		kvTool:               400,
	}
}

// floor is a raw nats.go system: the floor (this file) or, embedded in
// minFloor, the minimal floor (floormin.go). What both do the same way
// is here: the driver, the streams and buckets, the gate, the consumers,
// the payloads and the clean-up.
type floor struct {
	env    *benchEnv
	opts   *Options
	sizes  *floorSizes
	chain  chainSpec
	cancel context.CancelFunc
	wg     sync.WaitGroup
	drv    jetstream.JetStream
	disp   *dispatcher

	// pads are the shared payloads by size (pad).
	pads sync.Map // int -> []byte
	mu   sync.Mutex
	errs int
}

// chainSpec names a floor's chain: its subject prefix, its chat, agent,
// runs and tools streams, and its buckets (configured as parley's).
type chainSpec struct {
	label, prefix string
	streams       [4]string
	buckets       []jetstream.KeyValueConfig
}

// newFloor connects the driver of the chain c, creates its streams and
// buckets and starts its gate (a plain subscription answering
// pre-execute requests: confirm for the write tool, allow otherwise, with
// replies of the measured size). The caller starts the roles and the
// dispatcher, and calls stop on error. wctx is the roles' context,
// cancelled by stop.
func newFloor(ctx context.Context, env *benchEnv, opts *Options, sizes *floorSizes, c chainSpec) (f *floor, wctx context.Context, err error) {
	nc, err := env.connect(c.prefix + "-driver")
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f = &floor{env: env, opts: opts, sizes: sizes, chain: c, cancel: cancel, drv: js}
	if _, err := ensureChain(ctx, js, opts.Storage, c.label, c.prefix, c.streams, c.buckets); err != nil {
		return f, nil, err
	}
	gnc, err := env.connect(c.prefix + "-gate")
	if err != nil {
		return f, nil, err
	}
	allow, confirm := f.pad(sizes.preExecuteReply), f.pad(sizes.preExecuteReply)
	if _, err := gnc.QueueSubscribe(c.prefix+".pre_execute.>", "gate", func(m *nats.Msg) {
		r := &nats.Msg{Header: nats.Header{hdrDec: []string{"allow"}}, Data: allow}
		if strings.HasSuffix(m.Subject, "."+toolWrite) {
			r = &nats.Msg{Header: nats.Header{hdrDec: []string{"confirm"}}, Data: confirm}
		}
		_ = m.RespondMsg(r)
	}); err != nil {
		return f, nil, err
	}
	return f, wctx, nil
}

// role connects one worker of the floor: its own connection.
func (f *floor) role(name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := f.env.connect(name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	return nc, js, err
}

// floorChain is the floor's chain.
var floorChain = chainSpec{label: "floor", prefix: floorPrefix,
	streams: [4]string{floorChat, floorAgent, floorRuns, floorTools},
	buckets: []jetstream.KeyValueConfig{
		{Bucket: floorThreads, TTL: 30 * 24 * time.Hour},
		{Bucket: floorRunsKV, TTL: 48 * time.Hour},
		{Bucket: floorResults, TTL: 48 * time.Hour},
		{Bucket: floorPaused, LimitMarkerTTL: time.Minute},
		{Bucket: floorToolsKV},
	}}

func startFloor(ctx context.Context, env *benchEnv, opts *Options, sizes *floorSizes) (f *floor, err error) {
	f, wctx, err := newFloor(ctx, env, opts, sizes, floorChain)
	defer func() {
		if err != nil && f != nil {
			f.stop()
		}
	}()
	if err != nil {
		return nil, err
	}
	for _, t := range []string{toolRead, toolWrite} {
		kv, err := f.drv.KeyValue(ctx, floorToolsKV)
		if err != nil {
			return nil, err
		}
		if _, err := kv.Put(ctx, t, f.pad(sizes.kvTool)); err != nil {
			return nil, err
		}
	}

	for _, r := range []struct {
		name   string
		stream string
		filter []string
		h      func(*floorRole, context.Context, jetstream.Msg) error
	}{
		{"floor-toolexec", floorTools, nil, (*floorRole).toolexec},
		{"floor-agent", floorAgent, nil, (*floorRole).agent},
		{"floor-processor", floorChat, []string{floorPrefix + ".chat.*.turn.requested", floorPrefix + ".chat.*.elicitation.responded"}, (*floorRole).chat},
		{"floor-processor-runs", floorRuns, nil, (*floorRole).runs},
	} {
		nc, js, err := f.role(r.name)
		if err != nil {
			return nil, err
		}
		fr, err := f.newRole(ctx, nc, js)
		if err != nil {
			return nil, err
		}
		if r.name == "floor-processor" || r.name == "floor-processor-runs" {
			// parley's processor watches the paused bucket for expiry markers.
			w, err := fr.kv[floorPaused].WatchAll(ctx, jetstream.UpdatesOnly())
			if err != nil {
				return nil, err
			}
			f.wg.Go(func() {
				defer func() { _ = w.Stop() }()
				for {
					select {
					case <-wctx.Done():
						return
					case e, ok := <-w.Updates():
						if !ok {
							return
						}
						_ = e
					}
				}
			})
		}
		if err := f.consume(wctx, js, r.stream, r.name, r.filter, func(ctx context.Context, m jetstream.Msg) error { return r.h(fr, ctx, m) }); err != nil {
			return nil, err
		}
	}
	f.disp, err = newDispatcher(ctx, f.drv, floorChat, []string{floorPrefix + ".chat.*.turn.completed", floorPrefix + ".chat.*.elicitation.requested"})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// ensureChain creates the streams of a floor chain — names are its chat,
// agent, runs and tools streams on subjects under prefix — and its buckets,
// configured as parley's (limits chat stream, work queues, 2 min duplicate
// window, KV history 1, 1 MiB values), on storage st. label names the
// floor in errors. It returns the buckets by name.
func ensureChain(ctx context.Context, js jetstream.JetStream, st jetstream.StorageType, label, prefix string, names [4]string,
	buckets []jetstream.KeyValueConfig) (map[string]jetstream.KeyValue, error) {
	for _, cfg := range []jetstream.StreamConfig{
		{Name: names[0], Subjects: []string{prefix + ".chat.>"}, Retention: jetstream.LimitsPolicy, MaxAge: 7 * 24 * time.Hour},
		{Name: names[1], Subjects: []string{prefix + ".agent.run.requested", prefix + ".agent.run.resumed", prefix + ".tool.result.>"}, Retention: jetstream.WorkQueuePolicy},
		{Name: names[2], Subjects: []string{prefix + ".agent.run.completed", prefix + ".agent.run.paused"}, Retention: jetstream.WorkQueuePolicy},
		{Name: names[3], Subjects: []string{prefix + ".tool.call.>"}, Retention: jetstream.WorkQueuePolicy},
	} {
		cfg.Storage, cfg.Duplicates, cfg.Replicas = st, 2*time.Minute, 1
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("%s stream %s: %w", label, cfg.Name, err)
		}
	}
	kvs := make(map[string]jetstream.KeyValue, len(buckets))
	for _, cfg := range buckets {
		cfg.History, cfg.Storage, cfg.Replicas, cfg.MaxValueSize = 1, st, 1, 1<<20
		kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s bucket %s: %w", label, cfg.Bucket, err)
		}
		kvs[cfg.Bucket] = kv
	}
	return kvs, nil
}

// pad returns a shared payload of n bytes (read without a lock: the
// roles' handlers all call it).
func (f *floor) pad(n int) []byte {
	if p, ok := f.pads.Load(n); ok {
		return p.([]byte)
	}
	p, _ := f.pads.LoadOrStore(n, bytes.Repeat([]byte{'x'}, max(n, 1)))
	return p.([]byte)
}

// publish stores a payload of size bytes on subject with a fresh
// Nats-Msg-Id, from js.
func (f *floor) publish(ctx context.Context, js jetstream.JetStream, subject string, h nats.Header, size int) error {
	_, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h, Data: f.pad(size)}, jetstream.WithMsgID(nuid.Next()))
	return err
}

// consume runs h for each message of a durable pull consumer, on as many
// goroutines as parley's workers in the bench (workerConcurrency), acking
// on success.
func (f *floor) consume(ctx context.Context, js jetstream.JetStream, stream, durable string, filter []string, h func(context.Context, jetstream.Msg) error) error {
	conc := workerConcurrency(f.opts)
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 6,
		MaxAckPending: 1000, FilterSubjects: filter, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("floor consumer %s: %w", durable, err)
	}
	sem := make(chan struct{}, conc)
	var hwg sync.WaitGroup
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		hwg.Go(func() {
			defer func() { <-sem }()
			if err := h(context.WithoutCancel(ctx), m); err != nil {
				f.mu.Lock()
				f.errs++
				f.mu.Unlock()
				f.opts.Logger.Warn("floor handler failed", "consumer", durable, "error", err)
				_ = m.NakWithDelay(250 * time.Millisecond)
				return
			}
			_ = m.Ack()
		})
	}, jetstream.PullMaxMessages(conc))
	if err != nil {
		return err
	}
	f.wg.Go(func() {
		<-ctx.Done()
		cc.Stop()
		<-cc.Closed()
		hwg.Wait()
	})
	return nil
}

// stop stops the roles and, on a server the bench does not own, deletes
// the chain's streams and buckets.
func (f *floor) stop() {
	if f.disp != nil {
		f.disp.stop()
	}
	f.cancel()
	f.wg.Wait()
	if f.drv != nil && !f.env.own() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range f.chain.streams {
			_ = f.drv.DeleteStream(ctx, s)
		}
		for _, b := range f.chain.buckets {
			_ = f.drv.DeleteKeyValue(ctx, b.Bucket)
		}
	}
}

func (f *floor) events() *dispatcher { return f.disp }

func (f *floor) send(ctx context.Context, thread string, write bool) error {
	tool := toolRead
	if write {
		tool = toolWrite
	}
	return f.publish(ctx, f.drv, f.chain.prefix+".chat."+thread+".turn.requested",
		nats.Header{hdrTool: []string{tool}}, f.sizes.turnRequested)
}

func (f *floor) answer(ctx context.Context, thread, _ string) error {
	return f.publish(ctx, f.drv, f.chain.prefix+".chat."+thread+".elicitation.responded", nil, f.sizes.elicitationResponded)
}

// floorRole is one worker of the floor: its connection and bucket handles.
type floorRole struct {
	f      *floor
	nc     *nats.Conn
	js     jetstream.JetStream
	kv     map[string]jetstream.KeyValue
	chatSt jetstream.Stream
}

func (f *floor) newRole(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (*floorRole, error) {
	r := &floorRole{f: f, nc: nc, js: js, kv: map[string]jetstream.KeyValue{}}
	var err error
	if r.chatSt, err = js.Stream(ctx, floorChat); err != nil {
		return nil, err
	}
	for _, b := range []string{floorThreads, floorRunsKV, floorResults, floorPaused, floorToolsKV} {
		kv, err := js.KeyValue(ctx, b)
		if err != nil {
			return nil, err
		}
		r.kv[b] = kv
	}
	return r, nil
}

// get reads key; a missing key is revision 0, not an error.
func (r *floorRole) get(ctx context.Context, bucket, key string) (jetstream.KeyValueEntry, uint64, error) {
	e, err := r.kv[bucket].Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return e, e.Revision(), nil
}

// write creates key (rev 0) or updates it at rev.
func (r *floorRole) write(ctx context.Context, bucket, key string, rev uint64, size int) (uint64, error) {
	if rev == 0 {
		return r.kv[bucket].Create(ctx, key, r.f.pad(size))
	}
	return r.kv[bucket].Update(ctx, key, r.f.pad(size), rev)
}

// mutateThread is a thread read-modify-write (get, create or update),
// retried on a revision conflict as parley's ThreadStore.Mutate is: the
// next turn.requested can race the previous turn's run.completed, because
// turn.completed is published before the thread is updated.
func (r *floorRole) mutateThread(ctx context.Context, thread string) error {
	var err error
	for range 20 {
		var rev uint64
		if _, rev, err = r.get(ctx, floorThreads, thread); err != nil {
			return err
		}
		if _, err = r.write(ctx, floorThreads, thread, rev, r.f.sizes.kvThread); err == nil || !kvstate.IsConflict(err) {
			return err
		}
	}
	return err
}

func (r *floorRole) publish(ctx context.Context, subject string, h nats.Header, size int) error {
	return r.f.publish(ctx, r.js, subject, h, size)
}

func hdr(thread, run, tool string) nats.Header {
	return nats.Header{hdrThread: []string{thread}, hdrRun: []string{run}, hdrTool: []string{tool}}
}

// chat is the processor's chat consumer: turn.requested and elicitation.responded.
func (r *floorRole) chat(ctx context.Context, m jetstream.Msg) error {
	parts := strings.SplitN(m.Subject(), ".", 4)
	thread, suffix := parts[2], parts[3]
	sz := r.f.sizes
	switch suffix {
	case "turn.requested":
		// parley's FIFO check: the thread, then the thread's next
		// turn.requested in the stream (this one), then the thread again.
		if _, _, err := r.get(ctx, floorThreads, thread); err != nil {
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		if _, err := r.chatSt.GetMsg(ctx, md.Sequence.Stream, jetstream.WithGetMsgSubject(m.Subject())); err != nil {
			return err
		}
		if _, _, err := r.get(ctx, floorThreads, thread); err != nil {
			return err
		}
		if err := r.mutateThread(ctx, thread); err != nil {
			return err
		}
		return r.publish(ctx, floorPrefix+".agent.run.requested", hdr(thread, nuid.Next(), m.Headers().Get(hdrTool)), sz.runRequested)
	case "elicitation.responded":
		e, rev, err := r.get(ctx, floorPaused, thread)
		if err != nil || e == nil {
			return fmt.Errorf("paused record of %s: %v", thread, err)
		}
		run, tool, _ := strings.Cut(string(e.Value()[:min(len(e.Value()), 64)]), " ")
		tool, _, _ = strings.Cut(tool, " ")
		if _, err := r.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + floorPaused + "." + thread, Data: r.f.pad(sz.kvPaused)},
			jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(24*time.Hour)); err != nil {
			return err
		}
		if err := r.mutateThread(ctx, thread); err != nil {
			return err
		}
		return r.publish(ctx, floorPrefix+".agent.run.resumed", hdr(thread, run, tool), sz.runResumed)
	}
	return fmt.Errorf("unexpected %s", m.Subject())
}

// runs is the processor's run-outcome consumer.
func (r *floorRole) runs(ctx context.Context, m jetstream.Msg) error {
	h := m.Headers()
	thread, sz := h.Get(hdrThread), r.f.sizes
	if _, _, err := r.get(ctx, floorThreads, thread); err != nil {
		return err
	}
	chat := floorPrefix + ".chat." + thread + "."
	switch {
	case strings.HasSuffix(m.Subject(), ".run.completed"):
		if err := r.publish(ctx, chat+"turn.completed", nil, sz.turnCompleted); err != nil {
			return err
		}
		return r.mutateThread(ctx, thread)
	case strings.HasSuffix(m.Subject(), ".run.paused"):
		// The record starts with "<run> <tool> " so the answer can resume it.
		rec := append([]byte(h.Get(hdrRun)+" "+h.Get(hdrTool)+" "), r.f.pad(sz.kvPaused)...)[:max(sz.kvPaused, 64)]
		kv := r.kv[floorPaused]
		if _, err := kv.Create(ctx, thread, rec, jetstream.KeyTTL(24*time.Hour)); kvstate.IsConflict(err) {
			_, rev, err := r.get(ctx, floorPaused, thread)
			if err != nil {
				return err
			}
			if _, err := r.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + floorPaused + "." + thread, Data: rec},
				jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(24*time.Hour)); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if err := r.mutateThread(ctx, thread); err != nil {
			return err
		}
		if err := r.publish(ctx, chat+"elicitation.requested", nil, sz.elicitationRequested); err != nil {
			return err
		}
		return r.publish(ctx, chat+"turn.paused", nil, sz.turnPaused)
	}
	return fmt.Errorf("unexpected %s", m.Subject())
}

// agent is the agent's work-queue consumer.
func (r *floorRole) agent(ctx context.Context, m jetstream.Msg) error {
	h := m.Headers()
	thread, run, tool := h.Get(hdrThread), h.Get(hdrRun), h.Get(hdrTool)
	sz := r.f.sizes
	listTools := func() error {
		for _, t := range []string{toolRead, toolWrite} {
			if _, _, err := r.get(ctx, floorToolsKV, t); err != nil {
				return err
			}
		}
		return nil
	}
	toolCall := func() error {
		return r.publish(ctx, floorPrefix+".tool.call."+tool, hdr(thread, run, tool), sz.toolCall)
	}
	switch {
	case strings.HasSuffix(m.Subject(), ".run.requested"):
		if _, _, err := r.get(ctx, floorRunsKV, run); err != nil {
			return err
		}
		rev, err := r.write(ctx, floorRunsKV, run, 0, sz.kvRun)
		if err != nil {
			return err
		}
		if err := listTools(); err != nil {
			return err
		}
		if rev, err = r.write(ctx, floorRunsKV, run, rev, sz.kvRun); err != nil {
			return err
		}
		if _, _, err := r.get(ctx, floorToolsKV, tool); err != nil {
			return err
		}
		reply, err := r.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: floorPrefix + ".pre_execute.default." + tool, Data: r.f.pad(sz.preExecute)})
		if err != nil {
			return err
		}
		if _, err = r.write(ctx, floorRunsKV, run, rev, sz.kvRun); err != nil {
			return err
		}
		if reply.Header.Get(hdrDec) == "confirm" {
			return r.publish(ctx, floorPrefix+".agent.run.paused", hdr(thread, run, tool), sz.runPaused)
		}
		return toolCall()
	case strings.HasSuffix(m.Subject(), ".run.resumed"):
		_, rev, err := r.get(ctx, floorRunsKV, run)
		if err != nil {
			return err
		}
		if rev, err = r.write(ctx, floorRunsKV, run, rev, sz.kvRun); err != nil {
			return err
		}
		if _, _, err := r.get(ctx, floorToolsKV, tool); err != nil {
			return err
		}
		if _, err = r.write(ctx, floorRunsKV, run, rev, sz.kvRun); err != nil {
			return err
		}
		return toolCall()
	default: // tool.result
		_, rev, err := r.get(ctx, floorRunsKV, run)
		if err != nil {
			return err
		}
		for i := range 4 {
			if i == 3 {
				if err := listTools(); err != nil {
					return err
				}
			}
			if rev, err = r.write(ctx, floorRunsKV, run, rev, sz.kvRun); err != nil {
				return err
			}
		}
		return r.publish(ctx, floorPrefix+".agent.run.completed", hdr(thread, run, tool), sz.runCompleted)
	}
}

// toolexec is the tool-executor's work-queue consumer.
func (r *floorRole) toolexec(ctx context.Context, m jetstream.Msg) error {
	h := m.Headers()
	run := h.Get(hdrRun)
	key := "r" + run
	if _, _, err := r.get(ctx, floorResults, key); err != nil {
		return err
	}
	if _, err := r.kv[floorResults].Put(ctx, key, r.f.pad(r.f.sizes.kvResult)); err != nil {
		return err
	}
	return r.publish(ctx, floorPrefix+".tool.result."+run, h, r.f.sizes.toolResult)
}
