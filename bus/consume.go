package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/metrics"
)

// Delivery is one event handed to a Handler.
type Delivery struct {
	// Event is the decoded CloudEvent.
	Event *event.Event
	// Subject is the NATS subject the event was stored on.
	Subject string
	// Msg is the JetStream message; handlers do not settle it (the runner
	// does), but may call Msg.InProgress.
	Msg jetstream.Msg
	// NumDelivered counts deliveries of this message, from 1.
	NumDelivered uint64
	// StreamSeq is the message's stream sequence.
	StreamSeq uint64
	// Stored is when the stream stored the message (its metadata
	// timestamp, the server's clock): the same on every delivery. Zero
	// when unknown (a Delivery built by hand).
	Stored time.Time
}

// Handler handles one delivery. nil acks it; an error naks it with backoff
// until the consumer's MaxDeliver, then dead-letters it; an error wrapped
// with Permanent dead-letters it at once. An error that is NATS not
// answering (a request or publish without an answer in time, no
// responders, the connection down, JetStream 503) is not counted toward
// MaxDeliver: the message is retried with backoff up to MaxServerDeliver
// deliveries, so an outage is waited out rather than failing the message.
type Handler func(ctx context.Context, d *Delivery) error

type retryLaterError struct {
	err   error
	delay time.Duration
}

func (e *retryLaterError) Error() string { return e.err.Error() }
func (e *retryLaterError) Unwrap() error { return e.err }

// RetryLater says the message cannot be handled yet (it waits for another
// one) but is not failing: it is nakked with delay and does not count
// toward MaxDeliver. Only the server's bound (MaxServerDeliver deliveries)
// ends the waiting, with a dead letter.
func RetryLater(err error, delay time.Duration) error {
	return &retryLaterError{err: err, delay: delay}
}

// DefaultAckWait is the consumers' AckWait: how long the work a killed
// worker held waits before another replica gets it. Live handlers
// heartbeat InProgress every AckWait/3, so a long model or tool call is
// not redelivered; a shorter AckWait only shortens the wait after a crash.
const DefaultAckWait = 15 * time.Second

// pullExpiry and pullHeartbeat are Consume's pull request lifetime and
// idle heartbeat (nats.go requires heartbeat ≤ expiry/2).
const (
	pullExpiry    = 5 * time.Second
	pullHeartbeat = time.Second
)

// MaxServerDeliver is the consumers' server-side MaxDeliver: the bound on
// deliveries of one message that also covers waiting (RetryLater) and a
// worker crash-looping on a message. The runner dead-letters a message
// before the server stops delivering it.
const MaxServerDeliver = 100

// ConsumerSpec describes a durable pull consumer shared by replicas.
type ConsumerSpec struct {
	// Stream is the stream name. Required.
	Stream string
	// Durable is the consumer name, the same in every replica. Required.
	Durable string
	// FilterSubjects limits the consumer to these subjects. Optional.
	FilterSubjects []string
	// AckWait is how long a delivery may stay unacknowledged before the
	// server redelivers it; handlers heartbeat InProgress every AckWait/3.
	// Optional. Default: DefaultAckWait.
	AckWait time.Duration
	// MaxDeliver bounds deliveries of one message before it is
	// dead-lettered (NATS being unavailable to the handler does not
	// count; see Handler). Optional. Default: 5.
	MaxDeliver int
	// Backoff is the nak delay after the n-th failed delivery (the last
	// value repeats). Optional. Default: 250ms, 1s, 3s, 10s.
	Backoff []time.Duration
	// Concurrency is the number of messages handled at once by this
	// replica; it also bounds prefetch. Optional. Default: 8.
	Concurrency int
	// MaxAckPending bounds unacknowledged messages across all replicas.
	// Optional. Default: 1000.
	MaxAckPending int
	// OnDeadLetter is called after a message was dead-lettered, with the
	// reason (e.g. to tell the thread). Delivery.Event is nil when the
	// message could not be decoded. It is called once and cannot fail:
	// prefer Compensate. Optional.
	OnDeadLetter func(ctx context.Context, d *Delivery, reason error)
	// Compensate undoes or reports a dead-lettered message's effect (e.g.
	// answers the waiting run with an error result), with the reason;
	// Delivery.Event is nil when the message could not be decoded. A
	// failure is retried with backoff (CompensateRetry) while the message
	// is held; if it still fails the message is nakked rather than
	// terminated, so it comes back, is dead-lettered again (the
	// dead-letter event has a derived ID: the copy is dropped by the
	// stream's duplicate window) and compensated again, up to
	// MaxServerDeliver deliveries; an error marked Permanent is logged and
	// not retried. It runs before the message is
	// terminated, so a crash in between redelivers the message instead of
	// losing the compensation. Optional.
	Compensate func(ctx context.Context, d *Delivery, reason error) error
	// CompensateRetry bounds the retrying of Compensate within one
	// delivery. Optional. Default: 30s budget, backoff 250ms doubling to
	// 5s, each try bounded by 10s.
	CompensateRetry RetryPolicy
	// HandlerTimeout bounds one run of the handler: its context is
	// cancelled after it, and an error it then returns is handled as any
	// failure (nak with backoff, then dead letter). It bounds how long a
	// hung call (a model, a tool, a request) holds a message and a
	// concurrency slot; workers set it above their own call deadlines.
	// Optional. Default: DefaultHandlerTimeout.
	HandlerTimeout time.Duration
	// OnUndecodable handles a message that is not a valid CloudEvent
	// (Delivery.Event is nil; err is events.Decode's error, an
	// *events.AttributeError when one attribute is at fault), so the worker
	// can refuse it with the same verdict it gives any other invalid event.
	// Its result settles the message as a Handler's does (nil acks).
	// Optional. Default: the message is dead-lettered at once.
	OnUndecodable func(ctx context.Context, d *Delivery, err error) error
	// DrainTimeout bounds how long Consume waits for in-flight handlers
	// after ctx is cancelled. Optional. Default: 30s.
	DrainTimeout time.Duration
	// Raw says the stream's messages are not CloudEvents (a KV bucket's
	// entries and expiry markers): nothing is decoded, and the handler
	// reads Delivery.Msg (Delivery.Event is nil). Optional.
	Raw bool
	// HeadersOnly delivers each message's headers without its body
	// (jetstream.ConsumerConfig.HeadersOnly; fixed when the consumer is
	// created). Optional.
	HeadersOnly bool
	// DeliverNew starts a new consumer at the end of the stream instead
	// of its start (jetstream.DeliverNewPolicy; fixed when the consumer
	// is created). Optional.
	DeliverNew bool
	// Description is the consumer's description on the server. Optional.
	Description string
}

func (s *ConsumerSpec) defaults() {
	if s.AckWait <= 0 {
		s.AckWait = DefaultAckWait
	}
	if s.MaxDeliver <= 0 {
		s.MaxDeliver = 5
	}
	if len(s.Backoff) == 0 {
		s.Backoff = []time.Duration{250 * time.Millisecond, time.Second, 3 * time.Second, 10 * time.Second}
	}
	if s.Concurrency <= 0 {
		s.Concurrency = 8
	}
	if s.MaxAckPending <= 0 {
		s.MaxAckPending = 1000
	}
	if s.DrainTimeout <= 0 {
		s.DrainTimeout = 30 * time.Second
	}
	if s.HandlerTimeout <= 0 {
		s.HandlerTimeout = DefaultHandlerTimeout
	}
	if s.CompensateRetry == (RetryPolicy{}) {
		s.CompensateRetry = RetryPolicy{Timeout: 30 * time.Second, AttemptTimeout: 10 * time.Second,
			InitialBackoff: 250 * time.Millisecond, MaxBackoff: 5 * time.Second}
	}
}

// DefaultHandlerTimeout is a handler's deadline unless its ConsumerSpec
// says otherwise: 20 × DefaultAckWait (5 minutes). The heartbeat keeps a
// running handler's message from redelivery only this long.
const DefaultHandlerTimeout = 20 * DefaultAckWait

// UncleanDrainError is Consume's error when handlers were still running
// after the drain timeout: their messages were neither acked nor nakked and
// are redelivered after AckWait.
type UncleanDrainError struct {
	// Consumer is the durable consumer's name.
	Consumer string
	// Running is the number of handlers still running.
	Running int64
	// Timeout is the drain timeout that ran out.
	Timeout time.Duration
}

// Error says which consumer, how many handlers and which timeout.
func (e *UncleanDrainError) Error() string {
	return fmt.Sprintf("consumer %s: %d handler(s) still running after the drain timeout of %v; their messages will be redelivered after AckWait",
		e.Consumer, e.Running, e.Timeout)
}

// EnsureConsumer creates the durable consumer of spec, or updates it when
// it exists with a different configuration, retrying like EnsureStreams
// (backoff and jitter until the start-up policy's deadline, every try
// logged; create first, an existing consumer with the same configuration
// counts as created). A difference JetStream cannot update in place
// (deliver or ack policy) is a permanent error naming the consumer and the
// field.
func (c *Client) EnsureConsumer(ctx context.Context, spec ConsumerSpec) (jetstream.Consumer, error) {
	spec.defaults()
	cfg := jetstream.ConsumerConfig{
		Durable:        spec.Durable,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        spec.AckWait,
		MaxDeliver:     MaxServerDeliver, // the runner dead-letters failures at spec.MaxDeliver
		MaxAckPending:  spec.MaxAckPending,
		FilterSubjects: spec.FilterSubjects,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		HeadersOnly:    spec.HeadersOnly,
		Description:    spec.Description,
	}
	if spec.DeliverNew {
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	return EnsureConsumer(ctx, c.js, c.startupPolicy(ctx), spec.Stream, cfg)
}

// EnsureConsumer creates the durable consumer want on stream, or updates
// it when it exists with a different value in a field want sets, retrying
// per p (see Retry). A difference in deliver policy, ack policy or
// headers-only, which JetStream cannot update, is a permanent error naming
// the field; so is an update the server refuses.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, p RetryPolicy, stream string, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	err := Retry(ctx, fmt.Sprintf("ensuring consumer %s on %s", want.Durable, stream), p, func(ctx context.Context) error {
		var err error
		if cons, err = js.CreateConsumer(ctx, stream, want); err == nil || !errors.Is(err, jetstream.ErrConsumerExists) {
			return err
		}
		if cons, err = js.Consumer(ctx, stream, want.Durable); err != nil {
			return NotVisibleYet(err)
		}
		changes, err := ConsumerConfigChanges(stream, cons.CachedInfo().Config, want)
		if err != nil || len(changes) == 0 {
			return err
		}
		if p.Logger != nil {
			p.Logger.Info("updating consumer configuration", "stream", stream, "consumer", want.Durable, "changes", changes)
		}
		cons, err = js.UpdateConsumer(ctx, stream, want)
		return RefusedUpdate(err)
	})
	if err != nil {
		return nil, err
	}
	return cons, nil
}

// ConsumerConfigChanges lists the fields want sets that differ in have, as
// "field: have → want". It fails (an error naming the consumer and field)
// for a difference JetStream cannot update in place: deliver policy, ack
// policy, headers only.
func ConsumerConfigChanges(stream string, have, want jetstream.ConsumerConfig) ([]string, error) {
	fixed := func(field string, h, w any) error {
		return Permanent(fmt.Errorf("consumer %s on %s: %s is %v on the server but %v is configured: "+
			"JetStream cannot change it in place; delete the consumer (its replicas recreate it)",
			want.Durable, stream, field, h, w))
	}
	switch {
	case have.DeliverPolicy != want.DeliverPolicy:
		return nil, fixed("deliver_policy", have.DeliverPolicy, want.DeliverPolicy)
	case have.AckPolicy != want.AckPolicy:
		return nil, fixed("ack_policy", have.AckPolicy, want.AckPolicy)
	case have.HeadersOnly != want.HeadersOnly:
		return nil, fixed("headers_only", have.HeadersOnly, want.HeadersOnly)
	}
	var out []string
	diff := func(field string, h, w any) { out = append(out, fmt.Sprintf("%s: %v → %v", field, h, w)) }
	if want.AckWait != 0 && have.AckWait != want.AckWait {
		diff("ack_wait", have.AckWait, want.AckWait)
	}
	if want.MaxDeliver != 0 && have.MaxDeliver != want.MaxDeliver {
		diff("max_deliver", have.MaxDeliver, want.MaxDeliver)
	}
	if want.MaxAckPending != 0 && have.MaxAckPending != want.MaxAckPending {
		diff("max_ack_pending", have.MaxAckPending, want.MaxAckPending)
	}
	hf, wf := have.FilterSubjects, want.FilterSubjects
	if have.FilterSubject != "" {
		hf = append(hf, have.FilterSubject)
	}
	if want.FilterSubject != "" {
		wf = append(wf, want.FilterSubject)
	}
	if !sameSet(hf, wf) {
		diff("filter_subjects", hf, wf)
	}
	if have.Description != want.Description {
		diff("description", have.Description, want.Description)
	}
	if !slices.Equal(have.BackOff, want.BackOff) && want.BackOff != nil {
		diff("backoff", have.BackOff, want.BackOff)
	}
	return out, nil
}

// slot is one handler's place among a consumer's spec.Concurrency
// (Yield).
type slot struct {
	mu   sync.Mutex
	sem  chan struct{}
	held bool
}

type slotKey struct{}

// release gives the slot back, if held.
func (s *slot) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		<-s.sem
		s.held = false
	}
}

// take takes a slot again (waiting for one, or for ctx), if not held.
func (s *slot) take(ctx context.Context) error {
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	if held {
		return nil
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	s.held = true
	s.mu.Unlock()
	return nil
}

// Yield gives the calling handler's place among the consumer's
// ConsumerSpec.Concurrency back while it waits for something other
// messages do not depend on it for (an earlier message of the same
// thread, handled by another handler), so the consumer starts other
// messages meanwhile: one thread's backlog then waits without holding
// every slot, and the other threads' messages are not served after it.
// The returned function takes a place again (waiting until one is free,
// or ctx ends: its error) and must be called before the handler goes on
// with its work. Outside Consume (a handler called directly) both do
// nothing. The message stays unacknowledged meanwhile (MaxAckPending
// still bounds how many are).
func Yield(ctx context.Context) (reclaim func(context.Context) error) {
	s, ok := ctx.Value(slotKey{}).(*slot)
	if !ok {
		return func(context.Context) error { return nil }
	}
	s.release()
	return s.take
}

// Consume runs h for every message of the durable consumer spec until ctx
// is cancelled, then stops taking messages, waits for in-flight handlers
// (up to spec.DrainTimeout) and returns nil, or an *UncleanDrainError when
// handlers were still running at the drain timeout (each handler is bounded
// by spec.HandlerTimeout, so they end later); messages prefetched but not
// yet started are released with a nak, so another replica takes them at
// once. Handlers run on up to
// spec.Concurrency goroutines; a handler's context is not cancelled by the
// shutdown, so in-flight work finishes (or is redelivered after AckWait).
func (c *Client) Consume(ctx context.Context, spec ConsumerSpec, h Handler) error {
	spec.defaults()
	watch := metrics.WatchConsumer(ctx, c.nc, spec.Stream, spec.Durable)
	defer watch.Stop()
	cons, err := c.EnsureConsumer(ctx, spec)
	if err != nil {
		return err
	}
	sem := make(chan struct{}, spec.Concurrency)
	var wg sync.WaitGroup
	var running atomic.Int64
	base := context.WithoutCancel(ctx)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		// After ctx is cancelled no new handler starts: a buffered message
		// is released (nak) at once, so another replica takes it now
		// rather than after AckWait.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			_ = m.Nak()
			return
		}
		if ctx.Err() != nil {
			<-sem
			_ = m.Nak()
			return
		}
		running.Add(1)
		sl := &slot{sem: sem, held: true}
		wg.Go(func() {
			defer sl.release()
			defer running.Add(-1)
			c.handle(context.WithValue(base, slotKey{}, sl), &spec, m, h)
		})
	}, jetstream.PullMaxMessages(spec.Concurrency),
		// Short pulls with frequent heartbeats: a pull request lost with a
		// NATS node (or refused while a new consumer has no leader yet) is
		// noticed after 2 missed heartbeats (2 s) and sent again, instead
		// of after the defaults' 30 s, during which this replica takes no
		// work.
		jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, jetstream.ErrConsumerDeleted) {
				c.logger.Debug("consume", "consumer", spec.Durable, "error", err)
			}
		}))
	if err != nil {
		return fmt.Errorf("consuming %s: %w", spec.Durable, err)
	}
	watch.Consuming(cons)
	<-ctx.Done()
	// Drain stops pulling and hands what is buffered to the callback,
	// which releases it.
	cc.Drain()
	drain, cancel := context.WithTimeout(context.Background(), spec.DrainTimeout)
	defer cancel()
	// Once Closed, the callback will not run again, so no wg.Go races wg.Wait.
	select {
	case <-cc.Closed():
	case <-drain.Done():
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-drain.Done():
		err := &UncleanDrainError{Consumer: spec.Durable, Running: running.Load(), Timeout: spec.DrainTimeout}
		c.logger.Warn("drain timed out; unfinished messages will be redelivered", "consumer", spec.Durable,
			"running", err.Running)
		return err
	}
}

func (c *Client) handle(base context.Context, spec *ConsumerSpec, m jetstream.Msg, h Handler) {
	md, err := m.Metadata()
	if err != nil {
		c.logger.Error("message without metadata", "subject", m.Subject(), "error", err)
		_ = m.Term()
		return
	}
	d := &Delivery{Subject: m.Subject(), Msg: m, NumDelivered: md.NumDelivered, StreamSeq: md.Sequence.Stream, Stored: md.Timestamp}
	ctx := extract(base, m.Headers())
	ctx, span := tracer().Start(ctx, "process "+templateOf(m.Subject()), trace.WithSpanKind(trace.SpanKindConsumer))
	defer span.End()
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(attrSystem, attrProcess, attrProcessType, keyDestination.String(m.Subject()),
			keyConsumer.String(spec.Durable))
	}

	if spec.Raw {
		c.settle(ctx, spec, d, md, h)
		return
	}
	ev, err := events.Decode(events.Header(m.Headers()), m.Data())
	if err != nil {
		err = fmt.Errorf("undecodable event: %w", err)
		span.SetStatus(codes.Error, err.Error())
		if spec.OnUndecodable == nil {
			c.deadLetter(ctx, spec, d, err)
			return
		}
		derr := err
		c.settle(ctx, spec, d, md, func(ctx context.Context, d *Delivery) error { return spec.OnUndecodable(ctx, d, derr) })
		return
	}
	d.Event = ev
	if recording {
		span.SetAttributes(keyMessageID.String(ev.ID()), keyCEID.String(ev.ID()), keyCEType.String(ev.Type()),
			keyConversation.String(ev.Subject()))
	}
	c.settle(ctx, spec, d, md, h)
}

// settle runs h on d (heartbeating) and acks, naks or dead-letters the
// message by h's result.
func (c *Client) settle(ctx context.Context, spec *ConsumerSpec, d *Delivery, md *jetstream.MsgMetadata, h Handler) {
	m := d.Msg
	span := trace.SpanFromContext(ctx)
	var eventID, eventType, subject string
	if d.Event != nil {
		eventID, eventType, subject = d.Event.ID(), d.Event.Type(), d.Event.Subject()
	}
	stop := c.heartbeat(m, spec.AckWait)
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, spec.HandlerTimeout)
	err := h(hctx, d)
	took := time.Since(start)
	expired := hctx.Err() != nil
	if err != nil && errors.Is(hctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("handler did not finish within %v: %w", spec.HandlerTimeout, err)
	}
	cancel()
	stop()
	// NATS did not answer the handler (an election, a node restarting, a
	// lost reply): the message is not at fault, so this does not count
	// toward spec.MaxDeliver; an outage is waited out (up to
	// MaxServerDeliver deliveries) instead of failing the message.
	unavailable := err != nil && !expired && !IsPermanent(err) && isUnavailable(err) &&
		int(md.NumDelivered) < MaxServerDeliver-1
	var later *retryLaterError
	switch {
	case errors.As(err, &later) && int(md.NumDelivered) < MaxServerDeliver-1:
		c.logger.DebugContext(ctx, "not yet; retrying", "consumer", spec.Durable, "event_id", eventID,
			"delivery", md.NumDelivered, "reason", err)
		_ = m.NakWithDelay(later.delay)
		metrics.Processed(ctx, spec.Durable, eventType, metrics.OutcomeWait, md.NumDelivered, took)
	case err == nil:
		if aerr := m.Ack(); aerr != nil {
			c.logger.WarnContext(ctx, "ack failed; the message will be redelivered", "event_id", eventID, "error", aerr)
		}
		metrics.Processed(ctx, spec.Durable, eventType, metrics.OutcomeAck, md.NumDelivered, took)
	case !unavailable && (IsPermanent(err) || int(md.NumDelivered) >= spec.MaxDeliver):
		span.SetStatus(codes.Error, err.Error())
		metrics.Processed(ctx, spec.Durable, eventType, metrics.OutcomeDeadLetter, md.NumDelivered, took)
		c.deadLetter(ctx, spec, d, err)
	default:
		span.SetStatus(codes.Error, err.Error())
		delay := spec.Backoff[min(int(md.NumDelivered)-1, len(spec.Backoff)-1)]
		msg := "handler failed; retrying"
		if unavailable {
			msg = "NATS unavailable to the handler; retrying"
		}
		c.logger.WarnContext(ctx, msg, "consumer", spec.Durable, "event_id", eventID,
			"event_type", eventType, "subject", subject, "delivery", md.NumDelivered, "retry_in", delay, "error", err)
		_ = m.NakWithDelay(delay)
		metrics.Processed(ctx, spec.Durable, eventType, metrics.OutcomeRetry, md.NumDelivered, took)
	}
}

// heartbeat calls m.InProgress every ackWait/3 until stop is called, from
// a timer rather than a goroutine of its own per message: most handlers
// finish long before the first beat, and then cost one timer. After stop
// returns no beat is sent (one under way is waited for), so none follows
// the message's ack.
func (c *Client) heartbeat(m jetstream.Msg, ackWait time.Duration) (stop func()) {
	every := ackWait / 3
	hb := &heartbeat{m: m, every: every}
	hb.mu.Lock()
	hb.t = time.AfterFunc(every, hb.beat)
	hb.mu.Unlock()
	return hb.stop
}

// heartbeat is one message's InProgress timer.
type heartbeat struct {
	m     jetstream.Msg
	every time.Duration

	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

func (h *heartbeat) beat() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	_ = h.m.InProgress()
	h.t.Reset(h.every)
}

func (h *heartbeat) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	h.t.Stop()
}

// deadLetter publishes the message with the reason on
// parley.dlq.<stream>.<consumer>, terminates it, and calls OnDeadLetter.
// If the dead-letter publish fails the message is nakked instead, so it is
// never lost.
func (c *Client) deadLetter(ctx context.Context, spec *ConsumerSpec, d *Delivery, reason error) {
	m := d.Msg
	dl := events.DeadLetter{
		Reason: reason.Error(), Stream: spec.Stream, Consumer: spec.Durable, Subject: m.Subject(),
		StreamSeq: d.StreamSeq, NumDelivered: d.NumDelivered, Headers: m.Headers(), Body: m.Data(),
	}
	if len(dl.Body) > events.MaxDeadLetterBody {
		dl.Body, dl.BodyTruncated = dl.Body[:events.MaxDeadLetterBody], true
	}
	thread := ""
	if d.Event != nil {
		thread = d.Event.Subject()
	}
	e, err := events.KindDeadLettered.New("/parley/bus",
		events.DerivedID("dlq", spec.Stream, spec.Durable, fmt.Sprint(d.StreamSeq)), thread, dl)
	if err == nil {
		_, err = PublishTo(ctx, c, events.StreamDeadLetter, e, spec.Stream, spec.Durable)
	}
	if err != nil {
		delay := spec.Backoff[min(max(int(d.NumDelivered)-1, 0), len(spec.Backoff)-1)]
		c.logger.ErrorContext(ctx, "dead-lettering failed; retrying later", "consumer", spec.Durable,
			"retry_in", delay, "error", err)
		_ = m.NakWithDelay(delay)
		return
	}
	c.logger.ErrorContext(ctx, "event dead-lettered", "consumer", spec.Durable, "subject", m.Subject(),
		"stream_seq", d.StreamSeq, "deliveries", d.NumDelivered, "reason", reason.Error())
	if spec.Compensate != nil {
		p := spec.CompensateRetry
		p.Logger = c.logger
		if err := Retry(ctx, "compensating dead-lettered "+m.Subject(), p, func(ctx context.Context) error {
			return spec.Compensate(ctx, d, reason)
		}); IsPermanent(err) {
			c.logger.ErrorContext(ctx, "compensation of a dead-lettered event refused; not retried",
				"consumer", spec.Durable, "subject", m.Subject(), "stream_seq", d.StreamSeq, "error", err)
		} else if err != nil {
			delay := spec.Backoff[len(spec.Backoff)-1]
			c.logger.ErrorContext(ctx, "compensation of a dead-lettered event failed; the event comes back to be compensated again",
				"consumer", spec.Durable, "subject", m.Subject(), "stream_seq", d.StreamSeq, "retry_in", delay, "error", err)
			_ = m.NakWithDelay(delay)
			return
		}
	}
	_ = m.TermWithReason(truncate(reason.Error(), 200))
	metrics.DeadLettered(ctx, spec.Durable)
	if spec.OnDeadLetter != nil {
		spec.OnDeadLetter(ctx, d, reason)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
