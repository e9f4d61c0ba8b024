package main

import (
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/events"
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

// heardEvent records that the thread is alive.
func (s *chatSession) heardEvent(ev *event.Event) {
	s.progress.heard = time.Now()
	s.progress.warned = false
	switch ev.Type() {
	case events.TypeTurnCompleted, events.TypeTurnFailed, events.TypeTurnPaused, events.TypeTurnRejected:
		s.progress.status = ""
	}
}

// showProgress renders a progress event of the running turn as a working
// indicator: its status item (_meta["drupal.org/ai.status_item"], else its
// message), once per change.
func (s *chatSession) showProgress(ev *event.Event) {
	p, err := events.Data[schema.Progress](ev)
	if err != nil || !s.waiting() {
		return
	}
	st, _ := p.Meta.StatusItem()
	if st == "" {
		st = p.Message
	}
	if st == "" || st == s.progress.status {
		return
	}
	s.progress.status = st
	s.say("  … %s", st)
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
