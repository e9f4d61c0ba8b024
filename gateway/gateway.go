package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/schema"
)

// SourceGateway is the CloudEvents source of the events the gateway
// publishes.
const SourceGateway = "/parley/gateway"

// Options configure a Gateway. Zero values mean the defaults.
type Options struct {
	// Logger. Optional. Default: discard.
	Logger *slog.Logger
	// MaxBodyBytes bounds a request body; a larger one is answered 413.
	// Optional. Default: 512 KiB.
	MaxBodyBytes int64
	// RatePerSecond and RateBurst bound each user's requests (a token
	// bucket per user); beyond them the answer is 429 with Retry-After.
	// Optional. Default: 5 per second, burst 20.
	RatePerSecond float64
	RateBurst     int
	// MaxUsers bounds the per-user rate-limit table (see limiters).
	// Optional. Default: 10000.
	MaxUsers int
	// MaxStreamsPerUser bounds a user's concurrent event streams; one more
	// is answered 429. Optional. Default: 8.
	MaxStreamsPerUser int
	// AllowedOrigins are the origins allowed by CORS ("*" allows any).
	// Optional. Default: none (same-origin only).
	AllowedOrigins []string
	// VerdictWait is how long POST .../elicitations/{id}, and POST
	// .../messages on a thread whose claim is not yet confirmed, wait for
	// the processor's verdict before answering 202 "pending". Optional.
	// Default: 1.5 s.
	VerdictWait time.Duration
	// Heartbeat is the interval of SSE comment lines on an idle stream.
	// Optional. Default: 15 s.
	Heartbeat time.Duration
	// ShutdownTimeout bounds Serve's graceful stop. Optional. Default: 10 s.
	ShutdownTimeout time.Duration
	// AccessRecheck is how often an open event stream reads its thread's
	// record again to check that its user may still read the thread. A
	// revoked share ends the stream at once through the gateway's watch of
	// the records; this check covers a watch that is down. Optional.
	// Default: 1 min.
	AccessRecheck time.Duration

	// ThreadTTL is the processor's Options.ThreadTTL (how long it keeps an
	// untouched thread's record, and with it the thread's owner). A
	// confirmed claim ends when the thread's events show a gap of
	// ThreadTTL less a margin (a tenth, at most a day), or an owner the
	// claim does not know (epoch.go). Set it to the processor's value, or
	// lower; a higher value lets a user read a thread that someone else
	// took over after the processor forgot it. Optional. Default:
	// DefaultThreadTTL (the processor's default).
	ThreadTTL time.Duration

	// noAccessWatch turns the watch off (tests of the periodic check).
	noAccessWatch bool
	// DisableWeb turns off the web chat at "/". Optional. Default: served.
	DisableWeb bool
	// Principal is the NATS principal (user) the gateway's connection is
	// authenticated as: it publishes under parley.in.<Principal>.>, with
	// the authenticated end user (the token's subject) as the claim the
	// processor honours only from principals it trusts to speak for users
	// (--trusted-principals). Optional. Default: events.PrincipalGateway.
	Principal string
	// TokenSource says where a person gets a token, in the 401 problem
	// of a request whose token is missing or not accepted (e.g. "parley
	// dev prints it and keeps it in .parley/gateway-token"). Optional.
	// Default: DefaultTokenSource.
	TokenSource string
}

// DefaultTokenSource is Options.TokenSource's default.
const DefaultTokenSource = "tokens come from whoever runs this gateway (its token file or identity provider)"

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 512 << 10
	}
	if c.RatePerSecond == 0 {
		c.RatePerSecond = 5
	}
	if c.RateBurst == 0 {
		c.RateBurst = 20
	}
	if c.MaxUsers == 0 {
		c.MaxUsers = 10000
	}
	if c.MaxStreamsPerUser == 0 {
		c.MaxStreamsPerUser = 8
	}
	if c.VerdictWait == 0 {
		c.VerdictWait = 1500 * time.Millisecond
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.AccessRecheck == 0 {
		c.AccessRecheck = time.Minute
	}
	if c.Principal == "" {
		c.Principal = events.PrincipalGateway
	}
	if c.ThreadTTL == 0 {
		c.ThreadTTL = DefaultThreadTTL
	}
	if c.TokenSource == "" {
		c.TokenSource = DefaultTokenSource
	}
	return c
}

func (o Options) validate() error {
	var errs []error
	if o.MaxBodyBytes < 0 {
		errs = append(errs, errors.New("max body bytes: must be positive"))
	}
	if o.RatePerSecond < 0 || o.RateBurst < 0 {
		errs = append(errs, errors.New("rate limit: must be positive"))
	}
	if o.MaxUsers < 0 || o.MaxStreamsPerUser < 0 {
		errs = append(errs, errors.New("max users / streams: must be positive"))
	}
	if o.ThreadTTL < 0 {
		errs = append(errs, errors.New("thread TTL: must be positive"))
	}
	if o.VerdictWait < 0 || o.Heartbeat < 0 || o.ShutdownTimeout < 0 || o.AccessRecheck < 0 {
		errs = append(errs, errors.New("durations: must be positive"))
	}
	if err := events.ValidToken("principal", o.Principal); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Route is one API route: an HTTP method and a path pattern in the
// net/http ServeMux (and OpenAPI) syntax.
type Route struct {
	Method, Path string
}

// Routes are the API routes the gateway serves, documented in
// docs/openapi.yaml.
var Routes = []Route{
	{http.MethodGet, "/v1/threads"},
	{http.MethodGet, "/v1/threads/{thread}"},
	{http.MethodGet, "/v1/threads/{thread}/events"},
	{http.MethodPost, "/v1/threads/{thread}/messages"},
	{http.MethodPost, "/v1/threads/{thread}/elicitations/{id}"},
	{http.MethodPut, "/v1/threads/{thread}/shares/{user}"},
	{http.MethodDelete, "/v1/threads/{thread}/shares/{user}"},
	RouteLookupEntities,
	RouteAISDKChat,
	RouteAISDKStream,
	RouteAGUI,
	RouteAGUICapabilities,
	RouteListApprovals,
	RouteRevokeApprovals,
}

// Health routes: GET /livez and GET /readyz (internal/health's probes, as
// every worker serves them with --health-listen), served without
// authentication on the gateway's own address. Live: the NATS connection
// is not closed for good. Ready: it is connected, and parley's streams and
// the gateway's bucket BucketThreads exist. 200 or 503 with a JSON report
// of every check.
var HealthRoutes = []Route{{http.MethodGet, "/livez"}, {http.MethodGet, "/readyz"}}

// PublicRoutes are the routes served without authentication (besides the
// web chat's static files at "/"): the health probes and the event data
// schemas. Documented in docs/openapi.yaml with Routes.
var PublicRoutes = append(slices.Clone(HealthRoutes), Route{http.MethodGet, SchemaPath})

// Gateway serves the HTTP API and the web chat.
type Gateway struct {
	bus     *bus.Client
	health  *health.State
	auth    Authenticator
	opts    Options
	log     *slog.Logger
	owners  *ownership
	limits  *limiters
	handler http.Handler

	access    *accessWatch
	stopWatch context.CancelFunc
	closing   chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	streams map[string]int
}

// New returns a gateway publishing and reading through b and
// authenticating with auth. It creates (or opens) BucketThreads and waits
// (bus.AwaitStreams, the start-up policy of ctx) until PARLEY_CHAT exists:
// parley's workers create the streams, the gateway may not. It fails on
// invalid options, when JetStream cannot be reached, or when the stream
// does not appear before the start-up deadline.
func New(ctx context.Context, b *bus.Client, auth Authenticator, opts *Options) (*Gateway, error) {
	if b == nil || auth == nil {
		panic("gateway.New: nil bus or authenticator")
	}
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	// The workers create parley's streams; the gateway, the process
	// facing the internet, may not change them (docs/SECURITY.md), so it
	// waits for the one it reads.
	if err := b.AwaitStreams(ctx, events.StreamChat); err != nil {
		return nil, err
	}
	own, err := openOwnership(ctx, b.JetStream(), b.Storage(), b.Replicas())
	if err != nil {
		return nil, err
	}
	hs := health.New(0, "gateway")
	hs.AddConn(b.Conn())
	// Streams and bucket are open: the gateway consumes nothing durable.
	hs.Started("gateway", b.Conn(), false)
	own.verdicts = &verdicts{js: b.JetStream(), principal: o.Principal}
	own.idle = epochIdle(o.ThreadTTL)
	g := &Gateway{bus: b, health: hs, auth: auth, opts: o, log: o.Logger, owners: own,
		limits: newLimiters(o.RatePerSecond, o.RateBurst, o.MaxUsers),
		access: newAccessWatch(), closing: make(chan struct{}), streams: map[string]int{}}
	own.verdicts.follow = g.follow
	wctx, stop := context.WithCancel(ctx)
	g.stopWatch = stop
	if !o.noAccessWatch {
		go g.watchAccess(wctx)
	}
	mux := http.NewServeMux()
	handlers := map[Route]func(http.ResponseWriter, *http.Request, string){
		Routes[0]: g.listThreads,
		Routes[1]: g.getThread,
		Routes[2]: g.streamEvents,
		Routes[3]: g.postMessage,
		Routes[4]: g.postAnswer,
		Routes[5]: g.putShare,
		Routes[6]: g.deleteShare,

		RouteLookupEntities: g.lookupEntities,
		RouteAISDKChat:      g.postAISDKChat,
		RouteAISDKStream:    g.getAISDKStream,

		RouteAGUI:             g.postAGUI,
		RouteAGUICapabilities: g.getAGUICapabilities,
		RouteListApprovals:    g.getApprovals,
		RouteRevokeApprovals:  g.deleteApprovals,
	}
	for _, rt := range Routes {
		mux.Handle(rt.Method+" "+rt.Path, g.authed(handlers[rt]))
	}
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, Problem{Status: http.StatusNotFound, Reason: ReasonNotFound, Detail: "no such route"})
	})
	mux.Handle("GET "+SchemaPath, schemaHandler())
	for _, rt := range HealthRoutes {
		mux.Handle(rt.Method+" "+rt.Path, hs.Handler())
	}
	if !o.DisableWeb {
		mux.Handle("/", webHandler())
	}
	g.handler = g.cors(mux)
	return g, nil
}

// Health returns the gateway's health state (GET /livez and /readyz on
// its handler), for a caller that also serves it on another address.
func (g *Gateway) Health() *health.State { return g.health }

// Handler returns the gateway's HTTP handler.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Close ends every open event stream (each handler returns, so its
// response ends cleanly and the client reconnects with Last-Event-ID) and
// the watch of the thread records (which also ends with New's ctx).
// Serve calls it when it shuts down.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		close(g.closing)
		g.stopWatch()
	})
}

// Serve serves on ln until ctx is cancelled, then stops gracefully: it
// ends the event streams, lets requests in flight finish within
// ShutdownTimeout, and returns nil on a clean stop.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: g.handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	srv.RegisterOnShutdown(g.Close)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opts.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		// Requests still running after the budget: cut them off.
		_ = srv.Close()
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// cors answers preflight requests and adds CORS headers for allowed
// origins.
func (g *Gateway) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		allowed := origin != "" && (slices.Contains(g.opts.AllowedOrigins, "*") || slices.Contains(g.opts.AllowedOrigins, origin))
		if allowed {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Expose-Headers", "Retry-After, Location")
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			if allowed {
				h := w.Header()
				h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID")
				h.Set("Access-Control-Max-Age", "600")
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authed authenticates the bearer token and applies the user's rate
// limit before calling h with the user (the token's subject).
func (g *Gateway) authed(h func(http.ResponseWriter, *http.Request, string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := bearer(r)
		var user string
		var err error
		if ok {
			user, err = g.auth.Authenticate(r.Context(), tok)
		}
		if !ok || err != nil {
			// The web chat shows the detail on its login card: it says
			// what is wrong and where a token comes from.
			detail := "an Authorization: Bearer token is required; " + g.opts.TokenSource
			if err != nil {
				detail = "token not accepted (unknown, expired or from another gateway); " + g.opts.TokenSource
				g.log.InfoContext(r.Context(), "token refused", "error", err)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="parley"`)
			writeProblem(w, Problem{Status: http.StatusUnauthorized, Reason: ReasonUnauthenticated, Detail: detail})
			return
		}
		if ok, wait := g.limits.allow(user, time.Now()); !ok {
			secs := int((wait + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
			writeProblem(w, Problem{Status: http.StatusTooManyRequests, Reason: ReasonRateLimited,
				Detail: "too many requests; retry after the Retry-After seconds"})
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, g.opts.MaxBodyBytes)
		}
		h(w, r, user)
	})
}

// threadParam validates the {thread} path value; it writes the problem
// and returns false when it is not a valid thread ID.
func threadParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	thread := r.PathValue("thread")
	if err := events.ValidToken("thread", thread); err != nil {
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest, Detail: err.Error(),
			Errors: []schema.Violation{{Path: "thread", Rule: err.Error()}}})
		return "", false
	}
	return thread, true
}

// decodeBody reads a JSON body into v, refusing unknown fields and
// trailing data; it writes the problem (400 or 413) and returns false on
// failure.
// A body that repeats a member name in an object, or holds a string that
// is not valid Unicode (schema.CheckJSON), is refused naming the member,
// as the processor refuses such input on NATS; so is a member the body's
// shape does not define (events.RuleUnknownMember), including one that
// names a member only when case is ignored (exactMembers).
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	_, ok := decodeBodyRaw(w, r, v)
	return ok
}

// decodeBodyRaw is decodeBody that also returns the body as received,
// for a member whose exact JSON matters (numbers as written).
func decodeBodyRaw(w http.ResponseWriter, r *http.Request, v any) ([]byte, bool) {
	body, err := io.ReadAll(r.Body)
	if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
		writeProblem(w, Problem{Status: http.StatusRequestEntityTooLarge, Reason: ReasonTooLarge,
			Detail: fmt.Sprintf("request body is over %d bytes", mbe.Limit)})
		return nil, false
	}
	if err == nil {
		if err = schema.CheckJSON(body); err != nil {
			writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest, Detail: "body: " + err.Error(),
				Errors: schema.Violations(err)})
			return nil, false
		}
		if vs := exactMembers(body, reflect.TypeOf(v)); len(vs) > 0 {
			writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest,
				Detail: "body: " + vs[0].Path + ": " + vs[0].Rule + " (member names are case-sensitive)", Errors: vs})
			return nil, false
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
		if err == nil && dec.More() {
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err == nil {
		return body, true
	}
	var vs []schema.Violation
	if name, ok := unknownField(err); ok {
		vs = []schema.Violation{{Path: name, Rule: events.RuleUnknownMember}}
	}
	writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest, Detail: "body: " + err.Error(), Errors: vs})
	return nil, false
}

// unknownField returns the member named by encoding/json's error for a
// member DisallowUnknownFields refused (`json: unknown field "x"`).
func unknownField(err error) (string, bool) {
	rest, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	name, uerr := strconv.Unquote(rest)
	return name, uerr == nil
}

func (g *Gateway) notFound(w http.ResponseWriter) {
	writeProblem(w, Problem{Status: http.StatusNotFound, Reason: ReasonNotFound, Detail: "no such thread"})
}

func (g *Gateway) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	g.log.ErrorContext(r.Context(), "gateway request failed", "error", err, "path", r.URL.Path)
	writeProblem(w, Problem{Status: http.StatusServiceUnavailable, Reason: ReasonUnavailable,
		Detail: "the message bus is not reachable; retry later"})
}

// MessageRequest is the body of POST /v1/threads/{thread}/messages.
type MessageRequest struct {
	// Text is the message (required, at most events.MaxMessageText bytes).
	Text string `json:"text"`
	// Content are optional MCP content blocks.
	Content schema.ContentList `json:"content,omitzero"`
	// Agent names the agent; optional.
	Agent string `json:"agent,omitempty"`
	// Meta is the message's _meta; optional.
	Meta schema.Meta `json:"_meta,omitzero"`
}

// Accepted is the 202 body of the POST routes.
type Accepted struct {
	// EventID is the ID of the event published (turn.requested or
	// elicitation.responded).
	EventID string `json:"eventId"`
	Thread  string `json:"thread"`
	// Status is "published" for messages to a thread the processor
	// already gave the user; for the messages of a claim not yet confirmed
	// (the first) and for answers "accepted" (the processor took it) or
	// "pending": no verdict arrived within the verdict wait (the outcome
	// follows on the event stream).
	Status string `json:"status"`
}

func (g *Gateway) postMessage(w http.ResponseWriter, r *http.Request, user string) {
	thread, ok := threadParam(w, r)
	if !ok {
		return
	}
	var req MessageRequest
	if !decodeBody(w, r, &req) {
		return
	}
	id, err := uuid.NewV7()
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	e, c, pending, ok := g.publishMessage(w, r, thread, user, req, id.String())
	if !ok {
		return
	}
	if pending {
		g.answerMessage(w, r, thread, user, c, e.ID())
		return
	}
	w.Header().Set("Location", "/v1/threads/"+thread+"/events")
	writeJSON(w, http.StatusAccepted, Accepted{EventID: e.ID(), Thread: thread, Status: "published"})
}

// publishMessage validates req (text, size, agent, content blocks) and
// publishes it as user's turn.requested on thread under the event ID
// eventID, claiming the thread when it is unclaimed, exactly as POST
// /v1/threads/{thread}/messages does. ok false: it has written the
// problem (400, 404, 413, 503) and published nothing. pending: the claim
// c is not yet confirmed (the processor's verdict on the message decides,
// see answerMessage).
func (g *Gateway) publishMessage(w http.ResponseWriter, r *http.Request, thread, user string, req MessageRequest, eventID string) (e *event.Event, c rec, pending, ok bool) {
	sent, ok := g.sendMessage(w, r, thread, user, req, eventID)
	if !ok {
		return nil, rec{}, false, false
	}
	return sent.event, sent.claim, sent.pending, true
}

// sentMessage is what sendMessage published.
type sentMessage struct {
	// event is the turn.requested event, eventID its ID.
	event   *event.Event
	eventID string
	// claim is the user's claim of the thread, pending when the
	// processor's verdict on it is not yet known (the thread's first
	// message).
	claim   rec
	pending bool
	// duplicate is set when PARLEY_INPUT's duplicate window dropped the
	// publish: an event with the same ID was published before.
	duplicate bool
}

// sendMessage is publishMessage, also saying whether the publish was a
// duplicate (POST /v1/ag-ui derives a message's event ID from the
// message, so a retried run publishes it again).
func (g *Gateway) sendMessage(w http.ResponseWriter, r *http.Request, thread, user string, req MessageRequest, eventID string) (sentMessage, bool) {
	msg := schema.ChatMessage{Role: schema.RoleUser, Text: req.Text, Content: req.Content, Meta: req.Meta}
	var vs []schema.Violation
	if strings.TrimSpace(req.Text) == "" {
		vs = append(vs, schema.Violation{Path: "text", Rule: "required"})
	}
	if len(req.Text) > events.MaxMessageText {
		writeProblem(w, Problem{Status: http.StatusRequestEntityTooLarge, Reason: events.RejectMessageTooLarge,
			Detail: fmt.Sprintf("text is %d bytes; at most %d", len(req.Text), events.MaxMessageText)})
		return sentMessage{}, false
	}
	if req.Agent != "" {
		if err := events.ValidToken("agent", req.Agent); err != nil {
			vs = append(vs, schema.Violation{Path: "agent", Rule: err.Error()})
		}
	}
	if err := msg.Validate(); err != nil {
		var ve *schema.ValidationError
		if errors.As(err, &ve) {
			vs = append(vs, ve.Violations...)
		} else {
			vs = append(vs, schema.Violation{Path: "", Rule: err.Error()})
		}
	}
	// Context references: their bounds here, their resolution as the
	// user by the processor (turn.rejected reference_unavailable).
	_, rvs := events.MessageReferences("", msg)
	vs = append(vs, rvs...)
	if len(vs) > 0 {
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest, Detail: "the message is not valid", Errors: vs})
		return sentMessage{}, false
	}
	// The processor keeps its own record of who may use the thread and
	// takes grants only from the owner's messages: each of them carries
	// the thread's current shares (see putShare), read before the claim so
	// the message's size is checked before anything is claimed.
	var share []events.Identity
	switch cur, err := g.owners.get(r.Context(), thread); {
	case err == nil:
		share = g.shareOf(cur.ThreadOwner, user)
	case !errors.Is(err, errNotOwner):
		g.unavailable(w, r, err)
		return sentMessage{}, false
	}
	build := func(id string) (*event.Event, bool) {
		e, err := events.NewWithID(id, SourceGateway, events.TypeTurnRequested, thread,
			events.TurnRequested{Agent: req.Agent, User: user, Message: msg, Share: share})
		if err != nil {
			g.unavailable(w, r, err)
			return nil, false
		}
		if n := len(e.Data()); n > events.MaxTurnRequestBytes {
			// The processor would refuse it: say so now, publish nothing.
			writeProblem(w, Problem{Status: http.StatusRequestEntityTooLarge, Reason: events.RejectMessageTooLarge,
				Detail: fmt.Sprintf("the message with its content blocks, _meta and the thread's shares is %d bytes; at most %d", n, events.MaxTurnRequestBytes)})
			return nil, false
		}
		return e, true
	}
	e, ok := build(eventID)
	if !ok {
		return sentMessage{}, false
	}
	// The claim is pending until the processor accepts (verify.go).
	c, pending, err := g.owners.claimFor(r.Context(), thread, user, e.ID(), threadTitle(req.Text))
	if !g.owned(w, r, err) {
		return sentMessage{}, false
	}
	if now := g.shareOf(c.ThreadOwner, user); !slices.Equal(now, share) {
		// A share changed between the two reads: carry the current ones.
		share = now
		if e, ok = build(e.ID()); !ok {
			return sentMessage{}, false
		}
	}
	ack, err := g.bus.Publish(r.Context(), events.InputSubject(g.opts.Principal, thread, events.ChatTurnRequested), e)
	if err != nil {
		g.unavailable(w, r, err)
		return sentMessage{}, false
	}
	return sentMessage{event: e, eventID: e.ID(), claim: c, pending: pending, duplicate: ack != nil && ack.Duplicate}, true
}

// shareOf returns the shares the message of user on the thread of t
// carries: the thread's current shares for its owner, none for anyone
// else (only the owner may share, at the processor too), and none when
// the processor only shared the thread with its gateway owner.
func (g *Gateway) shareOf(t ThreadOwner, user string) []events.Identity {
	if t.Owner != user {
		return nil
	}
	var share []events.Identity
	for _, s := range t.sharedWith() {
		share = append(share, events.Identity{Principal: g.opts.Principal, OnBehalfOf: s})
	}
	return share
}

// owned reports whether the ownership check (claim or check) passed; when it
// did not, it has answered: 404 for another user's thread (nothing is
// published), 503 when the ownership bucket could not be read.
func (g *Gateway) owned(w http.ResponseWriter, r *http.Request, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, errNotOwner):
		g.notFound(w)
	default:
		g.unavailable(w, r, err)
	}
	return false
}

// AnswerRequest is the body of POST /v1/threads/{thread}/elicitations/{id}:
// an MCP ElicitResult.
type AnswerRequest struct {
	Action  schema.ElicitAction `json:"action"`
	Content map[string]any      `json:"content,omitempty"`
	Meta    schema.Meta         `json:"_meta,omitzero"`
	// Arguments accepts a tool confirmation with changed arguments: the
	// complete arguments to run instead of the model's (a JSON object,
	// at most schema.MaxEditedArgumentsBytes). Only with action accept.
	// The gateway publishes them as _meta["dev.parley/arguments"]; the
	// processor checks them against the tool's input schema, and a
	// problem names their fields under "arguments" (422, the question
	// stays open). Optional.
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// editedArguments checks an answer body's arguments and moves them into
// its _meta (schema.MetaArguments); a violation names the member.
func (req *AnswerRequest) editedArguments() []schema.Violation {
	if len(req.Arguments) == 0 {
		return nil
	}
	if req.Action != schema.ActionAccept {
		return []schema.Violation{{Path: "arguments", Rule: "only with action accept (a decline or cancel runs nothing)"}}
	}
	if _, ok := req.Meta[schema.MetaArguments]; ok {
		return []schema.Violation{{Path: "arguments", Rule: `give the edited arguments once: arguments or _meta["dev.parley/arguments"], not both`}}
	}
	if t := bytes.TrimSpace(req.Arguments); len(t) == 0 || t[0] != '{' {
		return []schema.Violation{{Path: "arguments", Rule: "must be a JSON object: the complete arguments to run"}}
	}
	if n := len(req.Arguments); n > schema.MaxEditedArgumentsBytes+1<<10 {
		return []schema.Violation{{Path: "arguments", Rule: fmt.Sprintf("%d bytes is over the limit of %d", n, schema.MaxEditedArgumentsBytes)}}
	}
	req.Meta = req.Meta.Clone()
	if req.Meta == nil {
		req.Meta = schema.Meta{}
	}
	req.Meta[schema.MetaArguments] = req.Arguments
	return nil
}

// decodeAnswer decodes an answer body. Edited arguments sent as
// _meta["dev.parley/arguments"] keep their JSON as sent (decoding _meta
// generically would read 10000000000000001 as a float64 and publish
// 10000000000000000): what runs is what the person wrote. ok false: the
// problem is written.
func decodeAnswer(w http.ResponseWriter, r *http.Request) (req AnswerRequest, ok bool) {
	body, ok := decodeBodyRaw(w, r, &req)
	if !ok {
		return req, false
	}
	if _, edited := req.Meta[schema.MetaArguments]; edited {
		if raw, found := events.EditedArguments(body); found {
			req.Meta[schema.MetaArguments] = raw
		}
	}
	return req, true
}

// editPaths names the processor's violations of edited arguments as the
// body gave them: `_meta["dev.parley/arguments"].ids` becomes
// "arguments.ids".
func editPaths(vs []schema.Violation) []schema.Violation {
	out := make([]schema.Violation, len(vs))
	for i, v := range vs {
		if rest, ok := strings.CutPrefix(v.Path, schema.EditPath); ok {
			v.Path = "arguments" + rest
		}
		out[i] = v
	}
	return out
}

func (g *Gateway) postAnswer(w http.ResponseWriter, r *http.Request, user string) {
	thread, ok := threadParam(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if err := events.ValidToken("elicitation id", id); err != nil {
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest, Detail: err.Error(),
			Errors: []schema.Violation{{Path: "id", Rule: err.Error()}}})
		return
	}
	req, ok := decodeAnswer(w, r)
	if !ok {
		return
	}
	switch req.Action {
	case schema.ActionAccept, schema.ActionDecline, schema.ActionCancel:
	default:
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest,
			Detail: `action must be "accept", "decline" or "cancel"`,
			Errors: []schema.Violation{{Path: "action", Rule: `must be "accept", "decline" or "cancel"`}}})
		return
	}
	if vs := req.editedArguments(); len(vs) > 0 {
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest,
			Detail: vs[0].Path + ": " + vs[0].Rule, Errors: vs})
		return
	}
	if !g.owned(w, r, g.owners.check(r.Context(), thread, user)) {
		return
	}
	eid, err := uuid.NewV7()
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if status, ok := g.publishAnswer(w, r, thread, user, id, eid.String(), req); ok {
		writeJSON(w, http.StatusAccepted, Accepted{EventID: eid.String(), Thread: thread, Status: status})
	}
}

// publishAnswer publishes user's answer req to the question id of thread
// as elicitation.responded under the event ID eventID (the caller checked
// the action and that user may use the thread) and waits up to
// VerdictWait for the processor's verdict, as POST
// .../elicitations/{id} does. ok false: it has written the problem (the
// processor's rejection, or 503). Otherwise status is "accepted" (the
// processor took the answer) or "pending" (no verdict yet; it follows on
// the thread's events).
func (g *Gateway) publishAnswer(w http.ResponseWriter, r *http.Request, thread, user, id, eventID string, req AnswerRequest) (status string, ok bool) {
	v, err := g.answerAs(r.Context(), thread, user, id, eventID, req, g.opts.VerdictWait)
	if err != nil {
		g.unavailable(w, r, err)
		return "", false
	}
	if d := v.rejected; d != nil {
		if len(req.Arguments) > 0 { // named as the body named them
			d.Errors = editPaths(d.Errors)
		}
		writeProblem(w, Problem{Status: rejectionStatus(d.Reason), Reason: d.Reason, Detail: d.Detail,
			EventID: eventID, Errors: d.Errors, Title: "answer rejected: " + d.Reason})
		return "", false
	}
	return v.status, true
}

// answerVerdict is the processor's verdict on an answer (answer).
type answerVerdict struct {
	// eventID is the elicitation.responded event's ID.
	eventID string
	// status is "accepted" (the processor's echo came) or "pending" (no
	// verdict within the wait); "" when rejected.
	status string
	// rejected is the processor's refusal of the answer.
	rejected *events.ElicitationRejected
}

// answer publishes user's answer req to the question id of thread under
// a new event ID and returns the processor's verdict, refusal included
// (POST /v1/ag-ui re-raises a question whose answer was refused
// invalid_content), waiting up to wait for it. The error is the bus's
// (publishing, reading the verdicts).
func (g *Gateway) answer(ctx context.Context, thread, user, id string, req AnswerRequest, wait time.Duration) (answerVerdict, error) {
	eid, err := uuid.NewV7()
	if err != nil {
		return answerVerdict{}, err
	}
	return g.answerAs(ctx, thread, user, id, eid.String(), req, wait)
}

// answerAs is answer under the event ID eventID.
func (g *Gateway) answerAs(ctx context.Context, thread, user, id, eventID string, req AnswerRequest, wait time.Duration) (answerVerdict, error) {
	e, err := events.NewWithID(eventID, SourceGateway, events.TypeElicitationResponded, thread, events.ElicitationResponded{
		ElicitationID: id, AnsweredBy: user, Action: req.Action, Content: req.Content, Meta: req.Meta})
	if err != nil {
		return answerVerdict{}, err
	}
	v := answerVerdict{eventID: eventID, status: VerdictPending}
	// Watch for the verdict BEFORE publishing, so it cannot be missed.
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	verdicts, stop, err := g.follow(wctx, []string{events.ChatSubject(thread, events.ChatElicitationRejected),
		events.RefusedSubject(g.opts.Principal, thread, events.ChatElicitationRejected),
		events.ChatSubject(thread, events.ChatElicitationResponded)}, 0)
	if err != nil {
		return answerVerdict{}, err
	}
	defer stop()
	if _, err := g.bus.Publish(ctx, events.InputSubject(g.opts.Principal, thread, events.ChatElicitationResponded), e); err != nil {
		return answerVerdict{}, err
	}
	for {
		select {
		case it, ok := <-verdicts:
			if !ok {
				return v, nil
			}
			if it.ev == nil {
				continue
			}
			if who := events.EchoIdentity(it.ev); who.Principal != "" && who.Principal != g.opts.Principal {
				continue // another principal's event under this answer's ID
			}
			if events.TypeOf(it.ev) == events.TypeElicitationResponded {
				if it.ev.ID() == e.ID() { // the processor's echo: accepted
					v.status = VerdictAccepted
					return v, nil
				}
				continue
			}
			d, err := events.Data[events.ElicitationRejected](it.ev)
			if err != nil || d.RespondedEventID != e.ID() {
				continue
			}
			v.status, v.rejected = "", &d
			return v, nil
		case <-wctx.Done():
			return v, nil
		}
	}
}

// item is one stored chat event read by follow.
type item struct {
	seq        uint64
	numPending uint64
	// time is when PARLEY_CHAT stored the event (the server's clock).
	time time.Time
	ev   *event.Event
	raw  jetstream.Msg
}

// follow reads PARLEY_CHAT through an ordered consumer filtered to
// filters: from stream sequence startSeq, or (startSeq 0) only events
// stored after it returns. The consumer exists on the server when follow
// returns. The channel closes when ctx ends or stop is called.
func (g *Gateway) follow(ctx context.Context, filters []string, startSeq uint64) (<-chan item, func(), error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverNewPolicy}
	if startSeq > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = startSeq
	}
	cons, err := g.bus.JetStream().OrderedConsumer(ctx, events.StreamChat, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", events.StreamChat, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan item, 64)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		it := item{raw: m}
		if md, err := m.Metadata(); err == nil {
			it.seq, it.numPending, it.time = md.Sequence.Stream, md.NumPending, md.Timestamp
		}
		ev, err := events.Decode(events.Header(m.Headers()), m.Data())
		if err == nil {
			it.ev = ev
		}
		select {
		case out <- it:
		case <-ctx.Done():
		}
	})
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("reading %s: %w", events.StreamChat, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		cc.Stop()
		<-cc.Closed()
		close(out)
	}()
	return out, func() { cancel(); <-done }, nil
}

func (g *Gateway) listThreads(w http.ResponseWriter, r *http.Request, user string) {
	list, truncated, err := g.owners.list(r.Context(), user)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Threads   []ThreadSummary `json:"threads"`
		Truncated bool            `json:"truncated,omitempty"`
	}{list, truncated})
}

func (g *Gateway) getThread(w http.ResponseWriter, r *http.Request, user string) {
	thread, ok := threadParam(w, r)
	if !ok {
		return
	}
	rec, err := g.owners.access(r.Context(), thread, user, 0)
	if !g.owned(w, r, err) {
		return
	}
	st, err := g.threadState(r.Context(), thread, rec)
	if !g.owned(w, r, err) {
		return
	}
	st.Owner = rec.Owner
	role := "owner"
	if rec.Owner != user {
		role = "shared"
	}
	writeJSON(w, http.StatusOK, struct {
		ThreadState
		// Shared are the users the owner shared the thread with.
		Shared []string `json:"shared"`
		// Role is the caller's: "owner", or "shared" (shared with them).
		Role string `json:"role"`
	}{st, nonNil(rec.Shared), role})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// threadState is the thread's state as claim t may see it: the fold of
// its events (foldState) with the processor's record of its state and
// open questions (recordState); errNotOwner when the processor's
// ownership t was confirmed under ended.
func (g *Gateway) threadState(ctx context.Context, thread string, t ThreadOwner) (ThreadState, error) {
	st, err := g.foldState(ctx, thread, t)
	if err != nil {
		return st, err
	}
	g.recordState(ctx, &st, t)
	return st, nil
}

// foldState folds the thread's stored events that claim t may show
// (epoch.go), up to the last one stored when it starts; errNotOwner when
// the processor's ownership t was confirmed under ended.
func (g *Gateway) foldState(ctx context.Context, thread string, t ThreadOwner) (ThreadState, error) {
	st := ThreadState{Thread: thread, State: StateIdle, Pending: []schema.ElicitRequestParams{}}
	gctx, gcancel := bus.WithRequestTimeout(ctx)
	defer gcancel()
	stream, err := g.bus.JetStream().Stream(gctx, events.StreamChat)
	if err != nil {
		return st, fmt.Errorf("opening %s: %w", events.StreamChat, err)
	}
	last, err := stream.GetLastMsgForSubject(gctx, events.ChatThreadSubjects(thread))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("reading the last event of %s: %w", thread, err)
	}
	first := firstShown(t)
	if last.Sequence < first {
		return st, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	items, stop, err := g.follow(ctx, []string{events.ChatThreadSubjects(thread)}, first)
	if err != nil {
		return st, err
	}
	defer stop()
	epoch := g.owners.reader(thread, t)
	var f threadstate.Fold
	n, truncated := 0, false
	for it := range items {
		if err := epoch.shows(ctx, it.seq, it.time, it.ev); err != nil {
			return st, err
		}
		if it.ev != nil {
			f.Apply(it.seq, it.ev)
		}
		n++
		if it.seq >= last.Sequence || it.numPending == 0 {
			break
		}
		if n >= MaxStateEvents {
			truncated = true
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return st, fmt.Errorf("reading the events of %s: %w", thread, err)
	}
	stateOf(&st, &f, truncated)
	return st, nil
}

// recordState replaces st's state and open questions with the processor's
// record of them (events.ThreadStateSubject, asked on behalf of the claim's
// owner, whom the processor accepted): a question whose events
// PARLEY_CHAT's limits dropped, or that lies past what the fold read,
// is still open there. When no processor answers (within
// client.ThreadStateTimeout), st keeps the fold's and Source says so.
func (g *Gateway) recordState(ctx context.Context, st *ThreadState, t ThreadOwner) {
	st.Source = SourceEvents
	rs, err := g.processorState(ctx, st.Thread, t)
	if err != nil {
		g.log.WarnContext(ctx, "thread state: the state is folded from the events", "subject", st.Thread, "error", err)
		return
	}
	st.Source = SourceRecord
	switch rs.State {
	case StatePaused, StateRunning:
		st.State = rs.State
	default: // idle: the fold tells idle from failed (the last turn's end)
		if st.State != StateFailed {
			st.State = StateIdle
		}
	}
	st.Pending = append(st.Pending[:0], rs.Pending...)
}

// processorState asks the processor for its record of thread
// (events.ThreadStateSubject, on behalf of the claim's owner, whom the
// processor accepted), waiting up to stateWait. It fails when no
// processor answers, or its answer is not usable (not a thread state,
// or forbidden).
func (g *Gateway) processorState(ctx context.Context, thread string, t ThreadOwner) (events.ThreadStateReply, error) {
	e, err := events.New(SourceGateway, events.TypeThreadStateRequested, thread, events.ThreadStateRequest{OnBehalfOf: t.Owner})
	if err != nil {
		return events.ThreadStateReply{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, stateWait)
	defer cancel()
	reply, err := g.bus.Request(ctx, events.ThreadStateSubject(g.opts.Principal, thread), e)
	if err != nil {
		return events.ThreadStateReply{}, fmt.Errorf("the processor did not answer: %w", err)
	}
	rs, err := events.Data[events.ThreadStateReply](reply)
	if err != nil || events.TypeOf(reply) != events.TypeThreadStateAnswered || rs.Forbidden {
		return events.ThreadStateReply{}, fmt.Errorf("the processor's answer is not usable (type %s, forbidden %v): %v",
			reply.Type(), rs.Forbidden, err)
	}
	return rs, nil
}
