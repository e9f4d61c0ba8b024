package schema

import (
	"encoding/json"
	"fmt"
)

// Role is an MCP role: "user" or "assistant" (MCP 2025-06-18 schema, Role).
type Role string

// The two MCP roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Annotations are the optional MCP hints on a content block (MCP 2025-06-18
// schema, Annotations). Priority is a pointer so that 0 ("least important")
// stays distinct from absent. LastModified is an ISO 8601 date-time string.
type Annotations struct {
	Audience     []Role   `json:"audience,omitempty"`
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

// TextContent is an MCP text block: {"type":"text","text",...}.
type TextContent struct {
	Text        string       `json:"text"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

// ImageContent is an MCP image block; Data is base64 (standard encoding) and
// MIMEType is required.
type ImageContent struct {
	Data        string       `json:"data"`
	MIMEType    string       `json:"mimeType"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

// AudioContent is an MCP audio block; Data is base64 and MIMEType required.
type AudioContent struct {
	Data        string       `json:"data"`
	MIMEType    string       `json:"mimeType"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

// ResourceLink is an MCP resource_link block: a URI and a name, with
// optional title, description, mimeType and size (raw bytes).
type ResourceLink struct {
	URI         string       `json:"uri"`
	Name        string       `json:"name"`
	Title       string       `json:"title,omitempty"`
	Description string       `json:"description,omitempty"`
	MIMEType    string       `json:"mimeType,omitempty"`
	Size        *int64       `json:"size,omitempty"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

// ResourceContents is the content of an embedded resource: a URI and exactly
// one of Text or Blob (base64). MCP 2025-06-18 schema, TextResourceContents
// and BlobResourceContents.
type ResourceContents struct {
	URI      string  `json:"uri"`
	MIMEType string  `json:"mimeType,omitempty"`
	Text     *string `json:"text,omitempty"`
	Blob     *string `json:"blob,omitempty"`
	Meta     Meta    `json:"_meta,omitempty"`
}

// EmbeddedResource is an MCP resource block embedding a resource's contents.
type EmbeddedResource struct {
	Resource    ResourceContents `json:"resource"`
	Annotations *Annotations     `json:"annotations,omitempty"`
	Meta        Meta             `json:"_meta,omitempty"`
}

func (*TextContent) ContentType() string      { return "text" }
func (*ImageContent) ContentType() string     { return "image" }
func (*AudioContent) ContentType() string     { return "audio" }
func (*ResourceLink) ContentType() string     { return "resource_link" }
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
	out = append(out, fmt.Sprintf("%q", typ)...)
	if len(b) > 2 {
		out = append(out, ',')
	}
	out = append(out, b[1:]...)
	return out, nil
}

// UnmarshalContent decodes one content block by its "type". Errors name the
// offending field: an unknown or missing type, a missing required field.
func UnmarshalContent(data []byte) (Content, error) {
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("content block: %w", err)
	}
	if head.Type == nil {
		return nil, fmt.Errorf("type: required")
	}
	var c Content
	switch *head.Type {
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
		return nil, fmt.Errorf("type: unknown content block type %q", *head.Type)
	}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("%s block: %w", *head.Type, err)
	}
	if err := ValidateContent(c); err != nil {
		return nil, err
	}
	return c, nil
}

// ValidateContent checks a content block's required fields and rules.
func ValidateContent(c Content) error {
	switch c := c.(type) {
	case *TextContent:
		return nil
	case *ImageContent:
		if c.MIMEType == "" {
			return fmt.Errorf("mimeType: required")
		}
	case *AudioContent:
		if c.MIMEType == "" {
			return fmt.Errorf("mimeType: required")
		}
	case *ResourceLink:
		if c.URI == "" {
			return fmt.Errorf("uri: required")
		}
		if c.Name == "" {
			return fmt.Errorf("name: required")
		}
	case *EmbeddedResource:
		if c.Resource.URI == "" {
			return fmt.Errorf("resource.uri: required")
		}
	}
	return nil
}

// ContentList is a list of content blocks that decodes each element by its
// "type" (MCP 2025-06-18 schema, ContentBlock[]).
type ContentList []Content

// UnmarshalJSON decodes every block with UnmarshalContent; the error names
// the index of the first bad block.
func (l *ContentList) UnmarshalJSON(data []byte) error {
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return err
	}
	out := make(ContentList, 0, len(raws))
	for i, r := range raws {
		c, err := UnmarshalContent(r)
		if err != nil {
			return fmt.Errorf("content[%d].%w", i, err)
		}
		out = append(out, c)
	}
	*l = out
	return nil
}

// Text returns a text content block.
func Text(s string) *TextContent { return &TextContent{Text: s} }
