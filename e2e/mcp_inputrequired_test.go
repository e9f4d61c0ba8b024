package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/gate"
	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/mcpclient"
)

// deployServer is an MCP 2026-07-28 server whose "deploy" tool asks for a
// confirmation with an input-required result, then deploys once per
// accepted retry (deploys counts them).
func deployServer(t *testing.T, deploys *atomic.Int32) *mcpclient.Server {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "deployer", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "deploy", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			resp, ok := req.Params.InputResponses["target"].(*mcp.ElicitResult)
			if !ok {
				return &mcp.CallToolResult{RequestState: "deploy-1", InputRequests: mcp.InputRequestMap{"target": &mcp.ElicitParams{
					Message: "Which environment?", RequestedSchema: map[string]any{"type": "object",
						"properties": map[string]any{"env": map[string]any{"type": "string", "enum": []any{"staging", "production"}}},
						"required":   []any{"env"}}}}}, nil
			}
			if resp.Action != "accept" || req.Params.RequestState != "deploy-1" {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "not deployed: " + resp.Action}}}, nil
			}
			deploys.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("deployed to %v", resp.Content["env"])}}}, nil
		})
	s, err := mcpclient.Start(t.Context(), "ops", mcpclient.ServerConfig{Command: "in-process", Trusted: true}, mcpclient.Options{
		Logger: testLogger(t),
		Transport: func() (mcp.Transport, error) {
			ct, st := mcp.NewInMemoryTransports()
			if _, err := srv.Connect(context.Background(), st, nil); err != nil {
				return nil, err
			}
			return ct, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// An MCP 2026-07-28 input-required result pauses the turn with the
// server's question (elicitation.requested, the same path as any
// question); the person's answer is checked, and the call is retried with
// it and the requestState; the server acts once.
func TestMCPInputRequiredOverBus(t *testing.T) {
	var deploys atomic.Int32
	rules := `{"rules":[{"name":"deploy","match":"^deploy","steps":[{"tool_calls":[{"name":"ops__deploy"}]},{"text":"{{.Last.Text}}"}]}],"fallback":"?"}`
	s := start(t, options{rules: rules, sources: []toolexec.Source{deployServer(t, &deploys)},
		gate: &gate.Config{Agents: map[string]gate.AgentConfig{"*": {RequireToolConfirmation: true, Tools: map[string]string{"ops__deploy": gate.ModeNever}}}}})
	s.send("ops", "deploy the release")
	id, q := s.question("ops", 1)
	if q.Message != "Which environment?" || len(q.RequestedSchema.Properties["env"].Enum) != 2 {
		t.Fatalf("question %s", mustMarshal(t, q))
	}
	// An answer outside the schema is refused and the question stays.
	s.answer("ops", id, schema.ActionAccept, map[string]any{"env": "moon"})
	s.rec.await(t, 10*time.Second, "ops", events.TypeElicitationRejected, 1)
	s.answer("ops", id, schema.ActionAccept, map[string]any{"env": "staging"})
	if got := s.completed("ops", 1); got != "deployed to staging" {
		t.Fatalf("turn text %q", got)
	}
	if n := deploys.Load(); n != 1 {
		t.Fatalf("deployed %d times", n)
	}
}
