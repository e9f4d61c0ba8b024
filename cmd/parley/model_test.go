package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad model flags are usage errors (exit 2) naming the flag, before any
// connection is made.
func TestModelFlagErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "agents.json")
	if err := os.WriteFile(bad, []byte(`{"agents":{"default":{"temperature":5}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	nats := "--nats=nats://127.0.0.1:1"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"agent", "--model", "gpt-4.1-mini"}, "need --model-url"},
		{[]string{"agent", "--model-url", "localhost:11434/v1", "--model", "m"}, "must start with http:// or https://"},
		{[]string{"agent", "--model-url", "http://localhost:11434/v1"}, "model: required"},
		{[]string{"dev", "--model-url", "http://localhost:11434/v1", "--model", "m", "--agents", bad}, "agents.default.temperature"},
		{[]string{"agent", "--model-url", "http://x/v1", "--model", "m", "--model-retries", "11"}, "--model-retries must be 0 to 10"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append(tt.args, nats), strings.NewReader(""), &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tt.want)
			}
		})
	}
}

// The API key comes from the file, then PARLEY_MODEL_API_KEY, then
// OPENAI_API_KEY.
func TestModelAPIKeyOrder(t *testing.T) {
	t.Setenv("PARLEY_MODEL_API_KEY", "")
	t.Setenv("OPENAI_API_KEY", "sk-openai")
	m := modelFlags{ModelURL: "http://x/v1", Model: "m"}
	if k, _ := m.apiKey(); k != "sk-openai" {
		t.Errorf("key = %q, want OPENAI_API_KEY's", k)
	}
	t.Setenv("PARLEY_MODEL_API_KEY", "sk-parley")
	if k, _ := m.apiKey(); k != "sk-parley" {
		t.Errorf("key = %q, want PARLEY_MODEL_API_KEY's", k)
	}
	f := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(f, []byte("sk-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m.ModelAPIKeyFile = f
	if k, _ := m.apiKey(); k != "sk-file" {
		t.Errorf("key = %q, want the file's (trimmed)", k)
	}
}
