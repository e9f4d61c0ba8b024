package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// parley dev with its gateway on exits, non-zero and naming the cause,
// when a worker cannot start (an MCP server that cannot be started): the
// gateway stops with the workers instead of keeping dev up with nothing
// behind it (found by a newcomer following README with the example
// config).
func TestDevWithGatewayExitsWhenAWorkerDies(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "servers.json")
	if err := os.WriteFile(cfg, []byte(`{"servers":{"bad":{"command":"/nonexistent/mcp-server"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"dev", "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0",
			"--gateway-listen", "127.0.0.1:0", "--mcp-config", cfg}, strings.NewReader(""), &stdout, &stderr)
	}()
	select {
	case code := <-done:
		if code == 0 {
			t.Fatalf("dev exited 0; want non-zero\nstderr:\n%s", stderr.String())
		}
		if !strings.Contains(stderr.String(), `"bad"`) && !strings.Contains(stderr.String(), "bad:") {
			t.Errorf("dev's error does not name the MCP server:\n%s", stderr.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("dev still running 90s after its tool-executor could not start\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}
