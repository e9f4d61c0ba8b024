package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsauth"
)

// send --ref sends a context reference: the turn completes with what the
// scripted model could know only from the resolved reference (the About
// page's body), the echoed turn.requested carries the resource_link with
// _meta["drupal.org/ai.entity"], and the answer links back to the page.
// A reference to an entity that does not exist refuses the message.
func TestSendReference(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every worker")
	}
	url, _ := startDev(t)
	code, out, errOut := runCLI(t, url, "send", "-t", "r1", "--ref", "page:page-1", "summarise this")
	if code != 0 || !strings.Contains(out, "The about us page of the demo site.") {
		t.Fatalf("send --ref: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	t.Logf("send --ref:\n%s", out)
	code, out, _ = runCLI(t, url, "events", "-t", "r1", "--json")
	if code != 0 {
		t.Fatalf("events: exit %d", code)
	}
	var req, done string
	for line := range strings.Lines(out) {
		switch {
		case strings.Contains(line, `"type":"dev.parley.turn.requested"`):
			req = line
		case strings.Contains(line, `"type":"dev.parley.turn.completed"`):
			done = line
		}
	}
	for _, want := range []string{`"type":"resource_link"`, `"uri":"entity:page/page-1"`, `"drupal.org/ai.entity":{"entity_type":"page","id":"page-1"}`} {
		if !strings.Contains(req, want) {
			t.Errorf("the echoed turn.requested lacks %s:\n%s", want, req)
		}
	}
	if !strings.Contains(done, `"uri":"https://site.example/node/page-1"`) || !strings.Contains(done, `"label":"About us"`) {
		t.Errorf("the answer does not link back to the page:\n%s", done)
	}

	code, out, _ = runCLI(t, url, "send", "-t", "r2", "--ref", "page:no-such-page", "summarise this")
	if code != 1 || !strings.Contains(out, "reference_unavailable") || !strings.Contains(out, "content[0]") {
		t.Errorf("send --ref to a missing page: exit %d, stdout %q; want 1, reference_unavailable naming content[0]", code, out)
	}
}

// A malformed --ref is a usage error naming the flag; nothing is sent.
func TestSendReferenceUsage(t *testing.T) {
	for _, args := range [][]string{
		{"send", "-t", "t1", "--ref", "page", "hi"},
		{"send", "-t", "t1", "--ref", "Page:1", "hi"},
		{"send", "-t", "t1", "--ref", "page:", "hi"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append(args, "--nats=nats://127.0.0.1:1"), strings.NewReader(""), &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "--ref") {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming --ref", args, code, stderr.String())
		}
	}
}

// parley chat: /ref makes the next message refer to an entity; a bad one
// is named and nothing is sent.
func TestChatReference(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every worker")
	}
	url, ctx := startDev(t)
	h := startChat(t, url, ctx, "chat-refs")
	h.typeLine("/ref page")
	h.waitFor("! /ref: \"page\" is not <entity_type>:<id>")
	h.typeLine("/ref page:page-1")
	h.waitFor("the next message refers to page:page-1")
	h.typeLine("summarise this")
	h.waitFor("The about us page of the demo site.")
	h.waitFor("About us <https://site.example/node/page-1>")
	// The reference went with that message only.
	h.typeLine("summarise this")
	h.waitFor("Reference a page to summarise")
	h.quit()
}

// Under parley dev's NATS authorization the processor resolves references
// as the sender (its principal may ask the lookup service), and an
// integrator may not ask for a resolution itself: the request names the
// person, which only the processor may do.
func TestSendReferenceUnderDevAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs parley dev")
	}
	dir := t.TempDir()
	url := startDevCmd(t, dir)
	t.Setenv("PARLEY_DATA_DIR", dir)
	waitToolsRegistered(t, adminJS(t, url, dir))
	var stdout, stderr bytes.Buffer
	code := run([]string{"send", "--nats", url, "-t", "t1", "--wait", "30s", "--ref", "page:page-1", "summarise this"}, strings.NewReader(""), &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "The about us page of the demo site.") {
		t.Fatalf("send --ref: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}

	var f natsAuthFlags
	logs := &syncBuffer{}
	nc, err := natsauth.Connect(url, "test", f.integratorCredentials(), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Request(events.SubjectResolveReferences, []byte(`{}`), 2*time.Second); err == nil {
		t.Fatal("an integrator's resolve request was answered")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(strings.ToLower(logs.String()), "permissions violation") {
		if time.Now().After(deadline) {
			t.Fatalf("no permissions violation for an integrator's resolve request; log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
