package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

func startInMemory(t *testing.T, trusted bool, opts Options) (*Server, *atomic.Int32) {
	t.Helper()
	var count atomic.Int32
	opts.Transport = inMemory(t, newTestServer(&count))
	s, err := Start(t.Context(), "test", ServerConfig{Command: "unused", Trusted: trusted, CallTimeout: "2s"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, &count
}

func toolNamed(t *testing.T, s *Server, name string) builtin.Tool {
	t.Helper()
	for _, tl := range s.Tools() {
		if tl.Definition().Name == name {
			return tl
		}
	}
	t.Fatalf("server has no tool %q", name)
	return nil
}

func call(t *testing.T, s *Server, name, args string) (*schema.CallToolResult, error) {
	t.Helper()
	ctx := toolexec.WithCall(t.Context(), events.ToolCallRequested{RunID: "run", Thread: "th", Call: schema.ToolCall{ID: "call-" + name, Name: name}})
	r, err := toolNamed(t, s, name).Call(ctx, builtin.Request{CallID: "call-" + name, Arguments: json.RawMessage(args)})
	return r.Call, err
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every content kind, annotations (audience, priority, lastModified),
// _meta at every level, structuredContent and isError reach parley as the
// server sent them; the blocks the person is shown (audience "user", and
// resource links) are marked with the server they come from.
func TestResultsFlowThroughUnchanged(t *testing.T) {
	s, _ := startInMemory(t, true, Options{})
	r, err := call(t, s, "all-content", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"content":[` +
		`{"type":"text","text":"for you","annotations":{"audience":["user"],"priority":0.7},"_meta":{"dev.parley/mcp_server":{"name":"test","trusted":true}}},` +
		`{"type":"text","text":"for the model","annotations":{"audience":["assistant"],"priority":0.3},"_meta":{"com.example/k":"v"}},` +
		`{"type":"image","data":"iVBORw0KGgoAAAAN","mimeType":"image/png","annotations":{"audience":["user"],"priority":0.5},"_meta":{"dev.parley/mcp_server":{"name":"test","trusted":true}}},` +
		`{"type":"audio","data":"UklGRjAwMDBXQVZF","mimeType":"audio/wav"},` +
		`{"type":"resource_link","uri":"demo://resource/1","name":"one","mimeType":"text/plain","size":12,"annotations":{"lastModified":"2025-01-12T15:00:58Z"},"_meta":{"dev.parley/mcp_server":{"name":"test","trusted":true}}},` +
		`{"type":"resource","resource":{"uri":"demo://resource/2","mimeType":"text/plain","text":"two"}},` +
		`{"type":"resource","resource":{"uri":"demo://resource/3","mimeType":"application/octet-stream","blob":"AQID"}}],` +
		`"structuredContent":{"temperature":21.5},"_meta":{"com.example/trace":"abc","io.modelcontextprotocol/serverInfo":{"name":"test-server","version":"1"}}}`
	if got := mustJSON(t, r); got != want {
		t.Fatalf("result:\n got %s\nwant %s", got, want)
	}

	r, err = call(t, s, "fail", `{}`)
	if err != nil || !r.IsError || mustJSON(t, r.Content) != `[{"type":"text","text":"it failed"}]` {
		t.Fatalf("isError result: %v %s", err, mustJSON(t, r))
	}
	// structuredContent is checked against the outputSchema.
	r, err = call(t, s, "bad-structured", `{}`)
	if err != nil || !r.IsError || !strings.Contains(mustJSON(t, r), "structuredContent.temperature") {
		t.Fatalf("invalid structuredContent: %v %s", err, mustJSON(t, r))
	}
	// Arguments arrive exactly as the model wrote them.
	r, err = call(t, s, "read", `{"id": 7}`)
	if err != nil || mustJSON(t, r.Content) != `[{"type":"text","text":"read {\"id\":7}"}]` {
		t.Fatalf("arguments: %v %s", err, mustJSON(t, r))
	}
	// A protocol error (unknown tool) is an isError result, not a failure.
	tl := &tool{s: s, name: "no-such-tool", def: schema.Tool{Name: "no-such-tool"}}
	res, err := tl.Call(t.Context(), builtin.Request{})
	if err != nil || !res.Call.IsError || !strings.Contains(mustJSON(t, res.Call), "no-such-tool") {
		t.Fatalf("unknown tool: %v %s", err, mustJSON(t, res.Call))
	}
}

// A trusted server's annotations are kept; an untrusted server's hints
// are dropped at registration, so its tools count as destructive.
func TestTrust(t *testing.T) {
	trusted, _ := startInMemory(t, true, Options{})
	untrusted, _ := startInMemory(t, false, Options{})
	def := toolNamed(t, trusted, "read").Definition()
	if !def.Annotations.ReadOnly() || schema.ConfirmByAnnotation(def.Annotations) {
		t.Fatalf("trusted read: %+v", def.Annotations)
	}
	def = toolNamed(t, untrusted, "read").Definition()
	if def.Annotations.ReadOnly() || !def.Annotations.Destructive() || !schema.ConfirmByAnnotation(def.Annotations) ||
		def.DisplayName() != "Read it" {
		t.Fatalf("untrusted read: %s", mustJSON(t, def))
	}
	if m := def.MCPTool(); m == nil || m.Trusted || m.Server != "test" || m.Tool != "read" {
		t.Fatalf("_meta: %v", def.Meta)
	}
	if n := len(trusted.Tools()); n != 12 {
		t.Fatalf("%d tools listed, want 12", n)
	}
}

// A server that does not answer is bounded by the call timeout, the error
// says so (the executor reports the outcome as unknown), and the server
// gets notifications/cancelled.
func TestHungServerBoundedByCallTimeout(t *testing.T) {
	var count atomic.Int32
	s, err := Start(t.Context(), "slow", ServerConfig{Command: "unused", CallTimeout: "300ms"},
		Options{Transport: inMemory(t, newTestServer(&count))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	_, err = call(t, s, "hang", `{}`)
	if err == nil || !strings.Contains(err.Error(), `mcp server "slow" did not answer within 300ms`) {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %s", d)
	}
	// The server was told: notifications/cancelled ended its handler while
	// the session stays open.
	select {
	case <-hangCancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw notifications/cancelled")
	}
}

// Progress notifications of a call reach Options.Progress with the call's
// ID as token; none arrive for other calls.
func TestProgress(t *testing.T) {
	var mu sync.Mutex
	var got []schema.Progress
	s, _ := startInMemory(t, true, Options{Progress: func(_ context.Context, c events.ToolCallRequested, p schema.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if c.Call.ID != "call-progress" {
			t.Errorf("progress for call %q", c.Call.ID)
		}
		got = append(got, p)
	}})
	if _, err := call(t, s, "progress", `{}`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 2 || got[0].ProgressToken != schema.StringToken("call-progress") || got[0].Progress != 1 ||
		got[0].Total == nil || *got[0].Total != 3 || got[0].Message != "step 1" {
		t.Fatalf("progress: %s", mustJSON(t, got))
	}
}

// A progress notification the server sends just before its result is
// published before the call's result or not at all: none is handed on
// once the call returned (the tool-executor publishes the result, and the
// run may end, right after).
func TestNoProgressAfterTheCallReturned(t *testing.T) {
	var mu sync.Mutex
	var order []string
	s, _ := startInMemory(t, true, Options{Progress: func(context.Context, events.ToolCallRequested, schema.Progress) {
		time.Sleep(20 * time.Millisecond) // a publish that takes a moment
		mu.Lock()
		order = append(order, "progress")
		mu.Unlock()
	}})
	for i := range 5 {
		if _, err := call(t, s, "progress_then_return", `{}`); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		order = append(order, "result")
		mu.Unlock()
		time.Sleep(150 * time.Millisecond) // late notifications would be handed on
		mu.Lock()
		got := slices.Clone(order)
		order = nil
		mu.Unlock()
		if got[len(got)-1] != "result" {
			t.Fatalf("call %d: progress handed on after the call returned: %q", i, got)
		}
	}
}

// A server's elicitation/create during a call (MCP 2025-11-25) reaches
// Options.Elicit with the call, and the answer goes back to the server.
func TestElicitationBridged(t *testing.T) {
	var asked schema.ElicitRequestParams
	s, _ := startInMemory(t, true, Options{ProtocolVersion: "2025-11-25", Elicit: func(_ context.Context, server string, c events.ToolCallRequested, req schema.ElicitRequestParams) (schema.ElicitResult, error) {
		if server != "test" || c.Call.ID != "call-ask" {
			t.Errorf("elicitation from %q for call %q", server, c.Call.ID)
		}
		asked = req
		return schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"name": "Ada"}}, nil
	}})
	r, err := call(t, s, "ask", `{}`)
	if err != nil || mustJSON(t, r.Content) != `[{"type":"text","text":"accept Ada"}]` {
		t.Fatalf("%v %s", err, mustJSON(t, r))
	}
	if asked.Message != "Your name?" || asked.RequestedSchema.Properties["name"].Type != "string" {
		t.Fatalf("asked %s", mustJSON(t, asked))
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A stdio server from configuration: command, args, env (parley's own
// environment is not passed on), working directory, stderr in the log;
// when it exits it is restarted and its tools come back.
func TestStdioServerFromConfig(t *testing.T) {
	t.Setenv("SECRET", "parley-credential")
	dir := t.TempDir()
	cfgJSON := `{"servers":{"local":{"command":` + mustJSON(t, os.Args[0]) + `,"args":["-test.run=^$"],` +
		`"env":{"MCPCLIENT_TEST_SERVER":"1","GREETING":"hi"},"cwd":"work","trusted":true}}}`
	if err := os.Mkdir(filepath.Join(dir, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "servers.json")
	if err := os.WriteFile(path, []byte(cfgJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	servers, err := StartAll(t.Context(), cfg, Options{Logger: log, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := servers[0]
	defer s.Close()
	eventually(t, 5*time.Second, "stderr in the log", func() bool {
		return strings.Contains(logs.String(), "test server starting in "+filepath.Join(dir, "work")+" with SECRET= GREETING=hi")
	})
	if r, err := call(t, s, "read", `{}`); err != nil || r.IsError {
		t.Fatalf("%v %s", err, mustJSON(t, r))
	}
	<-s.Changed() // drain the start-up signal
	if _, err := call(t, s, "exit", `{}`); err == nil {
		t.Fatal("call to a server that exited succeeded")
	}
	select {
	case <-s.Changed():
	case <-time.After(10 * time.Second):
		t.Fatalf("not reconnected; log:\n%s", logs.String())
	}
	if r, err := call(t, s, "read", `{}`); err != nil || r.IsError {
		t.Fatalf("after restart: %v %s", err, mustJSON(t, r))
	}
	for _, want := range []string{"exiting on request", "mcp server disconnected; reconnecting", "mcp server connected"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
}

// A server that fails to start is reported with its name.
func TestStartFailureNamesServer(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"servers":{"broken":{"command":"/nonexistent/mcp-server"}}}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = StartAll(t.Context(), cfg, Options{ConnectTimeout: 5 * time.Second})
	if err == nil || !strings.HasPrefix(err.Error(), `mcp server "broken": initialize:`) {
		t.Fatalf("got %v", err)
	}
	cfg, err = ParseConfig([]byte(`{"servers":{"silent":{"command":"sleep","args":["30"]}}}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = StartAll(t.Context(), cfg, Options{ConnectTimeout: 500 * time.Millisecond})
	if err == nil || !strings.HasPrefix(err.Error(), `mcp server "silent": initialize:`) || time.Since(start) > 10*time.Second {
		t.Fatalf("got %v after %s", err, time.Since(start))
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{}`, "servers: required"},
		{`{"servers":{"a":{}}}`, "servers.a.command: one of command"},
		{`{"servers":{"a":{"command":"x","url":"http://h"}}}`, "servers.a.url: command and url are mutually exclusive"},
		{`{"servers":{"a":{"url":"ftp://h"}}}`, `servers.a.url: "ftp://h" must be an absolute http or https URL`},
		{`{"servers":{"a":{"url":"http://h","args":["x"]}}}`, "servers.a.args:"},
		{`{"servers":{"a":{"command":"x","headers":{"A":"b"}}}}`, "servers.a.headers: only for url servers"},
		{`{"servers":{"a":{"command":"x","callTimeout":"2h"}}}`, "servers.a.callTimeout:"},
		{`{"servers":{"a_b":{"command":"x"}}}`, `servers: server name "a_b"`},
		{`{"servers":{"a":{"command":"x","trusted":"yes"}}}`, "cannot unmarshal"},
		{`{"servers":{"a":{"command":"x","typo":1}}}`, `unknown field "typo"`},
	} {
		_, err := ParseConfig([]byte(tc.in), "/")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.in, err, tc.want)
		}
	}
	c, err := ParseConfig([]byte(`{"servers":{"r":{"url":"https://h/mcp","bearerTokenFile":"tok","headers":{"X-A":"1"}}}}`), "/etc/parley")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Servers["r"]
	if got := r.path("tok"); got != "/etc/parley/tok" || r.callTimeout() != DefaultCallTimeout {
		t.Fatalf("path %q", got)
	}
}

// A 2026-07-28 input-required result becomes parley's InputRequiredResult
// (the turn pauses and asks); the retry carries the answers and the
// requestState back to the server.
func TestInputRequiredRoundTrip(t *testing.T) {
	s, _ := startInMemory(t, true, Options{})
	tl := toolNamed(t, s, "deploy")
	r, err := tl.Call(t.Context(), builtin.Request{CallID: "c", Arguments: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	ir := r.InputRequired
	if r.Call != nil || ir == nil || ir.ResultType != schema.ResultTypeInputRequired || ir.RequestState != "state-1" ||
		ir.InputRequests["confirm"].Method != "elicitation/create" || ir.InputRequests["confirm"].Params.Message != "Deploy to production?" {
		t.Fatalf("first round: %s", mustJSON(t, r))
	}
	r, err = tl.Call(t.Context(), builtin.Request{CallID: "c", Round: 1, Arguments: json.RawMessage(`{}`), RequestState: ir.RequestState,
		InputResponses: map[string]schema.ElicitResult{"confirm": {Action: schema.ActionAccept, Content: map[string]any{"reason": "release"}}}})
	if err != nil || r.Call == nil || mustJSON(t, r.Call.Content) != `[{"type":"text","text":"accept release state=state-1"}]` {
		t.Fatalf("retry: %v %s", err, mustJSON(t, r))
	}
}

// The example in docs is a valid config.
func TestExampleConfig(t *testing.T) {
	c, err := LoadConfig(filepath.Join("..", "..", "..", "docs", "mcp-servers.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Servers) != 3 || !c.Servers["everything"].Trusted || c.Servers["remote"].URL == "" {
		t.Fatalf("%+v", c)
	}
}

// A server's elicitation/create during a call (MCP 2025-11-25) becomes an
// input-required result; the retry carries the person's answer to the
// waiting request and returns the call's result. A retry naming a call
// this process does not hold is retried later, never re-run.
func TestElicitationBridgedAsInputRequired(t *testing.T) {
	s, _ := startInMemory(t, true, Options{ProtocolVersion: "2025-11-25"})
	tl := toolNamed(t, s, "ask")
	ctx := toolexec.WithCall(t.Context(), events.ToolCallRequested{RunID: "r", Thread: "th", Call: schema.ToolCall{ID: "c", Name: "test__ask"}})
	r, err := tl.Call(ctx, builtin.Request{CallID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	ir := r.InputRequired
	if ir == nil || ir.InputRequests[BridgeKey].Params.Message != "Your name?" || !strings.HasPrefix(ir.RequestState, bridgePrefix) {
		t.Fatalf("first round: %s", mustJSON(t, r))
	}
	// The server is still waiting; the call timeout (2s) does not run
	// while the person decides.
	time.Sleep(2500 * time.Millisecond)
	r, err = tl.Call(ctx, builtin.Request{CallID: "c", Round: 1, RequestState: ir.RequestState,
		InputResponses: map[string]schema.ElicitResult{BridgeKey: {Action: schema.ActionAccept, Content: map[string]any{"name": "Ada"}}}})
	if err != nil || r.Call == nil || mustJSON(t, r.Call.Content) != `[{"type":"text","text":"accept Ada"}]` {
		t.Fatalf("second round: %v %s", err, mustJSON(t, r))
	}
	_, err = tl.Call(ctx, builtin.Request{CallID: "c", Round: 1, RequestState: bridgePrefix + "gone"})
	if err == nil || !strings.Contains(err.Error(), "not held by this tool-executor") {
		t.Fatalf("unknown handle: %v", err)
	}
}

// A streamable HTTP server gets the configured headers and the bearer
// token read from bearerTokenFile on every request.
func TestStreamableHTTPHeadersAndToken(t *testing.T) {
	var count atomic.Int32
	srv := newTestServer(&count)
	var mu sync.Mutex
	seen := map[string]string{}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen["auth"], seen["tenant"] = r.Header.Get("Authorization"), r.Header.Get("X-Tenant")
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig([]byte(`{"servers":{"remote":{"url":"`+ts.URL+`","headers":{"X-Tenant":"acme"},"bearerTokenFile":"token","trusted":true}}}`), dir)
	if err != nil {
		t.Fatal(err)
	}
	servers, err := StartAll(t.Context(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer servers[0].Close()
	if r, err := call(t, servers[0], "read", `{}`); err != nil || r.IsError {
		t.Fatalf("%v %s", err, mustJSON(t, r))
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["auth"] != "Bearer s3cret" || seen["tenant"] != "acme" {
		t.Fatalf("headers seen: %v", seen)
	}
	// A wrong token fails start-up, naming the server.
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := StartAll(t.Context(), cfg, Options{ConnectTimeout: 2 * time.Second}); err == nil || !strings.Contains(err.Error(), `mcp server "remote": initialize`) {
		t.Fatalf("wrong token: %v", err)
	}
}
