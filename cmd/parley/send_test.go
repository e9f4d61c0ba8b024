package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsserver"
	"github.com/parley-dev/parley/schema"
)

// runCLI runs the parley command line with args against url and returns its
// exit status, stdout and stderr.
func runCLI(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append(args, "--nats", url), strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// echoed stores a user message on thread in PARLEY_CHAT as the processor's
// echo of an accepted turn.requested (these tests run no processor).
func echoed(t *testing.T, cl *client.Client, thread, text string) {
	t.Helper()
	e, err := cl.TurnRequest(thread, "", text, "")
	if err != nil {
		t.Fatal(err)
	}
	e.SetExtension(events.ExtPrincipal, events.PrincipalIntegrator)
	if _, err := client.Publish(t.Context(), cl.Bus(), events.ChatSubject(thread, events.ChatTurnRequested), e, client.RetryPolicy{}); err != nil {
		t.Fatal(err)
	}
}

// inputCount counts the messages of PARLEY_INPUT on subject.
func inputCount(t *testing.T, url, subject string) uint64 {
	t.Helper()
	nc, err := client.Connect(url, "input-count")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.JetStream().Stream(t.Context(), events.StreamInput)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// chatConsumers lists PARLEY_CHAT's consumers that are not durable (those
// a command made for itself).
func chatConsumers(t *testing.T, url string) []string {
	t.Helper()
	nc, err := client.Connect(url, "consumer-count")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.JetStream().Stream(t.Context(), events.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for ci := range s.ListConsumers(t.Context()).Info() {
		if ci.Config.Durable == "" {
			names = append(names, ci.Name)
		}
	}
	return names
}

// send and answer wait for the processor's verdict, print it, and exit
// non-zero on a refusal; they leave no consumer behind.
func TestSendAndAnswerVerdicts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every worker")
	}
	url, _ := startDev(t)

	// A paused turn: the question and its ID, and how to answer.
	code, out, errOut := runCLI(t, url, "send", "-t", "v1", "--json", "show me the About page")
	if code != 0 {
		t.Fatalf("send: exit %d\n%s\n%s", code, out, errOut)
	}
	var q *event.Event
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var e event.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("--json line is not a CloudEvent: %v\n%s", err, sc.Text())
		}
		if events.TypeOf(&e) == events.TypeElicitationRequested {
			q = &e
		}
	}
	if q == nil {
		t.Fatalf("send --json printed no elicitation.requested:\n%s", out)
	}
	p, err := events.Data[schema.ElicitRequestParams](q)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := p.Meta[schema.MetaElicitationID].(string)
	page := p.RequestedSchema.Properties["id"].Enum[0]

	// Readable output names the question and the command that answers it.
	code, out, _ = runCLI(t, url, "send", "-t", "v2", "show me the About page")
	if code != 0 || !strings.Contains(out, "paused: the turn asks 1 question") ||
		!regexp.MustCompile(`answer with: parley answer --thread v2 --elicitation \S+ accept`).MatchString(out) {
		t.Errorf("send (readable): exit %d\n%s", code, out)
	}

	tests := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"content that does not fit", []string{"answer", "-t", "v1", "-e", id, "accept", "--content", `{"id": "no-such-page"}`}, 1, "invalid_content"},
		{"unknown elicitation", []string{"answer", "-t", "v1", "-e", "no-such-question", "accept"}, 1, "unknown_or_expired"},
		{"unknown thread", []string{"answer", "-t", "nothread", "-e", id, "cancel"}, 1, "unknown_or_expired"},
		{"accepted", []string{"answer", "-t", "v1", "-e", id, "accept", "--content", `{"id": "` + page + `"}`}, 0, "accepted"},
		{"a second answer", []string{"answer", "-t", "v1", "-e", id, "accept", "--content", `{"id": "` + page + `"}`}, 1, "already_consumed"},
		{"a message too large", []string{"send", "-t", "v3", strings.Repeat("x", 40000)}, 1, "message_too_large"},
		{"completed", []string{"send", "-t", "v4", "list everything"}, 0, "completed:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, url, tt.args...)
			if code != tt.code || !strings.Contains(out, tt.contains) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d and %q", code, out, errOut, tt.code, tt.contains)
			}
		})
	}

	// --no-wait prints the event ID once stored, and waits for nothing.
	code, out, _ = runCLI(t, url, "send", "-t", "v5", "--no-wait", "list everything")
	if code != 0 || !regexp.MustCompile(`^[0-9a-f-]{36}\n$`).MatchString(out) {
		t.Errorf("send --no-wait: exit %d, stdout %q; want 0 and the event ID", code, out)
	}

	// A resend under the same --id stores nothing new and reports the
	// original's verdict.
	const resendID = "11111111-2222-4333-8444-555555555555"
	code1, out1, _ := runCLI(t, url, "send", "-t", "v6", "--id", resendID, "show me the About page")
	code2, out2, errOut2 := runCLI(t, url, "send", "-t", "v6", "--id", resendID, "show me the About page")
	if code1 != 0 || code2 != 0 || !strings.Contains(out2, "paused") || !strings.Contains(errOut2, "already stored") {
		t.Errorf("resend: exits %d, %d; stdout %q / %q; stderr %q", code1, code2, out1, out2, errOut2)
	}
	if code, out, _ := runCLI(t, url, "events", "-t", "v6", "--json"); code != 0 || strings.Count(out, `"type":"dev.parley.turn.requested"`) != 1 {
		t.Errorf("thread v6 after a resend: exit %d, want one turn.requested:\n%s", code, out)
	}

	if names := chatConsumers(t, url); len(names) != 0 {
		t.Errorf("consumers left behind on PARLEY_CHAT: %v", names)
	}
}

// streamsOnly starts an embedded server with parley's streams and no
// worker.
func streamsOnly(t *testing.T) string {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := client.Connect(srv.ClientURL(), "streams")
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
	return srv.ClientURL()
}

// With no processor, send stores the message and says it got no verdict
// (exit 4), naming where the message stands; `events` then leaves no
// consumer behind.
func TestSendNoVerdictExits4(t *testing.T) {
	url := streamsOnly(t)
	code, out, errOut := runCLI(t, url, "send", "-t", "nv", "--wait", "500ms", "hello")
	if code != 4 || !strings.Contains(errOut, "no verdict came within") || !strings.Contains(errOut, "not yet taken by a processor") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 4 and the thread's state", code, out, errOut)
	}
	// Not taken by a processor, so not echoed into PARLEY_CHAT: the
	// message waits in PARLEY_INPUT.
	if n := inputCount(t, url, events.InputSubject(events.PrincipalIntegrator, "nv", events.ChatTurnRequested)); n != 1 {
		t.Errorf("PARLEY_INPUT holds %d messages of nv, want 1", n)
	}
	code, out, _ = runCLI(t, url, "events", "-t", "nv")
	if code != 0 || strings.Contains(out, "user: hello") {
		t.Errorf("events: exit %d, %q; want 0 and no message (none was accepted yet)", code, out)
	}
	if names := chatConsumers(t, url); len(names) != 0 {
		t.Errorf("consumers left behind on PARLEY_CHAT: %v", names)
	}
}

// Ctrl-C while send waits exits 130 with no "context canceled".
func TestSendInterruptedExits130(t *testing.T) {
	url := streamsOnly(t)
	go func() {
		time.Sleep(time.Second)
		_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
	}()
	code, _, errOut := runCLI(t, url, "send", "-t", "ctrlc", "--wait", "20s", "hello")
	if code != 130 || strings.Contains(errOut, "context") {
		t.Errorf("exit %d, stderr %q; want 130 and no context error", code, errOut)
	}
}

// `events --follow` says on stderr while it is disconnected, resumes after
// a NATS restart without repeating or losing an event, and leaves no
// consumer behind when it ends.
func TestEventsFollowThroughRestart(t *testing.T) {
	dir := t.TempDir()
	srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	addr, url := srv.Addr().String(), srv.ClientURL()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := client.Connect(url, "events-test")
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
	cl := client.New(b, "")
	echoed(t, cl, "ef", "first")

	ctx, cancel := context.WithCancel(t.Context())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- (&eventsCmd{Thread: "ef", Follow: true}).Run(&env{Globals: &Globals{NATS: url}, ctx: ctx,
			stdin: strings.NewReader(""), stdout: stdout, stderr: stderr})
	}()
	waitOut := func(b *syncBuffer, want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(b.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q within 20s; stdout:\n%s\nstderr:\n%s", want, stdout.String(), stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitOut(stdout, "user: first")
	srv.Shutdown()
	srv.WaitForShutdown()
	waitOut(stderr, "disconnected from NATS")
	if srv, err = natsserver.Start(natsserver.Options{Listen: addr, DataDir: dir}); err != nil {
		t.Fatal(err)
	}
	waitOut(stderr, "reconnected to NATS")
	echoed(t, cl, "ef", "second")
	waitOut(stdout, "user: second")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("events --follow: %v", err)
	}
	if n := strings.Count(stdout.String(), "user: first"); n != 1 {
		t.Errorf("the first event was printed %d times", n)
	}
	if names := chatConsumers(t, url); len(names) != 0 {
		t.Errorf("consumers left behind on PARLEY_CHAT: %v", names)
	}
}

// confirmationOf sends text on thread and returns the confirmation the
// turn pauses on.
func confirmationOf(t *testing.T, url, thread, text string) schema.ElicitRequestParams {
	t.Helper()
	code, out, errOut := runCLI(t, url, "send", "-t", thread, "--json", text)
	if code != 0 {
		t.Fatalf("send: exit %d\n%s\n%s", code, out, errOut)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e event.Event
		if json.Unmarshal(sc.Bytes(), &e) == nil && events.TypeOf(&e) == events.TypeElicitationRequested {
			p, err := events.Data[schema.ElicitRequestParams](&e)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatalf("send printed no confirmation:\n%s", out)
	return schema.ElicitRequestParams{}
}

// parley answer … accept --arguments runs exactly the edited call: of
// the drafts the model meant to delete, only article-2 goes, and the
// final message says the person changed the arguments. An invalid edit
// exits 1 naming the field, and the question stays open for the valid one.
func TestAnswerWithEditedArguments(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every worker")
	}
	url, _ := startDev(t)
	q := confirmationOf(t, url, "edit1", "delete the draft articles")
	id, _ := q.Meta[schema.MetaElicitationID].(string)
	tc, err := q.Meta.ToolCall()
	if err != nil || !strings.Contains(string(tc.Arguments), "article-4") {
		t.Fatalf("confirmation %+v (%v), want delete_entities of the drafts", tc, err)
	}

	code, out, errOut := runCLI(t, url, "answer", "-t", "edit1", "-e", id, "accept", "--arguments", `{"ids":[]}`)
	if code != 1 || !strings.Contains(out+errOut, `_meta["dev.parley/arguments"].ids`) || !strings.Contains(out+errOut, "still open") {
		t.Fatalf("invalid edit: exit %d\n%s\n%s\nwant 1 naming the field, the question still open", code, out, errOut)
	}
	code, out, errOut = runCLI(t, url, "answer", "-t", "edit1", "-e", id, "accept", "--arguments", `{"ids":["article-2"]}`)
	if code != 0 || !strings.Contains(out, "accepted") {
		t.Fatalf("valid edit: exit %d\n%s\n%s", code, out, errOut)
	}

	var final events.TurnCompleted
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, out, _ := runCLI(t, url, "events", "-t", "edit1", "--json")
		sc := bufio.NewScanner(strings.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e event.Event
			if json.Unmarshal(sc.Bytes(), &e) == nil && events.TypeOf(&e) == events.TypeTurnCompleted {
				final, _ = events.Data[events.TurnCompleted](&e)
			}
		}
		if final.TurnID != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no turn.completed on edit1 within 20s:\n%s", out)
		}
	}
	text := final.Message.Text
	if !strings.Contains(text, "Deleted 1 entity") || !strings.Contains(text, "article-2") || strings.Contains(text, "(article-4)") ||
		!strings.Contains(text, `to {"ids":["article-2"]}`) {
		t.Errorf("final message %q, want exactly article-2 deleted and the edit named", text)
	}
	t.Logf("final message: %s", text)
	if d := final.Decisions; len(d) != 2 || d[1].Tool != "delete_entities" || !d[1].Edited || !strings.Contains(string(d[1].OriginalArguments), "article-4") {
		t.Errorf("decisions %+v, want the call marked edited with the model's arguments", final.Decisions)
	}
	if len(final.ToolCalls) != 2 || string(final.ToolCalls[1].Arguments) != `{"ids":["article-2"]}` {
		t.Errorf("tool calls %+v, want delete_entities run with the edit", final.ToolCalls)
	}

	// The site: article-2 is gone, the other drafts are still there.
	tc2, _ := confirmationOf(t, url, "edit2", "delete the draft articles").Meta.ToolCall()
	if args := string(tc2.Arguments); strings.Contains(args, `"article-2"`) || !strings.Contains(args, `"article-4"`) {
		t.Errorf("drafts after the edited delete: %s, want all but article-2", args)
	}
}
