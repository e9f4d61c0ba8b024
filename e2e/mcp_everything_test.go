package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/gate"
	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
	"github.com/parley-dev/parley/workers/toolexec/mcpclient"

	"github.com/parley-dev/parley/internal/testskip"
)

// npmPackage returns the path of a file of an npm package installed in
// e2e/testdata/mcp (`npm ci --prefix e2e/testdata/mcp`, done by .ci/run). Missing, it fails
// the test under CI=true and skips it, with one loud line, otherwise.
func npmPackage(t *testing.T, rel string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata", "mcp", "node_modules", rel))
	if err != nil {
		t.Fatal(err)
	}
	_, statErr := os.Stat(path)
	_, nodeErr := exec.LookPath("node")
	if statErr == nil && nodeErr == nil {
		return path
	}
	testskip.Skip(t, testskip.MCPPackages, fmt.Sprintf("MCP test needs node and %s (stat: %v, node: %v)", rel, statErr, nodeErr))
	return ""
}

const everythingJS = "@modelcontextprotocol/server-everything/dist/index.js"

// everything starts @modelcontextprotocol/server-everything over stdio.
func everything(t *testing.T, trusted bool) *mcpclient.Server {
	t.Helper()
	js := npmPackage(t, everythingJS)
	cfg, err := mcpclient.ParseConfig([]byte(fmt.Sprintf(`{"servers":{"everything":{"command":"node","args":[%q,"stdio"],"trusted":%v}}}`,
		js, trusted)), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, cfg)
}

// everythingHTTP starts server-everything's streamable HTTP transport on a
// free loopback port and connects to it.
func everythingHTTP(t *testing.T) *mcpclient.Server {
	t.Helper()
	js := npmPackage(t, everythingJS)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command("node", js, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything did not listen on %d", port)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cfg, err := mcpclient.ParseConfig([]byte(fmt.Sprintf(`{"servers":{"everything":{"url":"http://127.0.0.1:%d/mcp","trusted":true,"headers":{"X-Test":"1"}}}}`, port)), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, cfg)
}

func startServer(t *testing.T, cfg *mcpclient.Config) *mcpclient.Server {
	t.Helper()
	servers, err := mcpclient.StartAll(t.Context(), cfg, mcpclient.Options{Logger: testLogger(t), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = servers[0].Close() })
	return servers[0]
}

// toolResults collects every tool result published on the bus.
type toolResults struct {
	mu  sync.Mutex
	all []events.ToolResult
}

func watchToolResults(t *testing.T, s *system) *toolResults {
	t.Helper()
	r := &toolResults{}
	nc := s.srv.Connect(t)
	sub, err := nc.Subscribe(events.ToolResultSubject(">"), func(m *nats.Msg) {
		e, err := events.Decode(events.Header(m.Header), m.Data)
		if err != nil {
			t.Errorf("decoding tool result: %v", err)
			return
		}
		res, err := events.Data[events.ToolResult](e)
		if err != nil {
			t.Errorf("decoding tool result: %v", err)
			return
		}
		r.mu.Lock()
		r.all = append(r.all, res)
		r.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return r
}

func (r *toolResults) byCallID() map[string]*schema.CallToolResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]*schema.CallToolResult{}
	for _, res := range r.all {
		out[res.CallID] = res.Result
	}
	return out
}

// everythingRules call server-everything's tools.
const everythingRules = `{"rules":[
 {"name":"content","match":"^show every content kind",
  "steps":[{"tool_calls":[
    {"name":"everything__get-tiny-image"},
    {"name":"everything__get-annotated-message","arguments":{"messageType":"error","includeImage":true}},
    {"name":"everything__get-annotated-message","arguments":{"messageType":"debug"}},
    {"name":"everything__get-resource-reference","arguments":{"resourceType":"Blob","resourceId":2}},
    {"name":"everything__get-resource-links","arguments":{"count":2}},
    {"name":"everything__get-structured-content","arguments":{"location":"Chicago"}},
    {"name":"everything__echo","arguments":{"message":"hi"}}]},
   {"text":"done"}]},
 {"name":"progress","match":"^run long",
  "steps":[{"tool_calls":[{"name":"everything__trigger-long-running-operation","arguments":{"duration":1,"steps":3}}]},{"text":"finished"}]},
 {"name":"toggle","match":"^toggle logging",
  "steps":[{"tool_calls":[{"name":"everything__toggle-simulated-logging"}]},{"text":"{{.Last.Text}}"}]},
 {"name":"echo","match":"^echo",
  "steps":[{"tool_calls":[{"name":"everything__echo","arguments":{"message":"hello"}}]},{"text":"{{.Last.Text}}"}]}
],"fallback":"?"}`

// callIDs maps the tool calls of the n-th assistant tool-call step to
// their IDs, in order, from the tool results seen for the thread's run.
func blocksOfType(r *schema.CallToolResult, typ string) []schema.Content {
	var out []schema.Content
	for _, c := range r.Content {
		if c.ContentType() == typ {
			out = append(out, c)
		}
	}
	return out
}

// Every content kind of a real MCP server (stdio and streamable HTTP),
// annotated audiences and structured content reach the agent unchanged
// over the bus; read-only tools of a trusted server run without a
// question.
func TestEverythingContentKinds(t *testing.T) {
	for _, transport := range []string{"stdio", "streamableHttp"} {
		t.Run(transport, func(t *testing.T) {
			var srv *mcpclient.Server
			if transport == "stdio" {
				srv = everything(t, true)
			} else {
				srv = everythingHTTP(t)
			}
			s := start(t, options{rules: everythingRules, sources: []toolexec.Source{srv}})
			results := watchToolResults(t, s)
			s.send("content", "show every content kind")
			if got := s.completed("content", 1); got != "done" {
				t.Fatalf("turn text %q", got)
			}
			if n := len(s.rec.matching("content", events.TypeElicitationRequested)); n != 0 {
				t.Fatalf("%d questions for read-only tools of a trusted server", n)
			}
			eventually(t, 5*time.Second, "seven tool results", func() bool { return len(results.byCallID()) == 7 })
			var image, annotated, annotatedUser, blob, links, structured, echo bool
			for _, r := range results.byCallID() {
				if r == nil || r.IsError {
					t.Fatalf("tool result %s", mustMarshal(t, r))
				}
				if err := r.Validate(nil); err != nil {
					t.Errorf("result does not validate: %v", err)
				}
				for _, c := range r.Content {
					switch c := c.(type) {
					case *schema.ImageContent:
						image = image || (c.MIMEType == "image/png" && len(c.Data) > 20)
						if c.Annotations != nil && len(c.Annotations.Audience) == 1 && c.Annotations.Audience[0] == schema.RoleUser {
							annotatedUser = true
						}
					case *schema.TextContent:
						if a := c.Annotations; a != nil && a.Priority != nil && *a.Priority == 1.0 &&
							len(a.Audience) == 2 && a.Audience[0] == schema.RoleUser && a.Audience[1] == schema.RoleAssistant {
							annotated = true
						}
						echo = echo || c.Text == "Echo: hi"
					case *schema.EmbeddedResource:
						blob = blob || (c.Resource.Blob != nil && strings.HasPrefix(c.Resource.URI, "demo://resource/dynamic/blob/2"))
					case *schema.ResourceLink:
						links = links || strings.HasPrefix(c.URI, "demo://resource/dynamic/")
					}
				}
				if r.StructuredContent != nil {
					_, okT := r.StructuredContent["temperature"].(float64)
					_, okC := r.StructuredContent["conditions"].(string)
					structured = okT && okC
				}
			}
			for what, ok := range map[string]bool{"image": image, "text with audience [user assistant] priority 1": annotated,
				"image with audience [user]": annotatedUser, "embedded blob resource": blob, "resource_link": links,
				"structuredContent": structured, "echo text": echo} {
				if !ok {
					t.Errorf("no %s in the results: %s", what, mustMarshal(t, results.byCallID()))
				}
			}
			// Progress of a long-running tool reaches the thread's progress subject.
			progress := make(chan schema.Progress, 16)
			nc := s.srv.Connect(t)
			sub, err := nc.Subscribe(events.ChatSubject("long", events.ChatProgress), func(m *nats.Msg) {
				e, err := events.Decode(events.Header(m.Header), m.Data)
				if err != nil || events.TypeOf(e) != events.TypeProgress {
					t.Errorf("progress event: %v %v", err, e)
					return
				}
				p, err := events.Data[schema.Progress](e)
				if err != nil {
					t.Error(err)
					return
				}
				if e.Source() != events.SourceToolexec {
					return // the agent's own progress of the turn
				}
				progress <- p
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			s.send("long", "run long")
			if got := s.completed("long", 1); got != "finished" {
				t.Fatalf("turn text %q", got)
			}
			var got []schema.Progress
			timeout := time.After(5 * time.Second)
			for len(got) < 2 {
				select {
				case p := <-progress:
					got = append(got, p)
				case <-timeout:
					t.Fatalf("progress seen: %s", mustMarshal(t, got))
				}
			}
			for i, p := range got {
				status, _ := p.Meta[schema.MetaStatusItem].(string)
				if p.ProgressToken.IsInt() || !strings.HasPrefix(p.ProgressToken.String(), "call_") || p.Total == nil || *p.Total != 3 ||
					p.Progress != float64(i+1) || !strings.HasPrefix(status, "Running everything__trigger-long-running-operation") {
					t.Fatalf("progress %d: %s", i, mustMarshal(t, p))
				}
			}
		})
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
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

// A tool of a reference server that is not read-only is gated by
// confirmation end to end: nothing runs until the person accepts, and a
// decline never reaches the server. An untrusted server's read-only tool
// is gated too (its annotations are ignored).
func TestEverythingGatedByConfirmation(t *testing.T) {
	trusted := everything(t, true)
	s := start(t, options{rules: everythingRules, sources: []toolexec.Source{trusted}})
	s.send("toggle", "toggle logging")
	id, q := s.question("toggle", 1)
	tc, err := q.Meta.ToolCall()
	if err != nil || tc == nil || tc.Name != "everything__toggle-simulated-logging" {
		t.Fatalf("question %s (%v)", mustMarshal(t, q), err)
	}
	s.answer("toggle", id, schema.ActionDecline, nil)
	if got := s.completed("toggle", 1); strings.Contains(got, "Started simulated") || strings.Contains(got, "Stopped simulated") {
		t.Fatalf("declined tool ran: %q", got)
	}
	s.send("toggle", "toggle logging again")
	id, _ = s.question("toggle", 2)
	s.answer("toggle", id, schema.ActionAccept, nil)
	if got := s.completed("toggle", 2); !strings.Contains(got, "Started simulated") {
		t.Fatalf("accepted tool: %q", got)
	}

	untrusted := everything(t, false)
	s2 := start(t, options{rules: everythingRules, sources: []toolexec.Source{untrusted}})
	s2.send("echo", "echo please")
	id, _ = s2.question("echo", 1)
	s2.answer("echo", id, schema.ActionAccept, nil)
	if got := s2.completed("echo", 1); got != "Echo: hello" {
		t.Fatalf("untrusted echo: %q", got)
	}
}

// server-everything's form elicitation (every field kind of MCP
// 2025-11-25: strings with formats, integer, number, boolean, untitled,
// titled and legacy enums, multi-selects), asked by the server during a
// tool call, reaches the person as elicitation.requested on the thread; an
// invalid answer is refused and never forwarded; an accepted answer reaches
// the server as sent; after a decline or cancel the turn goes on and the
// server's request is ended.
func TestEverythingElicitationOverBus(t *testing.T) {
	srv := everything(t, true)
	rules := `{"rules":[{"name":"ask","match":"^ask me","steps":[{"tool_calls":[{"name":"everything__trigger-elicitation-request"}]},{"text":"{{.Last.Text}}"}]}],"fallback":"?"}`
	// Its form uses 2025-11-25 field kinds: the clients must render that revision.
	s := start(t, options{rules: rules, sources: []toolexec.Source{srv}, formRevision: schema.Rev20251125,
		gate: &gate.Config{Agents: map[string]gate.AgentConfig{"*": {RequireToolConfirmation: true,
			Tools: map[string]string{"everything__trigger-elicitation-request": gate.ModeNever}}}}})
	full := map[string]any{
		"name": "Ada", "check": true, "firstLine": "Once", "email": "ada@example.com", "homepage": "https://example.com",
		"birthdate": "1815-12-10", "integer": 7, "number": 2.5, "untitledSingleSelectEnum": "Monica",
		"untitledMultipleSelectEnum": []any{"Guitar"}, "titledSingleSelectEnum": "hero-1",
		"titledMultipleSelectEnum": []any{"fish-1"}, "legacyTitledEnum": "pet-1",
	}
	for i, tc := range []struct {
		action  schema.ElicitAction
		content map[string]any
		want    string
	}{
		{schema.ActionAccept, full, "- Name: Ada"},
		// The agent settles a declined or cancelled input request itself;
		// the server's waiting request then gets the same action.
		{schema.ActionDecline, nil, "declined"},
		{schema.ActionCancel, nil, "cancelled"},
	} {
		thread := "ask-" + string(tc.action)
		s.send(thread, "ask me something")
		id, q := s.question(thread, 1)
		if len(q.RequestedSchema.Properties) != 13 || q.RequestedSchema.Properties["integer"].Type != "integer" {
			t.Fatalf("question %s", mustMarshal(t, q))
		}
		if i == 0 {
			// Out of range: refused by parley, the server never sees it.
			bad := map[string]any{"name": "Ada", "integer": 500}
			s.answer(thread, id, schema.ActionAccept, bad)
			s.rec.await(t, 10*time.Second, thread, events.TypeElicitationRejected, 1)
		}
		s.answer(thread, id, tc.action, tc.content)
		got := s.completed(thread, 1)
		if !strings.Contains(got, tc.want) {
			t.Fatalf("%s: turn text %q", tc.action, got)
		}
		// The server's call ended: after accept it answered; after decline
		// or cancel the server was told.
		eventually(t, 5*time.Second, "the server's call to end", func() bool { return srv.Running() == 0 })
		if i == 0 && (!strings.Contains(got, `"Guitar"`) || !strings.Contains(got, `"number": 2.5`) || strings.Contains(got, "500")) {
			t.Fatalf("accepted content did not reach the server as sent: %q", got)
		}
	}
}

// Closing the connection to server-everything while its call waits for a
// person's answer does not wait out the stdio transport's 5 s before
// SIGTERM: the waiting question is cancelled and the call ends first (the
// server does not exit on a closed stdin while its request is unanswered;
// `parley dev` took 5 s more to stop).
func TestEverythingCloseWithQuestionWaiting(t *testing.T) {
	js := npmPackage(t, everythingJS)
	cfg, err := mcpclient.ParseConfig([]byte(fmt.Sprintf(`{"servers":{"everything":{"command":"node","args":[%q,"stdio"],"trusted":true}}}`, js)), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	servers, err := mcpclient.StartAll(t.Context(), cfg, mcpclient.Options{Logger: testLogger(t), Version: "test", ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	srv := servers[0]
	var tl builtin.Tool
	for _, x := range srv.Tools() {
		if x.Definition().Name == "trigger-elicitation-request" {
			tl = x
		}
	}
	if tl == nil {
		_ = srv.Close()
		t.Fatal("server-everything has no trigger-elicitation-request")
	}
	ctx := toolexec.WithCall(t.Context(), events.ToolCallRequested{RunID: "r", Thread: "th", Call: schema.ToolCall{ID: "c", Name: "everything__trigger-elicitation-request"}})
	r, err := tl.Call(ctx, builtin.Request{CallID: "c"})
	if err != nil || r.InputRequired == nil {
		_ = srv.Close()
		t.Fatalf("the call did not wait for a person: %v %+v", err, r)
	}
	start := time.Now()
	_ = srv.Close()
	// The transport's grace before SIGTERM is 5 s; a clean close takes a
	// fraction of a second.
	if d := time.Since(start); d >= 4*time.Second {
		t.Errorf("Close took %v: the server was left waiting for its question's answer", d)
	}
}
