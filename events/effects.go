package events

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/parley-dev/parley/schema"
)

// ToolRan names one tool call a turn executed, the arguments it ran with
// and in one line what it returned: turn.completed, turn.paused and
// turn.failed list them (ToolCalls), so whoever reads a thread's events
// (a UI, an audit) sees every call that ran, in the order it ran.
type ToolRan struct {
	// CallID is parley's ID of the call (call_<step>_<index>, see
	// docs/events.md "Call identity").
	CallID string `json:"callId"`
	// Tool is the tool's name.
	Tool string `json:"tool"`
	// Arguments are the arguments the call ran with (a JSON object), or,
	// over MaxEffectArgumentsBytes, {"omitted": "<n> bytes of
	// arguments"}; absent from events of producers that did not send them.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Summary is the first non-blank line of the result's text, at most
	// MaxToolSummaryBytes (cut with "…").
	Summary string `json:"summary"`
	// IsError is the result's isError: the tool reported a failure of its
	// own.
	IsError bool `json:"isError,omitempty"`
	// OutcomeUnknown says the call was sent to the tool-executor and no
	// result came back before the turn ended: it may have run.
	OutcomeUnknown bool `json:"outcomeUnknown,omitempty"`
}

// ToolEffect is one tool call a run executed, as the agent reports it in
// its outcome events (run.completed, run.failed, run.paused: Effects) and
// the processor keeps it in the thread's history, whatever becomes of the
// turn: the model of the thread's later turns reads the call (name and
// arguments) and its result, so an effect that happened never vanishes
// from the conversation. Arguments and Text are bounded
// (MaxEffectArgumentsBytes, MaxEffectTextBytes).
type ToolEffect struct {
	CallID string `json:"callId"`
	Tool   string `json:"tool"`
	// Arguments are the arguments the call ran with (a JSON object), or,
	// over MaxEffectArgumentsBytes, {"omitted": "<n> bytes of arguments"}.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Text is the result as the model read it, cut to MaxEffectTextBytes.
	Text           string `json:"text"`
	Summary        string `json:"summary"`
	IsError        bool   `json:"isError,omitempty"`
	OutcomeUnknown bool   `json:"outcomeUnknown,omitempty"`
}

// Bounds of ToolEffect and ToolRan.
const (
	// MaxToolEffects bounds the effects one run reports; later ones are
	// counted (EffectsOmitted), not listed.
	MaxToolEffects = 64
	// MaxEffectTextBytes bounds ToolEffect.Text.
	MaxEffectTextBytes = 512
	// MaxEffectArgumentsBytes bounds ToolEffect.Arguments.
	MaxEffectArgumentsBytes = 512
	// MaxToolSummaryBytes bounds ToolRan.Summary and ToolEffect.Summary.
	MaxToolSummaryBytes = 200
)

// UnknownOutcomeText is the Text of a ToolEffect whose call was sent and
// got no result before its run ended.
const UnknownOutcomeText = "No result was received before the turn ended: the call was sent to the tool and may have run."

// NewToolEffect is the effect of the call (parley's call ID, name and
// arguments) that returned r (nil: no result came back, OutcomeUnknown),
// whose text as the model read it is text, bounded.
func NewToolEffect(call schema.ToolCall, r *schema.CallToolResult, text string) ToolEffect {
	e := ToolEffect{CallID: call.ID, Tool: call.Name, Arguments: call.Arguments}
	if len(e.Arguments) > MaxEffectArgumentsBytes {
		e.Arguments, _ = json.Marshal(map[string]string{"omitted": strconv.Itoa(len(call.Arguments)) + " bytes of arguments"})
	}
	if r == nil {
		e.OutcomeUnknown, text = true, UnknownOutcomeText
	} else {
		e.IsError = r.IsError
	}
	e.Text = cutUTF8(text, MaxEffectTextBytes, "…[cut]")
	e.Summary = Summarize(text)
	return e
}

// Ran is what turn.failed says of e.
func (e ToolEffect) Ran() ToolRan {
	return ToolRan{CallID: e.CallID, Tool: e.Tool, Arguments: e.Arguments, Summary: e.Summary, IsError: e.IsError, OutcomeUnknown: e.OutcomeUnknown}
}

// RanOf lists what turn.completed, turn.paused and turn.failed say of
// effects.
func RanOf(effects []ToolEffect) []ToolRan {
	if len(effects) == 0 {
		return nil
	}
	out := make([]ToolRan, len(effects))
	for i, e := range effects {
		out[i] = e.Ran()
	}
	return out
}

// Summarize is the one-line summary of a result's text: its first
// non-blank line, at most MaxToolSummaryBytes (cut with "…"), or "(no
// text)".
func Summarize(text string) string {
	for line := range strings.SplitSeq(text, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return cutUTF8(line, MaxToolSummaryBytes, "…")
		}
	}
	return "(no text)"
}

// cutUTF8 returns s when it fits max bytes, else its longest prefix (at a
// character boundary) that fits with tail appended.
func cutUTF8(s string, max int, tail string) string {
	if len(s) <= max {
		return s
	}
	cut := max - len(tail)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + tail
}

// MetaToolEffects is the _meta key of an assistant message in a thread's
// history (run.requested messages) that records the tool calls a turn
// executed: a []ToolEffect. The agent gives them to the model as the
// assistant's tool calls, each followed by its result, then the message's
// own text, if any.
const MetaToolEffects = "dev.parley/tool_effects"

// ToolEffectsOf returns the effects m records (MetaToolEffects), or nil.
func ToolEffectsOf(m schema.ChatMessage) []ToolEffect {
	raw, ok := m.Meta[MetaToolEffects]
	if !ok {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var out []ToolEffect
	if json.Unmarshal(b, &out) != nil {
		return nil
	}
	return out
}
