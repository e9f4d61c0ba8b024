package schema

import (
	"fmt"
	"maps"
	"slices"
)

// ChatMessage is one chat message: Role, plain Text that is authoritative
// for consumers that ignore blocks, optional MCP content blocks that enrich
// it, and `_meta`. Seed 001, ChatMessage.
type ChatMessage struct {
	Role    Role        `json:"role"`
	Text    string      `json:"text"`
	Content ContentList `json:"content,omitzero"`
	Meta    Meta        `json:"_meta,omitzero"`
}

// Validate checks the message: role "user" or "assistant", every content
// block (see ValidateContent; paths "content[i]...") and _meta (see
// Meta.Validate). The error is a *ValidationError.
func (m *ChatMessage) Validate() error {
	var vs violations
	if m.Role != RoleUser && m.Role != RoleAssistant {
		vs.add("role", `must be "user" or "assistant"`)
	}
	vs.merge("content", m.Content.Validate())
	vs.merge("", m.Meta.Validate())
	return vs.err()
}

// FoldChunks folds the streamed chunks of one message into the final
// message (seed 001 streaming rule): Role is the chunks' role (chunks
// without a role take it), Text is the concatenation of their Text, Content
// the concatenation of their blocks, and Meta keeps every chunk's metadata
// instead of discarding it: citations (_meta["drupal.org/ai.citations"]) of
// all chunks are appended in order, and for any other key the value of the
// latest chunk that carries it wins. The chunks are not modified.
//
// It returns an error when two chunks disagree on the role or a chunk's
// citations cannot be decoded.
func FoldChunks(chunks ...ChatMessage) (ChatMessage, error) {
	var out ChatMessage
	var cites []Citation
	for i, c := range chunks {
		switch {
		case c.Role == "":
		case out.Role == "":
			out.Role = c.Role
		case c.Role != out.Role:
			return ChatMessage{}, fmt.Errorf("folding chunk %d: role %q differs from %q", i, c.Role, out.Role)
		}
		out.Text += c.Text
		out.Content = append(out.Content, c.Content...)
		for _, k := range slices.Sorted(maps.Keys(c.Meta)) {
			if k == MetaCitations {
				cs, err := c.Meta.Citations()
				if err != nil {
					return ChatMessage{}, fmt.Errorf("folding chunk %d: %w", i, err)
				}
				cites = append(cites, cs...)
				continue
			}
			out.Meta.set(k, c.Meta[k])
		}
	}
	if cites != nil {
		out.Meta.SetCitations(cites)
	}
	return out, nil
}

// UnmarshalJSON decodes a message; bad content blocks or members of the
// wrong JSON type are a *ValidationError naming them
// ("content[0].mimeType: required").
func (m *ChatMessage) UnmarshalJSON(b []byte) error {
	type wire ChatMessage
	var w wire
	err := unmarshalAs(b, &w, "content")
	*m = ChatMessage(w)
	return err
}
