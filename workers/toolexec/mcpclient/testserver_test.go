package mcpclient

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/parley-dev/parley/internal/testskip"
)

// The test binary doubles as a stdio MCP server: with
// MCPCLIENT_TEST_SERVER=1 it serves testServer on stdin/stdout.
func TestMain(m *testing.M) {
	if os.Getenv("MCPCLIENT_TEST_SERVER") == "1" {
		fmt.Fprintln(os.Stderr, "test server starting in", mustWd(), "with SECRET="+os.Getenv("SECRET")+" GREETING="+os.Getenv("GREETING"))
		srv := newTestServer(&atomic.Int32{})
		if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "test server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv("MCPCLIENT_CONFORMANCE") == "1" {
		if err := conformanceClient(os.Getenv("MCP_CONFORMANCE_SCENARIO"), os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, "conformance client:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(testskip.Run(m))
}

func mustWd() string {
	wd, _ := os.Getwd()
	return wd
}

// hangCancelled receives when a "hang" call is cancelled on the server
// (notifications/cancelled arrived).
var hangCancelled = make(chan struct{}, 1)

var (
	tTrue  = true
	tFalse = false
	png    = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 0x0d}
)

// newTestServer is an MCP server with one tool per behaviour under test;
// count counts the calls of "count".
func newTestServer(count *atomic.Int32) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "test-server", Version: "1"}, &mcp.ServerOptions{})
	obj := map[string]any{"type": "object"}
	srv.AddTool(&mcp.Tool{Name: "count", Description: "counts", InputSchema: obj,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &tFalse, IdempotentHint: false}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n := count.Add(1)
			time.Sleep(300 * time.Millisecond)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("count %d", n)}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "delete-all", Description: "deletes everything", InputSchema: obj,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: &tTrue}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "read", Description: "reads", InputSchema: obj,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, Title: "Read it"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "read " + string(req.Params.Arguments)}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "all-content", Description: "every content kind", InputSchema: obj,
		OutputSchema: map[string]any{"type": "object", "properties": map[string]any{"temperature": map[string]any{"type": "number"}},
			"required": []any{"temperature"}},
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			size := int64(12)
			return &mcp.CallToolResult{
				Meta: mcp.Meta{"com.example/trace": "abc"},
				Content: []mcp.Content{
					&mcp.TextContent{Text: "for you", Annotations: &mcp.Annotations{Audience: []mcp.Role{"user"}, Priority: 0.7}},
					&mcp.TextContent{Text: "for the model", Annotations: &mcp.Annotations{Audience: []mcp.Role{"assistant"}, Priority: 0.3},
						Meta: mcp.Meta{"com.example/k": "v"}},
					&mcp.ImageContent{Data: png, MIMEType: "image/png", Annotations: &mcp.Annotations{Audience: []mcp.Role{"user"}, Priority: 0.5}},
					&mcp.AudioContent{Data: []byte("RIFF0000WAVE"), MIMEType: "audio/wav"},
					&mcp.ResourceLink{URI: "demo://resource/1", Name: "one", MIMEType: "text/plain", Size: &size,
						Annotations: &mcp.Annotations{LastModified: "2025-01-12T15:00:58Z"}},
					&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "demo://resource/2", MIMEType: "text/plain", Text: "two"}},
					&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "demo://resource/3", MIMEType: "application/octet-stream", Blob: []byte{1, 2, 3}}},
				},
				StructuredContent: map[string]any{"temperature": 21.5},
			}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "bad-structured", InputSchema: obj,
		OutputSchema: map[string]any{"type": "object", "properties": map[string]any{"temperature": map[string]any{"type": "number"}},
			"required": []any{"temperature"}},
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "{}"}},
				StructuredContent: map[string]any{"temperature": "warm"}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "fail", InputSchema: obj, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "it failed"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "hang", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			select {
			case hangCancelled <- struct{}{}:
			default:
			}
			return nil, ctx.Err()
		})
	srv.AddTool(&mcp.Tool{Name: "progress", InputSchema: obj, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			tok := req.Params.GetProgressToken()
			for i := 1; i <= 3 && tok != nil; i++ {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3,
					Message: fmt.Sprintf("step %d", i)})
			}
			time.Sleep(50 * time.Millisecond)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "progress_then_return", InputSchema: obj, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			tok := req.Params.GetProgressToken()
			for i := 1; i <= 5 && tok != nil; i++ {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 5})
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?", RequestedSchema: map[string]any{
				"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}, "required": []any{"name"}}})
			if err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s %v", res.Action, res.Content["name"])}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "deploy", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			resp, ok := req.Params.InputResponses["confirm"].(*mcp.ElicitResult)
			if !ok {
				return &mcp.CallToolResult{RequestState: "state-1", InputRequests: mcp.InputRequestMap{"confirm": &mcp.ElicitParams{
					Message: "Deploy to production?", RequestedSchema: map[string]any{"type": "object",
						"properties": map[string]any{"reason": map[string]any{"type": "string"}}}}}}, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{
				Text: fmt.Sprintf("%s %v state=%s", resp.Action, resp.Content["reason"], req.Params.RequestState)}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "exit", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			fmt.Fprintln(os.Stderr, "exiting on request")
			os.Exit(3)
			return nil, nil
		})
	return srv
}

// inMemory returns a transport factory serving srv in-process, one
// session per connection.
func inMemory(t *testing.T, srv *mcp.Server) func() (mcp.Transport, error) {
	return func() (mcp.Transport, error) {
		ct, st := mcp.NewInMemoryTransports()
		ss, err := srv.Connect(t.Context(), st, nil)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = ss.Close() })
		return ct, nil
	}
}

var _ = base64.StdEncoding
