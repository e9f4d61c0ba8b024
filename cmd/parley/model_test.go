package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/internal/natsserver"
	"github.com/parley-dev/parley/model/openai/openaitest"
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

// `parley dev --model-url URL --model NAME` wiring: the workers run the
// OpenAI-compatible provider, and `parley chat` drives a confirmation
// conversation with it (the model replies are recorded streams).
func TestChatWithOpenAICompatibleModel(t *testing.T) {
	const data = "../../model/openai/testdata/"
	srv := openaitest.New(t,
		openaitest.Reply{File: data + "tool_list.sse"},
		openaitest.Reply{File: data + "tool_delete_reused_id.sse", Replace: map[string]string{"__ID__": "article-2"}},
		openaitest.Reply{File: data + "text_deleted.sse"})
	ns, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	ctx, cancel := context.WithCancel(t.Context())
	cfg := roleConfig{processor: processorFlags{PauseTTL: time.Minute, Concurrency: 4},
		agent: agentFlags{PreExecuteTimeout: 2 * time.Second, modelFlags: modelFlags{ModelURL: srv.URL(), Model: "gpt-4.1-mini",
			ModelTimeout: 5 * time.Second, ModelRetries: 1}}}
	if err := cfg.agent.check(); err != nil {
		t.Fatal(err)
	}
	wait, err := startWorkers(ctx, ns.ClientURL(), []string{"gate", "toolexec", "agent", "processor"}, cfg,
		&env{Globals: &Globals{LogLevel: "error", LogFormat: "text"}, ctx: ctx, stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = wait() })
	// The agent must know delete_entities before the model asks for it:
	// an unknown tool is an error result the scripted model talks past.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	waitToolsRegistered(t, js)
	h := startChat(t, ns.ClientURL(), ctx, "model-chat")
	h.typeLine("delete the draft about page loads")
	h.waitFor("… Thinking…")
	h.waitFor("tool:        delete_entities")
	h.waitFor("Allow? [y/n/c")
	h.typeLine("y") // an accept asks for no instructions
	h.waitFor("→ accepted")
	h.waitFor("assistant: Deleted the draft article.")
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("model requests = %d, want 3", n)
	}
}
