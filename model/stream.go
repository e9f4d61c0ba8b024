package model

import (
	"errors"
	"fmt"
)

// Reasons of a model Error; each becomes the `reason` of turn.failed.
const (
	// ReasonUnavailable: the model endpoint could not be reached or kept
	// failing (connection errors, 429 or 5xx after the retries, a stream
	// cut before its end, a timeout).
	ReasonUnavailable = "model_unavailable"
	// ReasonRejected: the endpoint refused the request (a 4xx other than
	// 429 and the context-length refusal); retrying cannot help.
	ReasonRejected = "model_rejected"
	// ReasonContextLength: the conversation does not fit the model's
	// context, even after trimming (see the trimming policy in
	// model/openai).
	ReasonContextLength = "context_length"
)

// Error is a model call that failed for a reason the turn should end
// with (the agent publishes turn.failed with Reason). Other errors from a
// Provider are infrastructure failures the agent retries.
type Error struct {
	// Reason is one of the Reason constants.
	Reason string
	// Status is the HTTP status of the last attempt (0 when none).
	Status int
	// Attempts is the number of HTTP attempts made.
	Attempts int
	// Err is the underlying error.
	Err error
}

// Error reports the reason, the status and the cause.
func (e *Error) Error() string {
	s := e.Reason
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" after %d attempts", e.Attempts)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// AsError returns the *Error in err's chain, or nil.
func AsError(err error) *Error {
	var me *Error
	if errors.As(err, &me) {
		return me
	}
	return nil
}

// Delta is one piece of streamed assistant text.
type Delta struct {
	// Attempt counts the HTTP attempts of this model call from 1: when a
	// stream is cut and the call is retried, text of an earlier attempt is
	// void and the new attempt starts over.
	Attempt int
	// Text is the new text (never empty).
	Text string
}

// Usage is the token usage of model calls (OpenAI `usage`; OpenTelemetry
// GenAI gen_ai.usage.input_tokens / output_tokens).
type Usage struct {
	// InputTokens are the prompt tokens.
	InputTokens int64 `json:"inputTokens"`
	// OutputTokens are the completion tokens.
	OutputTokens int64 `json:"outputTokens"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens}
}
