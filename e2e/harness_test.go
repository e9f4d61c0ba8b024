package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/starter"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/agent"
	"github.com/parley-dev/parley/workers/gate"
	"github.com/parley-dev/parley/workers/processor"
	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// options shape a test system.
type options struct {
	// gate is the gating config; nil means gate.DefaultConfig().
	gate *gate.Config
	// noGate runs no policy service at all.
	noGate bool
	// pauseTTL of paused turns. Default 1 minute.
	pauseTTL time.Duration
	// processors to start. Default 1.
	processors int
	// noSchedules starts the processors with processor.Options.NoSchedules
	// (pause records with a per-key TTL, as on a server before 2.12).
	noSchedules bool
	// rules for the scripted model; "" means the default rules.
	rules string
	// provider replaces the scripted model when set.
	provider model.Provider
	// noAgent starts no agent (see startAgent in faults_test.go).
	noAgent bool
	// sources give the tool-executor tools besides the built-in ones (MCP servers).
	sources []toolexec.Source
	// formRevision is the agent's FormRevision; "" means its default.
	formRevision schema.Revision
	// policies are further gates, by policy name, which the agent expects
	// next to the gate.
	policies map[string]*gate.Config
	// progressDelay is the agent's ProgressDelay; 0 means its default
	// (agent.DefaultProgressDelay), negative every phase's progress at once.
	progressDelay time.Duration
	// streamMaxBytes is the streams' byte bound (bus.Options.StreamMaxBytes:
	// PARLEY_CHAT's; the work queues get a quarter, at least 1 MiB); 0
	// means its default.
	streamMaxBytes int64
}

// system is a running parley on an embedded server.
type system struct {
	t      *testing.T
	srv    *bustest.Server
	ctx    context.Context
	opts   options
	client *client.Client
	bus    *bus.Client
	site   *builtin.Site
	model  *countingProvider
	rec    *recorder
	group  *starter.Group // every worker the harness starts
	mu     sync.Mutex
	procs  map[string]func() error
	log    *slog.Logger
	// workers are the workers start ran besides the processors.
	workers []*worker
}

// worker is one worker start ran: how to make it again, and how to stop
// the running one.
type worker struct {
	name, principal string
	make            func(starter.Common) starter.Worker
	stop            func() error
}

// restartWorkers stops every worker (gate, policies, tool-executor,
// agent, processors), then starts each again and waits until all have
// started: nothing lives in a worker's memory across the restart.
func (s *system) restartWorkers() {
	s.t.Helper()
	for _, w := range s.workers {
		if err := w.stop(); err != nil {
			s.t.Errorf("stopping %s: %v", w.name, err)
		}
	}
	s.mu.Lock()
	var procs []string
	for name := range s.procs {
		procs = append(procs, name)
	}
	s.mu.Unlock()
	for _, name := range procs {
		s.stopProcessor(name)
	}
	started := make(chan string, len(s.workers))
	for _, w := range s.workers {
		c := starter.Common{Logger: s.log.With("worker", w.name), NoStreams: true, Started: func(r string) { started <- r }}
		w.stop = s.group.Go(starter.Connected(w.name, w.principal, s.connect, w.make(c)))
	}
	ctx, cancel := context.WithTimeout(s.ctx, 20*time.Second)
	defer cancel()
	if err := starter.AwaitStarted(ctx, s.group, started, len(s.workers)); err != nil {
		s.t.Fatal(err)
	}
	for _, name := range procs {
		s.startProcessor(name)
	}
	if !s.opts.noGate {
		s.waitGate()
	}
}

type countingProvider struct {
	model.Provider
	calls atomic.Int64
}

func (c *countingProvider) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	c.calls.Add(1)
	return c.Provider.Complete(ctx, req)
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("PARLEY_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// start runs the gate (unless noGate), a tool-executor, an agent and
// opts.processors processors, each on its own connection, in one
// starter.Group (as parley dev does), and waits until each has started. A
// worker that dies during the test fails it.
func start(t *testing.T, opts options) *system {
	t.Helper()
	if opts.pauseTTL == 0 {
		opts.pauseTTL = time.Minute
	}
	if opts.processors == 0 {
		opts.processors = 1
	}
	srv := bustest.NewServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := &system{t: t, srv: srv, ctx: ctx, opts: opts, procs: map[string]func() error{}, log: testLogger(t)}
	s.group = starter.New(context.Background(), &starter.Options{Logger: s.log})
	t.Cleanup(func() {
		err := s.group.Stop()
		cancel()
		var died *starter.StoppedError
		if errors.As(err, &died) {
			t.Errorf("a worker died during the test: %v", err)
		} else if err != nil {
			t.Logf("stopping the workers: %v", err)
		}
	})
	nc := srv.Connect(t)
	b, err := bus.New(nc, &bus.Options{StreamMaxBytes: opts.streamMaxBytes})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	s.bus = b
	s.client = client.New(b, "/parley/test")
	if s.site, err = builtin.OpenSite(ctx, b.JetStream(), nil); err != nil {
		t.Fatal(err)
	}
	// The recorder sees every principal's refusals too (those of a
	// stranger's events are stored under its principal, not in the
	// thread): a watch as principal "*" (a wildcard token in the filter;
	// it publishes nothing).
	everyone := client.NewWithOptions(b, &client.Options{Principal: "*"})
	items, err := everyone.Watch(ctx, client.WatchOptions{FromStart: true, Refusals: true})
	if err != nil {
		t.Fatal(err)
	}
	s.rec = newRecorder(items)

	started := make(chan string, 8)
	n := 0
	run := func(name, principal string, w func(starter.Common) starter.Worker) {
		c := starter.Common{Logger: s.log.With("worker", name), NoStreams: true, Started: func(r string) { started <- r }}
		stop := s.group.Go(starter.Connected(name, principal, s.connect, w(c)))
		s.workers = append(s.workers, &worker{name: name, principal: principal, make: w, stop: stop})
		n++
	}
	if !opts.noGate {
		run("gate", starter.RoleGate, func(c starter.Common) starter.Worker { return starter.Gate(c, opts.gate, gate.Options{}) })
	}
	expected := []string{gate.PolicyName}
	for name, cfg := range opts.policies {
		run("policy-"+name, starter.RoleGate, func(c starter.Common) starter.Worker {
			return starter.Gate(c, cfg, gate.Options{Name: name})
		})
		expected = append(expected, name)
	}
	// The tool-executor serves the harness's site (its tools and its
	// entity lookup) beside opts.sources.
	run("toolexec", starter.RoleToolexec, func(c starter.Common) starter.Worker {
		return starter.Toolexec(c, starter.ToolexecConfig{Site: s.site, Options: toolexec.Options{Sources: opts.sources}})
	})
	provider := opts.provider
	switch {
	case provider != nil:
	case opts.rules != "":
		provider, err = model.NewScripted([]byte(opts.rules))
	default:
		provider, err = model.LoadScripted("")
	}
	if err != nil {
		t.Fatal(err)
	}
	s.model = &countingProvider{Provider: provider}
	if !opts.noAgent {
		run("agent", starter.RoleAgent, func(c starter.Common) starter.Worker {
			return starter.Agent(c, s.model, agent.Options{PreExecuteTimeout: time.Second, FormRevision: opts.formRevision, Policies: expected,
				ProgressDelay: opts.progressDelay})
		})
	}
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if err := starter.AwaitStarted(sctx, s.group, started, n); err != nil {
		t.Fatal(err)
	}
	for i := range opts.processors {
		s.startProcessor(string(rune('A' + i)))
	}
	if !opts.noGate {
		s.waitGate()
	}
	return s
}

// connect opens a worker's connection to the test server (which has no
// authorization: the principal is not used).
func (s *system) connect(_ context.Context, name, _ string) (*nats.Conn, error) {
	return nats.Connect(s.srv.ClientURL(), nats.Name(name))
}

// waitGate waits until the gate's micro service answers discovery.
func (s *system) waitGate() {
	s.t.Helper()
	if err := starter.WaitService(s.ctx, s.group, s.srv.Connect(s.t), gate.ServiceName, 5*time.Second); err != nil {
		s.t.Fatal(err)
	}
}

// startProcessor starts a processor instance named name in the group
// and waits until it has started.
func (s *system) startProcessor(name string) {
	s.t.Helper()
	s.startProcessorWith(name, processor.Options{PauseTTL: s.opts.pauseTTL, NoSchedules: s.opts.noSchedules})
}

// startProcessorWith is startProcessor with the processor's options o.
func (s *system) startProcessorWith(name string, o processor.Options) {
	s.t.Helper()
	started := make(chan string, 1)
	c := starter.Common{Logger: s.log.With("worker", "processor-"+name), NoStreams: true, Started: func(r string) { started <- r }}
	stop := s.group.Go(starter.Connected("processor-"+name, starter.RoleProcessor, s.connect,
		starter.Processor(c, o)))
	s.mu.Lock()
	s.procs[name] = stop
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, 20*time.Second)
	defer cancel()
	if err := starter.AwaitStarted(ctx, s.group, started, 1); err != nil {
		s.t.Fatalf("processor-%s: %v", name, err)
	}
}

// startAgentIn starts an agent calling provider (with the agent's default
// policies and a 1s pre-execute timeout) in the group and waits until it
// has started; stop stops it alone (the group stops it with the test).
func (s *system) startAgentIn(provider model.Provider) (stop func()) {
	s.t.Helper()
	started := make(chan string, 1)
	c := starter.Common{Logger: s.log.With("worker", "agent"), NoStreams: true, Started: func(r string) { started <- r }}
	stopOne := s.group.Go(starter.Connected("agent", starter.RoleAgent, s.connect,
		starter.Agent(c, provider, agent.Options{PreExecuteTimeout: time.Second})))
	ctx, cancel := context.WithTimeout(s.ctx, 20*time.Second)
	defer cancel()
	if err := starter.AwaitStarted(ctx, s.group, started, 1); err != nil {
		s.t.Fatalf("agent: %v", err)
	}
	return func() {
		if err := stopOne(); err != nil {
			s.t.Errorf("stopping the agent: %v", err)
		}
	}
}

// stopProcessor stops a processor instance and waits until it drained.
func (s *system) stopProcessor(name string) {
	s.t.Helper()
	s.mu.Lock()
	stop := s.procs[name]
	delete(s.procs, name)
	s.mu.Unlock()
	if stop != nil {
		if err := stop(); err != nil {
			s.t.Errorf("stopping processor-%s: %v", name, err)
		}
	}
}

func (s *system) send(thread, text string) *event.Event {
	s.t.Helper()
	e, err := s.client.Send(s.ctx, thread, "", text, "")
	if err != nil {
		s.t.Fatal(err)
	}
	return e
}

func (s *system) answer(thread, id string, action schema.ElicitAction, content map[string]any) *event.Event {
	s.t.Helper()
	e, err := s.client.Answer(s.ctx, thread, id, schema.ElicitResult{Action: action, Content: content}, "")
	if err != nil {
		s.t.Fatal(err)
	}
	return e
}

// question waits for the n-th (from 1) elicitation.requested on thread.
func (s *system) question(thread string, n int) (string, schema.ElicitRequestParams) {
	s.t.Helper()
	e := s.rec.await(s.t, 10*time.Second, thread, events.TypeElicitationRequested, n)
	p, err := events.Data[schema.ElicitRequestParams](e)
	if err != nil {
		s.t.Fatal(err)
	}
	id, _ := p.Meta[schema.MetaElicitationID].(string)
	if id == "" {
		s.t.Fatalf("elicitation.requested without %s: %s", schema.MetaElicitationID, e.Data())
	}
	return id, p
}

// completed waits for the n-th turn.completed on thread and returns its text.
func (s *system) completed(thread string, n int) string {
	s.t.Helper()
	e := s.rec.await(s.t, 10*time.Second, thread, events.TypeTurnCompleted, n)
	tc, err := events.Data[events.TurnCompleted](e)
	if err != nil {
		s.t.Fatal(err)
	}
	return tc.Message.Text
}

func (s *system) drafts() int {
	s.t.Helper()
	ents, err := s.site.Entities(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if e.Type == builtin.TypeArticle && e.Status == builtin.StatusDraft {
			n++
		}
	}
	return n
}

func (s *system) ledger() []builtin.LedgerEntry {
	s.t.Helper()
	l, err := s.site.Ledger(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return l
}

// recorder keeps every chat event in stream order.
type recorder struct {
	mu     sync.Mutex
	cond   *sync.Cond
	events []*event.Event
}

func newRecorder(items <-chan client.Item) *recorder {
	r := &recorder{}
	r.cond = sync.NewCond(&r.mu)
	go func() {
		for it := range items {
			if it.Event == nil {
				continue
			}
			r.mu.Lock()
			r.events = append(r.events, it.Event)
			r.cond.Broadcast()
			r.mu.Unlock()
		}
	}()
	return r
}

// matching returns the events of thread with type typ.
func (r *recorder) matching(thread string, typ events.Type) []*event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*event.Event
	for _, e := range r.events {
		if e.Subject() == thread && events.TypeOf(e) == typ {
			out = append(out, e)
		}
	}
	return out
}

// await waits for the n-th event of typ on thread.
func (r *recorder) await(t *testing.T, timeout time.Duration, thread string, typ events.Type, n int) *event.Event {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if m := r.matching(thread, typ); len(m) >= n {
			return m[n-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d-th %s on %s within %v; thread saw:\n%s", n, typ, thread, timeout, r.dump(thread))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *recorder) dump(thread string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events {
		if e.Subject() == thread {
			b.WriteString(e.Type() + " " + string(e.Data()) + "\n")
		}
	}
	return b.String()
}

// rejections returns the reasons of elicitation.rejected events on thread.
func (r *recorder) rejections(thread string) []events.ElicitationRejected {
	var out []events.ElicitationRejected
	for _, e := range r.matching(thread, events.TypeElicitationRejected) {
		d, _ := events.Data[events.ElicitationRejected](e)
		out = append(out, d)
	}
	return out
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
