package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/model/openai"
	"github.com/parley-dev/parley/model/openai/openaitest"
	"github.com/parley-dev/parley/schema"
)

// Streams as OpenAI-compatible servers send them, built chunk by chunk:
// the shapes below are each seen from some server in the wild.
const (
	noIndex = openaitest.NoIndex
	done    = openaitest.Done
)

var (
	tc     = openaitest.ToolDelta
	calls  = openaitest.ToolCalls
	text   = openaitest.Text
	finish = openaitest.Finish
	role   = openaitest.Role()
	usage  = openaitest.Usage(10, 5)
)

// split cuts s into pieces of n bytes.
func split(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

var getTool = schema.Tool{Name: "get_entity", Description: "Get one entity.", InputSchema: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}}}`)}

// historyTool's name starts with getTool's: a name delta may read as
// either.
var historyTool = schema.Tool{Name: "get_entity_history", Description: "Revisions of one entity.", InputSchema: getTool.InputSchema}

// call renders a tool call for comparison.
func call(id, name, args string) string { return id + " " + name + " " + args }

// TestStreamedToolCalls drives every way a server streams tool calls
// through the provider over HTTP (server-sent events): calls are assembled
// by id, a repeated name is not appended, arguments concatenate per call,
// and a stream that cannot be assembled is a step error, never a merged
// call.
func TestStreamedToolCalls(t *testing.T) {
	listEvent := `{"type":"event"}`
	about := `{"title":"About us"}`
	var manyArgs []string
	for _, piece := range split(`{"type": "article", "status": "draft"}`, 2) {
		manyArgs = append(manyArgs, calls(tc(0, "", "", piece)))
	}
	for _, tt := range []struct {
		name   string
		stream []string
		// want are the calls (id name args) when the stream is readable.
		want []string
		// wantText is the answer text.
		wantText string
		// wantErr are substrings of Response.ToolCallsError.
		wantErr []string
	}{
		{name: "name repeated in every delta",
			stream: []string{role, calls(tc(0, "call_a", "list_entities", "")), calls(tc(0, "", "list_entities", `{"type":`)),
				calls(tc(0, "", "list_entities", `"event"}`)), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent)}},
		{name: "name and id repeated in every delta",
			stream: []string{calls(tc(0, "call_a", "list_entities", `{"type":`)), calls(tc(0, "call_a", "list_entities", `"event"}`)),
				calls(tc(1, "call_b", "get_entity", `{"title":`)), calls(tc(1, "call_b", "get_entity", `"About us"}`)), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent), call("call_b", "get_entity", about)}},
		{name: "name repeated as a growing prefix",
			stream: []string{calls(tc(0, "call_a", "list", "")), calls(tc(0, "", "list_ent", `{"type":`)),
				calls(tc(0, "", "list_entities", `"event"}`)), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent)}},
		{name: "name prefix already held",
			stream: []string{calls(tc(0, "call_a", "list_entities", "")), calls(tc(0, "", "list", `{"type":`)),
				calls(tc(0, "", "list_", `"event"}`)), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent)}},
		{name: "name split in fragments",
			stream: []string{calls(tc(0, "call_a", "list_", "")), calls(tc(0, "", "entities", listEvent)), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", listEvent)}},
		{name: "no index with distinct ids",
			stream: []string{calls(tc(noIndex, "call_a", "list_entities", "")), calls(tc(noIndex, "", "", listEvent)),
				calls(tc(noIndex, "call_b", "get_entity", "")), calls(tc(noIndex, "", "", about)), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent), call("call_b", "get_entity", about)}},
		{name: "shared index 0 with different ids",
			stream: []string{calls(tc(0, "call_a", "list_entities", "")), calls(tc(0, "", "", `{"type":`)), calls(tc(0, "", "", `"event"}`)),
				calls(tc(0, "call_b", "get_entity", "")), calls(tc(0, "", "", about)), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent), call("call_b", "get_entity", about)}},
		{name: "shared index 0 with different ids in one chunk",
			stream: []string{calls(tc(0, "call_a", "list_entities", listEvent), tc(0, "call_b", "get_entity", about)), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", listEvent), call("call_b", "get_entity", about)}},
		{name: "shared index 0 without ids, a second name",
			stream: []string{calls(tc(0, "", "list_entities", listEvent)), calls(tc(0, "", "get_entity", about)), finish("tool_calls"), done},
			want:   []string{call("", "list_entities", listEvent), call("", "get_entity", about)}},
		{name: "normal indexed parallel calls, interleaved",
			stream: []string{role, calls(tc(0, "call_a", "get_entity", "")), calls(tc(0, "", "", `{"title":"About u`)),
				calls(tc(1, "call_b", "list_entities", "")), calls(tc(1, "", "", listEvent)), calls(tc(0, "", "", `s"}`)),
				finish("tool_calls"), usage, done},
			want: []string{call("call_a", "get_entity", about), call("call_b", "list_entities", listEvent)}},
		{name: "parallel calls reusing one id at distinct indexes",
			stream: []string{calls(tc(0, "call_a", "list_entities", "")), calls(tc(1, "call_a", "get_entity", "")),
				calls(tc(0, "", "", listEvent)), calls(tc(1, "", "", about)), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent), call("call_a", "get_entity", about)}},
		{name: "id only on the first delta",
			stream: []string{calls(tc(0, "call_a", "list_entities", "")), calls(tc(0, "", "", `{"type"`)), calls(tc(0, "", "", `:"event"}`)),
				calls(tc(1, "call_b", "get_entity", "")), calls(tc(1, "", "", about)), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent), call("call_b", "get_entity", about)}},
		{name: "arguments split across many deltas",
			stream: slices.Concat([]string{calls(tc(0, "call_a", "list_entities", ""))}, manyArgs, []string{finish("tool_calls"), done}),
			want:   []string{call("call_a", "list_entities", `{"type": "article", "status": "draft"}`)}},
		{name: "arguments repeated cumulatively",
			stream: []string{calls(tc(0, "call_a", "list_entities", `{"type":`)), calls(tc(0, "", "", `{"type":"event"}`)), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", listEvent)}},
		{name: "empty arguments",
			stream: []string{calls(tc(0, "call_a", "list_entities", "")), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", `{}`)}},
		{name: "text then tool calls",
			stream: []string{text("Let me look."), calls(tc(0, "call_a", "list_entities", listEvent)), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", listEvent)}, wantText: "Let me look."},
		{name: "finish_reason stop with tool calls",
			stream: []string{calls(tc(0, "call_a", "list_entities", listEvent)), finish("stop"), done},
			want:   []string{call("call_a", "list_entities", listEvent)}},
		{name: "[DONE] without finish_reason after text",
			stream:   []string{role, text("Hello"), text(" there."), usage, done},
			wantText: "Hello there."},
		{name: "[DONE] without finish_reason after complete tool calls",
			stream: []string{calls(tc(0, "call_a", "list_entities", "")), calls(tc(0, "", "", listEvent)),
				calls(tc(1, "call_b", "get_entity", about)), done},
			want: []string{call("call_a", "list_entities", listEvent), call("call_b", "get_entity", about)}},
		{name: "arguments as a JSON object, not a string",
			stream: []string{calls(`{"index":0,"id":"call_a","type":"function","function":{"name":"list_entities","arguments":{"type":"event"}}}`),
				finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent)}},
		{name: "arguments as JSON objects, parallel calls sharing index 0",
			stream: []string{calls(`{"index":0,"id":"call_a","function":{"name":"list_entities","arguments":{"type":"event"}}}`),
				calls(`{"index":0,"id":"call_b","function":{"name":"get_entity","arguments":{"title":"About us"}}}`), finish("stop"), done},
			want: []string{call("call_a", "list_entities", listEvent), call("call_b", "get_entity", about)}},
		{name: "arguments as an empty JSON object",
			stream: []string{calls(`{"index":0,"id":"call_a","function":{"name":"list_entities","arguments":{}}}`), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", `{}`)}},
		{name: "id changes after the first delta, name only on the first",
			stream: []string{calls(tc(0, "call_a", "list_entities", "")), calls(tc(0, "call_x", "", `{"type":`)),
				calls(tc(0, "call_x", "", `"event"}`)), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent)}},
		{name: "id changes on every delta, name only on the first",
			stream: []string{calls(tc(0, "call_1", "list_entities", "")), calls(tc(0, "call_2", "", `{"type":`)),
				calls(tc(0, "call_3", "", `"event"}`)), calls(tc(1, "call_4", "get_entity", "")), calls(tc(1, "call_5", "", about)),
				finish("tool_calls"), done},
			want: []string{call("call_1", "list_entities", listEvent), call("call_4", "get_entity", about)}},
		{name: "id changes on every delta, name repeated",
			stream: []string{calls(tc(0, "call_1", "list_entities", `{"type":`)), calls(tc(0, "call_2", "list_entities", `"event"}`)),
				finish("tool_calls"), done},
			want: []string{call("call_1", "list_entities", listEvent)}},
		{name: "id changes on every delta, no index",
			stream: []string{calls(tc(noIndex, "call_1", "list_entities", "")), calls(tc(noIndex, "call_2", "", `{"type":`)),
				calls(tc(noIndex, "call_3", "", `"event"}`)), finish("tool_calls"), done},
			want: []string{call("call_1", "list_entities", listEvent)}},
		{name: "same tool twice without ids or index",
			stream: []string{calls(tc(noIndex, "", "get_entity", `{"title":"A"}`)), calls(tc(noIndex, "", "get_entity", `{"title":"B"}`)),
				finish("stop"), done},
			want: []string{call("", "get_entity", `{"title":"A"}`), call("", "get_entity", `{"title":"B"}`)}},
		{name: "same tool twice sharing index 0 without ids",
			stream: []string{calls(tc(0, "", "get_entity", `{"title":`), tc(0, "", "get_entity", `"A"}`)), calls(tc(0, "", "get_entity", `{"title":"B"}`)),
				finish("tool_calls"), done},
			want: []string{call("", "get_entity", `{"title":"A"}`), call("", "get_entity", `{"title":"B"}`)}},
		{name: "same tool twice sharing index 0 with different ids",
			stream: []string{calls(tc(0, "call_a", "get_entity", `{"title":"A"}`)), calls(tc(0, "call_b", "get_entity", `{"title":"A"}`)),
				finish("tool_calls"), done},
			want: []string{call("call_a", "get_entity", `{"title":"A"}`), call("call_b", "get_entity", `{"title":"A"}`)}},
		{name: "same tool without arguments twice sharing index 0 with different ids",
			stream: []string{calls(tc(0, "call_a", "list_entities", "")), calls(tc(0, "call_b", "list_entities", "")), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", `{}`), call("call_b", "list_entities", `{}`)}},
		{name: "tool_calls null or empty on text deltas",
			stream: []string{openaitest.Chunk(`{"role":"assistant","content":"Hi","tool_calls":[],"function_call":null}`, ""),
				openaitest.Chunk(`{"content":" there.","tool_calls":null}`, ""), finish("stop"), done},
			wantText: "Hi there."},
		{name: "Azure content-filter chunks around the calls",
			stream: []string{`{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}`,
				calls(tc(0, "call_a", "list_entities", listEvent)),
				`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls","content_filter_results":{}}],"created":1,"id":"c","model":"gpt-test","object":"chat.completion.chunk"}`,
				done},
			want: []string{call("call_a", "list_entities", listEvent)}},
		{name: "Gemini: whole calls without index, empty ids, extra_content",
			stream: []string{`{"choices":[{"delta":{"role":"assistant","tool_calls":[` +
				`{"extra_content":{"google":{"thought_signature":"c2ln"}},"function":{"arguments":"{\"title\":\"A\"}","name":"get_entity"},"id":"","type":"function"},` +
				`{"function":{"arguments":"{\"title\":\"B\"}","name":"get_entity"},"id":"","type":"function"}]},"index":0}],"model":"gemini","object":"chat.completion.chunk"}`,
				`{"choices":[{"delta":{"role":"assistant"},"finish_reason":"stop","index":0}],"model":"gemini","object":"chat.completion.chunk","usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10}}`,
				done},
			want: []string{call("", "get_entity", `{"title":"A"}`), call("", "get_entity", `{"title":"B"}`)}},
		{name: "error null in every chunk",
			stream: []string{`{"id":"c","object":"chat.completion.chunk","model":"m","error":null,"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi."},"finish_reason":null}]}`,
				`{"id":"c","object":"chat.completion.chunk","model":"m","error":null,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, done},
			wantText: "Hi."},
		{name: "name repeated in every delta, two tools sharing index 0 without ids",
			stream: []string{calls(tc(0, "", "list_entities", `{"type":`)), calls(tc(0, "", "list_entities", `"event"}`)),
				calls(tc(0, "", "get_entity", `{"title":`)), calls(tc(0, "", "get_entity", `"About us"}`)), finish("tool_calls"), done},
			want: []string{call("", "list_entities", listEvent), call("", "get_entity", about)}},
		{name: "name repeated in every delta, same tool twice sharing index 0 without ids",
			stream: []string{calls(tc(0, "", "get_entity", `{"title":`)), calls(tc(0, "", "get_entity", `"A"}`)),
				calls(tc(0, "", "get_entity", `{"title":`)), calls(tc(0, "", "get_entity", `"B"}`)), finish("tool_calls"), done},
			want: []string{call("", "get_entity", `{"title":"A"}`), call("", "get_entity", `{"title":"B"}`)}},
		{name: "a longer tool name after whole arguments, sharing index 0 without ids",
			stream: []string{calls(tc(0, "", "get_entity", about)), calls(tc(0, "", "get_entity_history", "")), calls(tc(0, "", "", `{"title":"B"}`)),
				finish("tool_calls"), done},
			want: []string{call("", "get_entity", about), call("", "get_entity_history", `{"title":"B"}`)}},
		{name: "a longer tool name with its arguments, sharing index 0 without ids",
			stream: []string{calls(tc(noIndex, "", "get_entity", about)), calls(tc(noIndex, "", "get_entity_history", `{"title":"B"}`)), finish("tool_calls"), done},
			want:   []string{call("", "get_entity", about), call("", "get_entity_history", `{"title":"B"}`)}},
		{name: "a tool name split at a prefix of another",
			stream: []string{calls(tc(0, "call_a", "get_entity", "")), calls(tc(0, "", "_history", about)), finish("tool_calls"), done},
			want:   []string{call("call_a", "get_entity_history", about)}},
		{name: "one id reused for the same tool twice at index 0",
			stream: []string{calls(tc(0, "call_0", "get_entity", `{"title":"A"}`)), calls(tc(0, "call_0", "get_entity", `{"title":"B"}`)), finish("tool_calls"), done},
			want:   []string{call("call_0", "get_entity", `{"title":"A"}`), call("call_0", "get_entity", `{"title":"B"}`)}},
		{name: "one id reused for the same tool twice, repeated on every delta",
			stream: []string{calls(tc(0, "call_0", "get_entity", `{"title":`)), calls(tc(0, "call_0", "get_entity", `"A"}`)),
				calls(tc(0, "call_0", "get_entity", `{"title":`)), calls(tc(0, "call_0", "", `"B"}`)), finish("tool_calls"), done},
			want: []string{call("call_0", "get_entity", `{"title":"A"}`), call("call_0", "get_entity", `{"title":"B"}`)}},
		{name: "finish_reason, then closed without [DONE]",
			stream: []string{calls(tc(0, "call_a", "list_entities", listEvent)), finish("tool_calls")},
			want:   []string{call("call_a", "list_entities", listEvent)}},
		{name: "id and type missing, name and index given",
			stream: []string{calls(`{"index":0,"function":{"name":"list_entities","arguments":"{\"type\":"}}`), calls(`{"index":0,"function":{"arguments":"\"event\"}"}}`),
				finish("tool_calls"), done},
			want: []string{call("", "list_entities", listEvent)}},
		{name: "the whole call repeated in the last chunk",
			stream: []string{calls(tc(0, "call_a", "list_entities", "")), calls(tc(0, "", "", `{"type":`)), calls(tc(0, "", "", `"event"}`)),
				calls(tc(0, "call_a", "list_entities", listEvent)), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent)}},
		{name: "the whole call repeated without an id",
			stream: []string{calls(tc(0, "", "list_entities", listEvent)), calls(tc(0, "", "list_entities", listEvent)), finish("tool_calls"), done},
			want:   []string{call("", "list_entities", listEvent)}},
		{name: "arguments and name repeated cumulatively with the id",
			stream: []string{calls(tc(0, "call_a", "list_entities", `{"type":`)), calls(tc(0, "call_a", "list_entities", `{"type":"ev`)),
				calls(tc(0, "call_a", "list_entities", listEvent)), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent)}},
		{name: "tool calls and finish_reason in one chunk",
			stream: []string{openaitest.Chunk(`{"role":"assistant","content":null,"tool_calls":[`+tc(0, "call_a", "list_entities", listEvent)+`,`+
				tc(1, "call_b", "get_entity", about)+`]}`, "tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent), call("call_b", "get_entity", about)}},
		{name: "null id, type and name on later deltas",
			stream: []string{calls(`{"index":0,"id":"call_a","type":"function","function":{"name":"list_entities","arguments":null}}`),
				calls(`{"index":0,"id":null,"type":null,"function":{"name":null,"arguments":"{\"type\":"}}`),
				calls(`{"index":0,"id":null,"type":null,"function":{"name":null,"arguments":"\"event\"}"}}`), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent)}},
		{name: "empty id, type and name on later deltas",
			stream: []string{calls(`{"index":0,"id":"call_a","type":"function","function":{"name":"list_entities","arguments":""}}`),
				calls(`{"index":0,"id":"","type":"","function":{"name":"","arguments":"{\"type\":"}}`),
				calls(`{"index":0,"id":"","type":"","function":{"name":"","arguments":"\"event\"}"}}`),
				calls(`{"index":1,"id":"call_b","type":"","function":{"name":"get_entity","arguments":""}}`),
				calls(`{"index":1,"id":"","function":{"arguments":"{\"title\":\"About us\"}"}}`), finish("tool_calls"), done},
			want: []string{call("call_a", "list_entities", listEvent), call("call_b", "get_entity", about)}},
		{name: "nine-character ids",
			stream: []string{calls(tc(0, "D681PevKs", "list_entities", listEvent)), calls(tc(1, "A1b2C3d4E", "get_entity", about)), finish("tool_calls"), done},
			want:   []string{call("D681PevKs", "list_entities", listEvent), call("A1b2C3d4E", "get_entity", about)}},
		{name: "text after tool calls",
			stream:   []string{calls(tc(0, "call_a", "list_entities", listEvent)), text("I will list them."), finish("tool_calls"), done},
			want:     []string{call("call_a", "list_entities", listEvent)},
			wantText: "I will list them."},
		{name: "reasoning deltas interleaved",
			stream: []string{role, openaitest.Chunk(`{"reasoning_content":"The user wants events."}`, ""), calls(tc(0, "call_a", "list_entities", `{"type":`)),
				openaitest.Chunk(`{"reasoning":"still thinking","reasoning_content":null,"content":null}`, ""), calls(tc(0, "", "", `"event"}`)),
				openaitest.Chunk(`{"reasoning_content":"done"}`, ""), finish("tool_calls"), usage, done},
			want: []string{call("call_a", "list_entities", listEvent)}},
		{name: "finish_reason function_call with tool calls",
			stream: []string{calls(tc(0, "call_a", "list_entities", listEvent)), finish("function_call"), done},
			want:   []string{call("call_a", "list_entities", listEvent)}},
		{name: "legacy function_call delta",
			stream: []string{role, openaitest.Chunk(`{"function_call":{"name":"list_entities","arguments":""}}`, ""),
				openaitest.Chunk(`{"function_call":{"arguments":"{\"type\":"}}`, ""), openaitest.Chunk(`{"function_call":{"arguments":"\"event\"}"}}`, ""),
				finish("function_call"), done},
			want: []string{call("", "list_entities", listEvent)}},
		{name: "legacy function_call delta, arguments as an object",
			stream: []string{openaitest.Chunk(`{"function_call":{"name":"list_entities","arguments":{"type":"event"}}}`, "function_call"), done},
			want:   []string{call("", "list_entities", listEvent)}},
		{name: "arguments encoded twice, a JSON string holding the object",
			stream: []string{calls(tc(0, "call_a", "list_entities", `"{\"type\":\"event\"}"`)), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", listEvent)}},
		{name: "arguments encoded twice, in fragments",
			stream: []string{calls(tc(0, "call_a", "list_entities", `"{\"type\":`)), calls(tc(0, "", "", `\"event\"}"`)), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", listEvent)}},
		{name: "arguments the string null",
			stream: []string{calls(tc(0, "call_a", "list_entities", `null`)), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", `{}`)}},
		{name: "arguments JSON but not an object",
			stream:  []string{calls(tc(0, "call_a", "list_entities", `["event"]`)), calls(tc(1, "call_b", "get_entity", about)), finish("tool_calls"), done},
			want:    []string{call("call_a", "list_entities", `"[\"event\"]"`), call("call_b", "get_entity", about)},
			wantErr: []string{"call_a", "not a JSON object"}},
		{name: "arguments for an index never opened",
			stream: []string{calls(tc(0, "call_a", "list_entities", listEvent)), calls(tc(1, "", "", about)), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", listEvent)}, wantErr: []string{"index 1", "never opened"}},
		{name: "invalid JSON arguments",
			stream:  []string{calls(tc(0, "call_a", "list_entities", `{"type":`)), calls(tc(1, "call_b", "get_entity", about)), finish("tool_calls"), done},
			want:    []string{call("call_a", "list_entities", `"{\"type\":"`), call("call_b", "get_entity", about)},
			wantErr: []string{"list_entities", "call_a", "not valid JSON"}},
		{name: "a call with an id but no name",
			stream: []string{calls(tc(0, "call_a", "list_entities", listEvent)), calls(tc(1, "call_b", "", about)), finish("tool_calls"), done},
			want:   []string{call("call_a", "list_entities", listEvent)}, wantErr: []string{"call_b", "no name"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.New(t, openaitest.Reply{Events: tt.stream})
			var logs bytes.Buffer
			p, err := openai.New(openai.Config{BaseURL: srv.URL(), Model: "gpt-test", Timeout: 5 * time.Second,
				MaxRetries: 2, MaxRetryDelay: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := p.Complete(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "go"}},
				Tools: []schema.Tool{listTool, getTool, historyTool}})
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			var got []string
			for _, c := range resp.ToolCalls {
				got = append(got, call(c.ID, c.Name, string(c.Arguments)))
				if c.Name != listTool.Name && c.Name != getTool.Name && c.Name != historyTool.Name {
					t.Errorf("call %q: not a tool offered (a merged call?)", c.Name)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("tool calls:\n got  %q\n want %q", got, tt.want)
			}
			if resp.Text != tt.wantText {
				t.Errorf("text = %q, want %q", resp.Text, tt.wantText)
			}
			if len(tt.wantErr) == 0 && resp.ToolCallsError != "" {
				t.Errorf("ToolCallsError = %q, want none", resp.ToolCallsError)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(resp.ToolCallsError, w) {
					t.Errorf("ToolCallsError = %q, lacks %q", resp.ToolCallsError, w)
				}
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("requests = %d, want 1 (a finished stream is not retried)", n)
			}
			noFinish := strings.HasPrefix(tt.name, "[DONE] without finish_reason")
			if logged := strings.Contains(logs.String(), "no finish_reason"); logged != noFinish {
				t.Errorf("log = %q; want the missing finish_reason logged: %v", logs.String(), noFinish)
			}
		})
	}
}

// A stream that ends without a finish_reason and without anything usable
// (no text, no complete tool call) is retried; so is one closed without
// [DONE] (cut), whatever arrived.
func TestStreamWithoutFinishReasonRetried(t *testing.T) {
	good := openaitest.Reply{Events: []string{text("Hello."), finish("stop"), done}}
	for _, tt := range []struct {
		name   string
		stream []string
	}{
		{"[DONE] and nothing usable", []string{role, usage, done}},
		{"[DONE] after an empty content delta", []string{role, text(""), done}},
		{"[DONE] after incomplete tool-call arguments", []string{calls(tc(0, "call_a", "list_entities", `{"type":`)), done}},
		{"[DONE] after arguments never opened", []string{calls(tc(0, "", "", `{}`)), done}},
		{"finished, but no call can be read", []string{calls(tc(noIndex, "", "", `{}`)), finish("tool_calls"), done}},
		{"[DONE] after reasoning only", []string{role, openaitest.Chunk(`{"reasoning_content":"Let me think."}`, ""), done}},
		{"finish_reason tool_calls without a tool call", []string{role, finish("tool_calls"), done}},
		{"finish_reason function_call without a call", []string{role, openaitest.Chunk(`{"reasoning_content":"hm"}`, ""), finish("function_call"), done}},
		{"an error object mid-stream", []string{role, text("Hel"), `{"id":"c","object":"chat.completion.chunk","model":"m",` +
			`"error":{"message":"upstream overloaded","code":502},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}`, done}},
		{"closed without [DONE] after text", []string{role, text("Hel")}},
		{"closed without [DONE] after complete tool calls", []string{calls(tc(0, "call_a", "list_entities", `{}`))}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.New(t, openaitest.Reply{Events: tt.stream}, good)
			var retried []error
			resp, err := newProvider(t, srv, "").Complete(context.Background(), model.Request{Tools: []schema.Tool{listTool},
				OnRetry: func(_ int, _ time.Duration, err error) { retried = append(retried, err) }})
			if err != nil || resp.Text != "Hello." || len(resp.ToolCalls) != 0 {
				t.Fatalf("Complete = %+v, %v; want the second attempt's text", resp, err)
			}
			if n := len(srv.Requests()); n != 2 || len(retried) != 1 {
				t.Errorf("requests = %d, retries %v; want 2 requests, 1 retry", n, retried)
			}
		})
	}
	t.Run("always [DONE] and nothing usable", func(t *testing.T) {
		empty := openaitest.Reply{Events: []string{role, done}}
		srv := openaitest.New(t, empty, empty, empty)
		_, err := newProvider(t, srv, "").Complete(context.Background(), model.Request{})
		me := model.AsError(err)
		if me == nil || me.Reason != model.ReasonUnavailable || me.Attempts != 3 || !strings.Contains(me.Error(), "finish_reason") {
			t.Fatalf("err = %v, want model_unavailable after 3 attempts naming the missing finish_reason", err)
		}
	})
}

// Server-sent-event framing as servers vary it: comment lines (OpenRouter
// sends ": OPENROUTER PROCESSING" while it waits), CRLF line ends, "data:"
// without a space, event names, and "error": null in a chunk.
func TestStreamedToolCallsSSEFraming(t *testing.T) {
	listEvent := `{"type":"event"}`
	for _, tt := range []struct {
		name, body string
	}{
		{"comments and event names", ": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\nevent: message\ndata: " +
			calls(tc(0, "call_a", "list_entities", `{"type":`)) + "\n\n: keep-alive\n\ndata: " + calls(tc(0, "", "", `"event"}`)) +
			"\n\ndata: " + finish("tool_calls") + "\n\ndata: [DONE]\n\n"},
		{"CRLF and no space after data:", "data:" + calls(tc(0, "call_a", "list_entities", `{"type":`)) + "\r\n\r\ndata:" +
			calls(tc(0, "", "", `"event"}`)) + "\r\n\r\ndata:" + finish("tool_calls") + "\r\n\r\ndata:[DONE]\r\n\r\n"},
		{"error null with CRLF and no space", "data:" + strings.Replace(calls(tc(0, "call_a", "list_entities", listEvent)), `{"id"`, `{"error": null,"id"`, 1) +
			"\r\n\r\ndata:" + strings.Replace(finish("tool_calls"), `{"id"`, `{"error":null,"id"`, 1) + "\r\n\r\ndata:[DONE]\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := t.TempDir() + "/stream.txt"
			if err := os.WriteFile(file, []byte(tt.body), 0o600); err != nil {
				t.Fatal(err)
			}
			srv := openaitest.New(t, openaitest.Reply{File: file})
			resp, err := newProvider(t, srv, "").Complete(context.Background(), model.Request{Tools: []schema.Tool{listTool}})
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].ID != "call_a" || string(resp.ToolCalls[0].Arguments) != listEvent || resp.ToolCallsError != "" {
				t.Errorf("tool calls = %+v (error %q), want call_a list_entities %s", resp.ToolCalls, resp.ToolCallsError, listEvent)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("requests = %d, want 1", n)
			}
		})
	}
}
