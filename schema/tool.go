package schema

import "encoding/json"

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

// ReadOnly reports the effective readOnlyHint (false when a or the hint is absent).
func (a *ToolAnnotations) ReadOnly() bool { return a != nil && a.ReadOnlyHint != nil && *a.ReadOnlyHint }

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

// Tool is an MCP tool definition (MCP 2025-06-18 schema, Tool). InputSchema
// is a JSON Schema object with "type":"object"; OutputSchema, when set,
// constrains CallToolResult.StructuredContent.
type Tool struct {
	Name         string           `json:"name"`
	Title        string           `json:"title,omitempty"`
	Description  string           `json:"description,omitempty"`
	InputSchema  json.RawMessage  `json:"inputSchema"`
	OutputSchema json.RawMessage  `json:"outputSchema,omitempty"`
	Annotations  *ToolAnnotations `json:"annotations,omitempty"`
	Meta         Meta             `json:"_meta,omitempty"`
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
// CallToolResult): content blocks, optional structuredContent (a JSON
// object) and isError for a tool's own failure.
type CallToolResult struct {
	Content           ContentList    `json:"content"`
	StructuredContent map[string]any `json:"structuredContent,omitempty"`
	IsError           bool           `json:"isError,omitempty"`
	Meta              Meta           `json:"_meta,omitempty"`
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
