package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Usage errors exit 2 with a message naming the flag or argument, before
// any connection is made (nothing listens on the --nats given).
func TestUsageErrors(t *testing.T) {
	nats := "--nats=nats://127.0.0.1:1"
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"processor", "--concurrency", "0"}, "--concurrency must be at least 1"},
		{[]string{"processor", "--pause-ttl", "500ms"}, "--pause-ttl must be at least 1s"},
		{[]string{"agent", "--pre-execute-timeout", "0s"}, "--pre-execute-timeout must be positive"},
		{[]string{"toolexec", "--replicas", "0"}, "--replicas must be 1 to 5"},
		{[]string{"gate", "--replicas", "6"}, "--replicas must be 1 to 5"},
		{[]string{"dev", "--concurrency=-1"}, "--concurrency must be at least 1"},
		{[]string{"bench", "--concurrency", "0"}, "--concurrency must be at least 1"},
		{[]string{"bench", "--profile-phase", "turns", "--cpuprofile", "x"}, "--profile-phase must be one of floor, floor_min, turn"},
		{[]string{"bench", "--profile-phase", "turn"}, "--profile-phase needs --cpuprofile or --memprofile"},
		{[]string{"send", "-t", "t1", ""}, "message text: required"},
		{[]string{"send", "-t", "t1", " ", " "}, "message text: required"},
		{[]string{"send", "-t", "a b", "hi"}, "--thread"},
		{[]string{"send", "hi"}, "--thread: required"},
		{[]string{"send", "-t", "t1", "-a", "a.b", "hi"}, "--agent"},
		{[]string{"answer", "-e", "x", "cancel"}, "--thread: required"},
		{[]string{"agent", "--model-url", "http://127.0.0.1:9"}, "--model: required with --model-url"},
		{[]string{"answer", "-t", "t1", "-e", "x", "accept", "--content", "null"}, "--content: must be a JSON object, not null"},
		{[]string{"answer", "-t", "t1", "-e", "x", "accept", "--content", "[1]"}, "--content: must be a JSON object, not an array"},
		{[]string{"answer", "-t", "t1", "-e", "x", "accept", "--content", "{} {}"}, "--content: must be one JSON object"},
		{[]string{"answer", "-t", "t1", "-e", "x", "accept", "--content", "@/nonexistent/c.json"}, "--content:"},
		{[]string{"answer", "-t", "t1", "-e", "x", "accept", "--arguments", "{\"ids\": [\"a\""}, "--arguments: must be a JSON object"},
		{[]string{"answer", "-t", "t1", "-e", "x", "accept", "--arguments", "[\"a\"]"}, "--arguments: must be a JSON object, not an array"},
		{[]string{"answer", "-t", "t1", "-e", "x", "decline", "--arguments", "{}"}, "--arguments: only with accept"},
		{[]string{"events", "-t", "a.b"}, "--thread"},
		{[]string{"dev"}, "--nats does not apply: dev starts its own NATS server"},
		{[]string{"demo"}, "--nats does not apply: demo starts its own NATS server"},
		{[]string{"send", "-t", "t1", "--wait", "0s", "hi"}, "--wait must be positive"},
		{[]string{"answer", "-t", "t1", "-e", "x", "--publish-timeout=-1s", "cancel"}, "--publish-timeout must be positive"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append(tt.args, nats), strings.NewReader(""), &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tt.want)
			}
		})
	}
}

// A message that cannot be delivered is "not confirmed" (3), not a usage
// error, and says why in words.
func TestSendUnreachableExits3(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"send", "--nats", "nats://127.0.0.1:1", "-t", "t1", "hi"}, strings.NewReader(""), &stdout, &stderr); code != 3 {
		t.Errorf("exit %d, want 3; stderr %q", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "no NATS server is reachable") {
		t.Errorf("stderr %q does not say the server is unreachable", stderr.String())
	}
}

// A bare `parley` lists every command (it used to print a list cut off
// after five) and exits 0.
func TestBareParleyListsEveryCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(nil, strings.NewReader(""), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	for _, cmd := range []string{"demo", "dev", "processor", "agent", "toolexec", "gate", "send", "answer", "events", "chat", "validate", "bench"} {
		if !strings.Contains(stdout.String(), "  "+cmd) {
			t.Errorf("bare parley does not list %q:\n%s", cmd, stdout.String())
		}
	}
}

// The exit statuses of send and answer are in their help.
func TestSendHelpHasExitCodes(t *testing.T) {
	for _, cmd := range []string{"send", "answer"} {
		var stdout, stderr bytes.Buffer
		run([]string{cmd, "--help"}, strings.NewReader(""), &stdout, &stderr)
		for _, w := range []string{"Exit status:", "not confirmed", "no verdict within --wait", "130"} {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("%s --help lacks %q", cmd, w)
			}
		}
	}
}

// Logs are text on a terminal and JSON otherwise, unless asked.
func TestLogFormat(t *testing.T) {
	var buf bytes.Buffer
	(&Globals{LogLevel: "info", LogFormat: "auto"}).logger(&buf).Info("hello")
	if !strings.HasPrefix(buf.String(), "{") {
		t.Errorf("auto to a non-terminal: %q, want JSON", buf.String())
	}
	buf.Reset()
	(&Globals{LogLevel: "info", LogFormat: "text"}).logger(&buf).Info("hello")
	if !strings.Contains(buf.String(), "msg=hello") {
		t.Errorf("text: %q", buf.String())
	}
}

// Errors from contexts and NATS reach people in words.
func TestHumanize(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("reading stream: %w", context.DeadlineExceeded), "reading stream: no answer from the NATS server in time"},
		{fmt.Errorf("publishing: %w", nats.ErrNoResponders), "publishing: no JetStream stream answered"},
		{errors.New("plain"), "plain"},
	} {
		if got := humanize(tt.err); !strings.HasPrefix(got, tt.want) {
			t.Errorf("humanize(%v) = %q, want %q...", tt.err, got, tt.want)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"help", "send"}, {"help", "validate"}, {"--help"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, strings.NewReader(""), &stdout, &stderr); code != 0 || stdout.Len() == 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and help", args, code, stdout.String(), stderr.String())
		}
	}
}

func TestReadContent(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(file, []byte(`{"instructions": "not yet"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ arg, stdin string }{
		{`{"instructions":"not yet"}`, ""},
		{"@" + file, ""},
		{"-", ` {"instructions": "not yet"} ` + "\n"},
	} {
		got, err := readContent(tt.arg, strings.NewReader(tt.stdin))
		if err != nil || got["instructions"] != "not yet" {
			t.Errorf("readContent(%q) = %v, %v", tt.arg, got, err)
		}
	}
}

func mustEvent(t *testing.T, typ events.Type, data any) *event.Event {
	t.Helper()
	ev, err := events.New(events.SourceCLI, typ, "t1", data)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestDescribe(t *testing.T) {
	maxLen, total := 10, 5.0
	tests := []struct {
		ev   *event.Event
		want []string
	}{
		{mustEvent(t, events.TypeElicitationRequested, schema.ElicitRequestParams{
			Message: "Which page?",
			RequestedSchema: schema.RequestedSchema{Type: "object", Required: []string{"id"}, Properties: map[string]*schema.PropertySchema{
				"id":   {Type: "string", Enum: []string{"page-1", "page-3"}, EnumNames: []string{"About us", "About the team"}},
				"note": {Type: "string", MaxLength: &maxLen},
			}},
			Meta: schema.Meta{schema.MetaElicitationID: "e1"},
		}), []string{`form e1 "Which page?" fields: id: page-1 "About us" | page-3 "About the team"; note`}},
		{mustEvent(t, events.TypeElicitationExpired, events.ElicitationExpired{TurnID: "tu1", ElicitationIDs: []string{"e1", "e2"}}),
			[]string{"elicitation.expired", "e1, e2 unanswered", "tu1"}},
		{mustEvent(t, events.TypeElicitationCancelled, events.ElicitationCancelled{TurnID: "tu1", ElicitationIDs: []string{"e1"}, Reason: "a new user message started a new turn"}),
			[]string{"e1 withdrawn (turn tu1): a new user message started a new turn"}},
		{mustEvent(t, events.TypeTurnRejected, events.TurnRejected{RequestEventID: "r1", Reason: "invalid_event", Errors: []schema.Violation{{Path: "message.text", Rule: "required"}}}),
			[]string{"message r1 refused: invalid_event: errors: message.text: required"}},
		{mustEvent(t, events.TypeElicitationRejected, events.ElicitationRejected{ElicitationID: "e1", Reason: "invalid_content", Detail: "does not fit",
			Errors: []schema.Violation{{Path: "title", Rule: "required"}, {Path: "date", Rule: "must be a date"}}}),
			[]string{"e1 invalid_content: does not fit | errors: title: required; date: must be a date"}},
		{mustEvent(t, events.TypeElicitationResponded, json.RawMessage(`{"elicitationId":"e1","action":"accept","_meta":{"dev.parley/arguments":{"ids":["article-2"]}}}`)),
			[]string{`e1 accept with changed arguments {"ids":["article-2"]}`}},
		{mustEvent(t, events.TypeElicitationRejected, events.ElicitationRejected{ElicitationID: "e1", Reason: "already_consumed"}),
			[]string{"e1 already_consumed"}},
		{mustEvent(t, events.TypeTurnPaused, events.TurnPaused{TurnID: "tu1", Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "Allow?\n\nReally."}}),
			[]string{"assistant: Allow?\n\n    Really."}},
		{mustEvent(t, events.TypeProgress, schema.Progress{Progress: 2, Total: &total, Message: "Copying"}),
			[]string{"2/5 Copying"}},
	}
	for _, tt := range tests {
		got := describe(tt.ev)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("describe(%s) = %q; want it to contain %q", tt.ev.Type(), got, w)
			}
		}
		for _, line := range strings.Split(got, "\n") {
			if strings.TrimRight(line, " \t") != line {
				t.Errorf("describe(%s): trailing space in %q", tt.ev.Type(), line)
			}
		}
	}
}

// Progress without a total is an ordinal (parley's agent counts steps
// and phases in it): only its status shows, not the number.
func TestDescribeProgressOrdinal(t *testing.T) {
	got := describe(mustEvent(t, events.TypeProgress, schema.Progress{Progress: 16400, Message: "Calling the model"}))
	if !strings.HasSuffix(got, " Calling the model") || strings.Contains(got, "16400") {
		t.Errorf("describe(progress) = %q; want the status without the ordinal", got)
	}
}

// Items that are not CloudEvents go to the notes writer (stderr), so
// `--json` output stays JSON lines.
func TestPrintItemNotes(t *testing.T) {
	var out, notes bytes.Buffer
	printItem(&out, &notes, client.Item{Subject: "parley.chat.t1.turn.requested", Err: os.ErrInvalid}, true)
	if out.Len() != 0 || !strings.Contains(notes.String(), "not a valid CloudEvent") {
		t.Errorf("stdout %q, notes %q", out.String(), notes.String())
	}
}

// A paused send shows, under a confirmation, the call that runs on accept
// (tool and arguments: what the person allows, and what --arguments would
// replace), and offers --arguments only where an edit can be taken: a
// confirmation carrying the tool's input schema, never a form.
func TestPrintVerdictShowsConfirmedCall(t *testing.T) {
	confirm := mustEvent(t, events.TypeElicitationRequested, schema.ElicitRequestParams{
		Message:         "Allow the agent to run \"Delete site entities\"?",
		RequestedSchema: schema.RequestedSchema{Type: "object", Properties: map[string]*schema.PropertySchema{schema.InstructionsProperty: {Type: "string"}}},
		Meta: schema.Meta{schema.MetaElicitationID: "e1",
			schema.MetaToolCall:    schema.ToolCallMeta{Name: "delete_entities", ToolID: "call_1", Arguments: json.RawMessage(`{ "ids": ["article-2", "article-4"] }`)},
			schema.MetaInputSchema: json.RawMessage(`{"type":"object"}`)},
	})
	plain := mustEvent(t, events.TypeElicitationRequested, schema.ElicitRequestParams{
		Message:         "Allow?",
		RequestedSchema: schema.RequestedSchema{Type: "object", Properties: map[string]*schema.PropertySchema{schema.InstructionsProperty: {Type: "string"}}},
		Meta:            schema.Meta{schema.MetaElicitationID: "e2", schema.MetaToolCall: schema.ToolCallMeta{Name: "t", ToolID: "call_2"}},
	})
	form := mustEvent(t, events.TypeElicitationRequested, schema.ElicitRequestParams{
		Message:         "Title?",
		RequestedSchema: schema.RequestedSchema{Type: "object", Properties: map[string]*schema.PropertySchema{"title": {Type: "string"}}},
		Meta:            schema.Meta{schema.MetaElicitationID: "e3"},
	})
	sent := mustEvent(t, events.TypeTurnRequested, events.TurnRequested{Message: schema.ChatMessage{Role: schema.RoleUser, Text: "delete"}})
	var b strings.Builder
	printVerdict(&b, sent, &client.Verdict{Outcome: client.OutcomePaused, Questions: []*event.Event{confirm, plain, form}}, false)
	out := b.String()
	for _, want := range []string{
		"\n  tool: delete_entities arguments: {\"ids\":[\"article-2\",\"article-4\"]}\n",
		"\n  tool: t arguments: {}\n",
		`--elicitation e1 accept|decline|cancel [--content '{"instructions":"…"}'] [--arguments JSON]` + "\n",
		`--elicitation e2 accept|decline|cancel [--content '{"instructions":"…"}']` + "\n",
		"--elicitation e3 accept|decline|cancel [--content JSON]\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("printVerdict printed\n%s\nwant it to contain %q", out, want)
		}
	}
	if strings.Count(out, "tool: ") != 2 {
		t.Errorf("printVerdict printed\n%s\nwant a tool line under each confirmation only", out)
	}
}
