// Package mcpclient connects the tool-executor to MCP servers with the
// official MCP Go SDK (github.com/modelcontextprotocol/go-sdk): stdio
// commands and streamable HTTP endpoints from a config file (see Config).
// Each Server is a toolexec.Source: its tools are registered as
// "<server>__<tool>" with their annotations (dropped for an untrusted
// server), and calls go to the server through tools/call, their results
// converted to parley's schema types at one boundary (convert.go).
//
// A server is connected at start-up (an initialize failure is an error
// naming the server), reconnected with exponential backoff when it exits
// or its connection drops, and its tool list is re-read on
// notifications/tools/list_changed and after every reconnection. A
// command's stderr goes to the log, line by line.
//
// Progress notifications of a call are published on its thread
// (toolexec.ReportProgress); a server's elicitation/create during a call,
// and an MCP 2026-07-28 input-required result, pause the turn through
// parley's input-required path (bridge.go).
//
// It owns the MCP client sessions to the configured servers. Of parley's
// packages it imports only bus, events, schema, workers/toolexec and
// workers/toolexec/builtin; it must not import another worker, client,
// gateway or a composition root (internal/layers checks the direction of
// imports).
package mcpclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// ClientName is the clientInfo.name parley sends in initialize.
const ClientName = "parley"

// MaxTools bounds the tools read from one server; the rest are left out
// with a warning.
const MaxTools = 1000

// maxStderrLine bounds one logged line of a server's stderr; the rest of a
// longer line is dropped.
const maxStderrLine = 4096

// MetaServer is the _meta key parley adds to the registered definition of
// an MCP server's tool: {"server": name, "tool": the server's tool name,
// "trusted": bool} (schema.MCPToolMeta).
const MetaServer = schema.MetaMCPTool

// ProgressFunc receives a progress notification of a running call: p's
// token is the call's ID (schema.StringToken(call.Call.ID)), whatever
// token was sent to the server.
type ProgressFunc func(ctx context.Context, call events.ToolCallRequested, p schema.Progress)

// ElicitFunc asks the person behind call a server's elicitation/create
// and returns their answer. The error makes the server's request fail.
type ElicitFunc func(ctx context.Context, server string, call events.ToolCallRequested, req schema.ElicitRequestParams) (schema.ElicitResult, error)

// Options configures the connection to MCP servers.
type Options struct {
	// Logger. Optional. Default: discard.
	Logger *slog.Logger
	// Version is parley's version, sent as clientInfo.version. Optional.
	// Default: "dev".
	Version string
	// Progress receives servers' progress notifications. Optional.
	// Default: toolexec.ReportProgress, which publishes them on the call's
	// thread (dev.parley.progress).
	Progress ProgressFunc
	// Elicit answers servers' elicitation requests directly. Optional.
	// Default: each request is bridged to the person behind the call (the
	// call returns an input-required result and its retry carries the
	// answer, see bridge.go).
	Elicit ElicitFunc
	// ElicitTimeout bounds how long a server's elicitation/create waits for
	// the person's answer; then the server gets "cancel". Optional.
	// Default: 24h (the processor's default --pause-ttl).
	ElicitTimeout time.Duration
	// ConnectTimeout bounds connecting and initialize. Optional. Default:
	// 30s.
	ConnectTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts, which doubles from MinBackoff up to MaxBackoff (with
	// jitter). Optional. Defaults: 1s and 30s.
	MinBackoff, MaxBackoff time.Duration
	// ProtocolVersion forces the MCP protocol version offered. Optional.
	// Default: the SDK's latest, falling back as the server requires.
	ProtocolVersion string

	// Transport, when set, replaces the configured command or URL: it
	// returns a fresh transport for each (re)connection, e.g. one end of
	// mcp.NewInMemoryTransports for a server in the same process.
	// Optional.
	Transport func() (mcp.Transport, error)
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.ElicitTimeout <= 0 {
		o.ElicitTimeout = 24 * time.Hour
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 30 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(30*time.Second, o.MinBackoff)
	}
}

// Server is a connection to one MCP server, kept up until Close. It is a
// toolexec.Source.
type Server struct {
	name   string
	cfg    ServerConfig
	opts   Options
	log    *slog.Logger
	client *mcp.Client

	ctx    context.Context // lifetime; cancelled by Close
	cancel context.CancelFunc
	done   chan struct{} // closed when supervise returns

	mu      sync.Mutex
	session *mcp.ClientSession
	tools   []builtin.Tool
	changed chan struct{} // capacity 1: a pending "tools changed"
	listing atomic.Bool   // a tools/list_changed re-read is running

	nextToken atomic.Int64
	calls     sync.Map // progress token (int64) -> running

	pmu     sync.Mutex
	pending map[string]*pendingCall // requestState handle -> call waiting for an answer
	unknown map[string]time.Time    // handles not held here -> first seen
}

// running is a call in progress on the server.
type running struct {
	ctx  context.Context // the call's, for toolexec.ReportProgress
	call events.ToolCallRequested
	pc   *pendingCall
}

// StartAll connects to every server of c. If one fails, the ones started
// are closed and the error names the failing server.
func StartAll(ctx context.Context, c *Config, opts Options) ([]*Server, error) {
	var out []*Server
	for name, sc := range c.Servers {
		s, err := Start(ctx, name, sc, opts)
		if err != nil {
			for _, s := range out {
				_ = s.Close()
			}
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Start connects to the server name (initialize, then tools/list) and
// keeps it connected until Close. The error names the server.
func Start(ctx context.Context, name string, cfg ServerConfig, opts Options) (*Server, error) {
	opts.defaults()
	if err := toolexec.ValidSourceName(name); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("mcp server %q: %w", name, err)
	}
	s := &Server{name: name, cfg: cfg, opts: opts, changed: make(chan struct{}, 1), done: make(chan struct{}),
		log: opts.Logger.With("server", name)}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	copts := &mcp.ClientOptions{
		Logger: s.log,
		// Input-required results (MCP 2026-07-28) go back to the executor
		// as parley's own InputRequiredResult: the turn pauses, the person
		// answers over the bus, and the call is retried with the answers.
		MultiRoundTrip:              &mcp.MultiRoundTripOptions{Disabled: true},
		ToolListChangedHandler:      s.onToolListChanged,
		ProgressNotificationHandler: s.onProgress,
	}
	// Form and URL-mode elicitation are always declared: a server's
	// elicitation/create during a call is bridged to the person
	// (bridge.go). A URL-mode request reaches the person with its full URL
	// and host and needs their explicit consent; parley never opens it.
	// (For a 2025-06-18 server the "form"/"url" members are unknown
	// members of an elicitation capability, which it reads as form.)
	// Roots are not declared: parley exposes no filesystem roots.
	copts.ElicitationHandler = s.onElicit
	copts.ElicitationCompleteHandler = s.onElicitationComplete
	copts.Capabilities = &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{
		Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}}}
	s.client = mcp.NewClient(&mcp.Implementation{Name: ClientName, Title: "parley", Version: opts.Version}, copts)
	if err := s.connect(ctx); err != nil {
		s.cancel()
		return nil, fmt.Errorf("mcp server %q: %w", name, err)
	}
	go s.supervise()
	return s, nil
}

// Name returns the server's name.
func (s *Server) Name() string { return s.name }

// Tools returns the server's tools as last listed.
func (s *Server) Tools() []builtin.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools
}

// Changed receives a value when the tool list was re-read.
func (s *Server) Changed() <-chan struct{} { return s.changed }

// closeGrace bounds how long Close waits for the server's calls to end
// once its questions waiting for a person are cancelled: a server whose
// call still waits for its question's answer does not exit when its stdin
// closes, and the command transport then waits 5 s before SIGTERM.
const closeGrace = time.Second

// Close cancels the server's questions waiting for a person (action
// cancel), waits up to closeGrace for its calls to end, then disconnects
// (a command gets its stdin closed, then SIGTERM) and stops reconnecting.
func (s *Server) Close() error {
	s.cancel()
	for deadline := time.Now().Add(closeGrace); s.Running() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	cs := s.session
	s.mu.Unlock()
	var err error
	if cs != nil {
		err = cs.Close()
	}
	<-s.done
	return err
}

// transport builds a fresh transport for one connection.
func (s *Server) transport() (mcp.Transport, error) {
	if s.opts.Transport != nil {
		return s.opts.Transport()
	}
	if s.cfg.Command != "" {
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Dir = s.cfg.path(s.cfg.Cwd)
		if cmd.Dir == "" {
			cmd.Dir = s.cfg.dir
		}
		cmd.Env = commandEnv(s.cfg.Env)
		cmd.Stderr = &lineLogger{log: s.log}
		return &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil
	}
	h := http.Header{}
	for k, v := range s.cfg.Headers {
		h.Set(k, v)
	}
	if f := s.cfg.BearerTokenFile; f != "" {
		tok, err := os.ReadFile(s.cfg.path(f))
		if err != nil {
			return nil, fmt.Errorf("bearerTokenFile: %w", err)
		}
		h.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	return &mcp.StreamableClientTransport{Endpoint: s.cfg.URL,
		HTTPClient: &http.Client{Transport: &headerTransport{base: http.DefaultTransport, h: h}}}, nil
}

// inheritedEnv are the variables a command inherits from parley.
var inheritedEnv = []string{"PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ"}

func commandEnv(extra map[string]string) []string {
	var env []string
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// headerTransport adds fixed headers to every request.
type headerTransport struct {
	base http.RoundTripper
	h    http.Header
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// lineLogger logs a server's stderr line by line.
type lineLogger struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := strings.IndexByte(string(p), '\n')
		if i < 0 {
			room := maxStderrLine - len(l.buf)
			l.buf = append(l.buf, p[:min(len(p), max(room, 0))]...)
			break
		}
		room := maxStderrLine - len(l.buf)
		l.buf = append(l.buf, p[:min(i, max(room, 0))]...)
		l.log.Info("mcp server stderr", "line", strings.TrimRight(string(l.buf), "\r"))
		l.buf = l.buf[:0]
		p = p[i+1:]
	}
	return n, nil
}

// connect opens a session and lists the tools.
func (s *Server) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
	defer cancel()
	t, err := s.transport()
	if err != nil {
		return err
	}
	cs, err := s.client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: s.opts.ProtocolVersion})
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	tools, err := s.list(ctx, cs)
	if err != nil {
		_ = cs.Close()
		return fmt.Errorf("tools/list: %w", err)
	}
	init := cs.InitializeResult()
	s.mu.Lock()
	s.session, s.tools = cs, tools
	s.mu.Unlock()
	if s.ctx.Err() != nil {
		// Close ran while connecting: it may not have seen this session.
		_ = cs.Close()
		return s.ctx.Err()
	}
	s.notify()
	attrs := []any{"tools", len(tools), "trusted", s.cfg.Trusted}
	if init != nil && init.ServerInfo != nil {
		attrs = append(attrs, "protocol", init.ProtocolVersion, "server_name", init.ServerInfo.Name, "server_version", init.ServerInfo.Version)
	}
	s.log.Info("mcp server connected", attrs...)
	return nil
}

// list reads every page of tools/list (at most MaxTools tools).
func (s *Server) list(ctx context.Context, cs *mcp.ClientSession) ([]builtin.Tool, error) {
	var out []builtin.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if len(out) == MaxTools {
			s.log.Warn("mcp server has too many tools; the rest are left out", "max", MaxTools)
			break
		}
		def, err := toolFromSDK(t)
		if err != nil {
			s.log.Warn("mcp tool left out: invalid definition", "tool", t.Name, "error", err)
			continue
		}
		out = append(out, s.newTool(def))
	}
	return out, nil
}

// newTool wraps a server's tool definition. An untrusted server's
// annotation hints are dropped here, at registration, so the gate, the
// model and the executor all see an unannotated (destructive) tool.
func (s *Server) newTool(def schema.Tool) *tool {
	name := def.Name
	if !s.cfg.Trusted && def.Annotations != nil {
		if def.Annotations.Title != "" {
			def.Annotations = &schema.ToolAnnotations{Title: def.Annotations.Title}
		} else {
			def.Annotations = nil
		}
	}
	// parley's own keys are parley's to write (schema.IsReservedMetaKey).
	meta, dropped := def.Meta.WithoutReserved()
	if len(dropped) > 0 {
		s.log.Warn("mcp tool definition carried _meta keys reserved for parley; dropped", "tool", name, "keys", dropped)
	}
	def.Meta = meta.Clone()
	if def.Meta == nil {
		def.Meta = schema.Meta{}
	}
	def.Meta[MetaServer] = schema.MCPToolMeta{Server: s.name, Tool: name, Trusted: s.cfg.Trusted}
	return &tool{s: s, name: name, def: def}
}

// notify signals Changed without blocking.
func (s *Server) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// supervise reconnects whenever the session ends, until Close.
func (s *Server) supervise() {
	defer close(s.done)
	for {
		s.mu.Lock()
		cs := s.session
		s.mu.Unlock()
		err := cs.Wait()
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn("mcp server disconnected; reconnecting", "error", err)
		s.mu.Lock()
		s.session = nil
		s.mu.Unlock()
		delay := s.opts.MinBackoff
		for {
			jitter := time.Duration(rand.Int64N(int64(delay)/4 + 1))
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(delay + jitter):
			}
			err := s.connect(s.ctx)
			if err == nil {
				break
			}
			if s.ctx.Err() != nil {
				return
			}
			s.log.Warn("mcp server reconnection failed", "error", err, "retry_in", delay)
			delay = min(2*delay, s.opts.MaxBackoff)
		}
	}
}

// onToolListChanged re-reads the tools (outside the notification handler,
// at most one re-read at a time).
func (s *Server) onToolListChanged(_ context.Context, req *mcp.ToolListChangedRequest) {
	if !s.listing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.listing.Store(false)
		ctx, cancel := context.WithTimeout(s.ctx, s.opts.ConnectTimeout)
		defer cancel()
		tools, err := s.list(ctx, req.Session)
		if err != nil {
			s.log.Warn("re-reading tools after tools/list_changed failed", "error", err)
			return
		}
		s.mu.Lock()
		if s.session == req.Session {
			s.tools = tools
		}
		s.mu.Unlock()
		s.notify()
	}()
}

// onProgress forwards a progress notification of a running call.
func (s *Server) onProgress(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	if req.Params == nil {
		return
	}
	tok, ok := tokenInt(req.Params.ProgressToken)
	if !ok {
		return
	}
	v, ok := s.calls.Load(tok)
	if !ok {
		return // a finished call's late notification
	}
	r := v.(running)
	call := r.call
	p := schema.Progress{ProgressToken: schema.StringToken(call.Call.ID), Progress: req.Params.Progress, Message: req.Params.Message}
	if req.Params.Total > 0 {
		t := req.Params.Total
		p.Total = &t
	}
	if err := p.Validate(); err != nil {
		s.log.Warn("invalid progress notification dropped", "error", err)
		return
	}
	// Published (and stored) before the call's result, or not at all:
	// once the call returned, its notifications are dropped.
	r.pc.report(func() {
		if s.opts.Progress != nil {
			s.opts.Progress(ctx, call, p)
			return
		}
		if err := toolexec.ReportProgress(r.ctx, p); err != nil {
			s.log.Warn("publishing progress failed", "error", err)
		}
	})
}

func tokenInt(v any) (int64, bool) {
	switch t := v.(type) {
	case int64:
		return t, true
	case int:
		return int64(t), true
	case float64:
		return int64(t), float64(int64(t)) == t
	case json.Number:
		n, err := t.Int64()
		return n, err == nil
	}
	return 0, false
}

// current returns the live session, or nil while disconnected.
func (s *Server) current() *mcp.ClientSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session
}

// tool is one tool of a server.
type tool struct {
	s    *Server
	name string      // the server's name for it
	def  schema.Tool // as the server defined it (annotations as trusted)
}

// Definition returns the tool's definition under the server's name for it
// (the executor namespaces it).
func (t *tool) Definition() schema.Tool { return t.def }

// errNotConnected says a call was not sent: running it later is safe.
type errNotConnected struct{ server string }

func (e errNotConnected) Error() string {
	return fmt.Sprintf("mcp server %q is not connected (reconnecting)", e.server)
}

// NotStarted reports that the call was never sent (see toolexec).
func (errNotConnected) NotStarted() bool { return true }

// errLoadShed says the server answered input_required with no requests
// (MCP 2026-07-28: load shedding); retrying later is safe.
type errLoadShed struct{ server string }

func (e errLoadShed) Error() string {
	return fmt.Sprintf("mcp server %q shed the call (input_required without requests); retrying", e.server)
}

// NotStarted reports that the server did not run the call (see toolexec).
func (errLoadShed) NotStarted() bool { return true }

// inputRequired converts a server's input-required result (MCP
// 2026-07-28) to parley's. Only elicitation/create requests can be put to
// a person; a server asking for sampling or roots gets an isError result.
func (s *Server) inputRequired(res *mcp.CallToolResult) (builtin.Result, error) {
	if len(res.InputRequests) == 0 {
		return builtin.Result{}, errLoadShed{s.name}
	}
	var wire struct {
		InputRequests map[string]schema.InputRequest `json:"inputRequests"`
	}
	if err := convert(struct {
		InputRequests mcp.InputRequestMap `json:"inputRequests"`
	}{res.InputRequests}, &wire); err != nil {
		return builtin.Result{Call: schema.ErrorResult(fmt.Sprintf("server %s asked for input parley cannot put to a person: %v", s.name, err))}, nil
	}
	for k, r := range wire.InputRequests {
		if r.Method != "elicitation/create" {
			return builtin.Result{Call: schema.ErrorResult(fmt.Sprintf("server %s asked for %s (inputRequests.%s); parley only supports elicitation/create", s.name, r.Method, k))}, nil
		}
		if r.Params.Mode == "form" { // the same as no mode; see elicitFromSDK
			r.Params.Mode = ""
		}
		if secrets := s.guard(&r.Params); s.refuses(secrets) {
			s.log.Warn("untrusted mcp server asked for what looks like a secret in a form, which MCP forbids; declined without asking the person",
				"fields", secrets, "input_request", k)
			return builtin.Result{Call: schema.ErrorResult(fmt.Sprintf("The call was not completed: %s (inputRequests.%s).",
				strings.TrimSuffix(strings.TrimPrefix(secretsRefused(s.name, secrets), "["), "]"), k))}, nil
		}
		wire.InputRequests[k] = r
	}
	ir := &schema.InputRequiredResult{ResultType: schema.ResultTypeInputRequired, InputRequests: wire.InputRequests, RequestState: res.RequestState}
	if err := ir.Validate(schema.Rev20251125); err != nil {
		return builtin.Result{Call: schema.ErrorResult(fmt.Sprintf("server %s returned an invalid input-required result: %v", s.name, err))}, nil
	}
	return builtin.Result{InputRequired: ir}, nil
}

var _ toolexec.Source = (*Server)(nil)
var _ io.Writer = (*lineLogger)(nil)
