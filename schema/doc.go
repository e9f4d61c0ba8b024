// Package schema holds parley's MCP-shaped value types and their validation:
// content blocks with annotations and _meta, chat messages, tool definitions
// and annotations, CallToolResult, elicitation requests and results, and
// progress. It follows the Model Context Protocol schema of revision
// 2025-06-18 (with opt-in shapes of 2025-11-25) and does no I/O: it knows
// nothing of NATS, CloudEvents or workers.
package schema
