// Package model is the model-provider boundary of the agent: a Provider
// completes a conversation with text or tool calls. Scripted is the
// deterministic provider driven by a rules file (tests, demos, offline use).
//
// It owns the Provider contract and the scripted provider. Of parley's
// packages it imports only schema, and nothing of NATS (internal/layers
// checks the direction of imports).
package model

import (
	"context"
	"time"

	"github.com/parley-dev/parley/schema"
)

// Roles of Message.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one entry of the conversation sent to a model.
type Message struct {
	// Role is system, user, assistant or tool.
	Role string `json:"role"`
	// Text is the message text (for a tool message: the result as text).
	Text string `json:"text,omitempty"`
	// ToolCalls are the calls an assistant message asked for.
	ToolCalls []schema.ToolCall `json:"toolCalls,omitempty"`
	// ToolCallID and ToolName identify the call a tool message answers.
	ToolCallID string `json:"toolCallId,omitempty"`
	ToolName   string `json:"toolName,omitempty"`
	// Result is the full MCP result of a tool message.
	Result *schema.CallToolResult `json:"result,omitempty"`
	// Content are the MCP content blocks of a user message (context such
	// as resource_link blocks with _meta["drupal.org/ai.entity"]).
	Content schema.ContentList `json:"content,omitempty"`
	// References are the context references of a user message as parley
	// resolved them for the person who sent it (the agent bounds their
	// summaries); providers show them after the text (ReferencesText).
	References []schema.ResolvedReference `json:"references,omitempty"`
}

// Request is one model call.
type Request struct {
	Agent    string        `json:"agent"`
	Messages []Message     `json:"messages"`
	Tools    []schema.Tool `json:"tools"`
	// OnDelta, when set, receives assistant text as it streams (providers
	// that do not stream never call it). It is called from the provider's
	// goroutine, in order, and must not block for long.
	OnDelta func(Delta) `json:"-"`
	// OnRetry, when set, is told before the provider waits to retry a
	// failed attempt (attempt counts from 1; wait is the pause; err the
	// failure).
	OnRetry func(attempt int, wait time.Duration, err error) `json:"-"`
}

// Response is the model's answer: final text, or tool calls (with
// optional text).
type Response struct {
	Text      string            `json:"text,omitempty"`
	ToolCalls []schema.ToolCall `json:"toolCalls,omitempty"`
	// Content enriches Text with MCP content blocks (optional).
	Content schema.ContentList `json:"content,omitempty"`
	// Chunks are the streamed pieces Text was folded from, each with its
	// own _meta (nil when the provider does not stream).
	Chunks []schema.ChatMessage `json:"chunks,omitempty"`
	// Usage is the call's token usage (nil when the provider reports none).
	Usage *Usage `json:"usage,omitempty"`
	// Model is the model that answered, as the endpoint named it.
	Model string `json:"model,omitempty"`
	// SuggestedReplies are next prompts the model proposes to the user
	// (with a final answer only).
	SuggestedReplies []string `json:"suggestedReplies,omitempty"`
	// ToolCallsError, when not empty, says why the tool calls of the
	// answer could not be read (a streamed call the stream never opened,
	// a call without a name, arguments that are not JSON). ToolCalls then
	// holds what could be read of them, and none of them may run: the
	// agent answers each with this error, so the model can ask again.
	ToolCallsError string `json:"toolCallsError,omitempty"`
}

// Provider completes a conversation. An *Error ends the turn with its
// reason; other errors are infrastructure failures (the agent retries the
// event); the model's own refusals are text. A Provider holds no state
// between calls: a paused run resumes on any agent.
type Provider interface {
	Complete(ctx context.Context, req Request) (Response, error)
}

// ResultText joins the text blocks of a tool result that are meant for the
// model (see ForModel: a block for the user only is left out).
func ResultText(r *schema.CallToolResult) string {
	if r == nil {
		return ""
	}
	var s string
	for _, c := range r.Content {
		if t, ok := c.(*schema.TextContent); ok && ForModel(c) {
			if s != "" {
				s += "\n"
			}
			s += t.Text
		}
	}
	return s
}
