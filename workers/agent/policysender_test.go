package agent

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/metrics"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/internal/natsserver"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// secured is a nats-server started from the authorization `parley auth
// init` renders for parley's roles and the policy principals policies,
// with the streams and the tool registry in place (written as admin).
type secured struct {
	url string
	dir string
}

func newSecured(t *testing.T, policies ...string) *secured {
	t.Helper()
	dir := t.TempDir()
	ps, err := natsauth.Set(nil, policies)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsauth.Init(filepath.Join(dir, "auth"), ps); err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "js"),
		AuthConfig: filepath.Join(dir, "auth", natsauth.AuthFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	s := &secured{url: srv.ClientURL(), dir: dir}
	b := s.bus(t, natsauth.Admin, nil)
	if err := b.EnsureStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	reg, err := kvstate.OpenTools(t.Context(), b.JetStream(), b.Storage(), b.Replicas())
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(t.Context(), deleteTool()); err != nil {
		t.Fatal(err)
	}
	return s
}

// conn connects as principal; violations (may be nil) receives every
// permissions violation the server reports to it.
func (s *secured) conn(t *testing.T, principal string, violations chan<- string) *nats.Conn {
	t.Helper()
	opts, err := natsauth.Credentials{NKeyFile: filepath.Join(s.dir, "auth", natsauth.SeedFile(principal)), Principal: principal}.Options()
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) && violations != nil {
			select {
			case violations <- err.Error():
			default:
			}
		}
	}))
	nc, err := nats.Connect(s.url, opts...)
	if err != nil {
		t.Fatalf("%s: %v", principal, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (s *secured) bus(t *testing.T, principal string, violations chan<- string) *bus.Client {
	t.Helper()
	b, err := bus.New(s.conn(t, principal, violations), nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// policy serves pre-execute requests as policy name on principal's
// connection (a policy answers on <reply>.<name>, as the gate does),
// deciding decision() after delay.
func (s *secured) policy(t *testing.T, principal, name, queue string, decision func() string, delay time.Duration) {
	t.Helper()
	b := s.bus(t, principal, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		_ = b.Serve(ctx, bus.Endpoint{Service: "test-" + queue, Version: "0.0.1", Name: "pre_execute",
			Subject: events.SubjectPreExecAll, QueueGroup: queue, ReplyAs: name},
			func(_ context.Context, req *event.Event) (*event.Event, error) {
				time.Sleep(delay)
				return events.KindPreExecuteDecided.New("/test/"+queue, events.DerivedID("decided", req.ID()), req.Subject(),
					events.PolicyDecision{Policy: name, Decision: decision(), Reason: name + " decided"})
			})
	}()
	nc := s.conn(t, natsauth.Admin, nil)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := nc.Request("$SRV.PING.test-"+queue, nil, 100*time.Millisecond); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy %s (%s) did not come up within 5s", name, queue)
		}
	}
}

// agentOn is an agent connected as the agent principal, expecting
// policies.
func (s *secured) agentOn(t *testing.T, policies ...string) *Agent {
	t.Helper()
	provider, err := model.NewScripted([]byte(oneCall("delete_entities", `{"ids":["a1"]}`)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(t.Context(), s.bus(t, natsauth.Agent, nil), provider,
		&Options{PreExecuteTimeout: 2 * time.Second, Policies: policies})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// ask asks the policies about a delete as the agent does before running
// it, and returns the combined decision.
func ask(t *testing.T, a *Agent, run string) *events.Decision {
	t.Helper()
	tool := deleteTool()
	c := &CallState{Call: schema.ToolCall{ID: "call_0_0", Name: tool.Name, Arguments: json.RawMessage(`{"ids":["a1"]}`)}}
	d, err := a.preExecute(t.Context(), &Run{RunID: run, Thread: "t-" + run, Agent: "default"}, c, &tool)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func decisionsOf(d *events.Decision) map[string]string {
	out := map[string]string{}
	for _, p := range d.Policies {
		out[p.Policy] += p.Decision
	}
	return out
}

// A policy principal the agent does not even expect (audit) answers
// every pre-execute request as gate and as compliance, allowing: on its
// own reply subjects of theirs (the server refuses the publish) and on
// the bare reply subject (allowed by allow_responses, but nobody vouches
// for the name there: ignored). It answers at once, before the real
// policies. The decision is the real policies': compliance's veto of the
// delete, or the gate's confirm when compliance allows.
func TestPolicyReplyOnlyFromItsPrincipal(t *testing.T) {
	s := newSecured(t, "compliance", "audit")
	violations := make(chan string, 64)
	for _, as := range []string{"gate", "compliance"} {
		// One connection per name: allow_responses lets each answer a
		// request once on the bare reply subject.
		nc := s.conn(t, "audit", violations)
		if _, err := nc.Subscribe(events.SubjectPreExecAll, func(m *nats.Msg) {
			allow, _ := events.KindPreExecuteDecided.New("/audit", "forged-"+as, "t", events.PolicyDecision{Policy: as, Decision: events.DecisionAllow})
			h, body, _ := events.Encode(allow)
			_ = nc.PublishMsg(&nats.Msg{Subject: events.PolicyReplySubject(m.Reply, as), Header: nats.Header(h), Data: body})
			_ = m.RespondMsg(&nats.Msg{Header: nats.Header(h), Data: body})
		}); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// The real policies answer after the forgeries.
	s.policy(t, "gate", "gate", "gate", fixed(events.DecisionConfirm), 50*time.Millisecond)
	var complianceSays atomic.Value
	complianceSays.Store(events.DecisionVeto)
	s.policy(t, "compliance", "compliance", "compliance", func() string { return complianceSays.Load().(string) }, 50*time.Millisecond)
	a := s.agentOn(t, "gate", "compliance")

	d := ask(t, a, "r1")
	if d.Decision != events.DecisionVeto || d.Policy != "compliance" {
		t.Errorf("decision %+v, want compliance's veto", d)
	}
	if got := decisionsOf(d); len(got) != 2 || got["gate"] != events.DecisionConfirm || got["compliance"] != events.DecisionVeto {
		t.Errorf("policies %v, want only the real gate's confirm and compliance's veto", got)
	}
	complianceSays.Store(events.DecisionAllow)
	d = ask(t, a, "r2")
	if d.Decision != events.DecisionConfirm || d.Policy != "gate" {
		t.Errorf("decision %+v, want the gate's confirm", d)
	}
	if got := decisionsOf(d); len(got) != 2 || got["gate"] != events.DecisionConfirm || got["compliance"] != events.DecisionAllow {
		t.Errorf("policies %v, want only the real gate's confirm and compliance's allow", got)
	}
	// The server refused audit's answers on gate's and compliance's reply
	// subjects.
	refused := map[string]bool{}
	for deadline := time.After(5 * time.Second); !refused["gate"] || !refused["compliance"]; {
		select {
		case v := <-violations:
			for _, as := range []string{"gate", "compliance"} {
				if strings.Contains(v, "Publish") && strings.Contains(v, "."+events.PreExecuteReplyScope+".") && strings.HasSuffix(strings.TrimRight(v, `"`), "."+as) {
					refused[as] = true
				}
			}
		case <-deadline:
			t.Fatalf("audit's answers as gate and compliance were not refused by the server: %v", refused)
		}
	}
}

func fixed(decision string) func() string { return func() string { return decision } }

// A second subscriber holding the gate's own credentials answers every
// request at once with allow, in a queue group of its own; the real gate
// confirms a little later. The agent hears both (it keeps listening for
// PreExecuteSettle after every expected policy answered), the stricter
// confirm counts, and the duplicate is counted in
// parley.policy.duplicate_replies.
func TestDuplicatePolicyReplyStrictestWins(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if err := metrics.Use(mp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = metrics.Use(noop.NewMeterProvider()); _ = mp.Shutdown(context.Background()) })

	s := newSecured(t)
	s.policy(t, "gate", "gate", "rogue", fixed(events.DecisionAllow), 0)
	s.policy(t, "gate", "gate", "gate", fixed(events.DecisionConfirm), 30*time.Millisecond)
	a := s.agentOn(t, "gate")
	for _, run := range []string{"r1", "r2"} {
		d := ask(t, a, run)
		if d.Decision != events.DecisionConfirm || d.Policy != "gate" {
			t.Fatalf("%s: decision %+v, want the real gate's confirm", run, d)
		}
		if len(d.Policies) != 1 {
			t.Errorf("%s: policies %+v, want the gate's one (stricter) answer", run, d.Policies)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	var dups int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != metrics.PolicyDuplicateReplies {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, _ := dp.Attributes.Value("parley.policy.name"); v.AsString() == "gate" {
					dups += dp.Value
				}
			}
		}
	}
	if dups != 2 {
		t.Errorf("%s for gate = %d, want 2 (one per request)", metrics.PolicyDuplicateReplies, dups)
	}
}

// A read-only call takes the expected policies' first answers: it does
// not wait PreExecuteSettle for a second one (the settle window is for
// calls that change something). With a settle window as long as the
// timeout allows, the read-only call still returns as soon as the gate
// answered, and the same delete waits the window out.
func TestReadOnlyCallDoesNotSettle(t *testing.T) {
	s := newSecured(t)
	s.policy(t, "gate", "gate", "gate", fixed(events.DecisionAllow), 0)
	provider, err := model.NewScripted([]byte(oneCall("delete_entities", `{"ids":["a1"]}`)))
	if err != nil {
		t.Fatal(err)
	}
	const settle = 3 * time.Second
	a, err := New(t.Context(), s.bus(t, natsauth.Agent, nil), provider,
		&Options{PreExecuteTimeout: 10 * time.Second, PreExecuteSettle: settle, Policies: []string{"gate"}})
	if err != nil {
		t.Fatal(err)
	}
	call := func(tool schema.Tool) time.Duration {
		c := &CallState{Call: schema.ToolCall{ID: "call_0_0", Name: tool.Name, Arguments: json.RawMessage(`{"ids":["a1"]}`)}}
		start := time.Now()
		d, err := a.preExecute(t.Context(), &Run{RunID: "r-" + tool.Name, Thread: "t1", Agent: "default"}, c, &tool)
		if err != nil || d.Decision != events.DecisionAllow {
			t.Fatalf("%s: %+v, %v; want the gate's allow", tool.Name, d, err)
		}
		return time.Since(start)
	}
	read := deleteTool()
	read.Name = "list_entities"
	read.Annotations = &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true)}
	if took := call(read); took >= settle {
		t.Errorf("read-only call took %v: it waited the settle window (%v)", took, settle)
	}
	if took := call(deleteTool()); took < settle {
		t.Errorf("delete took %v: it did not wait the settle window (%v) for a second answer", took, settle)
	}
}
