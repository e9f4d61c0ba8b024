package processor

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// The thread's transitions, as pure functions over its record (Thread,
// its paused turn included). The handlers in turns.go and pause.go load
// the record, apply one of these inside a revision-checked write, and
// publish what the result says; these functions decide. They return
// kvstate.ErrNoChange when the event changes nothing (a duplicate, or a
// stale event of a turn that moved past it).

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
	if t.Seen(id) || holds(t, id) {
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

// holds reports whether the thread record still names the message id
// where it put it: the active turn's, queued, the superseding message, or
// refused. Handled keeps only the last maxHandled event IDs, and a burst
// of messages (or a turn's many answers) evicts an ID while its message
// may still be redelivered; these do not age out while they matter.
func holds(t *Thread, id string) bool {
	return t.StartedBy == id || t.Superseded != nil && t.Superseded.By == id ||
		slices.Contains(t.Refused, id) ||
		slices.ContainsFunc(t.Queue, func(m QueuedMessage) bool { return m.EventID == id })
}

// applyMessage applies the user message m (stream sequence seq) to t at
// time now: a message that supersedes the paused turn withdraws its open
// questions in the same write (planWithdraw). It returns whether the
// message was refused (queue full) and the event ID of the turn this
// started ("" if none).
func applyMessage(t *Thread, m QueuedMessage, seq uint64, now time.Time) (refused bool, started string, err error) {
	act := classifyMessage(t, m.EventID, seq)
	var po pauseOutcome
	if act == msgSupersede && supersedeOverflows(t, m) {
		act = msgQueue // refused below: the queue is full in bytes, and the pause stays
	}
	if act == msgSupersede {
		if po = planWithdraw(t, m.EventID, now); po.resuming {
			act = msgQueue // every answer is in: the resume is under way
		}
	}
	if act == msgDuplicate {
		return slices.Contains(t.Refused, m.EventID), "", kvstate.ErrNoChange
	}
	t.MarkHandled(m.EventID)
	t.LastTurnSeq = max(t.LastTurnSeq, seq)
	switch act {
	case msgQueue:
		if len(t.Queue) >= MaxQueue || queueBytes(t.Queue...)+queueBytes(m) > MaxQueueBytes {
			t.Refuse(m.EventID)
			return true, "", nil // recorded as handled and refused, not queued
		}
		t.Queue = append(t.Queue, m)
		return false, "", nil
	case msgSupersede:
		sup := &Supersession{TurnID: t.TurnID, By: m.EventID, Cancelled: po.cancelled, Expired: po.expired}
		// What the superseded turn ran stays in the history, before the
		// messages that start now.
		note := supersededNote
		if len(po.cancelled) == 0 && len(po.expired) > 0 {
			note = expiredNote
		}
		t.appendRan(pausedRan(t, t.TurnID), note)
		t.State, t.PauseMark = ThreadIdle, 0
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

// supersedeOverflows reports whether the queue would pass MaxQueueBytes
// once the message m superseded t's paused turn: m joins the queue's end
// as its head starts (the paused turn stays in the record, settled, so
// the queue's bound must hold here too).
func supersedeOverflows(t *Thread, m QueuedMessage) bool {
	if len(t.Queue) == 0 {
		return false // m itself starts
	}
	return queueBytes(t.Queue[1:]...)+queueBytes(m) > MaxQueueBytes
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
	// The run is the thread's own: the turn ID derives from an event ID
	// its sender chose (another thread's message may have it), and the
	// agent keys its run record, the questions and the decision records by
	// the run ID.
	t.RunID = events.DerivedID("run", t.ID, t.TurnID)
	t.Agent = m.Agent
	t.StartedBy = m.EventID
	t.TraceParent = m.TraceParent
	t.TurnGrants = m.Grants
	t.PauseMark = 0
	// The blocks go with the text, and what the processor resolved of
	// the context references (references.go): they reach the model.
	t.Append(schema.ChatMessage{Role: m.Message.Role, Text: m.Message.Text, Content: m.Message.Content,
		Meta: historyMeta(m.Message.Meta)})
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
		if t.RunSeq == runSeq || t.RunSeq == 0 && appliedID(t, id) {
			return outcomeRepeat
		}
	case ThreadRunning:
		if runSeq > t.RunSeq && !appliedID(t, id) {
			return outcomeApply
		}
	}
	return outcomeStale
}

// appliedID reports whether the thread's recent IDs name the run outcome
// id as applied. They hold the IDs its parties chose for their input
// too, and an outcome's ID derives from the run ID, which anyone who
// knows the thread and its message computes: a message the thread holds
// (queued, running, refused) under an outcome's ID is not the outcome.
// Its sender read the ID's message in PARLEY_CHAT, so the message is
// after it in the thread's order: it leaves the queue and the active
// turn only after that message's turn, whose outcomes it was named for,
// ended.
func appliedID(t *Thread, id string) bool {
	return t.Seen(id) && !holds(t, id)
}

// applyPause records the pause pt of the active turn (run.paused event
// id, at PARLEY_RUNS sequence pt.RunSeq): its questions, its stream
// position and the queue mark (the thread's last turn.requested stream
// sequence when the pause is recorded). pt replaces the thread's earlier
// paused turn.
func applyPause(t *Thread, pt *PausedTurn, id string, mark uint64) error {
	if classifyPause(t, pt.TurnID, id, pt.RunSeq) != outcomeApply {
		return kvstate.ErrNoChange
	}
	t.MarkHandled(id)
	cp := *pt
	cp.Elicitations = slices.Clone(pt.Elicitations)
	cp.Grants = t.TurnGrants
	t.State, t.Paused = ThreadPaused, &cp
	t.RunSeq = pt.RunSeq
	t.PauseMark = max(mark, t.LastTurnSeq)
	return nil
}

// classifyEnd decides what run.completed or run.failed event id of turnID,
// at PARLEY_RUNS stream sequence runSeq, does to t: it ends the active
// turn (running, or paused when the agent gave up), unless it is older
// than the last outcome applied. The outcome applied last is recognised
// by its stream sequence, not by its event ID among the thread's recent
// IDs: those hold the IDs the thread's parties chose for their input
// too, and an outcome's ID derives from the run ID, which anyone who
// knows the thread and its message computes (a party's message under it
// made the turn's end a repeat, never applied). A record written before
// RunSeq existed (0, as in a thread no outcome reached yet) is recognised
// by the event ID, unless that is a message the thread holds: no
// message leaves the queue or the active turn before an outcome is
// applied.
func classifyEnd(t *Thread, turnID, id string, runSeq uint64) outcomeAction {
	switch {
	case runSeq == t.RunSeq, t.RunSeq == 0 && appliedID(t, id):
		return outcomeRepeat
	case t.TurnID != turnID || t.State == ThreadIdle || runSeq <= t.RunSeq:
		return outcomeStale
	}
	return outcomeApply
}

// applyEnd ends the active turn turnID (adding to the history the tool
// calls it ran, with note when there is no reply, then reply, if any) and
// starts the next queued message.
func applyEnd(t *Thread, turnID, id string, runSeq uint64, reply *schema.ChatMessage, ran ranTools, note string) error {
	if classifyEnd(t, turnID, id, runSeq) != outcomeApply {
		return kvstate.ErrNoChange
	}
	t.MarkHandled(id)
	t.RunSeq = max(t.RunSeq, runSeq)
	t.appendRan(ran.orPaused(t, turnID), note)
	if reply != nil {
		// History feeds the model, which reads text: keep the thread
		// record small by leaving the blocks in turn.completed.
		t.Append(schema.ChatMessage{Role: reply.Role, Text: reply.Text})
	}
	t.State, t.PauseMark = ThreadIdle, 0
	startNext(t)
	return nil
}

// applyAbandon ends the active turn turnID, while it is in state, without
// an outcome of its run (it cannot go on: its pause record is unreadable,
// or gone before the resume), keeping in the history the tool calls its
// run executed before it paused, and starts the next queued message; the
// caller announces turn.failed (reason).
func applyAbandon(t *Thread, turnID, state, reason string) error {
	if t.TurnID != turnID || t.State != state {
		return kvstate.ErrNoChange
	}
	t.appendRan(pausedRan(t, turnID), failedNote(reason))
	t.State, t.PauseMark = ThreadIdle, 0
	startNext(t)
	return nil
}

// resumePaused marks the paused turn running again (its answers are all
// in), remembering the answers used so a late redelivery of one, after
// the turn's next pause replaces its questions, is not rejected.
func resumePaused(t *Thread) {
	t.State, t.PauseMark = ThreadRunning, 0
	t.Paused.Resumed = true
	for _, el := range t.Paused.Elicitations {
		if el.ResponseEventID != "" {
			t.MarkHandled(el.ResponseEventID)
		}
	}
}

// applyExpiry ends the paused turn whose pause record (key) expired: the
// questions still open are recorded as expired, and the queue goes on.
// The expiry of any other record (an earlier pause's, or one stored for a
// pause the thread never took) changes nothing.
func applyExpiry(t *Thread, key string, now time.Time) error {
	switch {
	case t.State != ThreadPaused:
		return kvstate.ErrNoChange
	case t.Paused != nil && t.Paused.TurnID == t.TurnID && t.Paused.Record != key,
		(t.Paused == nil || t.Paused.TurnID != t.TurnID) && key != t.ID:
		return kvstate.ErrNoChange
	}
	t.Expired = &Expiry{TurnID: t.TurnID, ElicitationIDs: t.pending(), At: now, Record: key}
	t.appendRan(pausedRan(t, t.TurnID), expiredNote)
	t.State, t.PauseMark = ThreadIdle, 0
	startNext(t)
	return nil
}

// pauseOutcome is what a new message found on a paused thread.
type pauseOutcome struct {
	// turnID is the paused turn that was looked at.
	turnID string
	// cancelled are its questions, withdrawn now.
	cancelled []string
	// expired are its questions, past their expiry.
	expired []string
	// resuming: every question is answered and the resume is under way.
	resuming bool
}

// planWithdraw withdraws the open questions of t's paused turn for the
// message by, at time now: they are marked cancelled, with WithdrawnBy
// and Withdrawn, in the write that supersedes the turn. Questions past
// their expiry are named expired instead; a turn whose questions are all
// answered is resuming (the message then queues).
func planWithdraw(t *Thread, by string, now time.Time) pauseOutcome {
	po := pauseOutcome{turnID: t.TurnID}
	rec := t.Paused
	switch {
	case rec == nil || rec.TurnID != t.TurnID:
		return po // an earlier version's pause whose record is gone
	case !now.Before(rec.ExpiresAt):
		po.expired = rec.PendingIDs()
		return po
	case rec.WithdrawnBy != "":
		// Withdrawn already (an earlier version withdrew in a write of
		// its own before the thread's): announce them.
		po.cancelled = rec.Withdrawn
		return po
	}
	ids := rec.PendingIDs()
	if len(ids) == 0 {
		// Every answer is in: the resume is under way (or, when an
		// earlier version consumed the last answer without resuming in
		// the same write, the answer's redelivery resumes it).
		po.resuming = true
		return po
	}
	for i := range rec.Elicitations {
		if rec.Elicitations[i].Status == StatusPending {
			rec.Elicitations[i].Status = StatusCancelled
		}
	}
	rec.WithdrawnBy, rec.Withdrawn = by, ids
	po.cancelled = ids
	return po
}

// answerGrowth is how many bytes consuming el with result (answer id from
// who at now) adds to the thread record's JSON: what counts against the
// answerRoom the paused turn reserved for it.
func answerGrowth(el *Elicitation, result schema.ElicitResult, edited json.RawMessage, who events.Identity, id string, now time.Time) int {
	before, _ := json.Marshal(el)
	c := *el
	c.Status, c.Result, c.AnsweredBy, c.AnsweredAt, c.ResponseEventID = StatusConsumed, &result, who, now.UTC(), id
	c.Arguments = edited
	after, _ := json.Marshal(&c)
	return len(after) - len(before)
}

// takeEdit takes the edited arguments (_meta["dev.parley/arguments"])
// out of an answer result r, normalized, for the confirmation req: on an
// accept they are checked (schema.CheckEdit) and returned canonical, or
// nil when they equal the call's own arguments (no edit); vs names the
// field and rule when they are not valid. (normalizeAnswer already
// dropped them from a decline or cancel.) The result keeps no copy.
func takeEdit(r *schema.ElicitResult, req *schema.ElicitRequestParams) (edited json.RawMessage, vs []schema.Violation) {
	if k, ok := misspelledEditKey(r.Meta); ok && r.Action == schema.ActionAccept {
		// Read as a plain accept, this answer would run the model's call
		// unedited, which is not what its sender meant to confirm.
		return nil, []schema.Violation{{Path: `_meta[` + strconv.Quote(k) + `]`, Rule: fmt.Sprintf(
			"edited arguments go in _meta[%q], spelled exactly (keys are case-sensitive); nothing was accepted", schema.MetaArguments)}}
	}
	v, ok := r.Meta[schema.MetaArguments]
	if !ok {
		return nil, nil
	}
	r.Meta = r.Meta.Clone()
	delete(r.Meta, schema.MetaArguments)
	if len(r.Meta) == 0 {
		r.Meta = nil
	}
	raw, isRaw := v.(json.RawMessage)
	if !isRaw {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, []schema.Violation{{Path: schema.EditPath, Rule: err.Error()}}
		}
	}
	canon, err := schema.CheckEdit(req, raw)
	if err != nil {
		return nil, schema.Violations(err)
	}
	if tc, err := req.Meta.ToolCall(); err == nil && tc != nil && schema.SameArguments(tc.Arguments, canon) {
		return nil, nil
	}
	return canon, nil
}

// misspelledEditKey returns a key of an answer's _meta that looks like
// the edited arguments' key (schema.MetaArguments) but is not it: the
// same in another case or with spaces around it, or "dev.parley" (the
// key's prefix, as if nested); ok false when there is none.
func misspelledEditKey(m schema.Meta) (key string, ok bool) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		t := strings.TrimSpace(k)
		if k != schema.MetaArguments && (strings.EqualFold(t, schema.MetaArguments) || strings.EqualFold(t, "dev.parley")) {
			return k, true
		}
	}
	return "", false
}

// normalizeAnswer applies the MCP action's rules before an answer is
// checked: decline and cancel are always honoured, so content they may not
// carry is dropped (and named in dropped) instead of refusing the answer
// and leaving the question open. A tool confirmation's decline keeps
// content["instructions"] when it fits the form's property. Content is
// validated only on accept (by the caller).
func normalizeAnswer(r schema.ElicitResult, req *schema.ElicitRequestParams) (out schema.ElicitResult, dropped []string) {
	if r.Action != schema.ActionAccept {
		if _, ok := r.Meta[schema.MetaArguments]; ok {
			// Only an accept may change a call: a decline or cancel is
			// honoured as it is, its edit dropped.
			r.Meta = r.Meta.Clone()
			delete(r.Meta, schema.MetaArguments)
			if len(r.Meta) == 0 {
				r.Meta = nil
			}
			dropped = append(dropped, schema.EditPath)
		}
	}
	if r.Action == schema.ActionAccept || r.Content == nil {
		return r, dropped
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

// answerVerdict is what an elicitation.responded does to a thread.
type answerVerdict struct {
	// reason is the rejection reason ("" when not rejected), with detail
	// and the violations of the content.
	reason string
	detail string
	errors []schema.Violation
	// unknown: the thread's paused turn has no elicitation with the ID
	// (the answer may have resumed an earlier pause of the turn: the
	// caller checks).
	unknown bool
	// consumed: the answer won now.
	consumed bool
	// write: the thread was changed (the answer consumed, the turn
	// resumed) and must be written, revision-checked, before anything is
	// announced.
	write bool
	// withdrawn are the questions a cancel withdrew (to announce; also on
	// a redelivery of the winning cancel).
	withdrawn []string
	// dropped names content the action may not carry, dropped.
	dropped []string
}

// applyAnswer checks the answer id (data in, from the authenticated party
// who, recorded as its answerer) against the thread's paused turn at time
// now, in the order of the catalogue (unknown_or_expired, invalid_content,
// already_consumed; invalid_event and state_incompatible are the
// caller's), and consumes it: the first answer wins, a cancel withdraws
// the turn's other open questions, and the answer that settles the last
// question resumes the turn in the same write (resumePaused). A
// redelivery of the winning answer is neither rejected nor consumed again
// (consumed false, reason ""): the caller finishes what it started.
func applyAnswer(t *Thread, id string, in events.ElicitationResponded, who events.Identity, now time.Time) answerVerdict {
	rec := t.Paused
	var el *Elicitation
	if rec != nil {
		el = rec.Find(in.ElicitationID)
	}
	waiting := el != nil && t.State == ThreadPaused && t.TurnID == rec.TurnID
	switch {
	case el == nil:
		return answerVerdict{unknown: true, reason: events.RejectUnknownOrExpired,
			detail: "no pending elicitation with this ID on the thread"}
	case el.Status == StatusConsumed && el.ResponseEventID == id && !el.AnsweredBy.IsZero() && !el.AnsweredBy.Same(who):
		// Another party's answer under the winning answer's ID (the IDs
		// are in PARLEY_CHAT): not its redelivery, nothing to echo.
		return answerVerdict{reason: events.RejectAlreadyConsumed, detail: "this elicitation was already answered"}
	case el.Status == StatusConsumed && el.ResponseEventID == id:
		// The winning answer redelivered (its first handling may have
		// died before the resume was published): finish, at any time.
		var v answerVerdict
		if el.Result != nil && el.Result.Action == schema.ActionCancel {
			for _, o := range rec.Elicitations {
				if o.Status == StatusCancelled {
					v.withdrawn = append(v.withdrawn, o.ID)
				}
			}
		}
		if waiting && rec.Settled() {
			// Consumed by an earlier version, which resumed in a write of
			// its own: resume now.
			resumePaused(t)
			v.write = true
		}
		return v
	case !now.Before(rec.ExpiresAt):
		return answerVerdict{reason: events.RejectUnknownOrExpired, detail: "the paused turn expired"}
	case el.Status == StatusCancelled:
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
		v.reason, v.detail = events.RejectInvalidContent, "the answer does not fit the requested schema; "+questionState(t, in.ElicitationID, now)
		return v
	}
	edited, vs := takeEdit(&result, &el.Request)
	if len(vs) > 0 {
		v.errors = vs
		v.reason, v.detail = events.RejectInvalidContent, "the edited arguments are not valid for the tool; "+questionState(t, in.ElicitationID, now)
		return v
	}
	if _, drop, svs := standingChoice(el, result); len(svs) > 0 {
		v.errors = svs
		v.reason, v.detail = events.RejectInvalidContent, "the standing approval cannot be granted; "+questionState(t, in.ElicitationID, now)
		return v
	} else if drop != "" {
		v.dropped = append(v.dropped, drop)
	}
	if n := answerGrowth(el, result, edited, who, id, now); n > answerRoom {
		v.errors = []schema.Violation{{Path: "content", Rule: fmt.Sprintf(
			"%d bytes as the thread stores the answer (JSON, escapes included) is over the limit of %d", n, answerRoom)}}
		v.reason, v.detail = events.RejectInvalidContent, "the answer is too large; "+questionState(t, in.ElicitationID, now)
		return v
	}
	if el.Status == StatusConsumed {
		v.reason, v.detail = events.RejectAlreadyConsumed, "this elicitation was already answered"
		return v
	}
	if !waiting {
		// The turn ended while its question was open (the agent gave
		// up, or the thread was reset).
		return answerVerdict{reason: events.RejectUnknownOrExpired, detail: "the turn no longer waits for this answer"}
	}
	el.Status = StatusConsumed
	el.Result = &result
	el.AnsweredBy = who
	el.AnsweredAt = now.UTC()
	el.ResponseEventID = id
	el.Arguments = edited
	if result.Action == schema.ActionCancel {
		// Cancel ends the iteration: the turn's other questions are
		// withdrawn, not left waiting.
		v.withdrawn = rec.PendingIDs()
		for i := range rec.Elicitations {
			if rec.Elicitations[i].Status == StatusPending {
				rec.Elicitations[i].Status = StatusCancelled
			}
		}
	}
	if rec.Settled() {
		resumePaused(t)
	}
	v.consumed, v.write = true, true
	return v
}

// questionState says, for a refusal's detail, what became of question id
// of thread t at time now: still open (the party may answer again), or
// why not. A refusal that is not about the question's state (invalid
// content, too large) states it as it is, never "still open" for a
// question that was answered, withdrawn or expired.
func questionState(t *Thread, id string, now time.Time) string {
	rec := t.Paused
	el := rec.Find(id)
	switch {
	case el == nil:
		return "no question with this ID is open on the thread"
	case el.Status == StatusConsumed:
		return "the question was already answered"
	case el.Status == StatusCancelled:
		return "the question was withdrawn"
	case !now.Before(rec.ExpiresAt):
		return "the question expired"
	case t.State != ThreadPaused || t.TurnID != rec.TurnID:
		return "the turn no longer waits for this answer"
	}
	return "the question is still open"
}
