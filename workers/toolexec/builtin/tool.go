package builtin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/parley-dev/parley/schema"
)

// Names of the built-in tools.
const (
	ToolListEntities    = "list_entities"
	ToolGetEntity       = "get_entity"
	ToolCreateEvent     = "create_event"
	ToolPublishEntities = "publish_entities"
	ToolDeleteEntities  = "delete_entities"
)

// MaxIDs is the largest number of IDs publish_entities and delete_entities
// accept in one call.
const MaxIDs = 100

// Request is one execution of a tool call.
type Request struct {
	// CallID is the model's tool-call ID, unique per run; with Round it
	// identifies one execution. Mutating tools record their effect under
	// it, so executing the same CallID again has no second effect.
	CallID string
	// RunID optionally scopes CallID (an addition to the lead's API). Model
	// call IDs are unique only per run, and a scripted model may repeat
	// them across runs; when RunID is set, a call's identity for the
	// exactly-once ledger is (RunID, CallID), otherwise CallID alone.
	// Keep it identical across executions of one call.
	RunID string
	// Round is 0 for the first call and n for the n-th retry with input
	// responses.
	Round int
	// Arguments is the exact JSON object of arguments; empty or null means {}.
	Arguments json.RawMessage
	// InputResponses are the answers to a previous InputRequiredResult,
	// keyed like its InputRequests.
	InputResponses map[string]schema.ElicitResult
	// RequestState is echoed back unchanged from the previous
	// InputRequiredResult.
	RequestState string
}

// Result is exactly one of Call or InputRequired.
type Result struct {
	// Call is the tool's result; IsError marks the tool's own failure.
	Call *schema.CallToolResult
	// InputRequired asks the user first; call the tool again with the
	// answers in Request.InputResponses and its RequestState.
	InputRequired *schema.InputRequiredResult
}

// Tool is a built-in tool.
type Tool interface {
	// Definition returns the MCP tool definition: name, title, the trusted
	// description that confirmation prompts quote, the input JSON Schema
	// and honest annotations.
	Definition() schema.Tool
	// Call executes the tool. The error reports an infrastructure failure
	// (the KV store unreachable, the context done) and is worth retrying
	// with the same Request; a tool's own failure, including bad arguments,
	// is a Result whose Call has IsError set.
	Call(ctx context.Context, req Request) (Result, error)
}

// Tools returns the five built-in tools over s: list_entities, get_entity,
// create_event, publish_entities and delete_entities, in that order.
func (s *Site) Tools() []Tool {
	return []Tool{
		listEntities{s},
		getEntity{s},
		createEvent{s},
		publishEntities{s},
		deleteEntities{s},
	}
}

// Tool returns the built-in tool with the given name, or false.
func (s *Site) Tool(name string) (Tool, bool) {
	for _, t := range s.Tools() {
		if t.Definition().Name == name {
			return t, true
		}
	}
	return nil, false
}

// callResult wraps a CallToolResult in a Result.
func callResult(r *schema.CallToolResult) Result { return Result{Call: r} }

// errorResult is a tool failure with one text block.
func errorResult(format string, args ...any) Result {
	return callResult(schema.ErrorResult(fmt.Sprintf(format, args...)))
}

// accepted reads the answer a retry of tool carries to its question key:
// the request state tool issued and the answer's content; or, as r, the
// error result to return: a request state not from tool, no answer under
// key, or an answer other than accept (worded "<refused>: the user
// answered <action>.").
func accepted(req Request, tool, key, refused string) (st requestState, content map[string]any, r *Result) {
	fail := func(format string, args ...any) (requestState, map[string]any, *Result) {
		res := errorResult(format, args...)
		return requestState{}, nil, &res
	}
	st, ok := decodeState(req.RequestState, tool)
	if !ok {
		return fail("invalid requestState: not from a %s question", tool)
	}
	answer, ok := req.InputResponses[key]
	if !ok {
		return fail("missing input response %q", key)
	}
	if answer.Action != schema.ActionAccept {
		return fail("%s: the user answered %q.", refused, answer.Action)
	}
	return st, answer.Content, nil
}

// definition is a built-in tool's MCP definition; title is also its
// annotations' title.
func definition(name, title, description, inputSchema string, a *schema.ToolAnnotations) schema.Tool {
	a.Title = title
	return schema.Tool{Name: name, Title: title, Description: description,
		InputSchema: json.RawMessage(inputSchema), Annotations: a}
}

// readOnlyAnnotations are the MCP annotations of a built-in tool that
// changes nothing (readOnlyHint true, a closed world).
func readOnlyAnnotations() *schema.ToolAnnotations {
	return &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true), OpenWorldHint: schema.Bool(false)}
}

// writeAnnotations are the MCP annotations of a built-in tool that
// changes the site (readOnlyHint false, a closed world), every hint
// spelled out.
func writeAnnotations(destructive, idempotent bool) *schema.ToolAnnotations {
	return &schema.ToolAnnotations{
		ReadOnlyHint:    schema.Bool(false),
		DestructiveHint: schema.Bool(destructive),
		IdempotentHint:  schema.Bool(idempotent),
		OpenWorldHint:   schema.Bool(false),
	}
}

// argError is a tool failure naming an argument.
func argError(field, rule string) Result {
	return errorResult("invalid arguments: %s: %s", field, rule)
}

// arg is one named argument and where to decode it.
type arg struct {
	name string
	dst  any    // pointer
	want string // e.g. "a string", for the error text
}

// decodeArgs decodes the JSON object raw into the args, rejecting non-objects,
// unknown members and wrong types. On failure it returns an IsError result
// naming the argument. A JSON null member counts as absent.
func decodeArgs(raw json.RawMessage, args ...arg) *Result {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		r := errorResult("invalid arguments: must be a JSON object: %v", err)
		return &r
	}
	var unknown []string
	for k := range obj {
		if !slices.ContainsFunc(args, func(a arg) bool { return a.name == k }) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		r := argError(strings.Join(unknown, ", "), "unknown argument")
		return &r
	}
	for _, a := range args {
		v, ok := obj[a.name]
		if !ok {
			continue
		}
		if err := json.Unmarshal(v, a.dst); err != nil {
			r := argError(a.name, "must be "+a.want)
			return &r
		}
	}
	return nil
}

// cleanIDs trims, checks and de-duplicates ids (keeping first occurrences).
func cleanIDs(ids []string) ([]string, *Result) {
	if len(ids) == 0 {
		r := argError("ids", "required, a non-empty array of entity IDs")
		return nil, &r
	}
	if len(ids) > MaxIDs {
		r := argError("ids", fmt.Sprintf("at most %d IDs", MaxIDs))
		return nil, &r
	}
	var out []string
	for i, id := range ids {
		id = strings.TrimSpace(id)
		if id == "" {
			r := argError(fmt.Sprintf("ids[%d]", i), "must not be empty")
			return nil, &r
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// link returns the resource_link block for e, with _meta["drupal.org/ai.entity"].
func (s *Site) link(e Entity) *schema.ResourceLink {
	return &schema.ResourceLink{
		URI:         s.baseURL + "/node/" + e.ID,
		Name:        e.Title,
		Description: fmt.Sprintf("%s %s, %s", capitalize(e.Type), e.ID, e.Status),
		MIMEType:    "text/html",
		Meta: schema.Meta{schema.MetaEntity: map[string]any{
			"entity_type": e.Type,
			"id":          e.ID,
			"bundle":      e.Type,
			"status":      e.Status,
			"title":       e.Title,
		}},
	}
}

// summary is an entity's one-line description: Title (id, type, status[, date]).
func summary(e Entity) string {
	if e.Date != "" {
		return fmt.Sprintf("%q (%s, %s, %s, %s)", e.Title, e.ID, e.Type, e.Status, e.Date)
	}
	return fmt.Sprintf("%q (%s, %s, %s)", e.Title, e.ID, e.Type, e.Status)
}

// entityResult is the result carrying one entity: a text block with its
// summary and body, its resource_link, and the entity as structuredContent.
func (s *Site) entityResult(prefix string, e Entity) *schema.CallToolResult {
	text := prefix + summary(e)
	if e.Body != "" {
		text += "\n\n" + e.Body
	}
	return &schema.CallToolResult{
		Content: schema.ContentList{schema.Text(text), s.link(e)},
		StructuredContent: map[string]any{
			"entity": entityMap(e),
		},
	}
}

func entityMap(e Entity) map[string]any {
	m := map[string]any{
		"id":      e.ID,
		"type":    e.Type,
		"title":   e.Title,
		"status":  e.Status,
		"body":    e.Body,
		"created": e.Created,
	}
	if e.Date != "" {
		m["date"] = e.Date
	}
	return m
}

// normalize returns r as it reads back from JSON, so that a result served
// from the ledger and a freshly built one are the same Go value.
func normalize(r *schema.CallToolResult) (*schema.CallToolResult, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding result: %w", err)
	}
	var out schema.CallToolResult
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("decoding result: %w", err)
	}
	return &out, nil
}

// requestState is the opaque state of an InputRequiredResult.
type requestState struct {
	Tool  string   `json:"tool"`
	Title string   `json:"title,omitempty"`
	IDs   []string `json:"ids,omitempty"`
}

func encodeState(st requestState) string {
	data, _ := json.Marshal(st)
	return base64.RawURLEncoding.EncodeToString(data)
}

// decodeState decodes s and checks it belongs to tool.
func decodeState(s, tool string) (requestState, bool) {
	var st requestState
	data, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(data, &st) != nil || st.Tool != tool {
		return requestState{}, false
	}
	return st, true
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// capitalize upper-cases the first letter of an ASCII word such as "page".
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
