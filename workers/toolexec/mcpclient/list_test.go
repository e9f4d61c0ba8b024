package mcpclient

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// tools/list is read page by page (the server here pages by 2), and
// notifications/tools/list_changed re-reads it: an added tool appears, a
// removed one disappears, and Changed fires.
func TestToolListPagesAndListChanged(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "paged", Version: "1"}, &mcp.ServerOptions{PageSize: 2})
	add := func(name string) {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
			})
	}
	for i := range 5 {
		add(fmt.Sprintf("t%d", i))
	}
	s, err := Start(t.Context(), "paged", ServerConfig{Command: "unused"}, Options{Transport: inMemory(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	names := func() string {
		var out []string
		for _, tl := range s.Tools() {
			out = append(out, tl.Definition().Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(); got != "t0,t1,t2,t3,t4" {
		t.Fatalf("tools %s, want all 5 pages' tools", got)
	}
	<-s.Changed() // the first listing
	add("t5")
	srv.RemoveTools("t0")
	eventually(t, 5*time.Second, "the re-read tool list", func() bool { return names() == "t1,t2,t3,t4,t5" })
	select {
	case <-s.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("Changed did not fire after tools/list_changed")
	}
}

// The tool-executor replica holding a bridged call died while the person
// decided: the retry that carries the answer reaches a replica without the
// call. It is retried later (nothing was sent, so NotStarted) for
// UnknownHandleGrace, then answered "outcome unknown", never re-run.
func TestAnswerForCallHeldElsewhere(t *testing.T) {
	s, count := startInMemory(t, true, Options{})
	ctx := toolexec.WithCall(t.Context(), events.ToolCallRequested{RunID: "run", Thread: "th", Call: schema.ToolCall{ID: "c1", Name: "test__count"}})
	req := builtin.Request{CallID: "c1", RequestState: bridgePrefix + "gone-handle",
		InputResponses: map[string]schema.ElicitResult{BridgeKey: {Action: schema.ActionAccept}}}
	_, err := toolNamed(t, s, "count").Call(ctx, req)
	if err == nil || !notStartedErr(err) || !strings.Contains(err.Error(), "not held by this tool-executor") {
		t.Fatalf("first retry: %v, want a retry-later error that says nothing was sent", err)
	}
	// The grace has passed.
	s.pmu.Lock()
	s.unknown["gone-handle"] = time.Now().Add(-UnknownHandleGrace - time.Second)
	s.pmu.Unlock()
	r, err := toolNamed(t, s, "count").Call(ctx, req)
	if err != nil || r.Call == nil || !r.Call.IsError || !strings.Contains(mustJSON(t, r.Call), "Outcome unknown") {
		t.Fatalf("after the grace: %v %s", err, mustJSON(t, r))
	}
	if n := count.Load(); n != 0 {
		t.Fatalf("the tool ran %d times", n)
	}
}

func notStartedErr(err error) bool {
	ns, ok := err.(interface{ NotStarted() bool })
	return ok && ns.NotStarted()
}
