package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGatewayFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gateway"}, "--token-file (development)"},
		{[]string{"gateway", "--jwt-issuer", "https://idp"}, "go together"},
		{[]string{"gateway", "--token-file", "/nonexistent/tokens"}, "tokens"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, strings.NewReader(""), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("parley %v = %d, stderr %q; want 2 naming %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// devToken creates the development token once and reads it back after.
func TestDevToken(t *testing.T) {
	dir := t.TempDir()
	st, tok, err := devToken(dir)
	if err != nil || len(tok) < 16 || st[tok] != "dev" {
		t.Fatalf("devToken = %v, %q, %v", st, tok, err)
	}
	info, err := os.Stat(filepath.Join(dir, "gateway-tokens"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v; want 0600", err, info.Mode())
	}
	_, again, err := devToken(dir)
	if err != nil || again != tok {
		t.Fatalf("second devToken = %q, %v; want the same token %q", again, err, tok)
	}
}
