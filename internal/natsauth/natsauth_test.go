package natsauth_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/gateway"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/internal/natsserver"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/workers/agent"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// secured is a nats-server started from the configuration natsauth.Init
// renders (parsed by server.ProcessConfigFile, as a standalone server
// including auth.conf would), with every principal's seed.
type secured struct {
	srv *server.Server
	dir string
}

func newSecured(t *testing.T, extraIntegrators ...string) *secured {
	t.Helper()
	return newSecuredWith(t, extraIntegrators, nil)
}

// newSecuredWith is newSecured with further integrators and policies.
func newSecuredWith(t *testing.T, integrators, policies []string) *secured {
	t.Helper()
	dir := t.TempDir()
	ps, err := natsauth.Set(integrators, policies)
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
	return &secured{srv: srv, dir: dir}
}

func (s *secured) creds(principal string) natsauth.Credentials {
	return natsauth.Credentials{NKeyFile: filepath.Join(s.dir, "auth", natsauth.SeedFile(principal)), Principal: principal}
}

// conn is a connection of one principal that records the permissions
// violations the server reports.
type conn struct {
	*nats.Conn
	mu         sync.Mutex
	violations []string
	signal     chan struct{}
}

func (s *secured) connect(t *testing.T, principal string) *conn {
	t.Helper()
	opts, err := s.creds(principal).Options()
	if err != nil {
		t.Fatal(err)
	}
	c := &conn{signal: make(chan struct{}, 100)}
	opts = append(opts, nats.Name("test-"+principal), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			c.mu.Lock()
			c.violations = append(c.violations, err.Error())
			c.mu.Unlock()
			c.signal <- struct{}{}
		}
	}))
	if c.Conn, err = nats.Connect(s.srv.ClientURL(), opts...); err != nil {
		t.Fatalf("%s: %v", principal, err)
	}
	t.Cleanup(c.Close)
	return c
}

// refused reports whether the server refused op on subject (a
// permissions violation naming it) within 2s.
func (c *conn) refused(op, subject string) bool {
	want := "Permissions Violation for " + op + " to \"" + subject + "\""
	deadline := time.After(2 * time.Second)
	for {
		c.mu.Lock()
		for _, v := range c.violations {
			if strings.Contains(v, want) {
				c.mu.Unlock()
				return true
			}
		}
		c.mu.Unlock()
		select {
		case <-c.signal:
		case <-deadline:
			return false
		}
	}
}

func (c *conn) noViolations(t *testing.T) {
	t.Helper()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.violations) > 0 {
		t.Errorf("permissions violations: %q", c.violations)
	}
}

// An anonymous client, and a client with a seed the server does not
// know, are refused.
func TestAnonymousRefused(t *testing.T) {
	s := newSecured(t)
	if nc, err := nats.Connect(s.srv.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("anonymous connection accepted")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("anonymous connection: %v, want an authorization violation", err)
	}
	other := t.TempDir()
	if _, err := natsauth.Init(other, natsauth.Roles()); err != nil {
		t.Fatal(err)
	}
	c := natsauth.Credentials{NKeyFile: filepath.Join(other, "admin.nk")}
	if _, err := natsauth.Connect(s.srv.ClientURL(), "stranger", c, nil); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("unknown nkey: %v, want an authorization violation", err)
	}
}

// Every forbidden publish and subscription of docs/SECURITY.md's attacks is
// refused by the server with a permissions violation.
func TestForbidden(t *testing.T) {
	s := newSecured(t, "acme")
	pubs := []struct{ principal, subject string }{
		// Integrators publish only their own input.
		{"integrator", "parley.tool.call.list_entities"},
		{"integrator", "parley.tool.call.delete_entities"},
		{"integrator", "parley.agent.run.completed"},
		{"integrator", "parley.agent.run.requested"},
		{"integrator", "parley.tool.result.r1"},
		{"integrator", "parley.chat.t1.turn.completed"},
		{"integrator", "parley.chat.t1.turn.requested"},
		{"integrator", "parley.chat.t1.elicitation.responded"},
		{"integrator", "$KV.parley_tools.delete_entities"},
		{"integrator", "$KV.parley_paused.t1"},
		// A forged pause expiry (or scheduled record) would end another
		// party's pause: only the processor writes the bucket.
		{"integrator", "$KV.parley_paused.t1.pause.expired"},
		{"integrator", "$KV.parley_paused.t1.7.pause"},
		{"gateway", "$KV.parley_paused.t1.pause.expired"},
		{"agent", "$KV.parley_paused.t1.pause.expired"},
		{"integrator", "$KV.parley_threads.t1"},
		{"integrator", "$KV.parley_content.entity.1"},
		{"integrator", "$JS.API.DIRECT.GET.KV_parley_paused"},
		{"integrator", "$JS.API.CONSUMER.CREATE.PARLEY_INPUT.processor"},
		{"integrator", "$JS.API.CONSUMER.MSG.NEXT.PARLEY_INPUT.processor"},
		{"integrator", "$KV.parley_decisions.r1.c1"},
		{"integrator", "parley.in.acme.t1.turn.requested"},
		{"integrator", "parley.in.gateway.t1.elicitation.responded"},
		{"acme", "parley.in.integrator.t1.turn.requested"},
		{"gateway", "parley.in.integrator.t1.turn.requested"},
		{"integrator", "parley.dlq.PARLEY_TOOLS.toolexec"},
		{"integrator", "parley.tool.pre_execute.default.delete_entities"},
		// ... nor manage streams or parley's consumers.
		{"integrator", "$JS.API.STREAM.DELETE.PARLEY_CHAT"},
		{"integrator", "$JS.API.STREAM.PURGE.PARLEY_CHAT"},
		{"integrator", "$JS.API.STREAM.UPDATE.PARLEY_CHAT"},
		{"integrator", "$JS.API.STREAM.CREATE.PARLEY_EVIL"},
		// The gateway faces the internet: it cannot change the streams.
		{"gateway", "$JS.API.STREAM.UPDATE.PARLEY_CHAT"},
		{"gateway", "$JS.API.STREAM.CREATE.PARLEY_INPUT"},
		{"gateway", "$JS.API.STREAM.UPDATE.PARLEY_AGENT"},
		{"gateway", "$JS.API.STREAM.DELETE.PARLEY_CHAT"},
		{"integrator", "$JS.API.CONSUMER.CREATE.PARLEY_CHAT.processor"},
		{"integrator", "$JS.API.CONSUMER.CREATE.PARLEY_CHAT.processor.parley.chat.>"},
		{"integrator", "$JS.API.CONSUMER.DELETE.PARLEY_CHAT.processor"},
		{"integrator", "$JS.API.CONSUMER.CREATE.KV_parley_paused.processor-expiry"},
		{"integrator", "$JS.API.CONSUMER.CREATE.KV_parley_paused.processor-timers"},
		{"integrator", "$JS.API.CONSUMER.MSG.NEXT.PARLEY_TOOLS.toolexec"},
		{"integrator", "$JS.API.STREAM.MSG.DELETE.PARLEY_CHAT"},
		// Only toolexec writes the registry; only the agent the
		// decisions; each worker only its own subjects.
		{"agent", "$KV.parley_tools.delete_entities"},
		{"processor", "$KV.parley_tools.delete_entities"},
		{"gate", "$KV.parley_tools.delete_entities"},
		{"gateway", "$KV.parley_tools.delete_entities"},
		{"toolexec", "$KV.parley_decisions.r1.c1"},
		{"processor", "$KV.parley_decisions.r1.c1"},
		{"processor", "parley.tool.call.delete_entities"},
		{"toolexec", "parley.tool.call.delete_entities"},
		{"gate", "parley.tool.call.delete_entities"},
		{"gateway", "parley.tool.call.delete_entities"},
		{"toolexec", "parley.agent.run.completed"},
		{"gate", "parley.agent.run.completed"},
		{"gateway", "parley.chat.t1.turn.completed"},
		{"toolexec", "parley.chat.t1.turn.completed"},
		{"agent", "parley.chat.t1.turn.completed"},
		{"agent", "parley.tool.result.r1"},
		{"gate", "parley.tool.pre_execute.default.delete_entities"},
		{"toolexec", "$JS.API.STREAM.DELETE.PARLEY_TOOLS"},
		{"gateway", "$JS.API.STREAM.DELETE.PARLEY_CHAT"},
		{"gateway", "$JS.API.STREAM.PURGE.PARLEY_INPUT"},
		{"gateway", "$KV.parley_threads.t1"},
		// Nor read the processor's thread records: a thread's state
		// comes from its events (client/threadstate).
		{"integrator", "$JS.API.DIRECT.GET.KV_parley_threads.$KV.parley_threads.t1"},
		{"integrator", "$JS.API.STREAM.MSG.GET.KV_parley_threads"},
		{"integrator", "$JS.API.STREAM.INFO.KV_parley_threads"},
		{"integrator", "$JS.API.CONSUMER.CREATE.KV_parley_threads"},
		{"acme", "$JS.API.DIRECT.GET.KV_parley_threads.$KV.parley_threads.t1"},
		{"gateway", "$JS.API.DIRECT.GET.KV_parley_threads.$KV.parley_threads.t1"},
		{"gateway", "$JS.API.STREAM.INFO.KV_parley_threads"},
		// Standing approvals: only the processor writes them; only the
		// agent asks whether a call runs under one; an integrator asks
		// about approvals only under its own principal.
		{"integrator", "$KV.parley_approvals.t1.default.delete_entities"},
		{"gateway", "$KV.parley_approvals.t1.default.delete_entities"},
		{"agent", "$KV.parley_approvals.t1.default.delete_entities"},
		{"integrator", "parley.approval.use.default.t1.delete_entities"},
		{"gateway", "parley.approval.use.default.t1.delete_entities"},
		{"gate", "parley.approval.use.default.t1.delete_entities"},
		{"toolexec", "parley.approval.use.default.t1.delete_entities"},
		{"integrator", "parley.approvals.gateway.t1"},
		{"acme", "parley.approvals.integrator.t1"},
		// Nobody publishes on an inbox (policies answer only the request
		// they received, through allow_responses).
		{"gate", "_INBOX_agent.abc"},
		{"gate", "_INBOX.abc"},
		{"integrator", "_INBOX_agent.abc"},
		{"toolexec", "_INBOX_agent.abc"},
		{"processor", "_INBOX_integrator.abc"},
		{"acme", "_INBOX_integrator.abc"},
	}
	conns := map[string]*conn{}
	get := func(p string) *conn {
		if conns[p] == nil {
			conns[p] = s.connect(t, p)
		}
		return conns[p]
	}
	for _, p := range pubs {
		c := get(p.principal)
		if err := c.Publish(p.subject, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pubs {
		if !get(p.principal).refused("Publish", p.subject) {
			t.Errorf("%s may publish on %s", p.principal, p.subject)
		}
	}
	subs := []struct{ principal, subject string }{
		// Only policy principals receive pre-execute requests.
		{"integrator", "parley.tool.pre_execute.>"},
		{"processor", "parley.tool.pre_execute.>"},
		{"agent", "parley.tool.pre_execute.>"},
		{"toolexec", "parley.tool.pre_execute.>"},
		{"gateway", "parley.tool.pre_execute.>"},
		{"acme", "parley.tool.pre_execute.default.delete_entities"},
		{"integrator", ">"},
		{"integrator", "parley.>"},
		// Nobody reads another's inbox.
		{"integrator", "_INBOX_agent.>"},
		{"integrator", "_INBOX.>"},
		{"gate", "_INBOX_agent.>"},
		{"acme", "_INBOX_integrator.>"},
		{"toolexec", "_INBOX_agent.>"},
		// Nobody but the processor hears approvals requests.
		{"integrator", "parley.approvals.>"},
		{"agent", "parley.approval.use.>"},
		{"gateway", "parley.approval.use.>"},
		// Integrators do not read work queues or the input of others.
		{"integrator", "parley.tool.call.>"},
		{"integrator", "parley.in.>"},
		{"integrator", "$KV.parley_tools.>"},
	}
	for _, sb := range subs {
		if _, err := get(sb.principal).SubscribeSync(sb.subject); err != nil {
			t.Fatal(err)
		}
	}
	for _, sb := range subs {
		if !get(sb.principal).refused("Subscription", sb.subject) {
			t.Errorf("%s may subscribe to %s", sb.principal, sb.subject)
		}
	}
}

// What the principals must be able to do, done with the permissions
// alone: integrator input, PARLEY_CHAT reads, a policy answering an
// agent's request (and only that request), KV reads and owned writes.
// The whole system under these permissions runs in cmd/parley's demo test
// and the chaos test.
func TestAllowed(t *testing.T) {
	s := newSecured(t, "acme")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := s.connect(t, natsauth.Admin)
	ajs, _ := jetstream.New(admin.Conn)
	for _, sc := range []jetstream.StreamConfig{
		{Name: natsauth.StreamInput, Subjects: []string{"parley.in.>"}},
		{Name: natsauth.StreamChat, Subjects: []string{"parley.chat.>"}},
		{Name: natsauth.StreamDeadLetter, Subjects: []string{"parley.dlq.>"}},
	} {
		if _, err := ajs.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}

	// An integrator publishes its input into PARLEY_INPUT (PubAck on its
	// own inbox) ...
	for _, p := range []string{natsauth.Integrator, "acme", natsauth.Gateway} {
		c := s.connect(t, p)
		js, _ := jetstream.New(c.Conn)
		ack, err := js.Publish(ctx, "parley.in."+p+".t1.turn.requested", []byte("{}"))
		if err != nil {
			t.Fatalf("%s publishing its input: %v", p, err)
		}
		// A duplicate PubAck is checked against the stored message
		// (bus.checkDuplicate: one STREAM.MSG.GET request).
		m, err := c.Request("$JS.API.STREAM.MSG.GET."+natsauth.StreamInput, fmt.Appendf(nil, `{"seq":%d}`, ack.Sequence), 5*time.Second)
		if err != nil || !strings.Contains(string(m.Data), `"message"`) {
			t.Fatalf("%s reading back its input: %v", p, err)
		}
		c.noViolations(t)
	}

	// ... and reads PARLEY_CHAT through an ordered consumer, and the
	// built-in site's bucket (entity titles; never a worker's state).
	proc := s.connect(t, natsauth.Processor)
	pjs, _ := jetstream.New(proc.Conn)
	if _, err := pjs.Publish(ctx, "parley.chat.t1.turn.completed", []byte(`{"n":1}`)); err != nil {
		t.Fatalf("processor publishing chat output: %v", err)
	}
	proc.noViolations(t)
	te := s.connect(t, natsauth.Toolexec)
	tejs, _ := jetstream.New(te.Conn)
	content, err := tejs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: natsauth.BucketContent})
	if err != nil {
		t.Fatalf("toolexec creating its bucket: %v", err)
	}
	if _, err := content.Put(ctx, "entity.1", []byte("{}")); err != nil {
		t.Fatalf("toolexec writing its bucket: %v", err)
	}
	te.noViolations(t)

	in := s.connect(t, natsauth.Integrator)
	ijs, _ := jetstream.New(in.Conn)
	oc, err := ijs.OrderedConsumer(ctx, natsauth.StreamChat, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"parley.chat.t1.>"}})
	if err != nil {
		t.Fatalf("integrator reading PARLEY_CHAT: %v", err)
	}
	if m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil || string(m.Data()) != `{"n":1}` {
		t.Fatalf("integrator reading PARLEY_CHAT: %v", err)
	}
	kv, err := ijs.KeyValue(ctx, natsauth.BucketContent)
	if err != nil {
		t.Fatalf("integrator opening %s: %v", natsauth.BucketContent, err)
	}
	if _, err := kv.Get(ctx, "entity.1"); err != nil {
		t.Fatalf("integrator reading %s: %v", natsauth.BucketContent, err)
	}
	w, err := kv.Watch(ctx, "entity.1", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatalf("integrator watching %s: %v", natsauth.BucketContent, err)
	}
	if _, err := content.Put(ctx, "entity.1", []byte(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w.Updates():
		if e == nil || string(e.Value()) != `{"v":2}` {
			t.Fatalf("watch: %v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("integrator's watch got no update")
	}
	_ = w.Stop()
	in.noViolations(t)

	// The gate answers the agent's pre-execute request (allow_responses);
	// a second answer to the same request is refused.
	gate := s.connect(t, natsauth.Gate)
	var once sync.Once
	second := make(chan string, 1)
	if _, err := gate.QueueSubscribe("parley.tool.pre_execute.>", "gate", func(m *nats.Msg) {
		_ = m.Respond([]byte("allow"))
		_ = gate.Flush()
		once.Do(func() {
			_ = gate.Publish(m.Reply, []byte("allow again"))
			second <- m.Reply
		})
	}); err != nil {
		t.Fatal(err)
	}
	if err := gate.Flush(); err != nil {
		t.Fatal(err)
	}
	agent := s.connect(t, natsauth.Agent)
	reply, err := agent.Request("parley.tool.pre_execute.default.delete_entities", []byte("{}"), 5*time.Second)
	if err != nil || string(reply.Data) != "allow" {
		t.Fatalf("agent's pre-execute request: %v", err)
	}
	if subj := <-second; !gate.refused("Publish", subj) {
		t.Errorf("the gate answered the same request twice (%s)", subj)
	}
	agent.noViolations(t)

	// Each worker dead-letters what its own consumers cannot handle.
	for p, subjects := range map[string][]string{
		natsauth.Processor: {"parley.dlq.PARLEY_INPUT.processor", "parley.dlq.PARLEY_RUNS.processor-runs"},
		natsauth.Agent:     {"parley.dlq.PARLEY_AGENT.agent"},
		natsauth.Toolexec:  {"parley.dlq.PARLEY_TOOLS.toolexec"},
	} {
		c := s.connect(t, p)
		js, _ := jetstream.New(c.Conn)
		for _, subj := range subjects {
			if _, err := js.Publish(ctx, subj, []byte("{}")); err != nil {
				t.Errorf("%s dead-lettering on %s: %v", p, subj, err)
			}
		}
		c.noViolations(t)
	}

	// toolexec owns the registry; the agent reads it.
	tx := s.connect(t, natsauth.Toolexec)
	tjs, _ := jetstream.New(tx.Conn)
	reg, err := tjs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: natsauth.BucketTools})
	if err != nil {
		t.Fatalf("toolexec creating the registry: %v", err)
	}
	if _, err := reg.Put(ctx, "delete_entities", []byte("{}")); err != nil {
		t.Fatalf("toolexec registering a tool: %v", err)
	}
	tx.noViolations(t)
	ajs2, _ := jetstream.New(agent.Conn)
	areg, err := ajs2.KeyValue(ctx, natsauth.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := areg.Get(ctx, "delete_entities"); err != nil {
		t.Fatalf("agent reading the registry: %v", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	if _, err := areg.Put(pctx, "delete_entities", []byte(`{"annotations":{"readOnlyHint":true}}`)); err == nil {
		t.Fatal("the agent rewrote the registry")
	}
	if !agent.refused("Publish", "$KV.parley_tools.delete_entities") {
		t.Error("the agent's registry write failed without a permissions violation")
	}

	// Readiness (GET /readyz of every worker and the gateway) lists the
	// stream names.
	for _, p := range []string{natsauth.Processor, natsauth.Agent, natsauth.Toolexec, natsauth.Gateway} {
		c := s.connect(t, p)
		js, _ := jetstream.New(c.Conn)
		l := js.StreamNames(ctx)
		n := 0
		for range l.Name() {
			n++
		}
		if l.Err() != nil || n == 0 {
			t.Errorf("%s listing stream names: %d, %v", p, n, l.Err())
		}
		c.noViolations(t)
	}
}

// Init keeps existing seeds (0600) and rewrites auth.conf.
func TestInitKeepsSeeds(t *testing.T) {
	dir := t.TempDir()
	first, err := natsauth.Init(dir, natsauth.Roles())
	if err != nil {
		t.Fatal(err)
	}
	second, err := natsauth.Init(dir, natsauth.Roles())
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].PublicKey != second[i].PublicKey {
			t.Errorf("%s: key changed on the second Init", first[i].Name)
		}
		fi, err := os.Stat(filepath.Join(dir, natsauth.SeedFile(first[i].Name)))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", fi.Name(), fi.Mode().Perm())
		}
	}
	if _, err := natsauth.Set([]string{"gate"}, nil); err == nil {
		t.Error("an integrator named like a role was accepted")
	}
	if _, err := natsauth.Set([]string{"a.b"}, nil); err == nil {
		t.Error("an integrator named a.b was accepted")
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                                "nats://127.0.0.1:4222",
		"nats://bob:s3cret@nats:4222":                          "nats://redacted@nats:4222",
		"nats://t0ken@nats:4222":                               "nats://redacted@nats:4222",
		"nats://a:p@x:1,nats://b:q@y:2":                        "nats://redacted@x:1,nats://redacted@y:2",
		"connecting to NATS at tls://u:p/w@d@h:4222: no route": "connecting to NATS at tls://redacted@h:4222: no route",
		`dial "nats://u:pw@h:1" failed`:                        `dial "nats://redacted@h:1" failed`,
	} {
		if got := natsauth.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	// A failed connection's error does not show the password.
	_, err := natsauth.Connect("nats://bob:s3cret@127.0.0.1:1", "x", natsauth.Credentials{}, nil)
	if err == nil || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "bob") {
		t.Fatalf("error %v shows the credentials", err)
	}
	if !errors.Is(err, nats.ErrNoServers) {
		t.Errorf("error %v lost its cause", err)
	}
}

// The names the permissions use are the ones the code uses.
func TestNamesMatchCode(t *testing.T) {
	for got, want := range map[string]string{
		natsauth.StreamChat:           events.StreamChat,
		natsauth.StreamInput:          events.StreamInput,
		natsauth.StreamAgent:          events.StreamAgent,
		natsauth.StreamRuns:           events.StreamRuns,
		natsauth.StreamTools:          events.StreamTools,
		natsauth.StreamDeadLetter:     events.StreamDeadLetter,
		natsauth.InputPrefix + ">":    events.SubjectInputAll,
		natsauth.SubjectLookup:        events.SubjectLookupEntities,
		natsauth.SubjectResolve:       events.SubjectResolveReferences,
		natsauth.Integrator:           events.PrincipalIntegrator,
		natsauth.Gateway:              events.PrincipalGateway,
		natsauth.BucketPaused:         kvstate.BucketPaused,
		natsauth.BucketThreads:        kvstate.BucketThreads,
		natsauth.BucketRuns:           kvstate.BucketRuns,
		natsauth.BucketToolResults:    kvstate.BucketToolResults,
		natsauth.BucketTools:          kvstate.BucketTools,
		natsauth.BucketContent:        builtin.DefaultBucket,
		natsauth.BucketGatewayThreads: gateway.BucketThreads,
		natsauth.ObjectResults:        agent.ResultsBucket,
	} {
		if got != want {
			t.Errorf("natsauth names %q, the code %q", got, want)
		}
	}
}

// A policy principal publishes pre-execute answers only on its own reply
// subjects, _INBOX_agent.pre_execute.*.<its name>: audit cannot answer as
// gate or compliance, nor anywhere else in the agent's inbox.
func TestPolicyAnswersOnlyAsItself(t *testing.T) {
	s := newSecuredWith(t, nil, []string{"compliance", "audit"})
	reply := natsauth.InboxPrefix(natsauth.Agent) + "." + events.PreExecuteReplyScope + ".abc"
	agent := s.connect(t, natsauth.Agent)
	sub, err := agent.SubscribeSync(reply + ".*")
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"gate", "compliance", "audit"} {
		c := s.connect(t, p)
		if err := c.Publish(events.PolicyReplySubject(reply, p), []byte(p)); err != nil {
			t.Fatal(err)
		}
		c.noViolations(t)
		m, err := sub.NextMsg(2 * time.Second)
		if err != nil || m.Subject != events.PolicyReplySubject(reply, p) {
			t.Fatalf("%s answering as itself: %v", p, err)
		}
	}
	audit := s.connect(t, "audit")
	for _, subj := range []string{
		events.PolicyReplySubject(reply, "gate"),
		events.PolicyReplySubject(reply, "compliance"),
		reply,
		natsauth.InboxPrefix(natsauth.Agent) + ".abc.audit",
		natsauth.InboxPrefix(natsauth.Processor) + "." + events.PreExecuteReplyScope + ".abc.audit",
		natsauth.InboxPrefix(natsauth.Agent) + "." + events.PreExecuteReplyScope + ".abc.audit.x",
	} {
		if err := audit.Publish(subj, []byte("allow")); err != nil {
			t.Fatal(err)
		}
		if !audit.refused("Publish", subj) {
			t.Errorf("audit may publish on %s", subj)
		}
	}
	if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("the agent received %q on %s", m.Data, m.Subject)
	}
}

// No integrator creates or reconfigures a consumer with one of parley's
// durable names, in any form of the JetStream API: the name in the
// subject ($JS.API.CONSUMER.CREATE.<stream>.<name>[.<filter>],
// $JS.API.CONSUMER.DURABLE.CREATE.<stream>.<name>) or only in the request
// body (the older $JS.API.CONSUMER.CREATE.<stream>). Each request is
// refused by the server, and no such consumer exists afterwards.
func TestReservedConsumerNames(t *testing.T) {
	s := newSecured(t, "acme")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := s.connect(t, natsauth.Admin)
	ajs, _ := jetstream.New(admin.Conn)
	for _, sc := range []jetstream.StreamConfig{
		{Name: natsauth.StreamChat, Subjects: []string{"parley.chat.>"}},
		{Name: natsauth.StreamAgent, Subjects: []string{"parley.agent.run.requested"}, Retention: jetstream.WorkQueuePolicy},
	} {
		if _, err := ajs.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{natsauth.Integrator, "acme", natsauth.Gateway} {
		c := s.connect(t, p)
		for _, stream := range []string{natsauth.StreamChat, natsauth.StreamAgent} {
			for _, name := range []string{"agent", "toolexec", "processor"} {
				body := fmt.Appendf(nil, `{"stream_name":%q,"config":{"durable_name":%q,"name":%q,"ack_policy":"explicit"}}`, stream, name, name)
				// The older form takes a name only for an ephemeral consumer
				// (which then holds the durable's name).
				unnamed := fmt.Appendf(nil, `{"stream_name":%q,"config":{"name":%q,"ack_policy":"explicit"}}`, stream, name)
				filtered := fmt.Appendf(nil, `{"stream_name":%q,"config":{"durable_name":%q,"name":%q,"ack_policy":"explicit","filter_subject":"parley.chat.t1.>"}}`,
					stream, name, name)
				for _, r := range []struct {
					subject string
					body    []byte
				}{
					{"$JS.API.CONSUMER.CREATE." + stream, unnamed},
					{"$JS.API.CONSUMER.CREATE." + stream + "." + name, body},
					{"$JS.API.CONSUMER.CREATE." + stream + "." + name + ".parley.chat.t1.>", filtered},
					{"$JS.API.CONSUMER.DURABLE.CREATE." + stream + "." + name, body},
				} {
					if err := c.PublishRequest(r.subject, c.NewRespInbox(), r.body); err != nil {
						t.Fatal(err)
					}
					if !c.refused("Publish", r.subject) {
						t.Errorf("%s may publish on %s", p, r.subject)
					}
				}
				if err := c.Flush(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond) // a create that got through is done by now
				if _, err := ajs.Consumer(ctx, stream, name); !errors.Is(err, jetstream.ErrConsumerNotFound) {
					t.Errorf("%s: consumer %s/%s exists (%v)", p, stream, name, err)
				}
			}
		}
	}
	// Reading PARLEY_CHAT through an ordered consumer (a named create)
	// still works.
	in := s.connect(t, natsauth.Integrator)
	ijs, _ := jetstream.New(in.Conn)
	oc, err := ijs.OrderedConsumer(ctx, natsauth.StreamChat, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"parley.chat.t1.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oc.Info(ctx); err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
}
