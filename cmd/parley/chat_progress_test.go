package main

import (
	"testing"
	"time"
)

// The chat shows the turn's progress as a working indicator. startDev's
// agent has --progress-delay 0 (every phase at once): the scripted model's
// phases are instant, and the default 200 ms would announce none of them.
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
	// The streams exist (a worker ran once), but no worker runs now.
	url := streamsOnly(t)
	h := startChat(t, url, t.Context(), "silent1")
	h.typeLine("hello?")
	h.waitFor("nothing has answered for 300ms")
}
