package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/parley-dev/parley/events"
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
}

// Client publishes and consumes parley events over one NATS connection.
type Client struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	logger   *slog.Logger
	storage  jetstream.StorageType
	replicas int
}

// New wraps nc. It panics if nc is nil (a programmer error).
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
	c := &Client{nc: nc, js: js, logger: opts.Logger, storage: opts.Storage, replicas: opts.Replicas}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.replicas <= 0 {
		c.replicas = 1
	}
	return c, nil
}

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

// EnsureStreams creates or updates parley's streams. It is idempotent and
// safe to call from every worker replica at start-up.
func (c *Client) EnsureStreams(ctx context.Context) error {
	dup := 2 * time.Minute
	specs := []jetstream.StreamConfig{
		{Name: events.StreamChat, Subjects: []string{events.SubjectChatAll},
			Retention: jetstream.LimitsPolicy, MaxAge: 7 * 24 * time.Hour, Duplicates: dup,
			Description: "parley chat events: what integrators publish and read"},
		{Name: events.StreamAgent, Subjects: []string{events.SubjectRunRequested, events.SubjectRunResumed, events.SubjectToolResAll},
			Retention: jetstream.WorkQueuePolicy, Duplicates: dup,
			Description: "agent work queue: run requests, resumes and tool results"},
		{Name: events.StreamRuns, Subjects: []string{events.SubjectRunCompleted, events.SubjectRunPaused, events.SubjectRunFailed},
			Retention: jetstream.WorkQueuePolicy, Duplicates: dup,
			Description: "processor work queue: agent run outcomes"},
		{Name: events.StreamTools, Subjects: []string{events.SubjectToolCallAll},
			Retention: jetstream.WorkQueuePolicy, Duplicates: dup,
			Description: "tool-executor work queue: tool calls"},
		{Name: events.StreamDeadLetter, Subjects: []string{events.SubjectDeadLetters},
			Retention: jetstream.LimitsPolicy, MaxAge: 30 * 24 * time.Hour, Duplicates: dup,
			Description: "events that could not be handled, with the reason"},
	}
	for _, cfg := range specs {
		cfg.Storage = c.storage
		cfg.Replicas = c.replicas
		if _, err := c.js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("ensuring stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// Publish stores e on subject in JetStream in binary content mode, with
// Nats-Msg-Id = e.ID() so that a republish within the stream's duplicate
// window is dropped, and with ctx's trace context in the "traceparent"
// header. It returns the PubAck (Duplicate is true for a dropped copy).
func (c *Client) Publish(ctx context.Context, subject string, e *event.Event) (*jetstream.PubAck, error) {
	ctx, span := tracer().Start(ctx, "send "+templateOf(subject), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrSystem, keyOperation.String("send"), keyOpType.String("send"),
			keyDestination.String(subject), keyMessageID.String(e.ID()), keyCEType.String(e.Type()),
			keyConversation.String(e.Subject())))
	defer span.End()
	msg, err := c.message(ctx, subject, e)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	ack, err := c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(e.ID()))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, fmt.Errorf("publishing %s to %s: %w", e.Type(), subject, err)
	}
	return ack, nil
}

// PublishCore sends e on subject over core NATS (not stored), for
// ephemeral events such as progress.
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
	ctx, span := tracer().Start(ctx, "send "+templateOf(subject), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrSystem, keyOperation.String("send"), keyOpType.String("send"),
			keyDestination.String(subject), keyMessageID.String(e.ID()), keyCEType.String(e.Type())))
	defer span.End()
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
