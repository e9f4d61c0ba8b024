package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Role is an MCP role: "user" or "assistant" (MCP 2025-06-18 schema, Role).
type Role string

// The two MCP roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Annotations are the optional MCP hints on a content block (MCP 2025-06-18
// schema, Annotations). Audience holds only RoleUser and RoleAssistant
// (a nil Audience is absent, an empty one is kept). Priority is a number in
// [0, 1] and a pointer so that 0 ("least important") stays distinct from
// absent. LastModified is an ISO 8601 date-time string, checked as RFC 3339
// (e.g. "2025-01-12T15:00:58Z").
type Annotations struct {
	Audience     []Role   `json:"audience,omitzero"`
	Priority     *float64 `json:"priority,omitempty"`
	LastModified string   `json:"lastModified,omitempty"`
}

// Content is one MCP content block: *TextContent, *ImageContent,
// *AudioContent, *ResourceLink or *EmbeddedResource (MCP 2025-06-18 schema,
// ContentBlock). The set is sealed; decode with UnmarshalContent or ContentList.
type Content interface {
	// ContentType returns the block's MCP `type`: "text", "image", "audio",
	// "resource_link" or "resource".
	ContentType() string
	isContent()
}

// AnnotationsOf returns the annotations of block c (MCP 2025-06-18 schema,
// Annotations), or nil when it has none or c is not one of the five block
// kinds.
func AnnotationsOf(c Content) *Annotations {
	switch c := c.(type) {
	case *TextContent:
		return c.Annotations
	case *ImageContent:
		return c.Annotations
	case *AudioContent:
		return c.Annotations
	case *ResourceLink:
		return c.Annotations
	case *EmbeddedResource:
		return c.Annotations
	}
	return nil
}

// TextContent is an MCP text block (MCP 2025-06-18 schema, TextContent):
// {"type":"text","text":...}. Text is required on the wire (it may be
// empty).
type TextContent struct {
	Text        string       `json:"text"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitzero"`
}

// ImageContent is an MCP image block (MCP 2025-06-18 schema, ImageContent);
// Data is the image as padded standard base64 (RFC 4648) and MIMEType is
// required.
type ImageContent struct {
	Data        string       `json:"data"`
	MIMEType    string       `json:"mimeType"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitzero"`
}

// AudioContent is an MCP audio block (MCP 2025-06-18 schema, AudioContent);
// Data is padded standard base64 and MIMEType is required.
type AudioContent struct {
	Data        string       `json:"data"`
	MIMEType    string       `json:"mimeType"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitzero"`
}

// ResourceLink is an MCP resource_link block (MCP 2025-06-18 schema,
// ResourceLink): a URI and a name, with optional title, description,
// mimeType, size (of the raw content, in bytes) and, from MCP 2025-11-25,
// icons.
type ResourceLink struct {
	URI         string       `json:"uri"`
	Name        string       `json:"name"`
	Title       string       `json:"title,omitempty"`
	Description string       `json:"description,omitempty"`
	MIMEType    string       `json:"mimeType,omitempty"`
	Size        *int64       `json:"size,omitempty"`
	Icons       []Icon       `json:"icons,omitzero"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitzero"`
}

// ResourceContents is the content of an embedded resource: an absolute URI
// and exactly one of Text or Blob (padded standard base64), with an optional
// mimeType. MCP 2025-06-18 schema, TextResourceContents and
// BlobResourceContents.
type ResourceContents struct {
	URI      string  `json:"uri"`
	MIMEType string  `json:"mimeType,omitempty"`
	Text     *string `json:"text,omitempty"`
	Blob     *string `json:"blob,omitempty"`
	Meta     Meta    `json:"_meta,omitzero"`
}

// EmbeddedResource is an MCP resource block embedding a resource's contents
// (MCP 2025-06-18 schema, EmbeddedResource).
type EmbeddedResource struct {
	Resource    ResourceContents `json:"resource"`
	Annotations *Annotations     `json:"annotations,omitempty"`
	Meta        Meta             `json:"_meta,omitzero"`
}

// ContentType returns "text".
func (*TextContent) ContentType() string { return "text" }

// ContentType returns "image".
func (*ImageContent) ContentType() string { return "image" }

// ContentType returns "audio".
func (*AudioContent) ContentType() string { return "audio" }

// ContentType returns "resource_link".
func (*ResourceLink) ContentType() string { return "resource_link" }

// ContentType returns "resource".
func (*EmbeddedResource) ContentType() string { return "resource" }

func (*TextContent) isContent()      {}
func (*ImageContent) isContent()     {}
func (*AudioContent) isContent()     {}
func (*ResourceLink) isContent()     {}
func (*EmbeddedResource) isContent() {}

// MarshalJSON adds "type":"text".
func (c *TextContent) MarshalJSON() ([]byte, error) {
	type wire TextContent
	return marshalTyped("text", (*wire)(c))
}

// MarshalJSON adds "type":"image".
func (c *ImageContent) MarshalJSON() ([]byte, error) {
	type wire ImageContent
	return marshalTyped("image", (*wire)(c))
}

// MarshalJSON adds "type":"audio".
func (c *AudioContent) MarshalJSON() ([]byte, error) {
	type wire AudioContent
	return marshalTyped("audio", (*wire)(c))
}

// MarshalJSON adds "type":"resource_link".
func (c *ResourceLink) MarshalJSON() ([]byte, error) {
	type wire ResourceLink
	return marshalTyped("resource_link", (*wire)(c))
}

// MarshalJSON adds "type":"resource".
func (c *EmbeddedResource) MarshalJSON() ([]byte, error) {
	type wire EmbeddedResource
	return marshalTyped("resource", (*wire)(c))
}

func marshalTyped(typ string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	// b is a JSON object: splice the type in front of its members.
	out := make([]byte, 0, len(b)+len(typ)+10)
	out = append(out, `{"type":`...)
	out = strconv.AppendQuote(out, typ)
	if len(b) > 2 {
		out = append(out, ',')
	}
	out = append(out, b[1:]...)
	return out, nil
}

// Icon is an icon a client may show for a resource link (MCP 2025-11-25
// schema, Icon): Src is an https: or data: URI (clients must refuse other
// schemes), with optional MIME type, sizes (e.g. "48x48", "any") and theme
// ("light" or "dark").
type Icon struct {
	Src      string   `json:"src"`
	MIMEType string   `json:"mimeType,omitempty"`
	Sizes    []string `json:"sizes,omitzero"`
	Theme    string   `json:"theme,omitempty"`
}

// Validate checks the annotations: audience only "user" and "assistant",
// priority a number in [0, 1], lastModified an RFC 3339 date-time. The
// error is a *ValidationError with paths relative to the annotations.
func (a *Annotations) Validate() error {
	if a == nil {
		return nil
	}
	var vs violations
	for i, r := range a.Audience {
		if r != RoleUser && r != RoleAssistant {
			vs.addf(fmt.Sprintf("audience[%d]", i), `must be "user" or "assistant"`)
		}
	}
	if p := a.Priority; p != nil && (!isFinite(*p) || *p < 0 || *p > 1) {
		vs.add("priority", "must be a number between 0 and 1")
	}
	if a.LastModified != "" && !isDateTime(a.LastModified) {
		vs.add("lastModified", "must be an ISO 8601 date-time such as 2025-01-12T15:00:58Z")
	}
	return vs.err()
}

// UnmarshalContent decodes one content block by its "type" and validates it
// (see ValidateContent). The error is a *ValidationError naming each
// offending field: an unknown or missing type ("type: required", `type:
// unknown content block type "x"`), a missing required field ("text:
// required", "mimeType: required"), a field of the wrong JSON type, bad
// base64 ("data: must be base64"), and every rule of ValidateContent.
func UnmarshalContent(data []byte) (Content, error) {
	if !json.Valid(data) {
		return nil, &ValidationError{Violations: []Violation{{"", "content block: not valid JSON"}}}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return nil, &ValidationError{Violations: []Violation{{"", "content block: must be a JSON object"}}}
	}
	raw, ok := m["type"]
	if !ok || string(raw) == "null" {
		return nil, &ValidationError{Violations: []Violation{{"type", "required"}}}
	}
	var typ string
	if err := json.Unmarshal(raw, &typ); err != nil {
		return nil, &ValidationError{Violations: []Violation{{"type", "must be a string"}}}
	}
	var c Content
	switch typ {
	case "text":
		c = new(TextContent)
	case "image":
		c = new(ImageContent)
	case "audio":
		c = new(AudioContent)
	case "resource_link":
		c = new(ResourceLink)
	case "resource":
		c = new(EmbeddedResource)
	default:
		return nil, &ValidationError{Violations: []Violation{{"type", fmt.Sprintf("unknown content block type %q", typ)}}}
	}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, decodeError(err)
	}
	return c, nil
}

// decodeBlock decodes the JSON object b into w (a pointer to a wire copy of
// a block type), checking that a "type" member, when present, is typ and
// that every required member is present and not null. It returns the
// violations found.
func decodeBlock(b []byte, typ string, w any, required ...string) violations {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return violations{{"", "content block: must be a JSON object"}}
	}
	var vs violations
	if t, ok := m["type"]; ok {
		var s string
		if json.Unmarshal(t, &s) != nil || s != typ {
			vs.addf("type", "must be %q", typ)
		}
	}
	if err := json.Unmarshal(b, w); err != nil {
		return append(vs, Violations(decodeError(err))...)
	}
	for _, r := range required {
		if v, ok := m[r]; !ok || string(v) == "null" {
			vs.add(r, "required")
		}
	}
	if r, ok := m["resource"]; ok && typ == "resource" {
		var rm map[string]json.RawMessage
		if json.Unmarshal(r, &rm) == nil {
			if v, ok := rm["uri"]; !ok || string(v) == "null" {
				vs.add("resource.uri", "required")
			}
		}
	}
	return vs
}

// blockFieldOrder is the order in which a block's violations are reported.
var blockFieldOrder = []string{"type", "text", "data", "mimeType", "uri", "name", "title",
	"description", "size", "icons", "resource", "annotations", "_meta"}

// finishBlock adds the rules of ValidateContent to the decoding violations:
// a field that is missing or of the wrong type is reported once, and
// nothing is reported inside it.
func finishBlock(vs violations, c Content) error {
	decoded := slices.Clone(vs)
	for _, v := range Violations(ValidateContent(c)) {
		covered := false
		for _, d := range decoded {
			if v.Path == d.Path || strings.HasPrefix(v.Path, d.Path+".") {
				covered = true
			}
		}
		if !covered {
			vs = append(vs, v)
		}
	}
	slices.SortStableFunc(vs, func(a, b Violation) int {
		return fieldIndex(a.Path) - fieldIndex(b.Path)
	})
	return vs.err()
}

func fieldIndex(path string) int {
	f := path
	if i := strings.IndexAny(f, ".["); i >= 0 {
		f = f[:i]
	}
	return slices.Index(blockFieldOrder, f)
}

func isNull(b []byte) bool { return string(bytes.TrimSpace(b)) == "null" }

// UnmarshalJSON decodes and validates a text block (see UnmarshalContent).
func (c *TextContent) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		return nil
	}
	type wire TextContent
	var w wire
	vs := decodeBlock(b, "text", &w, "text")
	*c = TextContent(w)
	return finishBlock(vs, c)
}

// UnmarshalJSON decodes and validates an image block (see UnmarshalContent).
func (c *ImageContent) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		return nil
	}
	type wire ImageContent
	var w wire
	vs := decodeBlock(b, "image", &w, "data", "mimeType")
	*c = ImageContent(w)
	return finishBlock(vs, c)
}

// UnmarshalJSON decodes and validates an audio block (see UnmarshalContent).
func (c *AudioContent) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		return nil
	}
	type wire AudioContent
	var w wire
	vs := decodeBlock(b, "audio", &w, "data", "mimeType")
	*c = AudioContent(w)
	return finishBlock(vs, c)
}

// UnmarshalJSON decodes and validates a resource_link block (see
// UnmarshalContent).
func (c *ResourceLink) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		return nil
	}
	type wire ResourceLink
	var w wire
	vs := decodeBlock(b, "resource_link", &w, "uri", "name")
	*c = ResourceLink(w)
	return finishBlock(vs, c)
}

// UnmarshalJSON decodes and validates a resource block (see
// UnmarshalContent).
func (c *EmbeddedResource) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		return nil
	}
	type wire EmbeddedResource
	var w wire
	vs := decodeBlock(b, "resource", &w, "resource")
	*c = EmbeddedResource(w)
	return finishBlock(vs, c)
}

// ValidateContent checks a content block's values (MCP 2025-06-18 schema,
// ContentBlock):
//
//   - image and audio: data non-empty padded standard base64 ("data: must
//     be base64"), mimeType a media type ("mimeType: required");
//   - resource_link: uri an absolute URI, name non-empty, size ≥ 0, icons
//     with https: or data: sources;
//   - resource: resource.uri an absolute URI, exactly one of resource.text
//     and resource.blob, blob base64;
//   - every block: annotations (see Annotations.Validate) and _meta (see
//     Meta.Validate).
//
// The error is a *ValidationError naming each field, e.g.
// "annotations.priority: must be a number between 0 and 1". A nil block is
// an error.
func ValidateContent(c Content) error {
	var vs violations
	var ann *Annotations
	var meta Meta
	switch c := c.(type) {
	case *TextContent:
		if c == nil {
			break
		}
		ann, meta = c.Annotations, c.Meta
	case *ImageContent:
		if c == nil {
			break
		}
		checkData(&vs, c.Data, c.MIMEType)
		ann, meta = c.Annotations, c.Meta
	case *AudioContent:
		if c == nil {
			break
		}
		checkData(&vs, c.Data, c.MIMEType)
		ann, meta = c.Annotations, c.Meta
	case *ResourceLink:
		if c == nil {
			break
		}
		checkURI(&vs, "uri", c.URI)
		if c.Name == "" {
			vs.add("name", "required")
		}
		if c.MIMEType != "" && !isMediaType(c.MIMEType) {
			vs.add("mimeType", "must be a media type such as text/plain")
		}
		if c.Size != nil && *c.Size < 0 {
			vs.add("size", "must not be negative")
		}
		for i, ic := range c.Icons {
			p := fmt.Sprintf("icons[%d]", i)
			if !isURI(ic.Src) || !(hasScheme(ic.Src, "https") || hasScheme(ic.Src, "data")) {
				vs.add(p+".src", "must be an https: or data: URI")
			}
			if ic.MIMEType != "" && !isMediaType(ic.MIMEType) {
				vs.add(p+".mimeType", "must be a media type such as image/png")
			}
			if ic.Theme != "" && ic.Theme != "light" && ic.Theme != "dark" {
				vs.add(p+".theme", `must be "light" or "dark"`)
			}
		}
		ann, meta = c.Annotations, c.Meta
	case *EmbeddedResource:
		if c == nil {
			break
		}
		r := c.Resource
		checkURI(&vs, "resource.uri", r.URI)
		if r.MIMEType != "" && !isMediaType(r.MIMEType) {
			vs.add("resource.mimeType", "must be a media type such as text/plain")
		}
		switch {
		case r.Text == nil && r.Blob == nil:
			vs.add("resource", "must have text or blob")
		case r.Text != nil && r.Blob != nil:
			vs.add("resource", "must not have both text and blob")
		case r.Blob != nil && !isBase64(*r.Blob):
			vs.add("resource.blob", "must be base64")
		}
		vs.merge("resource", r.Meta.Validate())
		ann, meta = c.Annotations, c.Meta
	default:
		// Content is sealed: only a nil interface gets here.
	}
	if c == nil || isNilBlock(c) {
		return violations{{"", "missing content block"}}.err()
	}
	vs.merge("annotations", ann.Validate())
	vs.merge("", meta.Validate())
	return vs.err()
}

func isNilBlock(c Content) bool {
	switch c := c.(type) {
	case *TextContent:
		return c == nil
	case *ImageContent:
		return c == nil
	case *AudioContent:
		return c == nil
	case *ResourceLink:
		return c == nil
	case *EmbeddedResource:
		return c == nil
	}
	return true
}

func checkData(vs *violations, data, mimeType string) {
	switch {
	case data == "":
		vs.add("data", "required")
	case !isBase64(data):
		vs.add("data", "must be base64")
	}
	switch {
	case mimeType == "":
		vs.add("mimeType", "required")
	case !isMediaType(mimeType):
		vs.add("mimeType", "must be a media type such as image/png")
	}
}

func checkURI(vs *violations, path, uri string) {
	switch {
	case uri == "":
		vs.add(path, "required")
	case !isURI(uri):
		vs.add(path, "must be an absolute URI")
	}
}

func hasScheme(uri, scheme string) bool {
	return len(uri) > len(scheme) && uri[len(scheme)] == ':' && equalFoldASCII(uri[:len(scheme)], scheme)
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i]|0x20, b[i]|0x20
		if x != y {
			return false
		}
	}
	return true
}

// ContentList is a list of content blocks that decodes each element by its
// "type" (MCP 2025-06-18 schema, ContentBlock[]). A nil list encodes as [].
type ContentList []Content

// MarshalJSON encodes the blocks; a nil list is [] (MCP requires the array
// where it requires content).
func (l ContentList) MarshalJSON() ([]byte, error) {
	if l == nil {
		return []byte("[]"), nil
	}
	return json.Marshal([]Content(l))
}

// UnmarshalJSON decodes every block with UnmarshalContent. The error is a
// *ValidationError whose paths start with the block's index, e.g.
// "[1].mimeType: required"; it lists the violations of every bad block.
func (l *ContentList) UnmarshalJSON(data []byte) error {
	if isNull(data) {
		*l = nil
		return nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return &ValidationError{Violations: []Violation{{"", "must be an array of content blocks"}}}
	}
	out := make(ContentList, 0, len(raws))
	var vs violations
	for i, r := range raws {
		c, err := UnmarshalContent(r)
		if err != nil {
			vs.merge(fmt.Sprintf("[%d]", i), err)
			continue
		}
		out = append(out, c)
	}
	if err := vs.err(); err != nil {
		return err
	}
	*l = out
	return nil
}

// Validate checks every block (see ValidateContent); paths start with the
// block's index.
func (l ContentList) Validate() error {
	var vs violations
	for i, c := range l {
		vs.merge(fmt.Sprintf("[%d]", i), ValidateContent(c))
	}
	return vs.err()
}

// Text returns a text content block.
func Text(s string) *TextContent { return &TextContent{Text: s} }
