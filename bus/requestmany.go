package bus

import (
	"context"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/parley-dev/parley/events"
)

// Reply is one answer gathered by RequestMany: a decoded CloudEvent, or
// Err (a *ServiceError for a micro error reply, or the decoding error of
// an unreadable reply), and the responder the subject it arrived on names.
type Reply struct {
	Event *event.Event
	Err   error
	// Responder is the last token of the subject the reply arrived on when
	// it was <reply>.<responder> (a responder naming itself, as policy
	// services do: events.PolicyReplySubject), and "" for a reply on the
	// request's reply subject itself. Under parley's NATS permissions only
	// the principal of that name may publish there, so it says who sent
	// the reply; the reply's data does not.
	Responder string
}

// replyQueue bounds the replies of one RequestMany held before fn reads
// them; more are dropped by nats.go as a slow consumer (logged). No policy
// set parley accepts (events.MaxPolicyReplies) comes near.
const replyQueue = 256

// RequestMany sends e on subject over core NATS as one request and hands
// every reply, in arrival order, to fn, until fn returns false, ctx is done
// (its deadline is the gathering deadline: without one, the connection's
// request timeout applies) or max replies were handed (max <= 0: no bound).
// It is the scatter-gather form of Request (nats.go has no request-many of
// its own).
//
// The reply subject is <inbox prefix>.<scope>.<unique> (scope "":
// <inbox prefix>.<unique>), under the connection's inbox prefix, so the
// auth layer's _INBOX_<principal>.> rule holds and permissions can name
// the replies of one kind of request (events.PreExecuteReplyScope).
// Replies are taken on the reply subject itself and on any one token below
// it, <reply>.<responder> (Reply.Responder); both subscriptions are
// removed on return.
//
// It returns the number of replies handed to fn, and an error wrapping
// ErrNoResponders when nobody listens on subject. Gathering ending with
// ctx (its deadline, or the caller cancelling it) is not an error: the
// caller sees which replies it got, and checks its own context.
func (c *Client) RequestMany(ctx context.Context, subject, scope string, e *event.Event, max int, fn func(Reply) bool) (int, error) {
	ctx, span := tracer().Start(ctx, "send "+templateOf(subject), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrSystem, keyOperation.String("send"), keyOpType.String("send"),
			keyDestination.String(subject), keyMessageID.String(e.ID()), keyCEType.String(e.Type())))
	defer span.End()
	fail := func(err error) error {
		span.SetStatus(codes.Error, err.Error())
		return fmt.Errorf("requesting %s: %w", subject, err)
	}
	msg, err := c.message(ctx, subject, e)
	if err != nil {
		return 0, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.nc.Opts.Timeout)
		defer cancel()
	}
	msg.Reply = c.replySubject(scope)
	ch := make(chan *nats.Msg, replyQueue)
	for _, s := range []string{msg.Reply, msg.Reply + ".*"} {
		sub, err := c.nc.ChanSubscribe(s, ch)
		if err != nil {
			return 0, fail(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	if err := c.nc.PublishMsg(msg); err != nil {
		return 0, fail(err)
	}
	n := 0
	defer func() { span.SetAttributes(attribute.Int("messaging.batch.message_count", n)) }()
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return n, nil
		case m = <-ch:
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			return n, fail(ErrNoResponders)
		}
		n++
		r := Reply{Responder: strings.TrimPrefix(m.Subject, msg.Reply+".")}
		if m.Subject == msg.Reply {
			r.Responder = ""
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			r.Err = &ServiceError{Code: code, Description: m.Header.Get("Nats-Service-Error")}
		} else if r.Event, r.Err = events.Decode(events.Header(m.Header), m.Data); r.Err != nil {
			r.Err = fmt.Errorf("decoding reply from %s: %w", subject, r.Err)
		}
		if !fn(r) || (max > 0 && n >= max) {
			return n, nil
		}
	}
}

// replySubject returns a new reply subject under the connection's inbox
// prefix: <prefix>.<scope>.<unique>, or <prefix>.<unique> when scope is "".
func (c *Client) replySubject(scope string) string {
	inbox := c.nc.NewInbox() // <prefix>.<unique>
	if scope == "" {
		return inbox
	}
	i := strings.LastIndexByte(inbox, '.')
	return inbox[:i] + "." + scope + inbox[i:]
}
