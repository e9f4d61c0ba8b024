package events

import (
	"encoding/json"
	"time"

	"github.com/parley-dev/parley/schema"
)

// TurnRequested is the data of dev.parley.turn.requested: a user message for
// a thread (the CloudEvents subject), and the agent that should answer.
type TurnRequested struct {
	// Agent names the agent; optional, default "default". A subject token.
	Agent string `json:"agent,omitempty"`
	// Message is the user's message; Role must be "user" and Text non-empty.
	Message schema.ChatMessage `json:"message"`
	// User is the end user the publishing principal speaks for: its claim
	// of onBehalfOf (as the extension attribute onbehalfof is). Honoured
	// only from principals the processor trusts to speak for users
	// (--trusted-principals); from any other principal a message carrying
	// it is rejected forbidden. Optional.
	User string `json:"user,omitempty"`
	// Share grants the thread to more parties besides its owner: each may
	// send messages and answer its questions. Honoured only from the
	// thread's owner (the party whose message started it); at most
	// MaxShares in all. Optional.
	Share []Identity `json:"share,omitempty"`
}

// MaxShares bounds the parties a thread is shared with (TurnRequested.Share):
// a message that would share it with more is rejected invalid_event.
const MaxShares = 16

// TurnPaused is the data of dev.parley.turn.paused: the assistant message
// that restates the pending question(s) in prose, for consumers that ignore
// elicitations.
type TurnPaused struct {
	TurnID string `json:"turnId"`
	// RequestEventID is the turn.requested event that started the turn.
	RequestEventID string             `json:"requestEventId,omitempty"`
	Message        schema.ChatMessage `json:"message"`
	ElicitationIDs []string           `json:"elicitationIds"`
	// ToolCalls are the tool calls the turn's run executed before it
	// paused, in the order they ran (absent when none ran).
	ToolCalls []ToolRan `json:"toolCalls,omitempty"`
	// ToolCallsOmitted counts executed tool calls past MaxToolEffects.
	ToolCallsOmitted int `json:"toolCallsOmitted,omitempty"`
}

// TurnCompleted is the data of dev.parley.turn.completed: the assistant's
// message and how each tool call of the turn was decided.
type TurnCompleted struct {
	TurnID string `json:"turnId"`
	// RequestEventID is the turn.requested event that started the turn.
	RequestEventID string             `json:"requestEventId,omitempty"`
	Message        schema.ChatMessage `json:"message"`
	Decisions      []DecisionRecord   `json:"decisions,omitempty"`
	// ToolCalls are the tool calls the turn's run executed, in the order
	// they ran, those before a pause included (an earlier turn.paused of
	// the turn listed them already; CallID tells them apart); absent when
	// none ran.
	ToolCalls []ToolRan `json:"toolCalls,omitempty"`
	// ToolCallsOmitted counts executed tool calls past MaxToolEffects.
	ToolCallsOmitted int `json:"toolCallsOmitted,omitempty"`
}

// DecisionRecord says how one tool call was decided: by a policy service
// (allow, veto, or policy_unavailable when none answered), or, after a
// confirm, by a person — their Action and who they are. A machine decision
// never carries an Action or AnsweredBy.
type DecisionRecord struct {
	CallID string `json:"callId"`
	Tool   string `json:"tool"`
	// Decision is the policy's: allow, veto, confirm or policy_unavailable.
	Decision      string `json:"decision"`
	Policy        string `json:"policy,omitempty"`
	ConfigVersion string `json:"configVersion,omitempty"`
	Reason        string `json:"reason,omitempty"`
	// Policies is every policy's answer that went into Decision.
	Policies []PolicyDecision `json:"policies,omitempty"`
	// ElicitationID, Action, AnsweredBy and AnsweredAt are set when a
	// person answered a confirmation. AnsweredBy is who, as
	// authenticated: the principal that published the answer and the end
	// user it spoke for, if the processor trusts it to.
	ElicitationID string              `json:"elicitationId,omitempty"`
	Action        schema.ElicitAction `json:"action,omitempty"`
	AnsweredBy    Identity            `json:"answeredBy,omitzero"`
	AnsweredAt    time.Time           `json:"answeredAt,omitzero"`
	// Edited says the person accepted the confirmation with changed
	// arguments (_meta["dev.parley/arguments"]): the call ran with
	// theirs, not the model's. OriginalArguments are the model's
	// arguments the person replaced (over MaxEffectArgumentsBytes,
	// {"omitted": "<n> bytes of arguments"}); the arguments that ran are
	// the call's ToolRan.Arguments.
	Edited            bool            `json:"edited,omitempty"`
	OriginalArguments json.RawMessage `json:"originalArguments,omitempty"`
	// StandingApproval is set when a policy asked to confirm the call
	// and it ran without a question under a standing approval a person
	// granted earlier in the thread (Action and AnsweredBy stay empty:
	// nobody answered for this call).
	StandingApproval *StandingUse `json:"standingApproval,omitempty"`
}

// TurnFailed is the data of dev.parley.turn.failed: Reason is a stable code
// (e.g. "agent_failed", "state_incompatible", "dead_lettered"), Detail text a
// person can act on.
type TurnFailed struct {
	TurnID string `json:"turnId,omitempty"`
	// RequestEventID is the turn.requested event that started the turn.
	RequestEventID string `json:"requestEventId,omitempty"`
	Reason         string `json:"reason"`
	Detail         string `json:"detail"`
	// ToolCalls are the tool calls the turn executed before it failed
	// (their names and one-line summaries of their results), in the order
	// they ran; the thread's history keeps them, so the model of the
	// thread's next turn reads them. Absent when no tool ran.
	ToolCalls []ToolRan `json:"toolCalls,omitempty"`
	// ToolCallsOmitted counts executed tool calls past
	// MaxToolEffects, not listed.
	ToolCallsOmitted int `json:"toolCallsOmitted,omitempty"`
}

// TurnRejected is the data of dev.parley.turn.rejected: the turn.requested
// event (by ID) was refused; Errors name each field and rule.
type TurnRejected struct {
	RequestEventID string             `json:"requestEventId"`
	Reason         string             `json:"reason"`
	Errors         []schema.Violation `json:"errors,omitempty"`
}

// ElicitationResponded is the data of dev.parley.elicitation.responded: the
// MCP ElicitResult fields (action, content, _meta) plus which elicitation it
// answers and who answered.
type ElicitationResponded struct {
	ElicitationID string `json:"elicitationId"`
	// AnsweredBy is the end user the publishing principal answers for: its
	// claim of onBehalfOf (as the extension attribute onbehalfof is).
	// Honoured only from principals the processor trusts to speak for
	// users; from any other principal an answer carrying it is rejected
	// forbidden. The decision records the authenticated Identity, never
	// this text alone. Optional.
	AnsweredBy string `json:"answeredBy,omitempty"`
	// Action is "accept", "decline" or "cancel" (MCP ElicitResult.action).
	Action schema.ElicitAction `json:"action"`
	// Content is the form content (MCP ElicitResult.content).
	Content map[string]any `json:"content,omitempty"`
	// Meta is MCP ElicitResult._meta.
	Meta schema.Meta `json:"_meta,omitempty"`
}

// Result returns the MCP ElicitResult the event carries.
func (r ElicitationResponded) Result() schema.ElicitResult {
	return schema.ElicitResult{Action: r.Action, Content: r.Content, Meta: r.Meta}
}

// Rejection reasons of dev.parley.elicitation.rejected, in the order the
// processor checks them.
const (
	RejectInvalidEvent      = "invalid_event"
	RejectUnknownOrExpired  = "unknown_or_expired"
	RejectInvalidContent    = "invalid_content"
	RejectAlreadyConsumed   = "already_consumed"
	RejectStateIncompatible = "state_incompatible"
	// RejectThreadBusy refuses a turn.requested when its thread already
	// has processor.MaxQueue messages waiting.
	RejectThreadBusy = "thread_busy"
	// RejectMessageTooLarge refuses a user message whose text is over
	// MaxMessageText bytes, or whose whole event data is over
	// MaxTurnRequestBytes.
	RejectMessageTooLarge = "message_too_large"
	// RejectForbidden refuses a turn.requested or elicitation.responded
	// from a party the thread does not belong to (not its owner, nor one
	// it was shared with), or a claim of an end user (onBehalfOf) from a
	// principal not trusted to make it. Nothing is queued or consumed.
	RejectForbidden = "forbidden"
)

// MaxMessageText bounds a user message's text in bytes (UTF-8): 32 KiB.
const MaxMessageText = 32 << 10

// MaxTurnRequestBytes bounds the whole data of a turn.requested (text,
// content blocks, _meta, share) in bytes: 40 KiB. The processor rejects a
// larger one message_too_large before it reaches the thread record, whose
// queue holds up to processor.MaxQueue of them and processor.MaxQueueBytes
// in all.
const MaxTurnRequestBytes = 40 << 10

// MaxAnswerBytes bounds the whole data of an elicitation.responded in
// bytes (16 KiB), and MaxAnswerField each string in its content (8 KiB,
// e.g. a decline's instructions): the processor rejects a larger answer
// invalid_content naming the field, before it reaches the thread record.
const (
	MaxAnswerBytes = 16 << 10
	MaxAnswerField = 8 << 10
)

// ElicitationRejected is the data of dev.parley.elicitation.rejected. On
// invalid_content, Errors lists every "property: rule" and the elicitation
// stays pending.
type ElicitationRejected struct {
	ElicitationID    string             `json:"elicitationId"`
	RespondedEventID string             `json:"respondedEventId"`
	Reason           string             `json:"reason"`
	Detail           string             `json:"detail,omitempty"`
	Errors           []schema.Violation `json:"errors,omitempty"`
}

// ElicitationExpired is the data of dev.parley.elicitation.expired.
type ElicitationExpired struct {
	TurnID         string   `json:"turnId"`
	ElicitationIDs []string `json:"elicitationIds"`
}

// ElicitationCancelled is the data of dev.parley.elicitation.cancelled.
type ElicitationCancelled struct {
	TurnID         string   `json:"turnId"`
	ElicitationIDs []string `json:"elicitationIds"`
	Reason         string   `json:"reason"`
}

// RunRequested is the data of dev.parley.agent.run.requested.
type RunRequested struct {
	RunID    string               `json:"runId"`
	TurnID   string               `json:"turnId"`
	Thread   string               `json:"thread"`
	Agent    string               `json:"agent"`
	Messages []schema.ChatMessage `json:"messages"`
}

// Answer is one settled elicitation handed back to the agent.
type Answer struct {
	ElicitationID string              `json:"elicitationId"`
	Result        schema.ElicitResult `json:"result"`
	// AnsweredBy is who answered, as authenticated (see Identity).
	AnsweredBy Identity  `json:"answeredBy,omitzero"`
	AnsweredAt time.Time `json:"answeredAt"`
	// Arguments are the edited arguments of a tool confirmation accepted
	// with changes (_meta["dev.parley/arguments"] of the answer), as the
	// processor checked them against the confirmation's input schema
	// (schema.CheckEdit) and bound them to the answer: canonical JSON,
	// the exact call to run. Absent when the person did not change them.
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// RunResumed is the data of dev.parley.agent.run.resumed: the snapshot the
// agent paused with (opaque to the processor) and every answer.
type RunResumed struct {
	RunID    string          `json:"runId"`
	TurnID   string          `json:"turnId"`
	Thread   string          `json:"thread"`
	Agent    string          `json:"agent"`
	Snapshot json.RawMessage `json:"snapshot"`
	Answers  []Answer        `json:"answers"`
}

// RunCompleted is the data of dev.parley.agent.run.completed.
type RunCompleted struct {
	RunID     string             `json:"runId"`
	TurnID    string             `json:"turnId"`
	Message   schema.ChatMessage `json:"message"`
	Decisions []DecisionRecord   `json:"decisions,omitempty"`
	// Effects are the tool calls the run executed (see ToolEffect), in
	// the order they ran, at most MaxToolEffects; EffectsOmitted counts
	// those past it.
	Effects        []ToolEffect `json:"effects,omitempty"`
	EffectsOmitted int          `json:"effectsOmitted,omitempty"`
}

// Elicitation kinds.
const (
	KindForm             = "form"
	KindToolConfirmation = "tool_confirmation"
)

// PendingElicitation is one question a paused run waits on.
type PendingElicitation struct {
	ID      string                     `json:"id"`
	Kind    string                     `json:"kind"`
	CallID  string                     `json:"callId"`
	Tool    string                     `json:"tool"`
	Request schema.ElicitRequestParams `json:"request"`
	// Decision is the policy decision behind a tool confirmation.
	Decision *Decision `json:"decision,omitempty"`
}

// RunPaused is the data of dev.parley.agent.run.paused.
type RunPaused struct {
	RunID        string               `json:"runId"`
	TurnID       string               `json:"turnId"`
	Agent        string               `json:"agent"`
	Elicitations []PendingElicitation `json:"elicitations"`
	Snapshot     json.RawMessage      `json:"snapshot"`
	// Effects are the tool calls the run executed (see ToolEffect), in
	// the order they ran, at most MaxToolEffects; EffectsOmitted counts
	// those past it.
	Effects        []ToolEffect `json:"effects,omitempty"`
	EffectsOmitted int          `json:"effectsOmitted,omitempty"`
}

// RunFailed is the data of dev.parley.agent.run.failed.
type RunFailed struct {
	RunID  string `json:"runId"`
	TurnID string `json:"turnId"`
	Reason string `json:"reason"`
	Detail string `json:"detail"`
	// Effects are the tool calls the run executed (see ToolEffect), in
	// the order they ran, at most MaxToolEffects; EffectsOmitted counts
	// those past it.
	Effects        []ToolEffect `json:"effects,omitempty"`
	EffectsOmitted int          `json:"effectsOmitted,omitempty"`
}

// ToolCallRequested is the data of dev.parley.tool.call.requested. Round is
// 0 for the first execution and n for the n-th retry with InputResponses.
type ToolCallRequested struct {
	RunID string `json:"runId"`
	// TurnID is the turn the run runs (its chat events, such as
	// turn.completed, name the turn, not the run): a tool-executor ends a
	// call still running when that turn ends. "" from an agent before
	// run IDs were derived from the thread and the turn, whose run ID was
	// the turn ID.
	TurnID         string                         `json:"turnId,omitempty"`
	Thread         string                         `json:"thread"`
	Agent          string                         `json:"agent"`
	Call           schema.ToolCall                `json:"call"`
	Round          int                            `json:"round"`
	InputResponses map[string]schema.ElicitResult `json:"inputResponses,omitempty"`
	RequestState   string                         `json:"requestState,omitempty"`
}

// ToolResult is the data of dev.parley.tool.result.ready: exactly one of
// Result or InputRequired.
type ToolResult struct {
	RunID         string                      `json:"runId"`
	CallID        string                      `json:"callId"`
	Round         int                         `json:"round"`
	Result        *schema.CallToolResult      `json:"result,omitempty"`
	InputRequired *schema.InputRequiredResult `json:"inputRequired,omitempty"`
}

// PreExecuteRequest is the data of dev.parley.tool.pre_execute.requested,
// sent on parley.tool.pre_execute.<agent>.<tool> before every tool call.
type PreExecuteRequest struct {
	Agent  string          `json:"agent"`
	Thread string          `json:"thread"`
	RunID  string          `json:"runId"`
	Call   schema.ToolCall `json:"call"`
	// Tool is the trusted definition (from the tool registry, not the model).
	Tool schema.Tool `json:"tool"`
	// Edited is set when Call carries arguments a person wrote while
	// accepting a confirmation: the policies see the edited call before
	// it runs. A confirm answer to such a request is satisfied by the
	// person's own acceptance unless the reply sets Reconfirm.
	Edited *EditedCall `json:"edited,omitempty"`
}

// EditedCall says who changed a call's arguments and from what
// (PreExecuteRequest.Edited).
type EditedCall struct {
	// OriginalArguments are the model's arguments, replaced by Call's.
	OriginalArguments json.RawMessage `json:"originalArguments"`
	// By is who accepted the confirmation with the change, as
	// authenticated.
	By Identity `json:"by,omitzero"`
}

// Policy decisions.
const (
	DecisionAllow   = "allow"
	DecisionVeto    = "veto"
	DecisionConfirm = "confirm"
	// DecisionUnavailable is recorded by the agent, never sent by a policy:
	// no policy service answered.
	DecisionUnavailable = "policy_unavailable"
)

// Decision is how the agent decided one tool call: the combination of
// every policy's answer (the rule is in docs/POLICY.md), as kept in run records and
// paused turns. A policy never sends it; a policy's reply is a
// PolicyDecision.
type Decision struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	// Policy names the policy service(s) whose answer decided, joined by
	// "," when several gave it.
	Policy string `json:"policy,omitempty"`
	// ConfigVersion identifies the configuration the decision came from
	// (the deciding policies' versions, joined by ",").
	ConfigVersion string `json:"configVersion,omitempty"`
	// Policies is every policy's answer, in the order they arrived (with a
	// policy_timeout veto for each expected policy that did not answer).
	// At most MaxPolicyReplies entries. Empty in records written before
	// several policies were gathered.
	Policies []PolicyDecision `json:"policies,omitempty"`
}

// PolicyDecision is the data of dev.parley.tool.pre_execute.decided: one
// policy service's answer to a pre-execute request, and nothing else. The
// contract is closed: a reply with any other member (a confirmation's
// text, arguments, an elicitation) is malformed and counts as a veto
// (reason policy_malformed). The agent words every confirmation itself,
// from the registered tool definition and the exact call.
type PolicyDecision struct {
	// Policy names the policy service (e.g. "gate"); required. It is
	// matched against the agent's expected policies.
	Policy string `json:"policy"`
	// Decision is DecisionAllow, DecisionVeto or DecisionConfirm.
	Decision string `json:"decision"`
	// Reason explains the decision (shown to the model on a veto); at most
	// MaxPolicyReasonBytes are kept.
	Reason string `json:"reason,omitempty"`
	// ConfigVersion identifies the policy's configuration.
	ConfigVersion string `json:"configVersion,omitempty"`
	// Reconfirm, with decision confirm on a call a person edited
	// (PreExecuteRequest.Edited), asks for the edited call to be
	// confirmed again: a new confirmation on the thread, which anyone who
	// may answer there may answer (in a shared thread, not necessarily
	// the person who edited; the records name who did). Without it such
	// a confirm is satisfied by the acceptance that carried the edit:
	// nobody is asked to confirm their own edit. Ignored on other
	// decisions and on calls not edited.
	Reconfirm bool `json:"reconfirm,omitempty"`
	// AskEveryTime, on a confirm, says that no standing approval may
	// cover the call: the person is asked every time (docs/POLICY.md).
	// An agent that predates the member counts the reply as malformed,
	// a veto: failing closed. Optional.
	AskEveryTime bool `json:"askEveryTime,omitempty"`
}

// Bounds of gathered policy answers.
const (
	// MaxPolicyReplies bounds the replies the agent gathers for one
	// pre-execute request; it stops listening at the bound (expected
	// policies that did not answer by then count as policy_timeout).
	MaxPolicyReplies = 16
	// MaxPolicyReasonBytes bounds a policy's reason; a longer one is cut.
	MaxPolicyReasonBytes = 1024
)

// Reasons the agent and the tool-executor give for decisions no policy
// made.
const (
	// ReasonPolicyTimeout: an expected policy did not answer by the
	// deadline; for a tool that is not read-only the call is vetoed.
	ReasonPolicyTimeout = "policy_timeout"
	// ReasonPolicyMalformed: a policy's reply could not be read as a
	// PolicyDecision (including one carrying confirmation text or
	// arguments); it counts as a veto.
	ReasonPolicyMalformed = "policy_malformed"
	// ReasonNoDecision: the tool-executor found no decision record for a
	// call of a tool that is not read-only; it was not run.
	ReasonNoDecision = "no_decision"
	// ReasonDecisionMismatch: the decision record names another tool or
	// other arguments than the call; it was not run.
	ReasonDecisionMismatch = "decision_mismatch"
	// ReasonToolSubjectMismatch: a call's tool name differs from the tool
	// token of its subject; it was not run.
	ReasonToolSubjectMismatch = "tool_subject_mismatch"
)

// DeadLetter is the data of dev.parley.dead_lettered, published on
// parley.dlq.<stream>.<consumer>: why, and the original message.
type DeadLetter struct {
	Reason       string              `json:"reason"`
	Stream       string              `json:"stream"`
	Consumer     string              `json:"consumer"`
	Subject      string              `json:"subject"`
	StreamSeq    uint64              `json:"streamSeq"`
	NumDelivered uint64              `json:"numDelivered"`
	Headers      map[string][]string `json:"headers"`
	// Body is the original message body (base64 in JSON), cut to
	// MaxDeadLetterBody bytes; BodyTruncated says it was cut.
	Body          []byte `json:"body"`
	BodyTruncated bool   `json:"bodyTruncated,omitempty"`
}

// MaxDeadLetterBody bounds DeadLetter.Body, so a dead letter of a message
// near the server's payload limit still fits: 256 KiB.
const MaxDeadLetterBody = 256 << 10
