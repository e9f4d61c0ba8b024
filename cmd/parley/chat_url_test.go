package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/parley-dev/parley/schema"
)

// A URL-mode elicitation is shown with its full URL and its host, asks for
// explicit consent (anything but y/n/c asks again), and the answer carries
// no content; a look-alike host is flagged.
func TestChatURLConsent(t *testing.T) {
	req := &schema.ElicitRequestParams{Mode: schema.ModeURL, Message: "Sign in to Example",
		URL: "https://auth.example.com/authorize?client=parley&state=abc", ElicitationID: "el-1"}
	lines := make(chan string, 4)
	lines <- "open"
	lines <- "y"
	out := &syncBuffer{}
	s := &chatSession{ctx: t.Context(), out: out, lines: lines, echo: true}
	res, err := s.urlConsent(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != schema.ActionAccept || res.Content != nil || res.Validate(req) != nil {
		t.Fatalf("got %+v", res)
	}
	for _, w := range []string{"? Sign in to Example", "parley does not open it", "host: auth.example.com",
		"url:  https://auth.example.com/authorize?client=parley&state=abc", "please answer y (consent)"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out.String(), "non-ASCII") {
		t.Errorf("ASCII host flagged:\n%s", out)
	}

	lines <- "n"
	idn := &schema.ElicitRequestParams{Mode: schema.ModeURL, Message: "m", URL: "https://exаmple.com/", ElicitationID: "e"} // Cyrillic а
	out2 := &syncBuffer{}
	s = &chatSession{ctx: t.Context(), out: out2, lines: lines, echo: true}
	if res, err := s.urlConsent(idn); err != nil || res.Action != schema.ActionDecline || res.Content != nil {
		t.Fatalf("decline: %+v %v", res, err)
	}
	if !strings.Contains(out2.String(), "non-ASCII characters") {
		t.Errorf("look-alike host not flagged:\n%s", out2)
	}
}

func TestLookAlikeHost(t *testing.T) {
	for host, want := range map[string]bool{"auth.example.com": false, "exаmple.com": true, "xn--exmple-4nf.com": true,
		"login.XN--80ak6aa92e.com": true, "example.com:8443": false, "": false} {
		if got := lookAlikeHost(host); got != want {
			t.Errorf("lookAlikeHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// --form-revision takes only the MCP revisions parley knows (usage error,
// exit 2, otherwise).
func TestFormRevisionFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"agent", "--form-revision", "2024-11-05", "--nats=nats://127.0.0.1:1"}, strings.NewReader(""), &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--form-revision") {
		t.Fatalf("exit %d, stderr %q; want 2 naming --form-revision", code, stderr.String())
	}
}

// `parley dev` asks forms in 2025-11-25 by default (its web chat and
// `parley chat` render it); `parley agent` keeps 2025-06-18, and the
// variable dev sets does not leak to it.
func TestFormRevisionDefaults(t *testing.T) {
	for cmd, want := range map[string]string{"dev": `--form-revision="2025-11-25"`, "agent": `--form-revision="2025-06-18"`} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{cmd, "--help"}, strings.NewReader(""), &stdout, &stderr); code != 0 {
			t.Fatalf("%s --help: exit %d, stderr %q", cmd, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("parley %s --help does not show %s:\n%s", cmd, want, stdout.String())
		}
	}
}
