package schema

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestToolAnnotations(t *testing.T) {
	tests := []struct {
		name                       string
		json                       string
		ro, destr, idem, open, ask bool
	}{
		{"absent", `{}`, false, true, false, true, true},
		{"read-only", `{"readOnlyHint":true}`, true, true, false, true, false},
		{"read-only false", `{"readOnlyHint":false}`, false, true, false, true, true},
		{"destructive false", `{"destructiveHint":false}`, false, false, false, true, true},
		{"open world false", `{"openWorldHint":false}`, false, true, false, false, true},
		{"all set", `{"title":"T","readOnlyHint":false,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}`, false, false, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a ToolAnnotations
			if err := json.Unmarshal([]byte(tt.json), &a); err != nil {
				t.Fatal(err)
			}
			if a.ReadOnly() != tt.ro || a.Destructive() != tt.destr || a.Idempotent() != tt.idem || a.OpenWorld() != tt.open {
				t.Errorf("hints = %v %v %v %v, want %v %v %v %v", a.ReadOnly(), a.Destructive(), a.Idempotent(), a.OpenWorld(), tt.ro, tt.destr, tt.idem, tt.open)
			}
			if got := ConfirmByAnnotation(&a); got != tt.ask {
				t.Errorf("ConfirmByAnnotation = %v, want %v", got, tt.ask)
			}
			b, _ := json.Marshal(&a) // absent and false stay distinct
			if string(b) != tt.json {
				t.Errorf("round trip = %s, want %s", b, tt.json)
			}
		})
	}
	var nilA *ToolAnnotations
	if nilA.ReadOnly() || !nilA.Destructive() || nilA.Idempotent() || !nilA.OpenWorld() || !ConfirmByAnnotation(nil) {
		t.Error("nil annotations do not take MCP's defaults")
	}
}

func TestToolRoundTripAndDisplayName(t *testing.T) {
	in := `{"name":"get_weather","title":"Weather","description":"d","inputSchema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"outputSchema":{"type":"object","properties":{"t":{"type":"number"}}},"annotations":{"title":"W","readOnlyHint":true},"_meta":{"drupal.org/ai.status_item":"x"}}`
	var tool Tool
	if err := json.Unmarshal([]byte(in), &tool); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(&tool)
	if string(b) != in {
		t.Errorf("round trip =\n%s\nwant\n%s", b, in)
	}
	if err := ValidateTool(&tool); err != nil {
		t.Errorf("ValidateTool = %v", err)
	}
	for _, tt := range []struct {
		tool Tool
		want string
	}{
		{Tool{Name: "n", Title: "T", Annotations: &ToolAnnotations{Title: "A"}}, "T"},
		{Tool{Name: "n", Annotations: &ToolAnnotations{Title: "A"}}, "A"},
		{Tool{Name: "n"}, "n"},
	} {
		if got := tt.tool.DisplayName(); got != tt.want {
			t.Errorf("DisplayName() = %q, want %q", got, tt.want)
		}
	}
}

func TestValidateTool(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"minimal", `{"name":"a.b-c_d","inputSchema":{"type":"object"}}`, ""},
		{"no name", `{"inputSchema":{"type":"object"}}`, "name: required"},
		{"name chars", `{"name":"get weather","inputSchema":{"type":"object"}}`, "name: must be 1 to 128 characters of A-Z a-z 0-9 _ - ."},
		{"name type", `{"name":1,"inputSchema":{"type":"object"}}`, "name: must be a string"},
		{"no inputSchema", `{"name":"a"}`, "inputSchema: required"},
		{"inputSchema not object", `{"name":"a","inputSchema":[]}`, "inputSchema: must be a JSON Schema object"},
		{"inputSchema type", `{"name":"a","inputSchema":{"type":"string"}}`, `inputSchema.type: must be "object"`},
		{"inputSchema invalid", `{"name":"a","inputSchema":{"type":"object","properties":{"x":{"pattern":"("}}}}`, "inputSchema: not a valid JSON Schema"},
		{"outputSchema type", `{"name":"a","inputSchema":{"type":"object"},"outputSchema":{}}`, `outputSchema.type: must be "object"`},
		{"annotation type", `{"name":"a","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":"yes"}}`, "annotations.readOnlyHint: must be a boolean"},
		{"meta", `{"name":"a","inputSchema":{"type":"object"},"_meta":{"dev.mcp/x":1}}`, `_meta["dev.mcp/x"]: prefix "dev.mcp/" is reserved for MCP`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tool Tool
			err := json.Unmarshal([]byte(tt.in), &tool)
			if err == nil {
				err = ValidateTool(&tool)
			}
			got := ""
			if err != nil {
				got = err.Error()
				if len(got) > len(tt.want) && tt.want != "" && got[:len(tt.want)] == tt.want {
					got = tt.want // compiler messages vary; the prefix names the rule
				}
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCallToolResultValidate(t *testing.T) {
	tool := &Tool{Name: "w", InputSchema: json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"temperature":{"type":"number","minimum":-100},"conditions":{"type":"string"}},"required":["temperature"]}`)}
	tests := []struct {
		name string
		res  CallToolResult
		tool *Tool
		want string
	}{
		{"text only", CallToolResult{Content: ContentList{Text("ok")}}, nil, ""},
		{"structured", CallToolResult{Content: ContentList{Text(`{"temperature":20}`)}, StructuredContent: map[string]any{"temperature": 20}}, tool, ""},
		{"missing structured", CallToolResult{Content: ContentList{Text("x")}}, tool, "structuredContent: required by the tool's outputSchema"},
		{"error result needs none", *ErrorResult("boom"), tool, ""},
		{"wrong type", CallToolResult{StructuredContent: map[string]any{"temperature": "hot"}}, tool, "structuredContent.temperature: type: Value is string but should be number"},
		{"required", CallToolResult{StructuredContent: map[string]any{"conditions": "sunny"}}, tool, "structuredContent: required: Required property 'temperature' is missing"},
		{"minimum", CallToolResult{StructuredContent: map[string]any{"temperature": -200.0}}, tool, "structuredContent.temperature: minimum: -200 should be at least -100"},
		{"bad block", CallToolResult{Content: ContentList{&ImageContent{Data: "x"}}}, nil, "content[0].data: must be base64; content[0].mimeType: required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if err := tt.res.Validate(tt.tool); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
	b, _ := json.Marshal(&CallToolResult{})
	if string(b) != `{"content":[]}` {
		t.Errorf("empty result = %s", b)
	}
	var r CallToolResult
	err := json.Unmarshal([]byte(`{"content":[{"type":"text"}],"isError":true}`), &r)
	if err == nil || err.Error() != "content[0].text: required" {
		t.Errorf("Unmarshal = %v", err)
	}
}

func TestInputRequiredResult(t *testing.T) {
	p, err := NewElicitRequest("Which one?", RequestedSchema{Type: "object", Properties: map[string]*PropertySchema{
		"pick": {Type: "string", OneOf: []EnumOption{{Const: "1", Title: "One"}}},
	}}, &ElicitOptions{Revision: Rev20260728})
	if err != nil {
		t.Fatal(err)
	}
	r := InputRequiredResult{ResultType: ResultTypeInputRequired,
		InputRequests: map[string]InputRequest{"pick": {Method: MethodElicitationCreate, Params: *p}}, RequestState: "opaque"}
	if err := r.Validate(Rev20260728); err != nil {
		t.Errorf("Validate = %v", err)
	}
	if err := r.Validate(Rev20250618); err == nil || err.Error() != "inputRequests.pick.params.requestedSchema.properties.pick.oneOf: not defined by MCP 2025-06-18 (opt in to 2025-11-25)" {
		t.Errorf("Validate(06-18) = %v", err)
	}
	bad := InputRequiredResult{ResultType: "complete", InputRequests: map[string]InputRequest{"x": {Method: "sampling/createMessage", Params: *p}}}
	want := `resultType: must be "input_required"; inputRequests.x.method: must be "elicitation/create"`
	if err := bad.Validate(Rev20260728); err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %s", err, want)
	}
	if err := (&InputRequiredResult{ResultType: ResultTypeInputRequired}).Validate(Rev20260728); err == nil || err.Error() != "must have inputRequests or requestState" {
		t.Errorf("Validate(empty) = %v", err)
	}
}

func TestProgress(t *testing.T) {
	for _, in := range []string{
		`{"progressToken":"tok-1","progress":1,"total":3,"message":"step 1"}`,
		`{"progressToken":7,"progress":0.5}`,
		`{"progressToken":0,"progress":0,"total":0}`,
	} {
		var p Progress
		if err := json.Unmarshal([]byte(in), &p); err != nil {
			t.Fatalf("Unmarshal(%s) = %v", in, err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%s) = %v", in, err)
		}
		b, _ := json.Marshal(&p)
		if string(b) != in {
			t.Errorf("round trip = %s, want %s", b, in)
		}
	}
	for _, tt := range []struct{ in, want string }{
		{`{"progress":1}`, "progressToken: required"},
		{`{"progressToken":"t"}`, "progress: required"},
		{`{"progressToken":1.5,"progress":1}`, "progressToken: must be a string or an integer"},
		{`{"progressToken":true,"progress":1}`, "progressToken: must be a string or an integer"},
		{`{"progressToken":"t","progress":"1"}`, "progress: must be a number"},
	} {
		var p Progress
		if err := json.Unmarshal([]byte(tt.in), &p); err == nil || err.Error() != tt.want {
			t.Errorf("Unmarshal(%s) = %v, want %s", tt.in, err, tt.want)
		}
	}
	if err := (&Progress{ProgressToken: StringToken("t"), Progress: -1, Total: ptr(-2.0)}).Validate(); err == nil || err.Error() != "progress: must be a finite number ≥ 0; total: must be a finite number ≥ 0" {
		t.Errorf("Validate = %v", err)
	}
	p1 := &Progress{ProgressToken: IntToken(1), Progress: 1}
	p2 := &Progress{ProgressToken: IntToken(1), Progress: 2}
	if err := p2.ValidateAfter(p1); err != nil {
		t.Errorf("ValidateAfter = %v", err)
	}
	if err := p1.ValidateAfter(p2); err == nil || err.Error() != "progress: must increase (was 2, now 1)" {
		t.Errorf("ValidateAfter = %v", err)
	}
	if err := p1.ValidateAfter(p1); err == nil || err.Error() != "progress: must increase (was 1, now 1)" {
		t.Errorf("ValidateAfter = %v", err)
	}
	if err := (&Progress{ProgressToken: StringToken("1"), Progress: 3}).ValidateAfter(p1); err == nil || err.Error() != "progressToken: must be the same token (was 1, now 1)" {
		t.Errorf("ValidateAfter = %v", err)
	}
	if StringToken("1") == IntToken(1) || !IntToken(1).IsInt() || IntToken(5).Int() != 5 || !(ProgressToken{}).IsZero() {
		t.Error("token identity")
	}
}

func TestFoldChunks(t *testing.T) {
	chunks := []ChatMessage{
		{Role: RoleAssistant, Text: "Hel", Meta: Meta{MetaStatusItem: "Searching", MetaCitations: []Citation{{URL: "https://a.test"}}}},
		{Text: "lo", Content: ContentList{Text("block")}, Meta: Meta{MetaSuggestedReplies: []string{"Thanks"}}},
		{Role: RoleAssistant, Text: "!", Meta: mustMeta(t, `{"drupal.org/ai.status_item":"Done","drupal.org/ai.citations":[{"url":"https://b.test","title":"B"}]}`)},
	}
	got, err := FoldChunks(chunks...)
	if err != nil {
		t.Fatal(err)
	}
	want := ChatMessage{Role: RoleAssistant, Text: "Hello!", Content: ContentList{Text("block")}, Meta: Meta{
		MetaStatusItem:       "Done",
		MetaSuggestedReplies: []string{"Thanks"},
		MetaCitations:        []Citation{{URL: "https://a.test"}, {URL: "https://b.test", Title: "B"}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FoldChunks (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}
	if _, err := FoldChunks(ChatMessage{Role: RoleUser}, ChatMessage{Role: RoleAssistant}); err == nil {
		t.Error("FoldChunks with two roles: no error")
	}
	if m, err := FoldChunks(); err != nil || m.Meta != nil {
		t.Errorf("FoldChunks() = %v, %v", m, err)
	}
	if err := (&ChatMessage{Role: "system"}).Validate(); err == nil || err.Error() != `role: must be "user" or "assistant"` {
		t.Errorf("Validate = %v", err)
	}
}

func TestValidateArguments(t *testing.T) {
	tool := &Tool{Name: "del", InputSchema: json.RawMessage(`{"type":"object","properties":{"ids":{"type":"array","items":{"type":"string"},"minItems":1}},"required":["ids"],"additionalProperties":false}`)}
	tests := []struct {
		args, want string
	}{
		{`{"ids":["a"]}`, ""},
		{`{"ids":[]}`, "arguments.ids"},
		{`{}`, "arguments"},
		{`{"ids":["a"],"x":1}`, "arguments"},
		{`[1]`, "arguments: must be a JSON object"},
		{`nope`, "arguments: not JSON"},
	}
	for _, tt := range tests {
		err := tool.ValidateArguments(json.RawMessage(tt.args))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("ValidateArguments(%s) = %v, want nil", tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("ValidateArguments(%s) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}
