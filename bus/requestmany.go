package bus

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
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
// them; more are dropped (by nats.go as a slow consumer, logged, for a
// request without a scope). No policy set parley accepts
// (events.MaxPolicyReplies) comes near.
const replyQueue = 64

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
// it, <reply>.<responder> (Reply.Responder). With a scope they arrive
// through one subscription of the connection on
// <inbox prefix>.<scope>.>, made at the first request of that scope and
// kept, which hands each reply to its request (a request costs no
// subscription of its own; a reply arriving after its request returned
// is dropped); without one, through two subscriptions of the request's
// own, removed on return.
//
// It returns the number of replies handed to fn, and an error wrapping
// ErrNoResponders when nobody listens on subject. Gathering ending with
// ctx (its deadline, or the caller cancelling it) is not an error: the
// caller sees which replies it got, and checks its own context.
func (c *Client) RequestMany(ctx context.Context, subject, scope string, e *event.Event, max int, fn func(Reply) bool) (int, error) {
	ctx, span := tracer().Start(ctx, "send "+templateOf(subject), trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attrSystem, attrSend, attrSendType, keyDestination.String(subject),
			keyMessageID.String(e.ID()), keyCEType.String(e.Type()))
	}
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
	var ch <-chan *nats.Msg
	if scope == "" {
		msg.Reply = c.nc.NewInbox()
		own := make(chan *nats.Msg, replyQueue)
		for _, s := range []string{msg.Reply, msg.Reply + ".*"} {
			sub, err := c.nc.ChanSubscribe(s, own)
			if err != nil {
				return 0, fail(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
		}
		ch = own
	} else {
		mux, err := c.replyMux(scope)
		if err != nil {
			return 0, fail(err)
		}
		var done func()
		msg.Reply, ch, done = mux.open()
		defer done()
	}
	if err := c.nc.PublishMsg(msg); err != nil {
		return 0, fail(err)
	}
	n := 0
	if span.IsRecording() {
		defer func() { span.SetAttributes(attribute.Int("messaging.batch.message_count", n)) }()
	}
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

// replyMux returns the connection's reply subscription for scope,
// subscribing on first use.
func (c *Client) replyMux(scope string) (*replyMux, error) {
	c.muxMu.Lock()
	defer c.muxMu.Unlock()
	if m, ok := c.muxes[scope]; ok {
		return m, nil
	}
	inbox := c.nc.NewInbox() // <prefix>.<unique>
	m := &replyMux{prefix: inbox[:strings.LastIndexByte(inbox, '.')+1] + scope + ".", waiting: map[string]chan *nats.Msg{}}
	sub, err := c.nc.Subscribe(m.prefix+">", m.deliver)
	if err != nil {
		return nil, err
	}
	m.sub = sub
	if c.muxes == nil {
		c.muxes = map[string]*replyMux{}
	}
	c.muxes[scope] = m
	return m, nil
}

// replyMux is one subscription on <inbox prefix>.<scope>.> that hands
// each reply to the RequestMany waiting on its reply subject: a request
// then costs no subscription of its own (a SUB and an UNSUB for the
// server, twice), as nats.go's own request-reply does with its response
// multiplexer.
type replyMux struct {
	// prefix is <inbox prefix>.<scope>. (with the dot).
	prefix string
	sub    *nats.Subscription

	mu      sync.Mutex
	waiting map[string]chan *nats.Msg
}

// open registers a new request: its reply subject
// <inbox prefix>.<scope>.<unique>, the channel its replies arrive on (at
// most replyQueue held unread; more are dropped), and done, which
// unregisters it.
func (m *replyMux) open() (reply string, ch <-chan *nats.Msg, done func()) {
	token := nuid.Next()
	c := make(chan *nats.Msg, replyQueue)
	m.mu.Lock()
	m.waiting[token] = c
	m.mu.Unlock()
	return m.prefix + token, c, func() {
		m.mu.Lock()
		delete(m.waiting, token)
		m.mu.Unlock()
	}
}

// deliver routes msg, on <prefix><unique> or <prefix><unique>.<responder>,
// to the request waiting on <unique>; a reply for no request (one that
// has returned) or on a deeper subject is dropped.
func (m *replyMux) deliver(msg *nats.Msg) {
	rest, ok := strings.CutPrefix(msg.Subject, m.prefix)
	if !ok {
		return
	}
	token, responder, _ := strings.Cut(rest, ".")
	if strings.IndexByte(responder, '.') >= 0 {
		return
	}
	m.mu.Lock()
	c := m.waiting[token]
	m.mu.Unlock()
	if c == nil {
		return
	}
	select {
	case c <- msg:
	default: // more than replyQueue unread: dropped
	}
}
