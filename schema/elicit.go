package schema

import (
	"encoding/json"
	"fmt"
	"net/url"
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
	// Rev20260728 has the elicitation shapes of 2025-11-25; its requests
	// travel inside an InputRequiredResult.
	Rev20260728 Revision = "2026-07-28"
)

// Known reports whether r is a revision this package supports.
func (r Revision) Known() bool {
	return r == Rev20250618 || r == Rev20251125 || r == Rev20260728
}

// extended reports whether r has the 2025-11-25 elicitation shapes.
func (r Revision) extended() bool { return r == Rev20251125 || r == Rev20260728 }

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

// EnumOption is one titled option of a 2025-11-25 enum: {const, title}
// (MCP 2025-11-25 schema, TitledSingleSelectEnumSchema.oneOf[] and
// TitledMultiSelectEnumSchema.items.anyOf[]). Both are required and
// non-empty.
type EnumOption struct {
	Const string `json:"const"`
	Title string `json:"title"`
}

// ItemsSchema is the `items` of a 2025-11-25 multi-select property: either
// {"type": "string", "enum": [...]} (UntitledMultiSelectEnumSchema) or
// {"anyOf": [{const, title}...]} (TitledMultiSelectEnumSchema). Extra holds
// members this type does not define, and members of the wrong JSON type, as
// decoded; Validate rejects them and MarshalJSON writes them back.
type ItemsSchema struct {
	Type  string                     `json:"type,omitempty"`
	Enum  []string                   `json:"enum,omitempty"`
	AnyOf []EnumOption               `json:"anyOf,omitempty"`
	Extra map[string]json.RawMessage `json:"-"`
}

// PropertySchema is one property of an elicitation's requestedSchema: a
// string, number/integer, boolean or enum schema (MCP 2025-06-18 schema,
// PrimitiveSchemaDefinition), or, for 2025-11-25, a titled single-select,
// a multi-select (type "array") or any primitive with a default. Lengths
// (minLength, maxLength, in Unicode code points) and item counts (minItems,
// maxItems) are non-negative counts; minimum and maximum are numbers.
// Default is the raw JSON default value.
//
// Extra holds keywords this type does not define ("pattern", "$ref",
// "allOf"...) and keywords of the wrong JSON type (a type list, a
// fractional minLength), as decoded; ElicitRequestParams.Validate rejects
// them and MarshalJSON writes them back, so a foreign schema round-trips
// exactly.
type PropertySchema struct {
	Type        string                     `json:"type"`
	Title       string                     `json:"title,omitempty"`
	Description string                     `json:"description,omitempty"`
	MinLength   *int                       `json:"minLength,omitempty"`
	MaxLength   *int                       `json:"maxLength,omitempty"`
	Format      string                     `json:"format,omitempty"`
	Minimum     *float64                   `json:"minimum,omitempty"`
	Maximum     *float64                   `json:"maximum,omitempty"`
	Default     json.RawMessage            `json:"default,omitempty"`
	Enum        []string                   `json:"enum,omitempty"`
	EnumNames   []string                   `json:"enumNames,omitempty"`
	OneOf       []EnumOption               `json:"oneOf,omitempty"`
	Items       *ItemsSchema               `json:"items,omitempty"`
	MinItems    *int                       `json:"minItems,omitempty"`
	MaxItems    *int                       `json:"maxItems,omitempty"`
	Extra       map[string]json.RawMessage `json:"-"`
}

// RequestedSchema is an elicitation's form: a flat object of primitive
// properties (MCP 2025-06-18 schema, ElicitRequest.params.requestedSchema).
// Type must be "object"; Required names properties that must be answered on
// accept. Extra holds other members as decoded ("$schema", allowed from
// 2025-11-25, or anything Validate rejects).
type RequestedSchema struct {
	Type       string                     `json:"type"`
	Properties map[string]*PropertySchema `json:"properties"`
	Required   []string                   `json:"required,omitempty"`
	Extra      map[string]json.RawMessage `json:"-"`
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

// MethodElicitationCreate is the JSON-RPC method of an MCP elicitation
// request.
const MethodElicitationCreate = "elicitation/create"

// ElicitRequestParams is the params object of an MCP `elicitation/create`
// request (MCP 2025-06-18 schema, ElicitRequest.params; 2025-11-25,
// ElicitRequestFormParams and ElicitRequestURLParams): the message shown to
// the user, the requested form or (URL mode) the URL to visit, and
// `_meta`. Mode is empty or, from 2025-11-25, "form" or "url" (ModeURL).
// Build one with NewElicitRequest or NewConfirmationRequest; check a
// received one with Validate.
type ElicitRequestParams struct {
	Mode    string `json:"mode,omitempty"`
	Message string `json:"message"`
	// RequestedSchema is the form (form mode); absent in URL mode.
	RequestedSchema RequestedSchema `json:"requestedSchema,omitzero"`
	// URL is the page the user is asked to visit (URL mode only): shown in
	// full with its host, opened only with the user's explicit consent,
	// never by parley itself (MCP 2025-11-25, "Safe URL handling").
	URL string `json:"url,omitempty"`
	// ElicitationID is the server's opaque ID of a URL-mode elicitation
	// (required by MCP 2025-11-25, dropped in 2026-07-28); it names the
	// elicitation in notifications/elicitation/complete.
	ElicitationID string `json:"elicitationId,omitempty"`
	Meta          Meta   `json:"_meta,omitzero"`
}

// ModeURL is the mode of a URL-mode elicitation (MCP 2025-11-25): the
// user is sent to a URL out of band; the answer is accept (consent),
// decline or cancel, never content.
const ModeURL = "url"

// MaxElicitURLBytes bounds the url of a URL-mode elicitation; a longer one
// is refused by Validate.
const MaxElicitURLBytes = 8 << 10

// IsURLMode reports whether p is a URL-mode elicitation.
func (p *ElicitRequestParams) IsURLMode() bool { return p.Mode == ModeURL }

// URLHost returns the host (with port, if any) of a URL-mode
// elicitation's url, for showing next to the full URL ("" when the url
// does not parse or has no host).
func (p *ElicitRequestParams) URLHost() string {
	u, err := url.Parse(p.URL)
	if err != nil {
		return ""
	}
	return u.Host
}

// ElicitResult is the user's answer (MCP 2025-06-18 schema, ElicitResult):
// the action and, on accept, the form content keyed by property name. Values
// are strings, numbers, booleans or (2025-11-25 multi-select) arrays of
// strings. Check it against its request with Validate.
type ElicitResult struct {
	Action  ElicitAction   `json:"action"`
	Content map[string]any `json:"content,omitzero"`
	Meta    Meta           `json:"_meta,omitzero"`
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
// (design section 4): the message comes from the registered tool definition
// (never from model output), the call rides _meta["drupal.org/ai.tool_call"],
// and the form asks only for optional instructions. The tool's input
// schema rides _meta["dev.parley/input_schema"] (when at most
// MaxEditSchemaBytes), offering the person an edit of the arguments
// (CheckEdit).
//
// A tool of an MCP server that is not trusted (its definition's
// _meta["dev.parley/mcp"] says so, see MCPTool) is worded in parley's own
// words, by its registered name: "a tool from MCP server evil that parley
// cannot vouch for"; the server's title and description follow, quoted
// line by line and labelled as the server's, and its annotations (only a
// title is left of them at registration) are not carried, so clients show
// the tool as what parley knows it to be: not read-only, destructive.
func NewConfirmationRequest(tool *Tool, call ToolCall) *ElicitRequestParams {
	ann := tool.Annotations
	var msg string
	if mt := tool.MCPTool(); mt != nil && !mt.Trusted {
		msg = untrustedToolMessage(tool, call, mt.Server)
		ann = nil
	} else {
		msg = fmt.Sprintf("Allow the agent to run %q?", tool.DisplayName())
		if tool.Description != "" {
			msg += "\n\n" + tool.Description
		}
	}
	meta := Meta{MetaToolCall: ToolCallMeta{
		Name: call.Name, ToolID: call.ID, Arguments: call.Arguments, Annotations: ann,
	}}
	if is := editSchema(tool); is != nil {
		meta[MetaInputSchema] = is
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
		Meta: meta,
	}
}

// untrustedToolMessage words the confirmation of a tool of the untrusted
// MCP server named server: parley's words first, then what the server says
// about the tool (its title and description), each line quoted ("> "), so
// that the server's text can neither end the quote nor pass for parley's.
func untrustedToolMessage(tool *Tool, call ToolCall, server string) string {
	name := call.Name
	if name == "" {
		name = tool.Name
	}
	msg := fmt.Sprintf("Allow the agent to run %q? It is a tool from MCP server %q that parley cannot vouch for: "+
		"the server is not trusted, so parley treats the tool as able to change anything, whatever the server says about it.", name, server)
	title := tool.Title
	if title == "" && tool.Annotations != nil {
		title = tool.Annotations.Title
	}
	var said []string
	if title != "" {
		said = append(said, "Title: "+title)
	}
	if tool.Description != "" {
		said = append(said, strings.Split(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(tool.Description), "\n")...)
	}
	if len(said) == 0 {
		return msg
	}
	msg += fmt.Sprintf("\n\nServer %q describes it as follows (its own words, not checked by parley):", server)
	for _, l := range said {
		msg += "\n> " + l
	}
	return msg
}

// IsToolConfirmation reports whether the request carries
// _meta["drupal.org/ai.tool_call"], i.e. it confirms a tool call.
func (p *ElicitRequestParams) IsToolConfirmation() bool {
	_, ok := p.Meta[MetaToolCall]
	return ok
}
