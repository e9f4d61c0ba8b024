package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/bus"
)

// onTurnRequested starts a turn, queues the message behind the running
// turn (FIFO), or, on a paused thread, cancels the pending elicitations and
// starts the new turn.
func (p *Processor) onTurnRequested(ctx context.Context, thread string, d *bus.Delivery) error {
	e := d.Event
	in, verr := p.validateTurn(thread, e)
	if verr != nil {
		p.log.WarnContext(ctx, "turn rejected", "subject", thread, "event_id", e.ID(), "errors", verr)
		reason := events.RejectInvalidEvent
		if len(verr) == 1 && strings.Contains(verr[0].Rule, "over the limit") {
			reason = events.RejectMessageTooLarge
		}
		if err := p.publishChat(ctx, thread, events.ChatTurnRejected, events.TypeTurnRejected,
			events.DerivedID("turn.rejected", e.ID()), "",
			events.TurnRejected{RequestEventID: e.ID(), Reason: reason, Errors: verr}); err != nil {
			return err
		}
		if events.ValidToken("subject", thread) != nil {
			return nil // no thread record for an invalid thread ID
		}
		return p.recordSeq(ctx, thread, d.StreamSeq)
	}
	if err := p.awaitPredecessors(ctx, thread, d); err != nil {
		return err
	}
	queued := kvstate.QueuedMessage{EventID: e.ID(), Agent: in.Agent, User: in.User, Message: in.Message,
		TraceParent: bus.TraceParent(ctx)}

	// On a paused thread the paused record decides: pending questions are
	// withdrawn first (so no answer can resume the old turn once the new
	// one starts) and the new turn starts; a record whose answers are all
	// in means its resume is under way, so the message queues; a record
	// that expired means the old turn is over. If the thread pauses
	// between the look and the write, look again.
	var (
		t    *kvstate.Thread
		po   pauseOutcome
		full bool
	)
	for attempt := 0; ; attempt++ {
		cur, _, err := p.threads.Load(ctx, thread)
		if err != nil {
			return p.failIncompatible(ctx, thread, err)
		}
		po = pauseOutcome{}
		if cur.State == kvstate.ThreadPaused && !cur.Seen(e.ID()) {
			if po, err = p.withdraw(ctx, cur); err != nil {
				return err
			}
		}
		t, err = p.threads.Mutate(ctx, thread, func(t *kvstate.Thread) error {
			full = false
			if t.Seen(e.ID()) {
				// A redelivery: repeat a refusal whose publish may have failed.
				full = slices.Contains(t.Refused, e.ID())
				return kvstate.ErrNoChange
			}
			if t.State == kvstate.ThreadPaused && t.TurnID != po.turnID {
				return errPauseChanged
			}
			t.MarkHandled(e.ID())
			t.LastTurnSeq = max(t.LastTurnSeq, d.StreamSeq)
			if t.State == kvstate.ThreadRunning || t.State == kvstate.ThreadPaused && po.resuming {
				if len(t.Queue) >= kvstate.MaxQueue {
					full = true
					t.Refuse(e.ID())
					return nil // recorded as handled and refused, not queued
				}
				t.Queue = append(t.Queue, queued)
				return nil
			}
			// Idle, or paused with its questions withdrawn or expired.
			t.Pending = nil
			startTurn(t, queued)
			return nil
		})
		if errors.Is(err, errPauseChanged) && attempt < 10 {
			continue
		}
		if err != nil {
			return p.failIncompatible(ctx, thread, err)
		}
		break
	}
	if full {
		return p.publishChat(ctx, thread, events.ChatTurnRejected, events.TypeTurnRejected,
			events.DerivedID("turn.rejected", e.ID()), "",
			events.TurnRejected{RequestEventID: e.ID(), Reason: events.RejectThreadBusy, Errors: []schema.Violation{{
				Path: "subject", Rule: fmt.Sprintf("the thread already has %d messages waiting; send again later", kvstate.MaxQueue)}}})
	}
	if t.StartedBy == e.ID() {
		if err := p.announceEnd(ctx, thread, po); err != nil {
			return err
		}
	}
	return p.requestRun(ctx, t, e.ID())
}

// recordSeq records that the turn.requested at stream sequence seq was
// dealt with (refused or dead-lettered) without queueing, so later
// messages of the thread stop waiting for it.
func (p *Processor) recordSeq(ctx context.Context, thread string, seq uint64) error {
	_, err := p.threads.Mutate(ctx, thread, func(t *kvstate.Thread) error {
		if t.LastTurnSeq >= seq {
			return kvstate.ErrNoChange
		}
		t.LastTurnSeq = seq
		return nil
	})
	return err
}

// awaitPredecessors holds a user message until every earlier
// turn.requested of its thread (by stream sequence) is recorded, so that
// messages of one thread are taken in order (FIFO) even when replicas
// handle them in parallel. It polls the thread record and the stream (a
// subject-filtered get of the next message after the last recorded one),
// heartbeating the message, for up to OrderWait; then it returns an error
// so the message is retried later.
func (p *Processor) awaitPredecessors(ctx context.Context, thread string, d *bus.Delivery) error {
	subject := events.ChatSubject(thread, events.ChatTurnRequested)
	deadline := time.Now().Add(p.opts.OrderWait)
	for {
		t, _, err := p.threads.Load(ctx, thread)
		if err != nil {
			return nil // handled (and reported) by the caller
		}
		if t.Seen(d.Event.ID()) || t.LastTurnSeq >= d.StreamSeq {
			return nil // recorded already, or a late message: take it now
		}
		next, err := p.chat.GetMsg(ctx, t.LastTurnSeq+1, jetstream.WithGetMsgSubject(subject))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("checking earlier messages of %s: %w", thread, err)
		case next.Sequence >= d.StreamSeq:
			return nil // this is the next message of the thread
		}
		if time.Now().After(deadline) {
			// Free the slot (the earlier message may need it) and come back.
			return bus.RetryLater(fmt.Errorf("message %d of %s waits for earlier message %d", d.StreamSeq, thread, next.Sequence), 500*time.Millisecond)
		}
		_ = d.Msg.InProgress()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// validateTurn checks a turn.requested event; the violations name fields.
func (p *Processor) validateTurn(thread string, e *event.Event) (events.TurnRequested, []schema.Violation) {
	var vs []schema.Violation
	if err := events.ValidToken("subject", thread); err != nil {
		vs = append(vs, schema.Violation{Path: "subject", Rule: err.Error()})
	}
	if e.Subject() != thread {
		vs = append(vs, schema.Violation{Path: "subject", Rule: fmt.Sprintf("must equal the thread of the NATS subject (%q)", thread)})
	}
	in, err := events.Data[events.TurnRequested](e)
	if err != nil {
		return in, append(vs, schema.Violation{Path: "data", Rule: err.Error()})
	}
	if in.Agent == "" {
		in.Agent = p.opts.DefaultAgent
	}
	if err := events.ValidToken("agent", in.Agent); err != nil {
		vs = append(vs, schema.Violation{Path: "data.agent", Rule: err.Error()})
	}
	if in.Message.Role == "" {
		in.Message.Role = schema.RoleUser
	}
	if in.Message.Role != schema.RoleUser {
		vs = append(vs, schema.Violation{Path: "data.message.role", Rule: `must be "user"`})
	}
	if strings.TrimSpace(in.Message.Text) == "" {
		vs = append(vs, schema.Violation{Path: "data.message.text", Rule: "required"})
	}
	if n := len(in.Message.Text); n > events.MaxMessageText {
		vs = append(vs, schema.Violation{Path: "data.message.text",
			Rule: fmt.Sprintf("%d bytes is over the limit of %d", n, events.MaxMessageText)})
	}
	if e.Type() != events.TypeTurnRequested {
		vs = append(vs, schema.Violation{Path: "type", Rule: fmt.Sprintf("must be %q on a turn.requested subject", events.TypeTurnRequested)})
	}
	return in, vs
}

// startTurn makes m the thread's active turn.
func startTurn(t *kvstate.Thread, m kvstate.QueuedMessage) {
	t.State = kvstate.ThreadRunning
	t.TurnID = events.DerivedID("turn", m.EventID)
	t.RunID = t.TurnID
	t.Agent = m.Agent
	t.StartedBy = m.EventID
	t.TraceParent = m.TraceParent
	t.Pending = nil
	// The blocks go with the text: context references reach the model.
	t.Append(schema.ChatMessage{Role: m.Message.Role, Text: m.Message.Text, Content: m.Message.Content})
}

// requestRun publishes run.requested for the thread's active turn if the
// event startedBy started it (again after a crash: the ID is deterministic).
func (p *Processor) requestRun(ctx context.Context, t *kvstate.Thread, startedBy string) error {
	if t.State != kvstate.ThreadRunning || t.StartedBy != startedBy {
		return nil
	}
	e, err := events.NewWithID(events.DerivedID("run.requested", t.RunID), events.SourceProcessor,
		events.TypeRunRequested, t.ID, events.RunRequested{RunID: t.RunID, TurnID: t.TurnID, Thread: t.ID,
			Agent: t.Agent, Messages: t.History})
	if err != nil {
		return err
	}
	e.SetExtension(events.ExtTurnID, t.TurnID)
	e.SetExtension(events.ExtRunID, t.RunID)
	if t.TraceParent != "" {
		e.SetExtension(events.ExtTraceParent, t.TraceParent)
	}
	// A turn taken from the queue continues the trace its message came in.
	ctx, end := bus.WithTraceParent(ctx, t.TraceParent, "start turn")
	defer end()
	if err := p.publish(ctx, events.SubjectRunRequested, e); err != nil {
		return err
	}
	p.log.InfoContext(ctx, "turn started", "subject", t.ID, "turn_id", t.TurnID, "event_id", t.StartedBy,
		"agent", t.Agent, "queued", len(t.Queue))
	return nil
}

// errPauseChanged: the thread paused (or paused again) after it was read.
var errPauseChanged = errors.New("the thread's pause changed")

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

// withdraw settles the paused turn of t for a new message: pending
// questions are marked cancelled (a revision-checked update, so an answer
// racing it either wins first or is refused).
func (p *Processor) withdraw(ctx context.Context, t *kvstate.Thread) (pauseOutcome, error) {
	po := pauseOutcome{turnID: t.TurnID}
	for range 20 {
		rec, rev, err := p.paused.Load(ctx, t.ID)
		if errors.Is(err, kvstate.ErrNotFound) || errors.Is(err, kvstate.ErrIncompatible) || err == nil && rec.TurnID != t.TurnID {
			po.expired = t.Pending // the record is gone: the turn expired
			return po, nil
		}
		if err != nil {
			return po, err
		}
		ids := rec.PendingIDs()
		if len(ids) == 0 {
			po.resuming = rec.Resumed
			return po, nil
		}
		for i := range rec.Elicitations {
			if rec.Elicitations[i].Status == kvstate.StatusPending {
				rec.Elicitations[i].Status = kvstate.StatusCancelled
			}
		}
		if _, err := p.paused.Update(ctx, rec, rev); errors.Is(err, kvstate.ErrConflict) {
			continue
		} else if err != nil {
			return po, err
		}
		po.cancelled = ids
		return po, nil
	}
	return po, fmt.Errorf("withdrawing the questions of %s: %w", t.ID, kvstate.ErrConflict)
}

// announceEnd tells integrators how the superseded paused turn ended.
func (p *Processor) announceEnd(ctx context.Context, thread string, po pauseOutcome) error {
	switch {
	case len(po.cancelled) > 0:
		return p.publishChat(ctx, thread, events.ChatElicitationCancelled, events.TypeElicitationCancelled,
			events.DerivedID("elicitation.cancelled", po.turnID), po.turnID,
			events.ElicitationCancelled{TurnID: po.turnID, ElicitationIDs: po.cancelled,
				Reason: "a new user message started a new turn"})
	case len(po.expired) > 0:
		// Same ID as the expiry consumer's announcement: published once.
		return p.publishChat(ctx, thread, events.ChatElicitationExpired, events.TypeElicitationExpired,
			events.DerivedID("elicitation.expired", po.turnID), po.turnID,
			events.ElicitationExpired{TurnID: po.turnID, ElicitationIDs: po.expired})
	}
	return nil
}

// finishTurn ends the thread's active turn (if it is turnID) and starts the
// next queued message. It returns the thread and whether this event ended it.
func (p *Processor) finishTurn(ctx context.Context, thread, turnID, eventID string, reply *schema.ChatMessage) (*kvstate.Thread, error) {
	return p.threads.Mutate(ctx, thread, func(t *kvstate.Thread) error {
		if t.Seen(eventID) || t.TurnID != turnID || t.State == kvstate.ThreadIdle {
			return kvstate.ErrNoChange
		}
		t.MarkHandled(eventID)
		if reply != nil {
			// History feeds the model, which reads text: keep the thread
			// record small by leaving the blocks in turn.completed.
			t.Append(schema.ChatMessage{Role: reply.Role, Text: reply.Text})
		}
		t.State, t.Pending = kvstate.ThreadIdle, nil
		if len(t.Queue) > 0 {
			next := t.Queue[0]
			t.Queue = t.Queue[1:]
			startTurn(t, next)
		}
		return nil
	})
}

func (p *Processor) onRunCompleted(ctx context.Context, e *event.Event, in events.RunCompleted) error {
	thread := e.Subject()
	if in.TurnID == "" {
		return bus.Permanent(errors.New("data.turnId: required"))
	}
	t, _, err := p.threads.Load(ctx, thread)
	if err != nil {
		return err
	}
	if t.TurnID != in.TurnID && !t.Seen(e.ID()) {
		p.log.InfoContext(ctx, "ignoring outcome of a superseded turn", "subject", thread, "turn_id", in.TurnID)
		return nil
	}
	msg := in.Message
	msg.Role = schema.RoleAssistant
	if err := p.publishChat(ctx, thread, events.ChatTurnCompleted, events.TypeTurnCompleted,
		events.DerivedID("turn.completed", in.TurnID), in.TurnID, events.TurnCompleted{TurnID: in.TurnID, RequestEventID: startedBy(t, in.TurnID), Message: msg, Decisions: in.Decisions}); err != nil {
		return err
	}
	t, err = p.finishTurn(ctx, thread, in.TurnID, e.ID(), &msg)
	if err != nil {
		return err
	}
	p.log.InfoContext(ctx, "turn completed", "subject", thread, "turn_id", in.TurnID, "decisions", len(in.Decisions))
	return p.requestNext(ctx, t)
}

// startedBy returns the turn.requested event ID that started turnID, if
// it is the thread's active turn.
func startedBy(t *kvstate.Thread, turnID string) string {
	if t.TurnID == turnID {
		return t.StartedBy
	}
	return ""
}

// requestNext publishes run.requested for a turn started from the queue.
func (p *Processor) requestNext(ctx context.Context, t *kvstate.Thread) error {
	return p.requestRun(ctx, t, t.StartedBy)
}

func (p *Processor) onRunFailed(ctx context.Context, e *event.Event, in events.RunFailed) error {
	thread := e.Subject()
	t, _, err := p.threads.Load(ctx, thread)
	if err != nil {
		return err
	}
	if in.TurnID == "" || (t.TurnID != in.TurnID || t.State == kvstate.ThreadIdle) && !t.Seen(e.ID()) {
		p.log.InfoContext(ctx, "ignoring failure of a turn that is not active", "subject", thread, "turn_id", in.TurnID)
		return nil
	}
	if err := p.publishChat(ctx, thread, events.ChatTurnFailed, events.TypeTurnFailed,
		events.DerivedID("turn.failed", in.TurnID), in.TurnID,
		events.TurnFailed{TurnID: in.TurnID, RequestEventID: startedBy(t, in.TurnID), Reason: in.Reason, Detail: in.Detail}); err != nil {
		return err
	}
	t, err = p.finishTurn(ctx, thread, in.TurnID, e.ID(), nil)
	if err != nil {
		return err
	}
	return p.requestNext(ctx, t)
}

// failIncompatible turns a thread record this code cannot read into a
// turn.failed (state_incompatible) and resets the thread so it stays usable.
func (p *Processor) failIncompatible(ctx context.Context, thread string, err error) error {
	if !errors.Is(err, kvstate.ErrIncompatible) {
		return err
	}
	p.log.ErrorContext(ctx, "thread state incompatible; resetting thread", "subject", thread, "error", err)
	if derr := p.threads.Reset(ctx, thread); derr != nil {
		return derr
	}
	if perr := p.publishChat(ctx, thread, events.ChatTurnFailed, events.TypeTurnFailed,
		events.DerivedID("turn.failed.incompatible", thread, err.Error()), "",
		events.TurnFailed{Reason: events.RejectStateIncompatible, Detail: err.Error() + "; the thread was reset"}); perr != nil {
		return perr
	}
	// Retry the event on the reset thread.
	return fmt.Errorf("thread %s was reset after incompatible state: %w", thread, err)
}
