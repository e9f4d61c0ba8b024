package schema

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kaptinlin/jsonschema"
)

// ToolAnnotations are MCP's behaviour hints on a tool (MCP 2025-06-18
// schema, ToolAnnotations). Absent hints take MCP's defaults: readOnlyHint
// false, destructiveHint true, idempotentHint false, openWorldHint true. All
// four are pointers so that absent and false stay distinct on the wire.
type ToolAnnotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// ReadOnly reports the effective readOnlyHint (false when a or the hint is
// absent).
func (a *ToolAnnotations) ReadOnly() bool {
	return a != nil && a.ReadOnlyHint != nil && *a.ReadOnlyHint
}

// Destructive reports the effective destructiveHint (true when absent).
func (a *ToolAnnotations) Destructive() bool {
	return a == nil || a.DestructiveHint == nil || *a.DestructiveHint
}

// Idempotent reports the effective idempotentHint (false when absent).
func (a *ToolAnnotations) Idempotent() bool {
	return a != nil && a.IdempotentHint != nil && *a.IdempotentHint
}

// OpenWorld reports the effective openWorldHint (true when absent).
func (a *ToolAnnotations) OpenWorld() bool {
	return a == nil || a.OpenWorldHint == nil || *a.OpenWorldHint
}

// ConfirmByAnnotation is the one predicate behind the `by_annotation` gating
// mode (design section 4): confirmation is required unless the tool is
// annotated readOnlyHint: true. An unannotated tool is treated as
// destructive and open-world, as MCP says.
func ConfirmByAnnotation(a *ToolAnnotations) bool { return !a.ReadOnly() }

// Bool returns a pointer to b, for annotation literals.
func Bool(b bool) *bool { return &b }

// Tool is an MCP tool definition (MCP 2025-06-18 schema, Tool). Name is
// required; InputSchema is a JSON Schema object with "type": "object";
// OutputSchema, when set, is one too and constrains
// CallToolResult.StructuredContent. Check one with ValidateTool.
type Tool struct {
	Name         string           `json:"name"`
	Title        string           `json:"title,omitempty"`
	Description  string           `json:"description,omitempty"`
	InputSchema  json.RawMessage  `json:"inputSchema"`
	OutputSchema json.RawMessage  `json:"outputSchema,omitempty"`
	Annotations  *ToolAnnotations `json:"annotations,omitempty"`
	Meta         Meta             `json:"_meta,omitzero"`
}

// DisplayName returns the name to show a person: title, then
// annotations.title, then name (MCP 2025-06-18, "Display name precedence").
func (t *Tool) DisplayName() string {
	switch {
	case t.Title != "":
		return t.Title
	case t.Annotations != nil && t.Annotations.Title != "":
		return t.Annotations.Title
	}
	return t.Name
}

// ToolCall is one tool call a model asked for: the model's call ID, the tool
// name and the arguments as the exact JSON object the model produced.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// CallToolResult is an MCP tool result (MCP 2025-06-18 schema,
// CallToolResult): content blocks (always encoded, [] when nil), optional
// structuredContent (a JSON object) and isError for a tool's own failure.
// Check one with Validate.
type CallToolResult struct {
	Content           ContentList    `json:"content"`
	StructuredContent map[string]any `json:"structuredContent,omitempty"`
	IsError           bool           `json:"isError,omitempty"`
	Meta              Meta           `json:"_meta,omitzero"`
}

// ErrorResult returns a CallToolResult with isError set and one text block.
func ErrorResult(text string) *CallToolResult {
	return &CallToolResult{Content: ContentList{Text(text)}, IsError: true}
}

// InputRequest is one request a tool needs answered before it can finish:
// an `elicitation/create` request (MCP 2026-07-28 schema, InputRequest).
type InputRequest struct {
	Method string              `json:"method"`
	Params ElicitRequestParams `json:"params"`
}

// InputRequiredResult is what a tool returns when it needs answers from the
// user first (MCP 2026-07-28 schema, InputRequiredResult): its requests keyed
// by an ID of the tool's choice, and an opaque RequestState the caller echoes
// back unchanged on the retry.
type InputRequiredResult struct {
	ResultType    string                  `json:"resultType"`
	InputRequests map[string]InputRequest `json:"inputRequests,omitempty"`
	RequestState  string                  `json:"requestState,omitempty"`
}

// ResultTypeInputRequired is InputRequiredResult.ResultType.
const ResultTypeInputRequired = "input_required"

// ValidateTool checks a tool definition (MCP 2025-06-18 and 2025-11-25
// schema, Tool):
//
//   - name is 1 to 128 characters of A-Z a-z 0-9 _ - . (the MCP
//     2025-11-25 tool-name rule; parley also puts names in NATS subjects);
//   - inputSchema is a JSON Schema object with "type": "object" that
//     compiles;
//   - outputSchema, when present, is one too;
//   - _meta passes Meta.Validate.
//
// The error is a *ValidationError, e.g. `inputSchema.type: must be
// "object"`.
func ValidateTool(t *Tool) error {
	var vs violations
	if t == nil {
		vs.add("", "missing tool")
		return vs.err()
	}
	switch {
	case t.Name == "":
		vs.add("name", "required")
	case len(t.Name) > 128 || strings.Trim(t.Name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.") != "":
		vs.add("name", "must be 1 to 128 characters of A-Z a-z 0-9 _ - .")
	}
	if len(t.InputSchema) == 0 || isNull(t.InputSchema) {
		vs.add("inputSchema", "required")
	} else {
		checkObjectSchema(&vs, "inputSchema", t.InputSchema)
	}
	if len(t.OutputSchema) > 0 && !isNull(t.OutputSchema) {
		checkObjectSchema(&vs, "outputSchema", t.OutputSchema)
	}
	vs.merge("", t.Meta.Validate())
	return vs.err()
}

// checkObjectSchema checks that raw is a JSON Schema object with "type":
// "object" that kaptinlin/jsonschema compiles.
func checkObjectSchema(vs *violations, path string, raw json.RawMessage) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		vs.add(path, "must be a JSON Schema object")
		return
	}
	var typ string
	if json.Unmarshal(m["type"], &typ) != nil || typ != "object" {
		vs.add(path+".type", `must be "object"`)
	}
	if _, err := compileSchema(raw); err != nil {
		vs.addf(path, "not a valid JSON Schema: %v", err)
	}
}

// Validate checks the result: every content block (see ValidateContent;
// paths "content[i]..."), _meta, and, when tool has an outputSchema and the
// result is not an error, that structuredContent is present and valid
// against it (JSON Schema 2020-12 via kaptinlin/jsonschema; "format" is an
// annotation there). A nil tool checks the result alone. The error is a
// *ValidationError, e.g. "structuredContent.temperature: minimum: 2 should
// be at least 3".
func (r *CallToolResult) Validate(tool *Tool) error {
	var vs violations
	vs.merge("content", r.Content.Validate())
	vs.merge("", r.Meta.Validate())
	if tool == nil || len(tool.OutputSchema) == 0 || isNull(tool.OutputSchema) || r.IsError {
		return vs.err()
	}
	if r.StructuredContent == nil {
		vs.add("structuredContent", "required by the tool's outputSchema")
		return vs.err()
	}
	s, err := compileSchema(tool.OutputSchema)
	if err != nil {
		vs.addf("outputSchema", "not a valid JSON Schema: %v", err)
		return vs.err()
	}
	// Validate the JSON form, so Go values (structs, ints) are seen as JSON.
	b, err := json.Marshal(r.StructuredContent)
	if err != nil {
		vs.addf("structuredContent", "not JSON: %v", err)
		return vs.err()
	}
	if res := s.ValidateJSON(b); !res.IsValid() {
		var inst any
		_ = json.Unmarshal(b, &inst)
		vs.addSchemaFailures("structuredContent", "outputSchema", res, inst)
	}
	return vs.err()
}

// addSchemaFailures adds the failures of inst (the decoded instance) in
// res under field, each at its path; a failure res names no path for is
// "does not match the tool's <schemaField>".
func (vs *violations) addSchemaFailures(field, schemaField string, res *jsonschema.EvaluationResult, inst any) {
	var out violations
	collectSchemaErrors(&out, res, inst)
	if len(out) == 0 {
		out.add("", "does not match the tool's "+schemaField)
	}
	for _, v := range out {
		vs.add(joinPath(field, v.Path), v.Rule)
	}
}

// applicators are keywords whose error only summarises failures of nested
// schemas; collectSchemaErrors reports the nested failures instead.
var applicators = map[string]bool{
	"properties": true, "patternProperties": true, "items": true, "prefixItems": true,
	"$ref": true, "$dynamicRef": true, "allOf": true, "dependentSchemas": true,
}

// collectSchemaErrors turns a kaptinlin evaluation result into violations
// with dotted instance paths. kaptinlin also evaluates a missing required
// property as null; those results are dropped (the "required" error
// remains).
func collectSchemaErrors(vs *violations, r *jsonschema.EvaluationResult, inst any) {
	if !pointerExists(inst, r.InstanceLocation) {
		return
	}
	hasInvalidChild := false
	for _, d := range r.Details {
		if !d.Valid {
			hasInvalidChild = true
			collectSchemaErrors(vs, d, inst)
		}
	}
	path := pointerToPath(r.InstanceLocation)
	for _, kw := range slices.Sorted(maps.Keys(r.Errors)) {
		if hasInvalidChild && applicators[kw] {
			continue
		}
		v := Violation{path, kw + ": " + r.Errors[kw].Error()}
		if !slices.Contains(*vs, v) {
			*vs = append(*vs, v)
		}
	}
}

// pointerExists reports whether the JSON pointer p names a value in v.
func pointerExists(v any, p string) bool {
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return true
	}
	for _, tok := range strings.Split(p, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return false
			}
			v = x[i]
		default:
			return false
		}
	}
	return true
}

// pointerToPath converts a JSON pointer ("/a/0/b") to a dotted path
// ("a.0.b").
func pointerToPath(p string) string {
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return ""
	}
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return strings.Join(parts, ".")
}

// Validate checks the result for revision rev (see
// ElicitRequestParams.Validate): resultType is "input_required", at least
// one of inputRequests and requestState is present, and every input request
// is a valid `elicitation/create` request. The error is a *ValidationError
// with paths like "inputRequests.pick.params.message".
func (r *InputRequiredResult) Validate(rev Revision) error {
	var vs violations
	if r.ResultType != ResultTypeInputRequired {
		vs.addf("resultType", "must be %q", ResultTypeInputRequired)
	}
	if len(r.InputRequests) == 0 && r.RequestState == "" {
		vs.add("", "must have inputRequests or requestState")
	}
	for _, k := range slices.Sorted(maps.Keys(r.InputRequests)) {
		ir := r.InputRequests[k]
		p := "inputRequests." + k
		if ir.Method != MethodElicitationCreate {
			vs.add(p+".method", fmt.Sprintf("must be %q", MethodElicitationCreate))
		}
		vs.merge(p+".params", ir.Params.Validate(rev))
	}
	return vs.err()
}

// UnmarshalJSON decodes a tool definition; a member of the wrong JSON type
// is a *ValidationError naming it ("name: must be a string").
func (t *Tool) UnmarshalJSON(b []byte) error {
	type wire Tool
	var w wire
	err := unmarshalAs(b, &w)
	*t = Tool(w)
	return err
}

// UnmarshalJSON decodes a tool result; bad content blocks or members of
// the wrong JSON type are a *ValidationError naming them
// ("content[0].mimeType: required").
func (r *CallToolResult) UnmarshalJSON(b []byte) error {
	type wire CallToolResult
	var w wire
	err := unmarshalAs(b, &w, "content")
	*r = CallToolResult(w)
	return err
}

// ValidateArguments checks a call's arguments (a JSON object) against the
// tool's inputSchema (JSON Schema 2020-12 via kaptinlin/jsonschema), so a
// call that cannot run is refused before anyone is asked to confirm it. The
// error is a *ValidationError with paths under "arguments", e.g.
// "arguments.ids: minItems: ...". A tool without an inputSchema accepts any
// object.
func (t *Tool) ValidateArguments(args json.RawMessage) error {
	var vs violations
	if err := CheckJSON(args); err != nil {
		for _, v := range Violations(err) {
			vs.add(joinPath("arguments", v.Path), v.Rule)
		}
		return vs.err()
	}
	var inst any
	if err := json.Unmarshal(args, &inst); err != nil {
		vs.addf("arguments", "not JSON: %v", err)
		return vs.err()
	}
	if _, ok := inst.(map[string]any); !ok {
		vs.add("arguments", "must be a JSON object")
		return vs.err()
	}
	if len(t.InputSchema) == 0 || isNull(t.InputSchema) {
		return nil
	}
	s, err := compileInputSchema(t.InputSchema)
	if err != nil {
		vs.addf("inputSchema", "not a valid JSON Schema: %v", err)
		return vs.err()
	}
	if res := s.ValidateJSON(args); !res.IsValid() {
		vs.addSchemaFailures("arguments", "inputSchema", res, inst)
	}
	return vs.err()
}

// compileSchema compiles a JSON Schema that must stand alone: it
// resolves no remote reference, and a reference it cannot resolve is an
// error. kaptinlin/jsonschema fetches an http or https "$ref" by default,
// and tool schemas come from MCP servers parley need not trust: a "$ref"
// to a URL would have parley (the agent, the processor checking an edit)
// send requests where a server says and validate against whatever that
// URL answers, and a reference left unresolved accepts any value.
// References inside the schema ("#/$defs/item") resolve as before.
func compileSchema(raw []byte) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	for scheme := range c.Loaders {
		delete(c.Loaders, scheme)
	}
	s, err := c.Compile(raw)
	if err != nil {
		return nil, err
	}
	if refs := s.UnresolvedReferenceURIs(); len(refs) > 0 {
		return nil, fmt.Errorf("$ref %q does not resolve inside the schema (parley fetches no remote schema)", refs[0])
	}
	return s, nil
}

// maxCompiledSchemas bounds the compiled input schemas
// compileInputSchema keeps: one per distinct schema, which is one per
// registered tool (and version). Past the bound a schema is compiled on
// every validation, as if none were kept.
const maxCompiledSchemas = 256

var (
	compiledSchemas    sync.Map // string(input schema) -> *jsonschema.Schema
	compiledSchemasLen atomic.Int32
)

// compileInputSchema compiles a tool's input schema once per distinct
// schema (a compiled schema is only read by validation, so it is shared
// between goroutines), instead of on every call's validation.
func compileInputSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	if s, ok := compiledSchemas.Load(string(raw)); ok {
		return s.(*jsonschema.Schema), nil
	}
	s, err := compileSchema(raw)
	if err != nil {
		return nil, err
	}
	if compiledSchemasLen.Load() < maxCompiledSchemas {
		if _, loaded := compiledSchemas.LoadOrStore(string(raw), s); !loaded {
			compiledSchemasLen.Add(1)
		}
	}
	return s, nil
}
