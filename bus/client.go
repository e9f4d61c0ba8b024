package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/internal/metrics"
)

// Options configures a Client.
type Options struct {
	// Logger receives the bus's logs. Optional. Default: discard.
	Logger *slog.Logger
	// Storage is the storage of streams and buckets. Optional. Default:
	// jetstream.FileStorage.
	Storage jetstream.StorageType
	// Replicas is the stream and bucket replication factor. Optional.
	// Default: 1.
	Replicas int
	// StartupTimeout bounds how long EnsureStreams and EnsureConsumer
	// retry (a context carrying WithStartupPolicy overrides it). Optional.
	// Default: DefaultStartupTimeout; negative: one try.
	StartupTimeout time.Duration
	// PublishRetry bounds how long Publish resends an event that got no
	// JetStream acknowledgement (no responders, timeout). Optional.
	// Default: DefaultPublishRetry; negative: one try.
	PublishRetry time.Duration
	// StreamMaxBytes bounds the bytes of PARLEY_CHAT; the work queues
	// (PARLEY_INPUT, PARLEY_AGENT, PARLEY_RUNS, PARLEY_TOOLS) and
	// PARLEY_DLQ get a quarter of it each (docs/LIMITS.md). JetStream
	// reserves these bytes in the server's storage (max_file_store /
	// max_memory_store) when the streams are created. Optional. Default:
	// DefaultStreamMaxBytes.
	StreamMaxBytes int64
}

// DefaultStreamMaxBytes is the default of Options.StreamMaxBytes: 1 GiB
// for PARLEY_CHAT, 256 MiB for each other stream (2.25 GiB in all).
const DefaultStreamMaxBytes = 1 << 30

// Client publishes and consumes parley events over one NATS connection.
type Client struct {
	maxBytes int64
	nc       *nats.Conn
	js       jetstream.JetStream
	logger   *slog.Logger
	storage  jetstream.StorageType
	replicas int
	startup  RetryPolicy
	publish  RetryPolicy
	// refused fails a publish the server's permissions refuse at once.
	refused *refusals
	// muxes are RequestMany's reply subscriptions, by scope.
	muxMu sync.Mutex
	muxes map[string]*replyMux
}

// New wraps nc. It panics if nc is nil (a programmer error). It sets nc's
// asynchronous error handler to one that fails a Publish the server's
// permissions refuse (PermissionError) and then calls the handler nc had:
// create a Client once per connection, after setting the handler.
func New(nc *nats.Conn, opts *Options) (*Client, error) {
	if nc == nil {
		panic("bus.New: nil *nats.Conn")
	}
	if opts == nil {
		opts = &Options{}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("opening jetstream: %w", err)
	}
	c := &Client{nc: nc, js: js, logger: opts.Logger, storage: opts.Storage, replicas: opts.Replicas,
		startup: RetryPolicy{Timeout: opts.StartupTimeout, Logger: opts.Logger},
		publish: publishPolicy(opts.PublishRetry), refused: watchRefusals(nc)}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.replicas <= 0 {
		c.replicas = 1
	}
	c.maxBytes = opts.StreamMaxBytes
	if c.maxBytes <= 0 {
		c.maxBytes = DefaultStreamMaxBytes
	}
	return c, nil
}

// Refused returns a *PermissionError once the server refused this
// connection's reply inbox (its credentials are another principal's than
// the inbox prefix names): no acknowledgement or reply can arrive, so a
// caller retrying a request stops. Nil otherwise.
func (c *Client) Refused() error { return c.refused.refusedInbox() }

// Conn returns the NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// JetStream returns the JetStream context.
func (c *Client) JetStream() jetstream.JetStream { return c.js }

// Storage returns the configured storage type for streams and buckets.
func (c *Client) Storage() jetstream.StorageType { return c.storage }

// Replicas returns the configured replication factor.
func (c *Client) Replicas() int { return c.replicas }

// Logger returns the client's logger.
func (c *Client) Logger() *slog.Logger { return c.logger }

// publishPolicy is Publish's retry policy for a budget (0: the default).
func publishPolicy(budget time.Duration) RetryPolicy {
	if budget == 0 {
		budget = DefaultPublishRetry
	}
	return RetryPolicy{Timeout: budget, AttemptTimeout: 5 * time.Second,
		InitialBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second}
}

// StartupTimeout returns the start-up retry budget (Options.StartupTimeout
// or its default).
func (c *Client) StartupTimeout() time.Duration { return c.startup.WithDefaults().Timeout }

// DuplicateWindow is the duplicate window of every parley stream
// (EnsureStreams): a message published again with the same Nats-Msg-Id
// within it is dropped, not stored a second time. (A stream restarted by
// its server forgets the IDs of the messages it no longer holds: acked
// work-queue messages.)
const DuplicateWindow = 2 * time.Minute

// ChatMaxMsgsPerSubject bounds how many events PARLEY_CHAT keeps on each
// subject: per thread and kind (parley.chat.<thread>.turn.requested,
// .message.delta, …) and per sender, thread and kind of refusal
// (parley.refused.<principal>.<thread>.*). The oldest of a subject drop
// first, so one thread's traffic evicts its own oldest events before the
// stream's byte limit reaches other threads' history (see docs/LIMITS.md).
const ChatMaxMsgsPerSubject = 1000

// InputMaxMsgsPerSubject bounds how many of one principal's inputs of one
// kind to one thread PARLEY_INPUT holds unhandled
// (parley.in.<principal>.<thread>.turn.requested, .elicitation.responded):
// the next is refused at publish (discard new per subject; the publisher
// retries within its budget, then fails "the stream is full"), so one
// thread's flood cannot put thousands of messages ahead of other threads'
// in the processor's queue. It is twice what a thread can queue
// (processor.MaxQueue): a thread's own traffic never meets it unless it
// is being refused thread_busy anyway. See docs/LIMITS.md.
const InputMaxMsgsPerSubject = 32

// EnsureStreams creates parley's streams, or updates those whose
// configuration differs from parley's. It is idempotent and safe to call
// from every worker replica at once on a fresh cluster: each stream is
// created first (an existing stream with the same configuration counts as
// created), and only a stream that exists with a different configuration is
// updated. Each stream is retried with backoff and jitter (no leader yet,
// timeouts, a lost creation race) until the start-up policy's deadline
// (StartupPolicy of ctx, else Options.StartupTimeout), every try logged. A
// difference JetStream cannot reconcile (storage, retention) fails at once
// with an error naming the stream and the field.
//
// Every stream is bounded (MaxBytes, Options.StreamMaxBytes) with a
// discard policy chosen for what it holds: the work queues discard new
// messages at the bound, so a publisher gets an error (and retries, or
// tells its caller) instead of work being lost silently; PARLEY_CHAT and
// PARLEY_DLQ, histories read by people, drop their oldest messages (and
// those past MaxAge), PARLEY_CHAT also past ChatMaxMsgsPerSubject on one
// subject. See docs/LIMITS.md.
func (c *Client) EnsureStreams(ctx context.Context) error {
	dup := DuplicateWindow
	chat, queue := c.maxBytes, max(c.maxBytes/4, 1<<20)
	specs := []jetstream.StreamConfig{
		{Name: events.StreamChat, Subjects: []string{events.SubjectChatAll, events.SubjectRefusedAll},
			Retention: jetstream.LimitsPolicy, MaxAge: 7 * 24 * time.Hour, Duplicates: dup,
			MaxBytes: chat, Discard: jetstream.DiscardOld, MaxMsgsPerSubject: ChatMaxMsgsPerSubject,
			Description: "parley chat events: what parley publishes (with the echo of accepted input) and integrators read"},
		{Name: events.StreamInput, Subjects: []string{events.SubjectInputAll},
			Retention: jetstream.WorkQueuePolicy, Duplicates: dup, MaxBytes: queue, Discard: jetstream.DiscardNew,
			MaxMsgsPerSubject: InputMaxMsgsPerSubject, DiscardNewPerSubject: true,
			Description: "processor work queue: integrator input (turn.requested, elicitation.responded) under the publisher's principal"},
		{Name: events.StreamAgent, Subjects: []string{events.SubjectRunRequested, events.SubjectRunResumed, events.SubjectToolResAll},
			Retention: jetstream.WorkQueuePolicy, Duplicates: dup, MaxBytes: queue, Discard: jetstream.DiscardNew,
			Description: "agent work queue: run requests, resumes and tool results"},
		{Name: events.StreamRuns, Subjects: []string{events.SubjectRunCompleted, events.SubjectRunPaused, events.SubjectRunFailed},
			Retention: jetstream.WorkQueuePolicy, Duplicates: dup, MaxBytes: queue, Discard: jetstream.DiscardNew,
			Description: "processor work queue: agent run outcomes"},
		{Name: events.StreamTools, Subjects: []string{events.SubjectToolCallAll},
			Retention: jetstream.WorkQueuePolicy, Duplicates: dup, MaxBytes: queue, Discard: jetstream.DiscardNew,
			Description: "tool-executor work queue: tool calls"},
		{Name: events.StreamDeadLetter, Subjects: []string{events.SubjectDeadLetters},
			Retention: jetstream.LimitsPolicy, MaxAge: 30 * 24 * time.Hour, Duplicates: dup,
			MaxBytes: queue, Discard: jetstream.DiscardOld,
			Description: "events that could not be handled, with the reason"},
	}
	p := c.startupPolicy(ctx)
	for _, cfg := range specs {
		cfg.Storage = c.storage
		cfg.Replicas = c.replicas
		if err := EnsureStream(ctx, c.js, p, cfg); err != nil {
			return err
		}
	}
	return nil
}

// AwaitStreams waits until each named stream exists (its info answers),
// retrying like EnsureStreams (the start-up policy: backoff until its
// deadline, every try logged), for a process that uses parley's streams
// but may not create them (the gateway: parley's workers create them). A
// stream still missing at the deadline is an error naming it and who
// creates it.
func (c *Client) AwaitStreams(ctx context.Context, names ...string) error {
	for _, name := range names {
		err := Retry(ctx, "waiting for stream "+name, c.startupPolicy(ctx), func(ctx context.Context) error {
			_, err := c.js.Stream(ctx, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("stream %s does not exist yet (parley's workers create it at start): %v", name, err) // retried
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// EnsureStream creates the stream want, or updates it when it exists with
// a different value in a field want sets (subjects, retention, max age,
// duplicate window, storage, replicas, description; fields set on the
// server by hand and left zero in want are kept), retrying per p (see
// Retry). A difference in storage or retention, which JetStream cannot
// change in place, is a permanent error naming the field, both values and
// the way out. An update the server refuses is permanent too.
func EnsureStream(ctx context.Context, js jetstream.JetStream, p RetryPolicy, want jetstream.StreamConfig) error {
	health.RequireStream(js, want.Name)
	return Retry(ctx, "ensuring stream "+want.Name, p, func(ctx context.Context) error {
		_, err := js.CreateStream(ctx, want)
		if err == nil || !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		s, err := js.Stream(ctx, want.Name)
		if err != nil {
			return NotVisibleYet(err)
		}
		changes, err := StreamConfigChanges(s.CachedInfo().Config, want)
		if err != nil || len(changes) == 0 {
			return err
		}
		if p.Logger != nil {
			p.Logger.Info("updating stream configuration", "stream", want.Name, "changes", changes)
		}
		_, err = js.UpdateStream(ctx, want)
		return RefusedUpdate(err)
	})
}

// startupPolicy is the start-up policy of ctx (WithStartupPolicy) or of
// the client, logging to the client's logger unless it names its own.
func (c *Client) startupPolicy(ctx context.Context) RetryPolicy {
	p := StartupPolicy(ctx, c.startup)
	if p.Logger == nil {
		p.Logger = c.logger
	}
	return p
}

// StreamConfigChanges lists the fields want sets that differ in have, as
// "field: have → want". It fails (an error naming the stream and field)
// for a difference JetStream cannot update in place: storage, retention.
func StreamConfigChanges(have, want jetstream.StreamConfig) ([]string, error) {
	if have.Storage != want.Storage {
		return nil, Permanent(fmt.Errorf("stream %s: storage is %s on the server but %s is configured (--storage): "+
			"JetStream cannot change a stream's storage; use --storage %s, or back up and delete the stream",
			want.Name, have.Storage, want.Storage, have.Storage))
	}
	if have.Retention != want.Retention {
		return nil, Permanent(fmt.Errorf("stream %s: retention is %s on the server but parley needs %s: "+
			"JetStream cannot change a stream's retention; back up and delete the stream",
			want.Name, have.Retention, want.Retention))
	}
	var out []string
	diff := func(field string, h, w any) {
		out = append(out, fmt.Sprintf("%s: %v → %v", field, h, w))
	}
	if !sameSet(have.Subjects, want.Subjects) {
		diff("subjects", have.Subjects, want.Subjects)
	}
	if have.MaxAge != want.MaxAge {
		diff("max_age", have.MaxAge, want.MaxAge)
	}
	if want.MaxBytes != 0 && have.MaxBytes != want.MaxBytes {
		diff("max_bytes", have.MaxBytes, want.MaxBytes)
	}
	if want.MaxMsgsPerSubject != 0 && have.MaxMsgsPerSubject != want.MaxMsgsPerSubject {
		diff("max_msgs_per_subject", have.MaxMsgsPerSubject, want.MaxMsgsPerSubject)
	}
	if want.DiscardNewPerSubject && !have.DiscardNewPerSubject {
		diff("discard_new_per_subject", have.DiscardNewPerSubject, want.DiscardNewPerSubject)
	}
	if have.Discard != want.Discard {
		diff("discard", have.Discard, want.Discard)
	}
	if want.Duplicates != 0 && have.Duplicates != want.Duplicates {
		diff("duplicate_window", have.Duplicates, want.Duplicates)
	}
	if max(have.Replicas, 1) != max(want.Replicas, 1) {
		diff("num_replicas", have.Replicas, want.Replicas)
	}
	if have.Description != want.Description {
		diff("description", have.Description, want.Description)
	}
	return out, nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := make(map[string]int, len(a))
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		if m[x] == 0 {
			return false
		}
		m[x]--
	}
	return true
}

// Publish stores e on subject in JetStream in binary content mode, with
// Nats-Msg-Id = MsgID(e) (e.ID(), namespaced for a principal's echoed
// input) so that a republish within the stream's duplicate window is
// dropped, and with ctx's trace context in the "traceparent"
// header. It returns the PubAck (Duplicate is true for a dropped copy).
//
// A publish that got no acknowledgement (no responders while the stream
// elects a leader, a timeout, a connection being re-established) is sent
// again, the same message with the same Nats-Msg-Id, with backoff and
// jitter, for up to Options.PublishRetry (each try bounded by 5s and by
// ctx); a copy stored before an ack was lost is then reported as a
// duplicate, never stored twice. When the budget runs out the error is a
// *RetryError wrapping the last failure: after a timeout the event may
// still have been stored (and a later publish of the same event is dropped
// as a duplicate within the stream's 2-minute window). An error the stream
// answered (e.g. a wrong expected sequence) is returned at once.
//
// A duplicate is checked against the message stored under the same ID:
// when that is another event (subject, type, ce-subject or source differ)
// the error matches ErrDuplicateMismatch, so the caller's handler fails
// and its message is retried and dead-lettered instead of the event being
// lost silently.
func (c *Client) Publish(ctx context.Context, subject string, e *event.Event) (*jetstream.PubAck, error) {
	return c.PublishWith(ctx, subject, e, PublishPolicy{})
}

// PublishPolicy bounds the retries of one PublishWith.
type PublishPolicy struct {
	// Budget is the whole time the publish may retry. Optional.
	// Default: Options.PublishRetry.
	Budget time.Duration
	// AttemptTimeout bounds one try (capped by what is left of Budget).
	// Optional. Default: 5s.
	AttemptTimeout time.Duration
	// OnRetry, if set, is called after a try that failed and will be
	// retried, with the try's number (from 1) and its error, before the
	// wait. A command uses it to say "not confirmed yet". Optional.
	OnRetry func(try int, err error)
}

// PublishWith is Publish retried under p instead of the client's
// publish policy: the one publish retry of an integrator's command.
func (c *Client) PublishWith(ctx context.Context, subject string, e *event.Event, p PublishPolicy) (*jetstream.PubAck, error) {
	ctx, span := tracer().Start(ctx, "send "+templateOf(subject), trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attrSystem, attrSend, attrSendType, keyDestination.String(subject),
			keyMessageID.String(e.ID()), keyCEType.String(e.Type()), keyConversation.String(e.Subject()))
	}
	msg, err := c.message(ctx, subject, e)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	id := MsgID(e)
	policy := c.publish
	if p.Budget != 0 {
		policy.Timeout = p.Budget
	}
	if p.AttemptTimeout > 0 {
		policy.AttemptTimeout = p.AttemptTimeout
	}
	ack, err := c.publishMsg(ctx, msg, id, policy, p.OnRetry)
	if err == nil && ack.Duplicate {
		err = c.checkDuplicate(ctx, msg, id, ack)
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, fmt.Errorf("publishing %s to %s: %w", e.Type(), subject, err)
	}
	metrics.Published(ctx, e, ack.Duplicate)
	return ack, nil
}

// publishMsg publishes msg with Nats-Msg-Id id, retrying per p while
// IsPublishRetryable; onRetry (when not nil) is told of each retry.
func (c *Client) publishMsg(ctx context.Context, msg *nats.Msg, id string, p RetryPolicy, onRetry func(int, error)) (*jetstream.PubAck, error) {
	ctx, stop := c.refused.watch(ctx, msg.Subject)
	defer stop()
	p = p.WithDefaults()
	start := time.Now()
	deadline := start.Add(p.Budget())
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, min(p.AttemptTimeout, max(time.Until(deadline), time.Millisecond)))
		ack, err := c.js.PublishMsg(actx, msg, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			if try > 1 {
				c.logger.InfoContext(ctx, "published after retries", "subject", msg.Subject, "msg_id", id,
					"tries", try, "elapsed", time.Since(start).Round(time.Millisecond).String(), "duplicate", ack.Duplicate)
			}
			return ack, nil
		}
		if pe := refused(ctx); pe != nil {
			return nil, pe
		}
		if ctx.Err() != nil || !IsPublishRetryable(err) {
			return nil, err
		}
		wait := p.Backoff(try)
		if p.Timeout < 0 || time.Now().Add(wait).After(deadline) {
			what := "no JetStream acknowledgement (the event may or may not be stored; " +
				"publishing it again is safe within the duplicate window)"
			if isStreamFull(err) {
				what = "the stream is full and refused the event (it was not stored; " +
					"publish it again when the stream's consumers have caught up)"
			}
			return nil, &RetryError{What: what, Tries: try, Elapsed: time.Since(start), Last: err}
		}
		c.logger.WarnContext(ctx, "publish not acknowledged; retrying", "subject", msg.Subject, "msg_id", id,
			"try", try, "retry_in", wait.Round(time.Millisecond).String(), "error", err)
		if onRetry != nil {
			onRetry(try, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			if pe := refused(ctx); pe != nil {
				return nil, pe
			}
			return nil, err
		case <-t.C:
		}
	}
}

// PublishAsync stores e on subject in JetStream like Publish (binary
// mode, Nats-Msg-Id = e.ID(), trace context) without waiting for the
// acknowledgement: the publish is sent in call order on the connection.
// There is no retry, not even the client's own on "no responders" (a
// stream electing its leader), so no copy is sent later behind the
// caller's back; a failure (no acknowledgement within timeout, or the
// stream's refusal) is passed to onErr (when not nil) from another
// goroutine. The returned channel is closed once the publish is settled
// (acknowledged, failed, or timeout passed): a caller that must know the
// event is stored before it publishes another, into another stream
// (whose storing does not wait for this one's), waits for it. For
// advisory events such as progress, which must not hold up a turn.
func (c *Client) PublishAsync(ctx context.Context, subject string, e *event.Event, timeout time.Duration, onErr func(error)) <-chan struct{} {
	settled := make(chan struct{})
	msg, err := c.message(ctx, subject, e)
	if err == nil {
		var f jetstream.PubAckFuture
		if f, err = c.js.PublishMsgAsync(msg, jetstream.WithMsgID(MsgID(e)), jetstream.WithRetryAttempts(0)); err == nil {
			go func() {
				defer close(settled)
				t := time.NewTimer(timeout)
				defer t.Stop()
				select {
				case <-f.Ok():
				case err := <-f.Err():
					if onErr != nil {
						onErr(fmt.Errorf("publishing %s to %s: %w", e.Type(), subject, err))
					}
				case <-t.C:
					if onErr != nil {
						onErr(fmt.Errorf("publishing %s to %s: no acknowledgement within %v", e.Type(), subject, timeout))
					}
				}
			}()
			return settled
		}
	}
	close(settled)
	if onErr != nil {
		onErr(fmt.Errorf("publishing %s to %s: %w", e.Type(), subject, err))
	}
	return settled
}

// fenceAttempts bounds PublishFenced's reads and publishes: a message
// stored on the fence between its read and its publish refuses the
// publish, which reads again.
const fenceAttempts = 3

// PublishFenced stores e on subject of stream like PublishAsync (no
// retry of a lost publish, failures to onErr, the returned channel closed
// once settled), unless a message that ends it is stored first. It reads
// the sequence of the last message of stream on fence (a subject filter,
// wildcards allowed), then the last message on each of ends (subject
// filters under fence); when ended returns true for one of these,
// nothing is published (and onErr is not called). Otherwise e is
// published with the expected last sequence on fence
// (jetstream.WithExpectLastSequenceForSubject), so a message stored on
// fence after the first read (one on ends among them) refuses it; then
// it reads again, fenceAttempts times in all. For advisory events that
// must not be stored after some other event (a run's progress after its
// turn's end, whichever replica publishes it). The whole is bounded by
// timeout.
func (c *Client) PublishFenced(ctx context.Context, stream, subject string, e *event.Event, fence string, ends []string,
	ended func(*jetstream.RawStreamMsg) bool, timeout time.Duration, onErr func(error)) <-chan struct{} {
	settled := make(chan struct{})
	fail := func(err error) {
		if onErr != nil {
			onErr(fmt.Errorf("publishing %s to %s: %w", e.Type(), subject, err))
		}
	}
	msg, err := c.message(ctx, subject, e)
	if err != nil {
		close(settled)
		fail(err)
		return settled
	}
	// last reads the last message on filter (nil when there is none).
	last := func(ctx context.Context, filter string) (*jetstream.RawStreamMsg, error) {
		m, err := c.lastMsg(ctx, stream, filter)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the last message on %s: %w", filter, err)
		}
		return m, nil
	}
	go func() {
		defer close(settled)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
	attempts:
		for range fenceAttempts {
			f, err := last(ctx, fence)
			if err != nil {
				fail(err)
				return
			}
			var seq uint64
			if f != nil {
				seq = f.Sequence
			}
			for _, s := range ends {
				m, err := last(ctx, s)
				if err != nil {
					fail(err)
					return
				}
				if m != nil && ended(m) {
					return
				}
			}
			_, err = c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(MsgID(e)), jetstream.WithRetryAttempts(0),
				jetstream.WithExpectLastSequenceForSubject(seq, fence))
			var api *jetstream.APIError
			if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == 10164) {
				continue attempts // stored on fence since the read: read again
			}
			if err != nil {
				fail(err)
			}
			return
		}
	}()
	return settled
}

// PublishCore sends e on subject over core NATS without waiting for a
// JetStream acknowledgement, for best-effort events such as progress and
// message deltas: a stream whose subjects capture subject (PARLEY_CHAT
// captures parley.chat.>) still stores it, but a lost message is not
// retried and no duplicate check applies. The error is only the local
// connection's (closed, payload too large).
func (c *Client) PublishCore(ctx context.Context, subject string, e *event.Event) error {
	msg, err := c.message(ctx, subject, e)
	if err != nil {
		return err
	}
	return c.nc.PublishMsg(msg)
}

func (c *Client) message(ctx context.Context, subject string, e *event.Event) (*nats.Msg, error) {
	h, body, err := events.Encode(e)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", e.Type(), err)
	}
	nh := nats.Header(h)
	inject(ctx, nh)
	return &nats.Msg{Subject: subject, Header: nh, Data: body}, nil
}

// ErrNoResponders is returned by Request when no service listens on the
// subject (nats.ErrNoResponders, wrapped).
var ErrNoResponders = nats.ErrNoResponders

// Request sends e on subject over core NATS request-reply and decodes the
// first reply as a CloudEvent. It fails with an error wrapping
// ErrNoResponders when nobody listens, context.DeadlineExceeded (or
// nats.ErrTimeout) when nobody answers in time, and a *ServiceError when the
// responder answered with a micro error.
func (c *Client) Request(ctx context.Context, subject string, e *event.Event) (*event.Event, error) {
	ctx, span := tracer().Start(ctx, "send "+templateOf(subject), trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attrSystem, attrSend, attrSendType, keyDestination.String(subject),
			keyMessageID.String(e.ID()), keyCEType.String(e.Type()))
	}
	msg, err := c.message(ctx, subject, e)
	if err != nil {
		return nil, err
	}
	reply, err := c.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, fmt.Errorf("requesting %s: %w", subject, err)
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		se := &ServiceError{Code: code, Description: reply.Header.Get("Nats-Service-Error")}
		span.SetStatus(codes.Error, se.Error())
		return nil, se
	}
	out, err := events.Decode(events.Header(reply.Header), reply.Data)
	if err != nil {
		return nil, fmt.Errorf("decoding reply from %s: %w", subject, err)
	}
	return out, nil
}

// ServiceError is a micro error reply (Nats-Service-Error headers).
type ServiceError struct {
	Code        string
	Description string
}

// Error formats the micro error as "service error <code>: <description>".
func (e *ServiceError) Error() string { return "service error " + e.Code + ": " + e.Description }

// IsNoResponders reports whether err means nobody listened.
func IsNoResponders(err error) bool { return errors.Is(err, nats.ErrNoResponders) }

// templateOf shortens a subject to its template for span names: identifier
// tokens are replaced (parley.chat.{thread}.turn.requested).
func templateOf(subject string) string {
	if thread, suffix, ok := events.ParseChatSubject(subject); ok && thread != "" {
		return "parley.chat.{thread}." + suffix
	}
	return subject
}

// MsgID is the Nats-Msg-Id (the stream's duplicate-detection key) of e:
// e.ID(), except for an event carrying the principal extension attribute
// (events.ExtPrincipal: the processor's echo into PARLEY_CHAT of input a
// principal published), whose ID that principal chose: "in:<principal>:<id>".
// A chosen ID then never collides with an ID parley derives
// (events.DerivedID, computable by anyone who reads the thread) nor with
// another principal's: an integrator that picks as its input's ID the ID
// of a victim's future turn.completed can no longer make the victim's
// event a "duplicate" that the stream drops.
func MsgID(e *event.Event) string {
	if p, ok := e.Extensions()[events.ExtPrincipal].(string); ok && p != "" {
		return "in:" + p + ":" + e.ID()
	}
	return e.ID()
}
