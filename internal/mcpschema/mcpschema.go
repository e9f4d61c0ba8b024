// Package mcpschema finds the official MCP JSON schemas for the
// conformance tests (package schema, e2e, cmd/parley), and makes their
// absence loud: under CI=true a missing schema directory fails the tests;
// elsewhere they are skipped and the test binary says so in one line.
// Import it only from _test.go files.
//
// The schemas are the schema.json files of the MCP specification
// repository (github.com/modelcontextprotocol/modelcontextprotocol,
// schema/<revision>/schema.json), one directory per revision:
// <dir>/2025-06-18/schema.json, <dir>/2025-11-25/schema.json, ...
// <dir> is $PARLEY_MCP_SCHEMAS, or shared/mcp beside the checkout
// (../shared/mcp from the module root).
package mcpschema

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// EnvDir names the variable that points at the schema directory.
const EnvDir = "PARLEY_MCP_SCHEMAS"

var (
	mu      sync.Mutex
	skipped []string
)

// Dir returns the schema directory holding rev (e.g. "2025-06-18"),
// absolute. When it is missing it fails tb under CI=true and otherwise
// skips tb, recording the test for the summary line of Run.
func Dir(tb testing.TB, rev string) string {
	tb.Helper()
	dir, why := Find(tb, rev)
	if dir == "" {
		tb.Skip(why)
	}
	return dir
}

// Find is Dir for a test that goes on without the schema check: it
// returns the directory, or "" and why (recording the test for Run's
// line; failing tb under CI=true).
func Find(tb testing.TB, rev string) (dir, why string) {
	tb.Helper()
	dir, err := lookup()
	if err == nil {
		if _, err = os.Stat(filepath.Join(dir, rev, "schema.json")); err == nil {
			return dir, ""
		}
	}
	why = fmt.Sprintf("official MCP %s schema not found (%v): set %s to a directory of <revision>/schema.json from github.com/modelcontextprotocol/modelcontextprotocol/tree/main/schema (see README)", rev, err, EnvDir)
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s; CI=true requires the MCP conformance checks", why)
	}
	mu.Lock()
	if !slices.Contains(skipped, tb.Name()) {
		skipped = append(skipped, tb.Name())
	}
	mu.Unlock()
	return "", why
}

// lookup returns $PARLEY_MCP_SCHEMAS, or ../shared/mcp from the module
// root (the directory above the working directory holding go.mod).
func lookup() (string, error) {
	if dir := os.Getenv(EnvDir); dir != "" {
		return filepath.Abs(dir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(filepath.Dir(dir), "shared", "mcp"), nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}

// Run runs the tests (call it from TestMain: os.Exit(mcpschema.Run(m)))
// and, when Dir or Find skipped a check, prints one line naming them and
// why: on the terminal when there is one (go test hides a passing
// package's output), else on stderr. It returns m.Run's status.
func Run(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if len(skipped) > 0 {
		// go test hides the output of a passing package unless -v: a
		// person at a terminal gets the line there.
		var w io.Writer = os.Stderr
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			defer tty.Close()
			w = tty
		}
		fmt.Fprintf(w, "!!! MCP CONFORMANCE NOT CHECKED: %d test(s) skipped (%s): the official MCP schemas are missing; set %s (see README), CI=true fails instead\n",
			len(skipped), strings.Join(skipped, ", "), EnvDir)
	}
	return code
}
