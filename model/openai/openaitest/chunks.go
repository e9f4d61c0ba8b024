package openaitest

import (
	"encoding/json"
	"strings"
)

// Builders of Reply.Events: chat.completion.chunk objects for choice 0,
// shaped as OpenAI-compatible servers send them, for streams written in a
// test rather than recorded in a file.

// Done is the data of a stream's last event.
const Done = "[DONE]"

// NoIndex, as ToolDelta's index, leaves "index" out of the delta (some
// servers do).
const NoIndex = -1

// Chunk returns a chat.completion.chunk whose choice 0 has delta (a JSON
// object) and finishReason ("" for null).
func Chunk(delta, finishReason string) string {
	fr := "null"
	if finishReason != "" {
		b, _ := json.Marshal(finishReason)
		fr = string(b)
	}
	return `{"id":"chatcmpl-T1","object":"chat.completion.chunk","created":1764500000,"model":"gpt-test",` +
		`"choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + fr + `}],"usage":null}`
}

// Role is the opening chunk most servers send (role, empty content).
func Role() string { return Chunk(`{"role":"assistant","content":""}`, "") }

// Text returns a chunk carrying the content s.
func Text(s string) string {
	b, _ := json.Marshal(s)
	return Chunk(`{"content":`+string(b)+`}`, "")
}

// ToolCalls returns a chunk carrying tool-call deltas (see ToolDelta).
func ToolCalls(deltas ...string) string {
	return Chunk(`{"tool_calls":[`+strings.Join(deltas, ",")+`]}`, "")
}

// ToolDelta returns one tool-call delta: its index (NoIndex: absent), id
// and function name (each left out when empty) and a fragment of the
// arguments.
func ToolDelta(index int, id, name, args string) string {
	fn := map[string]any{"arguments": args}
	m := map[string]any{"function": fn}
	if index != NoIndex {
		m["index"] = index
	}
	if id != "" {
		m["id"], m["type"] = id, "function"
	}
	if name != "" {
		fn["name"] = name
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// Finish returns the chunk carrying finishReason and an empty delta.
func Finish(finishReason string) string { return Chunk(`{}`, finishReason) }

// Usage returns the usage-only chunk (empty choices) a server sends with
// stream_options.include_usage.
func Usage(prompt, completion int) string {
	b, _ := json.Marshal(map[string]any{"id": "chatcmpl-T1", "object": "chat.completion.chunk", "created": 1764500000,
		"model": "gpt-test", "choices": []any{},
		"usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
	return string(b)
}
