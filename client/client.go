// Package client is what an integrator does, in Go: publish turn.requested
// and elicitation.responded events for a thread, and read the thread's
// events from the PARLEY_CHAT stream. Any language can do the same by
// publishing CloudEvents on the subjects in docs/events.md.
//
// Publishes retry through a NATS reconnect or a JetStream leader election
// with the same event ID (Publish, RetryPolicy: 30 s by default), so a
// retry never stores a duplicate, and report ErrNotConfirmed when the
// budget runs out. Deliver publishes and waits for the processor's verdict
// (completed, paused, rejected, failed; accepted for an answer), matched
// by event ID on a consumer started before the publish. Watch reads
// through an ordered consumer that resumes after restarts and elections
// and is deleted when the watch ends.
//
// It publishes on parley.in.<principal>.<thread>.<kind> (PARLEY_INPUT), the
// principal being the NATS user it is authenticated as (Options.Principal),
// and reads PARLEY_CHAT, where the processor echoes every accepted input:
// an answer's acceptance, a thread's pending questions and where a message
// without a verdict stands all come from those events (folded by
// threadstate), never from a worker's bucket. Session follows one thread.
//
// It owns the integrator's side of the wire (publishing input, verdicts,
// watching a thread, request-reply lookups) and keeps no state of its own:
// it reads no worker's or tool's bucket. Of parley's packages it imports
// only bus, client/threadstate, events, internal/natsauth and schema; it
// must not import kvstate, gateway, a worker or a composition root
// (internal/layers checks the direction of imports).
package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/schema"
)

// Client publishes and reads chat events.
type Client struct {
	bus       *bus.Client
	source    string
	principal string
	retry     RetryPolicy
}

// Options configures a Client made with NewWithOptions.
type Options struct {
	// Source is the CloudEvents source of the events the client
	// publishes. Optional. Default: events.SourceCLI (/parley/cli).
	Source string
	// Retry bounds how long a publish retries through a JetStream leader
	// election or a reconnect. Optional. Default: RetryPolicy's defaults
	// (30 s budget, 3 s per try).
	Retry RetryPolicy
	// Principal is the NATS principal (user) the connection is
	// authenticated as: the client publishes under
	// parley.in.<Principal>.>, the only input subjects the server lets
	// that user publish on. It must be a subject token (events.ValidToken).
	// Optional. Default: events.PrincipalIntegrator ("integrator").
	Principal string
}

// New wraps a bus client; source is the CloudEvents source of the events
// it publishes ("" means /parley/cli). Its publishes retry with the
// default RetryPolicy.
func New(b *bus.Client, source string) *Client {
	return NewWithOptions(b, &Options{Source: source})
}

// NewWithOptions wraps a bus client; nil opts means all defaults. It
// panics if b is nil (a programmer error).
func NewWithOptions(b *bus.Client, opts *Options) *Client {
	if b == nil {
		panic("client: nil bus client")
	}
	if opts == nil {
		opts = &Options{}
	}
	source := opts.Source
	if source == "" {
		source = events.SourceCLI
	}
	principal := opts.Principal
	if principal == "" {
		principal = events.PrincipalIntegrator
	}
	return &Client{bus: b, source: source, principal: principal, retry: opts.Retry}
}

// Principal returns the principal the client publishes under.
func (c *Client) Principal() string { return c.principal }

// WithPrincipal returns a copy of c that publishes under principal (see
// Options.Principal; "" keeps c's).
func (c *Client) WithPrincipal(principal string) *Client {
	cp := *c
	if principal != "" {
		cp.principal = principal
	}
	return &cp
}

// WithRetry returns a copy of c whose publishes follow p.
func (c *Client) WithRetry(p RetryPolicy) *Client {
	cp := *c
	cp.retry = p
	return &cp
}

// TurnRequest builds (without publishing) the turn.requested event of a
// user message on thread, so a caller can watch for its outcome before
// publishing it, or publish it again (same ID) after an unconfirmed try.
func (c *Client) TurnRequest(thread, agent, text, user string) (*event.Event, error) {
	if err := events.ValidToken("thread", thread); err != nil {
		return nil, err
	}
	if agent != "" {
		if err := events.ValidToken("agent", agent); err != nil {
			return nil, err
		}
	}
	return events.New(c.source, events.TypeTurnRequested, thread, events.TurnRequested{
		Agent: agent, User: user, Message: schema.ChatMessage{Role: schema.RoleUser, Text: text}})
}

// Response builds (without publishing) the elicitation.responded event
// answering elicitationID on thread.
func (c *Client) Response(thread, elicitationID string, result schema.ElicitResult, answeredBy string) (*event.Event, error) {
	if err := events.ValidToken("thread", thread); err != nil {
		return nil, err
	}
	return events.New(c.source, events.TypeElicitationResponded, thread, events.ElicitationResponded{
		ElicitationID: elicitationID, AnsweredBy: answeredBy, Action: result.Action, Content: result.Content, Meta: result.Meta})
}

// Publish publishes an event built by TurnRequest or Response (or any
// event an integrator may publish: turn.requested or
// elicitation.responded, its subject attribute the thread) on its input
// subject parley.in.<principal>.<thread>.<kind>, retrying per the
// client's RetryPolicy (see the package function Publish for the errors;
// a principal that is not a subject token fails at once). The PubAck's
// sequence is PARLEY_INPUT's; the processor echoes the event into
// PARLEY_CHAT (same ID) once it accepted it.
func (c *Client) Publish(ctx context.Context, e *event.Event) (*jetstream.PubAck, error) {
	suffix, ok := events.InputSuffix(events.TypeOf(e))
	if !ok {
		return nil, fmt.Errorf("publishing %s: integrators publish only %s and %s", e.Type(), events.TypeTurnRequested, events.TypeElicitationResponded)
	}
	if err := events.ValidToken("thread", e.Subject()); err != nil {
		return nil, err
	}
	if err := events.ValidToken("principal", c.principal); err != nil {
		return nil, err
	}
	return Publish(ctx, c.bus, events.InputSubject(c.principal, e.Subject(), suffix), e, c.retry)
}

// Send publishes turn.requested with a user message on thread and returns
// the event. Errors: see Publish.
func (c *Client) Send(ctx context.Context, thread, agent, text, user string) (*event.Event, error) {
	e, err := c.TurnRequest(thread, agent, text, user)
	if err != nil {
		return nil, err
	}
	if _, err := c.Publish(ctx, e); err != nil {
		return nil, err
	}
	return e, nil
}

// Answer publishes elicitation.responded for an elicitation of thread.
// Errors: see Publish.
func (c *Client) Answer(ctx context.Context, thread, elicitationID string, result schema.ElicitResult, answeredBy string) (*event.Event, error) {
	e, err := c.Response(thread, elicitationID, result, answeredBy)
	if err != nil {
		return nil, err
	}
	if _, err := c.Publish(ctx, e); err != nil {
		return nil, err
	}
	return e, nil
}

// Item is one chat event read from the stream.
type Item struct {
	Event   *event.Event
	Subject string
	Seq     uint64
	// Err is set when a stored message is not a valid CloudEvent.
	Err error
}

// WatchOptions selects what Watch reads.
type WatchOptions struct {
	// Thread limits to one thread ("" = all).
	Thread string
	// FromStart replays stored events first; otherwise only new ones.
	FromStart bool
	// StartSeq, when set, starts at this PARLEY_CHAT stream sequence
	// (FromStart is then ignored).
	StartSeq uint64
	// StartTime, when set (and StartSeq is not), starts at the first
	// event stored at or after it (FromStart is then ignored).
	StartTime time.Time
	// OnStatus, if set, is called when the watch loses or regains the
	// server (from a goroutine of Watch; it must not block for long).
	OnStatus func(WatchStatus)
	// Refusals adds the client's own refusals stored under its principal
	// (events.RefusedThreadSubjects: those of its events on a thread it is
	// not a party of, or on a thread nobody owns yet), of Thread or of
	// every thread. The thread's own subjects never hold them.
	Refusals bool
	// Backlog, if set, receives (before Watch returns) how many stored
	// events match the filter from the start position: the channel
	// delivers these before any newer one, so a caller that wants the
	// stored events only reads this many.
	Backlog *uint64
}

// WatchStatus is a change in a Watch's link to the server.
type WatchStatus int

// Watch statuses.
const (
	// WatchDisconnected: the NATS connection is down; nats.go reconnects.
	WatchDisconnected WatchStatus = iota + 1
	// WatchReconnected: the connection is back.
	WatchReconnected
	// WatchStalled: the consumer's heartbeats stopped (its stream leader
	// moved in an election, or the server restarted): it is recreated,
	// resuming after the last event delivered.
	WatchStalled
	// WatchResumed: after a stall, the consumer was recreated.
	WatchResumed
)

func (s WatchStatus) String() string {
	switch s {
	case WatchDisconnected:
		return "disconnected from NATS; reconnecting"
	case WatchReconnected:
		return "reconnected to NATS"
	case WatchStalled:
		return "the stream stopped answering (leader election or server restart); resuming where it stopped"
	case WatchResumed:
		return "resumed reading the stream"
	}
	return fmt.Sprintf("WatchStatus(%d)", int(s))
}

// Watch timings: the ordered consumer's pull heartbeat (a stall is noticed
// after two missed ones), and how long the server keeps it once no client
// pulls (a consumer left behind by a killed client goes after this).
const (
	watchHeartbeat         = 2 * time.Second
	watchExpiry            = 10 * time.Second
	watchInactiveThreshold = 10 * time.Second
	watchDeleteTimeout     = 2 * time.Second
)

// Watch reads chat events in stream order until ctx is cancelled, through
// an ordered consumer: it recreates itself after a server restart or a
// stream leader election and resumes after the last event delivered. The
// channel is closed when Watch stops, after the consumer was deleted from
// the server; a consumer of a client that dies without stopping is
// removed by the server after 10 s without pulls.
func (c *Client) Watch(ctx context.Context, opts WatchOptions) (<-chan Item, error) {
	filter := events.SubjectChatAll
	if opts.Thread != "" {
		if err := events.ValidToken("thread", opts.Thread); err != nil {
			return nil, err
		}
		filter = events.ChatThreadSubjects(opts.Thread)
	}
	filters := []string{filter}
	if opts.Refusals {
		thread := opts.Thread
		if thread == "" {
			thread = "*"
		}
		filters = append(filters, events.RefusedThreadSubjects(c.principal, thread))
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverNewPolicy,
		InactiveThreshold: watchInactiveThreshold}
	switch {
	case opts.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, opts.StartSeq
	case !opts.StartTime.IsZero():
		st := opts.StartTime
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &st
	case opts.FromStart:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	js := c.bus.JetStream()
	cons, err := c.orderedConsumer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if opts.Backlog != nil {
		*opts.Backlog = 0
		if info := cons.CachedInfo(); info != nil {
			*opts.Backlog = info.NumPending
		}
	}
	notify := func(s WatchStatus) {
		if opts.OnStatus != nil {
			opts.OnStatus(s)
		}
	}
	var stalled atomic.Bool
	out := make(chan Item, 64)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		it := Item{Subject: m.Subject()}
		if md, err := m.Metadata(); err == nil {
			it.Seq = md.Sequence.Stream
		}
		it.Event, it.Err = events.Decode(events.Header(m.Headers()), m.Data())
		select {
		case out <- it:
		case <-ctx.Done():
		}
	}, jetstream.PullHeartbeat(watchHeartbeat), jetstream.PullExpiry(watchExpiry),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if errors.Is(err, jetstream.ErrNoHeartbeat) && stalled.CompareAndSwap(false, true) {
				notify(WatchStalled)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %s", events.StreamChat, Explain(err))
	}
	nc := c.bus.Conn()
	statuses := nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CONNECTED)
	go func() {
		defer close(out)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		name := consumerName(cons)
		down := false
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case st := <-statuses:
				switch st {
				case nats.DISCONNECTED, nats.RECONNECTING:
					if !down {
						down = true
						notify(WatchDisconnected)
					}
				case nats.CONNECTED:
					if down {
						down = false
						notify(WatchReconnected)
					}
				}
			case <-tick.C:
				// The ordered consumer gets a new name when it is
				// recreated: that is the end of a stall.
				if n := consumerName(cons); n != name {
					name = n
					if stalled.CompareAndSwap(true, false) {
						notify(WatchResumed)
					}
				}
			}
		}
		nc.RemoveStatusListener(statuses)
		cc.Stop()
		<-cc.Closed()
		// Leave nothing behind on the server: the current consumer, and
		// earlier ones of this watch (the library deletes a replaced
		// consumer in the background, once; right after an election that
		// can fail). Whatever remains goes after the inactive threshold.
		if n := consumerName(cons); n != "" && !nc.IsClosed() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), watchDeleteTimeout)
			for _, name := range watchConsumers(n) {
				for dctx.Err() == nil {
					err := js.DeleteConsumer(dctx, events.StreamChat, name)
					if err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
						break
					}
					select { // e.g. 503 just after an election: try again
					case <-dctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
			cancel()
		}
	}()
	return out, nil
}

// orderedConsumer creates the ordered consumer of a Watch, retrying
// transient failures (no stream leader during an election, a reconnect)
// within the client's publish budget.
func (c *Client) orderedConsumer(ctx context.Context, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	p := c.retry.withDefaults()
	deadline := time.Now().Add(p.Budget)
	backoff := 100 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, min(p.AttemptTimeout, time.Until(deadline)))
		cons, err := c.bus.JetStream().OrderedConsumer(actx, events.StreamChat, cfg)
		cancel()
		switch {
		case err == nil:
			return cons, nil
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return nil, fmt.Errorf("reading %s: the stream does not exist yet (parley's workers create it: start them, e.g. `parley dev`)", events.StreamChat)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case c.bus.Refused() != nil:
			// The server refused the reply inbox: no answer can come.
			return nil, fmt.Errorf("reading %s: %w", events.StreamChat, c.bus.Refused())
		case !bus.IsPublishRetryable(err) && !errors.Is(err, jetstream.ErrJetStreamNotEnabled):
			return nil, fmt.Errorf("reading %s: %s", events.StreamChat, Explain(err))
		}
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff)))
		backoff = min(2*backoff, 2*time.Second)
		if time.Until(deadline) <= wait {
			return nil, fmt.Errorf("reading %s: %s (gave up after %s)", events.StreamChat, Explain(err), p.Budget)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// maxDeletedSerials bounds how many consumers of one watch its end
// deletes (the current one and those it replaced).
const maxDeletedSerials = 8

// watchConsumers lists the names of the consumers an ordered consumer
// named current ("<prefix>_<serial>") has had, newest first, at most
// maxDeletedSerials.
func watchConsumers(current string) []string {
	i := strings.LastIndexByte(current, '_')
	serial, err := strconv.Atoi(current[i+1:])
	if i < 0 || err != nil {
		return []string{current}
	}
	var names []string
	for n := serial; n >= 1 && len(names) < maxDeletedSerials; n-- {
		names = append(names, current[:i+1]+strconv.Itoa(n))
	}
	return names
}

// consumerName is the server-side name of the ordered consumer's current
// consumer ("" before it has one).
func consumerName(cons jetstream.Consumer) string {
	if info := cons.CachedInfo(); info != nil {
		return info.Name
	}
	return ""
}

// Pending returns how many stored chat events there are (all threads), for
// callers that want to read to the current end and stop.
func (c *Client) Pending(ctx context.Context) (uint64, error) {
	s, err := c.bus.JetStream().Stream(ctx, events.StreamChat)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// Connect dials url with reconnects forever and a name, for CLIs and
// workers, without credentials (parley's commands connect through
// internal/natsauth with theirs). Its error never shows the user
// information (password, token) of url.
func Connect(url, name string) (*nats.Conn, error) {
	return natsauth.Connect(url, name, natsauth.Credentials{}, nil)
}

// Bus returns the underlying bus client.
func (c *Client) Bus() *bus.Client { return c.bus }

// MaxPendingScan bounds how many of a thread's events PendingQuestions
// and FoldThread read (from the thread's first stored event); past it, it reports the
// questions found so far with ErrPendingTruncated.
const MaxPendingScan = 10000

// ErrPendingTruncated is matched by the error of PendingQuestions when the
// thread has more than MaxPendingScan events: the questions returned are
// those of the first MaxPendingScan.
var ErrPendingTruncated = errors.New("thread too long to read in full")

// threadPaused is the processor's state of a paused thread
// (events.ThreadStateReply.State).
const threadPaused = "paused"

// ThreadStateTimeout bounds ThreadState's wait for the processor's
// answer.
const ThreadStateTimeout = 3 * time.Second

// ErrNotAParty is matched by the error of ThreadState when the processor
// answered that the client (as onBehalfOf, when its principal speaks for
// users) is not a party of the thread.
var ErrNotAParty = errors.New("not a party of the thread")

// ThreadState asks the processor where thread stands and which of its
// questions are open, from the thread's record (the request-reply
// events.ThreadStateSubject under the client's principal; onBehalfOf is
// the end user a trusted principal speaks for, or ""). Unlike a fold of
// the thread's events it does not miss a question whose event
// PARLEY_CHAT's limits dropped, and reads one record however long the
// thread. Errors: ErrNotAParty; a transport error (no processor answered
// within ThreadStateTimeout, nats.ErrNoResponders when none runs), which
// a caller may answer by folding the events instead.
func (c *Client) ThreadState(ctx context.Context, thread, onBehalfOf string) (*events.ThreadStateReply, error) {
	if err := events.ValidToken("thread", thread); err != nil {
		return nil, err
	}
	e, err := events.New(c.source, events.TypeThreadStateRequested, thread, events.ThreadStateRequest{OnBehalfOf: onBehalfOf})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, ThreadStateTimeout)
	defer cancel()
	reply, err := c.bus.Request(ctx, events.ThreadStateSubject(c.principal, thread), e)
	if err != nil {
		return nil, err
	}
	out, err := events.Data[events.ThreadStateReply](reply)
	if err != nil || events.TypeOf(reply) != events.TypeThreadStateAnswered {
		return nil, fmt.Errorf("thread state of %s: the processor answered %s: %v", thread, reply.Type(), err)
	}
	if out.Forbidden {
		return nil, fmt.Errorf("thread state of %s: %w", thread, ErrNotAParty)
	}
	return &out, nil
}

// PendingQuestions returns the questions a paused turn of thread still
// waits on (elicitation/create params, with their elicitation IDs in
// _meta), so a client that joins a paused thread can ask them. It asks
// the processor (ThreadState: the thread's record, the source of truth of
// what is pending, never the processor's bucket directly); when no
// processor answers it folds the thread's events in PARLEY_CHAT
// (threadstate.Fold), which misses a question whose event the stream's
// limits dropped. None when the thread is not paused.
func (c *Client) PendingQuestions(ctx context.Context, thread string) ([]schema.ElicitRequestParams, error) {
	st, err := c.ThreadState(ctx, thread, "")
	switch {
	case err == nil:
		return st.Pending, nil
	case errors.Is(err, ErrNotAParty) || ctx.Err() != nil:
		return nil, err
	}
	f, err := c.FoldThread(ctx, thread)
	if f == nil {
		return nil, err
	}
	return f.PendingParams(), err
}

// FoldThread reads thread's stored events in PARLEY_CHAT, up to the last
// one stored when it starts, and folds them (threadstate.Fold: status,
// turn, pending and settled questions). A thread with no events (or no
// stream yet) is an idle fold. Past MaxPendingScan events it returns the
// fold so far with an error matching ErrPendingTruncated.
func (c *Client) FoldThread(ctx context.Context, thread string) (*threadstate.Fold, error) {
	if err := events.ValidToken("thread", thread); err != nil {
		return nil, err
	}
	f := &threadstate.Fold{}
	s, err := c.bus.JetStream().Stream(ctx, events.StreamChat)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %s", events.StreamChat, Explain(err))
	}
	last, err := s.GetLastMsgForSubject(ctx, events.ChatThreadSubjects(thread))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the last event of %s: %s", thread, Explain(err))
	}
	wctx, cancel := context.WithCancel(ctx)
	items, err := c.Watch(wctx, WatchOptions{Thread: thread, FromStart: true})
	if err != nil {
		cancel()
		return nil, err
	}
	defer func() {
		cancel()
		for range items { // until the watch deleted its consumer
		}
	}()
	n := 0
	for it := range items {
		if it.Event != nil {
			f.Apply(it.Seq, it.Event)
		}
		if n++; it.Seq >= last.Sequence {
			break
		}
		if n >= MaxPendingScan {
			return f, fmt.Errorf("thread %s: %w (%d events read)", thread, ErrPendingTruncated, n)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return f, nil
}

// ApprovalsTimeout bounds Approvals' wait for the processor's answer.
const ApprovalsTimeout = 3 * time.Second

// Approvals lists thread's standing approvals, as the processor keeps them
// (the request-reply events.ApprovalsSubject under the client's
// principal; onBehalfOf is the end user a trusted principal speaks for,
// or ""). With revoke set it first revokes the approvals of that tool
// ("*": all of them), which only the thread's owner may; the reply then
// lists those revoked and those left. Errors: ErrNotAParty (for a revoke:
// not the owner); a transport error (no processor answered within
// ApprovalsTimeout; nats.ErrNoResponders when none runs); the processor's
// error, naming the field, for a revoke that is not a tool name or "*".
func (c *Client) Approvals(ctx context.Context, thread, onBehalfOf, revoke string) (*events.ApprovalsReply, error) {
	if err := events.ValidToken("thread", thread); err != nil {
		return nil, err
	}
	e, err := events.New(c.source, events.TypeApprovalsRequested, thread,
		events.ApprovalsRequest{OnBehalfOf: onBehalfOf, Revoke: revoke})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, ApprovalsTimeout)
	defer cancel()
	reply, err := c.bus.Request(ctx, events.ApprovalsSubject(c.principal, thread), e)
	if err != nil {
		return nil, err
	}
	out, err := events.Data[events.ApprovalsReply](reply)
	if err != nil || events.TypeOf(reply) != events.TypeApprovalsAnswered {
		return nil, fmt.Errorf("approvals of %s: the processor answered %s: %v", thread, reply.Type(), err)
	}
	if out.Forbidden {
		return nil, fmt.Errorf("approvals of %s: %w", thread, ErrNotAParty)
	}
	return &out, nil
}
