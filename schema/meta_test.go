package schema

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidateMetaKey(t *testing.T) {
	tests := []struct {
		key, want string // want "" means valid
	}{
		{"progressToken", ""},
		{"x", ""},
		{"a-b_c.d", ""},
		{"drupal.org/", "drupal.org/: name \"\" must be <module>.<name> with a Drupal machine name as module"},
		{"com.example/", ""},
		{"com.example/x", ""},
		{"com.example.mcp/x", ""}, // mcp is the last label: reserved by neither revision
		{"mcp/x", ""},             // a lone mcp label is not followed by another
		{"org.example-1/name.v2", ""},
		{"drupal.org/ai.citations", ""},
		{"drupal.org/ai.suggested_replies", ""},
		{"drupal.org/ai.entity", ""},
		{"drupal.org/ai.tool_call", ""},
		{"drupal.org/ai.structured_content", ""},
		{"drupal.org/ai.status_item", ""},
		{"drupal.org/ai.elicitation_id", ""},
		{"drupal.org/ai.widgets", ""},
		{"drupal.org/my_module.thing", ""},
		{"", "must not be empty"},
		{"-x", `-x: name "-x" must begin and end with a letter or digit and contain only letters, digits, "-", "_" and "."`},
		{"x.", `x.: name "x." must begin and end with a letter or digit and contain only letters, digits, "-", "_" and "."`},
		{"a b", `a b: name "a b" must begin and end with a letter or digit and contain only letters, digits, "-", "_" and "."`},
		{"drupal.org/ai/citations", `drupal.org/ai/citations: name "ai/citations" must not contain "/" (the first "/" ends the prefix)`},
		{"drupal.org/citations", `drupal.org/citations: name "citations" must be <module>.<name> with a Drupal machine name as module`},
		{"drupal.org/Ai.x", `drupal.org/Ai.x: name "Ai.x" must be <module>.<name> with a Drupal machine name as module`},
		{"drupal.org/ai.citation", "drupal.org/ai.citation: not in the drupal.org/ai registry (citations, suggested_replies, entity, tool_call, structured_content, status_item, elicitation_id, widgets)"},
		{"Drupal.org/ai.citations", `Drupal.org/ai.citations: prefix must be "drupal.org/" in lower case`},
		{"1example.com/x", `1example.com/x: prefix label "1example" must start with a letter, end with a letter or digit and contain only letters, digits and hyphens`},
		{"example-.com/x", `example-.com/x: prefix label "example-" must start with a letter, end with a letter or digit and contain only letters, digits and hyphens`},
		{"example..com/x", `example..com/x: prefix label "" must start with a letter, end with a letter or digit and contain only letters, digits and hyphens`},
		{"/x", `/x: prefix label "" must start with a letter, end with a letter or digit and contain only letters, digits and hyphens`},
		// Reserved by 2025-06-18: an mcp label followed by another label.
		{"mcp.dev/x", `mcp.dev/x: prefix "mcp.dev/" is reserved for MCP`},
		{"api.mcp.dev/x", `api.mcp.dev/x: prefix "api.mcp.dev/" is reserved for MCP`},
		{"modelcontextprotocol.io/x", `modelcontextprotocol.io/x: prefix "modelcontextprotocol.io/" is reserved for MCP`},
		{"tools.MCP.com/x", `tools.MCP.com/x: prefix "tools.MCP.com/" is reserved for MCP`},
		// Reserved by 2025-11-25: the second label is an mcp label.
		{"io.modelcontextprotocol/related-task", `io.modelcontextprotocol/related-task: prefix "io.modelcontextprotocol/" is reserved for MCP`},
		{"dev.mcp/x", `dev.mcp/x: prefix "dev.mcp/" is reserved for MCP`},
		{"org.modelcontextprotocol.api/x", `org.modelcontextprotocol.api/x: prefix "org.modelcontextprotocol.api/" is reserved for MCP`},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			err := ValidateMetaKey(tt.key)
			got := ""
			if err != nil {
				got = err.Error()
				if _, ok := err.(*ValidationError); !ok {
					t.Errorf("error is %T", err)
				}
			}
			if got != tt.want {
				t.Errorf("ValidateMetaKey(%q) = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}

func TestMetaValidate(t *testing.T) {
	tests := []struct {
		name string
		m    Meta
		want string
	}{
		{"nil", nil, ""},
		{"registry values", Meta{
			MetaCitations:                          []Citation{{URL: "https://example.com", Title: "Ex"}},
			MetaSuggestedReplies:                   []string{"Yes", "No"},
			MetaEntity:                             Entity{EntityType: "node", ID: "1", Bundle: "article", Status: "published"},
			MetaToolCall:                           ToolCallMeta{Name: "delete", ToolID: "c1", Arguments: json.RawMessage(`{"id":1}`)},
			MetaStructuredContent:                  map[string]any{"a": 1},
			MetaStatusItem:                         "Working",
			MetaElicitationID:                      "el-1",
			MetaWidgets:                            map[string]Widget{"body": {Name: "textarea"}},
			"progressToken":                        "tok",
			"io.modelcontextprotocol/related-task": map[string]any{"taskId": "t"},
		}, ""},
		{"generic JSON values", mustMeta(t, `{"drupal.org/ai.entity":{"entity_type":"node","id":42},"drupal.org/ai.widgets":{"x":{"type":"date"}}}`), ""},
		{"bad citations", Meta{MetaCitations: []Citation{{Title: "no url"}}}, `_meta["drupal.org/ai.citations"][0].url: must be an absolute URI`},
		{"citations wrong type", Meta{MetaCitations: "x"}, `_meta["drupal.org/ai.citations"]: must be an array`},
		{"blank reply", Meta{MetaSuggestedReplies: []string{" "}}, `_meta["drupal.org/ai.suggested_replies"][0]: must not be blank`},
		{"entity", Meta{MetaEntity: map[string]any{"entity_type": "Node"}}, `_meta["drupal.org/ai.entity"].entity_type: must be a Drupal machine name (lower-case letters, digits, underscores); _meta["drupal.org/ai.entity"].id: required`},
		{"entity id", Meta{MetaEntity: map[string]any{"entity_type": "node", "id": true}}, `_meta["drupal.org/ai.entity"].id: must be a string or an integer`},
		{"tool call", Meta{MetaToolCall: map[string]any{"arguments": []any{}}}, `_meta["drupal.org/ai.tool_call"].name: required; _meta["drupal.org/ai.tool_call"].toolId: required; _meta["drupal.org/ai.tool_call"].arguments: must be a JSON object`},
		{"structured content", Meta{MetaStructuredContent: []any{1}}, `_meta["drupal.org/ai.structured_content"]: must be an object`},
		{"empty status", Meta{MetaStatusItem: ""}, `_meta["drupal.org/ai.status_item"]: must not be empty`},
		{"elicitation id type", Meta{MetaElicitationID: 5}, `_meta["drupal.org/ai.elicitation_id"]: must be a string`},
		{"null value", Meta{MetaElicitationID: nil}, `_meta["drupal.org/ai.elicitation_id"]: must not be null`},
		{"seed-shaped widget", mustMeta(t, `{"drupal.org/ai.widgets":{"node":{"widget":"entity_autocomplete","target_type":"node","bundles":["article"]}}}`), ""},
		{"widget options only", Meta{MetaWidgets: map[string]any{"x": map[string]any{}}}, ""},
		{"widget not an object", Meta{MetaWidgets: map[string]any{"x": "textarea"}}, `_meta["drupal.org/ai.widgets"].x: must be an object`},
		{"widget name type", Meta{MetaWidgets: map[string]any{"x": map[string]any{"widget": 1}}}, `_meta["drupal.org/ai.widgets"].x.widget: must be a string`},
		{"progress token", Meta{"progressToken": 1.5}, `_meta["progressToken"]: progress token must be a string or an integer`},
		{"reserved", Meta{"dev.mcp/x": 1, "io.modelcontextprotocol/other": 2}, `_meta["dev.mcp/x"]: prefix "dev.mcp/" is reserved for MCP; _meta["io.modelcontextprotocol/other"]: prefix "io.modelcontextprotocol/" is reserved for MCP`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if err := tt.m.Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

func mustMeta(t *testing.T, s string) Meta {
	t.Helper()
	var m Meta
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMetaHelpers(t *testing.T) {
	var m Meta // nil: setters allocate
	m.SetCitations([]Citation{{URL: "https://a.test"}})
	m.SetSuggestedReplies([]string{"ok"})
	m.SetEntity(Entity{EntityType: "node", ID: "7"})
	m.SetToolCall(ToolCallMeta{Name: "t", ToolID: "c", Arguments: json.RawMessage(`{}`)})
	m.SetStructuredContent(map[string]any{"n": 1.0})
	m.SetStatusItem("s")
	m.SetElicitationID("e")
	m.SetWidgets(map[string]Widget{"p": {Name: "textarea"}})
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	check := func(m Meta) {
		t.Helper()
		cs, err := m.Citations()
		if err != nil || cmp.Diff([]Citation{{URL: "https://a.test"}}, cs) != "" {
			t.Errorf("Citations() = %v, %v", cs, err)
		}
		rs, err := m.SuggestedReplies()
		if err != nil || cmp.Diff([]string{"ok"}, rs) != "" {
			t.Errorf("SuggestedReplies() = %v, %v", rs, err)
		}
		e, err := m.Entity()
		if err != nil || cmp.Diff(&Entity{EntityType: "node", ID: "7"}, e) != "" {
			t.Errorf("Entity() = %v, %v", e, err)
		}
		tc, err := m.ToolCall()
		if err != nil || tc.Name != "t" || string(tc.Arguments) != "{}" {
			t.Errorf("ToolCall() = %v, %v", tc, err)
		}
		sc, err := m.StructuredContent()
		if err != nil || cmp.Diff(map[string]any{"n": 1.0}, sc) != "" {
			t.Errorf("StructuredContent() = %v, %v", sc, err)
		}
		if s, err := m.StatusItem(); s != "s" || err != nil {
			t.Errorf("StatusItem() = %q, %v", s, err)
		}
		if s, err := m.ElicitationID(); s != "e" || err != nil {
			t.Errorf("ElicitationID() = %q, %v", s, err)
		}
		ws, err := m.Widgets()
		if err != nil || cmp.Diff(map[string]Widget{"p": {Name: "textarea"}}, ws) != "" {
			t.Errorf("Widgets() = %v, %v", ws, err)
		}
	}
	check(m)
	// The same after a JSON round trip (generic values).
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	check(mustMeta(t, string(b)))

	// Absent keys.
	var empty Meta
	if e, err := empty.Entity(); e != nil || err != nil {
		t.Errorf("Entity() on empty = %v, %v", e, err)
	}
	if _, err := (Meta{MetaEntity: "x"}).Entity(); err == nil {
		t.Error("Entity() of a string: no error")
	}
}

// TestSeedShapedWidgetHint: the plan's own example of a
// widget hint is accepted on an elicitation form, read back with its
// options, and written back in the same open shape.
func TestSeedShapedWidgetHint(t *testing.T) {
	raw := `{"message":"Which article?","requestedSchema":{"type":"object","properties":{"node":{"type":"string","title":"Article"}}},` +
		`"_meta":{"drupal.org/ai.widgets":{"node":{"widget":"entity_autocomplete","target_type":"node","bundles":["article"]}}}}`
	var p ElicitRequestParams
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(DefaultRevision); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	ws, err := p.Meta.Widgets()
	if err != nil {
		t.Fatal(err)
	}
	want := Widget{Name: "entity_autocomplete", Options: map[string]any{"target_type": "node", "bundles": []any{"article"}}}
	if diff := cmp.Diff(want, ws["node"]); diff != "" {
		t.Errorf("Widgets()[node] (-want +got):\n%s", diff)
	}
	out, err := json.Marshal(ws["node"])
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); got != `{"bundles":["article"],"target_type":"node","widget":"entity_autocomplete"}` {
		t.Errorf("marshalled hint = %s", got)
	}
	// The older spelling is read as an alias.
	var old Widget
	if err := json.Unmarshal([]byte(`{"type":"textarea","options":{"rows":5}}`), &old); err != nil ||
		old.Name != "textarea" || old.Options["rows"] != 5.0 {
		t.Errorf("alias: %+v, %v", old, err)
	}
	// A hint for a property that does not exist is still refused.
	p.Meta = Meta{MetaWidgets: map[string]any{"nope": map[string]any{"widget": "textarea"}}}
	if err := p.Validate(DefaultRevision); err == nil || !strings.Contains(err.Error(), "no such property") {
		t.Errorf("hint for a missing property: %v", err)
	}
}

// "type" names the widget only as a string without "widget"; otherwise it
// is an option, never rejected nor silently dropped.
func TestWidgetTypeAlias(t *testing.T) {
	for _, c := range []struct {
		body    string
		name    string
		typeOpt string // JSON of Options["type"], "" if absent
	}{
		{`{"type":"textarea"}`, "textarea", ""},
		{`{"widget":"entity_autocomplete","type":{"bundle":"article"}}`, "entity_autocomplete", `{"bundle":"article"}`},
		{`{"widget":"entity_autocomplete","type":"node"}`, "entity_autocomplete", `"node"`},
		{`{"type":{"bundle":"article"}}`, "", `{"bundle":"article"}`},
	} {
		var w Widget
		if err := json.Unmarshal([]byte(c.body), &w); err != nil {
			t.Errorf("%s: %v", c.body, err)
			continue
		}
		got := ""
		if v, ok := w.Options["type"]; ok {
			b, _ := json.Marshal(v)
			got = string(b)
		}
		if w.Name != c.name || got != c.typeOpt {
			t.Errorf("%s: name %q, type option %s; want %q, %s", c.body, w.Name, got, c.name, c.typeOpt)
		}
	}
}
