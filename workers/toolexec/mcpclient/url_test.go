package mcpclient

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// startURLServer serves the test server plus two URL-mode tools: "visit"
// asks the person to visit a URL (elicitation/create, mode "url") and
// reports the answer; "needs-url" refuses with a URLElicitationRequired
// error (-32042) until a call after the person's consent.
func startURLServer(t *testing.T) (*Server, *atomic.Int32) {
	t.Helper()
	var count, runs atomic.Int32
	srv := newTestServer(&count)
	obj := map[string]any{"type": "object"}
	srv.AddTool(&mcp.Tool{Name: "visit", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Mode: "url", Message: "Sign in to Example",
				URL: "https://auth.example.com/authorize?state=abc", ElicitationID: "el-1"})
			if err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s content=%v", res.Action, res.Content != nil)}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "needs-url", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if runs.Add(1) == 1 {
				return nil, mcp.URLElicitationRequiredError([]*mcp.ElicitParams{{Mode: "url", Message: "Authorize access",
					URL: "https://auth.example.com/consent", ElicitationID: "el-2"}})
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran after consent"}}}, nil
		})
	s, err := Start(t.Context(), "test", ServerConfig{Command: "unused", Trusted: true, CallTimeout: "5s"},
		Options{ProtocolVersion: "2025-11-25", Transport: inMemory(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, &runs
}

func callWith(t *testing.T, s *Server, name string, req builtin.Request) builtin.Result {
	t.Helper()
	ctx := toolexec.WithCall(t.Context(), events.ToolCallRequested{RunID: "run", Thread: "th", Call: schema.ToolCall{ID: "call-" + name, Name: name}})
	req.CallID, req.Arguments = "call-"+name, json.RawMessage(`{}`)
	r, err := toolNamed(t, s, name).Call(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

// A server's URL-mode elicitation/create (MCP 2025-11-25) is bridged to
// the person like a form: parley declares the url capability, the
// question keeps its url and elicitationId, has no form and is marked
// with the server that asks, and the person's accept goes back without
// content.
func TestURLModeElicitationBridged(t *testing.T) {
	s, _ := startURLServer(t)
	r := callWith(t, s, "visit", builtin.Request{})
	if r.InputRequired == nil {
		t.Fatalf("want input required, got %s", mustJSON(t, r.Call))
	}
	q := r.InputRequired.InputRequests[BridgeKey].Params
	if got := mustJSON(t, q); got != `{"mode":"url","message":"Sign in to Example","url":"https://auth.example.com/authorize?state=abc","elicitationId":"el-1","_meta":{"dev.parley/mcp_server":{"name":"test","trusted":true}}}` {
		t.Fatalf("question %s", got)
	}
	if err := r.InputRequired.Validate(schema.Rev20251125); err != nil {
		t.Fatalf("bridged url-mode question does not validate: %v", err)
	}
	r = callWith(t, s, "visit", builtin.Request{RequestState: r.InputRequired.RequestState,
		InputResponses: map[string]schema.ElicitResult{BridgeKey: {Action: schema.ActionAccept}}})
	if r.Call == nil || mustJSON(t, r.Call.Content) != `[{"type":"text","text":"accept content=false"}]` {
		t.Fatalf("result %s", mustJSON(t, r))
	}
}

// A URLElicitationRequiredError (-32042) is not a dead end: it becomes
// the person's question (one per URL), the call is sent again once they
// consented, and a decline answers the model without running anything.
func TestURLElicitationRequiredError(t *testing.T) {
	s, runs := startURLServer(t)
	r := callWith(t, s, "needs-url", builtin.Request{})
	if r.InputRequired == nil {
		t.Fatalf("want input required, got %s", mustJSON(t, r.Call))
	}
	if got := mustJSON(t, r.InputRequired.InputRequests); got != `{"url-0":{"method":"elicitation/create","params":{"mode":"url","message":"Authorize access","url":"https://auth.example.com/consent","elicitationId":"el-2","_meta":{"dev.parley/mcp_server":{"name":"test","trusted":true}}}}}` {
		t.Fatalf("input requests %s", got)
	}
	state := r.InputRequired.RequestState
	declined := callWith(t, s, "needs-url", builtin.Request{RequestState: state,
		InputResponses: map[string]schema.ElicitResult{"url-0": {Action: schema.ActionDecline}}})
	if declined.Call == nil || !declined.Call.IsError || !strings.Contains(mustJSON(t, declined.Call), "was not run") || runs.Load() != 1 {
		t.Fatalf("decline: %s (server runs %d)", mustJSON(t, declined), runs.Load())
	}
	r = callWith(t, s, "needs-url", builtin.Request{RequestState: state,
		InputResponses: map[string]schema.ElicitResult{"url-0": {Action: schema.ActionAccept}}})
	if r.Call == nil || r.Call.IsError || mustJSON(t, r.Call.Content) != `[{"type":"text","text":"ran after consent"}]` {
		t.Fatalf("after consent: %s", mustJSON(t, r))
	}
}
