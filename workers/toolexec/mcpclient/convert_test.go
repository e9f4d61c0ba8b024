package mcpclient

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/parley-dev/parley/schema"
)

// Every content kind, with annotations and _meta, survives parley -> SDK ->
// parley unchanged, and so does its wire JSON.
func TestResultRoundTrip(t *testing.T) {
	p := func(f float64) *float64 { return &f }
	size := int64(3)
	text, blob := "hello", "AQID"
	in := &schema.CallToolResult{
		Content: schema.ContentList{
			&schema.TextContent{Text: "t", Annotations: &schema.Annotations{Audience: []schema.Role{schema.RoleUser, schema.RoleAssistant}, Priority: p(1),
				LastModified: "2025-01-12T15:00:58Z"}, Meta: schema.Meta{"com.example/a": "b"}},
			&schema.ImageContent{Data: "iVBORw0KGgo=", MIMEType: "image/png", Annotations: &schema.Annotations{Audience: []schema.Role{schema.RoleUser}, Priority: p(0.5)}},
			&schema.AudioContent{Data: "UklGRg==", MIMEType: "audio/wav", Meta: schema.Meta{"com.example/x": float64(1)}},
			&schema.ResourceLink{URI: "https://example.com/a", Name: "a", Title: "A", Description: "d", MIMEType: "text/html", Size: &size,
				Icons: []schema.Icon{{Src: "https://example.com/i.png", MIMEType: "image/png", Sizes: []string{"48x48"}}}},
			&schema.EmbeddedResource{Resource: schema.ResourceContents{URI: "file:///a.txt", MIMEType: "text/plain", Text: &text,
				Meta: schema.Meta{"com.example/r": "s"}}, Annotations: &schema.Annotations{Priority: p(0.2)}},
			&schema.EmbeddedResource{Resource: schema.ResourceContents{URI: "file:///a.bin", Blob: &blob}},
		},
		StructuredContent: map[string]any{"n": float64(1), "list": []any{"x"}},
		IsError:           true,
		Meta:              schema.Meta{"com.example/trace": "t1"},
	}
	sdk, err := resultToSDK(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sdk.Content[1].(*mcp.ImageContent); !ok || len(sdk.Content) != 6 {
		t.Fatalf("SDK content: %#v", sdk.Content)
	}
	out, err := resultFromSDK(sdk)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Fatalf("round trip (-in +out):\n%s", diff)
	}
	var a, b any
	ja, _ := json.Marshal(in)
	jb, _ := json.Marshal(sdk)
	if err := json.Unmarshal(ja, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(jb, &b); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("wire JSON differs (-parley +SDK):\n%s", diff)
	}
}

// What the SDK cannot represent: an annotation priority of 0 is dropped
// (documented in convert.go), so this test pins the loss.
func TestPriorityZeroIsLostBySDK(t *testing.T) {
	zero := 0.0
	in := &schema.CallToolResult{Content: schema.ContentList{&schema.TextContent{Text: "t", Annotations: &schema.Annotations{Priority: &zero}}}}
	sdk, err := resultToSDK(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := resultFromSDK(sdk)
	if err != nil {
		t.Fatal(err)
	}
	if a := out.Content[0].(*schema.TextContent).Annotations; a == nil || a.Priority != nil {
		t.Fatalf("annotations %+v", a)
	}
}

// A result parley cannot represent is an error naming the field.
func TestResultFromSDKRejects(t *testing.T) {
	_, err := resultFromSDK(&mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: []byte{1}}}})
	if err == nil || !strings.Contains(err.Error(), "content[0].mimeType") {
		t.Fatalf("got %v", err)
	}
	_, err = resultFromSDK(&mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: []any{1}})
	if err == nil || !strings.Contains(err.Error(), "structuredContent") {
		t.Fatalf("got %v", err)
	}
}

// Tool definitions keep name, title, schemas and annotations; absent
// destructiveHint stays absent (default true). The SDK writes an absent
// idempotentHint as false, its default.
func TestToolFromSDK(t *testing.T) {
	f := false
	def, err := toolFromSDK(&mcp.Tool{Name: "get-sum", Title: "Sum", Description: "adds",
		InputSchema:  map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "number"}}},
		OutputSchema: map[string]any{"type": "object"},
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &f}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(def)
	want := `{"name":"get-sum","title":"Sum","description":"adds","inputSchema":{"properties":{"a":{"type":"number"}},"type":"object"},` +
		`"outputSchema":{"type":"object"},"annotations":{"readOnlyHint":true,"idempotentHint":false,"openWorldHint":false}}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if !def.Annotations.Destructive() {
		t.Fatal("absent destructiveHint must stay the default (true)")
	}
	if _, err := toolFromSDK(&mcp.Tool{Name: "bad name", InputSchema: map[string]any{"type": "object"}}); err == nil {
		t.Fatal("invalid tool name accepted")
	}
}

// Elicitation params and results convert both ways.
func TestElicitConversion(t *testing.T) {
	p, err := elicitFromSDK(&mcp.ElicitParams{Message: "m", RequestedSchema: map[string]any{"type": "object",
		"properties": map[string]any{"n": map[string]any{"type": "integer", "minimum": 1.0, "default": 42.0}}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Message != "m" || p.RequestedSchema.Properties["n"].Type != "integer" {
		t.Fatalf("%+v", p)
	}
	r, err := elicitResultToSDK(schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"n": float64(2), "tags": []any{"a"}}})
	if err != nil || r.Action != "accept" || r.Content["n"] != float64(2) {
		t.Fatalf("%v %+v", err, r)
	}
}
