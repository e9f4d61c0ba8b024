package builtin

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/parley-dev/parley/schema"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/parley-dev/parley/internal/mcpschema"
)

// mcpSchemaDir holds the official MCP JSON Schemas (../shared/mcp of the
// checkout); override with PARLEY_MCP_SCHEMAS. Tests skip without it.
func mcpSchemaDir(t *testing.T) string {
	return mcpschema.Dir(t, "2025-06-18")
}

func TestMain(m *testing.M) { os.Exit(mcpschema.Run(m)) }

func validateShape(t *testing.T, sch *jsonschema.Schema, what string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: marshal: %v", what, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("%s does not validate: %v\n%s", what, err, data)
	}
}

// Every shape the tools emit validates against the official MCP schemas:
// tools and CallToolResults against 2025-06-18, InputRequiredResults against
// 2026-07-28; every inputSchema is a JSON Schema that accepts good arguments
// and rejects unknown ones.
func TestMCPShapes(t *testing.T) {
	dir := mcpSchemaDir(t)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	compile := func(rev, def string) *jsonschema.Schema {
		sch, err := c.Compile(filepath.Join(dir, rev, "schema.json") + def)
		if err != nil {
			t.Fatalf("compiling %s %s: %v", rev, def, err)
		}
		return sch
	}
	toolSchema := compile("2025-06-18", "#/definitions/Tool")
	resultSchema := compile("2025-06-18", "#/definitions/CallToolResult")
	inputSchema := compile("2026-07-28", "#/$defs/InputRequiredResult")

	s, _ := newSite(t)
	for _, tool := range s.Tools() {
		d := tool.Definition()
		validateShape(t, toolSchema, d.Name, d)

		ic := jsonschema.NewCompiler()
		ic.AssertFormat()
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(d.InputSchema))
		if err != nil {
			t.Fatalf("%s inputSchema: %v", d.Name, err)
		}
		if err := ic.AddResource("mem://"+d.Name, doc); err != nil {
			t.Fatal(err)
		}
		in, err := ic.Compile("mem://" + d.Name)
		if err != nil {
			t.Fatalf("%s inputSchema does not compile: %v", d.Name, err)
		}
		validateShape(t, in, d.Name+" good arguments", goodArgs[d.Name])
		bad, _ := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(`{"unknown_argument": 1}`)))
		if in.Validate(bad) == nil {
			t.Errorf("%s inputSchema accepts an unknown argument", d.Name)
		}
	}

	// Results of every kind, including errors and input-required ones.
	results := []struct {
		tool string
		req  Request
	}{
		{ToolListEntities, Request{Arguments: args(goodArgs[ToolListEntities])}},
		{ToolGetEntity, Request{Arguments: args(map[string]string{"id": "event-2"})}},
		{ToolGetEntity, Request{Arguments: args(map[string]string{"title": "About"})}},
		{ToolGetEntity, Request{Arguments: args(map[string]string{"id": "none"})}},
		{ToolCreateEvent, Request{CallID: "s1", Arguments: args(map[string]string{})}},
		{ToolCreateEvent, Request{CallID: "s2", Arguments: args(goodArgs[ToolCreateEvent])}},
		{ToolPublishEntities, Request{CallID: "s3", Arguments: args(goodArgs[ToolPublishEntities])}},
		{ToolDeleteEntities, Request{CallID: "s4", Arguments: args(map[string]any{"ids": []string{"page-8", "x"}})}},
		{ToolDeleteEntities, Request{CallID: "s5", Arguments: args(map[string]any{"ids": []string{"x"}})}},
		{ToolDeleteEntities, Request{CallID: "s6", Arguments: json.RawMessage(`{"ids": 3}`)}},
	}
	for _, r := range results {
		got := call(t, s, r.tool, r.req)
		what := r.tool + " " + string(r.req.Arguments)
		if got.InputRequired != nil {
			validateShape(t, inputSchema, what, got.InputRequired)
			for k, q := range got.InputRequired.InputRequests {
				if err := q.Params.Validate(schema.DefaultRevision); err != nil {
					t.Errorf("%s: input request %s: %v", what, k, err)
				}
			}
			continue
		}
		validateShape(t, resultSchema, what, got.Call)
	}
}

var goodArgs = map[string]any{
	ToolListEntities:    map[string]any{"type": "article", "status": "draft", "title_prefix": "How"},
	ToolGetEntity:       map[string]any{"title": "About us"},
	ToolCreateEvent:     map[string]any{"title": "Launch", "date": "2026-06-01"},
	ToolPublishEntities: map[string]any{"ids": []string{"article-2", "article-4"}},
	ToolDeleteEntities:  map[string]any{"ids": []string{"article-2"}},
}
