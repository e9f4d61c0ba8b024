package schema

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Revision is an MCP protocol revision, e.g. "2025-06-18". It chooses which
// elicitation shapes a request may contain.
type Revision string

// Supported MCP revisions.
const (
	// Rev20250618 is the default: flat primitive forms only.
	Rev20250618 Revision = "2025-06-18"
	// Rev20251125 adds titled and multi-select enums and defaults on every
	// primitive; opt in only for consumers that speak it.
	Rev20251125 Revision = "2025-11-25"
)

// DefaultRevision is the revision used when none is given.
const DefaultRevision = Rev20250618

// ElicitAction is the user's answer to an elicitation: "accept", "decline"
// or "cancel" (MCP 2025-06-18 schema, ElicitResult.action).
type ElicitAction string

// The three elicitation actions.
const (
	ActionAccept  ElicitAction = "accept"
	ActionDecline ElicitAction = "decline"
	ActionCancel  ElicitAction = "cancel"
)

// EnumOption is one titled option of a 2025-11-25 enum: {const, title}.
type EnumOption struct {
	Const string `json:"const"`
	Title string `json:"title"`
}

// ItemsSchema is the `items` of a 2025-11-25 multi-select property.
type ItemsSchema struct {
	Type  string       `json:"type,omitempty"`
	Enum  []string     `json:"enum,omitempty"`
	AnyOf []EnumOption `json:"anyOf,omitempty"`
}

// PropertySchema is one property of an elicitation's requestedSchema: a
// string, number/integer, boolean or enum schema (MCP 2025-06-18 schema,
// PrimitiveSchemaDefinition), or, for 2025-11-25, a titled or multi-select
// enum. Lengths and item counts are counts; minimum/maximum are numbers.
type PropertySchema struct {
	Type        string          `json:"type"`
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	MinLength   *int            `json:"minLength,omitempty"`
	MaxLength   *int            `json:"maxLength,omitempty"`
	Format      string          `json:"format,omitempty"`
	Minimum     *float64        `json:"minimum,omitempty"`
	Maximum     *float64        `json:"maximum,omitempty"`
	Default     json.RawMessage `json:"default,omitempty"`
	Enum        []string        `json:"enum,omitempty"`
	EnumNames   []string        `json:"enumNames,omitempty"`
	OneOf       []EnumOption    `json:"oneOf,omitempty"`
	Items       *ItemsSchema    `json:"items,omitempty"`
	MinItems    *int            `json:"minItems,omitempty"`
	MaxItems    *int            `json:"maxItems,omitempty"`
}

// RequestedSchema is an elicitation's form: a flat object of primitive
// properties (MCP 2025-06-18 schema, ElicitRequest.params.requestedSchema).
type RequestedSchema struct {
	Type       string                     `json:"type"`
	Properties map[string]*PropertySchema `json:"properties"`
	Required   []string                   `json:"required,omitempty"`
}

// PropertyNames returns the property names, required ones first (in the
// order of Required), then the rest sorted, for prompting in a stable order.
func (s *RequestedSchema) PropertyNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range s.Required {
		if _, ok := s.Properties[r]; ok && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	var rest []string
	for k := range s.Properties {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// ElicitRequestParams is the params object of an MCP `elicitation/create`
// request (MCP 2025-06-18 schema, ElicitRequest.params): the message shown to
// the user, the requested form, and `_meta`.
type ElicitRequestParams struct {
	Message         string          `json:"message"`
	RequestedSchema RequestedSchema `json:"requestedSchema"`
	Meta            Meta            `json:"_meta,omitempty"`
}

// ElicitResult is the user's answer (MCP 2025-06-18 schema, ElicitResult):
// the action and, on accept, the form content.
type ElicitResult struct {
	Action  ElicitAction   `json:"action"`
	Content map[string]any `json:"content,omitempty"`
	Meta    Meta           `json:"_meta,omitempty"`
}

// Violation is one rule a value breaks: Path names the field (a property
// name, or a dotted path) and Rule says what is wrong.
type Violation struct {
	Path string `json:"path"`
	Rule string `json:"rule"`
}

// String formats the violation as "path: rule".
func (v Violation) String() string { return v.Path + ": " + v.Rule }

// ValidationError lists every violation found. Its Error text is one
// "path: rule" per violation, joined by "; ".
type ValidationError struct {
	Violations []Violation `json:"violations"`
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.String()
	}
	return strings.Join(parts, "; ")
}

// ToolCallMeta is the value of _meta["drupal.org/ai.tool_call"] on a
// confirmation elicitation: which tool call is to be confirmed.
type ToolCallMeta struct {
	Name        string           `json:"name"`
	ToolID      string           `json:"toolId"`
	Arguments   json.RawMessage  `json:"arguments"`
	Annotations *ToolAnnotations `json:"annotations,omitempty"`
}

// InstructionsProperty is the single property of a tool-confirmation form.
const InstructionsProperty = "instructions"

// NewConfirmationRequest builds the confirmation elicitation for a tool call
// (design section 4): the message comes from the trusted tool definition
// (never from model output), the call rides _meta["drupal.org/ai.tool_call"],
// and the form asks only for optional instructions.
func NewConfirmationRequest(tool *Tool, call ToolCall) *ElicitRequestParams {
	msg := fmt.Sprintf("Allow %s to run?", tool.DisplayName())
	if tool.Description != "" {
		msg = fmt.Sprintf("Allow %s to run? %s", tool.DisplayName(), tool.Description)
	}
	return &ElicitRequestParams{
		Message: msg,
		RequestedSchema: RequestedSchema{
			Type: "object",
			Properties: map[string]*PropertySchema{
				InstructionsProperty: {
					Type:        "string",
					Description: "Optional instructions if you want the agent to do something differently",
				},
			},
		},
		Meta: Meta{MetaToolCall: ToolCallMeta{
			Name: call.Name, ToolID: call.ID, Arguments: call.Arguments, Annotations: tool.Annotations,
		}},
	}
}

// IsToolConfirmation reports whether the request carries
// _meta["drupal.org/ai.tool_call"], i.e. it confirms a tool call.
func (p *ElicitRequestParams) IsToolConfirmation() bool {
	_, ok := p.Meta[MetaToolCall]
	return ok
}
