package bus

import (
	"context"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/parley-dev/parley/events"
)

// ServeFunc answers one request event with a reply event. An error is sent
// back as a micro error (Nats-Service-Error-Code 400 for a request that
// could not be decoded, 500 otherwise).
type ServeFunc func(ctx context.Context, req *event.Event) (*event.Event, error)

// Endpoint describes a request-reply service endpoint (NATS micro).
type Endpoint struct {
	// Service is the micro service name, e.g. "parley-gate". Required.
	Service string
	// Version is the service's semantic version. Required.
	Version string
	// Name is the endpoint name. Required.
	Name string
	// Subject the endpoint listens on (wildcards allowed). Required.
	Subject string
	// QueueGroup load-balances replicas. Optional. Default: "q".
	QueueGroup string
	// Description for discovery ($SRV.INFO). Optional.
	Description string
	// ReplyAs, when set, names the responder: every reply (and error
	// reply) goes to <request's reply subject>.<ReplyAs>
	// (events.PolicyReplySubject), where the requester reads who answered
	// (Reply.Responder) and NATS permissions let only the principal of
	// that name publish. A subject token. Optional. Default: replies go to
	// the reply subject itself.
	ReplyAs string
}

// Serve runs fn for every request on ep.Subject until ctx is cancelled, then
// stops the service (draining its subscription) and returns nil. The
// service answers NATS micro discovery ($SRV.PING/INFO/STATS).
//
// Only requests whose reply subject is an inbox (IsInbox) are answered; any
// other is dropped unanswered and logged. The requester chooses the reply
// subject, and the responder publishes there with its own permissions: a
// reply to "$KV.parley_tools.x" or "parley.agent.run.resumed" would write
// where the requester may not (the tool-executor answering an integrator's
// entity lookup). Inboxes are the one place nobody may publish but through
// a reply (internal/natsauth), so a reply there reaches only the
// requester.
func (c *Client) Serve(ctx context.Context, ep Endpoint, fn ServeFunc) error {
	if ep.ReplyAs != "" {
		if err := events.ValidToken("endpoint reply-as name", ep.ReplyAs); err != nil {
			return err
		}
	}
	cfg := micro.Config{Name: ep.Service, Version: ep.Version, Description: ep.Description, QueueGroup: ep.QueueGroup}
	svc, err := micro.AddService(c.nc, cfg)
	if err != nil {
		return fmt.Errorf("adding service %s: %w", ep.Service, err)
	}
	base := context.WithoutCancel(ctx)
	spanName := "process " + ep.Name
	handler := micro.HandlerFunc(func(r micro.Request) {
		h := nats.Header(r.Headers())
		rctx := extract(base, h)
		rctx, span := tracer().Start(rctx, spanName, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if span.IsRecording() {
			span.SetAttributes(attrSystem, attrProcess, attrProcessType, keyDestination.String(r.Subject()))
		}
		if !IsInbox(r.Reply()) {
			span.SetStatus(codes.Error, "reply subject is not an inbox")
			c.logger.WarnContext(rctx, "request refused: its reply subject is not an inbox (_INBOX.> or _INBOX_<principal>.>)",
				"service", ep.Service, "subject", r.Subject(), "reply", truncate(r.Reply(), 200))
			return
		}
		answer := func(body []byte, hdr nats.Header) {
			if ep.ReplyAs == "" {
				_ = r.Respond(body, micro.WithHeaders(micro.Headers(hdr)))
				return
			}
			to := events.PolicyReplySubject(r.Reply(), ep.ReplyAs)
			if err := c.nc.PublishMsg(&nats.Msg{Subject: to, Header: hdr, Data: body}); err != nil {
				c.logger.WarnContext(rctx, "reply not sent", "service", ep.Service, "reply", truncate(to, 200), "error", err)
			}
		}
		fail := func(code string, err error) {
			span.SetStatus(codes.Error, err.Error())
			if ep.ReplyAs == "" {
				_ = r.Error(code, err.Error(), nil)
				return
			}
			answer(nil, nats.Header{"Nats-Service-Error-Code": {code}, "Nats-Service-Error": {err.Error()}})
		}
		req, err := events.Decode(events.Header(h), r.Data())
		if err != nil {
			fail("400", err)
			return
		}
		reply, err := fn(context.WithValue(rctx, requestSubjectKey{}, r.Subject()), req)
		if err != nil {
			fail("500", err)
			return
		}
		rh, body, err := events.Encode(reply)
		if err != nil {
			fail("500", err)
			return
		}
		answer(body, nats.Header(rh))
	})
	if err := svc.AddEndpoint(ep.Name, handler, micro.WithEndpointSubject(ep.Subject)); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("adding endpoint %s: %w", ep.Subject, err)
	}
	<-ctx.Done()
	return svc.Stop()
}

// requestSubjectKey is the context key of the subject a served request
// arrived on.
type requestSubjectKey struct{}

// RequestSubject returns the subject the request a ServeFunc answers
// arrived on ("" outside Serve): an endpoint on a wildcard subject reads
// its tokens from it (a principal's own subject, which the server's
// permissions let only that principal publish on).
func RequestSubject(ctx context.Context) string {
	s, _ := ctx.Value(requestSubjectKey{}).(string)
	return s
}

// IsInbox reports whether subject is a NATS inbox: "_INBOX.<...>" (the
// nats.go default prefix) or "_INBOX_<principal>.<...>" (parley's
// per-principal inbox prefix, natsauth.InboxPrefix).
func IsInbox(subject string) bool {
	head, rest, ok := strings.Cut(subject, ".")
	if !ok || rest == "" {
		return false
	}
	return head == "_INBOX" || (strings.HasPrefix(head, "_INBOX_") && len(head) > len("_INBOX_"))
}
