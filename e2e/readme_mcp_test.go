package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/mcpclient"
)

// The "try it" of docs/MCP.md runs `parley dev --mcp-config
// docs/mcp-try/servers.json --rules docs/mcp-try/rules.json
// --form-revision 2025-11-25`. The same two files, with the server started
// from the pinned npm package instead of npx, must work as it says:
// every tool the rules call exists on the server, "echo ..." echoes, and
// "ask me something" pauses with the server's form.
func TestReadmeMCPTry(t *testing.T) {
	js := npmPackage(t, everythingJS)
	cfg, err := mcpclient.LoadConfig(filepath.Join("..", "docs", "mcp-try", "servers.json"))
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := cfg.Servers["everything"]
	if !ok || !sc.Trusted || sc.Command != "npx" {
		t.Fatalf("docs/mcp-try/servers.json: want the trusted npx server-everything, got %+v", cfg.Servers)
	}
	sc.Command, sc.Args = "node", []string{js, "stdio"}
	cfg.Servers["everything"] = sc
	srv := startServer(t, cfg)

	rules, err := os.ReadFile(filepath.Join("..", "docs", "mcp-try", "rules.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Rules []struct {
			Steps []struct {
				ToolCalls []struct {
					Name string `json:"name"`
				} `json:"tool_calls"`
			} `json:"steps"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(rules, &rf); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, tl := range srv.Tools() {
		have[srv.Name()+"__"+tl.Definition().Name] = true // the namespaced name the model sees
	}
	for _, r := range rf.Rules {
		for _, st := range r.Steps {
			for _, c := range st.ToolCalls {
				if !have[c.Name] {
					t.Errorf("docs/mcp-try/rules.json calls %s, which server-everything does not have (it has %v)", c.Name, have)
				}
			}
		}
	}

	s := start(t, options{rules: string(rules), sources: []toolexec.Source{srv}, formRevision: schema.Rev20251125})
	s.send("try-echo", "echo hello parley")
	// Unannotated by the default gate? echo is read-only on a trusted
	// server, so it runs without a question.
	if got := s.completed("try-echo", 1); !strings.Contains(got, "hello parley") {
		t.Errorf("echo: turn text %q", got)
	}
	s.send("try-ask", "ask me something")
	if _, q := s.question("try-ask", 1); len(q.RequestedSchema.Properties) == 0 {
		t.Errorf("ask: question without a form: %+v", q)
	}
}
