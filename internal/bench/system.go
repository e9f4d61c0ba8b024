package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/starter"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/agent"
	"github.com/parley-dev/parley/workers/gate"
	"github.com/parley-dev/parley/workers/processor"
	"github.com/parley-dev/parley/workers/toolexec"
)

// waitTimeout bounds every wait for an event.
const waitTimeout = 30 * time.Second

// Texts that select the bench rules of the scripted model.
const (
	textRead  = "bench read the status"
	textWrite = "bench write the value"
)

// target is a system the phases drive: parley, or the floor.
type target interface {
	events() *dispatcher
	// send publishes a user message on thread: a turn calling the
	// read-only tool, or (write) the tool that needs a confirmation.
	send(ctx context.Context, thread string, write bool) error
	// answer accepts the elicitation id of thread.
	answer(ctx context.Context, thread, id string) error
}

// workerConcurrency is how many events each consumer of parley's workers,
// and of both floors, handles at once: as many as the bench offers
// threads (Options.Concurrency, at least 8), as a deployment sized for that
// load sets --concurrency. With parley's default of 8, 64 threads queue
// behind 8 handlers per consumer, which measures the setting rather than
// the design.
func workerConcurrency(opts *Options) int { return max(opts.Concurrency, 8) }

// system is parley under test: the four workers on their own connections,
// run by a starter.Group, and a driver acting as the integrator.
type system struct {
	env    *benchEnv
	opts   *Options
	group  *starter.Group
	drv    *bus.Client
	client *client.Client
	disp   *dispatcher
}

func startSystem(ctx context.Context, env *benchEnv, opts *Options) (s *system, err error) {
	nc, err := env.connect("driver")
	if err != nil {
		return nil, err
	}
	drv, err := bus.New(nc, &bus.Options{Storage: opts.Storage})
	if err != nil {
		return nil, err
	}
	if err := drv.EnsureStreams(ctx); err != nil {
		return nil, err
	}
	s = &system{env: env, opts: opts, drv: drv, client: client.New(drv, "/parley/bench"),
		group: starter.New(context.WithoutCancel(ctx), &starter.Options{Logger: opts.Logger})}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	connect := func(_ context.Context, name, _ string) (*nats.Conn, error) { return env.connect(name) }
	started := make(chan string, 4)
	common := func(role string) starter.Common {
		return starter.Common{Logger: opts.Logger.With("worker", role), Bus: bus.Options{Storage: opts.Storage}, NoStreams: true,
			Started: func(r string) { started <- r }}
	}
	conc := workerConcurrency(opts)
	provider, err := model.NewScripted([]byte(benchRules))
	if err != nil {
		return nil, err
	}
	for _, r := range []struct {
		role string
		w    starter.Worker
	}{
		{starter.RoleGate, starter.Gate(common(starter.RoleGate), gate.DefaultConfig(), gate.Options{})},
		{starter.RoleToolexec, starter.Toolexec(common(starter.RoleToolexec), starter.ToolexecConfig{Tools: benchTools(),
			Options: toolexec.Options{Concurrency: conc}})},
		{starter.RoleAgent, starter.Agent(common(starter.RoleAgent), provider, agent.Options{Concurrency: conc})},
		{starter.RoleProcessor, starter.Processor(common(starter.RoleProcessor), processor.Options{Concurrency: conc})},
	} {
		s.group.Go(starter.Connected(r.role, r.role, connect, r.w))
	}
	sctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if err := starter.AwaitStarted(sctx, s.group, started, 4); err != nil {
		return nil, err
	}
	if err := starter.WaitService(ctx, s.group, nc, gate.ServiceName, 10*time.Second); err != nil {
		return nil, err
	}
	s.disp, err = newDispatcher(ctx, drv.JetStream(), events.StreamChat, []string{
		events.ChatSubject("*", events.ChatTurnCompleted),
		events.ChatSubject("*", events.ChatTurnFailed),
		events.ChatSubject("*", events.ChatTurnRejected),
		events.ChatSubject("*", events.ChatElicitationRequested),
		events.ChatSubject("*", events.ChatElicitationRejected),
		events.RefusedSubject("*", "*", events.ChatTurnRejected),
		events.RefusedSubject("*", "*", events.ChatElicitationRejected),
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// stop stops the workers and waits until they drained (a worker that
// did not is logged by the group).
func (s *system) stop() {
	if s.disp != nil {
		s.disp.stop()
	}
	_ = s.group.Stop()
}

// failed returns the error of a worker that stopped on its own, if one did.
func (s *system) failed() error {
	var se *starter.StoppedError
	if errors.As(context.Cause(s.group.Context()), &se) {
		return se
	}
	return nil
}

func (s *system) events() *dispatcher { return s.disp }

func (s *system) send(ctx context.Context, thread string, write bool) error {
	text := textRead
	if write {
		text = textWrite
	}
	_, err := s.client.Send(ctx, thread, "", text, "")
	return err
}

func (s *system) answer(ctx context.Context, thread, id string) error {
	_, err := s.client.Answer(ctx, thread, id, schema.ElicitResult{Action: schema.ActionAccept}, "")
	return err
}

// readTurn runs one turn calling the read-only tool: the time from
// turn.requested published to turn.completed received.
func readTurn(ctx context.Context, t target, thread string) (time.Duration, error) {
	ch, done := t.events().expect(thread)
	defer done()
	start := time.Now()
	if err := t.send(ctx, thread, false); err != nil {
		return 0, err
	}
	n, err := await(ctx, ch, "turn.completed", waitTimeout)
	if err != nil {
		return 0, fmt.Errorf("thread %s: %w", thread, err)
	}
	return n.at.Sub(start), nil
}

// pauseTurn sends a turn that needs a confirmation and returns the
// elicitation ID once elicitation.requested is received.
func pauseTurn(ctx context.Context, t target, thread string) (string, error) {
	ch, done := t.events().expect(thread)
	defer done()
	if err := t.send(ctx, thread, true); err != nil {
		return "", err
	}
	n, err := await(ctx, ch, "elicitation.requested", waitTimeout)
	if err != nil {
		return "", fmt.Errorf("thread %s: %w", thread, err)
	}
	return n.elicitationID, nil
}

// resume answers elicitation id on thread: the time from
// elicitation.responded published to turn.completed received.
func resume(ctx context.Context, t target, thread, id string) (time.Duration, error) {
	ch, done := t.events().expect(thread)
	defer done()
	start := time.Now()
	if err := t.answer(ctx, thread, id); err != nil {
		return 0, err
	}
	n, err := await(ctx, ch, "turn.completed", waitTimeout)
	if err != nil {
		return 0, fmt.Errorf("thread %s: %w", thread, err)
	}
	return n.at.Sub(start), nil
}

// confirmCycle pauses a turn and resumes it; it returns the resume time.
func confirmCycle(ctx context.Context, t target, thread string) (time.Duration, error) {
	id, err := pauseTurn(ctx, t, thread)
	if err != nil {
		return 0, err
	}
	return resume(ctx, t, thread, id)
}

// probe runs a read turn and a confirm cycle (each the second on its
// thread, as most turns are) while a subscriber on ">" counts the bus
// messages they cause and the size of each kind, for the floor.
func (s *system) probe(ctx context.Context) (*floorSizes, OpCounts, error) {
	sizes, ops, err := probeOps(ctx, s.env, s, "probe")
	if err != nil {
		return nil, ops, err
	}
	return newFloorSizes(sizes), ops, nil
}

// probeOps runs a read turn and a confirm cycle on t (each the second on
// its thread) while a subscriber on ">" counts the bus messages they
// cause, and returns the sizes of each class of message and the counts.
func probeOps(ctx context.Context, env *benchEnv, t target, name string) (map[string][]int, OpCounts, error) {
	nc, err := env.connect(name)
	if err != nil {
		return nil, OpCounts{}, err
	}
	defer nc.Close()
	var mu sync.Mutex
	var counts, detail map[string]int
	var trace []string
	sizes := map[string][]int{}
	inboxes := map[string]bool{}
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if counts == nil {
			return
		}
		size := len(m.Data) + headerSize(m.Header)
		subj := m.Subject
		if inboxes[subj] {
			delete(inboxes, subj)
			sizes["pre_execute.reply"] = append(sizes["pre_execute.reply"], size)
			return
		}
		kind, class := classify(subj, m.Reply)
		if kind == "" {
			return
		}
		counts[kind]++
		if kind != "advisory" {
			counts["total"]++
			target := opTarget(kind, class, subj)
			detail[kind+" "+target]++
			trace = append(trace, kind+" "+target)
		}
		if class != "" {
			sizes[class] = append(sizes[class], size)
		}
		if class == "pre_execute" && m.Reply != "" {
			inboxes[m.Reply] = true
		}
	})
	if err != nil {
		return nil, OpCounts{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		return nil, OpCounts{}, err
	}
	count := func(f func() error) (map[string]int, map[string]int, []string, error) {
		time.Sleep(50 * time.Millisecond) // let the previous turn's stragglers pass
		mu.Lock()
		counts, detail, trace = map[string]int{}, map[string]int{}, nil
		mu.Unlock()
		err := f()
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		c, d, t := counts, detail, trace
		counts = nil
		return c, d, t, err
	}
	var ops OpCounts
	rt, ct := env.runID+"-"+name+"-r", env.runID+"-"+name+"-c"
	if _, err := readTurn(ctx, t, rt); err != nil {
		return nil, ops, err
	}
	if ops.Turn, ops.TurnDetail, ops.TurnTrace, err = count(func() error { _, err := readTurn(ctx, t, rt); return err }); err != nil {
		return nil, ops, err
	}
	if _, err := confirmCycle(ctx, t, ct); err != nil {
		return nil, ops, err
	}
	if ops.Confirm, ops.ConfirmDetail, ops.ConfirmTrace, err = count(func() error { _, err := confirmCycle(ctx, t, ct); return err }); err != nil {
		return nil, ops, err
	}
	mu.Lock()
	defer mu.Unlock()
	return sizes, ops, nil
}

// classify names the kind of bus operation a message on subj (with reply
// subject reply) is, and for parley's own messages a size class.
func classify(subj, reply string) (kind, class string) {
	switch {
	case strings.HasPrefix(reply, "$JS.ACK."):
		return "js_deliver", ""
	case strings.HasPrefix(subj, "$JS.EVENT."):
		return "advisory", ""
	case strings.HasPrefix(subj, "parley.tool.pre_execute."), strings.HasPrefix(subj, minPrefix+".pre_execute."):
		return "request_reply", "pre_execute"
	case strings.HasPrefix(subj, minPrefix+"."):
		return "js_publish", strings.TrimPrefix(subj, minPrefix+".")
	case strings.HasPrefix(subj, "parley.chat."):
		_, suffix, _ := events.ParseChatSubject(subj)
		return "js_publish", "chat." + suffix
	case strings.HasPrefix(subj, "parley.in."):
		_, _, suffix, _ := events.ParseInputSubject(subj)
		return "js_publish", "in." + suffix
	case strings.HasPrefix(subj, "parley.tool.call."):
		return "js_publish", "tool.call"
	case strings.HasPrefix(subj, "parley.tool.result."):
		return "js_publish", "tool.result"
	case strings.HasPrefix(subj, "parley."):
		return "js_publish", strings.TrimPrefix(subj, "parley.")
	case strings.HasPrefix(subj, "$KV."):
		bucket, _, _ := strings.Cut(strings.TrimPrefix(subj, "$KV."), ".")
		return "kv_write", "kv." + bucket
	case strings.HasPrefix(subj, "$JS.API.DIRECT.GET."):
		return "kv_get", ""
	case strings.HasPrefix(subj, "$JS.ACK."):
		return "ack", ""
	case strings.HasPrefix(subj, "$JS.API.CONSUMER.MSG.NEXT."):
		return "pull_request", ""
	case strings.HasPrefix(subj, "$JS.API.CONSUMER.CREATE."), strings.HasPrefix(subj, "$JS.API.CONSUMER.DURABLE.CREATE."):
		return "consumer_create", ""
	case strings.HasPrefix(subj, "$JS.API.STREAM.MSG.GET."):
		return "stream_msg_get", ""
	case strings.HasPrefix(subj, "$JS.API.CONSUMER.DELETE."):
		return "consumer_delete", ""
	case strings.HasPrefix(subj, "$JS.API."):
		return "js_api_other", ""
	case strings.HasPrefix(subj, "$JS.FC."):
		return "flow_control", ""
	}
	return "", ""
}

// opTarget names what an operation of kind acts on: the bucket of a KV
// get or write, the stream of a delivery or ack, the size class (event
// kind) of a publish.
func opTarget(kind, class, subj string) string {
	switch kind {
	case "kv_get":
		// $JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>
		rest := strings.TrimPrefix(subj, "$JS.API.DIRECT.GET.")
		stream, _, _ := strings.Cut(rest, ".")
		return strings.TrimPrefix(stream, "KV_")
	case "kv_write":
		return strings.TrimPrefix(class, "kv.")
	case "js_deliver", "ack", "stream_msg_get", "pull_request", "consumer_create", "consumer_delete":
		// $JS.ACK.<stream>.<consumer>...; $JS.API.STREAM.MSG.GET.<stream>
		parts := strings.Split(subj, ".")
		switch {
		case strings.HasPrefix(subj, "$JS.ACK.") && len(parts) > 3:
			return parts[2] + "/" + parts[3]
		case len(parts) > 0:
			return parts[len(parts)-1]
		}
	}
	return class
}

// headerSize is the wire size of a NATS header block.
func headerSize(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// kvGet reads the value under key in bucket (the held phase reads a real
// paused turn's records with it).
func kvGet(ctx context.Context, js jetstream.JetStream, bucket, key string) ([]byte, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading %s/%s: %w", bucket, key, err)
	}
	return e.Value(), nil
}

var errNoSamples = errors.New("no samples")

// awaitInputDrained waits (up to waitTimeout) until parley's work queues
// (input, agent, runs, tools) are empty on two reads 100 ms apart: a
// flood's accepted messages have run.
func (s *system) awaitInputDrained(ctx context.Context) error {
	js := s.drv.JetStream()
	deadline := time.Now().Add(waitTimeout)
	empty := 0
	for empty < 2 {
		n := uint64(0)
		for _, name := range []string{events.StreamInput, events.StreamAgent, events.StreamRuns, events.StreamTools} {
			st, err := js.Stream(ctx, name)
			if err != nil {
				return err
			}
			info, err := st.Info(ctx)
			if err != nil {
				return err
			}
			n += info.State.Msgs
		}
		if n == 0 {
			empty++
		} else {
			empty = 0
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("parley's work queues still hold %d messages after %s", n, waitTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
