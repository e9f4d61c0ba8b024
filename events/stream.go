package events

import "github.com/parley-dev/parley/schema"

// TypeMessageDelta: a piece of the assistant's answer while the model is
// still writing it. Data: MessageDelta. Published on
// parley.chat.<thread>.message.delta without waiting for a JetStream ack
// (each delta's ID is unique, so no deduplication is needed); the subject
// is inside PARLEY_CHAT, so the stream keeps it and a late subscriber
// catches up by reading the thread's subjects from the stream.
// The final message in turn.completed is authoritative.
const TypeMessageDelta Type = "dev.parley.message.delta"

// ChatMessageDelta is the chat subject suffix of TypeMessageDelta.
const ChatMessageDelta = "message.delta"

// MessageDelta is one streamed piece of the assistant's answer.
type MessageDelta struct {
	// TurnID and RunID identify the turn and the agent run.
	TurnID string `json:"turnId"`
	RunID  string `json:"runId"`
	// Step is the model call of the run the text belongs to (from 1).
	Step int `json:"step"`
	// Generation identifies one execution of that model call (random): a
	// step redone after an agent crash streams under a new generation,
	// whose text replaces the older one's.
	Generation string `json:"generation"`
	// Attempt is the HTTP attempt of that model call (from 1). A delta with
	// a higher attempt than the ones shown voids the text of the earlier
	// attempts of the same step (the stream was cut and retried).
	Attempt int `json:"attempt"`
	// Seq counts the deltas of one step and attempt from 0, so a consumer
	// can order them and spot a gap.
	Seq int `json:"seq"`
	// Chunk is the piece: role assistant, the new text, and its own _meta.
	Chunk schema.ChatMessage `json:"chunk"`
}

// MetaUsage is the _meta key of the token usage on the assistant message
// of turn.completed. Value: Usage.
const MetaUsage = "dev.parley/usage"

// Usage is a turn's token usage (OpenTelemetry GenAI conventions:
// gen_ai.usage.input_tokens and gen_ai.usage.output_tokens), in total and
// per model call.
type Usage struct {
	InputTokens  int64       `json:"inputTokens"`
	OutputTokens int64       `json:"outputTokens"`
	Calls        []CallUsage `json:"calls"`
}

// CallUsage is one model call's token usage.
type CallUsage struct {
	// Step is the model call of the run (from 1).
	Step int `json:"step"`
	// Model is the model that answered, as the endpoint named it.
	Model        string `json:"model,omitempty"`
	InputTokens  int64  `json:"inputTokens"`
	OutputTokens int64  `json:"outputTokens"`
}

// Progress phases (_meta["dev.parley/phase"] of a progress event).
const (
	PhaseModel   = "model"
	PhaseTool    = "tool"
	PhaseWaiting = "waiting"
	PhaseRetry   = "retry"
)

// MetaPhase is the _meta key of a progress event's phase: model, tool,
// waiting or retry.
const MetaPhase = "dev.parley/phase"
