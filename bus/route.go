package bus

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
)

// Publisher stores an event on a subject: *Client, or a worker's
// in-memory fake in its tests.
type Publisher interface {
	Publish(ctx context.Context, subject string, e *event.Event) (*jetstream.PubAck, error)
}

// PublishTo publishes e on the subject of its type's route in stream, with
// values for the route's parameters (events.SubjectOf): the subject comes
// from the event's own type, so the two cannot disagree. An event whose
// type has no route in stream, or a value that is not a subject token,
// fails before anything is sent, with an error naming the rule; otherwise
// it returns p.Publish's result.
func PublishTo(ctx context.Context, p Publisher, stream string, e *event.Event, values ...string) (*jetstream.PubAck, error) {
	subject, err := events.SubjectOf(e, stream, values...)
	if err != nil {
		return nil, Permanent(fmt.Errorf("publishing %s: %w", e.ID(), err))
	}
	return p.Publish(ctx, subject, e)
}

// Router is a Handler that routes each delivery by its CloudEvents type to
// the handler registered for that type with On, which receives the event's
// data decoded once into the type's payload (the catalogue's Go type).
//
// Its verdicts, as a Handler's result (see ConsumerSpec):
//   - data that does not decode into the payload: Permanent, the error
//     naming the field and the rule ("data: decoding <type>: …"), so the
//     message is dead-lettered at once with that reason;
//   - a type no handler is registered for: Permanent *UnroutedError
//     ("unrouted type"), dead-lettered at once. A consumer whose stream can
//     hold types it does not handle should filter them out
//     (ConsumerSpec.FilterSubjects) rather than dead-letter them;
//   - otherwise the handler's own result.
//
// Register every route before the Router handles its first delivery; it is
// safe for concurrent use after that.
type Router struct {
	routes map[events.Type]Handler
}

// NewRouter returns an empty Router.
func NewRouter() *Router { return &Router{routes: map[events.Type]Handler{}} }

// TypedHandler handles one delivery whose data was decoded into the
// payload T of its catalogue type. Its result settles the message as a
// Handler's does (nil acks, an error naks, Permanent dead-letters).
type TypedHandler[T any] func(ctx context.Context, d *Delivery, data T) error

// On routes the deliveries of kind's type on r to h, with their data
// decoded into T. It panics when the type already has a handler on r, or
// kind is the zero Kind: both are programming errors found at start-up (as
// http.ServeMux does with a pattern registered twice).
func On[T any](r *Router, kind events.Kind[T], h TypedHandler[T]) {
	t := kind.Type()
	if t == "" {
		panic("bus.On: the zero events.Kind names no type")
	}
	if _, dup := r.routes[t]; dup {
		panic(fmt.Sprintf("bus.On: type %s is already routed", t))
	}
	r.routes[t] = func(ctx context.Context, d *Delivery) error {
		data, err := kind.Data(d.Event)
		if err != nil {
			return Permanent(err)
		}
		return h(ctx, d, data)
	}
}

// Handle routes d to the handler of its type (see Router for the
// verdicts). A delivery without a decoded event (Delivery.Event nil: the
// runner gives those to ConsumerSpec.OnUndecodable, not to the handler)
// is permanent too.
func (r *Router) Handle(ctx context.Context, d *Delivery) error {
	if d.Event == nil {
		return Permanent(fmt.Errorf("event: required (the delivery on %s carries no decoded event)", d.Subject))
	}
	t := events.TypeOf(d.Event)
	h, ok := r.routes[t]
	if !ok {
		return Permanent(&UnroutedError{Type: t, Subject: d.Subject, Routed: r.Types()})
	}
	return h(ctx, d)
}

// Types returns the routed types, sorted.
func (r *Router) Types() []events.Type { return slices.Sorted(maps.Keys(r.routes)) }

// UnroutedError is a Router's verdict on an event whose type has no
// handler: the type, where it came from and what the router handles. It is
// returned wrapped in Permanent, so the message is dead-lettered at once
// with Error() as the reason.
type UnroutedError struct {
	// Type is the event's CloudEvents type.
	Type events.Type
	// Subject is the NATS subject the event was stored on.
	Subject string
	// Routed are the types the router handles, sorted.
	Routed []events.Type
}

// Error says "type: <type> on <subject> is an unrouted type here (routed: …)".
func (e *UnroutedError) Error() string {
	return fmt.Sprintf("type: %q on %s is an unrouted type here (routed: %v)", e.Type, e.Subject, e.Routed)
}
