// Package schema holds parley's MCP-shaped value types and their validation:
// content blocks with annotations and _meta, chat messages (and the fold of
// streamed chunks), tool definitions and annotations, CallToolResult,
// elicitation requests and results, the input-required result of a tool, and
// progress. It follows the Model Context Protocol schema of revision
// 2025-06-18 (with the opt-in elicitation shapes of 2025-11-25) and does no
// I/O: it knows nothing of NATS, CloudEvents or workers.
//
// Decoding checks shape: a content block, a tool result or a chat message
// that breaks a rule does not decode. Everything else is checked by a
// Validate function or method, which returns a *ValidationError listing
// every violation as "path: rule" (see Violations). The rules are those of
// the MCP schema plus what the MCP pages require in prose (formats checked
// for real, reserved _meta prefixes, tool-confirmation content) and the
// registry of parley's own _meta keys (drupal.org/ai.*). These are the only
// copy of the rules: workers and `parley validate` call them.
//
// It owns the value shapes and their rules, and does no I/O. It imports no
// other parley package and nothing of NATS (internal/layers checks the
// direction of imports).
package schema
