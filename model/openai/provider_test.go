package openai_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/model/openai"
	"github.com/parley-dev/parley/model/openai/openaitest"
	"github.com/parley-dev/parley/schema"
)

func newProvider(t *testing.T, srv *openaitest.Server, agents string) *openai.Provider {
	t.Helper()
	var a openai.Agents
	if agents != "" {
		var err error
		if a, err = openai.ParseAgents([]byte(agents)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := openai.New(openai.Config{BaseURL: srv.URL(), Model: "gpt-test", APIKey: "sk-test", Timeout: 5 * time.Second,
		MaxRetries: 2, MaxRetryDelay: 3 * time.Second, Agents: a}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var listTool = schema.Tool{Name: "list_entities", Description: "List content.", InputSchema: json.RawMessage(`{"type":"object","properties":{"type":{"type":"string"}}}`)}

func TestCompleteText(t *testing.T) {
	srv := openaitest.New(t, openaitest.Reply{File: "testdata/text.sse"})
	p := newProvider(t, srv, `{"agents":{"default":{"systemPrompt":"Be brief.","temperature":0.2,"maxTokens":100,"tools":[]}}}`)
	var deltas []string
	resp, err := p.Complete(context.Background(), model.Request{Agent: "default",
		Messages: []model.Message{{Role: model.RoleUser, Text: "hi"}}, Tools: []schema.Tool{listTool},
		OnDelta: func(d model.Delta) { deltas = append(deltas, d.Text) }})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Hello! I can list, publish or delete your content."; resp.Text != want || strings.Join(deltas, "") != want {
		t.Errorf("text = %q, deltas = %q, want %q", resp.Text, deltas, want)
	}
	if resp.Usage == nil || resp.Usage.InputTokens != 412 || resp.Usage.OutputTokens != 14 {
		t.Errorf("usage = %+v", resp.Usage)
	}
	req := srv.Requests()[0]
	msgs := req["messages"].([]any)
	if first := msgs[0].(map[string]any); first["role"] != "system" || first["content"] != "Be brief." {
		t.Errorf("first message = %v, want the agent's system prompt", first)
	}
	if req["temperature"] != 0.2 || req["max_completion_tokens"] != float64(100) || req["stream"] != true || req["model"] != "gpt-test" {
		t.Errorf("request = %v", req)
	}
	if _, ok := req["tools"]; ok {
		t.Errorf("tools offered to an agent allowed none: %v", req["tools"])
	}
	if got := srv.Headers()[0].Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization = %q", got)
	}
}

func TestCompleteToolCalls(t *testing.T) {
	srv := openaitest.New(t, openaitest.Reply{File: "testdata/tool_list.sse"}, openaitest.Reply{File: "testdata/tool_parallel.sse"})
	p := newProvider(t, srv, "")
	weird := schema.Tool{Name: strings.Repeat("x", 70), InputSchema: json.RawMessage(`{"type":"object"}`)}
	req := model.Request{Agent: "default", Messages: []model.Message{{Role: model.RoleUser, Text: "list drafts"}}, Tools: []schema.Tool{listTool, weird}}
	resp, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].ID != "call_Xy12ab" || resp.ToolCalls[0].Name != "list_entities" ||
		string(resp.ToolCalls[0].Arguments) != `{"type":"article","status":"draft"}` {
		t.Fatalf("tool calls = %+v", resp.ToolCalls)
	}
	tools := srv.Requests()[0]["tools"].([]any)
	var names []string
	for _, x := range tools {
		fn := x.(map[string]any)["function"].(map[string]any)
		names = append(names, fn["name"].(string))
		if fn["parameters"] == nil {
			t.Errorf("tool %s offered without parameters", fn["name"])
		}
	}
	if len(names) != 2 || names[0] != "list_entities" || len(names[1]) > 64 || names[1] != openai.APIName(weird.Name) {
		t.Errorf("offered names = %q", names)
	}
	resp, err = p.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].Name != "get_entity" || string(resp.ToolCalls[0].Arguments) != `{"title": "About us"}` ||
		resp.ToolCalls[1].Name != "list_entities" || resp.ToolCalls[1].ID != "call_Par1bb" {
		t.Errorf("parallel tool calls = %+v", resp.ToolCalls)
	}
}

func TestAPINameMapsBack(t *testing.T) {
	for _, name := range []string{"ok_name", "a.b/c", strings.Repeat("n", 128), strings.Repeat("n", 64)} {
		api := openai.APIName(name)
		if len(api) > 64 || strings.Trim(api, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			t.Errorf("APIName(%q) = %q: outside ^[a-zA-Z0-9_-]{1,64}$", name, api)
		}
	}
	if openai.APIName(strings.Repeat("n", 100)+"a") == openai.APIName(strings.Repeat("n", 100)+"b") {
		t.Error("two long names map to the same API name")
	}
}

func TestRetries(t *testing.T) {
	rateLimited := openaitest.Reply{Status: 429, Header: map[string]string{"Retry-After": "1"},
		Body: `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`}
	t.Run("429 honours Retry-After", func(t *testing.T) {
		srv := openaitest.New(t, rateLimited, openaitest.Reply{File: "testdata/text.sse"})
		p := newProvider(t, srv, "")
		var waits []time.Duration
		start := time.Now()
		resp, err := p.Complete(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "hi"}},
			OnRetry: func(_ int, w time.Duration, _ error) { waits = append(waits, w) }})
		if err != nil || resp.Text == "" {
			t.Fatalf("Complete = %+v, %v", resp, err)
		}
		if el := time.Since(start); el < time.Second || len(waits) != 1 || waits[0] < time.Second {
			t.Errorf("waited %v (retry waits %v), want at least the 1s Retry-After", el, waits)
		}
	})
	t.Run("500 then success", func(t *testing.T) {
		srv := openaitest.New(t, openaitest.Reply{Status: 500, Body: `{"error":{"message":"boom","type":"server_error"}}`}, openaitest.Reply{File: "testdata/text.sse"})
		if _, err := newProvider(t, srv, "").Complete(context.Background(), model.Request{}); err != nil {
			t.Fatal(err)
		}
		if n := len(srv.Requests()); n != 2 {
			t.Errorf("requests = %d, want 2", n)
		}
	})
	t.Run("400 is not retried", func(t *testing.T) {
		srv := openaitest.New(t, openaitest.Reply{Status: 400, Body: `{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","param":"temperature","code":null}}`})
		_, err := newProvider(t, srv, "").Complete(context.Background(), model.Request{})
		if me := model.AsError(err); me == nil || me.Reason != model.ReasonRejected || me.Status != 400 {
			t.Fatalf("err = %v, want model_rejected (HTTP 400)", err)
		}
		if n := len(srv.Requests()); n != 1 {
			t.Errorf("requests = %d, want 1 (no retry)", n)
		}
	})
	t.Run("context length", func(t *testing.T) {
		srv := openaitest.New(t, openaitest.Reply{Status: 400, Body: `{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`})
		_, err := newProvider(t, srv, "").Complete(context.Background(), model.Request{})
		if me := model.AsError(err); me == nil || me.Reason != model.ReasonContextLength {
			t.Fatalf("err = %v, want context_length", err)
		}
	})
	t.Run("Retry-After beyond the cap", func(t *testing.T) {
		long := rateLimited
		long.Header = map[string]string{"Retry-After": "3600"}
		srv := openaitest.New(t, long)
		_, err := newProvider(t, srv, "").Complete(context.Background(), model.Request{})
		if me := model.AsError(err); me == nil || me.Reason != model.ReasonUnavailable || me.Status != 429 {
			t.Fatalf("err = %v, want model_unavailable (HTTP 429)", err)
		}
	})
	t.Run("stream cut then success", func(t *testing.T) {
		srv := openaitest.New(t, openaitest.Reply{File: "testdata/text.sse", CutAfter: 700}, openaitest.Reply{File: "testdata/text.sse"})
		var attempts []int
		resp, err := newProvider(t, srv, "").Complete(context.Background(), model.Request{
			OnDelta: func(d model.Delta) { attempts = append(attempts, d.Attempt) }})
		if err != nil || resp.Text != "Hello! I can list, publish or delete your content." {
			t.Fatalf("Complete = %q, %v", resp.Text, err)
		}
		if attempts[0] != 1 || attempts[len(attempts)-1] != 2 {
			t.Errorf("delta attempts = %v, want the first attempt's then the second's", attempts)
		}
	})
	t.Run("stream always cut", func(t *testing.T) {
		cut := openaitest.Reply{File: "testdata/text.sse", CutAfter: 700}
		srv := openaitest.New(t, cut, cut, cut)
		_, err := newProvider(t, srv, "").Complete(context.Background(), model.Request{})
		if me := model.AsError(err); me == nil || me.Reason != model.ReasonUnavailable || me.Attempts != 3 {
			t.Fatalf("err = %v, want model_unavailable after 3 attempts", err)
		}
	})
}

func TestTrim(t *testing.T) {
	long := strings.Repeat("word ", 200) // ~258 tokens
	msgs := []model.Message{
		{Role: model.RoleSystem, Text: "sys"},
		{Role: model.RoleUser, Text: long},
		{Role: model.RoleAssistant, ToolCalls: []schema.ToolCall{{ID: "a", Name: "t", Arguments: json.RawMessage(`{}`)}}},
		{Role: model.RoleTool, ToolCallID: "a", Text: long},
		{Role: model.RoleAssistant, Text: "old answer"},
		{Role: model.RoleUser, Text: "now"},
		{Role: model.RoleAssistant, ToolCalls: []schema.ToolCall{{ID: "b", Name: "t", Arguments: json.RawMessage(`{}`)}}},
		{Role: model.RoleTool, ToolCallID: "b", Text: long},
	}
	out, err := openai.Trim(msgs, 400)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range out {
		roles = append(roles, m.Role)
		if m.Role == model.RoleTool && m.ToolCallID == "a" {
			t.Error("a tool result of dropped history was kept without its call")
		}
	}
	if got := strings.Join(roles, ","); got != "system,system,assistant,user,assistant,tool" {
		t.Errorf("kept roles = %s", got)
	}
	if !strings.Contains(out[1].Text, "3 earlier messages were left out") {
		t.Errorf("note = %q", out[1].Text)
	}
	if _, err := openai.Trim(msgs, 100); model.AsError(err) == nil || model.AsError(err).Reason != model.ReasonContextLength {
		t.Errorf("Trim over a budget the current turn exceeds = %v, want context_length", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct{ json, want string }{
		{`{"agents":{"a":{"temperature":3}}}`, "agents.a.temperature"},
		{`{"agents":{"a":{"maxTokens":-1}}}`, "agents.a.maxTokens"},
		{`{"agents":{"a":{"contextTokens":100,"maxTokens":100}}}`, "agents.a.maxTokens"},
		{`{"agents":{"a":{"tool":[]}}}`, "unknown field"},
	} {
		if _, err := openai.ParseAgents([]byte(tt.json)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseAgents(%s) = %v, want an error naming %s", tt.json, err, tt.want)
		}
	}
	if _, err := openai.New(openai.Config{BaseURL: "localhost:1234", Model: "m"}, nil); err == nil || !strings.Contains(err.Error(), "http://") {
		t.Errorf("New with a URL without scheme = %v", err)
	}
	if _, err := openai.New(openai.Config{BaseURL: "http://x"}, &http.Client{}); err == nil || !strings.Contains(err.Error(), "model") {
		t.Errorf("New without a model = %v", err)
	}
}

// Tool-result blocks meant for the user only never reach the model;
// structuredContent does, whole.
func TestToolResultRouting(t *testing.T) {
	srv := openaitest.New(t, openaitest.Reply{File: "testdata/text.sse"})
	p := newProvider(t, srv, "")
	res := &schema.CallToolResult{StructuredContent: map[string]any{"ids": []any{"a-1", "a-2"}}, Content: schema.ContentList{
		&schema.TextContent{Text: "for the model"},
		&schema.TextContent{Text: "SECRET for the user", Annotations: &schema.Annotations{Audience: []schema.Role{schema.RoleUser}}},
		&schema.ResourceLink{URI: "https://example.com/a-1", Name: "a-1", Annotations: &schema.Annotations{Audience: []schema.Role{schema.RoleAssistant}}},
	}}
	_, err := p.Complete(context.Background(), model.Request{Messages: []model.Message{
		{Role: model.RoleUser, Text: "go"},
		{Role: model.RoleAssistant, ToolCalls: []schema.ToolCall{{ID: "c1", Name: "list_entities", Arguments: json.RawMessage(`{}`)}}},
		{Role: model.RoleTool, ToolCallID: "c1", ToolName: "list_entities", Text: model.ResultText(res), Result: res},
	}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := srv.Requests()[0]["messages"].([]any)
	tool := msgs[2].(map[string]any)["content"].(string)
	if strings.Contains(tool, "SECRET") {
		t.Errorf("a user-only block reached the model: %q", tool)
	}
	for _, want := range []string{"for the model", "https://example.com/a-1", `structuredContent: {"ids":["a-1","a-2"]}`} {
		if !strings.Contains(tool, want) {
			t.Errorf("tool message %q lacks %q", tool, want)
		}
	}
}

// The model-call span gets the GenAI request attributes.
func TestSpanAttributes(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	srv := openaitest.New(t, openaitest.Reply{File: "testdata/text.sse"})
	p := newProvider(t, srv, `{"agents":{"a":{"model":"m-a","temperature":0.5,"maxTokens":64}}}`)
	ctx, span := tp.Tracer("t").Start(context.Background(), "chat")
	if _, err := p.Complete(ctx, model.Request{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	span.End()
	got := map[string]string{}
	for _, kv := range rec.Ended()[0].Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range map[string]string{"gen_ai.request.model": "m-a", "gen_ai.request.temperature": "0.5",
		"gen_ai.request.max_tokens": "64", "server.address": "127.0.0.1"} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

func TestSuggestedReplies(t *testing.T) {
	srv := openaitest.New(t, openaitest.Reply{File: "testdata/text_suggest.sse"}, openaitest.Reply{File: "testdata/text_suggest.sse"})
	p := newProvider(t, srv, `{"agents":{"s":{"suggestReplies":true}}}`)
	resp, err := p.Complete(context.Background(), model.Request{Agent: "s", Messages: []model.Message{{Role: model.RoleUser, Text: "drafts?"}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "There are 10 draft articles." || strings.Join(resp.SuggestedReplies, "|") != "publish them|delete them|show the oldest" {
		t.Errorf("text %q, suggestions %q", resp.Text, resp.SuggestedReplies)
	}
	sys := srv.Requests()[0]["messages"].([]any)[0].(map[string]any)
	if !strings.Contains(sys["content"].(string), "Suggested replies:") {
		t.Errorf("system message %v does not ask for suggestions", sys)
	}
	// Without the setting the text is left alone.
	resp, _ = p.Complete(context.Background(), model.Request{Agent: "other"})
	if !strings.Contains(resp.Text, "Suggested replies:") || resp.SuggestedReplies != nil {
		t.Errorf("without suggestReplies: %q, %q", resp.Text, resp.SuggestedReplies)
	}
}
