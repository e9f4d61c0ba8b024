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

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
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
	// State describes the thread, read from its record: "running",
	// "queued at position N", "paused", or "not yet taken by a processor"
	// ("" when the record could not be read).
	State string
	// Ack is the JetStream acknowledgement of the publish.
	Ack *jetstream.PubAck
}

func (e *NoVerdictError) Error() string {
	s := fmt.Sprintf("event %s is stored, but no verdict came within %s", e.EventID, e.Waited.Round(100*time.Millisecond))
	if e.State != "" {
		s += ": " + e.State
	}
	return s
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
	var m matcher
	switch e.Type() {
	case events.TypeTurnRequested:
		m = newTurnMatcher(e.ID())
	case events.TypeElicitationResponded:
		d, err := events.Data[events.ElicitationResponded](e)
		if err != nil {
			return nil, err
		}
		m = &answerMatcher{respondedID: e.ID(), elicitationID: d.ElicitationID}
	default:
		return nil, fmt.Errorf("delivering %s: only %s and %s have a verdict", e.Type(), events.TypeTurnRequested, events.TypeElicitationResponded)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items, err := c.Watch(wctx, WatchOptions{Thread: thread})
	if err != nil {
		return nil, err
	}
	ack, err := c.Publish(ctx, e)
	if err != nil {
		return nil, err
	}
	if ack.Duplicate {
		// Stored before, at most a duplicate window ago: its verdict may
		// be in the past. Read the thread again from the start of the
		// window (input and chat are separate streams, so the original's
		// input sequence says nothing about PARLEY_CHAT).
		cancel()
		for range items { // wait until the first watch is cleaned up
		}
		wctx, cancel = context.WithCancel(ctx)
		defer cancel()
		from := time.Now().Add(-InputDuplicateWindow - time.Minute)
		if items, err = c.Watch(wctx, WatchOptions{Thread: thread, StartTime: from}); err != nil {
			return nil, err
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
			if v := m.event(it.Event); v != nil {
				v.Ack = ack
				if v.Outcome == OutcomeAccepted {
					// Best effort: what the thread still waits for.
					if qs, err := c.PendingQuestions(ctx, thread); err == nil || errors.Is(err, ErrPendingTruncated) {
						f := pendingFold{open: qs}
						v.Pending = f.pendingIDs()
					}
				}
				return v, nil
			}
		case <-timer.C:
			return nil, &NoVerdictError{EventID: e.ID(), Waited: wait, State: c.threadState(ctx, thread, e.ID()), Ack: ack}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// threadState describes where a message stands from the thread's record.
func (c *Client) threadState(ctx context.Context, thread, eventID string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	kv, err := c.bus.JetStream().KeyValue(ctx, kvstate.BucketThreads)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return "not yet taken by a processor (none has run on this server)"
	}
	if err != nil {
		return ""
	}
	entry, err := kv.Get(ctx, thread)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "not yet taken by a processor (is one running?)"
	}
	if err != nil {
		return ""
	}
	// Only what this diagnosis needs of the processor's record (the
	// record itself is the processor's own type).
	var t struct {
		State     string   `json:"state"`
		TurnID    string   `json:"turnId"`
		StartedBy string   `json:"startedBy"`
		Pending   []string `json:"pending"`
		Handled   []string `json:"handled"`
		Queue     []struct {
			EventID string `json:"eventId"`
		} `json:"queue"`
	}
	if json.Unmarshal(entry.Value(), &t) != nil {
		return ""
	}
	if i := slices.IndexFunc(t.Queue, func(q struct {
		EventID string `json:"eventId"`
	}) bool {
		return q.EventID == eventID
	}); i >= 0 {
		return fmt.Sprintf("queued at position %d behind the running turn %s", i+1, t.TurnID)
	}
	if t.StartedBy == eventID {
		switch t.State {
		case "paused":
			return fmt.Sprintf("turn %s is paused, waiting for answers %v", t.TurnID, t.Pending)
		case "running":
			return fmt.Sprintf("turn %s started and is still running (is an agent running?)", t.TurnID)
		}
	}
	if slices.Contains(t.Handled, eventID) {
		return "handled by the processor; its outcome was not seen (see `parley events`)"
	}
	return "not yet taken by a processor (is one running?)"
}

// matcher recognizes the verdict on one published event.
type matcher interface {
	event(ev *event.Event) *Verdict
}

// turnMatcher recognizes the outcome of a turn.requested: by its
// requestEventId, or by the ID of the turn it started (the processor
// derives it from the request's ID, workers/processor/turns.go), which
// elicitation.requested (extension turnid) and some turn.failed carry.
type turnMatcher struct {
	requestID, turnID string
	questions         []*event.Event
}

func newTurnMatcher(requestID string) *turnMatcher {
	return &turnMatcher{requestID: requestID, turnID: events.DerivedID("turn", requestID)}
}

func (m *turnMatcher) mine(requestID, turnID string) bool {
	return (requestID != "" && requestID == m.requestID) || (turnID != "" && turnID == m.turnID)
}

func (m *turnMatcher) event(ev *event.Event) *Verdict {
	switch ev.Type() {
	case events.TypeElicitationRequested:
		if tid, _ := ev.Extensions()[events.ExtTurnID].(string); tid == m.turnID {
			m.questions = append(m.questions, ev)
		}
	case events.TypeTurnPaused:
		d, err := events.Data[events.TurnPaused](ev)
		if err != nil || !m.mine(d.RequestEventID, d.TurnID) {
			return nil
		}
		var qs []*event.Event
		for _, q := range m.questions {
			if slices.Contains(d.ElicitationIDs, elicitationID(q)) {
				qs = append(qs, q)
			}
		}
		return &Verdict{Outcome: OutcomePaused, Event: ev, Questions: qs}
	case events.TypeTurnCompleted:
		d, err := events.Data[events.TurnCompleted](ev)
		if err == nil && m.mine(d.RequestEventID, d.TurnID) {
			return &Verdict{Outcome: OutcomeCompleted, Event: ev}
		}
	case events.TypeTurnFailed:
		d, err := events.Data[events.TurnFailed](ev)
		if err == nil && m.mine(d.RequestEventID, d.TurnID) {
			return &Verdict{Outcome: OutcomeFailed, Event: ev}
		}
	case events.TypeTurnRejected:
		d, err := events.Data[events.TurnRejected](ev)
		if err == nil && d.RequestEventID == m.requestID {
			return &Verdict{Outcome: OutcomeRejected, Event: ev}
		}
	}
	return nil
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
}

func (m *answerMatcher) event(ev *event.Event) *Verdict {
	if ev.Type() == events.TypeElicitationResponded && ev.ID() == m.respondedID {
		return &Verdict{Outcome: OutcomeAccepted, Event: ev}
	}
	if ev.Type() != events.TypeElicitationRejected {
		return nil
	}
	d, err := events.Data[events.ElicitationRejected](ev)
	if err != nil || d.RespondedEventID != m.respondedID {
		return nil
	}
	return &Verdict{Outcome: OutcomeRejected, Event: ev}
}
