package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// hostile is model or user text that would clear the screen, set the
// window title, write the clipboard (OSC 52), overwrite the line and
// reverse what follows, if printed raw.
const hostile = "ok\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x1b\\\rfake\u202egnp.exe\u009b31m"

func rawControls(s string) bool {
	for _, r := range s {
		if r != '\n' && r != '\t' && unsafeRune(r) {
			return true
		}
	}
	return false
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n\tindented": "plain text\n\tindented",
		"é ✓ 日本":                 "é ✓ 日本",
		"\x1b[31mred":            `\u001b[31mred`,
		"a\rb":                   `a\u000db`,
		"x\u202ey":               `x\u202ey`,
		"c1\u009b":               `c1\u009b`,
		"bad\xffbyte":            `bad\xffbyte`,
	} {
		if got := sanitize(in); got != want {
			t.Errorf("sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

// `parley events` (and send, answer, chat: the same writer) shows model
// text with its control characters escaped, in text and in JSON.
func TestEventsEscapeControlCharacters(t *testing.T) {
	ev, err := events.New("/parley/processor", events.TypeTurnCompleted, "t1", events.TurnCompleted{
		TurnID: "u1", Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: hostile}})
	if err != nil {
		t.Fatal(err)
	}
	for _, asJSON := range []bool{false, true} {
		var out, notes bytes.Buffer
		e := (&env{stdout: &out}).withSafeOutput()
		printItem(e.stdout, &notes, client.Item{Event: ev, Subject: "parley.chat.t1.turn.completed"}, asJSON)
		got := out.String()
		if rawControls(got) {
			t.Errorf("json=%v: raw control characters printed: %q", asJSON, got)
		}
		if !strings.Contains(got, `\u001b[2J`) {
			t.Errorf("json=%v: the escape is not shown: %q", asJSON, got)
		}
		if asJSON {
			var m map[string]any
			if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &m); err != nil {
				t.Errorf("escaped JSON line no longer parses: %v\n%s", err, got)
			} else if !strings.Contains(m["data"].(map[string]any)["message"].(map[string]any)["text"].(string), "\x1b[2J") {
				t.Error("the JSON line does not round-trip the original text")
			}
		}
	}
}

// `parley chat` escapes control characters in what it prints (here the
// user's own message, echoed, and the thread's events).
func TestChatEscapesControlCharacters(t *testing.T) {
	url, ctx := startDev(t)
	h := startChat(t, url, ctx, "chat-test-ansi")
	h.typeLine("show me the About page " + hostile)
	h.waitFor("Page (1-3): ")
	out := h.out.String()
	if rawControls(out) {
		t.Errorf("raw control characters printed:\n%q", out)
	}
	if !strings.Contains(out, `\u001b]0;pwned\u0007`) {
		t.Errorf("the escape is not shown:\n%s", out)
	}
	h.quit()
}
