//go:build unix

package chaos

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/processor"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

var (
	flagTurns     = flag.Int("chaos.turns", 200, "turns to send (5 per thread)")
	flagDuration  = flag.Duration("chaos.duration", 60*time.Second, "how long workers are killed and restarted (chaos stops earlier once every turn was sent and ended)")
	flagKillEvery = flag.Duration("chaos.kill-every", time.Second, "mean interval between two SIGKILLs of a random worker")
	flagWait      = flag.Duration("chaos.wait", 90*time.Second, "how long to wait for every turn to end after the last send")
	flagSeed      = flag.Uint64("chaos.seed", 0, "random seed (0: from the clock; printed)")
)

// Binaries built once by TestMain.
var bins struct {
	parley, server string
	err            error
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "parley-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.parley, bins.server, bins.err = buildBinaries(dir)
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// The worker configuration of the run.
const (
	gateConfig = `{"agents":{"*":{"require_tool_confirmation":true}}}`
	// rules: the two flows of the workload (kept here, so a change of the
	// built-in demo rules does not change what this test measures).
	rulesJSON = `{
  "rules": [
    {
      "name": "plan-events",
      "match": "(?i)plan three events for (.+)",
      "steps": [
        {"tool_calls": [
          {"name": "list_entities", "arguments": {"type": "event"}},
          {"name": "create_event", "arguments_template": "{\"title\": {{json (printf \"%s: kickoff\" (index .Match 1))}}, \"date\": \"2027-01-11\"}"},
          {"name": "create_event", "arguments_template": "{\"title\": {{json (printf \"%s: review\" (index .Match 1))}}, \"date\": \"2027-01-18\"}"},
          {"name": "create_event", "arguments_template": "{\"title\": {{json (printf \"%s: launch\" (index .Match 1))}}, \"date\": \"2027-01-25\"}"}
        ]},
        {"text": "{{range .Results}}{{if ne .Name \"list_entities\"}}- {{.Text}}\n{{end}}{{end}}"}
      ]
    },
    {
      "name": "list",
      "match": "(?i)\\blist\\b",
      "steps": [
        {"tool_calls": [{"name": "list_entities", "arguments": {"type": "event"}}]},
        {"text": "{{.Last.Text}}"}
      ]
    }
  ],
  "fallback": "I can plan events or list them."
}`
	turnsPerThread = 5
	pauseTTL       = "10m"
)

var slots = []string{"kickoff", "review", "launch"}

// faultPoints are the processor's injected exits (processor.EnvFaultExit),
// each taken once by whichever replica gets there first.
var faultPoints = []string{"after-supersede", "after-pause-record", "after-resume"}

// Answer modes.
const (
	modeSingle     = "single"
	modeDouble     = "double click"
	modeConcurrent = "concurrent"
)

// turn is one user message the test sent.
type turn struct {
	thread  string
	idx     int // in the thread, from 0
	kind    string
	name    string // "plan" turns: the X of "plan three events for X"
	text    string
	event   *event.Event
	turnID  string
	sentAt  time.Time
	elicits []*elicit
	// supersededExpected: a plan turn whose questions are never answered;
	// a message sent after it paused supersedes it (its end is
	// elicitation.cancelled).
	supersededExpected bool
	// afterPause: sent once the burst's first turn paused (it supersedes
	// that turn, and must run after the burst's turns queued before it).
	afterPause bool
}

// elicit is one confirmation the test answered.
type elicit struct {
	id           string
	turn         *turn
	slot         string
	title        string
	action       schema.ElicitAction
	instructions string
	mode         string
	answerIDs    []string
	answeredBy   map[string]string // answer event ID → who answered
	winner       string            // the consumed answer (set by check)
}

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

func (l *lockedRand) Shuffle(n int, swap func(i, j int)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.r.Shuffle(n, swap)
}

// chaosRun is the whole test system and what happened to it.
type chaosRun struct {
	t       *testing.T
	ctx     context.Context
	rnd     *lockedRand
	srv     *natsServer
	workers []*worker
	bus     *bus.Client
	rec     *recorder
	logDir  string
	// faultOnce is the path prefix of the files the processors' injected
	// exits create (one per fault point).
	faultOnce string

	mu            sync.Mutex
	turns         []*turn
	elicits       map[string]*elicit
	lastSend      time.Time
	timeline      []string
	natsDowntime  time.Duration
	natsRestarts  int
	stalls        int
	publishErrors int
	stuck         []string
	unsent        int
}

func (c *chaosRun) note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timeline = append(c.timeline, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// newChaosRun checks the binaries, logs the workload's seed (-chaos.seed, or
// the time) followed by hint (a format taking the seed), and makes the run's
// temporary directory with its logs/ and js/ directories. cancel stops
// the run's context.
func newChaosRun(t *testing.T, hint string) (c *chaosRun, tmp string, cancel context.CancelFunc) {
	t.Helper()
	if bins.err != nil {
		t.Fatalf("building binaries: %v", bins.err)
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d "+hint, seed, seed)
	tmp = t.TempDir()
	logDir := filepath.Join(tmp, "logs")
	for _, d := range []string{logDir, filepath.Join(tmp, "js")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c = &chaosRun{t: t, ctx: ctx, rnd: &lockedRand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))},
		logDir: logDir, elicits: map[string]*elicit{}}
	return c, tmp, cancel
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: skipped with -short")
	}
	c, tmp, cancel := newChaosRun(t, "(-chaos.seed %d reproduces the workload; timing differs)")
	ctx := c.ctx
	begin := time.Now()
	logDir := c.logDir
	t.Cleanup(func() {
		if t.Failed() {
			c.printLogs()
		}
	})

	// The server, with parley's shipped authorization (rendered by
	// natsauth, as `parley auth init` writes it): every worker runs on
	// its own principal, the test's own connection is the operator.
	authDir := filepath.Join(tmp, "auth")
	if _, err := natsauth.Init(authDir, natsauth.Roles()); err != nil {
		t.Fatal(err)
	}
	creds := func(p string) natsauth.Credentials {
		return natsauth.Credentials{NKeyFile: filepath.Join(authDir, natsauth.SeedFile(p)), Principal: p}
	}
	adminOpts, err := creds(natsauth.Admin).Options()
	if err != nil {
		t.Fatal(err)
	}
	c.srv = &natsServer{bin: bins.server, dir: filepath.Join(tmp, "js"), log: filepath.Join(logDir, "nats-server.log"), port: freePort(t),
		extra: []string{"-c", filepath.Join(authDir, natsauth.AuthFile)}, connOpts: adminOpts}
	if err := c.srv.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.srv.stop)

	// The workers: two replicas of each role, supervised.
	gateFile, rulesFile := filepath.Join(tmp, "gate.json"), filepath.Join(tmp, "rules.json")
	if err := os.WriteFile(gateFile, []byte(gateConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rulesFile, []byte(rulesJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PARLEY_PAUSE_TTL="+pauseTTL, "PARLEY_LOG_LEVEL=info")
	// One processor exit (whichever replica gets there first) at each
	// fault point: between storing a superseded turn's withdrawn questions
	// and announcing them; between storing a pause record and recording
	// the pause in the thread; between resuming a turn in the thread
	// record and publishing run.resumed.
	c.faultOnce = filepath.Join(tmp, "fault-once")
	processorEnv := append(slices.Clone(env), processor.EnvFaultExit+"="+strings.Join(faultPoints, ","),
		processor.EnvFaultOnce+"="+c.faultOnce)
	common := []string{"--nats", c.srv.url(), "--log-format", "json", "--storage", "file"}
	roleArgs := map[string][]string{
		"processor": {"--pause-ttl", pauseTTL},
		"agent":     {"--rules", rulesFile},
		"toolexec":  nil,
		"gate":      {"--gate-config", gateFile},
	}
	superCtx, stopSupervisors := context.WithCancel(context.Background())
	var supervisors sync.WaitGroup
	for _, role := range []string{"gate", "toolexec", "agent", "processor"} {
		for n := range 2 {
			wenv := env
			if role == "processor" {
				wenv = processorEnv
			}
			w := &worker{role: role, n: n, bin: bins.parley, env: wenv, rnd: c.rnd,
				args: append(append(slices.Clone(common), roleArgs[role]...), "--nats-nkey", creds(role).NKeyFile),
				log:  filepath.Join(logDir, fmt.Sprintf("%s-%d.log", role, n))}
			c.workers = append(c.workers, w)
			supervisors.Go(func() { w.supervise(superCtx) })
		}
	}
	t.Cleanup(func() {
		stopSupervisors()
		var wg sync.WaitGroup
		for _, w := range c.workers {
			wg.Go(w.shutdown)
		}
		wg.Wait()
		supervisors.Wait()
	})

	// The test's own connection: it publishes like an integrator and
	// records every chat event.
	nc, err := natsauth.Connect(c.srv.url(), "parley-chaos-test", creds(natsauth.Admin), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if c.bus, err = bus.New(nc, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	items, err := client.New(c.bus, "/parley/chaos").Watch(ctx, client.WatchOptions{FromStart: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel) // registered last: runs first, stops the watcher before the server
	c.rec = newRecorder(items)
	c.waitReady()
	t.Logf("system up in %v: nats-server %s, 2 × processor, agent, toolexec, gate; logs in %s",
		time.Since(begin).Round(time.Millisecond), c.srv.url(), logDir)

	// Load and chaos.
	plan := c.planWorkload(*flagTurns)
	loadStart := time.Now()
	chaosCtx, stopChaos := context.WithTimeout(ctx, *flagDuration)
	var chaosDone sync.WaitGroup
	chaosDone.Go(func() { c.chaos(chaosCtx) })
	var drivers sync.WaitGroup
	threads := len(plan)
	for i, bursts := range plan {
		// Threads start spread over the first third of the chaos window.
		delay := time.Duration(float64(*flagDuration) / 3 * float64(i) / float64(max(threads, 1)))
		drivers.Go(func() {
			sleepCtx(ctx, delay)
			c.drive(bursts)
		})
	}
	drivers.Wait()
	stopChaos()
	chaosDone.Wait()
	c.mu.Lock()
	last := c.lastSend
	c.mu.Unlock()
	// Every turn must end within flagWait of the last send.
	c.rec.wait(last.Add(*flagWait), func() bool {
		for _, tr := range c.turns {
			if !c.rec.ended(tr.turnID) && !(tr.supersededExpected && len(c.rec.cancelled[tr.turnID]) > 0) {
				return false
			}
		}
		return true
	})
	// Every answer copy must be settled (consumed or rejected).
	c.rec.wait(maxTime(last.Add(*flagWait), time.Now().Add(45*time.Second)), c.answersSettled)
	loadTime := time.Since(loadStart)

	bad := c.check(loadTime)
	// Every role did its whole job within its own permissions: the
	// server logged no violation (nor did a worker's error handler).
	logs, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
	for _, f := range logs {
		b, _ := os.ReadFile(f)
		for line := range strings.Lines(string(b)) {
			// Workers log "NATS permissions violation"; the server
			// "Publish Violation" and "Subscription Violation".
			if l := strings.ToLower(line); strings.Contains(l, "permissions violation") ||
				strings.Contains(l, "publish violation") || strings.Contains(l, "subscription violation") {
				t.Errorf("%s: %s", filepath.Base(f), strings.TrimSpace(line))
				break
			}
		}
	}
	for i, thread := range bad {
		if i == 8 {
			t.Logf("(%d more threads with problems)", len(bad)-i)
			break
		}
		t.Logf("events of thread %s:\n%s%s", thread, c.rec.dumpThread(thread), diagnose(c.bus.JetStream(), thread))
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waitReady waits until every worker logged its start, the durable
// consumers exist and the gate answers.
func (c *chaosRun) waitReady() {
	t := c.t
	deadline := time.Now().Add(60 * time.Second)
	for _, w := range c.workers {
		for {
			b, _ := os.ReadFile(w.log)
			if strings.Contains(string(b), `"msg":"worker starting"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not start; log %s:\n%s", w.name(), w.log, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	js := c.bus.JetStream()
	for _, sc := range [][2]string{{events.StreamInput, "processor"}, {events.StreamRuns, "processor-runs"},
		{events.StreamAgent, "agent"}, {events.StreamTools, "toolexec"}} {
		for {
			if _, err := js.Consumer(c.ctx, sc[0], sc[1]); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("consumer %s on %s missing: %v", sc[1], sc[0], err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for {
		if _, err := c.bus.Conn().Request("$SRV.PING.parley-gate", nil, 200*time.Millisecond); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("gate does not answer: %v", err)
		}
	}
}

// planWorkload splits n turns into threads of 5 and each thread into
// bursts sent back to back; only a burst's last turn can be a plan turn.
// Every fifth thread starts with a supersede burst instead: a plan turn
// and a list turn back to back (the list turn queues behind the plan
// turn, also once it paused), then, once the plan turn paused, another
// list turn that supersedes it and must run after the queued one (FIFO
// across a supersede).
func (c *chaosRun) planWorkload(n int) [][][]*turn {
	threads := (n + turnsPerThread - 1) / turnsPerThread
	run := strconv.FormatInt(time.Now().Unix()%100000, 36)
	var plan [][][]*turn
	left := n
	for i := range threads {
		thread := fmt.Sprintf("chaos-%s-%02d", run, i)
		k := min(turnsPerThread, left)
		left -= k
		var bursts [][]*turn
		idx := 0
		if i%5 == 4 && k >= 3 {
			name := fmt.Sprintf("T%02d turn 0", i)
			bursts = append(bursts, []*turn{
				{thread: thread, idx: 0, kind: "plan", name: name, text: "plan three events for " + name, supersededExpected: true},
				{thread: thread, idx: 1, kind: "list", text: "list all events"},
				{thread: thread, idx: 2, kind: "list", text: "list all events", afterPause: true},
			})
			idx = 3
		}
		for idx < k {
			size := min(1+c.rnd.IntN(3), k-idx)
			var burst []*turn
			for j := range size {
				tr := &turn{thread: thread, idx: idx, kind: "list", text: "list all events"}
				if j == size-1 && c.rnd.Float64() < 0.8 {
					tr.kind = "plan"
					tr.name = fmt.Sprintf("T%02d turn %d", i, idx)
					tr.text = "plan three events for " + tr.name
				}
				burst = append(burst, tr)
				idx++
			}
			bursts = append(bursts, burst)
		}
		plan = append(plan, bursts)
	}
	return plan
}

// chaosAnswerers are the users the chaos threads are shared with: the
// answerers of drive (a double click is alice; concurrent answers are
// person-1..5), all through the gateway principal.
var chaosAnswerers = []events.Identity{{Principal: events.PrincipalGateway, OnBehalfOf: "alice"},
	{Principal: events.PrincipalGateway, OnBehalfOf: "person-1"}, {Principal: events.PrincipalGateway, OnBehalfOf: "person-2"},
	{Principal: events.PrincipalGateway, OnBehalfOf: "person-3"}, {Principal: events.PrincipalGateway, OnBehalfOf: "person-4"},
	{Principal: events.PrincipalGateway, OnBehalfOf: "person-5"}}

// publish stores e, retrying with the same event (same Nats-Msg-Id, so a
// retry after a lost ack is dropped as a duplicate) while the server is
// away.
func (c *chaosRun) publish(subject string, e *event.Event) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		_, err := c.bus.Publish(ctx, subject, e)
		cancel()
		if err == nil || c.ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		c.publishErrors++
		c.mu.Unlock()
		if time.Now().After(deadline) {
			c.t.Errorf("publishing %s on %s: %v", e.Type(), subject, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// drive sends a thread's bursts; after each burst it answers every
// confirmation of it and waits until each of its turns ended.
func (c *chaosRun) drive(bursts [][]*turn) {
	for _, burst := range bursts {
		for _, tr := range burst {
			if tr.afterPause {
				first := burst[0]
				if !c.rec.wait(time.Now().Add(*flagWait), func() bool { return len(c.rec.paused[first.turnID]) > 0 }) {
					c.mu.Lock()
					c.stuck = append(c.stuck, tr.thread)
					c.mu.Unlock()
					return
				}
			}
			// As the gateway, which the processor trusts to name its users:
			// the thread belongs to "chaos", who shares it with everyone
			// who answers its questions (alice, person-1..5).
			e, err := events.New("/parley/chaos", events.TypeTurnRequested, tr.thread, events.TurnRequested{
				User: "chaos", Message: schema.ChatMessage{Role: schema.RoleUser, Text: tr.text}, Share: chaosAnswerers})
			if err != nil {
				c.t.Error(err)
				return
			}
			tr.event, tr.turnID = e, events.DerivedID("turn", e.ID())
			c.mu.Lock()
			c.turns = append(c.turns, tr)
			c.mu.Unlock()
			tr.sentAt = time.Now()
			c.publish(events.InputSubject(events.PrincipalGateway, tr.thread, events.ChatTurnRequested), e)
			c.mu.Lock()
			c.lastSend = time.Now()
			c.mu.Unlock()
		}
		deadline := time.Now().Add(*flagWait)
		answered := map[string]bool{}
		for {
			var todo []string
			var owner *turn
			done := c.rec.wait(deadline, func() bool {
				all := true
				for _, tr := range burst {
					if tr.supersededExpected {
						all = all && (c.rec.ended(tr.turnID) || len(c.rec.cancelled[tr.turnID]) > 0)
						continue
					}
					for _, p := range c.rec.paused[tr.turnID] {
						for _, id := range p.ElicitationIDs {
							if !answered[id] {
								todo, owner = append(todo, id), tr
							}
						}
					}
					if len(todo) > 0 {
						return true
					}
					all = all && c.rec.ended(tr.turnID)
				}
				return all
			})
			if len(todo) > 0 {
				for _, id := range todo {
					answered[id] = true
				}
				c.answer(owner, todo)
				continue
			}
			if !done {
				// The thread is stuck: its later turns would only queue
				// behind it. They are counted as not sent (a failure).
				c.mu.Lock()
				c.stuck = append(c.stuck, burst[0].thread)
				for _, b := range bursts {
					if b[0].idx > burst[0].idx {
						c.unsent += len(b)
					}
				}
				c.mu.Unlock()
				return
			}
			break
		}
	}
}

// answer answers the elicitations ids of tr: each from its own goroutine
// after a random delay (so in random order, some at the same moment),
// accept or decline with instructions, once, twice (a double click) or
// from 3-5 goroutines at once.
func (c *chaosRun) answer(tr *turn, ids []string) {
	var wg sync.WaitGroup
	for _, id := range ids {
		el := &elicit{id: id, turn: tr}
		c.rec.mu.Lock()
		req := c.rec.elicReq[id]
		c.rec.mu.Unlock()
		if len(req) > 0 {
			if p, err := events.Data[schema.ElicitRequestParams](req[0].event); err == nil {
				raw, _ := json.Marshal(p.Meta[schema.MetaToolCall])
				var tc schema.ToolCallMeta
				var args struct {
					Title string `json:"title"`
				}
				if json.Unmarshal(raw, &tc) == nil && json.Unmarshal(tc.Arguments, &args) == nil {
					el.title = args.Title
					for _, s := range slots {
						if strings.HasSuffix(args.Title, ": "+s) {
							el.slot = s
						}
					}
				}
			}
		}
		el.action = schema.ActionAccept
		if c.rnd.Float64() < 0.4 {
			el.action = schema.ActionDecline
			el.instructions = fmt.Sprintf("not %s (%s)", el.title, short(id))
		}
		switch x := c.rnd.Float64(); {
		case x < 0.55:
			el.mode = modeSingle
		case x < 0.85:
			el.mode = modeDouble
		default:
			el.mode = modeConcurrent
		}
		c.mu.Lock()
		c.elicits[id] = el
		tr.elicits = append(tr.elicits, el)
		c.mu.Unlock()
		delay := time.Duration(c.rnd.IntN(250)) * time.Millisecond
		wg.Go(func() {
			sleepCtx(c.ctx, delay)
			copies := 1
			switch el.mode {
			case modeDouble:
				copies = 2
			case modeConcurrent:
				copies = 3 + c.rnd.IntN(3)
			}
			var evs []*event.Event
			who := map[string]string{}
			for k := range copies {
				// A double click is one person; concurrent answers are
				// several people.
				by := "alice"
				if el.mode == modeConcurrent {
					by = fmt.Sprintf("person-%d", k+1)
				}
				data := events.ElicitationResponded{ElicitationID: id, AnsweredBy: by, Action: el.action}
				if el.instructions != "" {
					data.Content = map[string]any{schema.InstructionsProperty: el.instructions}
				}
				e, err := events.New("/parley/chaos", events.TypeElicitationResponded, tr.thread, data)
				if err != nil {
					c.t.Error(err)
					return
				}
				evs = append(evs, e)
				who[e.ID()] = by
			}
			c.mu.Lock()
			for _, e := range evs {
				el.answerIDs = append(el.answerIDs, e.ID())
			}
			el.answeredBy = who
			c.mu.Unlock()
			subject := events.InputSubject(events.PrincipalGateway, tr.thread, events.ChatElicitationResponded)
			switch el.mode {
			case modeSingle:
				c.publish(subject, evs[0])
			case modeDouble:
				c.publish(subject, evs[0])
				time.Sleep(time.Duration(c.rnd.IntN(30)) * time.Millisecond)
				c.publish(subject, evs[1])
			default:
				start := make(chan struct{})
				var all sync.WaitGroup
				for _, e := range evs {
					all.Go(func() { <-start; c.publish(subject, e) })
				}
				close(start)
				all.Wait()
			}
		})
	}
	wg.Wait()
}

// answersSettled reports (recorder lock held) whether every elicitation
// has all but one answer copy rejected (or all of them, when the turn's
// questions were cancelled).
func (c *chaosRun) answersSettled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, el := range c.elicits {
		rejected := 0
		for _, id := range el.answerIDs {
			if len(c.rec.rejected[id]) > 0 {
				rejected++
			}
		}
		want := len(el.answerIDs) - 1
		if len(c.rec.cancelled[el.turn.turnID]) > 0 {
			want = len(el.answerIDs)
		}
		if rejected < want {
			return false
		}
	}
	return true
}

// chaos SIGKILLs a random worker about every flagKillEvery (its
// supervisor restarts it 200-500 ms later) and restarts the NATS server
// once, 40% into the window.
func (c *chaosRun) chaos(ctx context.Context) {
	start := time.Now()
	restarted, stalled := false, false
	for {
		jitter := 0.5 + c.rnd.Float64()
		sleepCtx(ctx, time.Duration(float64(*flagKillEvery)*jitter))
		if ctx.Err() != nil {
			return
		}
		if !restarted && time.Since(start) >= *flagDuration*2/5 {
			restarted = true
			down := time.Now()
			c.note("nats-server: SIGTERM")
			c.srv.stop()
			if err := c.srv.start(); err != nil {
				c.t.Errorf("restarting nats-server: %v", err)
				return
			}
			c.mu.Lock()
			c.natsDowntime = time.Since(down)
			c.natsRestarts++
			c.mu.Unlock()
			c.note("nats-server: back after %v", time.Since(down).Round(time.Millisecond))
			continue
		}
		if !stalled && time.Since(start) >= *flagDuration/5 {
			// A replica that is alive but stops making progress (GC pause,
			// VM freeze) for longer than AckWait: its work goes elsewhere
			// and it must not break anything when it comes back.
			stalled = true
			for _, w := range c.workers {
				if w.role == "processor" {
					if pid, ok := w.stall(ctx, 20*time.Second); ok {
						c.note("SIGSTOP %s pid %d for 20s", w.name(), pid)
						c.mu.Lock()
						c.stalls++
						c.mu.Unlock()
					}
					break
				}
			}
			continue
		}
		w := c.workers[c.rnd.IntN(len(c.workers))]
		if pid, ok := w.kill(); ok {
			c.note("SIGKILL %s pid %d", w.name(), pid)
		}
	}
}

// printLogs names every log file (and the chaos timeline).
func (c *chaosRun) printLogs() {
	var b strings.Builder
	b.WriteString("logs:\n  " + c.srv.log + "\n")
	for _, w := range c.workers {
		b.WriteString("  " + w.log + "\n")
	}
	c.mu.Lock()
	tl := slices.Clone(c.timeline)
	c.mu.Unlock()
	_ = os.WriteFile(filepath.Join(c.logDir, "timeline.txt"), []byte(strings.Join(tl, "\n")+"\n"), 0o644)
	b.WriteString("  " + filepath.Join(c.logDir, "timeline.txt") + " (kills and restarts)\n")
	if keep := os.Getenv("PARLEY_CHAOS_KEEP"); keep != "" {
		_ = os.CopyFS(keep, os.DirFS(c.logDir))
		b.WriteString("  copied to " + keep + "\n")
	} else {
		b.WriteString("  (t.TempDir is removed after the test: set PARLEY_CHAOS_KEEP=/some/dir to keep a copy)\n")
	}
	c.t.Log(b.String())
}

// check computes the figures, prints the table and fails on any lost
// turn, failed turn, double or missing effect, duplicate, unsettled
// answer or FIFO violation.
func (c *chaosRun) check(loadTime time.Duration) (problemThreads []string) {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := c.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()

	// Problems name their thread; check's caller prints the events of the
	// first few such threads once the locks are released.
	var problems []string
	problem := func(thread, format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
		if thread != "" && !slices.Contains(problemThreads, thread) {
			problemThreads = append(problemThreads, thread)
		}
	}

	// Turns.
	var completed, failed, lost, superseded, supersededOK, plans, lists int
	failReasons := map[string]int{}
	var latAll, latPlan, latList []time.Duration
	byTurnID := map[string]*turn{}
	for _, tr := range c.turns {
		byTurnID[tr.turnID] = tr
		if tr.kind == "plan" {
			plans++
		} else {
			lists++
		}
		if tr.supersededExpected {
			if len(r.cancelled[tr.turnID]) == 0 {
				problem(tr.thread, "turn %s (%q) was not superseded (no elicitation.cancelled) by the message sent after it paused", short(tr.turnID), tr.text)
				continue
			}
			supersededOK++
			if ends := r.ends[tr.turnID]; len(ends) > 0 {
				problem(tr.thread, "superseded turn %s also ended with %s", short(tr.turnID), ends[0].event.Type())
			}
			continue
		}
		if len(r.cancelled[tr.turnID]) > 0 {
			superseded++
			problem(tr.thread, "turn %s (%q) was superseded: its questions were cancelled by a message that should have queued (FIFO)", short(tr.turnID), tr.text)
		}
		if rj := r.turnRej[tr.event.ID()]; len(rj) > 0 {
			problem(tr.thread, "turn %s (%q) was rejected: %+v", short(tr.turnID), tr.text, rj[0])
		}
		ends := r.ends[tr.turnID]
		if len(ends) == 0 {
			lost++
			problem(tr.thread, "turn %s (%q, sent %s) never ended", short(tr.turnID), tr.text, tr.sentAt.Format("15:04:05.000"))
			continue
		}
		if len(ends) > 1 {
			problem(tr.thread, "turn %s ended %d times", short(tr.turnID), len(ends))
		}
		end := ends[0]
		if events.TypeOf(end.event) == events.TypeTurnFailed {
			failed++
			d, _ := events.Data[events.TurnFailed](end.event)
			failReasons[d.Reason]++
			problem(tr.thread, "turn %s (%q) failed: %s: %s", short(tr.turnID), tr.text, d.Reason, d.Detail)
			continue
		}
		completed++
		lat := end.at.Sub(tr.sentAt)
		latAll = append(latAll, lat)
		if tr.kind == "plan" {
			latPlan = append(latPlan, lat)
		} else {
			latList = append(latList, lat)
		}
	}
	// Turn ends that belong to no turn of ours (e.g. dead-letter failures
	// without a turn ID).
	var strayEnds int
	for id, ends := range r.ends {
		if byTurnID[id] == nil {
			strayEnds += len(ends)
			problem(ends[0].event.Subject(), "a turn end for unknown turn %s: %s", short(id), ends[0].event.Data())
		}
	}

	// FIFO per thread: turns end in the order they were sent.
	fifo := 0
	for thread, ids := range r.threadEnds {
		prev := -1
		for _, id := range ids {
			tr := byTurnID[id]
			if tr == nil {
				continue
			}
			if tr.idx < prev {
				fifo++
				problem(thread, "FIFO: turn %d of %s ended after turn %d", tr.idx, thread, prev)
			}
			prev = max(prev, tr.idx)
		}
	}

	// Duplicates.
	var dupIDs, dupElic int
	for id, seqs := range r.byID {
		if len(seqs) > 1 {
			dupIDs++
			problem("", "CloudEvent %s stored %d times (seqs %v)", id, len(seqs), seqs)
		}
	}
	for id, s := range r.elicReq {
		if len(s) > 1 {
			dupElic++
			problem(s[0].event.Subject(), "elicitation %s requested %d times", short(id), len(s))
		}
	}
	var dupEnds int
	for _, ends := range r.ends {
		if len(ends) > 1 {
			dupEnds++
		}
	}

	// Answers: per elicitation exactly one copy consumed.
	var copies, consumed int
	modes := map[string]int{}
	rejectReasons := map[string]int{}
	expected := map[string]*elicit{} // title → accepted winning confirmation
	declined := map[string]*elicit{}
	for _, el := range c.elicits {
		modes[el.mode]++
		copies += len(el.answerIDs)
		cancelledTurn := len(r.cancelled[el.turn.turnID]) > 0
		winners := 0
		for _, id := range el.answerIDs {
			rj := r.rejected[id]
			if len(rj) == 0 {
				winners++
				el.winner = id
				continue
			}
			if len(rj) > 1 {
				problem(el.turn.thread, "answer %s rejected %d times", short(id), len(rj))
			}
			rejectReasons[rj[0].Reason]++
			if rj[0].Reason != events.RejectAlreadyConsumed && rj[0].Reason != events.RejectUnknownOrExpired {
				problem(el.turn.thread, "answer %s of elicitation %s rejected %s: %s", short(id), short(el.id), rj[0].Reason, rj[0].Detail)
			}
		}
		consumed += winners
		if winners != 1 {
			el.winner = ""
		}
		switch {
		case cancelledTurn:
		case winners != 1:
			problem(el.turn.thread, "elicitation %s (%s): %d of %d answer copies consumed, want exactly 1", short(el.id), el.mode, winners, len(el.answerIDs))
		case el.action == schema.ActionAccept:
			expected[el.title] = el
		default:
			declined[el.title] = el
		}
	}

	// Effects: the ledger and the site content.
	var effects, doubles, missing, unexpected int
	var policyUnavailable int
	site, err := builtin.OpenSite(ctx, c.bus.JetStream(), nil)
	if err != nil {
		t.Fatalf("opening the site: %v", err)
	}
	ledger, err := site.Ledger(ctx)
	if err != nil {
		t.Fatalf("reading the ledger: %v", err)
	}
	ents, err := site.Entities(ctx)
	if err != nil {
		t.Fatalf("reading the site: %v", err)
	}
	entByID := map[string]builtin.Entity{}
	eventsByTitle := map[string]int{}
	for _, e := range ents {
		entByID[e.ID] = e
		if e.Type == builtin.TypeEvent {
			eventsByTitle[e.Title]++
		}
	}
	effectsByTitle := map[string]int{}
	for _, le := range ledger {
		if le.Tool != builtin.ToolCreateEvent {
			problem("", "unexpected ledger effect %+v", le)
			continue
		}
		effects++
		for _, id := range le.IDs {
			effectsByTitle[entByID[id].Title]++
		}
	}
	for title, n := range effectsByTitle {
		switch {
		case n > 1:
			doubles += n - 1
			problem("", "create_event %q executed %d times (ledger)", title, n)
		case expected[title] == nil && !failedOrCancelledTitle(title, c.turns, r):
			unexpected++
			problem("", "create_event %q executed without an accepted confirmation", title)
		}
	}
	for title, n := range eventsByTitle {
		if n > 1 && effectsByTitle[title] <= 1 {
			doubles += n - 1
			problem("", "%d events titled %q on the site", n, title)
		}
	}
	for title, el := range expected {
		if el.turn != nil && len(r.ends[el.turn.turnID]) > 0 && events.TypeOf(r.ends[el.turn.turnID][0].event) == events.TypeTurnFailed {
			continue // a failed turn's effects are not predictable (and the failure is reported)
		}
		if effectsByTitle[title] == 0 {
			missing++
			problem(el.turn.thread, "accepted create_event %q (elicitation %s) has no effect", title, short(el.id))
		}
	}

	// The reply of each completed plan turn says what happened to each call.
	var wrongReplies, wrongDecisions int
	for _, tr := range c.turns {
		if tr.kind != "plan" || len(r.ends[tr.turnID]) == 0 || events.TypeOf(r.ends[tr.turnID][0].event) != events.TypeTurnCompleted {
			continue
		}
		d, _ := events.Data[events.TurnCompleted](r.ends[tr.turnID][0].event)
		if d.RequestEventID != tr.event.ID() {
			wrongDecisions++
			problem(tr.thread, "turn %s: turn.completed requestEventId %q, want %q", short(tr.turnID), d.RequestEventID, tr.event.ID())
		}
		bySlot := map[string]*elicit{}
		for _, el := range tr.elicits {
			bySlot[el.slot] = el
			// The decision on the event names the answer that won and who gave it.
			var rec *events.DecisionRecord
			for i := range d.Decisions {
				if d.Decisions[i].ElicitationID == el.id {
					rec = &d.Decisions[i]
				}
			}
			switch {
			case el.winner == "":
				// No unique winner: reported with the answers above.
			case rec == nil:
				wrongDecisions++
				problem(tr.thread, "turn %s: no decision recorded for elicitation %s", short(tr.turnID), short(el.id))
			case rec.Decision != events.DecisionConfirm || rec.Action != el.action || rec.AnsweredBy != (events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: el.answeredBy[el.winner]}):
				wrongDecisions++
				problem(tr.thread, "turn %s: decision for elicitation %s is %+v, want confirm/%s by %q",
					short(tr.turnID), short(el.id), *rec, el.action, el.answeredBy[el.winner])
			}
		}
		for _, s := range slots {
			title := tr.name + ": " + s
			el := bySlot[s]
			switch {
			case el == nil:
				if strings.Contains(d.Message.Text, "policy_unavailable") || strings.Contains(d.Message.Text, "no policy service") {
					policyUnavailable++
				} else {
					wrongReplies++
					problem(tr.thread, "turn %s: no confirmation was asked for %q", short(tr.turnID), title)
				}
			case el.action == schema.ActionAccept && !strings.Contains(d.Message.Text, "Created event") ||
				el.action == schema.ActionAccept && !strings.Contains(d.Message.Text, title):
				wrongReplies++
				problem(tr.thread, "turn %s: reply does not report %q created:\n%s", short(tr.turnID), title, d.Message.Text)
			case el.action == schema.ActionDecline && !strings.Contains(d.Message.Text, "User declined execution of create_event: "+el.instructions):
				wrongReplies++
				problem(tr.thread, "turn %s: reply does not report the decline of %q with its instructions:\n%s", short(tr.turnID), title, d.Message.Text)
			}
		}
	}

	// Dead letters.
	var dlq uint64
	if s, err := c.bus.JetStream().Stream(ctx, events.StreamDeadLetter); err == nil {
		if info, err := s.Info(ctx); err == nil {
			dlq = info.State.Msgs
		}
	}
	if dlq > 0 {
		problems = append(problems, fmt.Sprintf("%d dead-lettered message(s):\n%s", dlq, deadLetters(ctx, c.bus.JetStream())))
	}

	// Worker churn.
	kills, starts := map[string]int{}, map[string]int{}
	var crashes []string
	faultExits := 0
	for _, w := range c.workers {
		w.mu.Lock()
		kills[w.role] += w.kills
		starts[w.role] += w.starts
		for _, cr := range w.crashes {
			if w.role == "processor" && strings.HasSuffix(cr, "exit status 70") {
				faultExits++
				continue
			}
			crashes = append(crashes, w.name()+" "+cr)
		}
		w.mu.Unlock()
	}

	// The table.
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	b.WriteString("\n| measure | value |\n|---|---|\n")
	row("turns sent", fmt.Sprintf("%d (%d plan three events, %d list) on %d threads", len(c.turns), plans, lists, len(r.threadEnds)))
	row("turns not sent (their thread was stuck)", strconv.Itoa(c.unsent))
	row("turns completed", strconv.Itoa(completed))
	row("turns failed", fmt.Sprintf("%d %s", failed, fmtCounts(failReasons)))
	row("turns lost (no turn.completed / turn.failed)", strconv.Itoa(lost))
	row("turns superseded as planned (message sent after the pause; elicitation.cancelled)", strconv.Itoa(supersededOK))
	row("turns superseded unexpectedly (a message that should have queued)", strconv.Itoa(superseded))
	row("FIFO violations (turn ended before an earlier one of its thread)", strconv.Itoa(fifo))
	row("confirmations answered", fmt.Sprintf("%d (%s)", len(c.elicits), fmtCounts(modes)))
	row("answer copies published", strconv.Itoa(copies))
	row("answers consumed", strconv.Itoa(consumed))
	row("answers rejected", fmt.Sprintf("%d %s", copies-consumed, fmtCounts(rejectReasons)))
	row("create_event effects (ledger) / expected (accepted winners)", fmt.Sprintf("%d / %d", effects, len(expected)))
	row("double effects / missing / without acceptance", fmt.Sprintf("%d / %d / %d", doubles, missing, unexpected))
	row("declined confirmations (no effect)", strconv.Itoa(len(declined)))
	row("replies not matching the answers", strconv.Itoa(wrongReplies))
	row("decisions on turn.completed not matching the winning answer (action, who)", strconv.Itoa(wrongDecisions))
	row("tool calls not confirmable: policy_unavailable", strconv.Itoa(policyUnavailable))
	row("duplicate CloudEvent IDs in PARLEY_CHAT", strconv.Itoa(dupIDs))
	row("turns with more than one end / elicitations requested twice", fmt.Sprintf("%d / %d", dupEnds, dupElic))
	row("turn ends for unknown turns", strconv.Itoa(strayEnds))
	row("dead-lettered messages (PARLEY_DLQ)", strconv.FormatUint(dlq, 10))
	row("SIGKILLs", fmt.Sprintf("%d %s", sum(kills), fmtCounts(kills)))
	row("worker process starts", fmt.Sprintf("%d %s", sum(starts), fmtCounts(starts)))
	row("worker exits not caused by the test", fmt.Sprintf("%d", len(crashes)))
	row("nats-server restarts", fmt.Sprintf("%d (down %v)", c.natsRestarts, c.natsDowntime.Round(time.Millisecond)))
	row("processor replicas stalled 20 s (SIGSTOP/SIGCONT), > AckWait "+bus.DefaultAckWait.String(), fmt.Sprint(c.stalls))
	row("processor exits injected ("+strings.Join(faultPoints, ", ")+")", strconv.Itoa(faultExits))
	row("publish retries (test side)", strconv.Itoa(c.publishErrors))
	row("turn time p50 / p99, all (send → turn.completed)", pcts(latAll))
	row("  list turns (no pause)", pcts(latList))
	row("  plan turns (incl. answering 3 confirmations)", pcts(latPlan))
	row("load + drain time", loadTime.Round(time.Second).String())
	t.Log(b.String())
	if len(crashes) > 0 {
		t.Logf("worker exits not caused by the test:\n  %s", strings.Join(crashes, "\n  "))
	}
	if len(c.stuck) > 0 {
		problems = append(problems, fmt.Sprintf("threads stuck (a burst did not end within %v; %d later turns not sent): %v",
			*flagWait, c.unsent, c.stuck))
	}
	if c.faultOnce != "" {
		// Every fault point is reached by the workload (a supersede, a
		// pause, a resume) and fires once (its file marks that).
		for _, fp := range faultPoints {
			if fp == "after-supersede" && supersededOK < 1 {
				continue
			}
			if _, err := os.Stat(c.faultOnce + "." + fp); err != nil {
				problems = append(problems, fmt.Sprintf("the injected processor exit %s did not happen", fp))
			}
		}
	}
	if r.undecoded > 0 {
		problems = append(problems, fmt.Sprintf("%d messages in PARLEY_CHAT are not CloudEvents", r.undecoded))
	}
	if len(problems) > 0 {
		if len(problems) > 60 {
			t.Logf("%d problems; the first 60:", len(problems))
			problems = problems[:60]
		}
		t.Errorf("chaos found problems:\n%s", strings.Join(problems, "\n"))
	}
	return problemThreads
}

// failedOrCancelledTitle reports whether title belongs to a turn that
// failed or was superseded (its effects are not predictable).
func failedOrCancelledTitle(title string, turns []*turn, r *recorder) bool {
	for _, tr := range turns {
		if tr.kind != "plan" || !strings.HasPrefix(title, tr.name+": ") {
			continue
		}
		if len(r.cancelled[tr.turnID]) > 0 {
			return true
		}
		ends := r.ends[tr.turnID]
		return len(ends) > 0 && events.TypeOf(ends[0].event) == events.TypeTurnFailed
	}
	return false
}

func deadLetters(ctx context.Context, js jetstream.JetStream) string {
	cons, err := js.OrderedConsumer(ctx, events.StreamDeadLetter, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for range 20 {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			break
		}
		e, err := events.Decode(events.Header(m.Headers()), m.Data())
		if err != nil {
			continue
		}
		d, _ := events.Data[events.DeadLetter](e)
		fmt.Fprintf(&b, "  %s seq %d (%s/%s, %d deliveries): %s\n", d.Subject, d.StreamSeq, d.Stream, d.Consumer, d.NumDelivered, d.Reason)
	}
	return b.String()
}

func pcts(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[int(q*float64(len(ds)-1)+0.5)] }
	return fmt.Sprintf("%v / %v (n=%d, max %v)", at(0.5).Round(time.Millisecond), at(0.99).Round(time.Millisecond),
		len(ds), ds[len(ds)-1].Round(time.Millisecond))
}

func fmtCounts(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
