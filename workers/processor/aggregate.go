package processor

import (
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// The thread's transitions, as pure functions over its stored records
// (Thread and kvstate.PausedTurn). The handlers in turns.go and
// pause.go load the records, apply one of these inside a revision-checked
// write, and publish what the result says; these functions decide. They
// return kvstate.ErrNoChange when the event changes nothing (a duplicate,
// or a stale event of a turn that moved past it).

// msgAction is what a user message does to its thread.
type msgAction int

const (
	// msgDuplicate: the message was applied already (a redelivery).
	msgDuplicate msgAction = iota
	// msgStart: the thread is idle; the message starts a turn.
	msgStart
	// msgQueue: the message waits behind the active turn (FIFO).
	msgQueue
	// msgSupersede: the thread is paused on a turn the message was sent
	// after; its questions are withdrawn, and the thread goes on with the
	// queue (the message joins it at the end).
	msgSupersede
)

// classifyMessage decides what the turn.requested event id, at stream
// sequence seq of the thread's subject, does to t. Ordering rule
// (docs/events.md): messages of a thread run in stream order. A message
// queues behind a running turn, and behind a paused turn when it was in
// the stream before the pause was recorded (seq <= t.PauseMark) or when
// the queue is full (then it is refused, and the pause stays). Only a
// message sent after the pause supersedes it.
func classifyMessage(t *Thread, id string, seq uint64) msgAction {
	if t.Seen(id) {
		return msgDuplicate
	}
	switch t.State {
	case ThreadRunning:
		return msgQueue
	case ThreadPaused:
		if seq <= t.PauseMark || len(t.Queue) >= MaxQueue {
			return msgQueue
		}
		return msgSupersede
	}
	return msgStart
}

// applyMessage applies the user message m (stream sequence seq) to t.
// po is what withdrawing the paused turn's questions found (zero unless
// the caller withdrew them); a supersede without a matching po fails with
// errPauseChanged (the thread paused after the caller looked: look again).
// It returns whether the message was refused (queue full) and the event
// ID of the turn this started ("" if none).
func applyMessage(t *Thread, m QueuedMessage, seq uint64, po pauseOutcome) (refused bool, started string, err error) {
	act := classifyMessage(t, m.EventID, seq)
	if act == msgSupersede && po.resuming && po.turnID == t.TurnID {
		act = msgQueue // every answer is in: the resume is under way
	}
	switch act {
	case msgDuplicate:
		return slices.Contains(t.Refused, m.EventID), "", kvstate.ErrNoChange
	case msgSupersede:
		if po.turnID != t.TurnID {
			return false, "", errPauseChanged
		}
	}
	t.MarkHandled(m.EventID)
	t.LastTurnSeq = max(t.LastTurnSeq, seq)
	switch act {
	case msgQueue:
		if len(t.Queue) >= MaxQueue {
			t.Refuse(m.EventID)
			return true, "", nil // recorded as handled and refused, not queued
		}
		t.Queue = append(t.Queue, m)
		return false, "", nil
	case msgSupersede:
		sup := &Supersession{TurnID: t.TurnID, By: m.EventID, Cancelled: po.cancelled, Expired: po.expired}
		t.State, t.Pending, t.PauseMark = ThreadIdle, nil, 0
		t.Superseded = sup
	}
	// Idle now: the queue goes first, then this message.
	t.Queue = append(t.Queue, m)
	startNext(t)
	if t.Superseded != nil && t.Superseded.By == m.EventID {
		t.Superseded.Started = t.StartedBy
	}
	return false, t.StartedBy, nil
}

// startedByMessage returns the event ID of the turn whose run.requested a
// redelivery of message id must publish again (it may have been lost):
// the turn the message started, directly or by superseding a pause.
func startedByMessage(t *Thread, id string) string {
	if t.Superseded != nil && t.Superseded.By == id {
		return t.Superseded.Started
	}
	return id
}

// startTurn makes m the thread's active turn.
func startTurn(t *Thread, m QueuedMessage) {
	t.State = ThreadRunning
	t.TurnID = events.DerivedID("turn", m.EventID)
	t.RunID = t.TurnID
	t.Agent = m.Agent
	t.StartedBy = m.EventID
	t.TraceParent = m.TraceParent
	t.Pending, t.PauseMark = nil, 0
	// The blocks go with the text: context references reach the model.
	t.Append(schema.ChatMessage{Role: m.Message.Role, Text: m.Message.Text, Content: m.Message.Content})
}

// startNext starts the head of the queue on an idle thread.
func startNext(t *Thread) {
	if t.State != ThreadIdle || len(t.Queue) == 0 {
		return
	}
	next := t.Queue[0]
	t.Queue = t.Queue[1:]
	startTurn(t, next)
}

// outcomeAction is what a run outcome (run.paused, run.completed,
// run.failed) does to its thread.
type outcomeAction int

const (
	// outcomeStale: the outcome is of a turn the thread moved past (not
	// the active turn, or at or below the last applied outcome's stream
	// sequence): a late redelivery, ignored.
	outcomeStale outcomeAction = iota
	// outcomeApply: the next outcome of the active turn.
	outcomeApply
	// outcomeRepeat: this outcome was applied already; its announcements
	// (deterministic event IDs) are published again in case the first
	// attempt died before publishing them.
	outcomeRepeat
)

// classifyPause decides what run.paused event id of turnID, at PARLEY_RUNS
// stream sequence runSeq, does to t. Run outcomes of a turn are applied in
// stream order: a pause is applied only to the running active turn and
// only if it is newer than every outcome applied before; so a late copy of
// an earlier pause of the turn (a processor frozen past AckWait, or killed
// before acking) never reopens questions already answered.
func classifyPause(t *Thread, turnID, id string, runSeq uint64) outcomeAction {
	if t.TurnID != turnID {
		return outcomeStale
	}
	switch t.State {
	case ThreadPaused:
		// The pause the thread is on (a record written before RunSeq
		// existed is recognised by the event ID).
		if t.RunSeq == runSeq || t.RunSeq == 0 && t.Seen(id) {
			return outcomeRepeat
		}
	case ThreadRunning:
		if runSeq > t.RunSeq && !t.Seen(id) {
			return outcomeApply
		}
	}
	return outcomeStale
}

// applyPause records the pause of the active turn: its open questions
// (ids), its stream position and the queue mark (the thread's last
// turn.requested stream sequence when the pause is recorded).
func applyPause(t *Thread, turnID, id string, runSeq uint64, ids []string, mark uint64) error {
	if classifyPause(t, turnID, id, runSeq) != outcomeApply {
		return kvstate.ErrNoChange
	}
	t.MarkHandled(id)
	t.State, t.Pending = ThreadPaused, ids
	t.RunSeq = runSeq
	t.PauseMark = max(mark, t.LastTurnSeq)
	return nil
}

// classifyEnd decides what run.completed or run.failed event id of turnID,
// at PARLEY_RUNS stream sequence runSeq, does to t: it ends the active
// turn (running, or paused when the agent gave up), unless it is older
// than the last outcome applied.
func classifyEnd(t *Thread, turnID, id string, runSeq uint64) outcomeAction {
	switch {
	case t.Seen(id):
		return outcomeRepeat
	case t.TurnID != turnID || t.State == ThreadIdle || runSeq <= t.RunSeq:
		return outcomeStale
	}
	return outcomeApply
}

// applyEnd ends the active turn turnID (adding reply, if any, to the
// history) and starts the next queued message.
func applyEnd(t *Thread, turnID, id string, runSeq uint64, reply *schema.ChatMessage) error {
	if classifyEnd(t, turnID, id, runSeq) != outcomeApply {
		return kvstate.ErrNoChange
	}
	t.MarkHandled(id)
	t.RunSeq = max(t.RunSeq, runSeq)
	if reply != nil {
		// History feeds the model, which reads text: keep the thread
		// record small by leaving the blocks in turn.completed.
		t.Append(schema.ChatMessage{Role: reply.Role, Text: reply.Text})
	}
	t.State, t.Pending, t.PauseMark = ThreadIdle, nil, 0
	startNext(t)
	return nil
}

// applyAnswered removes answered (or withdrawn) questions from the paused
// turn's open list, so an expiry names only what was still open.
func applyAnswered(t *Thread, turnID string, ids ...string) error {
	if t.TurnID != turnID || t.State != ThreadPaused {
		return kvstate.ErrNoChange
	}
	open := slices.DeleteFunc(slices.Clone(t.Pending), func(id string) bool { return slices.Contains(ids, id) })
	if len(open) == len(t.Pending) {
		return kvstate.ErrNoChange
	}
	t.Pending = open
	return nil
}

// applyResume marks the paused turn rec running again (its answers are
// all in), remembering the answers used so a late redelivery of one, after
// the paused record is replaced by the turn's next pause, is not rejected.
func applyResume(t *Thread, rec *kvstate.PausedTurn) error {
	if t.TurnID != rec.TurnID || t.State != ThreadPaused {
		return kvstate.ErrNoChange
	}
	t.State, t.Pending, t.PauseMark = ThreadRunning, nil, 0
	for _, el := range rec.Elicitations {
		if el.ResponseEventID != "" {
			t.MarkHandled(el.ResponseEventID)
		}
	}
	return nil
}

// applyExpiry ends the paused turn whose record expired: the questions
// still open are recorded as expired, and the queue goes on.
func applyExpiry(t *Thread, now time.Time) error {
	if t.State != ThreadPaused {
		return kvstate.ErrNoChange
	}
	t.Expired = &Expiry{TurnID: t.TurnID, ElicitationIDs: t.Pending, At: now}
	t.State, t.Pending, t.PauseMark = ThreadIdle, nil, 0
	startNext(t)
	return nil
}

// pauseOutcome is what a new message found on a paused thread.
type pauseOutcome struct {
	// turnID is the paused turn that was looked at.
	turnID string
	// cancelled are its questions, withdrawn now.
	cancelled []string
	// expired are its questions, gone with the record's TTL.
	expired []string
	// resuming: every question is answered and the resume is under way.
	resuming bool
}

// planWithdraw decides how the message by supersedes the paused turn
// turnID (open questions pending, by the thread record), given its paused
// record rec (nil if gone) at time now. It returns the outcome and whether
// rec was changed (its open questions marked cancelled, with WithdrawnBy
// and Withdrawn stored in the same write, so a redelivery of by, after a
// crash before announcing, still announces them).
func planWithdraw(rec *kvstate.PausedTurn, turnID string, pending []string, by string, now time.Time) (pauseOutcome, bool) {
	po := pauseOutcome{turnID: turnID}
	switch {
	case rec == nil || rec.TurnID != turnID || !now.Before(rec.ExpiresAt):
		// Past expiresAt the record is expired even if its key lingers
		// (TTLs are whole seconds).
		po.expired = pending
		return po, false
	case rec.WithdrawnBy != "":
		// Withdrawn already: by this message's earlier attempt, or by one
		// that died before recording itself; either way announce them.
		po.cancelled = rec.Withdrawn
		return po, false
	}
	ids := rec.PendingIDs()
	if len(ids) == 0 {
		po.resuming = rec.Resumed
		return po, false
	}
	for i := range rec.Elicitations {
		if rec.Elicitations[i].Status == kvstate.StatusPending {
			rec.Elicitations[i].Status = kvstate.StatusCancelled
		}
	}
	rec.WithdrawnBy, rec.Withdrawn = by, ids
	po.cancelled = ids
	return po, true
}

// normalizeAnswer applies the MCP action's rules before an answer is
// checked: decline and cancel are always honoured, so content they may not
// carry is dropped (and named in dropped) instead of refusing the answer
// and leaving the question open. A tool confirmation's decline keeps
// content["instructions"] when it fits the form's property. Content is
// validated only on accept (by the caller).
func normalizeAnswer(r schema.ElicitResult, req *schema.ElicitRequestParams) (out schema.ElicitResult, dropped []string) {
	if r.Action == schema.ActionAccept || r.Content == nil {
		return r, nil
	}
	out = r
	out.Content = nil
	if r.Action == schema.ActionDecline && req.IsToolConfirmation() {
		if v, ok := r.Content[schema.InstructionsProperty]; ok {
			keep := schema.ElicitResult{Action: schema.ActionDecline, Content: map[string]any{schema.InstructionsProperty: v}}
			if keep.Validate(req) == nil {
				out.Content = keep.Content
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.Content)) {
		if _, kept := out.Content[k]; !kept {
			dropped = append(dropped, "content."+k)
		}
	}
	return out, dropped
}

// answerVerdict is what an elicitation.responded does to a paused record.
type answerVerdict struct {
	// reason is the rejection reason ("" when not rejected), with detail
	// and the violations of the content.
	reason string
	detail string
	errors []schema.Violation
	// unknown: the record has no elicitation with the ID (the answer may
	// have resumed an earlier pause of the turn: the caller checks).
	unknown bool
	// consumed: the answer won now; the record was changed and must be
	// written (revision-checked) before anything is announced.
	consumed bool
	// withdrawn are the questions a cancel withdrew (to announce; also on
	// a redelivery of the winning cancel).
	withdrawn []string
	// dropped names content the action may not carry, dropped.
	dropped []string
}

// applyAnswer checks the answer id (data in, from the authenticated party
// who, recorded as its answerer) against the paused record rec
// at time now, in the order of the catalogue (unknown_or_expired,
// invalid_content, already_consumed; invalid_event and state_incompatible
// are the caller's), and consumes it: the first answer wins, a cancel
// withdraws the turn's other open questions, and a settled record is
// marked Resumed. A redelivery of the winning answer is neither rejected
// nor consumed again (consumed false, reason ""): the caller finishes what
// it started.
func applyAnswer(rec *kvstate.PausedTurn, id string, in events.ElicitationResponded, who events.Identity, now time.Time) answerVerdict {
	el := rec.Find(in.ElicitationID)
	switch {
	case el == nil:
		return answerVerdict{unknown: true, reason: events.RejectUnknownOrExpired,
			detail: "no pending elicitation with this ID on the thread"}
	case !now.Before(rec.ExpiresAt):
		return answerVerdict{reason: events.RejectUnknownOrExpired, detail: "the paused turn expired"}
	case el.Status == kvstate.StatusCancelled:
		return answerVerdict{reason: events.RejectUnknownOrExpired,
			detail: "the elicitation was withdrawn (a newer message, or a cancel of another question of the turn)"}
	}
	result, dropped := normalizeAnswer(in.Result(), &el.Request)
	v := answerVerdict{dropped: dropped}
	if err := result.Validate(&el.Request); err != nil {
		var ve *schema.ValidationError
		if errors.As(err, &ve) {
			v.errors = ve.Violations
		} else {
			v.errors = []schema.Violation{{Path: "content", Rule: err.Error()}}
		}
		v.reason, v.detail = events.RejectInvalidContent, "the answer does not fit the requested schema; the question is still open"
		return v
	}
	if el.Status == kvstate.StatusConsumed {
		if el.ResponseEventID != id {
			v.reason, v.detail = events.RejectAlreadyConsumed, "this elicitation was already answered"
			return v
		}
		if el.Result != nil && el.Result.Action == schema.ActionCancel {
			for _, o := range rec.Elicitations {
				if o.Status == kvstate.StatusCancelled {
					v.withdrawn = append(v.withdrawn, o.ID)
				}
			}
		}
		return v
	}
	el.Status = kvstate.StatusConsumed
	el.Result = &result
	el.AnsweredBy = who
	el.AnsweredAt = now.UTC()
	el.ResponseEventID = id
	if result.Action == schema.ActionCancel {
		// Cancel ends the iteration: the turn's other questions are
		// withdrawn, not left waiting.
		v.withdrawn = rec.PendingIDs()
		for i := range rec.Elicitations {
			if rec.Elicitations[i].Status == kvstate.StatusPending {
				rec.Elicitations[i].Status = kvstate.StatusCancelled
			}
		}
	}
	if rec.Settled() {
		rec.Resumed = true
	}
	v.consumed = true
	return v
}
