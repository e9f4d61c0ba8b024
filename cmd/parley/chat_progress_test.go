package main

import (
	"testing"
	"time"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/internal/natsserver"
	"github.com/parley-dev/parley/workers/bus"
)

// The chat shows the turn's progress as a working indicator.
func TestChatShowsProgress(t *testing.T) {
	url, ctx := startDev(t)
	h := startChat(t, url, ctx, "progress1")
	h.typeLine("list the content")
	h.waitFor("… Thinking…")
	h.waitFor("… Running list_entities")
	h.waitFor("suggestions: publish the draft articles | show me the About page")
}

// With no worker running, the chat says plainly that nothing answers.
func TestChatSaysWhenNothingAnswers(t *testing.T) {
	old := silenceAfter
	silenceAfter = 300 * time.Millisecond
	t.Cleanup(func() { silenceAfter = old })
	srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	// The streams exist (a worker ran once), but no worker runs now.
	nc, err := client.Connect(srv.ClientURL(), "test")
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
	h := startChat(t, srv.ClientURL(), t.Context(), "silent1")
	h.typeLine("hello?")
	h.waitFor("nothing has answered for 300ms")
}
