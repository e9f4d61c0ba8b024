package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/parley-dev/parley/internal/version"
)

// TestVersionFlag checks that `parley --version` prints the build's one
// line on stdout and exits 0, before any command runs (no NATS needed).
func TestVersionFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--version"}, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("parley --version: exit %d, stderr %q", code, stderr.String())
	}
	got := strings.TrimSpace(stdout.String())
	if want := version.Get().String(); got != want {
		t.Errorf("parley --version printed %q, want %q", got, want)
	}
	if !strings.HasPrefix(got, "parley ") || !strings.Contains(got, runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("parley --version printed %q, want \"parley <version> ... <os>/<arch>\"", got)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %q", stderr.String())
	}
}
