package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsserver"
	"github.com/parley-dev/parley/schema"
)

// syncBuffer is a bytes.Buffer safe for one writer and one poller.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// chatHarness is one `parley chat` running against a real embedded NATS
// server with every worker.
type chatHarness struct {
	t    *testing.T
	in   *io.PipeWriter
	out  *syncBuffer
	done chan error
	// seen is how much of out the last wait consumed.
	seen int
}

// startDev starts an embedded NATS server and all workers, with parley
// dev's policy (gate.DevConfig), and waits until the tool-executor has
// registered its tools.
func startDev(t *testing.T) (url string, ctx context.Context) {
	t.Helper()
	return startDevWith(t, agentFlags{PreExecuteTimeout: 2 * time.Second})
}

// startDevWith is startDev with the agent's flags af.
func startDevWith(t *testing.T, af agentFlags) (url string, ctx context.Context) {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	ctx, cancel := context.WithCancel(t.Context())
	logs := &syncBuffer{} // the workers' warnings, shown when a test fails
	wait, err := startWorkers(ctx, srv.ClientURL(), []string{"gate", "toolexec", "agent", "processor"},
		roleConfig{processor: processorFlags{PauseTTL: time.Minute, Concurrency: 4}, agent: af,
			gate: gateFlags{devPolicy: true}},
		&env{Globals: &Globals{LogLevel: "warn", LogFormat: "text"}, ctx: ctx, stderr: logs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = wait()
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})

	nc, err := client.Connect(srv.ClientURL(), "chat-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitToolsRegistered(t, b.JetStream())
	return srv.ClientURL(), ctx
}

// startChat runs chatCmd.Run on thread with a pipe as stdin.
func startChat(t *testing.T, url string, ctx context.Context, thread string) *chatHarness {
	t.Helper()
	return startChatAs(t, url, ctx, thread, "")
}

// startChatAs is startChat talking to agent ("": the default).
func startChatAs(t *testing.T, url string, ctx context.Context, thread, agent string) *chatHarness {
	t.Helper()
	pr, pw := io.Pipe()
	h := &chatHarness{t: t, in: pw, out: &syncBuffer{}, done: make(chan error, 1)}
	e := &env{Globals: &Globals{NATS: url, LogLevel: "error", LogFormat: "text"}, ctx: ctx,
		stdin: pr, stdout: h.out, stderr: io.Discard}
	go func() { h.done <- (&chatCmd{Thread: thread, User: "tester", AgentN: agent}).Run(e) }()
	t.Cleanup(func() {
		_ = pw.Close()
		if t.Failed() {
			t.Logf("chat output:\n%s", h.out.String())
			logThread(t, url, thread)
		}
	})
	h.waitFor("Type a message")
	return h
}

// logThread logs every stored event of thread, to diagnose a failure.
func logThread(t *testing.T, url, thread string) {
	nc, err := client.Connect(url, "chat-test-log")
	if err != nil {
		return
	}
	defer nc.Close()
	b, err := bus.New(nc, nil)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	items, err := client.New(b, "").Watch(ctx, client.WatchOptions{Thread: thread, FromStart: true})
	if err != nil {
		return
	}
	var sb strings.Builder
	for {
		select {
		case it := <-items:
			if it.Event != nil {
				fmt.Fprintf(&sb, "%d %s %s\n", it.Seq, it.Event.Type(), it.Event.Data())
			}
		case <-time.After(300 * time.Millisecond):
			t.Logf("events of thread %s:\n%s", thread, sb.String())
			return
		}
	}
}

// typeLine sends one line to the chat's stdin.
func (h *chatHarness) typeLine(s string) {
	h.t.Helper()
	if _, err := fmt.Fprintln(h.in, s); err != nil {
		h.t.Fatalf("typing %q: %v", s, err)
	}
}

// waitTimeout bounds each wait for output (a passing test takes about a
// second in all).
const waitTimeout = 15 * time.Second

// waitFor waits until the output after what earlier waits consumed
// contains want, and consumes up to the end of it.
func (h *chatHarness) waitFor(want string) {
	h.t.Helper()
	h.waitMatch(regexp.MustCompile(regexp.QuoteMeta(want)))
}

// waitMatch is waitFor with a regular expression; it returns the submatches.
func (h *chatHarness) waitMatch(re *regexp.Regexp) []string {
	h.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		out := h.out.String()
		if loc := re.FindStringSubmatchIndex(out[h.seen:]); loc != nil {
			m := re.FindStringSubmatch(out[h.seen:])
			h.seen += loc[1]
			return m
		}
		select {
		case err := <-h.done:
			h.t.Fatalf("chat ended (%v) before the output matched %q", err, re)
		default:
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no %q in the chat output within %v; after offset %d:\n%s", re, waitTimeout, h.seen, out[h.seen:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// quit closes stdin and checks that Run returns nil.
func (h *chatHarness) quit() {
	h.t.Helper()
	_ = h.in.Close()
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Fatalf("Run returned %v after the end of input", err)
		}
	case <-time.After(5 * time.Second):
		h.t.Fatal("Run did not return after the end of input")
	}
}

func TestChatChoiceAndConfirmation(t *testing.T) {
	url, ctx := startDev(t)
	h := startChat(t, url, ctx, "chat-test-about")

	h.typeLine("show me the About page")
	m := h.waitMatch(regexp.MustCompile(`(\d+)\) About us\n`))
	h.waitFor("Page (1-3): ")
	h.typeLine("9") // out of range: asked again
	h.waitFor("! choose a number from 1 to 3")
	h.typeLine(m[1])
	h.waitFor("→ accepted")
	h.waitFor(`assistant: Here it is. "About us"`)
	if strings.Contains(h.out.String(), "- Page: one of") {
		t.Error("the turn.paused prose was shown next to the question")
	}

	h.typeLine("delete the 10 draft articles")
	h.waitFor("tool:        delete_entities")
	h.waitFor(`"ids": [`)
	// The entities are named by their titles, looked up on the site.
	h.waitMatch(regexp.MustCompile(`entities:    \S+ "[^"]+"\n`))
	h.waitFor("annotations: writes, destructive")
	h.waitFor("Allow? [y/n/c, or t: allow delete_entities for this thread without asking")
	h.typeLine("maybe")
	h.waitFor("please answer y (allow once), t (allow for this thread), n (decline) or c (cancel)")
	h.typeLine("n")
	h.waitFor("Instructions for the agent (optional): ")
	h.typeLine("not now")
	h.waitFor("→ declined")
	h.waitFor("User declined execution of delete_entities: not now")
	h.waitFor("you> ")
	h.quit()
}

// parley dev's policy vetoes publishing, and deleting for the agent
// "support" (README's `parley chat -a support`): the chat shows each veto
// as the policy's notice, with its reason, and nothing asks to confirm.
func TestChatVetoNotice(t *testing.T) {
	url, ctx := startDev(t)
	h := startChat(t, url, ctx, "chat-test-veto")
	h.typeLine("publish the draft articles")
	h.waitFor("! Blocked by policy gate: publishing is not allowed here (publish_entities not run)\n")
	h.waitFor("you> ")

	s := startChatAs(t, url, ctx, "chat-test-veto-support", "support")
	s.typeLine("delete the 10 draft articles")
	s.waitFor("! Blocked by policy gate: support agents never delete content (delete_entities not run)\n")
	s.waitFor("you> ")
	for _, h := range []*chatHarness{h, s} {
		if out := h.out.String(); strings.Contains(out, "Allow?") {
			t.Errorf("a vetoed call was put to the person:\n%s", out)
		}
		h.quit()
	}
}

func TestChatForm(t *testing.T) {
	url, ctx := startDev(t)
	h := startChat(t, url, ctx, "chat-test-event")

	h.typeLine("create an event for the launch party")
	h.waitFor("? Please give a title and a date for the new event.")
	h.waitFor("  Title: ")
	h.typeLine("") // required: asked again
	h.waitFor("! Title is required")
	h.typeLine("Launch party")
	h.waitFor("  Date (date, YYYY-MM-DD): ")
	h.typeLine("tomorrow")
	h.waitFor("! must be a date (YYYY-MM-DD)")
	h.waitFor("  Date (date, YYYY-MM-DD): ")
	h.typeLine("2026-12-24")
	h.waitFor("→ accepted")
	h.waitFor(`assistant: Done. Created event "Launch party"`)
	h.waitFor("2026-12-24")

	// !cancel at any prompt cancels the form.
	h.typeLine("create an event for the launch party")
	h.waitFor("  Title: ")
	h.typeLine("!cancel")
	h.waitFor("→ cancelled")
	h.waitFor("assistant: ")
	h.waitFor("you> ")

	// Another user's message on the paused thread withdraws the question.
	h.typeLine("create an event for the launch party")
	h.waitFor("  Title: ")
	nc, err := client.Connect(url, "chat-test-other")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Another client of the same principal (the thread's owner; it may
	// not name an end user, as it is not trusted to).
	if _, err := client.New(b, "").Send(ctx, "chat-test-event", "", "list", ""); err != nil {
		t.Fatal(err)
	}
	h.waitFor("integrator: list")
	h.waitFor("! this question was withdrawn: a new user message started a new turn")
	h.waitFor("assistant: Found")
	h.waitFor("you> ")
	h.quit()
}

// TestChatFormKinds drives the prompts of every property kind with no bus:
// input comes from a channel, output goes to a buffer.
func TestChatFormKinds(t *testing.T) {
	lo, hi := 1.0, 10.0
	req := &schema.ElicitRequestParams{
		Message: "Tell us about you",
		RequestedSchema: schema.RequestedSchema{
			Type: "object",
			Properties: map[string]*schema.PropertySchema{
				"name":   {Type: "string", Title: "Name", Description: "Your full name"},
				"age":    {Type: "integer", Minimum: &lo, Maximum: &hi},
				"score":  {Type: "number"},
				"news":   {Type: "boolean", Default: []byte("true")},
				"color":  {Type: "string", Enum: []string{"r", "g"}, EnumNames: []string{"Red", "Green"}},
				"email":  {Type: "string", Format: "email"},
				"site":   {Type: "string", Format: "uri"},
				"when":   {Type: "string", Format: "date-time"},
				"remark": {Type: "string"},
				"size": {Type: "string", OneOf: []schema.EnumOption{{Const: "s", Title: "Small"}, {Const: "l", Title: "Large"}},
					Default: []byte(`"l"`)},
			},
			Required: []string{"name", "age", "color"},
		},
	}
	inputs := []string{
		"Ada",               // name
		"eleven", "11", "7", // age: not a number, above maximum, ok
		"green",                    // color, by label
		"nope@", "ada@example.com", // email
		"",         // news: default true
		"",         // remark: optional, omitted
		"x", "2.5", // score
		"example.com", "https://a.b/", // site
		"",                             // size: default l
		"noon", "2026-12-24T18:00:00Z", // when
	}
	lines := make(chan string, len(inputs))
	for _, l := range inputs {
		lines <- l
	}
	out := &syncBuffer{}
	s := &chatSession{ctx: t.Context(), out: out, lines: lines, echo: true}
	res, err := s.form(req)
	if err != nil {
		t.Fatalf("form: %v\n%s", err, out)
	}
	want := map[string]any{"name": "Ada", "age": int64(7), "color": "g", "email": "ada@example.com",
		"news": true, "score": 2.5, "size": "l", "site": "https://a.b/", "when": "2026-12-24T18:00:00Z"}
	if res.Action != schema.ActionAccept || fmt.Sprint(res.Content) != fmt.Sprint(want) {
		t.Errorf("got %s %v, want accept %v\n%s", res.Action, res.Content, want, out)
	}
	for _, w := range []string{
		"  Name: Your full name", "age (integer, 1 to 10): ", "! must be a whole number", "! must be at most 10",
		"    2) Green", "color (1-2): ", "! must be an email address", "news (y/n, default y): ",
		"remark (optional): ", "! must be a number", "size (1-2, default Large): ", "! must be an absolute URI", "! must be an RFC 3339 date-time",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}

	// !decline stops a form with a decline and no content.
	lines <- "!decline"
	res, err = s.form(req)
	if err != nil || res.Action != schema.ActionDecline || res.Content != nil {
		t.Errorf("!decline: got %+v, %v", res, err)
	}
	if err := res.Validate(req); err != nil {
		t.Errorf("the decline does not validate: %v", err)
	}
}

// Joining a thread that is already paused asks its pending question.
func TestChatJoinsPausedThread(t *testing.T) {
	url, ctx := startDev(t)
	first := startChat(t, url, ctx, "chat-test-join")
	first.typeLine("delete the 10 draft articles")
	first.waitFor("Allow? [y/n/c")
	first.quit() // leaves the question pending

	h := startChat(t, url, ctx, "chat-test-join")
	h.waitFor("The thread is waiting for 1 answer(s).")
	h.waitFor("tool:        delete_entities")
	h.waitFor("Allow? [y/n/c")
	h.typeLine("y") // an accept asks for no instructions
	h.waitFor("→ accepted")
	h.waitFor("Deleted 10 entities")
	if strings.Contains(h.out.String()[h.seen-200:], "Instructions") {
		t.Errorf("instructions were asked after an accept:\n%s", h.out.String())
	}
	h.quit()
}

// e on a confirmation edits the call's arguments: an edit the tool's
// schema refuses is named before anything is sent, and the edit allowed
// runs exactly (one draft deleted of ten).
func TestChatEditArguments(t *testing.T) {
	url, ctx := startDev(t)
	h := startChat(t, url, ctx, "chat-test-edit")
	h.typeLine("delete the 10 draft articles")
	h.waitFor("or e: edit the arguments] ")
	h.typeLine("e")
	h.waitFor("arguments: ")
	h.typeLine(`{"ids": []}`)
	h.waitFor("! arguments.ids: minItems")
	h.typeLine(`{"ids": ["article-7"]}`)
	h.waitFor(`"article-7"`)
	h.waitFor("Allow with these arguments? [y/n/c] ")
	h.typeLine("y")
	h.waitFor("→ accepted with your arguments")
	h.waitFor(`to {"ids":["article-7"]}`)
	h.waitFor("Deleted 1 entity")
	h.quit()
}

// With NATS down, a message is reported "not confirmed yet" (not "could
// not send"); it arrives once the server is back (nats.go sends what was
// published while disconnected); typing it again meanwhile resends the
// same event, which JetStream drops: the thread holds it once.
func TestChatUnconfirmedMessageIsSentOnceOnReconnect(t *testing.T) {
	dir := t.TempDir()
	srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr().String()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	url := srv.ClientURL()
	nc, err := client.Connect(url, "chat-test-streams")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(t.Context()); err != nil {
		t.Fatal(err)
	}

	pr, pw := io.Pipe()
	h := &chatHarness{t: t, in: pw, out: &syncBuffer{}, done: make(chan error, 1)}
	e := &env{Globals: &Globals{NATS: url, LogLevel: "error", LogFormat: "text"}, ctx: t.Context(),
		stdin: pr, stdout: h.out, stderr: io.Discard}
	go func() {
		h.done <- (&chatCmd{Thread: "chat-down", User: "tester", PublishTimeout: 1500 * time.Millisecond}).Run(e)
	}()
	t.Cleanup(func() {
		_ = pw.Close()
		if t.Failed() {
			t.Logf("chat output:\n%s", h.out.String())
		}
	})
	h.waitFor("Type a message")

	srv.Shutdown()
	srv.WaitForShutdown()
	h.waitFor("disconnected from NATS")
	h.typeLine("hello while down")
	h.waitFor("not confirmed yet")
	h.waitFor("It will be sent if the connection returns")
	if strings.Contains(h.out.String(), "could not send") {
		t.Error(`the chat said "could not send" for a message it will send on reconnect`)
	}
	// Retyping it resends the same event.
	h.typeLine("hello while down")
	h.waitFor("(sending it again with the same ID")
	h.waitFor("not confirmed yet")

	srv, err = natsserver.Start(natsserver.Options{Listen: addr, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	h.waitFor(`your message "hello while down" arrived after all`)
	h.typeLine("/quit") // no processor runs: do not wait for an answer
	if err := <-h.done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	// No processor runs, so the message waits in PARLEY_INPUT, once.
	if n := inputCount(t, srv.ClientURL(), events.InputSubject(events.PrincipalIntegrator, "chat-down", events.ChatTurnRequested)); n != 1 {
		t.Errorf("the thread holds %d turn.requested, want 1", n)
	}
}
