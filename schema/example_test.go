package schema_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/parley-dev/parley/schema"
)

func ExampleNewElicitRequest() {
	p, err := schema.NewElicitRequest("A title and a date for the event?", schema.RequestedSchema{
		Type: "object",
		Properties: map[string]*schema.PropertySchema{
			"title": {Type: "string", Title: "Title", MaxLength: new(80)},
			"date":  {Type: "string", Format: schema.FormatDate},
		},
		Required: []string{"title", "date"},
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := json.Marshal(p)
	fmt.Println(string(b))

	// A multi-select needs the 2025-11-25 opt-in.
	_, err = schema.NewElicitRequest("Tags?", schema.RequestedSchema{
		Type: "object",
		Properties: map[string]*schema.PropertySchema{
			"tags": {Type: "array", Items: &schema.ItemsSchema{Type: "string", Enum: []string{"go", "nats"}}},
		},
	}, nil)
	fmt.Println(err)
	// Output:
	// {"message":"A title and a date for the event?","requestedSchema":{"type":"object","properties":{"date":{"type":"string","format":"date"},"title":{"type":"string","title":"Title","maxLength":80}},"required":["title","date"]}}
	// requestedSchema.properties.tags.type: "array" is not allowed in MCP 2025-06-18 (multi-select needs 2025-11-25)
}

func ExampleElicitResult_Validate() {
	var req schema.ElicitRequestParams
	_ = json.Unmarshal([]byte(`{"message":"Who are you?","requestedSchema":{"type":"object",
		"properties":{"email":{"type":"string","format":"email"},"age":{"type":"integer","minimum":0}},
		"required":["email"]}}`), &req)

	var res schema.ElicitResult
	_ = json.Unmarshal([]byte(`{"action":"accept","content":{"age":"42","nick":"ada"}}`), &res)

	var ve *schema.ValidationError
	if errors.As(res.Validate(&req), &ve) {
		for _, v := range ve.Violations {
			fmt.Println(v)
		}
	}
	// Output:
	// email: required
	// age: must be an integer
	// nick: not a property of the requested schema
}

func ExampleValidateMetaKey() {
	for _, k := range []string{"drupal.org/ai.citations", "drupal.org/ai/citations", "api.mcp.dev/x", "com.example/x"} {
		if err := schema.ValidateMetaKey(k); err != nil {
			fmt.Println(err)
		} else {
			fmt.Println(k, "ok")
		}
	}
	// Output:
	// drupal.org/ai.citations ok
	// drupal.org/ai/citations: name "ai/citations" must not contain "/" (the first "/" ends the prefix)
	// api.mcp.dev/x: prefix "api.mcp.dev/" is reserved for MCP
	// com.example/x ok
}

func ExampleConfirmByAnnotation() {
	fmt.Println(schema.ConfirmByAnnotation(nil))
	fmt.Println(schema.ConfirmByAnnotation(&schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true)}))
	fmt.Println(schema.ConfirmByAnnotation(&schema.ToolAnnotations{DestructiveHint: schema.Bool(false)}))
	// Output:
	// true
	// false
	// true
}

func ExampleFoldChunks() {
	var first, second schema.ChatMessage
	first = schema.ChatMessage{Role: schema.RoleAssistant, Text: "Paris is "}
	first.Meta.SetCitations([]schema.Citation{{URL: "https://en.wikipedia.org/wiki/Paris"}})
	second = schema.ChatMessage{Text: "the capital."}
	second.Meta.SetSuggestedReplies([]string{"And of Italy?"})

	m, _ := schema.FoldChunks(first, second)
	b, _ := json.Marshal(m)
	fmt.Println(string(b))
	// Output:
	// {"role":"assistant","text":"Paris is the capital.","_meta":{"drupal.org/ai.citations":[{"url":"https://en.wikipedia.org/wiki/Paris"}],"drupal.org/ai.suggested_replies":["And of Italy?"]}}
}
