package bus

import (
	"context"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/synadia-io/orbit.go/natsext"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/parley-dev/parley/events"
)

// Reply is one answer gathered by RequestMany: a decoded CloudEvent, or
// Err (a *ServiceError for a micro error reply, or the decoding error of
// an unreadable reply).
type Reply struct {
	Event *event.Event
	Err   error
}

// RequestMany sends e on subject over core NATS as one request and hands
// every reply, in arrival order, to fn, until fn returns false, ctx is done
// (its deadline is the gathering deadline: without one, the connection's
// request timeout applies) or max replies were handed (max <= 0: no bound).
// It is the scatter-gather form of Request (nats.go has no request-many of
// its own; this is orbit.go natsext.RequestMany, the nats.io extension):
// one inbox subscription under the connection's inbox prefix, removed on
// return.
//
// It returns the number of replies handed to fn, and an error wrapping
// ErrNoResponders when nobody listens on subject. Gathering ending at the
// deadline is not an error: the caller sees which replies it got.
func (c *Client) RequestMany(ctx context.Context, subject string, e *event.Event, max int, fn func(Reply) bool) (int, error) {
	ctx, span := tracer().Start(ctx, "send "+templateOf(subject), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrSystem, keyOperation.String("send"), keyOpType.String("send"),
			keyDestination.String(subject), keyMessageID.String(e.ID()), keyCEType.String(e.Type())))
	defer span.End()
	msg, err := c.message(ctx, subject, e)
	if err != nil {
		return 0, err
	}
	var opts []natsext.RequestManyOpt
	if max > 0 {
		opts = append(opts, natsext.RequestManyMaxMessages(max))
	}
	replies, err := natsext.RequestManyMsg(ctx, c.nc, msg, opts...)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return 0, fmt.Errorf("requesting %s: %w", subject, err)
	}
	n := 0
	for m, err := range replies {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			return n, fmt.Errorf("requesting %s: %w", subject, err)
		}
		n++
		var r Reply
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			r.Err = &ServiceError{Code: code, Description: m.Header.Get("Nats-Service-Error")}
		} else if r.Event, r.Err = events.Decode(events.Header(m.Header), m.Data); r.Err != nil {
			r.Err = fmt.Errorf("decoding reply from %s: %w", subject, r.Err)
		}
		if !fn(r) {
			break
		}
	}
	span.SetAttributes(attribute.Int("messaging.batch.message_count", n))
	return n, nil
}
