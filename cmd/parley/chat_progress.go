package main

import (
	"strings"
	"time"

	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/schema"
)

// silenceAfter is how long a running turn may go without any event of the
// thread before `parley chat` says so.
var silenceAfter = 15 * time.Second

// progressState is what `parley chat` remembers of a turn's progress.
type progressState struct {
	// heard is when the last event of the thread arrived.
	heard time.Time
	// status is the status line shown last ("" after the turn ends).
	status string
	// warned is set once the silence has been reported.
	warned bool
}

// heardEvent records that the thread is alive; a turn that paused or
// ended clears the status line.
func (s *chatSession) heardEvent(ch threadstate.Change) {
	s.progress.heard = time.Now()
	s.progress.warned = false
	if ch.Ended || ch.To == threadstate.Paused || ch.To == threadstate.Idle || ch.To == threadstate.Failed {
		s.progress.status = ""
	}
}

// showing decides whether the chat shows a rendered event: a progress
// notification is the working indicator, shown once per change of its
// status while the chat waits for the turn; everything else is shown.
func (s *chatSession) showing(ch threadstate.Change, text string) bool {
	if _, ok := ch.Data.(schema.Progress); !ok {
		return true
	}
	if ch.Stale || !s.waiting() || text == s.progress.status || strings.TrimSpace(strings.TrimPrefix(text, "  …")) == "" {
		return false
	}
	s.progress.status = text
	return true
}

// silence returns a channel that fires when the running turn has been
// silent for silenceAfter (nil when no turn runs or it was reported).
func (s *chatSession) silence() <-chan time.Time {
	if !s.waiting() || s.progress.warned {
		return nil
	}
	if s.progress.heard.IsZero() {
		s.progress.heard = time.Now()
	}
	return time.After(time.Until(s.progress.heard.Add(silenceAfter)))
}

// reportSilence says plainly that nothing has answered.
func (s *chatSession) reportSilence() {
	s.progress.warned = true
	s.say("(nothing has answered for %v: is a parley processor and agent running? The message stays queued; Ctrl-C quits.)", silenceAfter)
}
