package schema

import (
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
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
// block (see ValidateContent; paths "content[i]..."), _meta (see
// Meta.Validate), and that every citation anchor lies within Text (path
// `_meta["drupal.org/ai.citations"][i].anchors[j].end`). The error is a
// *ValidationError.
func (m *ChatMessage) Validate() error {
	var vs violations
	if m.Role != RoleUser && m.Role != RoleAssistant {
		vs.add("role", `must be "user" or "assistant"`)
	}
	vs.merge("content", m.Content.Validate())
	vs.merge("", m.Meta.Validate())
	if cs, err := m.Meta.Citations(); err == nil {
		vs.merge(metaPath(MetaCitations), ValidateAnchors(cs, utf8.RuneCountInString(m.Text)))
	}
	return vs.err()
}

// FoldChunks folds the streamed chunks of one message into the final
// message (seed 001 streaming rule): Role is the chunks' role (chunks
// without a role take it), Text is the concatenation of their Text, Content
// the concatenation of their blocks, and Meta keeps every chunk's metadata
// instead of discarding it: citations (_meta["drupal.org/ai.citations"]) of
// all chunks are appended in order, and for any other key the value of the
// latest chunk that carries it wins. A chunk's citation anchors count from
// the start of that chunk's text; in the folded message they are shifted
// by the code points of the text before the chunk. The chunks are not
// modified.
//
// It returns an error when two chunks disagree on the role or a chunk's
// citations cannot be decoded.
func FoldChunks(chunks ...ChatMessage) (ChatMessage, error) {
	var out ChatMessage
	var cites []Citation
	offset := 0 // code points of out.Text before chunk i
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
				for _, ct := range cs {
					if len(ct.Anchors) > 0 {
						as := make([]Anchor, len(ct.Anchors))
						for j, a := range ct.Anchors {
							as[j] = Anchor{Start: a.Start + offset, End: a.End + offset}
						}
						ct.Anchors = as
					}
					cites = append(cites, ct)
				}
				continue
			}
			out.Meta.set(k, c.Meta[k])
		}
		offset += utf8.RuneCountInString(c.Text)
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
