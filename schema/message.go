package schema

// ChatMessage is one chat message: Role, plain Text that is authoritative
// for consumers that ignore blocks, optional MCP content blocks that enrich
// it, and `_meta`. Seed 001, ChatMessage.
type ChatMessage struct {
	Role    Role        `json:"role"`
	Text    string      `json:"text"`
	Content ContentList `json:"content,omitempty"`
	Meta    Meta        `json:"_meta,omitempty"`
}
