package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// req builds request params JSON with the given properties JSON and
// optional extra requestedSchema members.
func reqJSON(props string, extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return `{"message":"m","requestedSchema":{"type":"object","properties":` + props + extra + `}}`
}

func TestElicitRequestValidate(t *testing.T) {
	const r0, r1 = Rev20250618, Rev20251125
	tests := []struct {
		name string
		rev  Revision
		in   string
		want string // "" means valid
	}{
		// Valid 2025-06-18 shapes.
		{"string", r0, reqJSON(`{"n":{"type":"string","title":"Name","description":"d","minLength":1,"maxLength":50}}`, `"required":["n"]`), ""},
		{"string formats", r0, reqJSON(`{"a":{"type":"string","format":"email"},"b":{"type":"string","format":"uri"},"c":{"type":"string","format":"date"},"d":{"type":"string","format":"date-time"}}`, ""), ""},
		{"min equals max", r0, reqJSON(`{"n":{"type":"string","minLength":0,"maxLength":0}}`, ""), ""},
		{"number", r0, reqJSON(`{"n":{"type":"number","minimum":-1.5,"maximum":2.5},"i":{"type":"integer","minimum":1,"maximum":1}}`, ""), ""},
		{"boolean default", r0, reqJSON(`{"b":{"type":"boolean","default":true}}`, ""), ""},
		{"enum", r0, reqJSON(`{"e":{"type":"string","enum":["a","b"],"enumNames":["A","B"]}}`, ""), ""},
		{"no properties", r0, reqJSON(`{}`, ""), ""},
		{"empty revision is default", "", reqJSON(`{"b":{"type":"boolean"}}`, ""), ""},
		// Valid 2025-11-25 shapes.
		{"titled single", r1, reqJSON(`{"t":{"type":"string","oneOf":[{"const":"a","title":"A"},{"const":"b","title":"B"}],"default":"b"}}`, ""), ""},
		{"untitled multi", r1, reqJSON(`{"m":{"type":"array","minItems":1,"maxItems":2,"items":{"type":"string","enum":["x","y","z"]},"default":["x"]}}`, ""), ""},
		{"titled multi", r1, reqJSON(`{"m":{"type":"array","items":{"anyOf":[{"const":"x","title":"X"}]},"default":[]}}`, ""), ""},
		{"defaults everywhere", r1, reqJSON(`{"s":{"type":"string","default":"x","minLength":1},"n":{"type":"number","default":3.14},"i":{"type":"integer","default":42,"minimum":1,"maximum":100},"e":{"type":"string","enum":["a"],"default":"a"},"l":{"type":"string","enum":["a","b"],"enumNames":["A","B"],"default":"b"},"d":{"type":"string","format":"date","default":"2025-01-31"}}`, ""), ""},
		{"$schema", r1, reqJSON(`{}`, `"$schema":"https://json-schema.org/draft/2020-12/schema"`), ""},
		{"mode form", r1, `{"mode":"form","message":"m","requestedSchema":{"type":"object","properties":{}}}`, ""},
		{"2026-07-28 like 2025-11-25", Rev20260728, reqJSON(`{"m":{"type":"array","items":{"type":"string","enum":["x"]}}}`, ""), ""},

		// Top level.
		{"unknown revision", "2024-11-05", reqJSON(`{}`, ""), `revision: unsupported MCP revision "2024-11-05" (want 2025-06-18, 2025-11-25 or 2026-07-28)`},
		{"no message", r0, `{"requestedSchema":{"type":"object","properties":{}}}`, "message: required"},
		{"message type", r0, `{"message":1,"requestedSchema":{"type":"object","properties":{}}}`, "message: must be a string"},
		{"mode in 06-18", r0, `{"mode":"form","message":"m","requestedSchema":{"type":"object","properties":{}}}`, "mode: not defined by MCP 2025-06-18 (opt in to 2025-11-25)"},
		{"unknown mode", r1, `{"mode":"page","message":"m","requestedSchema":{"type":"object","properties":{}}}`, `mode: must be "form" or "url" ("page" elicitation is not supported)`},
		{"no schema type", r0, `{"message":"m","requestedSchema":{"properties":{}}}`, `requestedSchema.type: must be "object"`},
		{"schema type string", r0, `{"message":"m","requestedSchema":{"type":"string","properties":{}}}`, `requestedSchema.type: must be "object"`},
		{"schema type list", r0, `{"message":"m","requestedSchema":{"type":["object"],"properties":{}}}`, `requestedSchema.type: type lists are not allowed`},
		{"no properties member", r0, `{"message":"m","requestedSchema":{"type":"object"}}`, "requestedSchema.properties: required"},
		{"properties an array", r0, `{"message":"m","requestedSchema":{"type":"object","properties":[]}}`, "requestedSchema.properties: must be an object of property schemas"},
		{"property not an object", r0, reqJSON(`{"a":1}`, ""), "requestedSchema.properties.a: must be a JSON object"},
		{"property null", r0, reqJSON(`{"a":null}`, ""), "requestedSchema.properties.a: must be a schema object"},
		{"empty property name", r0, reqJSON(`{"":{"type":"string"}}`, ""), "requestedSchema.properties.: property name must not be empty"},
		{"required unknown", r0, reqJSON(`{"a":{"type":"string"}}`, `"required":["a","b"]`), `requestedSchema.required[1]: "b" is not a property`},
		{"required duplicate", r0, reqJSON(`{"a":{"type":"string"}}`, `"required":["a","a"]`), `requestedSchema.required[1]: duplicate "a"`},
		{"required not strings", r0, reqJSON(`{"a":{"type":"string"}}`, `"required":[1]`), `requestedSchema.required: must be an array of strings`},
		{"$schema in 06-18", r0, reqJSON(`{}`, `"$schema":"x"`), "requestedSchema.$schema: not defined by MCP 2025-06-18 (opt in to 2025-11-25)"},
		{"additionalProperties", r0, reqJSON(`{}`, `"additionalProperties":false`), "requestedSchema.additionalProperties: nested objects are not allowed"},
		{"top-level allOf", r1, reqJSON(`{}`, `"allOf":[]`), "requestedSchema.allOf: composition keywords are not allowed"},

		// Types.
		{"no type", r0, reqJSON(`{"a":{"title":"A"}}`, ""), "requestedSchema.properties.a.type: required"},
		{"nested object", r0, reqJSON(`{"a":{"type":"object","properties":{"b":{"type":"string"}}}}`, ""), "requestedSchema.properties.a.properties: nested objects are not allowed; requestedSchema.properties.a.type: nested objects are not allowed"},
		{"array in 06-18", r0, reqJSON(`{"a":{"type":"array","items":{"type":"string","enum":["x"]}}}`, ""), `requestedSchema.properties.a.type: "array" is not allowed in MCP 2025-06-18 (multi-select needs 2025-11-25)`},
		{"type list", r0, reqJSON(`{"a":{"type":["string","null"]}}`, ""), "requestedSchema.properties.a.type: type lists are not allowed"},
		{"null type", r0, reqJSON(`{"a":{"type":"null"}}`, ""), `requestedSchema.properties.a.type: "null" is not allowed`},
		{"other type", r0, reqJSON(`{"a":{"type":"file"}}`, ""), `requestedSchema.properties.a.type: "file" is not allowed (string, number, integer, boolean)`},
		{"$ref", r0, reqJSON(`{"a":{"$ref":"#/x"}}`, ""), "requestedSchema.properties.a.$ref: references are not allowed; requestedSchema.properties.a.type: required"},
		{"allOf", r0, reqJSON(`{"a":{"type":"string","allOf":[{"minLength":1}]}}`, ""), "requestedSchema.properties.a.allOf: composition keywords are not allowed"},
		{"anyOf", r0, reqJSON(`{"a":{"type":"string","anyOf":[]}}`, ""), "requestedSchema.properties.a.anyOf: composition keywords are not allowed"},
		{"not", r0, reqJSON(`{"a":{"type":"string","not":{}}}`, ""), "requestedSchema.properties.a.not: composition keywords are not allowed"},
		{"pattern", r0, reqJSON(`{"a":{"type":"string","pattern":"^a"}}`, ""), "requestedSchema.properties.a.pattern: keyword not defined by MCP 2025-06-18"},
		{"pattern in 11-25", r1, reqJSON(`{"a":{"type":"string","pattern":"^a"}}`, ""), "requestedSchema.properties.a.pattern: keyword not defined by MCP 2025-11-25"},

		// String rules.
		{"negative minLength", r0, reqJSON(`{"a":{"type":"string","minLength":-1}}`, ""), "requestedSchema.properties.a.minLength: must be a non-negative integer"},
		{"fractional maxLength", r0, reqJSON(`{"a":{"type":"string","maxLength":1.5}}`, ""), "requestedSchema.properties.a.maxLength: must be a non-negative integer"},
		{"min above max", r0, reqJSON(`{"a":{"type":"string","minLength":5,"maxLength":2}}`, ""), "requestedSchema.properties.a.minLength: must not be greater than maxLength"},
		{"other format", r0, reqJSON(`{"a":{"type":"string","format":"hostname"}}`, ""), `requestedSchema.properties.a.format: "hostname" is not allowed (email, uri, date, date-time)`},
		{"title not a string", r0, reqJSON(`{"a":{"type":"string","title":5}}`, ""), "requestedSchema.properties.a.title: must be a string"},
		{"minimum on string", r0, reqJSON(`{"a":{"type":"string","minimum":1}}`, ""), "requestedSchema.properties.a.minimum: not allowed for a string property"},
		{"string default in 06-18", r0, reqJSON(`{"a":{"type":"string","default":"x"}}`, ""), "requestedSchema.properties.a.default: not defined by MCP 2025-06-18 (opt in to 2025-11-25)"},
		{"string default type", r1, reqJSON(`{"a":{"type":"string","default":1}}`, ""), "requestedSchema.properties.a.default: must be a string"},
		{"string default length", r1, reqJSON(`{"a":{"type":"string","maxLength":2,"default":"abc"}}`, ""), "requestedSchema.properties.a.default: must be at most 2 characters"},
		{"string default format", r1, reqJSON(`{"a":{"type":"string","format":"email","default":"nope"}}`, ""), "requestedSchema.properties.a.default: must be an email address"},

		// Number rules.
		{"minimum above maximum", r0, reqJSON(`{"a":{"type":"number","minimum":5,"maximum":1}}`, ""), "requestedSchema.properties.a.minimum: must not be greater than maximum"},
		{"minimum not a number", r0, reqJSON(`{"a":{"type":"integer","minimum":"1"}}`, ""), "requestedSchema.properties.a.minimum: must be a number"},
		{"maxLength on number", r0, reqJSON(`{"a":{"type":"number","maxLength":3}}`, ""), "requestedSchema.properties.a.maxLength: not allowed for a number property"},
		{"number default in 06-18", r0, reqJSON(`{"a":{"type":"number","default":1}}`, ""), "requestedSchema.properties.a.default: not defined by MCP 2025-06-18 (opt in to 2025-11-25)"},
		{"integer default fraction", r1, reqJSON(`{"a":{"type":"integer","default":1.5}}`, ""), "requestedSchema.properties.a.default: must be an integer"},
		{"number default range", r1, reqJSON(`{"a":{"type":"number","maximum":1,"default":2}}`, ""), "requestedSchema.properties.a.default: must be at most 1"},
		{"number default string", r1, reqJSON(`{"a":{"type":"number","default":"2"}}`, ""), "requestedSchema.properties.a.default: must be a number"},

		// Boolean rules.
		{"boolean default type", r0, reqJSON(`{"a":{"type":"boolean","default":"true"}}`, ""), "requestedSchema.properties.a.default: must be a boolean"},
		{"boolean default null", r0, reqJSON(`{"a":{"type":"boolean","default":null}}`, ""), "requestedSchema.properties.a.default: must be a boolean"},
		{"boolean format", r0, reqJSON(`{"a":{"type":"boolean","format":"email"}}`, ""), "requestedSchema.properties.a.format: not allowed for a boolean property"},

		// Enum rules.
		{"empty enum", r0, reqJSON(`{"a":{"type":"string","enum":[]}}`, ""), "requestedSchema.properties.a.enum: must not be empty"},
		{"enum not strings", r0, reqJSON(`{"a":{"type":"string","enum":[1,2]}}`, ""), "requestedSchema.properties.a.enum: must be an array of strings"},
		{"enum duplicate", r0, reqJSON(`{"a":{"type":"string","enum":["x","x"]}}`, ""), `requestedSchema.properties.a.enum: duplicate value "x"`},
		{"enum without type", r0, reqJSON(`{"a":{"enum":["x"]}}`, ""), "requestedSchema.properties.a.type: required"},
		{"enum on number", r0, reqJSON(`{"a":{"type":"number","enum":["x"]}}`, ""), "requestedSchema.properties.a.enum: not allowed for a number property"},
		{"enumNames length", r0, reqJSON(`{"a":{"type":"string","enum":["x","y"],"enumNames":["X"]}}`, ""), "requestedSchema.properties.a.enumNames: must have as many entries as enum (2)"},
		{"enumNames alone", r0, reqJSON(`{"a":{"type":"string","enumNames":["X"]}}`, ""), "requestedSchema.properties.a.enumNames: requires enum"},
		{"enum with minLength", r0, reqJSON(`{"a":{"type":"string","enum":["x"],"minLength":1}}`, ""), "requestedSchema.properties.a.minLength: not allowed for an enum property"},
		{"enum default in 06-18", r0, reqJSON(`{"a":{"type":"string","enum":["x"],"default":"x"}}`, ""), "requestedSchema.properties.a.default: not defined by MCP 2025-06-18 (opt in to 2025-11-25)"},
		{"enum default member", r1, reqJSON(`{"a":{"type":"string","enum":["x"],"default":"y"}}`, ""), "requestedSchema.properties.a.default: must be one of the enum values"},

		// Titled single-select.
		{"oneOf in 06-18", r0, reqJSON(`{"a":{"type":"string","oneOf":[{"const":"x","title":"X"}]}}`, ""), "requestedSchema.properties.a.oneOf: not defined by MCP 2025-06-18 (opt in to 2025-11-25)"},
		{"oneOf empty", r1, reqJSON(`{"a":{"type":"string","oneOf":[]}}`, ""), "requestedSchema.properties.a.oneOf: must not be empty"},
		{"oneOf entries", r1, reqJSON(`{"a":{"type":"string","oneOf":[{"const":"","title":"X"},{"const":"y"},{"const":"y","title":"Y"}]}}`, ""), `requestedSchema.properties.a.oneOf[0].const: required; requestedSchema.properties.a.oneOf[1].title: required; requestedSchema.properties.a.oneOf[2].const: duplicate value "y"`},
		{"oneOf not options", r1, reqJSON(`{"a":{"type":"string","oneOf":[{"type":"string"},{"const":1}]}}`, ""), "requestedSchema.properties.a.oneOf: must be an array of {const, title} objects"},
		{"oneOf and enum", r1, reqJSON(`{"a":{"type":"string","enum":["x"],"oneOf":[{"const":"x","title":"X"}]}}`, ""), "requestedSchema.properties.a.oneOf: not allowed for an enum property"},
		{"oneOf default member", r1, reqJSON(`{"a":{"type":"string","oneOf":[{"const":"x","title":"X"}],"default":"y"}}`, ""), "requestedSchema.properties.a.default: must be one of the enum values"},

		// Multi-select.
		{"array no items", r1, reqJSON(`{"a":{"type":"array"}}`, ""), "requestedSchema.properties.a.items: required"},
		{"array items neither", r1, reqJSON(`{"a":{"type":"array","items":{"type":"string"}}}`, ""), "requestedSchema.properties.a.items: must have enum or anyOf"},
		{"array items both", r1, reqJSON(`{"a":{"type":"array","items":{"type":"string","enum":["x"],"anyOf":[{"const":"x","title":"X"}]}}}`, ""), "requestedSchema.properties.a.items: must have enum or anyOf, not both"},
		{"array items type", r1, reqJSON(`{"a":{"type":"array","items":{"type":"number","enum":["x"]}}}`, ""), `requestedSchema.properties.a.items.type: must be "string"`},
		{"array items object", r1, reqJSON(`{"a":{"type":"array","items":{"type":"object","properties":{}}}}`, ""), `requestedSchema.properties.a.items.properties: nested objects are not allowed; requestedSchema.properties.a.items: must have enum or anyOf`},
		{"array items not object", r1, reqJSON(`{"a":{"type":"array","items":[{"type":"string"}]}}`, ""), "requestedSchema.properties.a.items: must be an object; requestedSchema.properties.a.items: required"},
		{"array counts", r1, reqJSON(`{"a":{"type":"array","minItems":3,"maxItems":1,"items":{"type":"string","enum":["x"]}}}`, ""), "requestedSchema.properties.a.minItems: must not be greater than maxItems"},
		{"array negative", r1, reqJSON(`{"a":{"type":"array","minItems":-1,"items":{"type":"string","enum":["x"]}}}`, ""), "requestedSchema.properties.a.minItems: must be a non-negative integer"},
		{"array default", r1, reqJSON(`{"a":{"type":"array","maxItems":1,"items":{"type":"string","enum":["x","y"]},"default":["x","z","x"]}}`, ""), `requestedSchema.properties.a.default: must have at most 1 items; requestedSchema.properties.a.default: item "z" is not one of the options; requestedSchema.properties.a.default: duplicate item "x"`},
		{"array default type", r1, reqJSON(`{"a":{"type":"array","items":{"type":"string","enum":["x"]},"default":"x"}}`, ""), "requestedSchema.properties.a.default: must be an array of strings"},
		{"minItems on string", r1, reqJSON(`{"a":{"type":"string","minItems":1}}`, ""), "requestedSchema.properties.a.minItems: not allowed for a string property"},

		// Widgets and meta.
		{"widget for property", r0, `{"message":"m","requestedSchema":{"type":"object","properties":{"a":{"type":"string"}}},"_meta":{"drupal.org/ai.widgets":{"a":{"type":"textarea"}}}}`, ""},
		{"widget for unknown property", r0, `{"message":"m","requestedSchema":{"type":"object","properties":{"a":{"type":"string"}}},"_meta":{"drupal.org/ai.widgets":{"b":{"type":"textarea"}}}}`, `_meta["drupal.org/ai.widgets"].b: no such property in requestedSchema`},
		{"bad meta key", r0, `{"message":"m","requestedSchema":{"type":"object","properties":{}},"_meta":{"mcp.dev/x":1}}`, `_meta["mcp.dev/x"]: prefix "mcp.dev/" is reserved for MCP`},

		// Tool confirmations.
		{"confirmation", r0, `{"message":"Allow?","requestedSchema":{"type":"object","properties":{"instructions":{"type":"string"}}},"_meta":{"drupal.org/ai.tool_call":{"name":"t","toolId":"c","arguments":{}}}}`, ""},
		{"confirmation with other field", r0, `{"message":"Allow?","requestedSchema":{"type":"object","properties":{"instructions":{"type":"string"},"x":{"type":"string"}}},"_meta":{"drupal.org/ai.tool_call":{"name":"t","toolId":"c"}}}`, `requestedSchema: a tool confirmation must ask only for the optional string property "instructions"`},
		{"confirmation requires instructions", r0, `{"message":"Allow?","requestedSchema":{"type":"object","properties":{"instructions":{"type":"string"}},"required":["instructions"]},"_meta":{"drupal.org/ai.tool_call":{"name":"t","toolId":"c"}}}`, `requestedSchema: a tool confirmation must ask only for the optional string property "instructions"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p ElicitRequestParams
			err := json.Unmarshal([]byte(tt.in), &p)
			if err == nil {
				err = p.Validate(tt.rev)
			}
			got := ""
			if err != nil {
				got = err.Error()
				var ve *ValidationError
				if !errors.As(err, &ve) {
					t.Errorf("error is %T, want *ValidationError", err)
				}
			}
			if got != tt.want {
				t.Errorf("Validate(%s)\n got: %s\nwant: %s", tt.rev, got, tt.want)
			}
		})
	}
}

// TestElicitRequestRoundTrip checks that a request, including keywords the
// Go type does not model, encodes back exactly.
func TestElicitRequestRoundTrip(t *testing.T) {
	for _, in := range []string{
		`{"message":"m","requestedSchema":{"type":"object","properties":{"a":{"type":"string","title":"A","minLength":0,"maxLength":3,"format":"email"},"b":{"type":"boolean","default":false},"n":{"type":"number","minimum":0,"maximum":0.5}},"required":["a"]}}`,
		`{"message":"m","requestedSchema":{"type":"object","properties":{"m":{"type":"array","items":{"anyOf":[{"const":"x","title":"X"}]},"minItems":0,"default":[]}}},"_meta":{"drupal.org/ai.elicitation_id":"e1"}}`,
		`{"message":"m","requestedSchema":{"$schema":"x","properties":{"a":{"pattern":"^a","type":["string","null"]}},"type":"object"}}`,
	} {
		var p ElicitRequestParams
		if err := json.Unmarshal([]byte(in), &p); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(&p)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(canon(t, in), canon(t, string(b))); diff != "" {
			t.Errorf("round trip of %s (-want +got):\n%s", in, diff)
		}
	}
}

// canon decodes JSON into generic values for a key-order-independent
// comparison.
func canon(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v in %s", err, s)
	}
	return v
}

func TestNewElicitRequest(t *testing.T) {
	rs := RequestedSchema{
		Type: "object",
		Properties: map[string]*PropertySchema{
			"title": {Type: "string", Title: "Title", MaxLength: ptr(80)},
			"date":  {Type: "string", Format: FormatDate},
		},
		Required: []string{"title", "date"},
	}
	p, err := NewElicitRequest("A title and a date for the event?", rs, &ElicitOptions{
		Widgets: map[string]Widget{"title": {Name: "textfield"}},
		Meta:    Meta{MetaElicitationID: "el-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	rs.Properties["title"].MaxLength = ptr(1) // the request keeps its copy
	if *p.RequestedSchema.Properties["title"].MaxLength != 80 {
		t.Error("NewElicitRequest did not copy the schema")
	}
	b, _ := json.Marshal(p)
	want := `{"message":"A title and a date for the event?","requestedSchema":{"type":"object","properties":{"date":{"type":"string","format":"date"},"title":{"type":"string","title":"Title","maxLength":80}},"required":["title","date"]},"_meta":{"drupal.org/ai.elicitation_id":"el-1","drupal.org/ai.widgets":{"title":{"widget":"textfield"}}}}`
	if string(b) != want {
		t.Errorf("Marshal =\n%s\nwant\n%s", b, want)
	}

	_, err = NewElicitRequest("m", RequestedSchema{Type: "object", Properties: map[string]*PropertySchema{"a": {Type: "string", Default: json.RawMessage(`"x"`)}}}, nil)
	if want := "requestedSchema.properties.a.default: not defined by MCP 2025-06-18 (opt in to 2025-11-25)"; err == nil || err.Error() != want {
		t.Errorf("NewElicitRequest(default, 06-18) = %v, want %s", err, want)
	}
	_, err = NewElicitRequest("m", RequestedSchema{Type: "object", Properties: map[string]*PropertySchema{"a": {Type: "string", Default: json.RawMessage(`"x"`)}}}, &ElicitOptions{Revision: Rev20251125})
	if err != nil {
		t.Errorf("NewElicitRequest(default, 11-25) = %v", err)
	}
	_, err = NewElicitRequest("m", RequestedSchema{Type: "object", Properties: map[string]*PropertySchema{}}, &ElicitOptions{Widgets: map[string]Widget{"x": {Name: "t"}}})
	if want := `_meta["drupal.org/ai.widgets"].x: no such property in requestedSchema`; err == nil || err.Error() != want {
		t.Errorf("NewElicitRequest(widget) = %v, want %s", err, want)
	}
}

func TestNewConfirmationRequest(t *testing.T) {
	tool := &Tool{Name: "delete_entities", Title: "Delete entities", Description: "Deletes content.",
		InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &ToolAnnotations{DestructiveHint: Bool(true)}}
	call := ToolCall{ID: "call_1", Name: "delete_entities", Arguments: json.RawMessage(`{"ids":[1,2]}`)}
	p := NewConfirmationRequest(tool, call)
	if !p.IsToolConfirmation() {
		t.Fatal("not a tool confirmation")
	}
	for _, rev := range []Revision{Rev20250618, Rev20251125, Rev20260728} {
		if err := p.Validate(rev); err != nil {
			t.Errorf("Validate(%s) = %v", rev, err)
		}
	}
	b, _ := json.Marshal(p)
	want := `{"message":"Allow the agent to run \"Delete entities\"?\n\nDeletes content.","requestedSchema":{"type":"object","properties":{"instructions":{"type":"string","description":"Optional instructions if you want the agent to do something differently"}}},"_meta":{"dev.parley/input_schema":{"type":"object"},"drupal.org/ai.tool_call":{"name":"delete_entities","toolId":"call_1","arguments":{"ids":[1,2]},"annotations":{"destructiveHint":true}}}}`
	if string(b) != want {
		t.Errorf("Marshal =\n%s\nwant\n%s", b, want)
	}
	var back ElicitRequestParams
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	tc, err := back.Meta.ToolCall()
	if err != nil || tc.Name != "delete_entities" || string(tc.Arguments) != `{"ids":[1,2]}` || !tc.Annotations.Destructive() {
		t.Errorf("ToolCall() = %+v, %v", tc, err)
	}
}

func TestElicitResultValidate(t *testing.T) {
	form := `{"message":"m","requestedSchema":{"type":"object","properties":{
		"name":{"type":"string","minLength":2,"maxLength":5},
		"email":{"type":"string","format":"email"},
		"site":{"type":"string","format":"uri"},
		"born":{"type":"string","format":"date"},
		"at":{"type":"string","format":"date-time"},
		"age":{"type":"integer","minimum":0,"maximum":150},
		"score":{"type":"number","minimum":0,"maximum":1},
		"ok":{"type":"boolean"},
		"color":{"type":"string","enum":["red","green"]},
		"size":{"type":"string","oneOf":[{"const":"s","title":"Small"},{"const":"l","title":"Large"}]},
		"tags":{"type":"array","minItems":1,"maxItems":2,"items":{"type":"string","enum":["a","b","c"]}}
	},"required":["name","age"]}}`
	confirm := `{"message":"Allow?","requestedSchema":{"type":"object","properties":{"instructions":{"type":"string","maxLength":10}}},"_meta":{"drupal.org/ai.tool_call":{"name":"t","toolId":"c"}}}`
	tests := []struct {
		name, req, res, want string
	}{
		{"accept minimal", form, `{"action":"accept","content":{"name":"Ada","age":36}}`, ""},
		{"accept everything", form, `{"action":"accept","content":{"name":"Ada","age":36.0,"email":"ada@example.com","site":"https://example.com","born":"1815-12-10","at":"1852-11-27T12:00:00Z","score":0.5,"ok":false,"color":"red","size":"l","tags":["a","c"]}}`, ""},
		{"decline", form, `{"action":"decline"}`, ""},
		{"cancel", form, `{"action":"cancel"}`, ""},
		{"unknown action", form, `{"action":"maybe"}`, `action: must be "accept", "decline" or "cancel"`},
		{"no action", form, `{}`, `action: must be "accept", "decline" or "cancel"`},
		{"action case", form, `{"action":"Accept","content":{}}`, `action: must be "accept", "decline" or "cancel"`},
		{"decline with content", form, `{"action":"decline","content":{"name":"x"}}`, "content: only allowed with accept"},
		{"decline with empty content", form, `{"action":"decline","content":{}}`, "content: only allowed with accept"},
		{"cancel with content", form, `{"action":"cancel","content":{}}`, "content: only allowed with accept"},
		{"accept without content", form, `{"action":"accept"}`, "name: required; age: required"},
		{"undeclared", form, `{"action":"accept","content":{"name":"Ada","age":1,"zzz":1,"aaa":2}}`, "aaa: not a property of the requested schema; zzz: not a property of the requested schema"},
		{"string types", form, `{"action":"accept","content":{"name":5,"age":1,"email":true}}`, "name: must be a string; email: must be a string"},
		{"lengths", form, `{"action":"accept","content":{"name":"A","age":1}}`, "name: must be at least 2 characters"},
		{"length in code points", form, `{"action":"accept","content":{"name":"ééééé","age":1}}`, ""},
		{"too long", form, `{"action":"accept","content":{"name":"abcdef","age":1}}`, "name: must be at most 5 characters"},
		{"integer", form, `{"action":"accept","content":{"name":"Ada","age":36.5}}`, "age: must be an integer"},
		{"integer string", form, `{"action":"accept","content":{"name":"Ada","age":"36"}}`, "age: must be an integer"},
		{"number string", form, `{"action":"accept","content":{"name":"Ada","age":1,"score":"0.5"}}`, "score: must be a number"},
		{"range", form, `{"action":"accept","content":{"name":"Ada","age":-1,"score":1.5}}`, "age: must be at least 0; score: must be at most 1"},
		{"boolean string", form, `{"action":"accept","content":{"name":"Ada","age":1,"ok":"true"}}`, "ok: must be a boolean"},
		{"null", form, `{"action":"accept","content":{"name":null,"age":1}}`, "name: must be a string"},
		{"enum", form, `{"action":"accept","content":{"name":"Ada","age":1,"color":"blue","size":"m"}}`, "color: must be one of the enum values; size: must be one of the enum values"},
		{"email", form, `{"action":"accept","content":{"name":"Ada","age":1,"email":"not-an-email"}}`, "email: must be an email address"},
		{"uri", form, `{"action":"accept","content":{"name":"Ada","age":1,"site":"example.com"}}`, "site: must be an absolute URI"},
		{"date", form, `{"action":"accept","content":{"name":"Ada","age":1,"born":"2025-02-30"}}`, "born: must be a date (YYYY-MM-DD)"},
		{"date-time", form, `{"action":"accept","content":{"name":"Ada","age":1,"at":"2025-06-18 10:00"}}`, "at: must be an RFC 3339 date-time"},
		{"items", form, `{"action":"accept","content":{"name":"Ada","age":1,"tags":[]}}`, "tags: must have at least 1 items"},
		{"items max and options", form, `{"action":"accept","content":{"name":"Ada","age":1,"tags":["a","x","a"]}}`, `tags: must have at most 2 items; tags: item "x" is not one of the options; tags: duplicate item "a"`},
		{"items type", form, `{"action":"accept","content":{"name":"Ada","age":1,"tags":"a"}}`, "tags: must be an array of strings"},
		{"items element type", form, `{"action":"accept","content":{"name":"Ada","age":1,"tags":[1]}}`, "tags: must be an array of strings"},
		{"every violation", form, `{"action":"accept","content":{"email":"x","age":1000,"x":1}}`, "name: required; age: must be at most 150; email: must be an email address; x: not a property of the requested schema"},
		{"bad meta", form, `{"action":"cancel","_meta":{"mcp.dev/x":1}}`, `_meta["mcp.dev/x"]: prefix "mcp.dev/" is reserved for MCP`},

		// Tool confirmations.
		{"confirm accept", confirm, `{"action":"accept"}`, ""},
		{"confirm accept with instructions", confirm, `{"action":"accept","content":{"instructions":"be careful"}}`, ""},
		{"confirm decline with instructions", confirm, `{"action":"decline","content":{"instructions":"use draft"}}`, ""},
		{"confirm decline other content", confirm, `{"action":"decline","content":{"instructions":"x","other":1}}`, `other: only "instructions" is allowed with decline`},
		{"confirm decline instructions type", confirm, `{"action":"decline","content":{"instructions":1}}`, "instructions: must be a string"},
		{"confirm decline instructions length", confirm, `{"action":"decline","content":{"instructions":"far too long text"}}`, "instructions: must be at most 10 characters"},
		{"confirm cancel with content", confirm, `{"action":"cancel","content":{"instructions":"x"}}`, "content: only allowed with accept"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req ElicitRequestParams
			if err := json.Unmarshal([]byte(tt.req), &req); err != nil {
				t.Fatal(err)
			}
			if err := req.Validate(Rev20251125); err != nil {
				t.Fatalf("request: %v", err)
			}
			var res ElicitResult
			if err := json.Unmarshal([]byte(tt.res), &res); err != nil {
				t.Fatal(err)
			}
			got := ""
			if err := res.Validate(&req); err != nil {
				got = err.Error()
				var ve *ValidationError
				if !errors.As(err, &ve) {
					t.Errorf("error is %T, want *ValidationError", err)
				}
			}
			if got != tt.want {
				t.Errorf("Validate\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

func TestElicitResultGoValues(t *testing.T) {
	req := &ElicitRequestParams{Message: "m", RequestedSchema: RequestedSchema{Type: "object", Properties: map[string]*PropertySchema{
		"n": {Type: "integer"}, "tags": {Type: "array", Items: &ItemsSchema{Type: "string", Enum: []string{"a"}}},
	}}}
	res := &ElicitResult{Action: ActionAccept, Content: map[string]any{"n": int64(3), "tags": []string{"a"}}}
	if err := res.Validate(req); err != nil {
		t.Errorf("Validate = %v", err)
	}
	res.Content["n"] = json.Number("3.5")
	if err := res.Validate(req); err == nil || err.Error() != "n: must be an integer" {
		t.Errorf("Validate = %v", err)
	}
	if err := (&ElicitResult{Action: ActionAccept, Content: map[string]any{"x": 1}}).Validate(nil); err == nil || !strings.Contains(err.Error(), "x: not a property") {
		t.Errorf("Validate(nil) = %v", err)
	}
	r := &ElicitResult{Action: ActionDecline, Content: map[string]any{InstructionsProperty: "later"}}
	if r.Instructions() != "later" {
		t.Errorf("Instructions() = %q", r.Instructions())
	}
}

func TestElicitResultRoundTrip(t *testing.T) {
	for _, in := range []string{
		`{"action":"accept","content":{}}`,
		`{"action":"accept","content":{"a":"x","b":1,"c":true,"d":["x"]}}`,
		`{"action":"decline"}`,
		`{"action":"cancel","_meta":{"drupal.org/ai.elicitation_id":"e"}}`,
	} {
		var r ElicitResult
		if err := json.Unmarshal([]byte(in), &r); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(&r)
		if string(b) != in {
			t.Errorf("round trip = %s, want %s", b, in)
		}
	}
}

func TestPropertyNames(t *testing.T) {
	s := &RequestedSchema{Properties: map[string]*PropertySchema{"b": {}, "a": {}, "c": {}}, Required: []string{"c", "x"}}
	if diff := cmp.Diff([]string{"c", "a", "b"}, s.PropertyNames()); diff != "" {
		t.Error(diff)
	}
}

func TestRequestedSchemaForRevision(t *testing.T) {
	rs := RequestedSchema{
		Type: "object",
		Properties: map[string]*PropertySchema{
			"title":  {Type: "string", Title: "Title", MinLength: ptr(1), Default: json.RawMessage(`"Launch party"`)},
			"date":   {Type: "string", Format: "date"},
			"guests": {Type: "integer", Default: json.RawMessage(`12`)},
			"room":   {Type: "string", Enum: []string{"a", "b"}, Default: json.RawMessage(`"a"`)},
			"public": {Type: "boolean", Default: json.RawMessage(`true`)},
		},
		Required: []string{"title", "date"},
	}
	before, _ := json.Marshal(rs)

	down := rs.ForRevision(Rev20250618)
	got, _ := json.Marshal(down)
	want := `{"type":"object","properties":{"date":{"type":"string","format":"date"},"guests":{"type":"integer"},"public":{"type":"boolean","default":true},"room":{"type":"string","enum":["a","b"]},"title":{"type":"string","title":"Title","minLength":1}},"required":["title","date"]}`
	if string(got) != want {
		t.Errorf("ForRevision(2025-06-18) =\n%s\nwant\n%s", got, want)
	}
	if err := (&ElicitRequestParams{Message: "m", RequestedSchema: down}).Validate(Rev20250618); err != nil {
		t.Errorf("downgraded form does not validate for 2025-06-18: %v", err)
	}
	if after, _ := json.Marshal(rs); string(after) != string(before) {
		t.Errorf("ForRevision modified its receiver:\n%s\nwas\n%s", after, before)
	}
	if down := rs.ForRevision(""); down.Properties["title"].Default != nil {
		t.Error(`ForRevision("") kept a string default; "" is 2025-06-18`)
	}
	for _, rev := range []Revision{Rev20251125, Rev20260728} {
		if got, _ := json.Marshal(rs.ForRevision(rev)); string(got) != string(before) {
			t.Errorf("ForRevision(%s) changed the form:\n%s", rev, got)
		}
	}

	// Only defaults are downgraded: every other later shape is still refused.
	titled := RequestedSchema{Type: "object", Properties: map[string]*PropertySchema{
		"size": {Type: "string", OneOf: []EnumOption{{Const: "s", Title: "Small"}}, Default: json.RawMessage(`"s"`)},
	}, Extra: map[string]json.RawMessage{"$schema": json.RawMessage(`"https://json-schema.org/draft/2020-12/schema"`)}}
	err := (&ElicitRequestParams{Message: "m", RequestedSchema: titled.ForRevision(Rev20250618)}).Validate(Rev20250618)
	for _, want := range []string{"properties.size.oneOf: not defined by MCP 2025-06-18", "$schema: not defined by MCP 2025-06-18"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(titled, downgraded) = %v, want it to contain %q", err, want)
		}
	}

	p := ElicitRequestParams{Message: "m", RequestedSchema: rs}
	if got := p.ForRevision(Rev20250618); got.RequestedSchema.Properties["title"].Default != nil || p.RequestedSchema.Properties["title"].Default == nil {
		t.Error("ElicitRequestParams.ForRevision did not downgrade a copy")
	}
}
