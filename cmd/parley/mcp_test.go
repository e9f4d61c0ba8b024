package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A bad MCP servers file is a usage error (exit 2) naming the server and
// field, before any connection is made.
func TestMCPConfigUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "servers.json")
	if err := os.WriteFile(bad, []byte(`{"servers":{"files":{"command":"x","url":"http://h"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"toolexec", "--mcp-config", bad},
		{"dev", "--mcp-config", bad, "--data-dir", filepath.Join(dir, "data")},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append(args, "--nats=nats://127.0.0.1:1"), strings.NewReader(""), &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "servers.files.url: command and url are mutually exclusive") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"toolexec", "--mcp-config", filepath.Join(dir, "missing.json")}, strings.NewReader(""), &stdout, &stderr); code != 2 {
		t.Errorf("missing file: exit %d, stderr %q", code, stderr.String())
	}
}
