package schema

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	sjs "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/parley-dev/parley/internal/mcpschema"
)

// TestMain says, in one line, which conformance tests were skipped because
// the official MCP schemas are missing (under CI=true they fail instead).
func TestMain(m *testing.M) { os.Exit(mcpschema.Run(m)) }

// officialSchemas compiles definitions of the official schema.json of one
// revision (draft-07 for 2025-06-18, 2020-12 later), asserting formats.
type officialSchemas struct {
	t    *testing.T
	c    *sjs.Compiler
	url  string
	defs string
}

func loadOfficial(t *testing.T, rev Revision) *officialSchemas {
	t.Helper()
	dir := mcpschema.Dir(t, string(rev))
	path := filepath.Join(dir, string(rev), "schema.json")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := sjs.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := sjs.NewCompiler()
	c.AssertFormat()
	url := "https://modelcontextprotocol.io/schema/" + string(rev) + ".json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	defs := "$defs"
	if rev == Rev20250618 {
		defs = "definitions"
	}
	return &officialSchemas{t: t, c: c, url: url, defs: defs}
}

// check reports whether v, encoded as parley encodes it, validates against
// the definition at ref (a JSON pointer below the definitions, e.g.
// "TextContent" or "ElicitRequest/properties/params").
func (o *officialSchemas) check(ref string, v any) error {
	o.t.Helper()
	sch, err := o.c.Compile(o.url + "#/" + o.defs + "/" + ref)
	if err != nil {
		o.t.Fatalf("compiling %s: %v", ref, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		o.t.Fatalf("marshal: %v", err)
	}
	inst, err := sjs.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		o.t.Fatal(err)
	}
	return sch.Validate(inst)
}

func (o *officialSchemas) valid(ref string, v any) {
	o.t.Helper()
	if err := o.check(ref, v); err != nil {
		b, _ := json.Marshal(v)
		o.t.Errorf("%s does not validate against %s:\n%v", b, ref, err)
	}
}

// emittedBlocks are content blocks of every kind, as parley emits them.
func emittedBlocks() []Content {
	ann := &Annotations{Audience: []Role{RoleUser, RoleAssistant}, Priority: ptr(0.0), LastModified: "2025-01-12T15:00:58Z"}
	meta := Meta{MetaEntity: Entity{EntityType: "node", ID: "1", Bundle: "article", Status: "published"}}
	return []Content{
		Text("plain"),
		&TextContent{Text: "annotated", Annotations: ann, Meta: meta},
		&ImageContent{Data: "iVBORw0KGgo=", MIMEType: "image/png", Annotations: ann, Meta: meta},
		&AudioContent{Data: "UklGRg==", MIMEType: "audio/wav", Annotations: ann},
		&ResourceLink{URI: "https://example.com/node/1", Name: "node-1", Title: "Node 1", Description: "d", MIMEType: "text/html", Size: ptr(int64(12)), Annotations: ann, Meta: meta},
		&EmbeddedResource{Resource: ResourceContents{URI: "demo://r/1", MIMEType: "text/plain", Text: ptr("hello"), Meta: Meta{MetaStatusItem: "x"}}, Annotations: ann, Meta: meta},
		&EmbeddedResource{Resource: ResourceContents{URI: "demo://r/2", MIMEType: "application/octet-stream", Blob: ptr("AAEC")}},
		// Context references of a user message, as `parley send --ref`,
		// the gateway and the web chat send them (events.ReferenceLink),
		// and the links back on the answer.
		&ResourceLink{URI: "entity:page/page-1", Name: "About us", Meta: Meta{MetaEntity: Entity{EntityType: "page", ID: "page-1", Label: "About us"}}},
		&EmbeddedResource{Resource: ResourceContents{URI: "entity:page/page-1", MIMEType: "text/plain", Text: ptr("the part I mean")},
			Meta: Meta{MetaEntity: Entity{EntityType: "page", ID: "page-1"}}},
		&ResourceLink{URI: "https://site.example/node/page-1", Name: "About us", Description: "Referenced in your message",
			Meta: Meta{MetaEntity: Entity{EntityType: "page", ID: "page-1", Bundle: "page", Status: "published", Label: "About us"}}},
	}
}

func emittedTool() *Tool {
	return &Tool{Name: "delete_entities", Title: "Delete entities", Description: "Deletes content.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"ids":{"type":"array","items":{"type":"integer"}}},"required":["ids"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"deleted":{"type":"integer"}}}`),
		Annotations:  &ToolAnnotations{Title: "Delete", ReadOnlyHint: Bool(false), DestructiveHint: Bool(true), IdempotentHint: Bool(true), OpenWorldHint: Bool(false)},
		Meta:         Meta{MetaStatusItem: "Deleting"}}
}

func flatForm(t *testing.T, rev Revision) *ElicitRequestParams {
	p, err := NewElicitRequest("Event details?", RequestedSchema{Type: "object", Properties: map[string]*PropertySchema{
		"title": {Type: "string", Title: "Title", Description: "d", MinLength: ptr(1), MaxLength: ptr(80)},
		"email": {Type: "string", Format: FormatEmail},
		"url":   {Type: "string", Format: FormatURI},
		"date":  {Type: "string", Format: FormatDate},
		"at":    {Type: "string", Format: FormatDateTime},
		"seats": {Type: "integer", Minimum: ptr(1.0), Maximum: ptr(100.0)},
		"price": {Type: "number", Minimum: ptr(0.0)},
		"ok":    {Type: "boolean", Default: json.RawMessage(`true`)},
		"kind":  {Type: "string", Enum: []string{"talk", "meetup"}, EnumNames: []string{"Talk", "Meetup"}},
	}, Required: []string{"title", "date"}}, &ElicitOptions{Revision: rev,
		Widgets: map[string]Widget{"title": {Name: "textfield"}}, Meta: Meta{MetaElicitationID: "el-1"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func extendedForm(t *testing.T, rev Revision) *ElicitRequestParams {
	p, err := NewElicitRequest("Pick", RequestedSchema{Type: "object", Properties: map[string]*PropertySchema{
		"s":      {Type: "string", Default: json.RawMessage(`"x"`)},
		"n":      {Type: "number", Default: json.RawMessage(`3.14`)},
		"i":      {Type: "integer", Default: json.RawMessage(`42`)},
		"e":      {Type: "string", Enum: []string{"a", "b"}, Default: json.RawMessage(`"a"`)},
		"legacy": {Type: "string", Enum: []string{"a", "b"}, EnumNames: []string{"A", "B"}, Default: json.RawMessage(`"b"`)},
		"titled": {Type: "string", OneOf: []EnumOption{{Const: "a", Title: "A"}, {Const: "b", Title: "B"}}, Default: json.RawMessage(`"a"`)},
		"multi":  {Type: "array", MinItems: ptr(1), MaxItems: ptr(2), Items: &ItemsSchema{Type: "string", Enum: []string{"x", "y"}}, Default: json.RawMessage(`["x"]`)},
		"tmulti": {Type: "array", Items: &ItemsSchema{AnyOf: []EnumOption{{Const: "x", Title: "X"}}}, Default: json.RawMessage(`[]`)},
	}}, &ElicitOptions{Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func confirmation() *ElicitRequestParams {
	return NewConfirmationRequest(emittedTool(), ToolCall{ID: "call_1", Name: "delete_entities", Arguments: json.RawMessage(`{"ids":[1]}`)})
}

func emittedResults() []*ElicitResult {
	return []*ElicitResult{
		{Action: ActionAccept, Content: map[string]any{"title": "Go meetup", "date": "2025-06-18", "seats": 30, "ok": true}, Meta: Meta{MetaElicitationID: "el-1"}},
		{Action: ActionAccept, Content: map[string]any{InstructionsProperty: "only the drafts"}},
		{Action: ActionDecline, Content: map[string]any{InstructionsProperty: "use a draft instead"}},
		{Action: ActionDecline},
		{Action: ActionCancel},
	}
}

func TestOfficialSchema20250618(t *testing.T) {
	o := loadOfficial(t, Rev20250618)
	for _, c := range emittedBlocks() {
		o.valid("ContentBlock", c)
	}
	o.valid("ElicitRequest/properties/params", flatForm(t, Rev20250618))
	o.valid("ElicitRequest/properties/params", confirmation())
	for _, r := range emittedResults() {
		o.valid("ElicitResult", r)
	}
	o.valid("Tool", emittedTool())
	o.valid("Tool", &Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object"}`)})
	o.valid("CallToolResult", &CallToolResult{Content: ContentList(emittedBlocks()), StructuredContent: map[string]any{"deleted": 1}})
	o.valid("CallToolResult", ErrorResult("boom"))
	o.valid("CallToolResult", &CallToolResult{})
	o.valid("ProgressNotification/properties/params", &Progress{ProgressToken: StringToken("tok-1"), Progress: 1, Total: ptr(3.0), Message: "step 1"})
	o.valid("ProgressNotification/properties/params", &Progress{ProgressToken: IntToken(7), Progress: 0.5})

	// A 2025-11-25 shape does not validate for a 2025-06-18 consumer: that
	// is why the request builder refuses it without the opt-in.
	if err := o.check("ElicitRequest/properties/params", extendedForm(t, Rev20251125)); err == nil {
		t.Error("a multi-select request validates against the 2025-06-18 schema")
	}
}

func TestOfficialSchema20251125(t *testing.T) {
	o := loadOfficial(t, Rev20251125)
	for _, c := range emittedBlocks() {
		o.valid("ContentBlock", c)
	}
	o.valid("ResourceLink", &ResourceLink{URI: "https://x.test/a", Name: "a", Icons: []Icon{{Src: "https://x.test/i.png", MIMEType: "image/png", Sizes: []string{"48x48"}, Theme: "light"}}})
	o.valid("ElicitRequestFormParams", flatForm(t, Rev20251125))
	o.valid("ElicitRequestFormParams", extendedForm(t, Rev20251125))
	o.valid("ElicitRequestFormParams", confirmation())
	o.valid("ElicitRequestParams", extendedForm(t, Rev20251125))
	for _, r := range emittedResults() {
		o.valid("ElicitResult", r)
	}
	o.valid("ElicitResult", &ElicitResult{Action: ActionAccept, Content: map[string]any{"multi": []string{"x", "y"}, "titled": "a"}})
	o.valid("Tool", emittedTool())
	o.valid("CallToolResult", &CallToolResult{Content: ContentList(emittedBlocks()), StructuredContent: map[string]any{"deleted": 1}})
	o.valid("ProgressNotificationParams", &Progress{ProgressToken: StringToken("tok-1"), Progress: 1, Total: ptr(3.0), Message: "m", Meta: Meta{MetaStatusItem: "x"}})
}

func TestOfficialSchema20260728(t *testing.T) {
	o := loadOfficial(t, Rev20260728)
	p := extendedForm(t, Rev20260728)
	ir := &InputRequiredResult{ResultType: ResultTypeInputRequired, RequestState: "opaque",
		InputRequests: map[string]InputRequest{"pick": {Method: MethodElicitationCreate, Params: *p}, "confirm": {Method: MethodElicitationCreate, Params: *confirmation()}}}
	if err := ir.Validate(Rev20260728); err != nil {
		t.Fatal(err)
	}
	o.valid("InputRequiredResult", ir)
	for _, c := range emittedBlocks() {
		o.valid("ContentBlock", c)
	}
	o.valid("Tool", emittedTool())
	o.valid("ProgressNotificationParams", &Progress{ProgressToken: IntToken(1), Progress: 1})
}

// TestEmittedShapesPassOwnRules keeps the official-schema fixtures honest:
// everything they validate also passes this package's own checks.
func TestEmittedShapesPassOwnRules(t *testing.T) {
	for _, c := range emittedBlocks() {
		if err := ValidateContent(c); err != nil {
			t.Errorf("ValidateContent(%T) = %v", c, err)
		}
	}
	if err := ValidateTool(emittedTool()); err != nil {
		t.Errorf("ValidateTool = %v", err)
	}
	req := flatForm(t, Rev20250618)
	if err := emittedResults()[0].Validate(req); err != nil {
		t.Errorf("result = %v", err)
	}
	for _, r := range emittedResults()[1:] {
		if err := r.Validate(confirmation()); err != nil {
			t.Errorf("confirmation result %+v = %v", r, err)
		}
	}
	res := &CallToolResult{Content: ContentList(emittedBlocks()), StructuredContent: map[string]any{"deleted": 1}}
	if err := res.Validate(emittedTool()); err != nil {
		t.Errorf("CallToolResult = %v", err)
	}
}
