// Package threadstate folds a thread's events, in PARLEY_CHAT stream
// order, into where the thread stands: idle, running, paused or failed,
// its turn, the questions it waits on (MCP elicitation/create params by
// elicitation ID), how each settled question was settled, and the last
// progress of the running turn. It is the one reading of the event types
// for a thread's state: the client's Session and PendingQuestions, the
// gateway's GET /v1/threads/{thread}, `parley chat` and `parley events`
// all use it. It needs no NATS: give it events.
//
// Every event is decoded once, here: Apply returns a Change that carries
// the decoded payload, for a renderer to show without decoding again.
//
// It owns the fold, a pure function of events: it imports only events and
// schema of parley's packages, and nothing of NATS (internal/layers checks
// the direction of imports).
package threadstate

import (
	"slices"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Status is where a thread stands.
type Status string

// Statuses of a thread.
const (
	// Idle: no turn runs or waits; the last one (if any) ended normally.
	Idle Status = "idle"
	// Running: a message was accepted (or sent by this client, see
	// Fold.Expect) and its turn has not ended, or a paused turn resumed
	// once its questions were settled.
	Running Status = "running"
	// Paused: the turn waits for answers to Pending questions.
	Paused Status = "paused"
	// Failed: nothing runs, and the last turn ended with turn.failed.
	Failed Status = "failed"
)

// Settlement is how a question stopped waiting for an answer.
type Settlement string

// Settlements of a question.
const (
	// Answered: an answer with action accept was taken.
	Answered Settlement = "answered"
	// Declined: an answer with action decline was taken.
	Declined Settlement = "declined"
	// Cancelled: an answer with action cancel was taken.
	Cancelled Settlement = "cancelled"
	// Expired: the paused turn expired unanswered (elicitation.expired).
	Expired Settlement = "expired"
	// Withdrawn: the processor withdrew it (elicitation.cancelled, e.g. a
	// new message superseded the paused turn), or its turn ended
	// otherwise (turn.completed or turn.failed with questions open).
	Withdrawn Settlement = "withdrawn"
)

// Bounds of what a Fold keeps.
const (
	// MaxSettled bounds Fold.Settled: past it the oldest settlement is
	// dropped.
	MaxSettled = 256
	// MaxOpenMessages bounds the messages a Fold counts as not yet
	// ended (accepted turn.requested, or expected): past it the oldest is
	// forgotten, as if its turn had ended (a thread queues far fewer:
	// the processor refuses more than kvstate.MaxQueue thread_busy).
	MaxOpenMessages = 1024
	// MaxPending bounds the open questions: past it the oldest is
	// dropped (a turn asks a handful).
	MaxPending = 256
)

// Question is one open (or settled) question of the thread.
type Question struct {
	// ID is the elicitation ID (_meta["drupal.org/ai.elicitation_id"]).
	ID string
	// TurnID is the turn that asked it (extension turnid; "" if absent).
	TurnID string
	// Params are the MCP elicitation/create params, as requested.
	Params schema.ElicitRequestParams
}

// Settled is a question that no longer waits, and why.
type Settled struct {
	Question
	// How is the settlement.
	How Settlement
	// By is who answered (the processor's echo: principal and end user),
	// for Answered, Declined and Cancelled.
	By events.Identity
	// Reason is the processor's reason for Withdrawn (may be "").
	Reason string
	// EventID is the event that settled it (the answer's ID for
	// Answered, Declined and Cancelled).
	EventID string
}

// Change is what one event did to the thread.
type Change struct {
	// Seq is the event's stream sequence, as given to Apply.
	Seq uint64
	// Event is the event.
	Event *event.Event
	// Data is the decoded payload of a thread event the fold knows
	// (events.TurnRequested, events.TurnCompleted, events.TurnPaused,
	// events.TurnFailed, events.TurnRejected, schema.ElicitRequestParams,
	// events.ElicitationResponded, events.ElicitationRejected,
	// events.ElicitationExpired, events.ElicitationCancelled,
	// schema.Progress); nil for other types and when DataErr is set.
	Data any
	// DataErr is set when the data of a known type does not decode: the
	// event changed nothing.
	DataErr error
	// About is the ID of the input event this event is the processor's
	// outcome of (requestEventId of turn.paused, .completed, .failed and
	// .rejected; respondedEventId of elicitation.rejected); "" otherwise.
	About string
	// TurnID is the turn the event names (turnId of turn.paused,
	// .completed, .failed, elicitation.expired and .cancelled; the turnid
	// extension of elicitation.requested); "" otherwise.
	TurnID string
	// From and To are the thread's status before and after the event.
	From, To Status
	// Opened is the question an elicitation.requested opened, or that
	// waits again for an answer after an invalid_content rejection (of an
	// answer taken, which reopens it, or of one refused before).
	Opened *Question
	// Reopened is set when Opened is a question asked before whose answer
	// was refused invalid_content.
	Reopened bool
	// Settled lists the questions the event settled.
	Settled []Settled
	// Unasked lists, for turn.paused, the elicitation IDs it names that
	// no elicitation.requested opened (its prose is then the only way a
	// reader sees those questions).
	Unasked []string
	// Ended is set when the event ended a turn or a message (completed,
	// failed, rejected, expired, every question withdrawn).
	Ended bool
	// Stale is set on a progress notification that is not of the running
	// turn (it came after its turn paused or ended): a renderer of the
	// thread's state drops it.
	Stale bool
}

// Fold is a thread's state, built by Apply from its events in stream
// order. The zero value is an idle thread. It is not safe for concurrent
// use.
type Fold struct {
	// TurnID is the turn running, paused or ended last ("" before any).
	TurnID string
	// Progress is the last progress notification of the running turn (nil
	// when it has none, or once it paused or ended).
	Progress *schema.Progress
	// Failure is the last turn.failed while Status is Failed.
	Failure *events.TurnFailed
	// LastSeq is the sequence given with the last event applied.
	LastSeq uint64
	// Events counts the events applied.
	Events int

	pending []Question
	settled []Settled
	// open lists the turn.requested event IDs accepted (or expected) and
	// not yet ended, in order: the first is running (or paused), the
	// others wait behind it.
	open []string
	// seen lists the accepted turn.requested IDs still open or ended,
	// bounded like open; it tells "accepted" from "not taken yet".
	seen []string
	// paused is set while the active turn waits (turn.paused until
	// it resumes or ends); pausedReq is that turn's request event ID.
	paused    bool
	pausedReq string
	// answers maps the ID of an accepted answer to its question, until
	// the turn ends: an invalid_content rejection of it reopens the
	// question.
	answers map[string]Question
	failed  bool
}

// Status returns where the thread stands.
func (f *Fold) Status() Status {
	switch {
	case f.paused && len(f.pending) > 0:
		return Paused
	case f.paused || len(f.open) > 0:
		return Running
	case f.failed:
		return Failed
	}
	return Idle
}

// Pending returns the open questions, in the order they were asked.
func (f *Fold) Pending() []Question { return slices.Clone(f.pending) }

// PendingParams returns the open questions' params, in order.
func (f *Fold) PendingParams() []schema.ElicitRequestParams {
	out := make([]schema.ElicitRequestParams, len(f.pending))
	for i, q := range f.pending {
		out[i] = q.Params
	}
	return out
}

// PendingIDs returns the open questions' elicitation IDs, in order.
func (f *Fold) PendingIDs() []string {
	out := make([]string, len(f.pending))
	for i, q := range f.pending {
		out[i] = q.ID
	}
	return out
}

// Question returns the open question with elicitation ID id.
func (f *Fold) Question(id string) (Question, bool) {
	i := slices.IndexFunc(f.pending, func(q Question) bool { return q.ID == id })
	if i < 0 {
		return Question{}, false
	}
	return f.pending[i], true
}

// Settled returns the settled questions, oldest first (at most
// MaxSettled).
func (f *Fold) Settled() []Settled { return slices.Clone(f.settled) }

// Settlement returns how the question with elicitation ID id was settled
// (the last time, if it was asked again).
func (f *Fold) Settlement(id string) (Settled, bool) {
	for i := len(f.settled) - 1; i >= 0; i-- {
		if f.settled[i].ID == id {
			return f.settled[i], true
		}
	}
	return Settled{}, false
}

// Position reports where the message with turn.requested event ID id
// stands: accepted tells whether the processor accepted it (its echo was
// applied; false also once it is forgotten past MaxOpenMessages), and
// ahead how many accepted messages of the thread are still open before
// it (0: its turn runs or is paused); ahead is -1 when it is no longer
// open (its turn ended) or was never seen.
func (f *Fold) Position(id string) (accepted bool, ahead int) {
	return slices.Contains(f.seen, id), slices.Index(f.open, id)
}

// Expect counts the message with turn.requested event ID id as open
// before its echo arrives: a client that published it knows a turn is
// coming (Status is Running) though no processor took it yet. Its
// turn.rejected or its turn's end closes it as for an accepted one.
func (f *Fold) Expect(id string) {
	f.open = addBounded(f.open, id, MaxOpenMessages)
	f.advance()
}

// Apply folds the next event of the thread (seq is its stream sequence)
// and returns what it changed.
func (f *Fold) Apply(seq uint64, e *event.Event) Change {
	ch := Change{Seq: seq, Event: e, From: f.Status()}
	f.LastSeq = seq
	f.Events++
	f.apply(&ch)
	ch.To = f.Status()
	return ch
}

// apply is Apply's one switch over the event types.
func (f *Fold) apply(ch *Change) {
	e := ch.Event
	switch events.Type(e.Type()) {
	case events.TypeTurnRequested:
		if _, err := decode[events.TurnRequested](ch); err != nil {
			return
		}
		f.failed, f.Failure = false, nil
		f.open = addBounded(f.open, e.ID(), MaxOpenMessages)
		f.seen = addBounded(f.seen, e.ID(), MaxOpenMessages)
		f.advance()
	case events.TypeTurnRejected:
		d, err := decode[events.TurnRejected](ch)
		if err != nil {
			return
		}
		ch.About = d.RequestEventID
		ch.Ended = f.close(d.RequestEventID)
		f.advance()
	case events.TypeElicitationRequested:
		p, err := decode[schema.ElicitRequestParams](ch)
		if err != nil {
			return
		}
		q := Question{ID: ElicitationID(p), Params: p}
		q.TurnID, _ = e.Extensions()[events.ExtTurnID].(string)
		ch.TurnID = q.TurnID
		if q.ID == "" {
			return // unanswerable; a renderer says so
		}
		f.open1(q)
		ch.Opened = &q
	case events.TypeTurnPaused:
		d, err := decode[events.TurnPaused](ch)
		if err != nil {
			return
		}
		ch.About, ch.TurnID = d.RequestEventID, d.TurnID
		for _, id := range d.ElicitationIDs {
			if _, ok := f.Question(id); !ok {
				ch.Unasked = append(ch.Unasked, id)
			}
		}
		f.TurnID, f.paused, f.pausedReq, f.Progress = d.TurnID, true, d.RequestEventID, nil
	case events.TypeElicitationResponded:
		// In PARLEY_CHAT only as the processor's echo: accepted.
		d, err := decode[events.ElicitationResponded](ch)
		if err != nil {
			return
		}
		q, ok := f.take(d.ElicitationID)
		if !ok {
			return
		}
		s := Settled{Question: q, How: settlementOf(d.Action), By: events.EchoIdentity(e), EventID: e.ID()}
		f.settle(s)
		ch.Settled = []Settled{s}
		if f.answers == nil {
			f.answers = map[string]Question{}
		}
		if len(f.answers) < MaxPending {
			f.answers[e.ID()] = q
		}
	case events.TypeElicitationRejected:
		d, err := decode[events.ElicitationRejected](ch)
		if err != nil {
			return
		}
		ch.About = d.RespondedEventID
		q, ok := f.answers[d.RespondedEventID]
		delete(f.answers, d.RespondedEventID)
		if d.Reason != events.RejectInvalidContent {
			return
		}
		if ok {
			// The answer was taken, then found invalid: the question
			// waits again.
			f.open1(q)
			ch.Opened, ch.Reopened = &q, true
		} else if q, open := f.Question(d.ElicitationID); open {
			// Refused before it was taken: the question still waits,
			// for another answer.
			ch.Opened, ch.Reopened = &q, true
		}
	case events.TypeElicitationExpired:
		d, err := decode[events.ElicitationExpired](ch)
		if err != nil {
			return
		}
		ch.TurnID = d.TurnID
		ch.Settled = f.settleAll(Expired, "", e.ID())
		f.endPause(d.TurnID)
		ch.Ended = true
	case events.TypeElicitationCancelled:
		d, err := decode[events.ElicitationCancelled](ch)
		if err != nil {
			return
		}
		ch.TurnID = d.TurnID
		for _, id := range d.ElicitationIDs {
			if q, ok := f.take(id); ok {
				s := Settled{Question: q, How: Withdrawn, Reason: d.Reason, EventID: e.ID()}
				f.settle(s)
				ch.Settled = append(ch.Settled, s)
			}
		}
		if len(f.pending) == 0 && f.paused {
			// Every question withdrawn: the paused turn is over.
			f.endPause(d.TurnID)
			ch.Ended = true
		}
	case events.TypeTurnCompleted:
		d, err := decode[events.TurnCompleted](ch)
		if err != nil {
			return
		}
		ch.About, ch.TurnID = d.RequestEventID, d.TurnID
		ch.Settled = f.endTurn(d.TurnID, d.RequestEventID, e.ID())
		ch.Ended, f.failed = true, false
	case events.TypeTurnFailed:
		d, err := decode[events.TurnFailed](ch)
		if err != nil {
			return
		}
		ch.About, ch.TurnID = d.RequestEventID, d.TurnID
		if d.TurnID == "" {
			// A message that failed before it started a turn leaves
			// the active (or paused) turn as it is.
			ch.Ended = f.close(d.RequestEventID)
			f.advance()
		} else {
			ch.Settled = f.endTurn(d.TurnID, d.RequestEventID, e.ID())
			ch.Ended = true
		}
		f.failed, f.Failure = true, &d
	case events.TypeProgress:
		p, err := decode[schema.Progress](ch)
		if err != nil {
			return
		}
		// Progress is advisory and may be stored after its turn's end (a
		// replica's late timer): it counts only for the running turn.
		turn, _ := e.Extensions()[events.ExtTurnID].(string)
		if f.Status() != Running || f.paused || turn != "" && turn != f.TurnID {
			ch.Stale = true
			return
		}
		f.Progress = &p
	}
}

// Decode decodes one event alone, with no thread state: the Change has
// its Data (or DataErr) and About, for a renderer of single events.
func Decode(e *event.Event) Change {
	var f Fold
	return f.Apply(0, e)
}

// decode decodes e's data into ch.Data, or records why it cannot.
func decode[T any](ch *Change) (T, error) {
	d, err := events.Data[T](ch.Event)
	if err != nil {
		ch.DataErr = err
		return d, err
	}
	ch.Data = d
	return d, nil
}

// ElicitationID returns the elicitation ID in a question's _meta ("" when
// it has none).
func ElicitationID(p schema.ElicitRequestParams) string {
	id, _ := p.Meta[schema.MetaElicitationID].(string)
	return id
}

// settlementOf maps an answer's action to its settlement.
func settlementOf(a schema.ElicitAction) Settlement {
	switch a {
	case schema.ActionDecline:
		return Declined
	case schema.ActionCancel:
		return Cancelled
	}
	return Answered
}

// open1 adds a question to the open ones (replacing one of the same ID).
func (f *Fold) open1(q Question) {
	f.pending = slices.DeleteFunc(f.pending, func(p Question) bool { return p.ID == q.ID })
	if len(f.pending) >= MaxPending {
		f.pending = f.pending[1:]
	}
	f.pending = append(f.pending, q)
}

// take removes the open question id and returns it.
func (f *Fold) take(id string) (Question, bool) {
	i := slices.IndexFunc(f.pending, func(q Question) bool { return q.ID == id })
	if i < 0 {
		return Question{}, false
	}
	q := f.pending[i]
	f.pending = slices.Delete(f.pending, i, i+1)
	return q, true
}

// settle records a settlement, dropping the oldest past MaxSettled.
func (f *Fold) settle(s Settled) {
	if len(f.settled) >= MaxSettled {
		f.settled = slices.Delete(f.settled, 0, 1)
	}
	f.settled = append(f.settled, s)
}

// settleAll settles every open question the same way.
func (f *Fold) settleAll(how Settlement, reason, eventID string) []Settled {
	var out []Settled
	for _, q := range f.pending {
		s := Settled{Question: q, How: how, Reason: reason, EventID: eventID}
		f.settle(s)
		out = append(out, s)
	}
	f.pending = nil
	return out
}

// close ends the open message id; it reports whether it was open.
func (f *Fold) close(id string) bool {
	i := slices.Index(f.open, id)
	if i < 0 {
		return false
	}
	f.open = slices.Delete(f.open, i, i+1)
	return true
}

// closeTurn ends the open message whose turn is turnID.
func (f *Fold) closeTurn(turnID string) bool {
	if turnID == "" {
		return false
	}
	for _, id := range f.open {
		if events.DerivedID("turn", id) == turnID {
			return f.close(id)
		}
	}
	return false
}

// endPause ends the paused turn (expired, or every question withdrawn).
func (f *Fold) endPause(turnID string) {
	if turnID != "" {
		f.TurnID = turnID
	}
	if !f.close(f.pausedReq) {
		f.closeTurn(turnID)
	}
	f.paused, f.pausedReq, f.Progress, f.answers = false, "", nil, nil
	f.advance()
}

// endTurn ends a turn that completed or failed: questions still open are
// withdrawn.
func (f *Fold) endTurn(turnID, requestID, eventID string) []Settled {
	settled := f.settleAll(Withdrawn, "the turn ended", eventID)
	f.TurnID = turnID
	if !f.close(requestID) && !f.closeTurn(turnID) {
		f.close(f.pausedReq)
	}
	f.paused, f.pausedReq, f.Progress, f.answers, f.Failure = false, "", nil, nil, nil
	f.advance()
	return settled
}

// advance names the turn of the first open message as the active one
// when no turn is paused: the processor derives a turn's ID from the ID
// of the turn.requested that started it (events.DerivedID("turn", id)).
func (f *Fold) advance() {
	if !f.paused && len(f.open) > 0 {
		f.TurnID = events.DerivedID("turn", f.open[0])
	}
}

// addBounded appends id to list unless it is there, dropping the oldest
// past limit.
func addBounded(list []string, id string, limit int) []string {
	if id == "" || slices.Contains(list, id) {
		return list
	}
	if len(list) >= limit {
		list = slices.Delete(list, 0, 1)
	}
	return append(list, id)
}

// AdoptPaused makes the fold paused on turnID with the questions pending
// open (elicitation/create params with their IDs in _meta), as the
// processor's record of the thread says (client.ThreadState): a question
// whose events PARLEY_CHAT's limits dropped, or that the fold did not
// read, is open all the same. Questions already open stay; one without
// an ID is skipped.
func (f *Fold) AdoptPaused(turnID string, pending []schema.ElicitRequestParams) {
	for _, p := range pending {
		q := Question{ID: ElicitationID(p), Params: p, TurnID: turnID}
		if q.ID == "" {
			continue
		}
		if _, open := f.Question(q.ID); !open {
			f.open1(q)
		}
	}
	f.TurnID, f.paused = turnID, true
}
