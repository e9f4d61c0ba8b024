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

// onRunPaused records the pause of the active turn and publishes its
// questions: the pause record (the run's snapshot, with the pause's TTL)
// first, then the thread (its paused turn) in one revision-checked write.
// A pause of a turn that is not running, or older (in PARLEY_RUNS order)
// than an outcome already applied, is stale and ignored; a redelivery of
// the applied pause publishes its questions again (same event IDs).
func (p *Processor) onRunPaused(ctx context.Context, d *bus.Delivery, in events.RunPaused) error {
	e := d.Event
	thread := e.Subject()
	if len(in.Elicitations) == 0 {
		return fmt.Errorf("run.paused without elicitations: %w", errors.New("data.elicitations: required"))
	}
	if p.approvals != nil {
		for i := range in.Elicitations {
			// The standing-approval offer, before anything stores or
			// publishes the question (every delivery computes the same).
			p.offerStanding(&in.Elicitations[i])
		}
	}
	// From the cache when there; anything but "apply" is read again
	// (a cached record may be behind). An apply decided on a record that
	// turns out behind is caught by the thread's revision-checked write
	// below, as one decided on a fresh read that another replica changed.
	t, trev, cached, err := p.threads.View(ctx, thread)
	if err != nil {
		return err
	}
	act := classifyPause(t, in.TurnID, e.ID(), d.StreamSeq)
	if act != outcomeApply && cached {
		if t, trev, err = p.threads.Get(ctx, thread); err != nil {
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
		// The pause counts from when PARLEY_RUNS stored run.paused (the
		// server's clock, which also fires the record's schedule), so
		// every delivery of it computes the same expiry: one redelivered
		// after its record expired is refused by that expiry below
		// (kvstate.ErrExpired), whatever the record left behind.
		created := d.Stored
		if created.IsZero() {
			created = time.Now()
		}
		created = created.UTC()
		pt := &PausedTurn{TurnID: in.TurnID, RunID: in.RunID, Agent: in.Agent, CreatedAt: created,
			ExpiresAt: created.Add(p.opts.PauseTTL), TraceParent: t.TraceParent, RunSeq: d.StreamSeq,
			Record: p.pauses.key(thread, d.StreamSeq), Grants: t.TurnGrants,
			Effects: in.Effects, EffectsOmitted: in.EffectsOmitted}
		for _, pe := range in.Elicitations {
			pt.Elicitations = append(pt.Elicitations, Elicitation{PendingElicitation: pe, Status: StatusPending})
		}
		if n := pausedBytes(pt); n > MaxPausedBytes {
			return p.endTurn(ctx, d, thread, in.TurnID, reasonRunTooLarge,
				fmt.Sprintf("the %d questions of the pause need %d bytes with room for their answers, over the limit of %d",
					len(pt.Elicitations), n, MaxPausedBytes), ranTools{effects: in.Effects, omitted: in.EffectsOmitted})
		}
		// The record first: a thread that says paused always has its
		// snapshot and its expiry. One stored for a pause the thread
		// then does not take expires unused.
		// A record an earlier attempt stored keeps its expiry, which the
		// thread then records too.
		prec := &pauseRecord{Thread: thread, TurnID: in.TurnID, RunID: in.RunID,
			RunSeq: d.StreamSeq, ExpiresAt: pt.ExpiresAt, Snapshot: in.Snapshot}
		err = p.pauses.save(ctx, pt.Record, prec, recordUntil(pt.ExpiresAt, p.opts.PauseTTL))
		pt.ExpiresAt = prec.ExpiresAt
		if errors.Is(err, kvstate.ErrExpired) {
			// Redelivered after its record's TTL (a PauseTTL shorter than
			// the redelivery): the questions can no longer be answered.
			return p.endTurn(ctx, d, thread, in.TurnID, events.RejectUnknownOrExpired, err.Error(),
				ranTools{effects: in.Effects, omitted: in.EffectsOmitted})
		}
		if err != nil {
			return fmt.Errorf("storing the pause record: %w", err)
		}
		p.fault(faultAfterPauseRecord)
		if t, _, err = p.threads.MutateFrom(ctx, t.ID, t, trev, cached, func(t *Thread) error {
			return applyPause(t, pt, e.ID(), mark)
		}); err != nil {
			return err
		}
		if classifyPause(t, in.TurnID, e.ID(), d.StreamSeq) != outcomeRepeat {
			// The thread moved on meanwhile (the decision above was
			// taken on an earlier read).
			p.log.InfoContext(ctx, "ignoring a stale pause (the thread moved on)", "subject", thread,
				"turn_id", in.TurnID, "stream_seq", d.StreamSeq)
			return nil
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
	if err := publishChat(ctx, p, thread, events.KindTurnPaused,
		events.DerivedID(append([]string{"turn.paused"}, ids...)...), in.TurnID,
		events.TurnPaused{TurnID: in.TurnID, RequestEventID: startedBy(t, in.TurnID), Message: msg, ElicitationIDs: ids,
			ToolCalls: events.RanOf(in.Effects), ToolCallsOmitted: in.EffectsOmitted}); err != nil {
		return err
	}
	return p.expireUnmarked(ctx, t, d.StreamSeq)
}

// expireUnmarked ends the pause the thread t just recorded (or found
// recorded) for the run.paused at runSeq when its pause record is gone
// already: the record is stored before the thread records the pause, and
// a processor stalled in between past the record's TTL writes the thread
// paused after the record's expiry marker was handled (on a thread still
// running, so it changed nothing). No marker would end that pause, and
// no answer could resume it. A record lives at least until the pause's
// expiresAt (recordUntil), so before that nothing is read.
func (p *Processor) expireUnmarked(ctx context.Context, t *Thread, runSeq uint64) error {
	pt := t.Paused
	if t.State != ThreadPaused || pt == nil || pt.TurnID != t.TurnID || pt.RunSeq != runSeq || time.Now().Before(pt.ExpiresAt) {
		return nil
	}
	switch _, err := p.pauses.store.Load(ctx, pt.Record); {
	case errors.Is(err, kvstate.ErrNotFound):
		p.log.WarnContext(ctx, "the pause record expired before the thread recorded the pause; ending the pause", "subject", t.ID,
			"turn_id", pt.TurnID, "record", pt.Record)
		return p.onExpired(ctx, pt.Record)
	case err != nil && !errors.Is(err, kvstate.ErrIncompatible):
		return fmt.Errorf("reading the pause record %s: %w", pt.Record, err)
	}
	return nil // alive: its expiry marker ends the pause
}

// reasonRunTooLarge is the turn.failed reason of a pause too large to
// record (the agent's own limit has the same name, agent.RejectRunTooLarge).
const reasonRunTooLarge = "run_too_large"

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
		if ms, _ := pe.Request.Meta.MCPServer(); ms != nil {
			// Said before the server's own words, so that they cannot
			// pass for parley's (docs/events.md, "Questions from MCP
			// servers").
			fmt.Fprintf(&b, "MCP server %s asks", ms.Name)
			if !ms.Trusted {
				b.WriteString(" (parley cannot vouch for this server)")
			}
			b.WriteString(":\n")
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
// Consuming the last open question resumes the turn in the same write.
func (p *Processor) onResponded(ctx context.Context, src input) error {
	thread, e := src.thread, src.d.Event
	who := events.Identity{Principal: src.principal} // until identify says more
	in, err := events.InputData[events.ElicitationResponded](e)
	if err != nil || in.ElicitationID == "" {
		detail := "data.elicitationId: required"
		var vs []schema.Violation
		if err != nil {
			detail = err.Error()
			if _, ok := errors.AsType[*schema.ValidationError](err); ok {
				vs = schema.Violations(err)
			}
		}
		return p.reject(ctx, thread, who, e.ID(), in.ElicitationID, events.RejectInvalidEvent, detail, vs)
	}
	// Members the answer's shape does not define are refused, as the
	// gateway refuses them in its body: one rule on every entrance.
	if vs := events.CheckInput(events.TypeElicitationResponded, e.Data()); len(vs) > 0 {
		return p.reject(ctx, thread, who, e.ID(), in.ElicitationID, events.RejectInvalidEvent,
			(&schema.ValidationError{Violations: vs}).Error(), vs)
	}
	if err := events.ValidToken("subject", thread); err != nil {
		return p.reject(ctx, thread, who, e.ID(), in.ElicitationID, events.RejectInvalidEvent, err.Error(), nil)
	}
	if v, ok := checkEventID(e.ID()); !ok {
		return p.reject(ctx, thread, who, e.ID(), in.ElicitationID, events.RejectInvalidEvent, "id: "+v.Rule, []schema.Violation{v})
	}
	if v, ok := checkAttributes(e); !ok {
		return p.reject(ctx, thread, who, e.ID(), in.ElicitationID, events.RejectInvalidEvent, "attributes: "+v.Rule, []schema.Violation{v})
	}
	switch {
	case events.TypeOf(e) != events.TypeElicitationResponded:
		return p.reject(ctx, thread, who, e.ID(), in.ElicitationID, events.RejectInvalidEvent,
			fmt.Sprintf("type: must be %q on an elicitation.responded subject", events.TypeElicitationResponded), nil)
	case e.Subject() != thread:
		return p.reject(ctx, thread, who, e.ID(), in.ElicitationID, events.RejectInvalidEvent,
			fmt.Sprintf("subject: must equal the thread of the NATS subject (%q)", thread), nil)
	}
	switch in.Action {
	case schema.ActionAccept, schema.ActionDecline, schema.ActionCancel:
	default:
		return p.reject(ctx, thread, who, e.ID(), in.ElicitationID, events.RejectInvalidEvent,
			fmt.Sprintf(`action: %q must be "accept", "decline" or "cancel"`, in.Action), nil)
	}
	// Who answers, as authenticated, and whether the thread is theirs:
	// checked before the paused turn is touched, so a refused answer
	// consumes nothing.
	who, err = p.identify(src.principal, e, in.AnsweredBy, "data.answeredBy")
	var t *Thread
	if err == nil {
		var cached bool
		if t, _, cached, err = p.threads.View(ctx, thread); err != nil {
			return p.failIncompatible(ctx, thread, err)
		}
		if err = mayUse(t, who); cached && (err != nil || t.Owner == nil) {
			// A cached record is trusted only to allow, and only once it
			// has an owner (set once; grants only grow): it may be
			// behind the message that claimed the thread, or a share.
			if t, _, err = p.threads.Get(ctx, thread); err != nil {
				return p.failIncompatible(ctx, thread, err)
			}
			err = mayUse(t, who)
		}
	}
	if detail, ok := isForbidden(err); ok {
		return p.rejectOn(ctx, thread, who, t, e.ID(), in.ElicitationID, events.RejectForbidden, detail, nil)
	} else if err != nil {
		return p.reject(ctx, thread, who, e.ID(), in.ElicitationID, events.RejectInvalidEvent, err.Error(), nil)
	}
	// Sizes, before anything reaches the paused turn.
	if vs := answerSize(len(e.Data()), in); len(vs) > 0 {
		state := "the question's state is unknown (the thread could not be read)"
		if cur, _, err := p.threads.Get(ctx, thread); err == nil {
			state = questionState(cur, in.ElicitationID, time.Now())
		}
		return p.reject(ctx, thread, who, e.ID(), in.ElicitationID, events.RejectInvalidContent,
			"the answer is too large; "+state, vs)
	}
	// Edited arguments are read as sent (numbers as written), not as the
	// generic decoding of _meta has them (applyAnswer checks them).
	if raw, ok := events.EditedArguments(e.Data()); ok {
		in.Meta = in.Meta.Clone()
		in.Meta[schema.MetaArguments] = raw
	}
	if vs := p.standingRoom(ctx, t, in); len(vs) > 0 {
		return p.reject(ctx, thread, who, e.ID(), in.ElicitationID, events.RejectInvalidContent,
			"the standing approval cannot be granted; "+questionState(t, in.ElicitationID, time.Now()), vs)
	}
	var (
		v   answerVerdict
		rec *pauseRecord
		// accepted identifies the answer once consumed (inputPrint).
		accepted = inputPrint(events.TypeElicitationResponded, e.ID(), who, e.Data())
	)
	for attempt := 0; ; attempt++ {
		// The pause record (the run's snapshot) is read before the answer
		// is consumed: one this version cannot read fails the turn
		// waiting on it, consuming nothing, and one that expired (by the
		// server's clock) takes no answer.
		var key string
		if t.Paused != nil {
			key = t.Paused.Record
		}
		rec = nil
		unreadable := false
		if key != "" {
			switch rec, _, err = p.pauses.load(ctx, key); {
			case errors.Is(err, kvstate.ErrIncompatible):
				// Decided on a fresh read: only a turn still waiting on
				// the record fails; a settled pause's (the turn went on,
				// or ended) only has no snapshot to resume with.
				cause := err
				if t, _, err = p.threads.Get(ctx, thread); err != nil {
					return p.failIncompatible(ctx, thread, err)
				}
				if t.Paused == nil || t.Paused.Record != key {
					if attempt < 10 {
						continue
					}
					return fmt.Errorf("answering %s: %w", in.ElicitationID, errPauseChanged)
				}
				if t.State == ThreadPaused && t.Paused.TurnID == t.TurnID {
					return p.incompatiblePause(ctx, t, who, e.ID(), in.ElicitationID, cause)
				}
				rec, unreadable = nil, true
			case errors.Is(err, kvstate.ErrNotFound):
				rec = nil
			case err != nil:
				return fmt.Errorf("reading the pause record of %s: %w", thread, err)
			}
		}
		t, _, err = p.threads.Mutate(ctx, thread, func(t *Thread) error {
			if t.Paused != nil && t.Paused.Record != key {
				return errPauseChanged
			}
			if t.Paused.Find(in.ElicitationID) != nil {
				if err := mayAnswer(t, who); err != nil {
					v = answerVerdict{reason: events.RejectForbidden, detail: err.Error()}
					return kvstate.ErrNoChange
				}
			}
			if el := t.Paused.Find(in.ElicitationID); rec == nil && !unreadable && el != nil && el.ResponseEventID != e.ID() {
				// The record expired: so did the pause (by the server's
				// clock), and nothing could resume it. Only the winning
				// answer's redelivery goes on (publishResume).
				v = answerVerdict{reason: events.RejectUnknownOrExpired, detail: "the paused turn expired"}
				return kvstate.ErrNoChange
			}
			v = applyAnswer(t, e.ID(), in, who, time.Now())
			if !v.write {
				return kvstate.ErrNoChange
			}
			if v.consumed {
				t.MarkAccepted(accepted)
			}
			return nil
		})
		if errors.Is(err, errPauseChanged) && attempt < 10 {
			if t, _, err = p.threads.Get(ctx, thread); err != nil {
				return p.failIncompatible(ctx, thread, err)
			}
			continue
		}
		if err != nil {
			return p.failIncompatible(ctx, thread, err)
		}
		break
	}
	if len(v.dropped) > 0 {
		p.log.WarnContext(ctx, "dropped content the action does not carry", "subject", thread,
			"elicitation_id", in.ElicitationID, "action", in.Action, "dropped", v.dropped)
	}
	switch {
	case v.unknown && t.HasAccepted(accepted):
		// This answer was consumed, and the thread's next pause has
		// replaced its question since (the processor that consumed it
		// died before echoing; the turn went on with its other answers).
		// The echo is still owed: the answer's acceptance. Nothing else
		// is: the resume it took part in was published by whoever
		// settled the pause, and the thread has moved past it.
		p.log.InfoContext(ctx, "echoing an answer consumed before the thread's last pause", "subject", thread,
			"elicitation_id", in.ElicitationID, "event_id", e.ID())
		return p.echo(ctx, thread, e, who)
	case v.unknown && t.Seen(e.ID()):
		// Under an ID the thread took, yet not an answer it consumed as
		// sent (another party's, or one consumed before answers were
		// remembered, or that aged out of Thread.Accepted): no verdict
		// names the accepted event (announceRefusal).
		return nil
	case v.reason != "":
		return p.rejectOn(ctx, thread, who, t, e.ID(), in.ElicitationID, v.reason, v.detail, v.errors)
	case v.consumed:
		p.log.InfoContext(ctx, "elicitation answered", "subject", thread, "elicitation_id", in.ElicitationID,
			"action", in.Action, "answered_by", who.String())
		metrics.Answered(ctx, string(in.Action))
		if err := p.grantStanding(ctx, t, t.Paused.Find(in.ElicitationID)); err != nil {
			// The answer stands; only the standing approval is lost: the
			// next call asks again (fail safe).
			p.log.ErrorContext(ctx, "the standing approval the answer granted was not stored", "subject", thread,
				"elicitation_id", in.ElicitationID, "error", err)
		}
	}
	if err := p.keepForResume(ctx, t, rec); err != nil {
		return err
	}
	if v.consumed && resuming(t) {
		p.fault(faultAfterResume)
	}
	// Consumed now, or the winning answer redelivered: finish what it
	// started (each step is idempotent), the echo first, so readers of
	// PARLEY_CHAT see the answer accepted before the resumed turn's events.
	if err := p.echo(ctx, thread, e, who); err != nil {
		return err
	}
	if err := p.announceWithdrawn(ctx, thread, t.Paused, in.ElicitationID, v.withdrawn); err != nil {
		return err
	}
	return p.publishResume(ctx, t, rec)
}

// resuming reports whether t's paused turn resumed and still runs: its
// run.resumed is (to be) published.
func resuming(t *Thread) bool {
	pt := t.Paused
	return pt != nil && pt.Resumed && t.TurnID == pt.TurnID && t.State == ThreadRunning
}

// keepForResume makes the pause record rec of t's resumed paused turn
// outlive the resume by resumeGrace when it would expire sooner (a
// --pause-ttl shorter than resumeGrace: the record's grace is the TTL
// then), before run.resumed is published with its snapshot. If the
// answer's processor dies after that publish and before its ack, the
// redelivery (AckWait later) finds the record and publishes the resume
// again (a duplicate), instead of failing a turn whose resume the agent
// runs and starting the next one beside it. A redelivery that finds the
// record gone can rely on the resume not having been published.
func (p *Processor) keepForResume(ctx context.Context, t *Thread, rec *pauseRecord) error {
	if rec == nil || !resuming(t) {
		return nil
	}
	until := time.Now().Add(resumeGrace)
	if !recordUntil(t.Paused.ExpiresAt, p.opts.PauseTTL).Before(until) {
		return nil
	}
	if err := p.pauses.store.Extend(ctx, t.Paused.Record, until); err != nil && !errors.Is(err, kvstate.ErrNotFound) {
		return fmt.Errorf("extending the pause record %s for the resume: %w", t.Paused.Record, err)
	}
	return nil
}

// announceWithdrawn publishes elicitation.cancelled for the questions a
// cancel of cancelledID withdrew (nothing when there are none); the ID is
// deterministic, so a redelivered cancel announces them once.
func (p *Processor) announceWithdrawn(ctx context.Context, thread string, pt *PausedTurn, cancelledID string, withdrawn []string) error {
	if len(withdrawn) == 0 {
		return nil
	}
	return publishChat(ctx, p, thread, events.KindElicitationCancelled,
		events.DerivedID("elicitation.cancelled", thread, pt.TurnID, cancelledID), pt.TurnID,
		events.ElicitationCancelled{TurnID: pt.TurnID, ElicitationIDs: withdrawn,
			Reason: "another question of the same turn was cancelled"})
}

// publishResume publishes run.resumed for the thread's paused turn once
// it resumed (every question settled) and while the turn still runs, with
// the run's snapshot from its pause record rec. The ID is deterministic,
// so a redelivered answer publishes it once. A turn resumed without its
// pause record (it expired between the answer and a redelivery, after a
// crash) cannot go on: it fails.
func (p *Processor) publishResume(ctx context.Context, t *Thread, rec *pauseRecord) error {
	pt := t.Paused
	if pt == nil || !pt.Resumed || t.TurnID != pt.TurnID || t.State != ThreadRunning {
		return nil // not resumed, or the thread moved on (a new message, an expiry)
	}
	if rec == nil { // read by pt.Record (onResponded)
		return p.failResume(ctx, t.ID, pt.TurnID, "the paused turn's record expired before the turn resumed")
	}
	var answers []events.Answer
	ids := make([]string, 0, len(pt.Elicitations))
	for _, el := range pt.Elicitations {
		ids = append(ids, el.ID)
		if el.Status == StatusConsumed && el.Result != nil {
			answers = append(answers, events.Answer{ElicitationID: el.ID, Result: *el.Result,
				AnsweredBy: el.AnsweredBy, AnsweredAt: el.AnsweredAt, Arguments: el.Arguments})
		}
	}
	e, err := events.KindRunResumed.New(events.SourceProcessor,
		events.DerivedID(append([]string{"run.resumed", pt.RunID}, ids...)...), t.ID,
		events.RunResumed{RunID: pt.RunID, TurnID: pt.TurnID, Thread: t.ID, Agent: pt.Agent,
			Snapshot: rec.Snapshot, Answers: answers})
	if err != nil {
		return err
	}
	// The resume joins the trace the turn started in (stored with the
	// paused turn), linked to the answer's own trace.
	return p.publishRun(ctx, e, pt.TurnID, pt.RunID, pt.TraceParent, "resume turn")
}

// failResume ends the running turn turnID of thread, which cannot resume
// (detail says why), with turn.failed, and starts the next queued message.
func (p *Processor) failResume(ctx context.Context, thread, turnID, detail string) error {
	p.log.ErrorContext(ctx, "the turn cannot resume", "subject", thread, "turn_id", turnID, "detail", detail)
	return p.abandonTurn(ctx, thread, turnID, ThreadRunning, "turn.failed.resume", events.RejectUnknownOrExpired, detail)
}

// abandonTurn fails the active turn turnID of thread while it is in state:
// turn.failed (reason, detail; its ID derived from kind, thread and turn)
// is announced before the write that ends the turn (applyAbandon), as
// every turn end, then the next queued message starts. A redelivery after
// a crash in between announces it again under the same ID; a thread no
// longer in state is left as it is.
func (p *Processor) abandonTurn(ctx context.Context, thread, turnID, state, kind, reason, detail string) error {
	// What the turn's run executed before it paused: turn.failed names
	// it, and the history keeps it (applyAbandon).
	cur, _, err := p.threads.Get(ctx, thread)
	if err != nil {
		return err
	}
	ran := pausedRan(cur, turnID)
	if err := publishChat(ctx, p, thread, events.KindTurnFailed,
		events.DerivedID(kind, thread, turnID), turnID,
		events.TurnFailed{TurnID: turnID, Reason: reason, Detail: detail,
			ToolCalls: events.RanOf(ran.effects), ToolCallsOmitted: ran.omitted}); err != nil {
		return err
	}
	t, _, err := p.threads.Mutate(ctx, thread, func(t *Thread) error {
		return applyAbandon(t, turnID, state, reason)
	})
	if err != nil {
		return err
	}
	return p.requestNext(ctx, t)
}

// reject publishes elicitation.rejected for the answer respondedID, unless
// the thread took an answer under that ID (announceRefusal).
func (p *Processor) reject(ctx context.Context, thread string, who events.Identity, respondedID, elicitationID, reason, detail string, vs []schema.Violation) error {
	return p.rejectOn(ctx, thread, who, nil, respondedID, elicitationID, reason, detail, vs)
}

// rejectOn is reject with the thread t as just read afresh (nil: read it).
func (p *Processor) rejectOn(ctx context.Context, thread string, who events.Identity, t *Thread, respondedID, elicitationID, reason, detail string, vs []schema.Violation) error {
	p.log.InfoContext(ctx, "answer rejected", "subject", thread, "elicitation_id", elicitationID, "reason", reason)
	return p.announceRefusal(ctx, thread, respondedID, t, func() error {
		return publishRefusal(ctx, p, thread, events.KindElicitationRejected, who,
			events.ElicitationRejected{ElicitationID: elicitationID, RespondedEventID: respondedID, Reason: reason,
				Detail: detail, Errors: vs}, respondedID)
	})
}

// incompatiblePause fails closed: the answer is rejected state_incompatible,
// the paused turn of t (freshly read, paused on the unreadable record)
// fails, and the thread goes on with its queue (or becomes idle). The
// turn's end is announced before the write that ends it, as every turn
// end, so a crash in between repeats it on the answer's redelivery; a
// thread no longer waiting then is not failed again.
func (p *Processor) incompatiblePause(ctx context.Context, t *Thread, who events.Identity, respondedID, elicitationID string, cause error) error {
	thread, failed := t.ID, t.Paused.TurnID
	if err := p.reject(ctx, thread, who, respondedID, elicitationID, events.RejectStateIncompatible,
		cause.Error(), nil); err != nil {
		return err
	}
	return p.abandonTurn(ctx, thread, failed, ThreadPaused, "turn.failed.incompatible", events.RejectStateIncompatible,
		"the paused turn was stored by an incompatible version and cannot be resumed; the thread is ready for a new message")
}

// onExpired ends the paused turn whose pause record (key) the server
// expired and announces elicitation.expired once (every replica may see
// the marker; the thread CAS and the deterministic event ID make it
// idempotent). The expiry of a record the thread is not paused on (an
// earlier pause's) changes nothing.
func (p *Processor) onExpired(ctx context.Context, key string) error {
	thread := threadOfPauseKey(key)
	if events.ValidToken("thread", thread) != nil {
		return nil
	}
	t, _, err := p.threads.Mutate(ctx, thread, func(t *Thread) error {
		// Messages that queued behind the paused turn go on now.
		return applyExpiry(t, key, time.Now().UTC())
	})
	if err != nil {
		return err
	}
	// A replica that lost the race, or a redelivery of the expiry however
	// late, still announces (the event ID is the same) and starts the
	// next turn, in case the winner crashed before publishing. Another
	// record's expiry (the thread resumed, or paused again, since: every
	// answered pause's record expires too, a grace after its expiresAt)
	// does neither: the thread owes it nothing, and republishing a running
	// turn's run.requested past its duplicate window would store it again.
	// The expired turn's end is announced before the next turn starts, so
	// a crash in between cannot let the next turn end first.
	x := t.Expired
	if x == nil || !(x.Record == key || x.Record == "" && time.Since(x.At) <= time.Minute) {
		return nil
	}
	p.log.InfoContext(ctx, "paused turn expired", "subject", thread, "turn_id", x.TurnID)
	if err := publishChat(ctx, p, thread, events.KindElicitationExpired,
		events.DerivedID("elicitation.expired", thread, x.TurnID), x.TurnID,
		events.ElicitationExpired{TurnID: x.TurnID, ElicitationIDs: x.ElicitationIDs}); err != nil {
		return err
	}
	return p.requestNext(ctx, t)
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
