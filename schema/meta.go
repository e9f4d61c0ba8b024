package schema

// Meta is the MCP `_meta` object: keys follow the MCP key grammar (see
// ValidateMetaKey), values are arbitrary JSON. A nil Meta is omitted on the
// wire. MCP 2025-06-18 schema, "_meta" of every request, result and block.
type Meta map[string]any

// Registered `_meta` keys of parley (seed 001 registry). Values are JSON.
const (
	// MetaCitations carries a list of citations for a message.
	MetaCitations = "drupal.org/ai.citations"
	// MetaSuggestedReplies carries a list of reply strings a UI may offer.
	MetaSuggestedReplies = "drupal.org/ai.suggested_replies"
	// MetaEntity identifies a site entity a block points to:
	// {"entity_type", "id", "bundle", "status"} (see Entity).
	MetaEntity = "drupal.org/ai.entity"
	// MetaToolCall identifies the tool call a confirmation elicitation is
	// about: {"name", "toolId", "arguments", "annotations"} (see ToolCallMeta).
	MetaToolCall = "drupal.org/ai.tool_call"
	// MetaStructuredContent carries a tool's structured result for display.
	MetaStructuredContent = "drupal.org/ai.structured_content"
	// MetaStatusItem carries a short status line a UI may show.
	MetaStatusItem = "drupal.org/ai.status_item"
	// MetaElicitationID carries the parley elicitation ID (a string) on an
	// `elicitation/create` params object and on the restating message.
	MetaElicitationID = "drupal.org/ai.elicitation_id"
	// MetaWidgets carries widget hints for an elicitation form, keyed by
	// property name.
	MetaWidgets = "drupal.org/ai.widgets"
)
