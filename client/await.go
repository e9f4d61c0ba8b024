package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Outcome is what became of a published turn.requested or
// elicitation.responded, as the processor decided it.
type Outcome string

// Outcomes of a turn.requested (Deliver of TurnRequest).
const (
	// OutcomeCompleted: the turn ended with turn.completed.
	OutcomeCompleted Outcome = "completed"
	// OutcomePaused: the turn asks questions (turn.paused); Verdict.Questions
	// holds their elicitation.requested events.
	OutcomePaused Outcome = "paused"
	// OutcomeRejected: turn.rejected (invalid event, message too large,
	// thread busy) or, for an answer, elicitation.rejected.
	OutcomeRejected Outcome = "rejected"
	// OutcomeFailed: turn.failed (dead-lettered, max steps, ...).
	OutcomeFailed Outcome = "failed"
)

// Outcomes of an elicitation.responded (Deliver of Response).
const (
	// OutcomeAccepted: the processor took the answer (it echoed the event
	// into PARLEY_CHAT): accept, decline and cancel alike. Verdict.Pending
	// lists the questions of the thread still unanswered.
	OutcomeAccepted Outcome = "accepted"
)

// Refusal reports whether the outcome is the processor refusing the event
// or the turn failing (a CLI exits non-zero on it).
func (o Outcome) Refusal() bool { return o == OutcomeRejected || o == OutcomeFailed }

// Verdict is the outcome of Deliver.
type Verdict struct {
	// Outcome is what the processor decided.
	Outcome Outcome
	// Event is the event that carried the decision (turn.completed,
	// turn.paused, turn.rejected, turn.failed, elicitation.rejected, or
	// for OutcomeAccepted the processor's echo of the answer, with the
	// extension attributes principal and onbehalfof).
	Event *event.Event
	// Questions are the elicitation.requested events of a paused turn, in
	// stream order.
	Questions []*event.Event
	// Pending lists, for OutcomeAccepted, the elicitation IDs of the turn
	// still waiting for an answer (none: the turn resumes).
	Pending []string
	// Ack is the JetStream acknowledgement of the publish; Ack.Duplicate
	// is set when the event had been stored before (a resend).
	Ack *jetstream.PubAck
}

// InputDuplicateWindow is PARLEY_INPUT's duplicate window (the bus's
// EnsureStreams): a resend within it is dropped as a duplicate.
const InputDuplicateWindow = 2 * time.Minute

// ErrNoVerdict is matched by the error of Deliver when the wait ends
// before the processor decided; the event is stored (it was
// acknowledged). NoVerdictError says where the thread stands.
var ErrNoVerdict = errors.New("no verdict yet")

// NoVerdictError is the error of a Deliver whose wait ended first. It
// matches ErrNoVerdict.
type NoVerdictError struct {
	// EventID is the stored event's ID.
	EventID string
	// Waited is how long Deliver waited.
	Waited time.Duration
	// State describes where the event stands, from a fold of the
	// thread's events (threadstate): not yet taken by a processor,
	// queued behind N earlier messages, running, paused on questions; for
	// an answer, whether its question is still open or was settled. ""
	// when the events could not be read. The processor's exact queue
	// position is not in the events: the count of accepted messages still
	// open before it stands for it.
	State string
	// Ack is the JetStream acknowledgement of the publish.
	Ack *jetstream.PubAck
}

func (e *NoVerdictError) Error() string {
	s := fmt.Sprintf("event %s is stored, but no verdict came within %s", e.EventID, roundWait(e.Waited))
	if e.State != "" {
		s += ": " + e.State
	}
	return s
}

// roundWait rounds d for a message: to 100 ms, or to the millisecond
// under a second (a short --wait must not read "within 0s").
func roundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// Is makes NoVerdictError match ErrNoVerdict.
func (e *NoVerdictError) Is(target error) bool { return target == ErrNoVerdict }

// Deliver publishes e — a turn.requested or an elicitation.responded, as
// built by TurnRequest or Response — and waits up to wait for the
// processor's verdict on it. It starts watching (an ordered consumer on
// the thread, from now) BEFORE publishing, so no verdict can be missed,
// and matches by the event's ID (requestEventId, respondedEventId, the
// echo of an accepted answer). A resend of an event already stored
// (PubAck.Duplicate: the original was published within the input stream's
// duplicate window) is matched by reading the thread again from the start
// of that window.
//
// Errors: those of Publish (the event is not confirmed); an error matching
// ErrNoVerdict when wait passes first; ctx's error when it ends first.
func (c *Client) Deliver(ctx context.Context, e *event.Event, wait time.Duration) (*Verdict, error) {
	thread := e.Subject()
	if err := events.ValidToken("thread", thread); err != nil {
		return nil, err
	}
	var (
		m         matcher
		answering string // the elicitation ID an answer is for
	)
	switch events.TypeOf(e) {
	case events.TypeTurnRequested:
		m = newTurnMatcher(e.ID(), c.principal)
	case events.TypeElicitationResponded:
		d, err := events.Data[events.ElicitationResponded](e)
		if err != nil {
			return nil, err
		}
		m = &answerMatcher{respondedID: e.ID(), elicitationID: d.ElicitationID, principal: c.principal}
		answering = d.ElicitationID
	default:
		return nil, fmt.Errorf("delivering %s: only %s and %s have a verdict", e.Type(), events.TypeTurnRequested, events.TypeElicitationResponded)
	}
	wctx, cancel := context.WithCancel(ctx)
	items, err := c.Watch(wctx, WatchOptions{Thread: thread, Refusals: true})
	if err != nil {
		cancel()
		return nil, err
	}
	// On return, stop the watch and wait until its consumer is deleted
	// from the server, so a CLI that exits right after leaves none.
	stop := func() {
		cancel()
		for range items {
		}
	}
	defer func() { stop() }()
	ack, err := c.Publish(ctx, e)
	if err != nil {
		return nil, err
	}
	if ack.Duplicate {
		// Stored before, at most a duplicate window ago: its verdict may
		// be in the past. Read the thread again from the start of the
		// window (input and chat are separate streams, so the original's
		// input sequence says nothing about PARLEY_CHAT).
		stop() // wait until the first watch is cleaned up
		actx, acancel := context.WithCancel(ctx)
		from := time.Now().Add(-InputDuplicateWindow - time.Minute)
		again, err := c.Watch(actx, WatchOptions{Thread: thread, StartTime: from, Refusals: true})
		if err != nil {
			acancel()
			stop = func() {}
			return nil, err
		}
		items, stop = again, func() {
			acancel()
			for range again {
			}
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case it, ok := <-items:
			if !ok {
				return nil, ctx.Err()
			}
			if it.Event == nil {
				continue
			}
			if v := m.event(threadstate.Decode(it.Event)); v != nil {
				v.Ack = ack
				if v.Outcome == OutcomeAccepted {
					// Best effort: what the thread still waits for.
					if f, err := c.FoldThread(ctx, thread); f != nil && (err == nil || errors.Is(err, ErrPendingTruncated)) {
						v.Pending = f.PendingIDs()
					}
				}
				return v, nil
			}
		case <-timer.C:
			return nil, &NoVerdictError{EventID: e.ID(), Waited: wait, State: c.threadState(ctx, thread, e.ID(), answering), Ack: ack}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// threadState describes where the event eventID (a turn.requested, or an
// elicitation.responded answering elicitationID) stands, from a fold of
// the thread's events (best effort: "" when they cannot be read within
// 2 s).
func (c *Client) threadState(ctx context.Context, thread, eventID, elicitationID string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	f, err := c.FoldThread(ctx, thread)
	if f == nil || (err != nil && !errors.Is(err, ErrPendingTruncated)) {
		return ""
	}
	return describeWait(f, eventID, elicitationID)
}

// describeWait says where a published event stands in a thread's fold:
// a message not yet accepted, queued behind others, running or paused; an
// answer whose question is still open or was settled. A message's exact
// place in the processor's queue is not in the events: the count of
// accepted messages still open before it stands for it.
func describeWait(f *threadstate.Fold, eventID, elicitationID string) string {
	if elicitationID != "" {
		if _, open := f.Question(elicitationID); open {
			return fmt.Sprintf("question %s is still open: the answer was not taken yet (is a processor running?)", elicitationID)
		}
		if s, ok := f.Settlement(elicitationID); ok {
			return fmt.Sprintf("question %s was %s before this answer arrived", elicitationID, s.How)
		}
		return fmt.Sprintf("question %s is not open on the thread (is a processor running?)", elicitationID)
	}
	accepted, ahead := f.Position(eventID)
	switch {
	case !accepted:
		if f.Events == 0 {
			return "not yet taken by a processor (is one running?)"
		}
		return fmt.Sprintf("not yet taken by a processor (is one running?); the thread is %s", f.Status())
	case ahead > 0:
		return fmt.Sprintf("accepted and queued behind %d earlier message(s) of the thread", ahead)
	case ahead == 0 && f.Status() == threadstate.Paused:
		return fmt.Sprintf("turn %s is paused, waiting for answers %v", f.TurnID, f.PendingIDs())
	case ahead == 0:
		return fmt.Sprintf("turn %s started and is still running (is an agent running?)", f.TurnID)
	}
	return "handled by the processor; its outcome was not seen (see `parley events`)"
}

// verdictOf maps the event types that carry a processor's decision on an
// input event to its outcome (the event names the input by Change.About,
// or by the turn it started).
var verdictOf = map[events.Type]Outcome{
	events.TypeTurnPaused:           OutcomePaused,
	events.TypeTurnCompleted:        OutcomeCompleted,
	events.TypeTurnFailed:           OutcomeFailed,
	events.TypeTurnRejected:         OutcomeRejected,
	events.TypeElicitationRejected:  OutcomeRejected,
	events.TypeElicitationResponded: OutcomeAccepted,
}

// matcher recognizes the verdict on one published event among the
// thread's events, decoded once by threadstate.
type matcher interface {
	event(ch threadstate.Change) *Verdict
}

// turnMatcher recognizes the outcome of a turn.requested: by its
// requestEventId, or by the ID of the turn it started (the processor
// derives it from the request's ID, workers/processor/turns.go), which
// elicitation.requested (extension turnid) and some turn.failed carry.
type turnMatcher struct {
	requestID, turnID string
	// principal is the client's: a refusal (or echo) of another
	// principal's event under the same ID is not the verdict (foreign).
	principal string
	questions []*event.Event
}

func newTurnMatcher(requestID, principal string) *turnMatcher {
	return &turnMatcher{requestID: requestID, turnID: events.DerivedID("turn", requestID), principal: principal}
}

// foreign reports whether e, a refusal or an echo of an input event,
// names a principal other than principal (the processor sets the refused
// or echoed event's principal; a refusal of an earlier processor names
// none and counts as the client's). A refusal names the event by the ID
// its sender chose, which may be another's: every integrator reads the
// IDs of accepted events in PARLEY_CHAT, and may read PARLEY_INPUT.
func foreign(e *event.Event, principal string) bool {
	who := events.EchoIdentity(e)
	return principal != "" && who.Principal != "" && who.Principal != principal
}

func (m *turnMatcher) event(ch threadstate.Change) *Verdict {
	if ch.Opened != nil && !ch.Reopened && ch.TurnID == m.turnID {
		m.questions = append(m.questions, ch.Event)
		return nil
	}
	typ := events.Type(ch.Event.Type())
	outcome, ok := verdictOf[typ]
	if !ok || ch.Data == nil || outcome == OutcomeAccepted {
		return nil
	}
	// A turn.rejected names only the request (it started no turn).
	if ch.About != m.requestID && (ch.TurnID == "" || ch.TurnID != m.turnID || typ == events.TypeTurnRejected) {
		return nil
	}
	if typ == events.TypeTurnRejected && foreign(ch.Event, m.principal) {
		return nil
	}
	v := &Verdict{Outcome: outcome, Event: ch.Event}
	if d, ok := ch.Data.(events.TurnPaused); ok {
		for _, q := range m.questions {
			if slices.Contains(d.ElicitationIDs, elicitationID(q)) {
				v.Questions = append(v.Questions, q)
			}
		}
	}
	return v
}

// elicitationID returns the _meta elicitation ID of an
// elicitation.requested event.
func elicitationID(ev *event.Event) string {
	var d struct {
		Meta map[string]any `json:"_meta"`
	}
	_ = json.Unmarshal(ev.Data(), &d)
	id, _ := d.Meta[schema.MetaElicitationID].(string)
	return id
}

// answerMatcher recognizes the outcome of an elicitation.responded:
// elicitation.rejected naming it (respondedEventId), or the processor's
// echo of it (same event ID) in PARLEY_CHAT, which says it was accepted.
type answerMatcher struct {
	respondedID, elicitationID string
	// principal is the client's (see turnMatcher).
	principal string
}

func (m *answerMatcher) event(ch threadstate.Change) *Verdict {
	typ := events.Type(ch.Event.Type())
	mine := (typ == events.TypeElicitationResponded && ch.Event.ID() == m.respondedID) ||
		(typ == events.TypeElicitationRejected && ch.About == m.respondedID && ch.Data != nil)
	if !mine || foreign(ch.Event, m.principal) {
		return nil
	}
	return &Verdict{Outcome: verdictOf[typ], Event: ch.Event}
}
