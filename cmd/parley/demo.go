package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/internal/natsserver"
	"github.com/parley-dev/parley/internal/starter"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

type demoCmd struct {
	JSON    bool          `name:"json" help:"Print every event on parley.chat.> in stream order, one CloudEvent JSON per line."`
	Verbose bool          `name:"verbose" short:"v" help:"Also print the workers' logs (stderr)."`
	Timeout time.Duration `name:"timeout" default:"30s" help:"How long to wait for each expected event."`
}

// demo is one run of the three seed scenarios.
type demo struct {
	e       *env
	cfg     *demoCmd
	url     string
	authDir string // the principals' nkey seeds
	client  *client.Client
	items   <-chan client.Item
	out     io.Writer // transcript (stdout, or discarded with --json)
	note    io.Writer // scenario headings and verdicts
	workers roleConfig
	logger  *slog.Logger
	wenv    *env           // the workers' environment (their logs)
	group   *starter.Group // every worker, processors included
}

func (c *demoCmd) Run(e *env) error {
	dir, err := os.MkdirTemp("", "parley-demo-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Like parley dev, the demo runs every role on its own credentials
	// (its driver, which also creates the streams, is the operator; the
	// tool-executor opens the demo site).
	authDir := filepath.Join(dir, "auth")
	if _, err := natsauth.Init(authDir, natsauth.Roles()); err != nil {
		return err
	}
	srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: dir,
		AuthConfig: filepath.Join(authDir, natsauth.AuthFile)})
	if err != nil {
		return err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	logw := io.Discard
	if c.Verbose {
		logw = e.stderr
	}
	d := &demo{e: e, cfg: c, url: srv.ClientURL(), authDir: authDir, out: e.stdout, note: e.stdout,
		logger: slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if c.JSON {
		d.out, d.note = io.Discard, e.stderr
	}
	d.workers = roleConfig{processor: processorFlags{PauseTTL: 10 * time.Minute, Concurrency: 8},
		agent: agentFlags{PreExecuteTimeout: 2 * time.Second, FormRevision: string(schema.Rev20251125)}} // parley chat renders 2025-11-25 forms
	d.wenv = &env{Globals: &Globals{LogLevel: "info", LogFormat: "text"}, ctx: ctx, stderr: logw}

	// Every worker runs in one group, so that one dying ends the demo with
	// its name. The gate, tool-executor and agent run for the whole demo;
	// the processor is started alone so scenario 3 can replace it.
	if d.group, err = startRoles(ctx, d.url, d.creds, []string{"gate", "toolexec", "agent"}, d.workers, d.wenv); err != nil {
		return err
	}
	stopProc1, err := d.startProcessor("processor-1")
	if err != nil {
		return err
	}

	if err := d.connect(ctx); err != nil {
		// A worker's death explains a failed set-up best: stop the
		// workers and report both, once.
		if werr := d.group.Stop(); werr != nil && !errors.Is(err, werr) {
			err = errors.Join(err, werr)
		}
		return err
	}
	defer d.client.Bus().Conn().Close()
	fmt.Fprintf(d.note, "parley demo: embedded NATS with JetStream at %s, store in %s\n", d.url, dir)
	fmt.Fprintln(d.note, "workers: processor-1, agent, toolexec, gate, each on its own NATS connection")
	results := []error{
		d.scenario("1. show me the About page", d.aboutPage),
		d.scenario("2. create an event for the launch party", d.createEvent),
		d.scenario("3. delete the 10 draft articles", func() error { return d.deleteDrafts(stopProc1) }),
	}
	d.drain(ctx)
	cancel()
	werr := d.group.Wait()
	if e.ctx.Err() != nil {
		return &exitError{code: exitInterrupted} // Ctrl-C: no scenario verdicts
	}
	failed := 0
	if werr != nil {
		// A worker that died, or did not drain cleanly, fails the demo
		// even when the scenarios got their answers.
		failed++
		fmt.Fprintf(d.note, "\nworkers: FAILED: %v\n", werr)
	}
	fmt.Fprintln(d.note)
	for i, err := range results {
		if err != nil {
			failed++
			fmt.Fprintf(d.note, "scenario %d: FAILED: %v\n", i+1, err)
		} else {
			fmt.Fprintf(d.note, "scenario %d: ok\n", i+1)
		}
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d checks failed (%d scenarios and the workers' stop)", failed, len(results)+1, len(results))}
	}
	fmt.Fprintln(d.note, "all scenarios ended as expected")
	return nil
}

// connect connects the demo's driver (the operator: it creates the
// streams) and waits until the tool-executor serves.
func (d *demo) connect(ctx context.Context) (err error) {
	nc, err := natsauth.Connect(d.url, "parley-demo", d.creds(natsauth.Admin), d.logger)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			nc.Close()
		}
	}()
	b, err := bus.New(nc, nil)
	if err != nil {
		return err
	}
	if err := b.EnsureStreams(ctx); err != nil {
		return err
	}
	d.client = client.New(b, "/parley/demo")
	if d.items, err = d.client.Watch(ctx, client.WatchOptions{FromStart: true}); err != nil {
		return err
	}
	return waitServing(ctx, d)
}

// startProcessor runs a processor instance in the demo's group; stop
// stops it alone and waits until it has drained.
func (d *demo) startProcessor(name string) (stop func(), err error) {
	r, err := workerRole(name, starter.RoleProcessor, d.url, d.creds, d.workers, d.wenv)
	if err != nil {
		return nil, err
	}
	stopOne := d.group.Go(r.Role)
	return func() {
		if err := stopOne(); err != nil {
			fmt.Fprintf(d.note, "%s: %v\n", name, err)
		}
	}, nil
}

// creds are principal's credentials.
func (d *demo) creds(principal string) natsauth.Credentials {
	return natsauth.Credentials{NKeyFile: filepath.Join(d.authDir, natsauth.SeedFile(principal)), Principal: principal}
}

// waitServing waits until the tool-executor serves: its entity lookup
// (parley.lookup.entities) answers, which it serves only once it has
// opened the demo site and registered its tools.
func waitServing(ctx context.Context, d *demo) error {
	deadline := time.Now().Add(d.cfg.Timeout)
	for time.Now().Before(deadline) {
		if _, err := d.client.LookupEntities(ctx, events.LookupEntitiesRequest{Query: "about", Limit: 1}); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.group.Context().Done():
			return fmt.Errorf("waiting for the tools: %w", context.Cause(d.group.Context()))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("the tool-executor did not serve in time")
}

func (d *demo) scenario(title string, f func() error) error {
	fmt.Fprintf(d.note, "\n=== %s\n", title)
	return f()
}

// expect reads (and prints) events until one of typ arrives on thread.
func (d *demo) expect(thread string, types ...events.Type) (*event.Event, error) {
	timeout := time.After(d.cfg.Timeout)
	for {
		select {
		case it, ok := <-d.items:
			if !ok {
				return nil, errors.New("event stream closed")
			}
			d.print(it)
			if it.Event == nil || it.Event.Subject() != thread {
				continue
			}
			for _, t := range types {
				if events.TypeOf(it.Event) == t {
					return it.Event, nil
				}
			}
			if events.TypeOf(it.Event) == events.TypeTurnFailed || events.TypeOf(it.Event) == events.TypeElicitationRejected {
				return it.Event, fmt.Errorf("unexpected %s: %s", it.Event.Type(), string(it.Event.Data()))
			}
		case <-timeout:
			return nil, fmt.Errorf("no %s on thread %s within %v", joinTypes(types), thread, d.cfg.Timeout)
		case <-d.group.Context().Done():
			// A worker died (or Ctrl-C): waiting longer is pointless.
			return nil, fmt.Errorf("waiting for %s on thread %s: %w", joinTypes(types), thread, context.Cause(d.group.Context()))
		}
	}
}

// drain prints what is left in the stream.
func (d *demo) drain(ctx context.Context) {
	last, err := d.client.Pending(ctx)
	if err != nil {
		return
	}
	timeout := time.After(2 * time.Second)
	for {
		select {
		case it, ok := <-d.items:
			if !ok {
				return
			}
			d.print(it)
			if it.Seq >= last {
				return
			}
		case <-timeout:
			return
		}
	}
}

func (d *demo) print(it client.Item) {
	if d.cfg.JSON {
		printItem(d.e.stdout, d.e.stderr, it, true)
		return
	}
	printItem(d.out, d.e.stderr, it, false)
}

func (d *demo) send(thread, text string) error {
	_, err := d.client.Send(d.e.ctx, thread, "", text, "")
	return err
}

// answer answers as the demo's principal (integrator), naming no end user:
// only a principal trusted to speak for users may (the processor's
// --trusted-principals).
func (d *demo) answer(thread, id string, action schema.ElicitAction, content map[string]any) error {
	_, err := d.client.Answer(d.e.ctx, thread, id, schema.ElicitResult{Action: action, Content: content}, "")
	return err
}

// question waits for elicitation.requested on thread and decodes it.
func (d *demo) question(thread string) (string, *schema.ElicitRequestParams, error) {
	ev, err := d.expect(thread, events.TypeElicitationRequested)
	if err != nil {
		return "", nil, err
	}
	p, err := events.Data[schema.ElicitRequestParams](ev)
	if err != nil {
		return "", nil, err
	}
	id, _ := p.Meta[schema.MetaElicitationID].(string)
	if id == "" {
		return "", nil, errors.New("elicitation.requested without _meta[drupal.org/ai.elicitation_id]")
	}
	if err := p.Validate(schema.Rev20250618); err != nil {
		return "", nil, fmt.Errorf("elicitation is not valid MCP 2025-06-18: %w", err)
	}
	return id, &p, nil
}

func (d *demo) completed(thread string) (*events.TurnCompleted, error) {
	ev, err := d.expect(thread, events.TypeTurnCompleted)
	if err != nil {
		return nil, err
	}
	tc, err := events.Data[events.TurnCompleted](ev)
	return &tc, err
}

func (d *demo) aboutPage() error {
	const thread = "demo-about"
	if err := d.send(thread, "show me the About page"); err != nil {
		return err
	}
	id, q, err := d.question(thread)
	if err != nil {
		return err
	}
	prop := q.RequestedSchema.Properties["id"]
	if prop == nil || len(prop.Enum) != 3 || len(prop.EnumNames) != 3 {
		return fmt.Errorf("want an enum question with 3 pages, got %+v", q.RequestedSchema)
	}
	choice := ""
	for i, name := range prop.EnumNames {
		if name == "About us" {
			choice = prop.Enum[i]
		}
	}
	if choice == "" {
		return fmt.Errorf("no page titled %q among %v", "About us", prop.EnumNames)
	}
	if err := d.answer(thread, id, schema.ActionAccept, map[string]any{"id": choice}); err != nil {
		return err
	}
	tc, err := d.completed(thread)
	if err != nil {
		return err
	}
	if !hasEntityLink(tc.Message.Content, choice) && !strings.Contains(tc.Message.Text, "About us") {
		return fmt.Errorf("the answer does not show the About us page: %q", tc.Message.Text)
	}
	return nil
}

func hasEntityLink(cs schema.ContentList, id string) bool {
	for _, c := range cs {
		if rl, ok := c.(*schema.ResourceLink); ok {
			b, _ := json.Marshal(rl.Meta[schema.MetaEntity])
			if strings.Contains(string(b), `"`+id+`"`) {
				return true
			}
		}
	}
	return false
}

func (d *demo) createEvent() error {
	const thread = "demo-event"
	if err := d.send(thread, "create an event for the launch party"); err != nil {
		return err
	}
	id, q, err := d.question(thread)
	if err != nil {
		return err
	}
	rs := q.RequestedSchema
	if rs.Properties["title"] == nil || rs.Properties["date"] == nil || rs.Properties["date"].Format != "date" || len(rs.Required) != 2 {
		return fmt.Errorf("want a form with title and date (format date), both required; got %+v", rs)
	}
	if err := d.answer(thread, id, schema.ActionAccept, map[string]any{"title": "Launch party", "date": "2026-12-12"}); err != nil {
		return err
	}
	tc, err := d.completed(thread)
	if err != nil {
		return err
	}
	// What the tool did, from the turn's events: the call ran and says
	// what it created; then the site lists the event (entity lookup).
	call := ran(tc, builtin.ToolCreateEvent)
	if call == nil || call.IsError || !strings.Contains(call.Summary, `"Launch party"`) || !strings.Contains(call.Summary, "2026-12-12") {
		return fmt.Errorf("want create_event to have created Launch party on 2026-12-12, the turn ran %+v", tc.ToolCalls)
	}
	found, err := d.client.LookupEntities(d.e.ctx, events.LookupEntitiesRequest{Query: "Launch party", Bundles: []string{builtin.TypeEvent}})
	if err != nil {
		return err
	}
	for _, en := range found.Entities {
		if en.Label == "Launch party" {
			return nil
		}
	}
	return errors.New("the site lists no event titled Launch party")
}

// ran returns the call of tool the turn ran (the last one, when it ran
// more than once), from its turn.completed; nil when it ran none.
func ran(tc *events.TurnCompleted, tool string) *events.ToolRan {
	for i := len(tc.ToolCalls) - 1; i >= 0; i-- {
		if tc.ToolCalls[i].Tool == tool {
			return &tc.ToolCalls[i]
		}
	}
	return nil
}

// drafts counts the site's draft articles, as the entity lookup lists
// them (every article's ID contains "article").
func (d *demo) drafts() (int, error) {
	found, err := d.client.LookupEntities(d.e.ctx, events.LookupEntitiesRequest{Query: builtin.TypeArticle,
		Bundles: []string{builtin.TypeArticle}, Limit: events.MaxLookupLimit})
	if err != nil {
		return 0, err
	}
	if found.Truncated {
		return 0, fmt.Errorf("more than %d articles: cannot count the drafts", events.MaxLookupLimit)
	}
	n := 0
	for _, en := range found.Entities {
		if en.Status == builtin.StatusDraft {
			n++
		}
	}
	return n, nil
}

func (d *demo) deleteDrafts(stopProc1 func()) error {
	const thread = "demo-delete"
	const instructions = "Keep them until the editor has reviewed them."
	if err := d.send(thread, "delete the 10 draft articles"); err != nil {
		return err
	}
	id, q, err := d.question(thread)
	if err != nil {
		return err
	}
	if !q.IsToolConfirmation() {
		return errors.New("want a tool confirmation (_meta[drupal.org/ai.tool_call])")
	}
	fmt.Fprintln(d.note, "--- declining, with instructions")
	if err := d.answer(thread, id, schema.ActionDecline, map[string]any{"instructions": instructions}); err != nil {
		return err
	}
	tc, err := d.completed(thread)
	if err != nil {
		return err
	}
	if !strings.Contains(tc.Message.Text, "User declined execution of delete_entities: "+instructions) {
		return fmt.Errorf("the model did not receive the decline: %q", tc.Message.Text)
	}
	if call := ran(tc, builtin.ToolDeleteEntities); call != nil {
		return fmt.Errorf("declined, yet the turn ran delete_entities: %+v", *call)
	}
	if n, err := d.drafts(); err != nil || n != 10 {
		return fmt.Errorf("after decline want 10 drafts, have %d (%v)", n, err)
	}

	fmt.Fprintln(d.note, "--- asking again")
	if err := d.send(thread, "delete the 10 draft articles"); err != nil {
		return err
	}
	id, _, err = d.question(thread)
	if err != nil {
		return err
	}
	if _, err := d.expect(thread, events.TypeTurnPaused); err != nil {
		return err
	}
	fmt.Fprintln(d.note, "--- the turn is paused in KV; stopping processor-1 and starting processor-2")
	stopProc1()
	stopProc2, err := d.startProcessor("processor-2")
	if err != nil {
		return err
	}
	defer stopProc2()
	fmt.Fprintln(d.note, "--- accepting (processor-2 resumes the turn)")
	if err := d.answer(thread, id, schema.ActionAccept, map[string]any{}); err != nil {
		return err
	}
	tc, err = d.completed(thread)
	if err != nil {
		return err
	}
	if !strings.Contains(tc.Message.Text, "Deleted 10") {
		return fmt.Errorf("want the deletion confirmed, got %q", tc.Message.Text)
	}
	if call := ran(tc, builtin.ToolDeleteEntities); call == nil || call.IsError || !strings.HasPrefix(call.Summary, "Deleted 10 entities") {
		return fmt.Errorf("want delete_entities to have deleted 10 entities, the turn ran %+v", tc.ToolCalls)
	}
	if n, err := d.drafts(); err != nil || n != 0 {
		return fmt.Errorf("after accept want 0 drafts, have %d (%v)", n, err)
	}
	return nil
}

// joinTypes lists types as "a or b".
func joinTypes(types []events.Type) string {
	s := make([]string, len(types))
	for i, t := range types {
		s[i] = string(t)
	}
	return strings.Join(s, " or ")
}
