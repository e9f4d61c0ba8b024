package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/gate"
	"github.com/parley-dev/parley/workers/toolexec"
)

// URL-mode elicitation (MCP 2025-11-25) of server-everything over the bus,
// both ways a server asks: its elicitation/create with mode "url" (the
// request path) and a URLElicitationRequiredError (-32042, the error path).
// The question reaches the person as the same elicitation.requested with
// its full url and elicitationId and no form; an answer with content is
// refused (the question stays open); accept without content is consent,
// and the server gets exactly the action.
func TestEverythingURLElicitationOverBus(t *testing.T) {
	srv := everything(t, true)
	const target = "https://auth.example.com/authorize?client=parley&state=abc"
	rules := `{"rules":[` +
		`{"name":"visit","match":"^visit$","steps":[{"tool_calls":[{"name":"everything__trigger-url-elicitation","arguments":{"url":"` + target + `","message":"Sign in to Example"}}]},{"text":"{{.Last.Text}}"}]},` +
		`{"name":"prereq","match":"^prereq$","steps":[{"tool_calls":[{"name":"everything__trigger-url-elicitation","arguments":{"url":"` + target + `","errorPath":true}}]},{"text":"{{.Last.Text}}"}]}` +
		`],"fallback":"?"}`
	s := start(t, options{rules: rules, sources: []toolexec.Source{srv}, formRevision: schema.Rev20251125,
		gate: &gate.Config{Agents: map[string]gate.AgentConfig{"*": {RequireToolConfirmation: true,
			Tools: map[string]string{"everything__trigger-url-elicitation": gate.ModeNever}}}}})

	// Request path.
	s.send("url-visit", "visit")
	id, q := s.question("url-visit", 1)
	if !q.IsURLMode() || q.URL != target || q.ElicitationID == "" || q.URLHost() != "auth.example.com" ||
		q.Message != "Sign in to Example" || len(q.RequestedSchema.Properties) != 0 {
		t.Fatalf("question %s", mustMarshal(t, q))
	}
	// The event's data is valid MCP 2025-11-25 elicitation/create params.
	for _, e := range s.rec.matching("url-visit", events.TypeElicitationRequested) {
		validateJSON(t, mcpSchema(t, "2025-11-25", "#/$defs/ElicitRequest"), "url-mode elicitation.requested",
			[]byte(`{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":`+string(e.Data())+`}`))
	}
	// Content is never part of a URL-mode answer: refused, still open.
	s.answer("url-visit", id, schema.ActionAccept, map[string]any{"code": "123"})
	rej := s.rec.await(t, 10*time.Second, "url-visit", events.TypeElicitationRejected, 1)
	if r, _ := events.Data[events.ElicitationRejected](rej); r.Reason != events.RejectInvalidContent {
		t.Fatalf("rejection %s", rej.Data())
	}
	s.answer("url-visit", id, schema.ActionAccept, nil)
	got := s.completed("url-visit", 1)
	if !strings.Contains(got, "User completed the URL elicitation flow") || !strings.Contains(got, "Elicitation ID: "+q.ElicitationID) ||
		!strings.Contains(got, `"action": "accept"`) || strings.Contains(got, "content") {
		t.Fatalf("turn text %q", got)
	}
	eventually(t, 5*time.Second, "the server's call to end", func() bool { return srv.Running() == 0 })

	// Error path: the prerequisite URL is asked first; after consent the
	// call is sent again and the server asks its own URL.
	s.send("url-prereq", "prereq")
	id, q = s.question("url-prereq", 1)
	if !q.IsURLMode() || q.URL != "https://modelcontextprotocol.io" || q.ElicitationID == "" {
		t.Fatalf("prerequisite question %s", mustMarshal(t, q))
	}
	s.answer("url-prereq", id, schema.ActionAccept, nil)
	id, q = s.question("url-prereq", 2)
	if !q.IsURLMode() || q.URL != target {
		t.Fatalf("second question %s", mustMarshal(t, q))
	}
	s.answer("url-prereq", id, schema.ActionAccept, nil)
	if got := s.completed("url-prereq", 1); !strings.Contains(got, "User completed the URL elicitation flow") {
		t.Fatalf("turn text %q", got)
	}
}
