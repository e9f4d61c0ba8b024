package e2e

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/agent"
	"github.com/parley-dev/parley/workers/bus"
	"github.com/parley-dev/parley/workers/bus/bustest"
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
	mu     sync.Mutex
	procs  map[string]func()
	log    *slog.Logger
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
// opts.processors processors, each on its own connection.
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
	s := &system{t: t, srv: srv, ctx: ctx, opts: opts, procs: map[string]func(){}, log: testLogger(t)}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		s.mu.Lock()
		for _, stop := range s.procs {
			stop()
		}
		s.mu.Unlock()
		cancel()
		wg.Wait()
	})
	nc := srv.Connect(t)
	b, err := bus.New(nc, nil)
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
	items, err := s.client.Watch(ctx, client.WatchOptions{FromStart: true})
	if err != nil {
		t.Fatal(err)
	}
	s.rec = newRecorder(items)

	worker := func(name string) *bus.Client {
		c, err := nats.Connect(srv.ClientURL(), nats.Name(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		wb, err := bus.New(c, &bus.Options{Logger: s.log.With("worker", name)})
		if err != nil {
			t.Fatal(err)
		}
		return wb
	}
	if !opts.noGate {
		g := gate.New(worker("gate"), opts.gate, s.log)
		wg.Go(func() { _ = g.Run(ctx) })
	}
	expected := []string{gate.PolicyName}
	for name, cfg := range opts.policies {
		g, err := gate.NewWithOptions(worker("policy-"+name), cfg, &gate.Options{Logger: s.log, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = g.Run(ctx) })
		expected = append(expected, name)
	}
	x, err := toolexec.New(ctx, worker("toolexec"), s.site.Tools(), &toolexec.Options{Logger: s.log, Sources: opts.sources})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = x.Run(ctx) })
	lookup := worker("lookup")
	wg.Go(func() { _ = s.site.ServeLookup(ctx, lookup) })
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
		a, err := agent.New(ctx, worker("agent"), s.model, &agent.Options{Logger: s.log, PreExecuteTimeout: time.Second, FormRevision: opts.formRevision,
			Policies: expected})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = a.Run(ctx) })
	}
	for i := range opts.processors {
		s.startProcessor(string(rune('A' + i)))
	}
	if !opts.noGate {
		s.waitGate()
	}
	return s
}

// waitGate waits until the gate's micro service answers discovery.
func (s *system) waitGate() {
	nc := s.srv.Connect(s.t)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := nc.Request("$SRV.PING.parley-gate", nil, 200*time.Millisecond); err == nil {
			return
		}
	}
	s.t.Fatal("gate did not come up")
}

// startProcessor starts a processor instance named name.
func (s *system) startProcessor(name string) {
	s.t.Helper()
	nc, err := nats.Connect(s.srv.ClientURL(), nats.Name("processor-"+name))
	if err != nil {
		s.t.Fatal(err)
	}
	b, err := bus.New(nc, &bus.Options{Logger: s.log.With("worker", "processor-"+name)})
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	p, err := processor.New(ctx, b, &processor.Options{Logger: s.log.With("worker", "processor-"+name), PauseTTL: s.opts.pauseTTL})
	if err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); defer nc.Close(); _ = p.Run(ctx) }()
	s.mu.Lock()
	s.procs[name] = func() { cancel(); <-done }
	s.mu.Unlock()
}

// stopProcessor stops a processor instance and waits until it drained.
func (s *system) stopProcessor(name string) {
	s.mu.Lock()
	stop := s.procs[name]
	delete(s.procs, name)
	s.mu.Unlock()
	if stop != nil {
		stop()
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
func (r *recorder) matching(thread, typ string) []*event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*event.Event
	for _, e := range r.events {
		if e.Subject() == thread && e.Type() == typ {
			out = append(out, e)
		}
	}
	return out
}

// await waits for the n-th event of typ on thread.
func (r *recorder) await(t *testing.T, timeout time.Duration, thread, typ string, n int) *event.Event {
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
