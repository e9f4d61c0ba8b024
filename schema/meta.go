package schema

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Meta is the MCP `_meta` object: keys follow the MCP key grammar (see
// ValidateMetaKey), values are arbitrary JSON. A nil Meta is omitted on the
// wire; an empty one is kept. MCP 2025-06-18 schema, "_meta" of every
// request, result and block.
//
// Values may be Go values of any JSON-encodable type (the typed helpers
// store the registry types, e.g. Entity); after a JSON round trip they are
// the generic decoding (map[string]any, []any, float64...). The typed
// getters accept both.
type Meta map[string]any

// Registered `_meta` keys of parley (seed 001 registry). Values are JSON.
const (
	// MetaCitations carries the sources of a message: a JSON array of
	// Citation objects.
	MetaCitations = "drupal.org/ai.citations"
	// MetaSuggestedReplies carries a list of reply strings a UI may offer.
	MetaSuggestedReplies = "drupal.org/ai.suggested_replies"
	// MetaEntity identifies a site entity a block points to:
	// {"entity_type", "id", "bundle", "status", "label"} (see Entity).
	MetaEntity = "drupal.org/ai.entity"
	// MetaToolCall identifies the tool call a confirmation elicitation is
	// about: {"name", "toolId", "arguments", "annotations"} (see ToolCallMeta).
	MetaToolCall = "drupal.org/ai.tool_call"
	// MetaStructuredContent carries a tool's structured result for display:
	// a JSON object.
	MetaStructuredContent = "drupal.org/ai.structured_content"
	// MetaStatusItem carries a short status line a UI may show (a string).
	MetaStatusItem = "drupal.org/ai.status_item"
	// MetaElicitationID carries the parley elicitation ID (a string) on an
	// `elicitation/create` params object and on the restating message.
	MetaElicitationID = "drupal.org/ai.elicitation_id"
	// MetaWidgets carries widget hints for an elicitation form: a JSON
	// object keyed by property name whose values are Widget objects.
	MetaWidgets = "drupal.org/ai.widgets"
)

// RegisteredMetaKeys lists the keys of the drupal.org/ai registry, the only
// keys allowed under "drupal.org/ai.".
var RegisteredMetaKeys = []string{
	MetaCitations, MetaSuggestedReplies, MetaEntity, MetaToolCall,
	MetaStructuredContent, MetaStatusItem, MetaElicitationID, MetaWidgets,
}

// MetaProgressToken is the `_meta` key of a request's progress token (MCP,
// all revisions); its value is a string or an integer.
const MetaProgressToken = "progressToken"

// mcpKeys are keys under reserved prefixes that MCP itself defines; a _meta
// object may carry them although ValidateMetaKey rejects defining them.
var mcpKeys = map[string]bool{
	"io.modelcontextprotocol/related-task":             true,
	"io.modelcontextprotocol/model-immediate-response": true,
	"io.modelcontextprotocol/protocolVersion":          true,
	"io.modelcontextprotocol/clientInfo":               true,
	"io.modelcontextprotocol/clientCapabilities":       true,
	"io.modelcontextprotocol/logLevel":                 true,
	"io.modelcontextprotocol/subscriptionId":           true,
	"io.modelcontextprotocol/serverInfo":               true,
}

// drupalPrefix is the prefix of parley's registry and its extensions.
const drupalPrefix = "drupal.org/"

// ValidateMetaKey checks a `_meta` key that parley or an extension defines
// (MCP 2025-06-18 and 2025-11-25, "General fields: _meta"):
//
//   - an optional prefix: dot-separated labels, each starting with a
//     letter and ending with a letter or digit (interior: letters, digits,
//     hyphens), ending in "/";
//   - then a name that, unless empty, begins and ends with an alphanumeric
//     and may contain "-", "_" and "." in between;
//   - the prefix is not reserved by either revision: 2025-06-18 reserves
//     any prefix with a "mcp" or "modelcontextprotocol" label followed by
//     another label (mcp.dev/, api.mcp.dev/); 2025-11-25 any prefix whose
//     second label is one of those (io.modelcontextprotocol/, dev.mcp/);
//     labels compare case-insensitively;
//   - under "drupal.org/", the name is "<module>.<name>" with a Drupal
//     machine name as module (so drupal.org/ai/citations is rejected), and
//     the "ai" module's names are those of RegisteredMetaKeys.
//
// The error is a *ValidationError whose violations have the key as path.
func ValidateMetaKey(key string) error {
	var vs violations
	for _, r := range metaKeyRules(key) {
		vs.add(key, r)
	}
	return vs.err()
}

func metaKeyRules(key string) []string {
	if key == "" {
		return []string{"must not be empty"}
	}
	var rules []string
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		prefix, name = "", key
	}
	if hasPrefix {
		labels := strings.Split(prefix, ".")
		ok := true
		for _, l := range labels {
			if !isLabel(l) {
				rules = append(rules, fmt.Sprintf("prefix label %q must start with a letter, end with a letter or digit and contain only letters, digits and hyphens", l))
				ok = false
			}
		}
		if ok && isReserved(labels) {
			rules = append(rules, fmt.Sprintf("prefix %q is reserved for MCP", prefix+"/"))
		}
	}
	if !isMetaName(name) {
		if strings.Contains(name, "/") {
			rules = append(rules, fmt.Sprintf("name %q must not contain \"/\" (the first \"/\" ends the prefix)", name))
		} else {
			rules = append(rules, fmt.Sprintf("name %q must begin and end with a letter or digit and contain only letters, digits, \"-\", \"_\" and \".\"", name))
		}
		return rules
	}
	if hasPrefix && strings.EqualFold(prefix+"/", drupalPrefix) && len(rules) == 0 {
		module, sub, ok := strings.Cut(name, ".")
		switch {
		case prefix+"/" != drupalPrefix:
			rules = append(rules, `prefix must be "drupal.org/" in lower case`)
		case !ok || !isMachineName(module) || sub == "":
			rules = append(rules, fmt.Sprintf("name %q must be <module>.<name> with a Drupal machine name as module", name))
		case module == "ai" && !slices.Contains(RegisteredMetaKeys, key):
			rules = append(rules, "not in the drupal.org/ai registry (citations, suggested_replies, entity, tool_call, structured_content, status_item, elicitation_id, widgets)")
		}
	}
	return rules
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isAlnum(c byte) bool  { return isLetter(c) || isDigit(c) }

func isLabel(l string) bool {
	if l == "" || !isLetter(l[0]) || !isAlnum(l[len(l)-1]) {
		return false
	}
	for i := 0; i < len(l); i++ {
		if !isAlnum(l[i]) && l[i] != '-' {
			return false
		}
	}
	return true
}

func isMetaName(n string) bool {
	if n == "" {
		return true
	}
	if !isAlnum(n[0]) || !isAlnum(n[len(n)-1]) {
		return false
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func isMachineName(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z') && !isDigit(c) && c != '_' {
			return false
		}
	}
	return true
}

func isMCPLabel(l string) bool {
	return strings.EqualFold(l, "mcp") || strings.EqualFold(l, "modelcontextprotocol")
}

// isReserved applies both revisions' reserved-prefix rules to the labels.
func isReserved(labels []string) bool {
	for i, l := range labels {
		// 2025-06-18: an mcp label followed by any valid label.
		if isMCPLabel(l) && i < len(labels)-1 {
			return true
		}
	}
	// 2025-11-25: the second label is an mcp label.
	return len(labels) >= 2 && isMCPLabel(labels[1])
}

// Validate checks every key (ValidateMetaKey; keys MCP itself defines under
// a reserved prefix, such as io.modelcontextprotocol/related-task, and
// progressToken are allowed) and the value of every registered key against
// its type. The error is a *ValidationError with paths like
// `_meta["drupal.org/ai.entity"]`.
func (m Meta) Validate() error {
	var vs violations
	for _, k := range slices.Sorted(maps.Keys(m)) {
		p := metaPath(k)
		if !mcpKeys[k] {
			for _, r := range metaKeyRules(k) {
				vs.add(p, r)
			}
		}
		var err error
		switch k {
		case MetaProgressToken:
			var t ProgressToken
			err = metaDecode(m[k], &t)
		case MetaCitations:
			var cs []Citation
			if err = metaDecode(m[k], &cs); err == nil {
				if len(cs) > MaxCitations {
					vs.addf(p, "must have at most %d items, got %d", MaxCitations, len(cs))
				}
				for i, c := range cs {
					vs.merge(fmt.Sprintf("%s[%d]", p, i), c.Validate())
				}
			}
		case MetaSuggestedReplies:
			var rs []string
			if err = metaDecode(m[k], &rs); err == nil {
				if len(rs) > MaxSuggestedReplies {
					vs.addf(p, "must have at most %d items, got %d", MaxSuggestedReplies, len(rs))
				}
				for i, r := range rs {
					switch {
					case strings.TrimSpace(r) == "":
						vs.addf(fmt.Sprintf("%s[%d]", p, i), "must not be blank")
					case len(r) > MaxSuggestedReplyBytes:
						vs.addf(fmt.Sprintf("%s[%d]", p, i), "must be at most %d bytes, got %d", MaxSuggestedReplyBytes, len(r))
					}
				}
			}
		case MetaEntity:
			var e Entity
			if err = metaDecode(m[k], &e); err == nil {
				vs.merge(p, e.Validate())
			}
		case MetaToolCall:
			var tc ToolCallMeta
			if err = metaDecode(m[k], &tc); err == nil {
				vs.merge(p, tc.Validate())
			}
		case MetaStructuredContent:
			var sc map[string]any
			err = metaDecode(m[k], &sc)
		case MetaStatusItem, MetaElicitationID:
			var s string
			if err = metaDecode(m[k], &s); err == nil && s == "" {
				vs.add(p, "must not be empty")
			}
		case MetaMCPServer:
			var ms MCPServerMeta
			if err = metaDecode(m[k], &ms); err == nil && ms.Name == "" {
				vs.add(p+".name", "required")
			}
		case MetaWidgets:
			var ws map[string]json.RawMessage
			if err = metaDecode(m[k], &ws); err == nil {
				for _, name := range slices.Sorted(maps.Keys(ws)) {
					var w Widget
					if werr := json.Unmarshal(ws[name], &w); werr != nil {
						vs.merge(p+"."+name, werr)
						continue
					}
					vs.merge(p+"."+name, w.Validate())
				}
			}
		}
		if err != nil {
			for _, v := range Violations(decodeError(err)) {
				vs.add(joinPath(p, v.Path), v.Rule)
			}
		}
	}
	return vs.err()
}

// metaDecode converts a _meta value (a typed Go value or its generic JSON
// decoding) into *out by a JSON round trip. A JSON null is an error.
func metaDecode(v any, out any) error {
	if v == nil {
		return fmt.Errorf("must not be null")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if string(b) == "null" {
		return fmt.Errorf("must not be null")
	}
	return json.Unmarshal(b, out)
}

// metaGet returns the value at key as a T: directly when it is stored as a
// T or *T, else through JSON. ok is false when the key is absent.
func metaGet[T any](m Meta, key string) (out T, ok bool, err error) {
	v, ok := m[key]
	if !ok {
		return out, false, nil
	}
	switch x := v.(type) {
	case T:
		return x, true, nil
	case *T:
		if x != nil {
			return *x, true, nil
		}
	}
	if err := metaDecode(v, &out); err != nil {
		return out, true, fmt.Errorf("decoding %s: %w", metaPath(key), err)
	}
	return out, true, nil
}

// set stores v at key, allocating the map when needed.
func (m *Meta) set(key string, v any) {
	if *m == nil {
		*m = Meta{}
	}
	(*m)[key] = v
}

// Clone returns a shallow copy of m (nil for nil).
func (m Meta) Clone() Meta { return maps.Clone(m) }

// Bounds of the citations and suggested replies of one _meta object
// (Meta.Validate): more, or longer, is a violation naming the path and the
// bound. Producers that gather them (the agent) stop at these bounds.
const (
	// MaxCitations bounds _meta["drupal.org/ai.citations"] (entries).
	MaxCitations = 20
	// MaxCitationAnchors bounds the anchors of one citation.
	MaxCitationAnchors = 32
	// MaxCitationURLBytes bounds a citation's url.
	MaxCitationURLBytes = 4096
	// MaxCitationTitleBytes bounds a citation's title.
	MaxCitationTitleBytes = 1024
	// MaxSuggestedReplies bounds _meta["drupal.org/ai.suggested_replies"]
	// (entries).
	MaxSuggestedReplies = 8
	// MaxSuggestedReplyBytes bounds one suggested reply.
	MaxSuggestedReplyBytes = 512
)

// Citation is one source of a message in _meta["drupal.org/ai.citations"]:
// a URL (an absolute URI, required), an optional title, and optional
// anchors: the spans of the message's text the source supports.
//
// Wire shape: {"url": "https://…", "title"?: "…", "anchors"?: [{"start": 0,
// "end": 12}]}. Anchor offsets count Unicode code points of the message's
// `text` (what Python's str and JavaScript's Array.from(text) index; the
// unit of OpenAI's url_citation start_index/end_index), half-open.
type Citation struct {
	URL   string `json:"url"`
	Title string `json:"title,omitempty"`
	// Anchors are the spans of the message text this source supports
	// (at most MaxCitationAnchors). In a streamed chunk they count from the
	// chunk's own text; FoldChunks shifts them into the folded message.
	Anchors []Anchor `json:"anchors,omitempty"`
}

// Anchor is a span of a message's text: code points Start (inclusive) to
// End (exclusive), 0 <= Start < End <= the text's length in code points.
type Anchor struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// Validate checks the citation alone: url an absolute URI of at most
// MaxCitationURLBytes, title at most MaxCitationTitleBytes, at most
// MaxCitationAnchors anchors, each with 0 <= start < end. Whether the
// anchors lie within the text is checked by ChatMessage.Validate (see
// ValidateAnchors). The error is a *ValidationError.
func (c Citation) Validate() error {
	var vs violations
	switch {
	case !isURI(c.URL):
		vs.add("url", "must be an absolute URI")
	case len(c.URL) > MaxCitationURLBytes:
		vs.addf("url", "must be at most %d bytes, got %d", MaxCitationURLBytes, len(c.URL))
	}
	if len(c.Title) > MaxCitationTitleBytes {
		vs.addf("title", "must be at most %d bytes, got %d", MaxCitationTitleBytes, len(c.Title))
	}
	if len(c.Anchors) > MaxCitationAnchors {
		vs.addf("anchors", "must have at most %d items, got %d", MaxCitationAnchors, len(c.Anchors))
	}
	for i, a := range c.Anchors {
		p := fmt.Sprintf("anchors[%d]", i)
		if a.Start < 0 {
			vs.addf(p+".start", "must not be negative, got %d", a.Start)
		}
		if a.End <= a.Start {
			vs.addf(p+".end", "must be greater than start (%d), got %d", a.Start, a.End)
		}
	}
	return vs.err()
}

// ValidateAnchors checks that every anchor of cs lies within a text of
// textLen code points. Paths are "[i].anchors[j].end". The error is a
// *ValidationError.
func ValidateAnchors(cs []Citation, textLen int) error {
	var vs violations
	for i, c := range cs {
		for j, a := range c.Anchors {
			if a.End > textLen {
				vs.addf(fmt.Sprintf("[%d].anchors[%d].end", i, j), "must be at most the text's length (%d code points), got %d", textLen, a.End)
			}
		}
	}
	return vs.err()
}

// Entity identifies a site entity in _meta["drupal.org/ai.entity"]:
// {"entity_type": "node", "id": "42", "bundle": "article", "status":
// "published", "label": "About us"}. EntityType is a Drupal machine name
// and ID its identifier, both required; Bundle, Status and Label (the
// entity's human-readable name, at most MaxEntityLabelBytes) are optional.
// An ID sent as a JSON number decodes to its decimal string. On a user's
// context reference the whole value is the sender's claim: parley resolves
// it before a model sees it (ResolvedReference).
type Entity struct {
	EntityType string `json:"entity_type"`
	ID         string `json:"id"`
	Bundle     string `json:"bundle,omitempty"`
	Status     string `json:"status,omitempty"`
	Label      string `json:"label,omitempty"`
}

// MaxEntityLabelBytes bounds Entity.Label.
const MaxEntityLabelBytes = 512

// UnmarshalJSON accepts "id" as a string or a JSON integer.
func (e *Entity) UnmarshalJSON(b []byte) error {
	type wire Entity
	var w struct {
		wire
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = Entity(w.wire)
	e.ID = ""
	if len(w.ID) > 0 && string(w.ID) != "null" {
		var s string
		if err := json.Unmarshal(w.ID, &s); err == nil {
			e.ID = s
		} else if n, err := strconv.ParseInt(string(w.ID), 10, 64); err == nil {
			e.ID = strconv.FormatInt(n, 10)
		} else {
			return &ValidationError{Violations: []Violation{{"id", "must be a string or an integer"}}}
		}
	}
	return nil
}

// Validate checks the required fields. The error is a *ValidationError.
func (e Entity) Validate() error {
	var vs violations
	if !isMachineName(e.EntityType) {
		vs.add("entity_type", "must be a Drupal machine name (lower-case letters, digits, underscores)")
	}
	if e.ID == "" {
		vs.add("id", "required")
	}
	if len(e.Label) > MaxEntityLabelBytes {
		vs.addf("label", "must be at most %d bytes, got %d", MaxEntityLabelBytes, len(e.Label))
	}
	return vs.err()
}

// Widget is a rendering hint for one elicitation property in
// _meta["drupal.org/ai.widgets"], in the seed's open shape (design section
// 5): {"widget": "entity_autocomplete", "target_type": "node", "bundles":
// ["article"]}. The member "widget" names the widget (Name); every other
// member is one of its options (Options), kept as JSON values. The older
// {"type": "<name>"} spelling is read as an alias of "widget" when "type"
// is a string and "widget" is absent (otherwise "type" is an option); an "options"
// object is read as options too. The property itself stays a primitive,
// so a client that ignores hints renders a plain field.
type Widget struct {
	// Name is the widget, e.g. "textarea" or "entity_autocomplete". It may
	// be empty: a hint with options only.
	Name string
	// Options are the widget's other members, e.g. "target_type".
	Options map[string]any
}

// MarshalJSON writes the open shape: "widget" plus the options as members.
func (w Widget) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(w.Options)+1)
	for k, v := range w.Options {
		m[k] = v
	}
	if w.Name != "" {
		m["widget"] = w.Name
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the open shape. The hint must be a JSON object;
// "widget", when present, must be a string (a "type" that is not a
// string, or next to "widget", is kept as an option); an
// "options" object (the older nested spelling) is merged into Options.
func (w *Widget) UnmarshalJSON(b []byte) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return &ValidationError{Violations: []Violation{{"", "must be an object"}}}
	}
	*w = Widget{}
	if v, ok := m["widget"]; ok {
		s, isString := v.(string)
		if !isString {
			return &ValidationError{Violations: []Violation{{"widget", "must be a string"}}}
		}
		w.Name = s
		delete(m, "widget")
	} else if s, isString := m["type"].(string); isString {
		// The older spelling: "type" names the widget only when it is a
		// string and "widget" is absent; otherwise it is an option like
		// any other member (e.g. "type": {"bundle": "article"}).
		w.Name = s
		delete(m, "type")
	}
	if opts, ok := m["options"].(map[string]any); ok {
		delete(m, "options")
		for k, v := range opts {
			if _, dup := m[k]; !dup {
				m[k] = v
			}
		}
	}
	if len(m) > 0 {
		w.Options = m
	}
	return nil
}

// Validate checks the hint. The shape is open and clients ignore hints
// they do not know, so there is nothing to require here; whether the
// property a hint is keyed by exists is checked by
// ElicitRequestParams.Validate. It returns nil; it exists so every
// registered _meta value has a Validate.
func (w Widget) Validate() error { return nil }

// Validate checks the tool call of a confirmation: name and toolId
// required, arguments (when present) a JSON object. The error is a
// *ValidationError.
func (tc ToolCallMeta) Validate() error {
	var vs violations
	if tc.Name == "" {
		vs.add("name", "required")
	}
	if tc.ToolID == "" {
		vs.add("toolId", "required")
	}
	if len(tc.Arguments) > 0 && string(tc.Arguments) != "null" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(tc.Arguments, &obj); err != nil {
			vs.add("arguments", "must be a JSON object")
		}
	}
	return vs.err()
}

// Citations returns _meta["drupal.org/ai.citations"] (nil when absent).
func (m Meta) Citations() ([]Citation, error) {
	v, _, err := metaGet[[]Citation](m, MetaCitations)
	return v, err
}

// SetCitations stores cs at _meta["drupal.org/ai.citations"].
func (m *Meta) SetCitations(cs []Citation) { m.set(MetaCitations, cs) }

// SuggestedReplies returns _meta["drupal.org/ai.suggested_replies"] (nil
// when absent).
func (m Meta) SuggestedReplies() ([]string, error) {
	v, _, err := metaGet[[]string](m, MetaSuggestedReplies)
	return v, err
}

// SetSuggestedReplies stores rs at _meta["drupal.org/ai.suggested_replies"].
func (m *Meta) SetSuggestedReplies(rs []string) { m.set(MetaSuggestedReplies, rs) }

// Entity returns _meta["drupal.org/ai.entity"] (nil when absent).
func (m Meta) Entity() (*Entity, error) {
	v, ok, err := metaGet[Entity](m, MetaEntity)
	if !ok || err != nil {
		return nil, err
	}
	return &v, nil
}

// SetEntity stores e at _meta["drupal.org/ai.entity"].
func (m *Meta) SetEntity(e Entity) { m.set(MetaEntity, e) }

// ToolCall returns _meta["drupal.org/ai.tool_call"] (nil when absent).
func (m Meta) ToolCall() (*ToolCallMeta, error) {
	v, ok, err := metaGet[ToolCallMeta](m, MetaToolCall)
	if !ok || err != nil {
		return nil, err
	}
	return &v, nil
}

// SetToolCall stores tc at _meta["drupal.org/ai.tool_call"].
func (m *Meta) SetToolCall(tc ToolCallMeta) { m.set(MetaToolCall, tc) }

// StructuredContent returns _meta["drupal.org/ai.structured_content"] (nil
// when absent).
func (m Meta) StructuredContent() (map[string]any, error) {
	v, _, err := metaGet[map[string]any](m, MetaStructuredContent)
	return v, err
}

// SetStructuredContent stores sc at _meta["drupal.org/ai.structured_content"].
func (m *Meta) SetStructuredContent(sc map[string]any) { m.set(MetaStructuredContent, sc) }

// StatusItem returns _meta["drupal.org/ai.status_item"] ("" when absent).
func (m Meta) StatusItem() (string, error) {
	v, _, err := metaGet[string](m, MetaStatusItem)
	return v, err
}

// SetStatusItem stores s at _meta["drupal.org/ai.status_item"].
func (m *Meta) SetStatusItem(s string) { m.set(MetaStatusItem, s) }

// ElicitationID returns _meta["drupal.org/ai.elicitation_id"] ("" when
// absent).
func (m Meta) ElicitationID() (string, error) {
	v, _, err := metaGet[string](m, MetaElicitationID)
	return v, err
}

// SetElicitationID stores id at _meta["drupal.org/ai.elicitation_id"].
func (m *Meta) SetElicitationID(id string) { m.set(MetaElicitationID, id) }

// Widgets returns _meta["drupal.org/ai.widgets"], keyed by property name
// (nil when absent).
func (m Meta) Widgets() (map[string]Widget, error) {
	v, _, err := metaGet[map[string]Widget](m, MetaWidgets)
	return v, err
}

// SetWidgets stores ws at _meta["drupal.org/ai.widgets"].
func (m *Meta) SetWidgets(ws map[string]Widget) { m.set(MetaWidgets, ws) }
