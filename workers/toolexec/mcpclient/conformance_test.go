package mcpclient

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec/builtin"

	"github.com/parley-dev/parley/internal/testskip"
)

// conformanceClient is parley's MCP client as the conformance suite drives
// it: the test binary run with MCPCLIENT_CONFORMANCE=1 and the scenario
// server's URL as its last argument. It connects as the tool-executor does
// (Start: initialize, tools/list), then calls the scenario's tool through
// the same path as a tool call from the bus. Elicitations are accepted
// with empty content, so the server sees the defaults the SDK fills in.
func conformanceClient(scenario, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts := Options{Logger: log, Version: "conformance"}
	if scenario == "elicitation-sep1034-client-defaults" {
		opts.Elicit = func(context.Context, string, events.ToolCallRequested, schema.ElicitRequestParams) (schema.ElicitResult, error) {
			return schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{}}, nil
		}
	}
	s, err := Start(ctx, "conformance", ServerConfig{URL: url, Trusted: true}, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	var name, args string
	switch scenario {
	case "initialize":
		return nil
	case "tools_call":
		name, args = "add_numbers", `{"a":5,"b":3}`
	case "elicitation-sep1034-client-defaults":
		name, args = "test_client_elicitation_defaults", `{}`
	default:
		return fmt.Errorf("unknown scenario %q", scenario)
	}
	for _, t := range s.Tools() {
		if t.Definition().Name == name {
			r, err := t.Call(ctx, builtin.Request{CallID: "c1", Arguments: json.RawMessage(args)})
			if err != nil {
				return err
			}
			out, _ := json.Marshal(r.Call)
			fmt.Fprintf(os.Stderr, "%s: %s\n", name, out)
			return nil
		}
	}
	return fmt.Errorf("tool %q not listed", name)
}

// moduleRoot is the repository root (two levels above this package's
// parent).
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// requireNode returns path if it exists and node runs; otherwise it fails
// under CI=true and skips with one loud line elsewhere.
func requireNode(t *testing.T, path, what string) {
	t.Helper()
	_, statErr := os.Stat(path)
	_, nodeErr := exec.LookPath("node")
	if statErr == nil && nodeErr == nil {
		return
	}
	testskip.Skip(t, testskip.MCPPackages, fmt.Sprintf("MCP conformance test needs node and %s (%s) (stat: %v, node: %v)", what, path, statErr, nodeErr))
}

// The MCP conformance suite's client scenarios pass with parley's MCP
// client (@modelcontextprotocol/conformance 0.1.16, pinned in
// e2e/testdata/mcp; on Node 20 through the node20 shim, see
// ../shared/mcp/node20-shim or $PARLEY_NODE20_SHIM).
func TestConformanceClientScenarios(t *testing.T) {
	root := moduleRoot(t)
	bin := filepath.Join(root, "e2e", "testdata", "mcp", "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	requireNode(t, bin, "@modelcontextprotocol/conformance")
	env := append(os.Environ(), "MCPCLIENT_CONFORMANCE=1")
	if nodeMajor(t) < 22 {
		shim := os.Getenv("PARLEY_NODE20_SHIM")
		if shim == "" {
			shim = filepath.Join(root, "..", "shared", "mcp", "node20-shim")
		}
		reg := filepath.Join(shim, "register.mjs")
		requireNode(t, reg, "the node20 shim for Node < 22")
		env = append(env, "NODE_OPTIONS=--import "+reg)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, scenario := range []string{"initialize", "tools_call", "elicitation-sep1034-client-defaults"} {
		t.Run(scenario, func(t *testing.T) {
			out := t.TempDir()
			cmd := exec.CommandContext(t.Context(), "node", bin, "client", "--command", self+" -test.run=^$",
				"--scenario", scenario, "--timeout", "30000", "-o", out)
			cmd.Env = env
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("conformance %s: %v\n%s", scenario, err, b)
			}
			checks, _ := filepath.Glob(filepath.Join(out, "*", "checks.json"))
			if len(checks) == 0 {
				t.Fatalf("no checks.json written\n%s", b)
			}
			data, err := os.ReadFile(checks[0])
			if err != nil {
				t.Fatal(err)
			}
			var cs []struct {
				ID, Name, Status, ErrorMessage string
			}
			if err := json.Unmarshal(data, &cs); err != nil {
				t.Fatalf("checks.json: %v\n%s", err, data)
			}
			passed := 0
			for _, c := range cs {
				switch strings.ToUpper(c.Status) {
				case "SUCCESS", "PASS", "PASSED":
					passed++
				case "FAILURE", "FAIL", "FAILED", "ERROR":
					t.Errorf("check %s (%s) failed: %s", c.ID, c.Name, c.ErrorMessage)
				}
			}
			if passed == 0 {
				t.Fatalf("no check passed:\n%s\n%s", data, b)
			}
			t.Logf("%s: %d checks passed", scenario, passed)
		})
	}
}

func nodeMajor(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return 0
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	return major
}
