package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/metrics"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// onRunPaused stores the paused turn (TTL) and publishes its questions.
// A pause of a turn that is not running, or older (in PARLEY_RUNS order)
// than an outcome already applied, is stale and ignored; a redelivery of
// the applied pause publishes its questions again (same event IDs).
func (p *Processor) onRunPaused(ctx context.Context, d *bus.Delivery, in events.RunPaused) error {
	e := d.Event
	thread := e.Subject()
	if len(in.Elicitations) == 0 {
		return fmt.Errorf("run.paused without elicitations: %w", errors.New("data.elicitations: required"))
	}
	// From the cache when there; anything but "apply" is read again
	// (a cached record may be behind). An apply decided on a record that
	// turns out behind is caught by the thread's revision-checked write
	// below, as one decided on a fresh read that another replica changed.
	t, trev, cached, err := p.threads.view(ctx, thread)
	if err != nil {
		return err
	}
	act := classifyPause(t, in.TurnID, e.ID(), d.StreamSeq)
	if act != outcomeApply && cached {
		if t, trev, err = p.threads.Load(ctx, thread); err != nil {
			return err
		}
		act, cached = classifyPause(t, in.TurnID, e.ID(), d.StreamSeq), false
	}
	switch act {
	case outcomeStale:
		p.log.InfoContext(ctx, "ignoring a stale pause (the turn is not active, or moved past it)", "subject", thread,
			"turn_id", in.TurnID, "stream_seq", d.StreamSeq, "last_applied", t.RunSeq)
		return nil
	case outcomeApply:
		// The queue mark: messages already in the stream queue behind
		// this pause rather than supersede it.
		mark, err := p.lastTurnRequested(ctx, thread)
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		rec := &kvstate.PausedTurn{Thread: thread, TurnID: in.TurnID, RunID: in.RunID, Agent: in.Agent,
			CreatedAt: now, ExpiresAt: now.Add(p.opts.PauseTTL), Snapshot: in.Snapshot, TraceParent: t.TraceParent,
			RunSeq: d.StreamSeq}
		for _, pe := range in.Elicitations {
			rec.Elicitations = append(rec.Elicitations, kvstate.Elicitation{PendingElicitation: pe, Status: kvstate.StatusPending})
		}
		rev, err := p.paused.Save(ctx, rec)
		if errors.Is(err, kvstate.ErrStale) {
			p.log.InfoContext(ctx, "ignoring a stale pause (a later pause of the turn is stored)", "subject", thread,
				"turn_id", in.TurnID, "stream_seq", d.StreamSeq)
			return nil
		} else if err != nil {
			return fmt.Errorf("storing paused turn: %w", err)
		}
		ids := rec.PendingIDs()
		if t, err = p.threads.MutateAt(ctx, t, trev, cached, func(t *Thread) error {
			return applyPause(t, in.TurnID, e.ID(), d.StreamSeq, ids, mark)
		}); err != nil {
			return err
		}
		if classifyPause(t, in.TurnID, e.ID(), d.StreamSeq) != outcomeRepeat {
			// The thread moved on meanwhile (the decision above was
			// taken on an earlier read): the record just stored must
			// not take answers, or they would be consumed silently.
			return p.dropStalePause(ctx, thread, rev, d.StreamSeq)
		}
	}
	ids := make([]string, 0, len(in.Elicitations))
	for _, pe := range in.Elicitations {
		ids = append(ids, pe.ID)
	}
	for _, pe := range in.Elicitations {
		params := pe.Request
		if err := publishChat(ctx, p, thread, events.KindElicitationRequested,
			events.DerivedID("elicitation.requested", pe.ID), in.TurnID, params); err != nil {
			return err
		}
	}
	msg := restate(in.Elicitations)
	return publishChat(ctx, p, thread, events.KindTurnPaused,
		events.DerivedID(append([]string{"turn.paused"}, ids...)...), in.TurnID,
		events.TurnPaused{TurnID: in.TurnID, RequestEventID: startedBy(t, in.TurnID), Message: msg, ElicitationIDs: ids})
}

// dropStalePause deletes the paused record stored at rev by a pause at
// PARLEY_RUNS sequence runSeq that the thread turned out not to be on,
// if it is still that untouched record (every question pending). A record
// that took answers, or was replaced, is left alone (a later pause of
// any turn replaces it, by RunSeq).
func (p *Processor) dropStalePause(ctx context.Context, thread string, rev, runSeq uint64) error {
	rec, cur, err := p.paused.Load(ctx, thread)
	if err != nil || cur != rev || rec.RunSeq != runSeq || len(rec.PendingIDs()) != len(rec.Elicitations) {
		return nil
	}
	if err := p.paused.Delete(ctx, thread, rev); err != nil && !errors.Is(err, kvstate.ErrConflict) && !errors.Is(err, kvstate.ErrNotFound) {
		return fmt.Errorf("deleting a stale paused turn: %w", err)
	}
	p.log.InfoContext(ctx, "dropped a stale pause stored after the thread moved on", "subject", thread, "stream_seq", runSeq)
	return nil
}

// lastTurnRequested returns the stream sequence of the thread's last
// turn.requested still in PARLEY_INPUT, from any principal (0 if none;
// the work queue keeps only messages not yet handled, and handled ones
// are recorded in the thread already).
func (p *Processor) lastTurnRequested(ctx context.Context, thread string) (uint64, error) {
	ctx, cancel := bus.WithRequestTimeout(ctx)
	defer cancel()
	m, err := p.input.GetLastMsgForSubject(ctx, events.InputThreadSubjects(thread, events.ChatTurnRequested))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading the last message of %s: %w", thread, err)
	}
	return m.Sequence, nil
}

// restate writes the questions as an assistant message in prose, so a
// consumer that ignores elicitations still shows the question.
func restate(pend []events.PendingElicitation) schema.ChatMessage {
	var b strings.Builder
	for i, pe := range pend {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(pe.Request.Message)
		if pe.Kind == events.KindToolConfirmation {
			fmt.Fprintf(&b, "\nTool: %s\nArguments: %s\nPlease confirm or decline.", pe.Tool, compactArgs(pe))
			continue
		}
		rs := pe.Request.RequestedSchema
		for _, name := range rs.PropertyNames() {
			ps := rs.Properties[name]
			label := ps.Title
			if label == "" {
				label = name
			}
			fmt.Fprintf(&b, "\n- %s", label)
			if len(ps.Enum) > 0 {
				opts := ps.Enum
				if len(ps.EnumNames) == len(ps.Enum) {
					opts = ps.EnumNames
				}
				fmt.Fprintf(&b, ": one of %s", strings.Join(opts, ", "))
			} else if ps.Format != "" {
				fmt.Fprintf(&b, " (%s)", ps.Format)
			}
		}
	}
	meta := schema.Meta{}
	if len(pend) > 0 {
		meta[schema.MetaElicitationID] = pend[0].ID
	}
	return schema.ChatMessage{Role: schema.RoleAssistant, Text: b.String(), Meta: meta}
}

func compactArgs(pe events.PendingElicitation) string {
	raw, err := json.Marshal(pe.Request.Meta[schema.MetaToolCall])
	var tc schema.ToolCallMeta
	if err != nil || json.Unmarshal(raw, &tc) != nil || len(tc.Arguments) == 0 {
		return "as shown"
	}
	return string(tc.Arguments)
}

// onResponded checks an answer in the design's order and consumes it:
// unknown_or_expired, invalid_content (stays pending), already_consumed.
func (p *Processor) onResponded(ctx context.Context, src input) error {
	thread, e := src.thread, src.d.Event
	in, err := events.Data[events.ElicitationResponded](e)
	if err != nil || in.ElicitationID == "" {
		detail := "data.elicitationId: required"
		if err != nil {
			detail = err.Error()
		}
		return p.reject(ctx, thread, e.ID(), in.ElicitationID, events.RejectInvalidEvent, detail, nil)
	}
	if err := events.ValidToken("subject", thread); err != nil {
		return p.reject(ctx, thread, e.ID(), in.ElicitationID, events.RejectInvalidEvent, err.Error(), nil)
	}
	switch {
	case events.TypeOf(e) != events.TypeElicitationResponded:
		return p.reject(ctx, thread, e.ID(), in.ElicitationID, events.RejectInvalidEvent,
			fmt.Sprintf("type: must be %q on an elicitation.responded subject", events.TypeElicitationResponded), nil)
	case e.Subject() != thread:
		return p.reject(ctx, thread, e.ID(), in.ElicitationID, events.RejectInvalidEvent,
			fmt.Sprintf("subject: must equal the thread of the NATS subject (%q)", thread), nil)
	}
	switch in.Action {
	case schema.ActionAccept, schema.ActionDecline, schema.ActionCancel:
	default:
		return p.reject(ctx, thread, e.ID(), in.ElicitationID, events.RejectInvalidEvent,
			fmt.Sprintf(`action: %q must be "accept", "decline" or "cancel"`, in.Action), nil)
	}
	// Who answers, as authenticated, and whether the thread is theirs:
	// checked before the paused record is touched, so a refused answer
	// consumes nothing.
	who, err := p.identify(src.principal, e, in.AnsweredBy, "data.answeredBy")
	if err == nil {
		var (
			t      *Thread
			cached bool
		)
		if t, _, cached, err = p.threads.view(ctx, thread); err != nil {
			return p.failIncompatible(ctx, thread, err)
		}
		if err = mayUse(t, who); cached && (err != nil || t.Owner == nil) {
			// A cached record is trusted only to allow, and only once it
			// has an owner (set once; grants only grow): it may be
			// behind the message that claimed the thread, or a share.
			if t, _, err = p.threads.Load(ctx, thread); err != nil {
				return p.failIncompatible(ctx, thread, err)
			}
			err = mayUse(t, who)
		}
	}
	if detail, ok := isForbidden(err); ok {
		return p.reject(ctx, thread, e.ID(), in.ElicitationID, events.RejectForbidden, detail, nil)
	} else if err != nil {
		return p.reject(ctx, thread, e.ID(), in.ElicitationID, events.RejectInvalidEvent, err.Error(), nil)
	}
	// Sizes, before anything reaches the paused record.
	if vs := answerSize(len(e.Data()), in); len(vs) > 0 {
		return p.reject(ctx, thread, e.ID(), in.ElicitationID, events.RejectInvalidContent,
			"the answer is too large; the question is still open", vs)
	}
	var v answerVerdict
	rec, err := p.paused.Mutate(ctx, thread, func(rec *kvstate.PausedTurn) error {
		v = applyAnswer(rec, e.ID(), in, who, time.Now())
		if !v.consumed {
			return kvstate.ErrNoChange
		}
		return nil
	})
	switch {
	case errors.Is(err, kvstate.ErrNotFound):
		if p.usedBefore(ctx, thread, e.ID()) {
			return nil
		}
		return p.reject(ctx, thread, e.ID(), in.ElicitationID, events.RejectUnknownOrExpired,
			"the thread has no paused turn (it expired, or was never paused)", nil)
	case errors.Is(err, kvstate.ErrIncompatible):
		return p.incompatiblePause(ctx, thread, e.ID(), in.ElicitationID, err)
	case errors.Is(err, kvstate.ErrExpired):
		return p.reject(ctx, thread, e.ID(), in.ElicitationID, events.RejectUnknownOrExpired, "the paused turn expired", nil)
	case err != nil:
		return fmt.Errorf("consuming elicitation %s: %w", in.ElicitationID, err)
	}
	if len(v.dropped) > 0 {
		p.log.WarnContext(ctx, "dropped content the action does not carry", "subject", thread,
			"elicitation_id", in.ElicitationID, "action", in.Action, "dropped", v.dropped)
	}
	switch {
	case v.unknown && p.usedBefore(ctx, thread, e.ID()):
		return nil // used to resume an earlier pause of the turn
	case v.reason != "":
		return p.reject(ctx, thread, e.ID(), in.ElicitationID, v.reason, v.detail, v.errors)
	case v.consumed:
		p.log.InfoContext(ctx, "elicitation answered", "subject", thread, "elicitation_id", in.ElicitationID,
			"action", in.Action, "answered_by", who.String())
		metrics.Answered(ctx, string(in.Action))
	}
	// Consumed now, or the winning answer redelivered: finish what it
	// started (each step is idempotent), the echo first, so readers of
	// PARLEY_CHAT see the answer accepted before the resumed turn's events.
	if err := p.echo(ctx, thread, e, who); err != nil {
		return err
	}
	if err := p.announceWithdrawn(ctx, rec, in.ElicitationID, v.withdrawn); err != nil {
		return err
	}
	if err := p.markAnswered(ctx, rec, in.ElicitationID); err != nil {
		return err
	}
	return p.resumeIfSettled(ctx, rec)
}

// markAnswered removes a consumed question from the thread's open list
// (the resume does it for the last one), so an expiry names only what was
// still open.
func (p *Processor) markAnswered(ctx context.Context, rec *kvstate.PausedTurn, id string) error {
	if rec.Settled() {
		return nil
	}
	_, err := p.threads.Mutate(ctx, rec.Thread, func(t *Thread) error {
		return applyAnswered(t, rec.TurnID, id)
	})
	return err
}

// announceWithdrawn publishes elicitation.cancelled for the questions a
// cancel of cancelledID withdrew (nothing when there are none); the ID is
// deterministic, so a redelivered cancel announces them once.
func (p *Processor) announceWithdrawn(ctx context.Context, rec *kvstate.PausedTurn, cancelledID string, withdrawn []string) error {
	if len(withdrawn) == 0 {
		return nil
	}
	return publishChat(ctx, p, rec.Thread, events.KindElicitationCancelled,
		events.DerivedID("elicitation.cancelled", rec.TurnID, cancelledID), rec.TurnID,
		events.ElicitationCancelled{TurnID: rec.TurnID, ElicitationIDs: withdrawn,
			Reason: "another question of the same turn was cancelled"})
}

// resumeIfSettled publishes run.resumed once every elicitation is settled.
// The ID is deterministic, so a crash between consuming and publishing
// repeats the publish and JetStream drops the copy.
func (p *Processor) resumeIfSettled(ctx context.Context, rec *kvstate.PausedTurn) error {
	if !rec.Settled() {
		return nil
	}
	t, err := p.threads.Mutate(ctx, rec.Thread, func(t *Thread) error {
		return applyResume(t, rec)
	})
	if err != nil {
		return err
	}
	if t.TurnID != rec.TurnID || t.State != ThreadRunning {
		return nil // the thread moved on (new message, expiry)
	}
	var answers []events.Answer
	ids := make([]string, 0, len(rec.Elicitations))
	for _, el := range rec.Elicitations {
		ids = append(ids, el.ID)
		if el.Status == kvstate.StatusConsumed && el.Result != nil {
			answers = append(answers, events.Answer{ElicitationID: el.ID, Result: *el.Result,
				AnsweredBy: el.AnsweredBy, AnsweredAt: el.AnsweredAt})
		}
	}
	e, err := events.KindRunResumed.New(events.SourceProcessor,
		events.DerivedID(append([]string{"run.resumed", rec.RunID}, ids...)...), rec.Thread,
		events.RunResumed{RunID: rec.RunID, TurnID: rec.TurnID, Thread: rec.Thread, Agent: rec.Agent,
			Snapshot: rec.Snapshot, Answers: answers})
	if err != nil {
		return err
	}
	e.SetExtension(events.ExtTurnID, rec.TurnID)
	e.SetExtension(events.ExtRunID, rec.RunID)
	if rec.TraceParent != "" {
		e.SetExtension(events.ExtTraceParent, rec.TraceParent)
	}
	// The resume joins the trace the turn started in (stored in the paused
	// record), linked to the answer's own trace.
	ctx, end := bus.WithTraceParent(ctx, rec.TraceParent, "resume turn")
	defer end()
	return p.publish(ctx, events.StreamAgent, e)
}

// usedBefore reports whether the elicitation.responded event respondedID
// was already used to resume a turn of thread (a redelivery that arrives
// after the paused record moved on).
func (p *Processor) usedBefore(ctx context.Context, thread, respondedID string) bool {
	t, _, err := p.threads.Load(ctx, thread)
	return err == nil && t.Seen(respondedID)
}

func (p *Processor) reject(ctx context.Context, thread, respondedID, elicitationID, reason, detail string, vs []schema.Violation) error {
	p.log.InfoContext(ctx, "answer rejected", "subject", thread, "elicitation_id", elicitationID, "reason", reason)
	return publishChat(ctx, p, thread, events.KindElicitationRejected,
		events.DerivedID("elicitation.rejected", respondedID), "",
		events.ElicitationRejected{ElicitationID: elicitationID, RespondedEventID: respondedID, Reason: reason,
			Detail: detail, Errors: vs})
}

// incompatiblePause fails closed: the answer is rejected state_incompatible,
// the turn fails, and the thread becomes idle (usable) again.
func (p *Processor) incompatiblePause(ctx context.Context, thread, respondedID, elicitationID string, cause error) error {
	if err := p.reject(ctx, thread, respondedID, elicitationID, events.RejectStateIncompatible,
		cause.Error(), nil); err != nil {
		return err
	}
	t, err := p.threads.Mutate(ctx, thread, func(t *Thread) error {
		if t.State != ThreadPaused {
			return kvstate.ErrNoChange
		}
		t.State, t.Pending = ThreadIdle, nil
		return nil
	})
	if err != nil {
		return err
	}
	return publishChat(ctx, p, thread, events.KindTurnFailed,
		events.DerivedID("turn.failed.incompatible", thread, t.TurnID), t.TurnID,
		events.TurnFailed{TurnID: t.TurnID, Reason: events.RejectStateIncompatible,
			Detail: "the paused turn was stored by an incompatible version and cannot be resumed; the thread is ready for a new message"})
}

// onExpired announces elicitation.expired once per paused turn (every
// replica sees the marker; the thread CAS and the deterministic event ID
// make it idempotent) and makes the thread idle.
func (p *Processor) onExpired(ctx context.Context, thread string) error {
	// A marker read late (every processor was down) may be older than the
	// thread's current pause: a live record means it is not this pause
	// that expired.
	if _, _, err := p.paused.Load(ctx, thread); !errors.Is(err, kvstate.ErrNotFound) {
		if err != nil && !errors.Is(err, kvstate.ErrIncompatible) {
			return err
		}
		return nil
	}
	t, err := p.threads.Mutate(ctx, thread, func(t *Thread) error {
		// Messages that queued behind the paused turn go on now.
		return applyExpiry(t, time.Now().UTC())
	})
	if err != nil {
		return err
	}
	if err := p.requestNext(ctx, t); err != nil {
		return err
	}
	// A replica that lost the race still announces (the event ID is the
	// same), in case the winner crashed before publishing; an old expiry
	// is not announced again.
	if t.Expired == nil || time.Since(t.Expired.At) > time.Minute {
		return nil
	}
	p.log.InfoContext(ctx, "paused turn expired", "subject", thread, "turn_id", t.Expired.TurnID)
	return publishChat(ctx, p, thread, events.KindElicitationExpired,
		events.DerivedID("elicitation.expired", t.Expired.TurnID), t.Expired.TurnID,
		events.ElicitationExpired{TurnID: t.Expired.TurnID, ElicitationIDs: t.Expired.ElicitationIDs})
}

// answerSize checks an answer's size: the whole data (n bytes) against
// events.MaxAnswerBytes, and every string in its content, at any depth,
// against events.MaxAnswerField. The violations name the fields.
func answerSize(n int, in events.ElicitationResponded) []schema.Violation {
	var vs []schema.Violation
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case string:
			if len(x) > events.MaxAnswerField {
				vs = append(vs, schema.Violation{Path: path, Rule: fmt.Sprintf("%d bytes is over the limit of %d", len(x), events.MaxAnswerField)})
			}
		case map[string]any:
			for k, e := range x {
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	for k, v := range in.Content {
		walk("content."+k, v)
	}
	if n > events.MaxAnswerBytes && len(vs) == 0 {
		vs = append(vs, schema.Violation{Path: "data", Rule: fmt.Sprintf("%d bytes is over the limit of %d", n, events.MaxAnswerBytes)})
	}
	slices.SortFunc(vs, func(a, b schema.Violation) int { return strings.Compare(a.Path, b.Path) })
	return vs
}
