package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// turnsPerThread is the length of a conversation: each driver goroutine
// moves to a new thread after this many turns, so thread history stays
// realistic (bounded) and most turns meet an existing thread.
const turnsPerThread = 10

// threads names the threads of one driver goroutine.
type threads struct {
	prefix string
	n      int
}

func newThreads(env *benchEnv, phase string, worker int) *threads {
	return &threads{prefix: fmt.Sprintf("%s-%s-w%d", env.runID, phase, worker)}
}

// next returns the thread of the next turn.
func (t *threads) next() string {
	id := fmt.Sprintf("%s-c%d", t.prefix, t.n/turnsPerThread)
	t.n++
	return id
}

// fresh returns a thread used once.
func (t *threads) fresh() string {
	t.n++
	return fmt.Sprintf("%s-f%d", t.prefix, t.n)
}

// minSamples is the least a latency measurement takes, whatever its budget.
const minSamples = 5

// latency runs op sequentially for d (at least minSamples times) and
// returns each duration.
func latency(ctx context.Context, d time.Duration, op func() (time.Duration, error)) ([]time.Duration, error) {
	var out []time.Duration
	end := time.Now().Add(d)
	for len(out) < minSamples || time.Now().Before(end) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dur, err := op()
		if err != nil {
			return nil, err
		}
		out = append(out, dur)
	}
	return out, nil
}

// throughput runs op on c goroutines back to back for d and returns
// completed operations per second (the in-flight ones finish and count)
// and what one operation cost the process on average.
func throughput(ctx context.Context, c int, d time.Duration, op func(worker int) error) (float64, PerOp, error) {
	var n atomic.Int64
	var first error
	var once sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	before := sampleCost()
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for w := range c {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := op(w); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	after := sampleCost()
	if first != nil {
		return 0, PerOp{}, first
	}
	return round1(float64(n.Load()) / elapsed.Seconds()), perOp(before, after, n.Load()), nil
}

// warm runs a few turns and confirm cycles so consumers, buckets and
// connections are hot before anything is measured.
func warm(ctx context.Context, t target, env *benchEnv, name string, opts *Options) error {
	n := 30
	if opts.Duration < 2*time.Second {
		n = 3
	}
	th := newThreads(env, name+"warm", 0)
	for range n {
		if _, err := readTurn(ctx, t, th.next()); err != nil {
			return err
		}
	}
	for range n / 3 {
		if _, err := confirmCycle(ctx, t, th.next()); err != nil {
			return err
		}
	}
	_, _, err := throughput(ctx, opts.Concurrency, min(opts.Duration/10, time.Second), func(w int) error {
		_, err := readTurn(ctx, t, newThreads(env, name+"warmc", w).fresh())
		return err
	})
	return err
}

// turnFigures measures read-turn latency at concurrency 1 and turns/s at
// opts.Concurrency, each for half of the phase's budget, and what one turn
// of the throughput half cost the process.
func turnFigures(ctx context.Context, t target, env *benchEnv, phase string, opts *Options) (p50, p99, rate float64, samples int, cost PerOp, err error) {
	th := newThreads(env, phase+"l", 0)
	ds, err := latency(ctx, opts.Duration/2, func() (time.Duration, error) { return readTurn(ctx, t, th.next()) })
	if err != nil {
		return
	}
	p50, p99 = p50p99(ds)
	ths := make([]*threads, opts.Concurrency)
	for w := range ths {
		ths[w] = newThreads(env, phase+"t", w)
	}
	rate, cost, err = throughput(ctx, opts.Concurrency, opts.Duration/2, func(w int) error {
		_, err := readTurn(ctx, t, ths[w].next())
		return err
	})
	return p50, p99, rate, len(ds), cost, err
}

// confirmFigures measures resume latency at concurrency 1 and full confirm
// cycles/s at opts.Concurrency, each for half of the phase's budget, and
// what one cycle of the throughput half cost the process.
func confirmFigures(ctx context.Context, t target, env *benchEnv, phase string, opts *Options) (p50, p99, rate float64, samples int, cost PerOp, err error) {
	th := newThreads(env, phase+"l", 0)
	ds, err := latency(ctx, opts.Duration/2, func() (time.Duration, error) { return confirmCycle(ctx, t, th.next()) })
	if err != nil {
		return
	}
	p50, p99 = p50p99(ds)
	ths := make([]*threads, opts.Concurrency)
	for w := range ths {
		ths[w] = newThreads(env, phase+"t", w)
	}
	rate, cost, err = throughput(ctx, opts.Concurrency, opts.Duration/2, func(w int) error {
		_, err := confirmCycle(ctx, t, ths[w].next())
		return err
	})
	return p50, p99, rate, len(ds), cost, err
}

// floorPhase measures the floor: turns and confirm cycles, each for the
// phase's budget (so the floor gets as many samples as parley).
func floorPhase(ctx context.Context, f *floor, opts *Options, out *FloorFigures) error {
	if err := warm(ctx, f, f.env, "floor", opts); err != nil {
		return err
	}
	var n1, n2 int
	var err error
	if out.TurnP50, out.TurnP99, out.TurnsPerS, n1, out.PerTurn, err = turnFigures(ctx, f, f.env, "floorturn", opts); err != nil {
		return err
	}
	if out.ResumeP50, out.ResumeP99, out.CyclesPerS, n2, out.PerCycle, err = confirmFigures(ctx, f, f.env, "floorconfirm", opts); err != nil {
		return err
	}
	out.Samples = n1 + n2
	return nil
}

// floorMinPhase measures the minimal floor as floorPhase does the floor.
func floorMinPhase(ctx context.Context, m *minFloor, opts *Options, out *FloorMinFigures) error {
	if err := warm(ctx, m, m.env, "floormin", opts); err != nil {
		return err
	}
	var n1, n2 int
	var err error
	if out.TurnP50, out.TurnP99, out.TurnsPerS, n1, out.PerTurn, err = turnFigures(ctx, m, m.env, "minturn", opts); err != nil {
		return err
	}
	if out.ConfirmResumeP50, out.ConfirmResumeP99, out.ConfirmCyclesPerS, n2, out.PerConfirmCycle, err = confirmFigures(ctx, m, m.env, "minconfirm", opts); err != nil {
		return err
	}
	out.Samples = n1 + n2
	return nil
}

func turnPhase(ctx context.Context, s *system, opts *Options, out *TurnFigures) error {
	if err := warm(ctx, s, s.env, "parley", opts); err != nil {
		return err
	}
	var err error
	out.Concurrency = opts.Concurrency
	out.P50, out.P99, out.TurnsPerS, out.Samples, out.PerTurn, err = turnFigures(ctx, s, s.env, "turn", opts)
	if err == nil {
		err = s.failed()
	}
	return err
}

func confirmPhase(ctx context.Context, s *system, opts *Options, out *ConfirmFigures) error {
	var err error
	out.ResumeP50, out.ResumeP99, out.CyclesPerS, out.Samples, out.PerCycle, err = confirmFigures(ctx, s, s.env, "confirm", opts)
	if err == nil {
		err = s.failed()
	}
	return err
}

// vetoPhase compares parley's pre-execute request-reply (a CloudEvent
// built and encoded as the agent does, answered by the gate through NATS
// micro, the decision decoded) with a raw core request-reply of the same
// sizes answered by a plain subscription, alternating blocks of 100.
func vetoPhase(ctx context.Context, s *system, opts *Options, out *VetoFigures) error {
	tool := benchTools()[0].Definition()
	call := func(i int) (time.Duration, int, int, error) {
		run := fmt.Sprintf("%s-veto-%d", s.env.runID, i)
		start := time.Now()
		req, err := events.NewWithID(events.DerivedID("pre_execute", run, "call_0_0", "0"), events.SourceAgent,
			events.TypePreExecuteRequested, run, events.PreExecuteRequest{Agent: "default", Thread: run, RunID: run,
				Call: toolCall(tool.Name), Tool: tool})
		if err != nil {
			return 0, 0, 0, err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		// As the agent asks: the gate answers on <reply>.gate.
		var (
			reply *event.Event
			rerr  error
		)
		_, err = s.drv.RequestMany(rctx, events.PreExecuteSubject("default", tool.Name), events.PreExecuteReplyScope, req, 1,
			func(r bus.Reply) bool {
				reply, rerr = r.Event, r.Err
				return false
			})
		if err == nil {
			err = rerr
		}
		if err == nil && reply == nil {
			err = fmt.Errorf("no pre-execute reply within 2s: %w", rctx.Err())
		}
		if err != nil {
			return 0, 0, 0, err
		}
		d, err := events.Data[events.Decision](reply)
		if err != nil {
			return 0, 0, 0, err
		}
		dur := time.Since(start)
		if d.Decision != events.DecisionAllow {
			return 0, 0, 0, fmt.Errorf("the gate answered %q for %s, want allow", d.Decision, tool.Name)
		}
		h, body, _ := events.Encode(req)
		rh, rbody, _ := events.Encode(reply)
		return dur, len(body) + headerSize(h), len(rbody) + headerSize(rh), nil
	}
	// One call tells the sizes the raw request-reply uses.
	_, reqSize, replySize, err := call(-1)
	if err != nil {
		return err
	}
	out.RequestBytes, out.ReplyBytes = reqSize, replySize

	rnc, err := s.env.connect("raw-responder")
	if err != nil {
		return err
	}
	defer rnc.Close()
	replyBody := make([]byte, replySize)
	subject := "benchraw.pre_execute." + s.env.runID
	sub, err := rnc.QueueSubscribe(subject, "q", func(m *nats.Msg) { _ = m.Respond(replyBody) })
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := rnc.Flush(); err != nil {
		return err
	}
	nc := s.drv.Conn()
	reqBody := make([]byte, reqSize)
	raw := func() (time.Duration, error) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := nc.RequestWithContext(rctx, subject, reqBody); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}

	var parleyDs, rawDs []time.Duration
	const block = 100
	end := time.Now().Add(opts.Duration)
	for i := 0; len(parleyDs) < minSamples || time.Now().Before(end); i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		for j := range block {
			d, _, _, err := call(i*block + j)
			if err != nil {
				return fmt.Errorf("parley pre-execute: %w", err)
			}
			parleyDs = append(parleyDs, d)
		}
		for range block {
			d, err := raw()
			if err != nil {
				return fmt.Errorf("raw request-reply: %w", err)
			}
			rawDs = append(rawDs, d)
		}
	}
	out.P50, out.P99 = p50p99(parleyDs)
	out.RawP50, out.RawP99 = p50p99(rawDs)
	out.Samples = len(parleyDs)
	return nil
}

// toolCall is the call the scripted model makes of tool.
func toolCall(name string) schema.ToolCall {
	return schema.ToolCall{ID: "call_0_0", Name: name, Arguments: []byte(`{"what":"status"}`)}
}

// floodMessages is how many messages the noisy neighbour publishes at
// once to one thread of its own, as fast as the client can.
const floodMessages = 3000

// neighbourPhase measures another user's turn while one integrator floods
// a thread of its own: the victim's read turn on a fresh thread, first
// unloaded, then started right after each flood's publishes were sent
// (floodMessages turn.requested, asynchronously, as one burst). PARLEY_INPUT
// bounds one thread's unhandled input (bus.InputMaxMsgsPerSubject), so
// most of the flood is refused at publish, and what is taken waits in its
// own thread's queue. Between rounds the flood drains, so rounds are
// independent.
func neighbourPhase(ctx context.Context, s *system, opts *Options, out *NeighbourFigures) error {
	th := newThreads(s.env, "neighbour", 0)
	rounds := max(minSamples, int(opts.Duration/(2*time.Second)))
	var unloaded, loaded []time.Duration
	for range rounds {
		d, err := readTurn(ctx, s, th.fresh())
		if err != nil {
			return err
		}
		unloaded = append(unloaded, d)
	}
	// The noisy neighbour has its own connection, as another integrator
	// would: the victim's publish does not queue behind the flood's on
	// one socket.
	nc, err := s.env.connect("noisy")
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(floodMessages))
	if err != nil {
		return err
	}
	var refused, published int
	var floodTime time.Duration
	for r := range rounds {
		flood := th.fresh()
		subject := events.InputSubject(s.client.Principal(), flood, events.ChatTurnRequested)
		start := time.Now()
		var futures []jetstream.PubAckFuture
		for i := range floodMessages {
			e, err := s.client.TurnRequest(flood, "", textRead, "")
			if err != nil {
				return err
			}
			h, body, err := events.Encode(e)
			if err != nil {
				return err
			}
			f, err := js.PublishMsgAsync(&nats.Msg{Subject: subject, Header: nats.Header(h), Data: body},
				jetstream.WithMsgID(fmt.Sprintf("%s-%d-%d", flood, r, i)))
			if err != nil {
				return fmt.Errorf("publishing the flood: %w", err)
			}
			futures = append(futures, f)
		}
		floodTime += time.Since(start)
		d, err := readTurn(ctx, s, th.fresh())
		if err != nil {
			return fmt.Errorf("the victim's turn during a flood: %w", err)
		}
		loaded = append(loaded, d)
		for _, f := range futures {
			select {
			case <-f.Ok():
				published++
			case <-f.Err():
				refused++
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := s.awaitInputDrained(ctx); err != nil {
			return err
		}
	}
	out.FloodMessages, out.Rounds = floodMessages, rounds
	out.FloodPublishMS = ms(floodTime / time.Duration(rounds))
	out.FloodStored, out.FloodRefused = published/rounds, refused/rounds
	out.UnloadedP50, _ = p50p99(unloaded)
	out.LoadedP50, _ = p50p99(loaded)
	out.LoadedMax = ms(slices.Max(loaded))
	out.LoadedOverUnloaded = round3(ratio(out.LoadedP50, out.UnloadedP50))
	return s.failed()
}
