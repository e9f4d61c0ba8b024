package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// The gateway is an AG-UI agent (the Agent-User Interaction protocol,
// @ag-ui/core 1.0): POST /v1/ag-ui takes a RunAgentInput and answers
// with the run's events as server-sent events, so an AG-UI client
// (@ag-ui/client's HttpAgent, CopilotKit) drives a parley thread. The
// mapping is in docs/AG-UI.md; every run goes through the gateway's own
// paths: sendMessage for a user message, answer for each resume entry,
// with the same authentication, ownership, shares, limits and verdicts.

// AG-UI routes, authenticated like every API route.
var (
	// RouteAGUI runs a turn (a user message) or resumes one (answers to
	// its interrupts): RunAgentInput in, AG-UI events out (SSE).
	RouteAGUI = Route{http.MethodPost, "/v1/ag-ui"}
	// RouteAGUICapabilities answers the AG-UI AgentCapabilities the
	// gateway declares (AGUICapabilities).
	RouteAGUICapabilities = Route{http.MethodGet, "/v1/ag-ui/capabilities"}
)

// AGUIProtocolVersion is the AG-UI protocol version the gateway speaks
// (@ag-ui/core PROTOCOL_VERSION).
const AGUIProtocolVersion = "1.0"

// AGUICapabilities are the AG-UI AgentCapabilities (@ag-ui/core
// AgentCapabilitiesSchema) the gateway declares at GET
// /v1/ag-ui/capabilities: streaming over SSE, the agents' own tools (none
// from the client), human in the loop through interrupts (a confirmation
// offering edits accepts editedArgs: what runs is what the person
// confirmed, edited or not), progress as activity.
func AGUICapabilities() map[string]any {
	return map[string]any{
		"identity": map[string]any{"name": "parley", "type": "parley-gateway",
			"description": "parley: human-in-the-loop chat turns over NATS JetStream"},
		"transport":      map[string]any{"streaming": true, "websocket": false, "httpBinary": false, "resumable": false},
		"tools":          map[string]any{"supported": true, "clientProvided": false},
		"state":          map[string]any{"snapshots": false, "deltas": false, "memory": true},
		"humanInTheLoop": map[string]any{"supported": true, "approvals": true, "interrupts": true, "approveWithEdits": true},
		"custom":         map[string]any{"dev.parley/progress": AGUIActivityProgress},
	}
}

// AGUIActivityProgress is the activityType of the ACTIVITY_SNAPSHOT
// events that carry a turn's progress.
const AGUIActivityProgress = "parley.progress"

// Interrupt reasons (AG-UI Interrupt.reason).
const (
	// AGUIReasonToolApproval: a tool call waits for the person's
	// confirmation (a parley confirmation elicitation).
	AGUIReasonToolApproval = "tool_approval"
	// AGUIReasonInputRequired: a tool asks the person for input (a form,
	// or a URL-mode question).
	AGUIReasonInputRequired = "input_required"
)

// Bounds of a RunAgentInput beside the body's (Options.MaxBodyBytes).
const (
	// MaxAGUIIDBytes bounds runId and each message's id.
	MaxAGUIIDBytes = 256
	// MaxAGUIResume bounds the resume entries of one run (a turn asks a
	// handful of questions at once).
	MaxAGUIResume = 64
	// MaxAGUIViolations bounds the field errors of a refused run input:
	// the first ones are listed, so the problem does not grow with the
	// body (thousands of bad messages).
	MaxAGUIViolations = 32
)

// resumeVerdictWait bounds how long a resume waits for the processor's
// verdict on each answer before it streams on (a later refusal ends the
// run with RUN_ERROR).
const resumeVerdictWait = 10 * time.Second

// AGUIRunInput is the body of POST /v1/ag-ui: an AG-UI RunAgentInput.
// Member names are exact (strict JSON, as every gateway body).
type AGUIRunInput struct {
	// ThreadID is the parley thread (a token: 1–128 of A-Z a-z 0-9 _ -).
	ThreadID string `json:"threadId"`
	// RunID names the run (1–256 bytes); echoed in RUN_STARTED and
	// RUN_FINISHED.
	RunID           string `json:"runId"`
	ProtocolVersion string `json:"protocolVersion,omitempty"`
	ParentRunID     string `json:"parentRunId,omitempty"`
	// State is the client's agent state: accepted and not used (the
	// thread's state lives in parley).
	State json.RawMessage `json:"state,omitempty"`
	// Messages are the conversation as the client holds it. A run without
	// resume sends its last message, which must be a user message; a
	// resume run sends a trailing user message only when it is new (see
	// docs/AG-UI.md). Earlier messages are not read: the thread's history
	// lives in parley.
	Messages []AGUIMessage `json:"messages"`
	// Tools must be empty: parley's agents run their own tools.
	Tools []AGUITool `json:"tools,omitempty"`
	// Context must be empty.
	Context []AGUIContext `json:"context,omitempty"`
	// ForwardedProps may name the agent: {"agent": "support"}.
	ForwardedProps json.RawMessage `json:"forwardedProps,omitempty"`
	// Resume answers the interrupts of the thread's paused turn.
	Resume []AGUIResume `json:"resume,omitempty"`
}

// AGUIMessage is an AG-UI Message (any role; the union of their members).
type AGUIMessage struct {
	ID   string `json:"id"`
	Role string `json:"role"`
	// Content is a string, or (user and tool messages) an array of
	// content parts; an activity message's is an object.
	Content        json.RawMessage `json:"content,omitempty"`
	Name           string          `json:"name,omitempty"`
	EncryptedValue string          `json:"encryptedValue,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	ToolCalls      json.RawMessage `json:"toolCalls,omitempty"`
	ToolCallID     string          `json:"toolCallId,omitempty"`
	Error          string          `json:"error,omitempty"`
	ActivityType   string          `json:"activityType,omitempty"`
	SubagentRunID  string          `json:"subagentRunId,omitempty"`
}

// AGUITool is an AG-UI Tool (refused: see AGUIRunInput.Tools).
type AGUITool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

// AGUIContext is an AG-UI Context entry (refused: see
// AGUIRunInput.Context).
type AGUIContext struct {
	Description string `json:"description"`
	Value       string `json:"value"`
}

// AGUIResume is an AG-UI ResumeEntry: the answer to one interrupt.
type AGUIResume struct {
	// InterruptID is the elicitation ID of a question of the thread's
	// paused turn.
	InterruptID string `json:"interruptId"`
	// Status is "resolved" (answered with Payload) or "cancelled".
	Status string `json:"status"`
	// Payload is a confirmation's AGUIApproval, a form's content, nothing
	// for a URL-mode question.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Metadata is accepted and not used.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// AGUIApproval is the payload that resolves a tool_approval interrupt:
// approved must be true or false (nothing else approves), reason goes to
// the agent as the confirmation's instructions.
type AGUIApproval struct {
	Approved *bool  `json:"approved"`
	Reason   string `json:"reason,omitempty"`
	// EditedArgs accepts the call with changed arguments (AG-UI
	// approveWithEdits): the complete arguments to run instead of the
	// model's, a JSON object of at most schema.MaxEditedArgumentsBytes
	// that fits the tool's input schema (the interrupt's
	// responseSchema.properties.editedArgs). Only with approved true, and
	// only for an interrupt whose responseSchema offers it. The gateway
	// answers with them as the answer body's arguments
	// (_meta["dev.parley/arguments"]); the processor checks them, and a
	// refusal re-raises the interrupt with the field errors under
	// "editedArgs". Optional.
	EditedArgs json.RawMessage `json:"editedArgs,omitempty"`
}

// aguiForwarded is the forwardedProps parley reads.
type aguiForwarded struct {
	Agent string `json:"agent,omitempty"`
}

// aguiMessageRoles are the AG-UI message roles.
var aguiMessageRoles = []string{"developer", "system", "assistant", "user", "tool", "activity", "reasoning"}

// aguiEvent is one AG-UI event, as sent on the wire.
type aguiEvent map[string]any

// aguiPlan is what a RunAgentInput asks for, validated.
type aguiPlan struct {
	// message is the user message to send (nil: none), msgID its AG-UI
	// ID and msgIndex its index in messages.
	message  *MessageRequest
	msgID    string
	msgIndex int
	// resume are the resume entries, in order.
	resume []AGUIResume
}

// plan validates in and says what the run does; the violations name the
// member and the rule (paths as in the body: "messages[2].role").
func (in *AGUIRunInput) plan() (aguiPlan, []schema.Violation) {
	var vs []schema.Violation
	add := func(path, rule string) {
		if len(vs) < MaxAGUIViolations {
			vs = append(vs, schema.Violation{Path: path, Rule: rule})
		}
	}
	if err := events.ValidToken("threadId", in.ThreadID); err != nil {
		add("threadId", err.Error())
	}
	if in.RunID == "" || len(in.RunID) > MaxAGUIIDBytes || !printable(in.RunID) {
		add("runId", fmt.Sprintf("required: 1–%d printable bytes", MaxAGUIIDBytes))
	}
	if len(in.Tools) > 0 {
		add("tools", "must be empty: parley's agents run their own tools (client-provided tools are not supported)")
	}
	if len(in.Context) > 0 {
		add("context", "must be empty: parley does not take context entries (send what the agent should read as the user message)")
	}
	var fw aguiForwarded
	if p := bytes.TrimSpace(in.ForwardedProps); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if ms := exactMembers(p, reflect.TypeFor[aguiForwarded]()); len(ms) > 0 {
			add("forwardedProps."+ms[0].Path, ms[0].Rule)
		} else if err := strictDecode(p, &fw); err != nil {
			add("forwardedProps", "must be an object with at most the member agent (a string): "+err.Error())
		} else if fw.Agent != "" {
			if err := events.ValidToken("agent", fw.Agent); err != nil {
				add("forwardedProps.agent", err.Error())
			}
		}
	}
	for i, m := range in.Messages {
		path := fmt.Sprintf("messages[%d]", i)
		if m.ID == "" || len(m.ID) > MaxAGUIIDBytes || !printable(m.ID) {
			add(path+".id", fmt.Sprintf("required: 1–%d printable bytes", MaxAGUIIDBytes))
		}
		if !slices.Contains(aguiMessageRoles, m.Role) {
			add(path+".role", "must be one of "+strings.Join(aguiMessageRoles, ", "))
		}
	}
	if len(in.Resume) > MaxAGUIResume {
		add("resume", fmt.Sprintf("at most %d entries", MaxAGUIResume))
	}
	seen := map[string]bool{}
	for i, r := range in.Resume {
		path := fmt.Sprintf("resume[%d]", i)
		if err := events.ValidToken("interruptId", r.InterruptID); err != nil {
			add(path+".interruptId", err.Error())
		} else if seen[r.InterruptID] {
			add(path+".interruptId", "answers an interrupt an earlier entry answers")
		}
		seen[r.InterruptID] = true
		switch r.Status {
		case "resolved", "cancelled":
		default:
			add(path+".status", `must be "resolved" or "cancelled"`)
		}
	}
	p := aguiPlan{resume: in.Resume, msgIndex: -1}
	last := len(in.Messages) - 1
	switch {
	case last >= 0 && in.Messages[last].Role == "user":
		text, err := userText(in.Messages[last].Content)
		if err != nil {
			add(fmt.Sprintf("messages[%d].content", last)+err.path, err.rule)
			break
		}
		p.message = &MessageRequest{Text: text, Agent: fw.Agent}
		p.msgID, p.msgIndex = in.Messages[last].ID, last
	case len(in.Resume) == 0:
		add("messages", "the last message must be a user message (role user): a run sends one user message, or resumes with resume")
	}
	// With resume, whether a trailing user message is new (it may then
	// come with cancelled entries only) is told by aguiResume.
	return p, vs
}

// contentError names what is wrong with a user message's content.
type contentError struct{ path, rule string }

// userText returns the text of a user message's content: the string, or
// its text parts joined by blank lines. Other parts are refused.
func userText(raw json.RawMessage) (string, *contentError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", &contentError{"", "must be a string or an array of content parts"}
	}
	var texts []string
	for j, p := range parts {
		var part struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(p, &part); err != nil {
			return "", &contentError{fmt.Sprintf("[%d]", j), "must be a content part object"}
		}
		if part.Type != "text" {
			return "", &contentError{fmt.Sprintf("[%d].type", j), `only "text" parts are supported`}
		}
		texts = append(texts, part.Text)
	}
	return strings.Join(texts, "\n\n"), nil
}

func printable(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// strictDecode decodes one JSON value into v, refusing unknown members
// and trailing data.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// messageEventID is the ID of the turn.requested event an AG-UI message
// is sent as: derived from the user, the thread and the message's ID, so
// a run retried with the same message starts no second turn (PARLEY_INPUT
// drops the copy inside its duplicate window; see docs/AG-UI.md).
func messageEventID(user, thread, messageID string) string {
	return events.DerivedID("ag-ui.message", user, thread, messageID)
}

// turnOfRequest is the turn a turn.requested event starts (the processor derives
// it from the event's ID alone).
func turnOfRequest(requestEventID string) string { return events.DerivedID("turn", requestEventID) }

// answerOf turns a resume entry into the answer to question q: cancelled
// is cancel (a payload is dropped, as a cancel's content is); a
// confirmation's AGUIApproval is accept (with its editedArgs as the
// answer's arguments) or decline with the reason as instructions; a form's payload is its content (validated by the
// processor); a URL-mode question is accepted with no payload.
func answerOf(r AGUIResume, q schema.ElicitRequestParams, path string) (AnswerRequest, *schema.Violation) {
	if r.Status == "cancelled" {
		return AnswerRequest{Action: schema.ActionCancel}, nil
	}
	payload := bytes.TrimSpace(r.Payload)
	absent := len(payload) == 0 || bytes.Equal(payload, []byte("null"))
	switch {
	case q.IsToolConfirmation():
		var a AGUIApproval
		if absent {
			return AnswerRequest{}, &schema.Violation{Path: path + ".payload", Rule: `required: {"approved": true|false, "reason"?: "…"}`}
		}
		if ms := exactMembers(payload, reflect.TypeFor[AGUIApproval]()); len(ms) > 0 {
			return AnswerRequest{}, &schema.Violation{Path: path + ".payload." + ms[0].Path, Rule: ms[0].Rule}
		}
		if err := strictDecode(payload, &a); err != nil {
			return AnswerRequest{}, &schema.Violation{Path: path + ".payload",
				Rule: `must be {"approved": true|false, "reason"?: "…", "editedArgs"?: {…}}: ` + err.Error()}
		}
		if a.Approved == nil {
			return AnswerRequest{}, &schema.Violation{Path: path + ".payload.approved", Rule: "required: true or false"}
		}
		var content map[string]any
		if a.Reason != "" {
			content = map[string]any{schema.InstructionsProperty: a.Reason}
		}
		if !*a.Approved {
			if len(a.EditedArgs) > 0 {
				return AnswerRequest{}, &schema.Violation{Path: path + ".payload.editedArgs",
					Rule: "only with approved true: a declined call runs nothing, so it has no arguments to edit"}
			}
			return AnswerRequest{Action: schema.ActionDecline, Content: content}, nil
		}
		req := AnswerRequest{Action: schema.ActionAccept, Content: content}
		if len(a.EditedArgs) > 0 {
			if _, ok := q.InputSchemaOf(); !ok {
				return AnswerRequest{}, &schema.Violation{Path: path + ".payload.editedArgs",
					Rule: "this interrupt offers no edit of the call's arguments (its responseSchema has no editedArgs): approve or decline the call as shown"}
			}
			req.Arguments = a.EditedArgs
			if vs := req.editedArguments(); len(vs) > 0 {
				return AnswerRequest{}, &schema.Violation{Path: path + ".payload.editedArgs" + strings.TrimPrefix(vs[0].Path, "arguments"), Rule: vs[0].Rule}
			}
		}
		return req, nil
	case q.IsURLMode():
		if !absent && !bytes.Equal(payload, []byte("{}")) {
			return AnswerRequest{}, &schema.Violation{Path: path + ".payload", Rule: "must be absent: a URL-mode question is answered by resolving it (consent) or cancelling it"}
		}
		return AnswerRequest{Action: schema.ActionAccept}, nil
	default:
		var content map[string]any
		if absent || json.Unmarshal(payload, &content) != nil || content == nil {
			return AnswerRequest{}, &schema.Violation{Path: path + ".payload", Rule: "must be an object: the form's content (its responseSchema)"}
		}
		return AnswerRequest{Action: schema.ActionAccept, Content: content}, nil
	}
}

// aguiToolCallID is the AG-UI tool call ID of parley's call callID of
// turn: parley's call IDs (call_<step>_<index>) repeat across turns, the
// turn ID does not.
func aguiToolCallID(turn, callID string) string { return turn + "." + callID }

// approvalSchema is the responseSchema of a tool_approval interrupt of
// confirmation q: the payload that resolves it (AGUIApproval). When q
// offers edits (_meta["dev.parley/input_schema"]), the tool's input
// schema is the schema of its editedArgs member.
func approvalSchema(q schema.ElicitRequestParams) map[string]any {
	props := map[string]any{
		"approved": map[string]any{"type": "boolean", "description": "true runs the call as shown (or with editedArgs when given); false declines it"},
		"reason": map[string]any{"type": "string",
			"description": "Optional instructions if you want the agent to do something differently"},
	}
	if in, ok := q.InputSchemaOf(); ok {
		var edit map[string]any
		if json.Unmarshal(in, &edit) == nil && edit != nil {
			edit["description"] = "Optional, only with approved true: the complete arguments to run instead of the call's own"
			props["editedArgs"] = edit
		}
	}
	return map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             []any{"approved"},
		"additionalProperties": false,
	}
}

// aguiEditPaths names the processor's violations of edited arguments as
// the resume payload gave them: `_meta["dev.parley/arguments"].ids`
// becomes "editedArgs.ids".
func aguiEditPaths(vs []schema.Violation) []schema.Violation {
	out := make([]schema.Violation, len(vs))
	for i, v := range vs {
		if rest, ok := strings.CutPrefix(v.Path, schema.EditPath); ok {
			v.Path = "editedArgs" + rest
		}
		out[i] = v
	}
	return out
}

// interruptOf is the AG-UI Interrupt of a pending question of turn: id =
// the elicitation ID, reason tool_approval (with toolCallId) or
// input_required, message, responseSchema (a form's MCP requestedSchema,
// a confirmation's approvalSchema), expiresAt (the pause's expiry),
// metadata["dev.parley/_meta"] = the question's MCP _meta (the call's
// name, arguments and annotations; widget hints; the asking MCP server),
// and for a URL-mode question metadata["dev.parley/url"]. errs, when the
// question's last answer was refused invalid_content, go to
// metadata["dev.parley/errors"].
func interruptOf(turn string, q schema.ElicitRequestParams, expires *time.Time, errs []schema.Violation) aguiEvent {
	in := aguiEvent{"id": questionID(q), "reason": AGUIReasonInputRequired, "message": askedMessage(q)}
	md := map[string]any{}
	if len(q.Meta) > 0 {
		md["dev.parley/_meta"] = q.Meta
	}
	switch {
	case q.IsToolConfirmation():
		in["reason"] = AGUIReasonToolApproval
		in["responseSchema"] = approvalSchema(q)
		if tc, ok := toolCallOf(q); ok {
			in["toolCallId"] = aguiToolCallID(turn, tc.ToolID)
		}
	case q.IsURLMode():
		md["dev.parley/url"] = q.URL
	default:
		in["responseSchema"] = q.RequestedSchema
	}
	if expires != nil {
		in["expiresAt"] = expires.UTC().Format(time.RFC3339Nano)
	}
	if len(errs) > 0 {
		md["dev.parley/errors"] = errs
	}
	if len(md) > 0 {
		in["metadata"] = md
	}
	return in
}

// askedMessage is the interrupt message of question q: parley's own
// question's message as it is; for a question an MCP server asked
// (_meta["dev.parley/mcp_server"], set by the tool-executor) it says who
// asks and, for a server that is not trusted, that parley cannot vouch
// for it (as the web chat and parley chat do), then quotes the server's
// words line by line ("> "), so they can neither end the quote nor pass
// for parley's in a client that shows only the message.
func askedMessage(q schema.ElicitRequestParams) string {
	ms, err := q.Meta.MCPServer()
	if err == nil && ms == nil {
		return q.Message
	}
	var msg string
	switch {
	case err != nil:
		msg = "Asked by an MCP server whose name is unreadable: parley cannot vouch for this question or for what the server does with the answer."
	case !ms.Trusted:
		msg = fmt.Sprintf("Asked by MCP server %q, which is not trusted: parley cannot vouch for this question or for what the server does with the answer.", ms.Name)
	default:
		msg = fmt.Sprintf("Asked by MCP server %q.", ms.Name)
	}
	msg += " Its words:"
	for _, l := range strings.Split(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(q.Message), "\n") {
		msg += "\n> " + l
	}
	return msg
}

// aguiRun maps one thread's parley events to one AG-UI run: the turn
// turnID (started by the run's message, or resumed by its answers).
// It knows nothing of NATS or HTTP: feed it events (apply), take the
// AG-UI events it returns.
type aguiRun struct {
	threadID, runID string
	// turnID is the turn the run follows; requestID the turn.requested
	// that started it (its verdict is the run's, "" on a resume).
	turnID, requestID string
	// answers are the IDs of the run's answers (elicitation.responded):
	// a refusal of one ends the run.
	answers map[string]string
	// prior are parley call IDs reported before the run (the turn's last
	// turn.paused listed them; the previous run sent them whole).
	prior map[string]bool
	// started are the AG-UI tool calls opened (START … END sent) without
	// a result: the gated calls of the interrupts the run answers, and
	// those the run's own interrupt asks about.
	started map[string]bool
	// resulted are the AG-UI tool calls whose TOOL_CALL_RESULT was sent.
	resulted map[string]bool

	// text is the open text message ("" none) and its key (step,
	// generation, attempt); shown is the text the run streamed in it.
	text     string
	textKey  deltaKey
	shown    strings.Builder
	lastText string
	// questions are the elicitation.requested of the turn seen in the
	// run, by elicitation ID (the interrupt when no processor answers).
	questions     map[string]schema.ElicitRequestParams
	questionOrder []string
	// ended is set once the run's last event was produced.
	ended bool
	// echoed is set once the processor's echo of the run's message was
	// read, touched once any event of the turn was; idle counts the
	// heartbeats since the echo with nothing of the turn (aguiHandledBefore).
	echoed, touched bool
	idle            int
}

// deltaKey identifies one model call's streamed text.
type deltaKey struct {
	step, attempt int
	generation    string
}

func newAGUIRun(threadID, runID, turnID, requestID string) *aguiRun {
	return &aguiRun{threadID: threadID, runID: runID, turnID: turnID, requestID: requestID,
		answers: map[string]string{}, prior: map[string]bool{}, started: map[string]bool{}, resulted: map[string]bool{},
		questions: map[string]schema.ElicitRequestParams{}}
}

// runStarted returns RUN_STARTED.
func (a *aguiRun) runStarted() aguiEvent {
	return aguiEvent{"type": "RUN_STARTED", "threadId": a.threadID, "runId": a.runID, "protocolVersion": AGUIProtocolVersion}
}

// finished returns RUN_FINISHED with outcome (nil: success), closing
// what is open first.
func (a *aguiRun) finished(outcome map[string]any, result any) []aguiEvent {
	out := a.closeText()
	ev := aguiEvent{"type": "RUN_FINISHED", "threadId": a.threadID, "runId": a.runID}
	if outcome != nil {
		ev["outcome"] = outcome
	}
	if result != nil {
		ev["result"] = result
	}
	a.ended = true
	return append(out, ev)
}

// runError returns RUN_ERROR: code is parley's reason.
func (a *aguiRun) runError(code, message string) []aguiEvent {
	a.ended = true
	if message == "" {
		message = code
	}
	return []aguiEvent{{"type": "RUN_ERROR", "code": code, "message": message}}
}

// closeText ends the open text message.
func (a *aguiRun) closeText() []aguiEvent {
	if a.text == "" {
		return nil
	}
	ev := aguiEvent{"type": "TEXT_MESSAGE_END", "messageId": a.text}
	a.lastText, a.text = a.shown.String(), ""
	a.shown.Reset()
	return []aguiEvent{ev}
}

// textMessage returns a whole text message (START, CONTENT, END).
func textMessage(id, text string) []aguiEvent {
	out := []aguiEvent{{"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}}
	if text != "" {
		out = append(out, aguiEvent{"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text})
	}
	return append(out, aguiEvent{"type": "TEXT_MESSAGE_END", "messageId": id})
}

// delta maps a message.delta of the turn: one text message per model
// call (step, generation, attempt); a delta of an older attempt or
// generation of the open call, or of an earlier step, is dropped.
func (a *aguiRun) delta(d events.MessageDelta) []aguiEvent {
	k := deltaKey{step: d.Step, attempt: d.Attempt, generation: d.Generation}
	var out []aguiEvent
	if a.text != "" && k != a.textKey {
		if k.step < a.textKey.step || (k.step == a.textKey.step && k.generation == a.textKey.generation && k.attempt < a.textKey.attempt) {
			return nil // late text of a call already replaced
		}
		out = append(out, a.closeText()...)
	}
	if d.Chunk.Text == "" {
		return out
	}
	if a.text == "" {
		a.text, a.textKey = fmt.Sprintf("%s.s%d.a%d.%s", a.turnID, k.step, k.attempt, k.generation), k
		out = append(out, aguiEvent{"type": "TEXT_MESSAGE_START", "messageId": a.text, "role": "assistant"})
	}
	a.shown.WriteString(d.Chunk.Text)
	return append(out, aguiEvent{"type": "TEXT_MESSAGE_CONTENT", "messageId": a.text, "delta": d.Chunk.Text})
}

// finalText maps the turn's final message: when the run streamed
// exactly this text (the open message, or the last one closed) it only
// closes it; otherwise the final message is a text message of its own
// (the preview differed: a retried call, a removed suggested-replies
// line, or nothing streamed, as with the scripted model).
func (a *aguiRun) finalText(text string) []aguiEvent {
	open := a.text != ""
	shown := a.lastText
	if open {
		shown = a.shown.String()
	}
	out := a.closeText()
	if (open || shown != "") && shown == text {
		return out
	}
	if strings.TrimSpace(text) == "" {
		return out
	}
	return append(out, textMessage(a.turnID+".final", text)...)
}

// toolCalls maps the calls a turn event lists: each call not reported
// before gets TOOL_CALL_START/ARGS/END (unless an interrupt opened it)
// and TOOL_CALL_RESULT with its one-line summary.
func (a *aguiRun) toolCalls(calls []events.ToolRan) []aguiEvent {
	var out []aguiEvent
	for _, c := range calls {
		if a.prior[c.CallID] {
			continue
		}
		id := aguiToolCallID(a.turnID, c.CallID)
		if a.resulted[id] {
			continue
		}
		if !a.started[id] {
			out = append(out, a.openCall(id, c.Tool, c.Arguments)...)
		}
		content := toolResultContent(c.Tool, c.Summary)
		md := map[string]any{"dev.parley/tool": c.Tool}
		if c.IsError {
			md["dev.parley/isError"] = true
		}
		if c.OutcomeUnknown {
			md["dev.parley/outcomeUnknown"] = true
			content = "[parley: the call was sent to the tool-executor and no result came back; it may have run]"
		}
		out = append(out, aguiEvent{"type": "TOOL_CALL_RESULT", "messageId": id + ".result", "toolCallId": id,
			"content": content, "role": "tool", "metadata": md})
		a.resulted[id] = true
		delete(a.started, id)
	}
	return out
}

// openCall returns TOOL_CALL_START, ARGS and END for call id.
func (a *aguiRun) openCall(id, tool string, args json.RawMessage) []aguiEvent {
	out := []aguiEvent{{"type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": tool}}
	if len(args) > 0 {
		out = append(out, aguiEvent{"type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": string(args)})
	}
	return append(out, aguiEvent{"type": "TOOL_CALL_END", "toolCallId": id})
}

// notRun closes the gated calls still open when the turn ends without
// them running, with a result saying why (the decision records name who
// declined; else the turn ended first).
func (a *aguiRun) notRun(decisions []events.DecisionRecord) []aguiEvent {
	var out []aguiEvent
	for _, id := range sortedKeys(a.started) {
		content := "[parley: not run: the turn ended before the call ran]"
		for _, d := range decisions {
			if aguiToolCallID(a.turnID, d.CallID) != id || d.Action == "" {
				continue
			}
			switch d.Action {
			case schema.ActionDecline:
				content = "[parley: not run: declined by " + d.AnsweredBy.OnBehalfOf + "]"
			case schema.ActionCancel:
				content = "[parley: not run: cancelled by " + d.AnsweredBy.OnBehalfOf + "]"
			}
		}
		out = append(out, aguiEvent{"type": "TOOL_CALL_RESULT", "messageId": id + ".result", "toolCallId": id,
			"content": content, "role": "tool", "metadata": map[string]any{"dev.parley/notRun": true}})
		a.resulted[id] = true
		delete(a.started, id)
	}
	return out
}

// blocked reports the calls of decisions that policy kept from running
// (a veto, or no policy service answering): each is opened (START, END;
// its arguments are not in the record) and closed with parley's note,
// "[parley: not run: blocked by policy <p>: <reason>]" or "[parley: not
// run: <reason>]", metadata["dev.parley/notRun"] (and
// ["dev.parley/vetoed"] for a veto). A veto is never an interrupt: there
// is nothing to answer.
func (a *aguiRun) blocked(decisions []events.DecisionRecord) []aguiEvent {
	var out []aguiEvent
	for _, d := range decisions {
		content, ok := blockedNote(d)
		if !ok {
			continue
		}
		md := map[string]any{"dev.parley/tool": d.Tool, "dev.parley/notRun": true}
		if d.Decision == events.DecisionVeto {
			md["dev.parley/vetoed"] = true
		}
		id := aguiToolCallID(a.turnID, d.CallID)
		if a.prior[d.CallID] || a.resulted[id] {
			continue
		}
		if !a.started[id] {
			out = append(out, a.openCall(id, d.Tool, nil)...)
		}
		out = append(out, aguiEvent{"type": "TOOL_CALL_RESULT", "messageId": id + ".result", "toolCallId": id,
			"content": content, "role": "tool", "metadata": md})
		a.resulted[id] = true
		delete(a.started, id)
	}
	return out
}

// interrupt ends the run on the turn's pause: the gated calls it asks
// about are opened (START … END, no result: they wait for the answer),
// then RUN_FINISHED with outcome interrupt, one Interrupt per pending
// question. errs are refusals of the run's answers (invalid_content) by
// elicitation ID.
func (a *aguiRun) interrupt(pending []schema.ElicitRequestParams, expires *time.Time, errs map[string][]schema.Violation) []aguiEvent {
	out := a.closeText()
	var list []any
	for _, q := range pending {
		if q.IsToolConfirmation() {
			if tc, ok := toolCallOf(q); ok {
				id := aguiToolCallID(a.turnID, tc.ToolID)
				if !a.started[id] && !a.resulted[id] {
					out = append(out, a.openCall(id, tc.Name, tc.Arguments)...)
					a.started[id] = true
				}
			}
		}
		list = append(list, interruptOf(a.turnID, q, expires, errs[questionID(q)]))
	}
	if len(list) == 0 {
		return append(out, a.runError("unknown_or_expired", "the turn paused, and no question of it is pending any more")...)
	}
	return append(out, a.finished(map[string]any{"type": "interrupt", "interrupts": list}, nil)...)
}

// pausedEnd is set by apply on the turn's pause: the caller reads the
// pending questions (and the pause's expiry) from the processor and
// calls interrupt, or falls back to the questions the run saw.
type pausedEnd struct {
	data events.TurnPaused
}

// seenQuestions are the turn's questions the run saw asked, among ids.
func (a *aguiRun) seenQuestions(ids []string) []schema.ElicitRequestParams {
	var out []schema.ElicitRequestParams
	for _, id := range ids {
		if q, ok := a.questions[id]; ok {
			out = append(out, q)
		}
	}
	return out
}

// ofTurn reports whether ev belongs to the run's turn.
func (a *aguiRun) ofTurn(turnID string) bool {
	if turnID != "" && turnID == a.turnID {
		a.touched = true
		return true
	}
	return false
}

// apply maps one of the thread's events. It returns the AG-UI events to
// send, and a pausedEnd when the turn paused (the run ends with its
// interrupts). Events of other turns, and of other parties, map to
// nothing.
func (a *aguiRun) apply(typ events.Type, turnExt string, data []byte, ownPrincipal bool) ([]aguiEvent, *pausedEnd) {
	if a.ended {
		return nil, nil
	}
	switch typ {
	case events.TypeMessageDelta:
		var d events.MessageDelta
		if json.Unmarshal(data, &d) != nil || !a.ofTurn(d.TurnID) {
			return nil, nil
		}
		return a.delta(d), nil
	case events.TypeProgress:
		var p schema.Progress
		if json.Unmarshal(data, &p) != nil || !a.ofTurn(turnExt) {
			return nil, nil
		}
		status, _ := p.Meta.StatusItem()
		content := map[string]any{"progress": p.Progress, "message": p.Message, "status": status}
		if ph, ok := p.Meta["dev.parley/phase"].(string); ok {
			content["phase"] = ph
		}
		return []aguiEvent{{"type": "ACTIVITY_SNAPSHOT", "messageId": a.runID + ".progress",
			"activityType": AGUIActivityProgress, "content": content, "replace": true}}, nil
	case events.TypeElicitationRequested:
		var q schema.ElicitRequestParams
		if json.Unmarshal(data, &q) != nil || !a.ofTurn(turnExt) {
			return nil, nil
		}
		if id := questionID(q); id != "" {
			if _, ok := a.questions[id]; !ok {
				a.questionOrder = append(a.questionOrder, id)
			}
			a.questions[id] = q
		}
		return nil, nil
	case events.TypeTurnPaused:
		var d events.TurnPaused
		if json.Unmarshal(data, &d) != nil || !(a.ofTurn(d.TurnID) || (a.requestID != "" && d.RequestEventID == a.requestID)) {
			return nil, nil
		}
		return append(a.closeText(), a.toolCalls(d.ToolCalls)...), &pausedEnd{data: d}
	case events.TypeTurnCompleted:
		var d events.TurnCompleted
		if json.Unmarshal(data, &d) != nil || !(a.ofTurn(d.TurnID) || (a.requestID != "" && d.RequestEventID == a.requestID)) {
			return nil, nil
		}
		// The calls are reported after the text streamed so far (parley
		// lists them at the turn's end), before the final message.
		out := append(a.closeText(), a.toolCalls(d.ToolCalls)...)
		out = append(out, a.blocked(d.Decisions)...)
		out = append(out, a.notRun(d.Decisions)...)
		out = append(out, a.finalText(d.Message.Text)...)
		return append(out, a.finished(nil, map[string]any{"turnId": d.TurnID})...), nil
	case events.TypeTurnFailed:
		var d events.TurnFailed
		if json.Unmarshal(data, &d) != nil || !(a.ofTurn(d.TurnID) || (a.requestID != "" && d.RequestEventID == a.requestID)) {
			return nil, nil
		}
		out := append(a.closeText(), a.toolCalls(d.ToolCalls)...)
		out = append(out, a.notRun(nil)...)
		return append(out, a.runError(d.Reason, d.Detail)...), nil
	case events.TypeTurnRejected:
		var d events.TurnRejected
		if json.Unmarshal(data, &d) != nil || a.requestID == "" || d.RequestEventID != a.requestID || !ownPrincipal {
			return nil, nil
		}
		msg := "the message was refused: " + d.Reason
		for _, v := range d.Errors {
			msg += "; " + v.Path + ": " + v.Rule
		}
		return a.runError(d.Reason, msg), nil
	case events.TypeElicitationRejected:
		var d events.ElicitationRejected
		if json.Unmarshal(data, &d) != nil || !ownPrincipal {
			return nil, nil
		}
		q, ok := a.answers[d.RespondedEventID]
		if !ok {
			return nil, nil
		}
		return a.runError(d.Reason, "the answer to "+q+" was refused: "+d.Detail), nil
	case events.TypeElicitationExpired:
		var d events.ElicitationExpired
		if json.Unmarshal(data, &d) != nil || !a.ofTurn(d.TurnID) {
			return nil, nil
		}
		return a.runError("elicitation_expired", "the turn's questions expired unanswered"), nil
	case events.TypeElicitationCancelled:
		var d events.ElicitationCancelled
		if json.Unmarshal(data, &d) != nil || !a.ofTurn(d.TurnID) || d.Reason == siblingCancelled {
			return nil, nil
		}
		// Withdrawn by the processor (a newer message superseded the
		// turn): the turn ends with no answer.
		return append(append(a.closeText(), a.notRun(nil)...), a.finished(map[string]any{"type": "cancelled"}, nil)...), nil
	}
	return nil, nil
}

// siblingCancelled is the processor's reason on the elicitation.cancelled
// of the questions a cancel of one of them withdrew: the run goes on.
const siblingCancelled = "another question of the same turn was cancelled"

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// getAGUICapabilities serves GET /v1/ag-ui/capabilities.
func (g *Gateway) getAGUICapabilities(w http.ResponseWriter, _ *http.Request, _ string) {
	writeJSON(w, http.StatusOK, AGUICapabilities())
}

// aguiWriter writes AG-UI events as server-sent events ("data: <json>").
type aguiWriter struct {
	w   *bufio.Writer
	rc  *http.ResponseController
	err error
}

func (x *aguiWriter) send(evs ...aguiEvent) bool {
	for _, ev := range evs {
		data, err := json.Marshal(ev)
		if err != nil {
			x.err = err
			return false
		}
		x.w.WriteString("data: ")
		x.w.Write(data)
		x.w.WriteString("\n\n")
	}
	return x.flush()
}

func (x *aguiWriter) comment(s string) bool {
	x.w.WriteString(": " + s + "\n\n")
	return x.flush()
}

func (x *aguiWriter) flush() bool {
	if x.err != nil {
		return false
	}
	_ = x.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	if x.err = x.w.Flush(); x.err != nil {
		return false
	}
	x.err = x.rc.Flush()
	return x.err == nil
}

// postAGUI serves POST /v1/ag-ui (docs/AG-UI.md).
func (g *Gateway) postAGUI(w http.ResponseWriter, r *http.Request, user string) {
	var in AGUIRunInput
	if !decodeBody(w, r, &in) {
		return
	}
	plan, vs := in.plan()
	if len(vs) > 0 {
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest,
			Detail: "the run input is not valid: " + vs[0].Path + ": " + vs[0].Rule, Errors: vs})
		return
	}
	thread, ctx := in.ThreadID, r.Context()
	// A run holds a consumer like an event stream does.
	if !g.openStream(user) {
		w.Header().Set("Retry-After", "5")
		writeProblem(w, Problem{Status: http.StatusTooManyRequests, Reason: ReasonRateLimited,
			Detail: "too many open event streams and runs for this user"})
		return
	}
	defer g.closeStream(user)
	changed, unsubscribe := g.access.subscribe(thread)
	defer unsubscribe()
	// Everything the run causes is stored after this point.
	end, err := g.chatEnd(ctx)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	start := end + 1
	var run *aguiRun
	var early []aguiEvent // sent right after RUN_STARTED
	var reraise map[string][]schema.Violation
	if len(plan.resume) > 0 {
		var ok bool
		run, early, reraise, ok = g.aguiResume(w, r, user, &in, &plan)
		if !ok {
			return
		}
	}
	if run == nil && plan.message != nil {
		eventID := messageEventID(user, thread, plan.msgID)
		run = newAGUIRun(thread, in.RunID, turnOfRequest(eventID), eventID)
		if turn, ok := g.aguiWaiting(ctx, thread, user, plan.msgID); ok {
			// The message's turn waits for answers (a reload that lost
			// the interrupts; a shared user's client holding the owner's
			// message): read it from the stored events, send nothing.
			run = newAGUIRun(thread, in.RunID, turn, "")
			start = 0
			plan.message = nil
		}
	}
	if plan.message != nil && run.requestID != "" {
		eventID := run.requestID
		sent, ok := g.sendMessage(w, r, thread, user, *plan.message, eventID)
		if !ok {
			return
		}
		if sent.pending {
			out, rej, err := g.owners.resolve(ctx, thread, user, sent.claim, sent.eventID, pendingStreamWait)
			switch {
			case err != nil:
				g.unavailable(w, r, err)
				return
			case out == outcomeRejected && rej.Reason == events.RejectForbidden:
				g.notFound(w)
				return
			case out == outcomeRejected:
				writeProblem(w, Problem{Status: rejectionStatus(rej.Reason), Reason: rej.Reason,
					Detail: "the message was refused: " + rej.Reason, EventID: rej.RequestEventID, Errors: rej.Errors,
					Title: "message rejected: " + rej.Reason})
				return
			case out != outcomeAccepted:
				writeProblem(w, Problem{Status: http.StatusServiceUnavailable, Reason: ReasonUnavailable, EventID: eventID,
					Detail: "no processor took the thread's first message in time; run again with the same message to follow it"})
				return
			}
		}
		if sent.duplicate {
			// Sent before (a retried run): its turn's events are stored
			// already; read the thread from the claim's start.
			start = 0
		}
	}
	rec, err := g.owners.access(ctx, thread, user, 0)
	if !g.owned(w, r, err) {
		return
	}
	items, stop, err := g.follow(ctx, []string{events.ChatThreadSubjects(thread), events.RefusedThreadSubjects(g.opts.Principal, thread)},
		max(start, firstShown(rec)))
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	defer stop()
	epoch := g.owners.reader(thread, rec)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := &aguiWriter{w: bufio.NewWriter(w), rc: http.NewResponseController(w)}
	if !out.send(append([]aguiEvent{run.runStarted()}, early...)...) {
		return
	}
	if run.ended {
		return
	}
	if reraise != nil {
		// An answer was refused invalid_content, or an interrupt was not
		// answered: the turn still waits; raise what is still pending.
		out.send(g.aguiInterrupt(ctx, run, rec, nil, reraise)...)
		return
	}
	beat := time.NewTicker(g.opts.Heartbeat)
	defer beat.Stop()
	recheck := time.NewTicker(g.opts.AccessRecheck)
	defer recheck.Stop()
	for !run.ended {
		select {
		case it, ok := <-items:
			if !ok {
				return
			}
			if it.ev == nil {
				continue
			}
			if err := epoch.shows(ctx, it.seq, it.time, it.ev); err != nil {
				out.send(run.runError(ReasonNotFound, "the thread's owner changed at the processor")...)
				return
			}
			who := events.EchoIdentity(it.ev)
			own := who.Principal == "" || who.Principal == g.opts.Principal
			if run.requestID != "" && own && it.ev.ID() == run.requestID && events.TypeOf(it.ev) == events.TypeTurnRequested {
				run.echoed = true
			}
			turnExt, _ := it.ev.Extensions()[events.ExtTurnID].(string)
			evs, paused := run.apply(events.TypeOf(it.ev), turnExt, it.ev.Data(), own)
			if paused != nil {
				evs = append(evs, g.aguiInterrupt(ctx, run, rec, paused, nil)...)
			}
			if len(evs) > 0 && !out.send(evs...) {
				return
			}
		case <-beat.C:
			if !out.comment("heartbeat") {
				return
			}
			if g.aguiHandledBefore(ctx, run, rec) {
				out.send(run.runError(aguiAlreadyHandled, "this message was handled before and its turn has ended; send it with a new id to ask again")...)
				return
			}
		case t := <-changed:
			if !t.allows(user) {
				out.send(run.runError(ReasonForbidden, "the thread is no longer shared with you")...)
				return
			}
		case <-recheck.C:
			if err := g.owners.check(ctx, thread, user); errors.Is(err, errNotOwner) {
				out.send(run.runError(ReasonForbidden, "the thread is no longer shared with you")...)
				return
			}
		case <-g.closing:
			out.send(run.runError(ReasonUnavailable, "the gateway is shutting down; run again with the same message, or resume, to follow the turn")...)
			return
		case <-ctx.Done():
			return
		}
	}
}

// aguiInterrupt ends run on its turn's pause: the pending questions and
// the pause's expiry come from the processor's record; without an answer
// from a processor, from the questions the run saw asked (no expiry).
// When the processor's record says the turn no longer waits (answered
// meanwhile, or a retried run reading the thread's stored events), it
// returns nil and the run follows the turn on; for a re-raise (paused
// nil) that is a RUN_ERROR.
func (g *Gateway) aguiInterrupt(ctx context.Context, run *aguiRun, t ThreadOwner, paused *pausedEnd, errs map[string][]schema.Violation) []aguiEvent {
	rs, err := g.processorState(ctx, run.threadID, t)
	switch {
	case err == nil && rs.State == StatePaused && rs.TurnID == run.turnID:
		return run.interrupt(rs.Pending, rs.ExpiresAt, errs)
	case err == nil && paused != nil:
		return nil
	case err == nil:
		return run.runError(events.RejectUnknownOrExpired, "the turn no longer waits for these answers")
	case paused == nil:
		return run.runError(ReasonUnavailable, "no processor answered for the thread's paused turn; resume again")
	}
	g.log.WarnContext(ctx, "ag-ui run: the processor did not answer; the interrupts are the questions the run saw", "thread", run.threadID, "error", err)
	return run.interrupt(run.seenQuestions(paused.data.ElicitationIDs), nil, errs)
}

// aguiResume answers the resume entries of in (plan.resume) through the
// gateway's answer path, after checking each names a pending question
// of the thread's paused turn and fits its kind. It returns the run that
// follows the resumed turn, the events to send after RUN_STARTED, and
// the refusals to re-raise (non-nil: the turn still waits); or, with a
// new trailing user message and only cancellations, a nil run (the
// message is sent next). On a failure before anything streams it writes
// the problem and returns false.
func (g *Gateway) aguiResume(w http.ResponseWriter, r *http.Request, user string, in *AGUIRunInput, plan *aguiPlan) (*aguiRun, []aguiEvent, map[string][]schema.Violation, bool) {
	ctx, thread := r.Context(), in.ThreadID
	rec, err := g.owners.access(ctx, thread, user, 0)
	if !g.owned(w, r, err) {
		return nil, nil, nil, false
	}
	rs, err := g.processorState(ctx, thread, rec)
	if err != nil {
		g.log.WarnContext(ctx, "ag-ui resume: no thread state", "thread", thread, "error", err)
		writeProblem(w, Problem{Status: http.StatusServiceUnavailable, Reason: ReasonUnavailable,
			Detail: "no processor answered for the thread's paused turn; retry the resume"})
		return nil, nil, nil, false
	}
	pending := map[string]schema.ElicitRequestParams{}
	if rs.State == StatePaused {
		for _, q := range rs.Pending {
			pending[questionID(q)] = q
		}
	}
	// The trailing user message is the paused turn's own (the client
	// sends the conversation again, whoever of the thread's parties sent
	// it), or a new one.
	if plan.message != nil && rs.TurnID != "" && turnOfMessage(user, rec, thread, plan.msgID, rs.TurnID) {
		plan.message = nil
	}
	allCancelled := true
	for _, e := range plan.resume {
		allCancelled = allCancelled && e.Status == "cancelled"
	}
	if plan.message != nil && !allCancelled {
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest,
			Detail: "a run that resolves interrupts cannot also send a new user message: cancel them to send it, or resolve them without it",
			Errors: []schema.Violation{{Path: fmt.Sprintf("messages[%d]", plan.msgIndex), Rule: "a new user message comes with cancelled resume entries only"}}})
		return nil, nil, nil, false
	}
	type answerOne struct {
		id  string
		req AnswerRequest
	}
	var answers []answerOne
	var vs []schema.Violation
	for i, e := range plan.resume {
		path := fmt.Sprintf("resume[%d]", i)
		q, ok := pending[e.InterruptID]
		if !ok {
			if e.Status == "cancelled" {
				continue // nothing left to cancel: expired, withdrawn or answered
			}
			writeProblem(w, Problem{Status: rejectionStatus(events.RejectUnknownOrExpired), Reason: events.RejectUnknownOrExpired,
				Detail: "no pending question of this thread has the interrupt's ID (expired, answered, withdrawn or never asked); cancel it to go on",
				Errors: []schema.Violation{{Path: path + ".interruptId", Rule: "must be a pending interrupt of the thread"}}})
			return nil, nil, nil, false
		}
		req, v := answerOf(e, q, path)
		if v != nil {
			vs = append(vs, *v)
			continue
		}
		answers = append(answers, answerOne{e.InterruptID, req})
	}
	if len(vs) > 0 {
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest,
			Detail: "the resume is not valid: " + vs[0].Path + ": " + vs[0].Rule, Errors: vs})
		return nil, nil, nil, false
	}
	run := newAGUIRun(thread, in.RunID, rs.TurnID, "")
	if rs.TurnID != "" {
		if prior, err := g.pausedCalls(ctx, thread, rs.TurnID); err == nil {
			for _, c := range prior {
				run.prior[c] = true
			}
		}
	}
	var early []aguiEvent
	// The run that ended with these interrupts opened their gated calls.
	for _, q := range pending {
		if tc, ok := toolCallOf(q); ok {
			run.started[aguiToolCallID(rs.TurnID, tc.ToolID)] = true
		}
	}
	var errs map[string][]schema.Violation
	for _, a := range answers {
		v, err := g.answer(ctx, thread, user, a.id, a.req, resumeVerdictWait)
		if err != nil {
			g.unavailable(w, r, err)
			return nil, nil, nil, false
		}
		run.answers[v.eventID] = a.id
		if d := v.rejected; d != nil {
			if d.Reason == events.RejectInvalidContent {
				if errs == nil {
					errs = map[string][]schema.Violation{}
				}
				errs[a.id] = aguiEditPaths(d.Errors)
				continue
			}
			early = append(early, run.runError(d.Reason, "the answer to "+a.id+" was refused: "+d.Detail)...)
			return run, early, nil, true
		}
	}
	if plan.message != nil {
		return nil, nil, nil, true // cancelled all: the new message is the run
	}
	if len(answers) == 0 {
		// Only cancellations of questions no longer pending.
		if len(pending) > 0 {
			return run, nil, map[string][]schema.Violation{}, true
		}
		early = append(early, run.finished(nil, nil)...)
		return run, early, nil, true
	}
	answered := map[string]bool{}
	for _, a := range answers {
		answered[a.id] = true
	}
	for id := range pending {
		if !answered[id] && errs == nil {
			errs = map[string][]schema.Violation{} // an interrupt left open: the turn still waits
		}
	}
	return run, early, errs, true
}

// pausedCalls returns the parley call IDs the last turn.paused of thread
// listed, when it is turn's: the previous run reported them.
func (g *Gateway) pausedCalls(ctx context.Context, thread, turn string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, stateWait)
	defer cancel()
	stream, err := g.bus.JetStream().Stream(ctx, events.StreamChat)
	if err != nil {
		return nil, err
	}
	m, err := stream.GetLastMsgForSubject(ctx, events.ChatSubject(thread, events.ChatTurnPaused))
	if err != nil {
		return nil, err
	}
	ev, err := events.Decode(events.Header(m.Header), m.Data)
	if err != nil {
		return nil, err
	}
	d, err := events.Data[events.TurnPaused](ev)
	if err != nil || d.TurnID != turn {
		return nil, err
	}
	var ids []string
	for _, c := range d.ToolCalls {
		ids = append(ids, c.CallID)
	}
	return ids, nil
}

// turnOfMessage reports whether the AG-UI message msgID started turn
// on thread when sent by user or by any party of the thread (t: its
// owner and the users it is shared with): a shared user's client holds
// the conversation the owner's message started.
func turnOfMessage(user string, t ThreadOwner, thread, msgID, turn string) bool {
	for _, p := range append([]string{user, t.Owner}, t.Shared...) {
		if p != "" && turnOfRequest(messageEventID(p, thread, msgID)) == turn {
			return true
		}
	}
	return false
}

// aguiAlreadyHandled is the RUN_ERROR code of a run whose message the
// processor had handled before (aguiHandledBefore).
const aguiAlreadyHandled = "already_handled"

// aguiWaiting reports whether the processor's record says the thread's
// paused turn is the one the AG-UI message msgID started (sent by user
// or another party of the thread, turnOfMessage), and returns that turn
// (user may read the thread; false when it cannot tell).
func (g *Gateway) aguiWaiting(ctx context.Context, thread, user, msgID string) (string, bool) {
	t, err := g.owners.access(ctx, thread, user, 0)
	if err != nil {
		return "", false
	}
	rs, err := g.processorState(ctx, thread, t)
	if err != nil || rs.State != StatePaused || rs.TurnID == "" || !turnOfMessage(user, t, thread, msgID, rs.TurnID) {
		return "", false
	}
	return rs.TurnID, true
}

// aguiHandledBefore reports, at a heartbeat, whether run's message was
// taken by the processor for a redelivery of one it handled before
// (sent again after PARLEY_INPUT's duplicate window, its turn long
// ended): the echo came, nothing of its turn followed for two
// heartbeats, and the processor's record has neither it active nor any
// message queued. A message queued behind another turn keeps waiting.
func (g *Gateway) aguiHandledBefore(ctx context.Context, run *aguiRun, t ThreadOwner) bool {
	if run.requestID == "" || !run.echoed || run.touched {
		return false
	}
	if run.idle++; run.idle < 2 {
		return false
	}
	rs, err := g.processorState(ctx, run.threadID, t)
	return err == nil && rs.TurnID != run.turnID && rs.Queued == 0
}
