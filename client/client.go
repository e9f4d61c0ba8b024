// Package client is what an integrator does, in Go: publish turn.requested
// and elicitation.responded events for a thread, and read the thread's
// events from the PARLEY_CHAT stream. Any language can do the same by
// publishing CloudEvents on the subjects in docs/events.md.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/bus"
)

// Client publishes and reads chat events.
type Client struct {
	bus    *bus.Client
	source string
}

// New wraps a bus client; source is the CloudEvents source of the events
// it publishes ("" means /parley/cli).
func New(b *bus.Client, source string) *Client {
	if source == "" {
		source = events.SourceCLI
	}
	return &Client{bus: b, source: source}
}

// Send publishes turn.requested with a user message on thread and returns
// the event.
func (c *Client) Send(ctx context.Context, thread, agent, text, user string) (*event.Event, error) {
	if err := events.ValidToken("thread", thread); err != nil {
		return nil, err
	}
	if agent != "" {
		if err := events.ValidToken("agent", agent); err != nil {
			return nil, err
		}
	}
	e, err := events.New(c.source, events.TypeTurnRequested, thread, events.TurnRequested{
		Agent: agent, User: user, Message: schema.ChatMessage{Role: schema.RoleUser, Text: text}})
	if err != nil {
		return nil, err
	}
	if _, err := c.bus.Publish(ctx, events.ChatSubject(thread, events.ChatTurnRequested), e); err != nil {
		return nil, err
	}
	return e, nil
}

// Answer publishes elicitation.responded for an elicitation of thread.
func (c *Client) Answer(ctx context.Context, thread, elicitationID string, result schema.ElicitResult, answeredBy string) (*event.Event, error) {
	if err := events.ValidToken("thread", thread); err != nil {
		return nil, err
	}
	e, err := events.New(c.source, events.TypeElicitationResponded, thread, events.ElicitationResponded{
		ElicitationID: elicitationID, AnsweredBy: answeredBy, Action: result.Action, Content: result.Content, Meta: result.Meta})
	if err != nil {
		return nil, err
	}
	if _, err := c.bus.Publish(ctx, events.ChatSubject(thread, events.ChatElicitationResponded), e); err != nil {
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
}

// Watch reads chat events in stream order until ctx is cancelled, through
// an ordered consumer (no server-side state to clean up). The channel is
// closed when Watch stops.
func (c *Client) Watch(ctx context.Context, opts WatchOptions) (<-chan Item, error) {
	filter := events.SubjectChatAll
	if opts.Thread != "" {
		if err := events.ValidToken("thread", opts.Thread); err != nil {
			return nil, err
		}
		filter = events.ChatThreadSubjects(opts.Thread)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverNewPolicy}
	if opts.FromStart {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	cons, err := c.bus.JetStream().OrderedConsumer(ctx, events.StreamChat, cfg)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", events.StreamChat, err)
	}
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
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", events.StreamChat, err)
	}
	go func() {
		<-ctx.Done()
		cc.Stop()
		<-cc.Closed()
		close(out)
	}()
	return out, nil
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

// Connect dials url with reconnects forever and a name, for CLIs and workers.
func Connect(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	return nc, nil
}

// Bus returns the underlying bus client.
func (c *Client) Bus() *bus.Client { return c.bus }

// PendingQuestions returns the questions a paused turn of thread still
// waits on (elicitation/create params, with their elicitation IDs in
// _meta), read from the paused-turns bucket, so a client that joins a
// paused thread can ask them. It returns none when the thread is not
// paused or its record is of a format this client does not read.
func (c *Client) PendingQuestions(ctx context.Context, thread string) ([]schema.ElicitRequestParams, error) {
	if err := events.ValidToken("thread", thread); err != nil {
		return nil, err
	}
	kv, err := c.bus.JetStream().KeyValue(ctx, kvstate.BucketPaused)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", kvstate.BucketPaused, err)
	}
	entry, err := kv.Get(ctx, thread)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the paused turn of %s: %w", thread, err)
	}
	var rec kvstate.PausedTurn
	if json.Unmarshal(entry.Value(), &rec) != nil || rec.Format != kvstate.PausedFormat {
		return nil, nil
	}
	var out []schema.ElicitRequestParams
	for _, el := range rec.Elicitations {
		if el.Status == kvstate.StatusPending {
			out = append(out, el.Request)
		}
	}
	return out, nil
}
