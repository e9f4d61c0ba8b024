package bench

import (
	"context"
	"encoding/json"

	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// Names of the bench's no-op tools.
const (
	toolRead  = "bench_read"
	toolWrite = "bench_write"
)

// benchRules makes the scripted model call bench_read (allowed by the
// default gate: it is read-only) or bench_write (not read-only, so the
// default gate asks for a confirmation), then answer.
const benchRules = `{
  "rules": [
    {"name": "bench-read", "match": "^bench read",
     "steps": [{"tool_calls": [{"name": "bench_read", "arguments": {"what": "status"}}]},
               {"text": "Read: {{.Last.Text}}"}]},
    {"name": "bench-write", "match": "^bench write",
     "steps": [{"tool_calls": [{"name": "bench_write", "arguments": {"value": "x"}}]},
               {"text": "{{if hasPrefix .Last.Text \"User declined\"}}Nothing written.{{else}}Written: {{.Last.Text}}{{end}}"}]}
  ],
  "fallback": "The bench only reads and writes."
}`

// noopTool is a built-in tool that does nothing and answers "ok".
type noopTool struct{ def schema.Tool }

func (t noopTool) Definition() schema.Tool { return t.def }

func (t noopTool) Call(context.Context, builtin.Request) (builtin.Result, error) {
	return builtin.Result{Call: &schema.CallToolResult{Content: schema.ContentList{schema.Text("ok")}}}, nil
}

func benchTools() []builtin.Tool {
	return []builtin.Tool{
		noopTool{schema.Tool{
			Name: toolRead, Title: "Bench read", Description: "Reads nothing; the benchmark's read-only no-op.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"what":{"type":"string"}}}`),
			Annotations: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true), OpenWorldHint: schema.Bool(false)},
		}},
		noopTool{schema.Tool{
			Name: toolWrite, Title: "Bench write", Description: "Writes nothing; the benchmark's no-op that needs a confirmation.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"value":{"type":"string"}}}`),
			Annotations: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(false), DestructiveHint: schema.Bool(false),
				IdempotentHint: schema.Bool(true), OpenWorldHint: schema.Bool(false)},
		}},
	}
}
