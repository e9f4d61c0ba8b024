// Package mcpschema finds the official MCP JSON schemas for the
// conformance tests (package schema, e2e, cmd/parley), and makes their
// absence loud: under CI=true a missing schema directory fails the tests;
// elsewhere they are skipped and the test binary says so in the block of
// internal/testskip.
// Import it only from _test.go files.
//
// The schemas are the schema.json files of the MCP specification
// repository (github.com/modelcontextprotocol/modelcontextprotocol,
// schema/<revision>/schema.json), one directory per revision:
// <dir>/2025-06-18/schema.json, <dir>/2025-11-25/schema.json, ...
// <dir> is $PARLEY_MCP_SCHEMAS, or shared/mcp beside the checkout
// (../shared/mcp from the module root).
//
// Of parley's packages it imports only internal/testskip.
package mcpschema

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/parley-dev/parley/internal/testskip"
)

// EnvDir names the variable that points at the schema directory.
const EnvDir = "PARLEY_MCP_SCHEMAS"

// Dir returns the schema directory holding rev (e.g. "2025-06-18"),
// absolute. When it is missing it fails tb under CI=true and otherwise
// skips tb, named in the block of Run (testskip.Skip).
func Dir(tb testing.TB, rev string) string {
	tb.Helper()
	dir, why := find(rev)
	if dir == "" {
		testskip.Skip(tb, testskip.MCPSchemas, why)
	}
	return dir
}

// Find is Dir for a test that goes on without the schema check: it
// returns the directory, or "" and why (recording the test for Run's
// block as one that ran without the check; failing tb under CI=true).
func Find(tb testing.TB, rev string) (dir, why string) {
	tb.Helper()
	dir, why = find(rev)
	if dir == "" {
		testskip.Record(tb, testskip.MCPSchemas, why)
	}
	return dir, why
}

// find returns the schema directory holding rev, or "" and why not.
func find(rev string) (dir, why string) {
	dir, err := lookup()
	if err == nil {
		if _, err = os.Stat(filepath.Join(dir, rev, "schema.json")); err == nil {
			return dir, ""
		}
	}
	return "", fmt.Sprintf("official MCP %s schema not found (%v): set %s to a directory of <revision>/schema.json from github.com/modelcontextprotocol/modelcontextprotocol/tree/main/schema (see docs/MCP.md)", rev, err, EnvDir)
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

// Run runs the tests (call it from TestMain: os.Exit(mcpschema.Run(m))):
// testskip.Run, whose block names the tests Dir or Find skipped.
func Run(m *testing.M) int { return testskip.Run(m) }
