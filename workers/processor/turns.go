package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// onTurnRequested starts a turn, queues the message behind the running
// turn (FIFO), or, on a paused thread, cancels the pending elicitations and
// starts the new turn.
func (p *Processor) onTurnRequested(ctx context.Context, src input) error {
	thread, d := src.thread, src.d
	e := d.Event
	in, verr := p.validateTurn(thread, e)
	who, ierr := p.identify(src.principal, e, in.User, "data.user")
	if verr == nil && ierr != nil {
		if _, ok := isForbidden(ierr); !ok {
			verr = []schema.Violation{{Path: "extensions." + events.ExtOnBehalfOf, Rule: ierr.Error()}}
		}
	}
	// Context references are resolved as the sender before the message
	// is queued: one it may not use refuses the message (references.go).
	refRefused := false
	if verr == nil && ierr == nil {
		in.Message, verr = p.resolveReferences(ctx, thread, who, in.Message)
		refRefused = verr != nil
		if refRefused && d.NumDelivered > 1 {
			// A redelivery of a message the thread took already (its
			// entity changed since): taken as the repeat it is below.
			if t, _, _, err := p.threads.View(ctx, thread); err == nil && t != nil && tookID(t, e.ID()) {
				verr, refRefused = nil, false
			}
		}
	}
	if verr != nil {
		validThread := events.ValidToken("subject", thread) == nil
		if validThread {
			// Recorded as dealt with only in its turn: recording it at
			// once would let the thread's later messages stop waiting
			// for earlier ones still in flight (anyone may publish an
			// invalid message on a thread's subject).
			if _, _, _, err := p.awaitPredecessors(ctx, thread, d); err != nil {
				return err
			}
		}
		p.log.WarnContext(ctx, "turn rejected", "subject", thread, "event_id", e.ID(), "errors", verr)
		reason := events.RejectMessageTooLarge
		for _, v := range verr {
			if !strings.Contains(v.Rule, "over the limit") {
				reason = events.RejectInvalidEvent
			}
		}
		if refRefused {
			reason = events.RejectReferenceUnavailable
		}
		if err := p.announceRefusal(ctx, thread, e.ID(), nil, func() error {
			return publishRefusal(ctx, p, thread, events.KindTurnRejected, who,
				events.TurnRejected{RequestEventID: e.ID(), Reason: reason, Errors: verr}, e.ID())
		}); err != nil {
			return err
		}
		if !validThread {
			return nil // no thread record for an invalid thread ID
		}
		return p.recordSeq(ctx, thread, d.StreamSeq) // in its turn: awaitPredecessors above
	}
	// The thread as awaitPredecessors last read it saves the first
	// attempt below its read.
	loaded, loadedRev, loadedCached, err := p.awaitPredecessors(ctx, thread, d)
	if err != nil {
		return err
	}
	if ierr != nil { // a claim this principal may not make
		return p.refuseTurn(ctx, thread, who, e.ID(), d.StreamSeq, ierr)
	}
	queued := QueuedMessage{EventID: e.ID(), Agent: in.Agent, User: who.OnBehalfOf, Message: in.Message,
		TraceParent: bus.TraceParent(ctx)}

	// A message sent after the thread's turn paused supersedes it: its
	// open questions are withdrawn in the write that records the message
	// (so no answer can resume the old turn once the thread goes on), and
	// the queue goes on in stream order with this message at its end. A
	// turn whose answers are all in is resuming, so the message queues;
	// one past its expiry is over. Only the thread's owner and those it
	// was shared with may send to it, checked in the same write. A write
	// function's refusal decided on a cached record is decided again on a
	// fresh read (threads.Mutate).
	var (
		refused   bool
		started   string
		forgotten bool
		// accepted identifies the message once accepted (inputPrint).
		accepted = inputPrint(events.TypeTurnRequested, e.ID(), who, e.Data())
	)
	apply := func(t *Thread) error {
		// A redelivery of a message the thread recorded already (every
		// message up to LastTurnSeq was dealt with: awaitPredecessors)
		// whose ID the record no longer keeps: taken again, its turn
		// would run twice, or be refused although it ran.
		forgotten = d.NumDelivered > 1 && t.LastTurnSeq >= d.StreamSeq &&
			classifyMessage(t, e.ID(), d.StreamSeq) != msgDuplicate
		if forgotten {
			return kvstate.ErrNoChange
		}
		if t.Seen(e.ID()) {
			// A redelivery (its grants are recorded), or someone's
			// message under an ID the thread handled (every integrator
			// reads the IDs in PARLEY_CHAT): only a party of the thread
			// may have it taken for a redelivery, and echoed.
			if err := mayUse(t, who); err != nil {
				return err
			}
		} else if err := applyOwnership(t, who, in.Share); err != nil {
			return err
		}
		// The grants made before the message was sent (its own
		// included): who may answer its turn's questions.
		grants := len(t.Shared)
		queued.Grants = &grants
		var err error
		refused, started, err = applyMessage(t, queued, d.StreamSeq, time.Now())
		if err == nil && !refused {
			t.MarkAccepted(accepted)
		}
		return err
	}
	var t *Thread
	if loaded != nil {
		t, _, err = p.threads.MutateFrom(ctx, thread, loaded, loadedRev, loadedCached, apply)
	} else {
		t, _, err = p.threads.Mutate(ctx, thread, apply)
	}
	if _, ok := isForbidden(err); ok || errors.Is(err, errTooManyShares) {
		return p.refuseTurn(ctx, thread, who, e.ID(), d.StreamSeq, err)
	}
	if err != nil {
		return p.failIncompatible(ctx, thread, err)
	}
	if forgotten {
		if t.HasAccepted(accepted) {
			// Accepted, and its turn is over: the echo is still owed (its
			// processor may have died before publishing it).
			p.log.WarnContext(ctx, "echoing a redelivered message the thread accepted (its ID aged out of the record)",
				"subject", thread, "event_id", e.ID(), "stream_seq", d.StreamSeq, "last_turn_seq", t.LastTurnSeq)
			return p.echo(ctx, thread, e, who)
		}
		p.log.WarnContext(ctx, "ignoring a redelivered message the thread recorded already (its ID aged out of the record)",
			"subject", thread, "event_id", e.ID(), "stream_seq", d.StreamSeq, "last_turn_seq", t.LastTurnSeq)
		return nil
	}
	if started != "" && t.Superseded != nil && t.Superseded.By == e.ID() {
		p.fault(faultAfterSupersede)
	}
	if refused {
		return publishRefusal(ctx, p, thread, events.KindTurnRejected, who,
			events.TurnRejected{RequestEventID: e.ID(), Reason: events.RejectThreadBusy, Errors: []schema.Violation{{
				Path: "subject", Rule: fmt.Sprintf("the thread already has %d messages (at most %d, %d KiB) waiting; send again later",
					len(t.Queue), MaxQueue, MaxQueueBytes>>10)}}}, e.ID())
	}
	if started == "" {
		// Queued, or a redelivery: repeat what the first attempt may not
		// have published.
		started = startedByMessage(t, e.ID())
	}
	// Accepted (started or queued): readers of PARLEY_CHAT see the
	// message before anything the turn it starts publishes.
	if err := p.echo(ctx, thread, e, who); err != nil {
		return err
	}
	if sup := t.Superseded; sup != nil && sup.By == e.ID() {
		if err := p.announceEnd(ctx, thread, sup); err != nil {
			return err
		}
	}
	return p.requestRun(ctx, t, started)
}

// refuseTurn rejects the turn.requested id at PARLEY_INPUT sequence seq for
// cause, a refusal of the owner rules (forbidden) or too many shares
// (invalid_event), and records it as dealt with, queueing nothing.
func (p *Processor) refuseTurn(ctx context.Context, thread string, who events.Identity, id string, seq uint64, cause error) error {
	reason, v := events.RejectForbidden, schema.Violation{Path: "principal", Rule: cause.Error()}
	if errors.Is(cause, errTooManyShares) {
		reason, v = events.RejectInvalidEvent, schema.Violation{Path: "data.share",
			Rule: fmt.Sprintf("the thread would be shared with more than %d parties", events.MaxShares)}
	}
	p.log.WarnContext(ctx, "turn refused", "subject", thread, "event_id", id, "reason", reason, "detail", v.Rule)
	if err := p.announceRefusal(ctx, thread, id, nil, func() error {
		return publishRefusal(ctx, p, thread, events.KindTurnRejected, who,
			events.TurnRejected{RequestEventID: id, Reason: reason, Errors: []schema.Violation{v}}, id)
	}); err != nil {
		return err
	}
	return p.recordSeq(ctx, thread, seq)
}

// announceRefusal publishes (publish) the refusal of the input event id
// on thread, unless the thread took an event under that ID (a message,
// or an answer that consumed a question). A refusal names the event by
// the ID its sender chose, and a client takes the refusal naming its
// event for the verdict on it (client.Deliver; the thread's fold closes
// the message): a stranger's event under the ID of one the thread
// accepted (every integrator reads those IDs in PARLEY_CHAT) must not
// name it. Such an event gets no verdict; a refused event redelivered
// gets its refusal again (it was never taken).
// t is the thread as just read afresh, or nil (then it is read: a cached
// record may lack the ID, so one that does is read again).
func (p *Processor) announceRefusal(ctx context.Context, thread, id string, t *Thread, publish func() error) error {
	if id != "" && events.ValidToken("thread", thread) == nil {
		var err error
		if t == nil {
			var cached bool
			if t, _, cached, err = p.threads.View(ctx, thread); err == nil && cached && !tookID(t, id) {
				t, _, err = p.threads.Get(ctx, thread)
			}
		}
		if err == nil && tookID(t, id) {
			p.log.WarnContext(ctx, "refusal not announced: the thread took an event under its ID (a replayed or forged ID)",
				"subject", thread, "event_id", id)
			return nil
		}
	}
	return publish()
}

// tookID reports whether thread t took an input event under id: a
// message or answer it handled (recent IDs), a message it still names
// where it put it though its ID aged out of the recent ones (holds: the
// active turn's, queued, superseding, refused), or the answer that
// consumed one of its paused turn's questions.
func tookID(t *Thread, id string) bool {
	if t.Seen(id) || holds(t, id) {
		return true
	}
	if t.Paused != nil {
		for _, el := range t.Paused.Elicitations {
			if el.ResponseEventID == id {
				return true
			}
		}
	}
	return false
}

// recordSeq records that the turn.requested at stream sequence seq was
// dealt with (refused or dead-lettered) without queueing, so later
// messages of the thread stop waiting for it. Only once every earlier
// message of the thread is recorded (awaitPredecessors, for a refusal;
// recordSeqIfNext, for a dead letter): LastTurnSeq says that every
// message up to it was dealt with, so recording a later message while an
// earlier one is still unrecorded (its processor died holding it) would
// let the messages between them overtake the earlier one, and drop its
// redelivery as a repeat.
func (p *Processor) recordSeq(ctx context.Context, thread string, seq uint64) error {
	_, _, err := p.threads.Mutate(ctx, thread, func(t *Thread) error {
		if t.LastTurnSeq >= seq {
			return kvstate.ErrNoChange
		}
		t.LastTurnSeq = seq
		return nil
	})
	return err
}

// recordSeqIfNext is recordSeq for a dead-lettered turn.requested, which
// cannot wait for earlier messages (a message dead-lettered for waiting
// too long would wait for ever): it records the sequence only when no
// earlier message of the thread is still in PARLEY_INPUT unrecorded, so
// the thread's last sequence never passes one (a redelivery at or below
// it is taken for a repeat: onTurnRequested). Otherwise nothing is
// recorded: once the dead letter is terminated it leaves the stream, and
// later messages wait for the earlier one only.
func (p *Processor) recordSeqIfNext(ctx context.Context, thread string, seq uint64) error {
	t, _, err := p.threads.Get(ctx, thread)
	if err != nil {
		return err
	}
	if t.LastTurnSeq >= seq {
		return nil
	}
	next, err := p.firstUnrecorded(ctx, thread, t.LastTurnSeq)
	switch {
	case err != nil:
		return err
	case next != 0 && next < seq:
		return nil // an earlier message is not recorded yet
	}
	return p.recordSeq(ctx, thread, seq)
}

// firstUnrecorded returns the PARLEY_INPUT sequence of the first
// turn.requested of thread after last (the thread's last recorded one,
// Thread.LastTurnSeq), or 0 when there is none: the work queue keeps only
// messages not yet dealt with.
func (p *Processor) firstUnrecorded(ctx context.Context, thread string, last uint64) (uint64, error) {
	gctx, cancel := bus.WithRequestTimeout(ctx)
	defer cancel()
	next, err := p.input.GetMsg(gctx, last+1, jetstream.WithGetMsgSubject(events.InputThreadSubjects(thread, events.ChatTurnRequested)))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("checking earlier messages of %s: %w", thread, err)
	}
	return next.Sequence, nil
}

// awaitPredecessors holds a user message (an invalid one too, before it
// is recorded as dealt with) until every earlier
// turn.requested of its thread (by PARLEY_INPUT sequence, whichever
// principal sent it) is recorded, so that
// messages of one thread are taken in order (FIFO) even when replicas
// handle them in parallel. Only the message's sequence says it was
// recorded (the thread's LastTurnSeq reaches it), never its event ID: the
// sender chose that, and every integrator reads the IDs the thread
// handled in PARLEY_CHAT, so a stranger's message under one of them
// would go unchecked, and its refusal record the thread's last sequence
// past an earlier message still in flight, whose redelivery is then
// dropped as a repeat (onTurnRequested's forgotten check). It polls the thread record and the stream (a
// subject-filtered get of the next message after the last recorded one),
// heartbeating the message, for up to OrderWait; then it returns an error
// so the message is retried later.
// When the message may go on, it returns the thread as last read, its
// revision and whether it came from the cache (nil when the record is
// one this version cannot read: the caller reads again and reports);
// any other failed read is returned, so the message is retried, never
// taken unchecked. A cached record only ever lets the
// message go sooner when it is current (its LastTurnSeq and Handled only
// grow), so one that says "wait" is read again before waiting.
func (p *Processor) awaitPredecessors(ctx context.Context, thread string, d *bus.Delivery) (t *Thread, rev uint64, cached bool, err error) {
	deadline := time.Now().Add(p.opts.OrderWait)
	// While it waits, the message holds none of the consumer's handler
	// slots (bus.Yield): a thread's backlog waits in line without
	// keeping other threads' messages from being handled.
	var (
		reclaim func(context.Context) error
		changed <-chan struct{}
	)
	defer func() {
		if reclaim != nil {
			if rerr := reclaim(ctx); rerr != nil && err == nil {
				t, rev, cached, err = nil, 0, false, rerr
			}
		}
	}()
	var (
		next  uint64 // the thread's first message not yet recorded, once found
		woken bool   // by this replica's write of the thread (its cache has it)
	)
	for fresh := false; ; {
		if changed == nil {
			// Taken before the read: a write after the read wakes the wait.
			changed = p.writes.changed(thread)
		}
		var (
			t      *Thread
			rev    uint64
			cached bool
			err    error
		)
		if fresh {
			t, rev, err = p.threads.Get(ctx, thread)
		} else {
			t, rev, cached, err = p.threads.View(ctx, thread)
		}
		if errors.Is(err, kvstate.ErrIncompatible) {
			return nil, 0, false, nil // handled (and reported) by the caller
		}
		if err != nil {
			// Not checked: the message must not go on unchecked (it
			// could overtake an earlier one); it is retried.
			return nil, 0, false, fmt.Errorf("checking earlier messages of %s: %w", thread, err)
		}
		if t.LastTurnSeq >= d.StreamSeq {
			return t, rev, cached, nil // recorded already, or a late message: take it now
		}
		// The stream is asked again only once the message it named last
		// is recorded: every waiter of a thread is woken by each of its
		// writes, and only the next one in line has anything to ask.
		if next == 0 || t.LastTurnSeq >= next {
			n, err := p.firstUnrecorded(ctx, thread, t.LastTurnSeq)
			switch {
			case err != nil:
				return nil, 0, false, err
			case n == 0 || n >= d.StreamSeq:
				return t, rev, cached, nil // this is the next message of the thread
			}
			next = n
		}
		if cached && !woken {
			// The record may be behind: read it before waiting (after a
			// wake the cache holds the write that woke it; a write of
			// another replica is found by the poll's fresh read).
			fresh = true
			continue
		}
		if time.Now().After(deadline) {
			// Free the slot (the earlier message may need it) and come back.
			return nil, 0, false, bus.RetryLater(fmt.Errorf("message %d of %s waits for earlier message %d", d.StreamSeq, thread, next), 500*time.Millisecond)
		}
		if d.Msg != nil { // nil in the package tests
			_ = d.Msg.InProgress()
		}
		if reclaim == nil {
			reclaim = bus.Yield(ctx)
		}
		// Woken by this replica's next write of the thread (the earlier
		// message recorded here), else polled: another replica's write
		// is seen only by reading.
		select {
		case <-ctx.Done():
			return nil, 0, false, ctx.Err()
		case <-changed:
			woken, fresh = true, false
		case <-time.After(orderPoll):
			woken, fresh = false, true
		}
		changed = nil
	}
}

// orderPoll is how often a message waiting for an earlier one of its
// thread reads the thread again when no write of this replica wakes it
// (the earlier message is another replica's).
const orderPoll = 100 * time.Millisecond

// validateTurn checks a turn.requested event; the violations name fields.
func (p *Processor) validateTurn(thread string, e *event.Event) (events.TurnRequested, []schema.Violation) {
	var vs []schema.Violation
	if err := events.ValidToken("subject", thread); err != nil {
		vs = append(vs, schema.Violation{Path: "subject", Rule: err.Error()})
	}
	if e.Subject() != thread {
		vs = append(vs, schema.Violation{Path: "subject", Rule: fmt.Sprintf("must equal the thread of the NATS subject (%q)", thread)})
	}
	if v, ok := checkEventID(e.ID()); !ok {
		vs = append(vs, v)
	}
	if v, ok := checkAttributes(e); !ok {
		vs = append(vs, v)
	}
	// The whole event data (text, content blocks, _meta, share), so no
	// part of a message can overflow the thread record.
	if n := len(e.Data()); n > events.MaxTurnRequestBytes {
		return events.TurnRequested{}, append(vs, schema.Violation{Path: "data",
			Rule: fmt.Sprintf("%d bytes is over the limit of %d", n, events.MaxTurnRequestBytes)})
	}
	in, err := events.InputData[events.TurnRequested](e)
	if _, ok := errors.AsType[*schema.ValidationError](err); ok {
		return in, append(vs, schema.Violations(err)...) // a repeated member, invalid text: named
	}
	if err != nil {
		return in, append(vs, schema.Violation{Path: "data", Rule: err.Error()})
	}
	// Members the message's shape does not define are refused, as the
	// gateway refuses them in its body: one rule on every entrance.
	vs = append(vs, events.CheckInput(events.TypeTurnRequested, e.Data())...)
	if in.Agent == "" {
		in.Agent = p.opts.DefaultAgent
	}
	if err := events.ValidToken("agent", in.Agent); err != nil {
		vs = append(vs, schema.Violation{Path: "data.agent", Rule: err.Error()})
	}
	if len(in.User) > maxOnBehalfOf {
		vs = append(vs, schema.Violation{Path: "data.user", Rule: fmt.Sprintf("%d bytes; at most %d", len(in.User), maxOnBehalfOf)})
	}
	vs = append(vs, validateShare(in.Share)...)
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
	if events.TypeOf(e) != events.TypeTurnRequested {
		vs = append(vs, schema.Violation{Path: "type", Rule: fmt.Sprintf("must be %q on a turn.requested subject", events.TypeTurnRequested)})
	}
	_, rvs := events.MessageReferences("data.message.", in.Message)
	vs = append(vs, rvs...)
	return in, vs
}

// MaxEventIDBytes bounds the id of an integrator's event (turn.requested,
// elicitation.responded), as JSON (checkEventID): the thread record keeps recent IDs (Handled,
// Refused, the answer's ResponseEventID), so their length must be bounded
// for the record to fit the KV value limit. A longer id is rejected
// invalid_event naming "id".
const MaxEventIDBytes = 256

// checkEventID checks id against MaxEventIDBytes, as the thread record
// stores it: JSON, where encoding/json writes '<', '>', '&' and control
// characters in 6 bytes each.
func checkEventID(id string) (schema.Violation, bool) {
	if len(id) > MaxEventIDBytes {
		return schema.Violation{Path: "id", Rule: fmt.Sprintf("%d bytes; at most %d", len(id), MaxEventIDBytes)}, false
	}
	b, _ := json.Marshal(id)
	if n := len(b) - 2; n > MaxEventIDBytes {
		return schema.Violation{Path: "id", Rule: fmt.Sprintf("%d bytes as JSON (escapes included); at most %d", n, MaxEventIDBytes)}, false
	}
	return schema.Violation{}, true
}

// MaxAttributeBytes bounds the CloudEvents attributes of an integrator's
// event (turn.requested, elicitation.responded), extensions included, as
// NATS headers (events.Encode: names, values and separators). The
// processor echoes an accepted event into PARLEY_CHAT with its
// attributes, and JetStream refuses a message whose headers pass 64 KiB:
// an event whose echo cannot be stored would be recorded (a turn started,
// an answer consumed) but never announced nor run, leaving its thread
// running for ever. A larger event is rejected invalid_event, path
// "attributes".
const MaxAttributeBytes = 8 << 10

// checkAttributes checks e's attributes against MaxAttributeBytes.
func checkAttributes(e *event.Event) (schema.Violation, bool) {
	h, _, err := events.Encode(e)
	if err != nil {
		return schema.Violation{Path: "attributes", Rule: err.Error()}, false
	}
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	if n > MaxAttributeBytes {
		return schema.Violation{Path: "attributes", Rule: fmt.Sprintf("%d bytes as headers (extensions included); at most %d", n, MaxAttributeBytes)}, false
	}
	return schema.Violation{}, true
}

// requestRun publishes run.requested for the thread's active turn if the
// event startedBy started it (again after a crash: the ID is deterministic).
func (p *Processor) requestRun(ctx context.Context, t *Thread, startedBy string) error {
	if t.State != ThreadRunning || t.StartedBy != startedBy {
		return nil
	}
	e, err := events.KindRunRequested.New(events.SourceProcessor, events.DerivedID("run.requested", t.RunID),
		t.ID, events.RunRequested{RunID: t.RunID, TurnID: t.TurnID, Thread: t.ID,
			Agent: t.Agent, Messages: t.History})
	if err != nil {
		return err
	}
	// A turn taken from the queue continues the trace its message came in.
	if err := p.publishRun(ctx, e, t.TurnID, t.RunID, t.TraceParent, "start turn"); err != nil {
		return err
	}
	p.log.InfoContext(ctx, "turn started", "subject", t.ID, "turn_id", t.TurnID, "event_id", t.StartedBy,
		"agent", t.Agent, "queued", len(t.Queue))
	return nil
}

// errPauseChanged: the thread's paused turn changed after it was read.
var errPauseChanged = errors.New("the thread's pause changed")

// announceEnd tells integrators how the superseded paused turn ended.
func (p *Processor) announceEnd(ctx context.Context, thread string, sup *Supersession) error {
	switch {
	case len(sup.Cancelled) > 0:
		return publishChat(ctx, p, thread, events.KindElicitationCancelled,
			events.DerivedID("elicitation.cancelled", thread, sup.TurnID), sup.TurnID,
			events.ElicitationCancelled{TurnID: sup.TurnID, ElicitationIDs: sup.Cancelled,
				Reason: "a new user message started a new turn"})
	case len(sup.Expired) > 0:
		// Same ID as the expiry consumer's announcement: published once.
		return publishChat(ctx, p, thread, events.KindElicitationExpired,
			events.DerivedID("elicitation.expired", thread, sup.TurnID), sup.TurnID,
			events.ElicitationExpired{TurnID: sup.TurnID, ElicitationIDs: sup.Expired})
	}
	return nil
}

// finishTurn ends the thread's active turn (if the outcome eventID of
// turnID, at runs stream sequence runSeq, is not stale), keeping in its
// history the tool calls the turn ran (with note, how it ended, when
// there is no reply) and reply, and starts the next queued message.
func (p *Processor) finishTurn(ctx context.Context, thread, turnID, eventID string, runSeq uint64, reply *schema.ChatMessage, ran ranTools, note string) (*Thread, error) {
	t, _, err := p.threads.Mutate(ctx, thread, func(t *Thread) error {
		return applyEnd(t, turnID, eventID, runSeq, reply, ran, note)
	})
	return t, err
}

// finishTurnAt is finishTurn from the thread t just loaded at rev (one
// read fewer); t is changed.
func (p *Processor) finishTurnAt(ctx context.Context, t *Thread, rev uint64, turnID, eventID string, runSeq uint64, reply *schema.ChatMessage, ran ranTools) (*Thread, error) {
	t, _, err := p.threads.MutateFrom(ctx, t.ID, t, rev, false, func(t *Thread) error {
		return applyEnd(t, turnID, eventID, runSeq, reply, ran, "")
	})
	return t, err
}

func (p *Processor) onRunCompleted(ctx context.Context, d *bus.Delivery, in events.RunCompleted) error {
	e := d.Event
	thread := e.Subject()
	if in.TurnID == "" {
		return bus.Permanent(errors.New("data.turnId: required"))
	}
	// A fresh read, not the cache: turn.completed is published before
	// the thread records the end (so no later turn of the thread can end
	// before it is announced), which needs a current record to decide on.
	t, rev, err := p.threads.Get(ctx, thread)
	if err != nil {
		return err
	}
	switch classifyEnd(t, in.TurnID, e.ID(), d.StreamSeq) {
	case outcomeStale:
		p.log.InfoContext(ctx, "ignoring a stale completion (the turn is not active, or moved past it)", "subject", thread, "turn_id", in.TurnID)
		return nil
	case outcomeRepeat:
		// Recorded, so announced before (the end is published first): only
		// the next turn's start may be missing.
		return p.requestNext(ctx, t)
	}
	msg := in.Message
	msg.Role = schema.RoleAssistant
	if err := publishChat(ctx, p, thread, events.KindTurnCompleted,
		events.DerivedID("turn.completed", thread, in.TurnID), in.TurnID, events.TurnCompleted{TurnID: in.TurnID, RequestEventID: startedBy(t, in.TurnID), Message: msg, Decisions: in.Decisions,
			ToolCalls: events.RanOf(in.Effects), ToolCallsOmitted: in.EffectsOmitted}); err != nil {
		return err
	}
	t, err = p.finishTurnAt(ctx, t, rev, in.TurnID, e.ID(), d.StreamSeq, &msg,
		ranTools{effects: in.Effects, omitted: in.EffectsOmitted})
	if err != nil {
		return err
	}
	p.log.InfoContext(ctx, "turn completed", "subject", thread, "turn_id", in.TurnID, "decisions", len(in.Decisions))
	return p.requestNext(ctx, t)
}

// startedBy returns the turn.requested event ID that started turnID, if
// it is the thread's active turn.
func startedBy(t *Thread, turnID string) string {
	if t.TurnID == turnID {
		return t.StartedBy
	}
	return ""
}

// requestNext publishes run.requested for a turn started from the queue.
func (p *Processor) requestNext(ctx context.Context, t *Thread) error {
	return p.requestRun(ctx, t, t.StartedBy)
}

func (p *Processor) onRunFailed(ctx context.Context, d *bus.Delivery, in events.RunFailed) error {
	return p.endTurn(ctx, d, d.Event.Subject(), in.TurnID, in.Reason, in.Detail,
		ranTools{effects: in.Effects, omitted: in.EffectsOmitted})
}

// endTurn fails the active turn turnID of thread with the run outcome d
// (turn.failed with reason and detail, and the tool calls the turn ran,
// announced before it is recorded), unless d is stale, keeps those calls
// in the thread's history, and starts the next queued message. ran is
// what the outcome reports; when it reports nothing, what the turn's
// pause recorded.
func (p *Processor) endTurn(ctx context.Context, d *bus.Delivery, thread, turnID, reason, detail string, ran ranTools) error {
	e := d.Event
	t, _, err := p.threads.Get(ctx, thread)
	if err != nil {
		return err
	}
	switch act := classifyEnd(t, turnID, e.ID(), d.StreamSeq); {
	case turnID == "" || act == outcomeStale:
		p.log.InfoContext(ctx, "ignoring a stale failure (the turn is not active, or moved past it)", "subject", thread, "turn_id", turnID)
		return nil
	case act == outcomeRepeat:
		return p.requestNext(ctx, t) // announced before it was recorded
	}
	ran = ran.orPaused(t, turnID)
	if err := publishChat(ctx, p, thread, events.KindTurnFailed,
		events.DerivedID("turn.failed", thread, turnID), turnID,
		events.TurnFailed{TurnID: turnID, RequestEventID: startedBy(t, turnID), Reason: reason, Detail: detail,
			ToolCalls: events.RanOf(ran.effects), ToolCallsOmitted: ran.omitted}); err != nil {
		return err
	}
	t, err = p.finishTurn(ctx, thread, turnID, e.ID(), d.StreamSeq, nil, ran, failedNote(reason))
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
	// Whatever is stored: a new idle thread replaces the record.
	if _, derr := p.threads.Put(ctx, thread, newThread(thread)); derr != nil {
		return derr
	}
	if perr := publishChat(ctx, p, thread, events.KindTurnFailed,
		events.DerivedID("turn.failed.incompatible", thread, err.Error()), "",
		events.TurnFailed{Reason: events.RejectStateIncompatible, Detail: err.Error() + "; the thread was reset"}); perr != nil {
		return perr
	}
	// Retry the event on the reset thread.
	return fmt.Errorf("thread %s was reset after incompatible state: %w", thread, err)
}
