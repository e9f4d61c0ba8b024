package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// Options configures a Processor.
type Options struct {
	// Logger. Optional. Default: discard.
	Logger *slog.Logger
	// PauseTTL is how long a paused turn waits for answers. Optional.
	// Default: 24h. The server's granularity is one second.
	PauseTTL time.Duration
	// ThreadTTL bounds how long an untouched thread is kept. Optional.
	// Default: 30 days.
	ThreadTTL time.Duration
	// Concurrency is the number of events handled at once per consumer.
	// Optional. Default: 8.
	Concurrency int
	// DefaultAgent answers turns that name no agent. Optional. Default: "default".
	DefaultAgent string
	// OrderWait bounds how long a user message waits (heartbeating) for an
	// earlier message of its thread that is still being handled, before it
	// is released to be retried (bus.RetryLater: waiting does not count as
	// a failure). Optional. Default: 10s.
	OrderWait time.Duration
	// TrustedPrincipals are the NATS principals trusted to speak for end
	// users: only an input from one of them may name the user it acts for
	// (onBehalfOf), which then becomes part of the party that owns a
	// thread or answered a question; a claim from any other principal is
	// rejected forbidden. Optional. Default: DefaultTrustedPrincipals.
	TrustedPrincipals []string
	// NoThreadCache turns off the cache of thread and pause records
	// (threads.go, paused.go): every handler then reads the records
	// from the buckets. Optional.
	// Default: false (cached; correct with any number of replicas).
	NoThreadCache bool
	// NoSchedules makes pause records expire by per-key TTL, as they do
	// on a server without message schedules (before nats-server 2.12),
	// rather than by a message schedule (kvstate.BucketOptions.Schedules).
	// Either way a record expires at the same time and ends its pause;
	// with a TTL the expiry watcher also receives every record's write (2
	// bus messages more per pause). Optional. Default: false (schedules
	// where the server has them).
	NoSchedules bool
	// NoStandingApprovals turns standing approvals off for the
	// deployment: no confirmation offers one, and no call runs under one
	// granted before (docs/POLICY.md). Optional. Default: false (offered
	// where no policy asks every time).
	NoStandingApprovals bool
	// StandingTTLs are the bounded lifetimes a confirmation offers for a
	// standing approval besides the default (e.g. 1h: "for 1 hour"), each
	// below the default's bound (PauseTTL for a destructive tool,
	// ThreadTTL otherwise) — longer ones are not offered. Whole seconds,
	// at least 1s. Optional. Default: none.
	StandingTTLs []time.Duration
}

// DefaultTrustedPrincipals is the default of Options.TrustedPrincipals:
// the gateway, which authenticates its users itself.
var DefaultTrustedPrincipals = []string{events.PrincipalGateway}

// Processor is the processor worker.
type Processor struct {
	// runs routes HandleRun's events (newRunRouter), built on first use.
	runsOnce sync.Once
	runs     *bus.Router
	bus      *bus.Client // consumes (Run)
	pub      publisher
	threads  *kvstate.Store[Thread]
	writes   writeWaiters
	// resolver resolves context references (references.go); nil when
	// there is no bus (package tests): references are then refused.
	resolver requester
	pauses   *pauseRecords
	// approvals are the standing approvals (approvals.go); nil in
	// package tests on fakes, which then neither offer nor grant any.
	approvals *approvalStore
	input     inputReader
	opts      Options
	log       *slog.Logger
	faults    faults
}

// New opens the processor's buckets (idempotently).
func New(ctx context.Context, b *bus.Client, opts *Options) (*Processor, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.PauseTTL <= 0 {
		o.PauseTTL = 24 * time.Hour
	}
	if o.PauseTTL < time.Second {
		return nil, fmt.Errorf("PauseTTL: %v is below the server's minimum of 1s", o.PauseTTL)
	}
	if o.ThreadTTL <= 0 {
		o.ThreadTTL = 30 * 24 * time.Hour
	}
	if o.DefaultAgent == "" {
		o.DefaultAgent = "default"
	}
	if o.OrderWait <= 0 {
		o.OrderWait = 10 * time.Second
	}
	if o.TrustedPrincipals == nil {
		o.TrustedPrincipals = DefaultTrustedPrincipals
	}
	for i, d := range o.StandingTTLs {
		if d < time.Second || d%time.Second != 0 {
			return nil, fmt.Errorf("StandingTTLs[%d]: %v must be whole seconds, at least 1s", i, d)
		}
	}
	for _, tp := range o.TrustedPrincipals {
		if err := events.ValidToken("TrustedPrincipals", tp); err != nil {
			return nil, err
		}
	}
	js := b.JetStream()
	threads, err := openThreads(ctx, js, b.Storage(), b.Replicas(), o.ThreadTTL)
	if err != nil {
		return nil, err
	}
	pauses, err := openPauses(ctx, js, b.Storage(), b.Replicas(), !o.NoSchedules)
	if err != nil {
		return nil, err
	}
	approvals, err := openApprovals(ctx, js, b.Storage(), b.Replicas(), o.ThreadTTL)
	if err != nil {
		return nil, err
	}
	input, err := js.Stream(ctx, events.StreamInput)
	if err != nil {
		return nil, fmt.Errorf("opening stream %s (run EnsureStreams first): %w", events.StreamInput, err)
	}
	p := newProcessor(o, b, b, threads, pauses, input)
	p.approvals = approvals
	return p, nil
}

// newProcessor wires a Processor to its dependencies (New: on NATS; the
// package tests: in-memory fakes). b may be nil when Run is not called.
func newProcessor(o Options, b *bus.Client, pub publisher, threads kvstate.Records, pauses pauseStore, input inputReader) *Processor {
	p := &Processor{bus: b, pub: pub, input: input, opts: o, log: o.Logger, faults: faultsFromEnv(),
		pauses: newPauseRecords(pauses, !o.NoThreadCache)}
	p.threads = p.threadStore(threads, !o.NoThreadCache)
	if b != nil {
		p.resolver = b
	}
	return p
}

// Run consumes integrator input (PARLEY_INPUT) and run outcomes and watches for expired pauses
// until ctx is cancelled; then it drains and returns nil (or the first error
// that stopped a part).
func (p *Processor) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	consume := func(spec bus.ConsumerSpec, h bus.Handler) {
		wg.Go(func() {
			if err := p.bus.Consume(ctx, spec, h); err != nil {
				errs <- err
				cancel()
			}
		})
	}
	// expiries is a headers-only durable consumer of the pause records'
	// bucket stream: an expiry that happens while every processor is down
	// is handled when one starts.
	expiries := func(durable, description string, filters ...string) bus.ConsumerSpec {
		return bus.ConsumerSpec{Stream: "KV_" + kvstate.BucketPaused, Durable: durable, Concurrency: p.opts.Concurrency,
			FilterSubjects: filters, Raw: true, HeadersOnly: true, DeliverNew: true, Description: description}
	}
	wg.Go(func() {
		if err := p.ServeState(ctx); err != nil {
			errs <- err
			cancel()
		}
	})
	wg.Go(func() {
		if err := p.ServeApprovals(ctx); err != nil {
			errs <- err
			cancel()
		}
	})
	consume(bus.ConsumerSpec{
		// Every input subject, so that one that does not parse is
		// dead-lettered with the reason rather than left in the stream.
		Stream: events.StreamInput, Durable: "processor", Concurrency: p.opts.Concurrency,
		FilterSubjects: []string{events.SubjectInputAll},
		Compensate:     p.compensate,
		OnUndecodable:  p.onUndecodable,
	}, p.HandleInput)
	consume(bus.ConsumerSpec{
		Stream: events.StreamRuns, Durable: "processor-runs", Concurrency: p.opts.Concurrency,
		Compensate: p.compensate,
	}, p.HandleRun)
	// Expiries of scheduled pause records (pauseExpiryKey), within
	// kvstate.ExpiryKeep of them. The records' writes are on other
	// subjects, and not delivered.
	consume(expiries("processor-timers", "parley processors: expiries of paused turns",
		pausedSubjects+".*"+pauseExpirySuffix), p.HandleExpiry)
	// Expiry markers of pause records with a per-key TTL (pauseKey, and
	// an earlier version's under the thread ID). Every write of such a
	// record is delivered too (a marker shares its key's subject). An
	// earlier version filtered on every key ("$KV.parley_paused.>");
	// while one runs beside this one, the consumer's filter changes with
	// whichever started last, and this one is delivered writes of
	// scheduled records too, which it acks as they are.
	consume(expiries("processor-expiry", "parley processors: expiry markers of paused turns",
		pausedSubjects+".*", pausedSubjects+".*.*"), p.HandleExpiry)
	wg.Wait()
	close(errs)
	return <-errs
}

// pausedSubjects is the subject prefix of the pause records' bucket.
const pausedSubjects = "$KV." + kvstate.BucketPaused

// HandleExpiry handles a message of the pause records' bucket stream
// (KV_parley_paused, headers only): the expiry of a scheduled record
// (under its thread's pauseExpiryKey, naming the record in the header
// kvstate.SchedulerHeader) or an expiry marker of a record with a TTL
// (Nats-Marker-Reason MaxAge, on the record's key) ends its pause
// (onExpired). A write or delete is acked as is, and so is the marker
// the server stores when a thread's last expiry itself goes
// (kvstate.ExpiryKeep after it, on the expiry key): it is no record's
// expiry.
func (p *Processor) HandleExpiry(ctx context.Context, d *bus.Delivery) error {
	key := strings.TrimPrefix(d.Subject, pausedSubjects+".")
	h := d.Msg.Headers()
	switch thread, isExpiry := strings.CutSuffix(key, pauseExpirySuffix); {
	case isExpiry:
		k, ok := kvstate.ExpiredValueKey(kvstate.BucketPaused, h)
		if !ok || threadOfPauseKey(k) != thread {
			return nil
		}
		key = k
	case h.Get(jetstream.MarkerReasonHeader) != "MaxAge":
		return nil
	}
	if err := p.onExpired(ctx, key); err != nil {
		return fmt.Errorf("ending the paused turn of %s: %w", threadOfPauseKey(key), err)
	}
	return nil
}

// runSubjectPrefix is the prefix of PARLEY_RUNS subjects.
const runSubjectPrefix = "parley.agent.run."

// HandleInput handles an integrator's turn.requested or
// elicitation.responded from PARLEY_INPUT, published by the principal its
// subject names (parley.in.<principal>.<thread>.<suffix>). A subject that
// does not parse is a permanent error naming the rule (the message is
// dead-lettered with it).
func (p *Processor) HandleInput(ctx context.Context, d *bus.Delivery) error {
	principal, thread, suffix, err := events.ParseInputSubject(d.Subject)
	if err != nil {
		p.log.WarnContext(ctx, "input on a bad subject dead-lettered", "subject", d.Subject, "error", err)
		return bus.Permanent(err)
	}
	in := input{principal: principal, thread: thread, d: d}
	switch suffix {
	case events.ChatTurnRequested:
		return p.onTurnRequested(ctx, in)
	default: // events.ChatElicitationResponded
		return p.onResponded(ctx, in)
	}
}

// input is one integrator event being handled: its authenticated
// principal (the subject's token), its thread and its delivery.
type input struct {
	principal string
	thread    string
	d         *bus.Delivery
}

// echo republishes the accepted input e (its type checked against its
// input subject) into PARLEY_CHAT on its type's subject,
// parley.chat.<thread>.<suffix>, with the same event ID (so a redelivery
// stores it once) and the extension attributes principal and, when the
// claim was honoured, onbehalfof; any such attributes the integrator set
// are replaced.
func (p *Processor) echo(ctx context.Context, thread string, e *event.Event, who events.Identity) error {
	out := e.Clone()
	out.SetExtension(events.ExtPrincipal, who.Principal)
	if who.OnBehalfOf != "" {
		out.SetExtension(events.ExtOnBehalfOf, who.OnBehalfOf)
	} else {
		out.SetExtension(events.ExtOnBehalfOf, nil) // nil removes it
	}
	if _, err := bus.PublishTo(ctx, p.pub, events.StreamChat, &out, thread); err != nil {
		return fmt.Errorf("echoing %s into %s: %w", e.ID(), events.StreamChat, err)
	}
	return nil
}

// HandleRun handles agent run outcomes: run.completed, run.paused and
// run.failed; any other type is dead-lettered (see bus.Router).
func (p *Processor) HandleRun(ctx context.Context, d *bus.Delivery) error {
	p.runsOnce.Do(func() { p.runs = p.newRunRouter() })
	return p.runs.Handle(ctx, d)
}

// newRunRouter routes PARLEY_RUNS by event type.
func (p *Processor) newRunRouter() *bus.Router {
	r := bus.NewRouter()
	bus.On(r, events.KindRunCompleted, p.onRunCompleted)
	bus.On(r, events.KindRunPaused, p.onRunPaused)
	bus.On(r, events.KindRunFailed, p.onRunFailed)
	return r
}

// compensate tells the thread that one of its events could not be
// handled: a user message gets turn.failed (naming the message, not the
// active turn), an answer gets elicitation.rejected, and a run outcome
// fails its turn and frees the thread. It runs before the message is
// terminated and its error is retried (bus.ConsumerSpec.Compensate), so
// the thread always learns the verdict.
func (p *Processor) compensate(ctx context.Context, d *bus.Delivery, reason error) error {
	principal, thread, suffix, perr := events.ParseInputSubject(d.Subject)
	if perr != nil {
		// Only a run outcome names its thread in the event; an input
		// whose subject does not parse names none (its dead letter
		// carries the reason).
		if d.Event == nil || !strings.HasPrefix(d.Subject, runSubjectPrefix) {
			return nil
		}
		thread = d.Event.Subject()
	}
	if events.ValidToken("thread", thread) != nil {
		return nil
	}
	detail := fmt.Sprintf("an event on %s could not be handled after %d attempts and was moved to the dead-letter stream %s: %v",
		d.Subject, d.NumDelivered, events.StreamDeadLetter, reason)
	var eventID string
	if d.Event != nil {
		eventID = d.Event.ID()
	}
	switch {
	case suffix == events.ChatTurnRequested:
		if err := publishChat(ctx, p, thread, events.KindTurnFailed,
			events.DerivedID("turn.failed.dlq", d.Subject, fmt.Sprint(d.StreamSeq)), "",
			events.TurnFailed{RequestEventID: eventID, Reason: "dead_lettered", Detail: detail}); err != nil {
			return err
		}
		// Later messages of the thread wait for this one: let them go
		// (recordSeqIfNext).
		return p.recordSeqIfNext(ctx, thread, d.StreamSeq)
	case suffix == events.ChatElicitationResponded:
		var elicitationID string
		if d.Event != nil {
			in, _ := events.Data[events.ElicitationResponded](d.Event)
			elicitationID = in.ElicitationID
		}
		return publishRefusal(ctx, p, thread, events.KindElicitationRejected, events.Identity{Principal: principal},
			events.ElicitationRejected{ElicitationID: elicitationID, RespondedEventID: eventID,
				Reason: events.RejectInvalidEvent, Detail: detail}, "dlq", d.Subject, fmt.Sprint(d.StreamSeq))
	case d.Event != nil: // a run outcome: the turn cannot go on
		var ids struct {
			TurnID string `json:"turnId"`
			// What the run executed (any run outcome reports it): the
			// failed turn names it, and its history keeps it.
			Effects        []events.ToolEffect `json:"effects"`
			EffectsOmitted int                 `json:"effectsOmitted"`
		}
		if json.Unmarshal(d.Event.Data(), &ids) != nil || ids.TurnID == "" {
			return nil
		}
		// Only the thread's active turn can fail this way; anything else
		// is a forged or stale outcome. A retried compensation finds the
		// turn ended by its first try (outcomeRepeat): only the next
		// turn's start may be missing.
		t, _, err := p.threads.Get(ctx, thread)
		if err != nil {
			if errors.Is(err, kvstate.ErrIncompatible) {
				return bus.Permanent(err)
			}
			return err
		}
		switch classifyEnd(t, ids.TurnID, eventID, d.StreamSeq) {
		case outcomeStale:
			return nil
		case outcomeRepeat:
			return p.requestNext(ctx, t)
		}
		ran := ranTools{effects: ids.Effects, omitted: ids.EffectsOmitted}.orPaused(t, ids.TurnID)
		if err := publishChat(ctx, p, thread, events.KindTurnFailed,
			events.DerivedID("turn.failed", thread, ids.TurnID), ids.TurnID,
			events.TurnFailed{TurnID: ids.TurnID, Reason: "dead_lettered", Detail: detail,
				ToolCalls: events.RanOf(ran.effects), ToolCallsOmitted: ran.omitted}); err != nil {
			return err
		}
		t, err = p.finishTurn(ctx, thread, ids.TurnID, eventID, d.StreamSeq, nil, ran, failedNote("dead_lettered"))
		if err != nil {
			return err
		}
		return p.requestNext(ctx, t)
	}
	return nil
}

// onUndecodable refuses a chat event that is not a valid CloudEvent (a
// malformed header, a missing attribute) with the verdict any other invalid
// event of its kind gets, naming the attribute: turn.rejected or
// elicitation.rejected, reason invalid_event. A turn.requested is recorded
// as dealt with, so later messages of the thread stop waiting for it.
func (p *Processor) onUndecodable(ctx context.Context, d *bus.Delivery, cause error) error {
	principal, thread, suffix, err := events.ParseInputSubject(d.Subject)
	if err != nil {
		return bus.Permanent(errors.Join(cause, err))
	}
	who := events.Identity{Principal: principal}
	v := schema.Violation{Path: "event", Rule: cause.Error()}
	var ae *events.AttributeError
	if errors.As(cause, &ae) {
		v = schema.Violation{Path: ae.Header, Rule: ae.Rule}
	}
	// The event's own ID: as decoded when it was readable (binary or
	// structured mode), else as sent (it may be the malformed attribute).
	var rawID string
	if ae != nil && ae.ID != "" {
		rawID = ae.ID
	} else if vs := d.Msg.Headers()["ce-id"]; len(vs) > 0 {
		rawID = vs[0]
	}
	p.log.WarnContext(ctx, "undecodable event rejected", "subject", d.Subject, "stream_seq", d.StreamSeq, "error", cause)
	switch suffix {
	case events.ChatTurnRequested:
		// In its turn, like any message of the thread (awaitPredecessors):
		// recorded at once, it would release later messages still
		// waiting for earlier ones.
		if _, _, _, err := p.awaitPredecessors(ctx, thread, d); err != nil {
			return err
		}
		if err := p.announceRefusal(ctx, thread, rawID, nil, func() error {
			return publishRefusal(ctx, p, thread, events.KindTurnRejected, who,
				events.TurnRejected{RequestEventID: rawID, Reason: events.RejectInvalidEvent, Errors: []schema.Violation{v}},
				"undecodable", d.Subject, fmt.Sprint(d.StreamSeq))
		}); err != nil {
			return err
		}
		if events.ValidToken("thread", thread) != nil {
			return nil // no thread record for an invalid thread ID
		}
		return p.recordSeq(ctx, thread, d.StreamSeq) // in its turn: awaitPredecessors above
	case events.ChatElicitationResponded:
		var in events.ElicitationResponded
		_ = json.Unmarshal(d.Msg.Data(), &in)
		return p.announceRefusal(ctx, thread, rawID, nil, func() error {
			return publishRefusal(ctx, p, thread, events.KindElicitationRejected, who,
				events.ElicitationRejected{ElicitationID: in.ElicitationID, RespondedEventID: rawID,
					Reason: events.RejectInvalidEvent, Detail: cause.Error(), Errors: []schema.Violation{v}},
				"undecodable", d.Subject, fmt.Sprint(d.StreamSeq))
		})
	}
	return bus.Permanent(cause)
}

// publishChat publishes a processor event of kind on thread's subject in
// PARLEY_CHAT (parley.chat.<thread>.<kind's suffix>), with ID id (a
// DerivedID, so a redelivered handler publishes it once) and, when turnID
// is not "", the turnid extension.
func publishChat[T any](ctx context.Context, p *Processor, thread string, kind events.Kind[T], id, turnID string, data T) error {
	e, err := kind.New(events.SourceProcessor, id, thread, data)
	if err != nil {
		return err
	}
	if turnID != "" {
		e.SetExtension(events.ExtTurnID, turnID)
	}
	_, err = bus.PublishTo(ctx, p.pub, events.StreamChat, e, thread)
	return err
}

// publishRefusal publishes a refusal (turn.rejected, elicitation.rejected)
// of an input event of the party who, under an ID derived from kind, the
// refused party's principal and the refused event's ID (parts), with who
// as the extension attributes principal and onbehalfof, as an echo
// carries them. A refusal names the refused event by the ID its sender
// chose, which may be another party's event's (every integrator reads
// them in PARLEY_CHAT): clients match a refusal by its principal too, and
// one party's refusal cannot take the ID of another's.
//
// A refusal is stored in the thread (parley.chat.<thread>.<suffix>) only
// when who is a party of it (partyOf); a stranger's refusal, and one of
// the first message of a thread nobody owns yet, is stored under who's
// principal (events.RefusedSubject), where that sender reads it and no
// party of the thread does: a stranger cannot fill someone else's thread
// with refusals.
func publishRefusal[T any](ctx context.Context, p *Processor, thread string, kind events.Kind[T], who events.Identity, data T, parts ...string) error {
	id := events.DerivedID(append([]string{string(kind.Type()), who.Principal}, parts...)...)
	e, err := kind.New(events.SourceProcessor, id, thread, data)
	if err != nil {
		return err
	}
	if who.Principal != "" {
		e.SetExtension(events.ExtPrincipal, who.Principal)
	}
	if who.OnBehalfOf != "" {
		e.SetExtension(events.ExtOnBehalfOf, who.OnBehalfOf)
	}
	party, err := p.partyOf(ctx, thread, who)
	if err != nil {
		return err
	}
	if !party {
		subject, err := events.SubjectOf(e, events.StreamChat, thread)
		if err != nil {
			return bus.Permanent(fmt.Errorf("publishing %s: %w", e.ID(), err))
		}
		_, err = p.pub.Publish(ctx, refusedSubject(subject, who.Principal, thread), e)
		return err
	}
	_, err = bus.PublishTo(ctx, p.pub, events.StreamChat, e, thread)
	return err
}

// refusedSubject turns the chat subject of a refusal on thread into its
// subject under principal (events.RefusedSubject).
func refusedSubject(chatSubject, principal, thread string) string {
	_, suffix, _ := events.ParseChatSubject(chatSubject)
	return events.RefusedSubject(principal, thread, suffix)
}

// partyOf reports whether who is a party of thread as the processor
// records it: the thread has an owner, and who is the owner or one it
// shared the thread with. A thread ID that is no token has no record
// (true: its refusal goes where it always went, and fails there). A
// cached record is trusted only to say yes (grants only grow); a no is
// checked on a fresh read. An unreadable record (kvstate.ErrIncompatible)
// makes nobody a party; other read errors are returned (retried).
func (p *Processor) partyOf(ctx context.Context, thread string, who events.Identity) (bool, error) {
	if who.Principal == "" || events.ValidToken("thread", thread) != nil {
		return true, nil
	}
	party := func(t *Thread) bool { return t.Owner != nil && mayUse(t, who) == nil }
	t, _, cached, err := p.threads.View(ctx, thread)
	if err == nil && party(t) {
		return true, nil
	}
	if err == nil && cached {
		t, _, err = p.threads.Get(ctx, thread)
	}
	switch {
	case errors.Is(err, kvstate.ErrIncompatible):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading thread %s to place a refusal: %w", thread, err)
	}
	return party(t), nil
}

// publishRun stores e, an event that starts or resumes run runID of turn
// turnID, in PARLEY_AGENT: with the turn's and the run's IDs as
// extensions, and in the trace traceParent (W3C traceparent, "" for none)
// under a span named span.
func (p *Processor) publishRun(ctx context.Context, e *event.Event, turnID, runID, traceParent, span string) error {
	e.SetExtension(events.ExtTurnID, turnID)
	e.SetExtension(events.ExtRunID, runID)
	if traceParent != "" {
		e.SetExtension(events.ExtTraceParent, traceParent)
	}
	ctx, end := bus.WithTraceParent(ctx, traceParent, span)
	defer end()
	return p.publish(ctx, events.StreamAgent, e)
}

// publish publishes e on its type's subject in stream (bus.PublishTo).
func (p *Processor) publish(ctx context.Context, stream string, e *event.Event) error {
	_, err := bus.PublishTo(ctx, p.pub, stream, e)
	return err
}
