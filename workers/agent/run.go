package agent

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// RunFormat is the format version of Run (checkpoint and snapshot) this
// agent writes: 2 stores each call's policy decision once (runjson.go).
// It reads RunFormat and previousRunFormat, whose record held every copy.
const (
	RunFormat         = 2
	previousRunFormat = 1
)

// Call statuses.
const (
	callNew        = "new"
	callDispatched = "dispatched"
	callAwaiting   = "awaiting"
	callDone       = "done"
)

// Run is an agent run's state: the checkpoint in parley_runs and the
// snapshot of a paused run.
type Run struct {
	Format int    `json:"format"`
	RunID  string `json:"runId"`
	TurnID string `json:"turnId"`
	Thread string `json:"thread"`
	Agent  string `json:"agent"`
	// Messages is the conversation so far, including this run's tool calls
	// and results.
	Messages []model.Message `json:"messages"`
	// Step counts model calls made.
	Step int `json:"step"`
	// Calls are the tool calls of the current step.
	Calls []*CallState `json:"calls,omitempty"`
	// Resumes lists the run.resumed event IDs applied.
	Resumes []string `json:"resumes,omitempty"`
	// Decisions records how each settled call of the run was decided.
	Decisions []events.DecisionRecord `json:"decisions,omitempty"`
	// Final is the answer once the run is done.
	Final *schema.ChatMessage `json:"final,omitempty"`
	// Failed is set when the run failed (reason code and detail).
	Failed *events.RunFailed `json:"failed,omitempty"`
	// Usage is the token usage of each model call of the run (at most
	// MaxSteps entries).
	Usage []events.CallUsage `json:"usage,omitempty"`
	// Effects are the tool calls of the run that the tool-executor ran
	// (a result came back), in the order their results arrived, at most
	// events.MaxToolEffects; EffectsOmitted counts later ones. Every
	// outcome event carries them (with the calls still awaiting a result:
	// outcomeEffects), so the thread keeps them whatever becomes of the
	// turn.
	Effects        []events.ToolEffect `json:"effects,omitempty"`
	EffectsOmitted int                 `json:"effectsOmitted,omitempty"`
	// Checkpointed is set once the run has a record in parley_runs: a
	// snapshot without it (a run paused before any checkpoint) is resumed
	// without reading the record first.
	Checkpointed bool `json:"checkpointed,omitempty"`

	// modelAnnounced is set (never stored) when a tool call's "finished"
	// progress announced the model step that follows, so modelStep does
	// not publish its own "Thinking…".
	modelAnnounced bool
}

// CallState is one tool call of the current step.
type CallState struct {
	// Call is the tool call with parley's call ID (derived from the run,
	// step and index: see callID), which keys elicitations, events, results
	// and the ledger.
	Call schema.ToolCall `json:"call"`
	// ModelCallID is the ID the model gave the call, used only in messages
	// sent back to the model ("" in checkpoints written before it existed:
	// then Call.ID is the model's).
	ModelCallID string `json:"modelCallId,omitempty"`

	Status   string                 `json:"status"`
	Round    int                    `json:"round"`
	Decision *events.Decision       `json:"decision,omitempty"`
	Result   *schema.CallToolResult `json:"result,omitempty"`
	// Awaiting are the elicitations this call waits on, with the key each
	// answers (input-required results) or "" (confirmation).
	Awaiting     []events.PendingElicitation `json:"awaiting,omitempty"`
	InputKeys    map[string]string           `json:"inputKeys,omitempty"`
	RequestState string                      `json:"requestState,omitempty"`
	// InputResponses are the answers for the next round of an
	// input-required call.
	InputResponses map[string]schema.ElicitResult `json:"inputResponses,omitempty"`
	// Instructions the user gave when accepting a confirmation.
	Instructions string `json:"instructions,omitempty"`
	// Policy is the policy service's decision as it was given; Answer the
	// person's answer to a confirmation.
	Policy *events.Decision `json:"policy,omitempty"`
	Answer *events.Answer   `json:"answer,omitempty"`
	// Standing is the standing approval the call runs under, when a
	// policy asked to confirm it and a person had allowed the tool in the
	// thread (standing.go); Answer stays nil: nobody answered for it.
	Standing *events.StandingUse `json:"standing,omitempty"`
	// Edit is set once a person accepted the confirmation with changed
	// arguments (events.Answer.Arguments): Call.Arguments are theirs from
	// then on, and Edit keeps the model's.
	Edit *CallEdit `json:"edit,omitempty"`
}

// CallEdit records that a person changed a call's arguments when
// accepting its confirmation.
type CallEdit struct {
	// OriginalArguments are the model's arguments (the first ones, if the
	// person edited more than once).
	OriginalArguments json.RawMessage `json:"originalArguments"`
	// By is who accepted with the change, as authenticated.
	By events.Identity `json:"by,omitzero"`
}

// MaxEditNoteArgumentsBytes bounds each of the two argument objects the
// model reads in the note on an edited call (editNote); a longer one is
// cut, ending "…".
const MaxEditNoteArgumentsBytes = 2 << 10

// editNote tells the model that a person changed c's arguments, from what
// to what, so it does not report the call as the one it asked for; "" for
// a call not edited.
func (c *CallState) editNote() string {
	if c.Edit == nil {
		return ""
	}
	return fmt.Sprintf("The user changed the arguments of %s before confirming it, from %s to %s, so it ran with the user's arguments.",
		c.Call.Name, cutText(string(c.Edit.OriginalArguments), MaxEditNoteArgumentsBytes, ""),
		cutText(string(c.Call.Arguments), MaxEditNoteArgumentsBytes, ""))
}

// addEffect records that the tool-executor ran c and returned c.Result.
func (r *Run) addEffect(c *CallState) {
	if len(r.Effects) >= events.MaxToolEffects {
		r.EffectsOmitted++
		return
	}
	text := modelText(c.Result)
	if n := c.editNote(); n != "" {
		text += "\n" + n // after the result: its first line stays the summary
	}
	r.Effects = append(r.Effects, events.NewToolEffect(c.Call, c.Result, text))
}

// outcomeEffects is what an outcome event of r says ran: r.Effects, then
// each call sent to the tool-executor whose result has not come back
// (it may have run: OutcomeUnknown), and how many are not listed.
func (r *Run) outcomeEffects() ([]events.ToolEffect, int) {
	out, omitted := slices.Clone(r.Effects), r.EffectsOmitted
	for _, c := range r.Calls {
		if c.Status != callDispatched {
			continue
		}
		if len(out) >= events.MaxToolEffects {
			omitted++
			continue
		}
		out = append(out, events.NewToolEffect(c.Call, nil, ""))
	}
	return out, omitted
}

func (r *Run) call(id string) *CallState {
	for _, c := range r.Calls {
		if c.Call.ID == id {
			return c
		}
	}
	return nil
}

func (r *Run) count(status string) int {
	n := 0
	for _, c := range r.Calls {
		if c.Status == status {
			n++
		}
	}
	return n
}

func (r *Run) resumed(eventID string) bool {
	for _, id := range r.Resumes {
		if id == eventID {
			return true
		}
	}
	return false
}

// record returns how c was decided.
func (c *CallState) record() events.DecisionRecord {
	r := events.DecisionRecord{CallID: c.Call.ID, Tool: c.Call.Name}
	if d := c.Policy; d != nil {
		r.Decision, r.Policy, r.ConfigVersion, r.Reason, r.Policies = d.Decision, d.Policy, d.ConfigVersion, d.Reason, d.Policies
	}
	if a := c.Answer; a != nil {
		r.ElicitationID, r.Action, r.AnsweredBy, r.AnsweredAt = a.ElicitationID, a.Result.Action, a.AnsweredBy, a.AnsweredAt
	}
	if e := c.Edit; e != nil {
		r.Edited, r.OriginalArguments = true, e.OriginalArguments
		if len(r.OriginalArguments) > events.MaxEffectArgumentsBytes {
			r.OriginalArguments, _ = json.Marshal(map[string]string{"omitted": fmt.Sprintf("%d bytes of arguments", len(e.OriginalArguments))})
		}
	}
	r.StandingApproval = c.Standing
	return r
}

func decodeSnapshot(raw json.RawMessage) (*Run, error) {
	var r Run
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if r.Format != RunFormat && r.Format != previousRunFormat {
		return nil, fmt.Errorf("snapshot format %d, this agent reads %d and %d", r.Format, previousRunFormat, RunFormat)
	}
	return &r, nil
}

// fromChat converts thread history to model messages. An assistant
// message recording the tool calls an earlier turn executed
// (events.MetaToolEffects) becomes what the model would have seen had the
// turn gone on: an assistant message with those calls, each call's result
// as a tool message, then the message's own text (how the turn ended) as
// an assistant message. The calls' IDs are made from the message's
// position, so no two calls of the history share one.
func fromChat(msgs []schema.ChatMessage) []model.Message {
	out := make([]model.Message, 0, len(msgs))
	for i, m := range msgs {
		effects := events.ToolEffectsOf(m)
		if m.Role != schema.RoleAssistant || len(effects) == 0 {
			out = append(out, withReferences(m, model.Message{Role: string(m.Role), Text: m.Text, Content: m.Content}))
			continue
		}
		calls := make([]schema.ToolCall, len(effects))
		for j, e := range effects {
			args := e.Arguments
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			calls[j] = schema.ToolCall{ID: fmt.Sprintf("h%d_%d", i, j), Name: e.Tool, Arguments: args}
		}
		out = append(out, model.Message{Role: model.RoleAssistant, ToolCalls: calls})
		for j, e := range effects {
			out = append(out, model.Message{Role: model.RoleTool, ToolCallID: calls[j].ID, ToolName: e.Tool, Text: e.Text})
		}
		if m.Text != "" {
			out = append(out, model.Message{Role: model.RoleAssistant, Text: m.Text})
		}
	}
	return out
}
