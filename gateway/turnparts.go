package gateway

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// A turn's events, read as protocol-neutral parts: what a UI protocol
// (the AI SDK's UI message stream, aisdk.go) shows of one part of a turn —
// from its message (or from the answers that resume it) to its end or
// its next pause. turnReader knows the event types of PARLEY_CHAT and
// nothing of any UI protocol; a protocol maps each TurnPart to its own
// chunks.

// TurnPartKind says what a TurnPart is.
type TurnPartKind int

// The kinds of TurnPart.
const (
	// PartTextDelta is streamed assistant text (message.delta): Text is
	// the new text, Stream the (step, generation, attempt) it belongs to
	// (text of an older generation or attempt of the same step is void),
	// Step the model call.
	PartTextDelta TurnPartKind = iota + 1
	// PartText is the turn's final answer text (turn.completed's message),
	// authoritative over the deltas.
	PartText
	// PartToolRan is a tool call the turn ran (Tool), with its outcome.
	PartToolRan
	// PartToolDenied is a call a person declined or cancelled (Decision).
	PartToolDenied
	// PartToolVetoed is a call a policy kept from running (Decision:
	// veto or policy_unavailable).
	PartToolVetoed
	// PartConfirmation is a question confirming a tool call (Question,
	// QuestionID; the call in Question's _meta["drupal.org/ai.tool_call"]).
	PartConfirmation
	// PartForm is any other question: a form (requestedSchema) or a URL
	// (Question, QuestionID).
	PartForm
	// PartProgress is the turn's progress (Progress).
	PartProgress
	// PartSources are the answer's sources (Sources): its citations and
	// its resource_link blocks with an http(s) URI.
	PartSources
	// PartSuggestions are the answer's suggested replies (Suggestions).
	PartSuggestions
	// PartEnd ends the part: End says how.
	PartEnd
)

// TurnPart is one piece of a turn (see TurnPartKind for which fields each
// kind sets).
type TurnPart struct {
	Kind   TurnPartKind
	Text   string
	Stream string
	Step   int
	// Tool is the call that ran (PartToolRan).
	Tool events.ToolRan
	// Decision is the policy's or person's decision (PartToolDenied,
	// PartToolVetoed).
	Decision events.DecisionRecord
	// InputShown: the client was already shown this call's input (a
	// confirmation of the part before): only its outcome is new.
	InputShown bool
	// Question and QuestionID are the question (PartConfirmation,
	// PartForm).
	Question   schema.ElicitRequestParams
	QuestionID string
	Progress   schema.Progress
	Sources    []TurnSource
	// Suggestions are at most schema's bound of reply strings.
	Suggestions []string
	End         TurnEnd
}

// TurnSource is one source of an answer (PartSources): an http(s) URL
// and its title.
type TurnSource struct {
	URL, Title string
	// Server is the MCP server whose tool result the link came from (the
	// block's _meta["dev.parley/mcp_server"]); nil for the answer's own
	// citations. A client labels such a source as the server's: its
	// title is the server's words, not parley's.
	Server *schema.MCPServerMeta
}

// TurnEnd says how a part of a turn ended.
type TurnEnd struct {
	// How is one of EndCompleted, EndPaused, EndFailed, EndWithdrawn,
	// EndExpired, EndRejected.
	How string
	// Reason and Detail: turn.failed's, turn.rejected's or
	// elicitation.rejected's reason and detail; elicitation.cancelled's
	// reason.
	Reason, Detail string
}

// How a part of a turn ends (TurnEnd.How).
const (
	EndCompleted = "completed" // turn.completed
	EndPaused    = "paused"    // turn.paused, every question of the pause read
	EndFailed    = "failed"    // turn.failed
	EndWithdrawn = "withdrawn" // elicitation.cancelled ending the turn
	EndExpired   = "expired"   // elicitation.expired
	EndRejected  = "rejected"  // the message (turn.rejected) or an answer (elicitation.rejected) was refused
)

// turnReader reads the thread's events of one part of one turn, in
// stream order, into TurnParts. Events of other turns are skipped.
type turnReader struct {
	// principal is the gateway's NATS principal (its refusals carry it).
	principal string
	turnID    string
	// requestID is the message's event ID (a part that starts the turn):
	// its turn.rejected ends the part.
	requestID string
	// answerIDs are the event IDs of the answers that resume the turn:
	// an elicitation.rejected of one ends the part.
	answerIDs []string
	// shown are the calls the client was shown in full (the calls of the
	// pause before); inputShown those whose input it was shown (the
	// confirmations of that pause).
	shown, inputShown map[string]bool
	// questions read so far, by elicitation ID, in order.
	questions []TurnPart
	pause     *events.TurnPaused
}

// newTurnReader returns a reader of the part of turnID that starts with
// the message requestID ("" for a part that resumes the turn after
// answers answerIDs, given the pause before it).
func newTurnReader(principal, turnID, requestID string, answerIDs []string, before *events.TurnPaused, confirmations []schema.ElicitRequestParams) *turnReader {
	r := &turnReader{principal: principal, turnID: turnID, requestID: requestID, answerIDs: answerIDs,
		shown: map[string]bool{}, inputShown: map[string]bool{}}
	if before != nil {
		for _, c := range before.ToolCalls {
			r.shown[c.CallID] = true
		}
	}
	for _, q := range confirmations {
		if tc, ok := toolCallOf(q); ok {
			r.inputShown[tc.ToolID] = true
		}
	}
	return r
}

// toolCallOf returns the call a confirmation question is about
// (_meta["drupal.org/ai.tool_call"] readable and naming its call ID).
func toolCallOf(q schema.ElicitRequestParams) (schema.ToolCallMeta, bool) {
	tc, err := q.Meta.ToolCall()
	if err != nil || tc == nil || tc.ToolID == "" {
		return schema.ToolCallMeta{}, false
	}
	return *tc, true
}

// questionID is a question's elicitation ID.
func questionID(q schema.ElicitRequestParams) string {
	id, _ := q.Meta.ElicitationID()
	return id
}

// read returns the parts ev adds; done is true once the part ended (the
// last part returned is PartEnd).
func (r *turnReader) read(ev *event.Event) (parts []TurnPart, done bool) {
	if ev == nil {
		return nil, false
	}
	switch events.TypeOf(ev) {
	case events.TypeTurnRejected:
		d, err := events.Data[events.TurnRejected](ev)
		if err == nil && r.requestID != "" && d.RequestEventID == r.requestID && r.ownRefusal(ev) {
			return []TurnPart{{Kind: PartEnd, End: TurnEnd{How: EndRejected, Reason: d.Reason,
				Detail: "the message was refused: " + d.Reason}}}, true
		}
	case events.TypeElicitationRejected:
		d, err := events.Data[events.ElicitationRejected](ev)
		if err == nil && slices.Contains(r.answerIDs, d.RespondedEventID) && r.ownRefusal(ev) {
			return []TurnPart{{Kind: PartEnd, End: TurnEnd{How: EndRejected, Reason: d.Reason, Detail: d.Detail}}}, true
		}
	case events.TypeMessageDelta:
		d, err := events.Data[events.MessageDelta](ev)
		if err == nil && d.TurnID == r.turnID && d.Chunk.Text != "" {
			return []TurnPart{{Kind: PartTextDelta, Text: d.Chunk.Text, Step: d.Step,
				Stream: fmt.Sprintf("%d/%s/%d", d.Step, d.Generation, d.Attempt)}}, false
		}
	case events.TypeProgress:
		p, err := events.Data[schema.Progress](ev)
		if err == nil && (p.ProgressToken.String() == r.turnID || turnOf(ev) == r.turnID) {
			return []TurnPart{{Kind: PartProgress, Progress: p}}, false
		}
	case events.TypeElicitationRequested:
		q, err := events.Data[schema.ElicitRequestParams](ev)
		id := questionID(q)
		if err != nil || turnOf(ev) != r.turnID || id == "" || r.hasQuestion(id) {
			return nil, false
		}
		kind := PartForm
		if _, ok := toolCallOf(q); ok {
			kind = PartConfirmation
		}
		r.questions = append(r.questions, TurnPart{Kind: kind, Question: q, QuestionID: id})
		if r.pause != nil {
			return r.paused()
		}
	case events.TypeTurnPaused:
		d, err := events.Data[events.TurnPaused](ev)
		if err == nil && d.TurnID == r.turnID {
			r.pause = &d
			return r.paused()
		}
	case events.TypeTurnCompleted:
		d, err := events.Data[events.TurnCompleted](ev)
		if err == nil && d.TurnID == r.turnID {
			return r.completed(d), true
		}
	case events.TypeTurnFailed:
		d, err := events.Data[events.TurnFailed](ev)
		if err == nil && d.TurnID == r.turnID {
			parts := r.ran(d.ToolCalls)
			return append(parts, TurnPart{Kind: PartEnd, End: TurnEnd{How: EndFailed, Reason: d.Reason, Detail: d.Detail}}), true
		}
	case events.TypeElicitationCancelled:
		d, err := events.Data[events.ElicitationCancelled](ev)
		// A cancel of one of several parallel questions withdraws the
		// others but the run goes on: only a pending pause's withdrawal
		// of the turn's questions while no answer of this part is in
		// flight ends the turn (docs/events.md "How a turn ends").
		if err == nil && d.TurnID == r.turnID && len(r.answerIDs) == 0 {
			return []TurnPart{{Kind: PartEnd, End: TurnEnd{How: EndWithdrawn, Reason: d.Reason}}}, true
		}
	case events.TypeElicitationExpired:
		d, err := events.Data[events.ElicitationExpired](ev)
		if err == nil && d.TurnID == r.turnID {
			return []TurnPart{{Kind: PartEnd, End: TurnEnd{How: EndExpired}}}, true
		}
	}
	return nil, false
}

// ownRefusal reports whether a refusal is of the gateway's input (its
// principal is the gateway's, or absent: a processor before principals);
// another principal may choose the same event ID.
func (r *turnReader) ownRefusal(ev *event.Event) bool {
	p := events.EchoIdentity(ev).Principal
	return p == "" || p == r.principal
}

func turnOf(ev *event.Event) string {
	s, _ := ev.Extensions()[events.ExtTurnID].(string)
	return s
}

func (r *turnReader) hasQuestion(id string) bool {
	return slices.ContainsFunc(r.questions, func(p TurnPart) bool { return p.QuestionID == id })
}

// paused returns the pause's parts once turn.paused and every question it
// names were read: the calls that ran before it, then its questions.
func (r *turnReader) paused() ([]TurnPart, bool) {
	for _, id := range r.pause.ElicitationIDs {
		if !r.hasQuestion(id) {
			return nil, false // its question is still to come
		}
	}
	parts := r.ran(r.pause.ToolCalls)
	for _, q := range r.questions {
		if slices.Contains(r.pause.ElicitationIDs, q.QuestionID) {
			parts = append(parts, q)
		}
	}
	return append(parts, TurnPart{Kind: PartEnd, End: TurnEnd{How: EndPaused}}), true
}

// ran returns a PartToolRan for each call the client was not shown.
func (r *turnReader) ran(calls []events.ToolRan) []TurnPart {
	var parts []TurnPart
	for _, c := range calls {
		if r.shown[c.CallID] {
			continue
		}
		r.shown[c.CallID] = true
		parts = append(parts, TurnPart{Kind: PartToolRan, Tool: c, InputShown: r.inputShown[c.CallID]})
	}
	return parts
}

// completed returns turn.completed's parts: the answer's text, the calls
// declined, vetoed and run that the client was not shown, the sources,
// the suggestions, the end.
func (r *turnReader) completed(d events.TurnCompleted) []TurnPart {
	parts := []TurnPart{{Kind: PartText, Text: d.Message.Text}}
	for _, dr := range d.Decisions {
		if r.shown[dr.CallID] {
			continue
		}
		switch {
		case dr.Decision == events.DecisionVeto || dr.Decision == events.DecisionUnavailable:
			r.shown[dr.CallID] = true
			parts = append(parts, TurnPart{Kind: PartToolVetoed, Decision: dr})
		case dr.Action == schema.ActionDecline || dr.Action == schema.ActionCancel:
			r.shown[dr.CallID] = true
			parts = append(parts, TurnPart{Kind: PartToolDenied, Decision: dr, InputShown: r.inputShown[dr.CallID]})
		}
	}
	parts = append(parts, r.ran(d.ToolCalls)...)
	if src := sourcesOf(d.Message); len(src) > 0 {
		parts = append(parts, TurnPart{Kind: PartSources, Sources: src})
	}
	if s := suggestionsOf(d.Message); len(s) > 0 {
		parts = append(parts, TurnPart{Kind: PartSuggestions, Suggestions: s})
	}
	return append(parts, TurnPart{Kind: PartEnd, End: TurnEnd{How: EndCompleted}})
}

// sourcesOf returns a message's sources: its citations, then its
// resource_link blocks whose URI is http or https (with the MCP server a
// block came from), each URL once.
func sourcesOf(m schema.ChatMessage) []TurnSource {
	var out []TurnSource
	seen := map[string]bool{}
	add := func(c TurnSource) {
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || seen[c.URL] {
			return
		}
		seen[c.URL] = true
		out = append(out, c)
	}
	if v, ok := m.Meta[schema.MetaCitations]; ok {
		var cs []schema.Citation
		if b, err := json.Marshal(v); err == nil && json.Unmarshal(b, &cs) == nil {
			for _, c := range cs {
				add(TurnSource{URL: c.URL, Title: c.Title})
			}
		}
	}
	for _, c := range m.Content {
		if rl, ok := c.(*schema.ResourceLink); ok {
			title := rl.Title
			if title == "" {
				title = rl.Name
			}
			src := TurnSource{URL: rl.URI, Title: title}
			if sv, err := rl.Meta.MCPServer(); err == nil && sv != nil {
				src.Server = sv
			} else if _, marked := rl.Meta[schema.MetaMCPServer]; marked {
				// A marking parley cannot read is still a server's.
				src.Server = &schema.MCPServerMeta{}
			}
			add(src)
		}
	}
	return out
}

// suggestionsOf returns a message's suggested replies.
func suggestionsOf(m schema.ChatMessage) []string {
	v, ok := m.Meta[schema.MetaSuggestedReplies]
	if !ok {
		return nil
	}
	var s []string
	if b, err := json.Marshal(v); err != nil || json.Unmarshal(b, &s) != nil {
		return nil
	}
	return s
}

// toolResultContent is the content of the TOOL_CALL_RESULT of a call of
// tool that ran: its summary (the first line of the tool's result, the
// tool's words, an MCP server's too), labelled "<tool> returned: " when
// it reads as parley's own note ("[parley: not run: declined by …]"):
// once look-alike letters are folded (schema.FoldLookAlikes) and leading
// marks dropped, it starts with "parley" in any case. So a result worded
// as parley's never tells the person a call that ran did not.
func toolResultContent(tool, summary string) string {
	f := strings.ToLower(schema.FoldLookAlikes(summary))
	f = strings.TrimLeftFunc(f, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if strings.HasPrefix(f, "parley") {
		return tool + " returned: " + summary
	}
	return summary
}

// blockedNote is parley's note on a call a policy kept from running
// (decision d a veto, or no policy service answering): "[parley: not
// run: blocked by policy <p>: <reason>]" (policies joined by ", ", "no
// reason given" without one) or "[parley: not run: <reason>]"; ok false
// for any other decision.
func blockedNote(d events.DecisionRecord) (note string, ok bool) {
	switch d.Decision {
	case events.DecisionVeto:
		who := "policy " + d.Policy
		switch {
		case d.Policy == "":
			who = "policy"
		case strings.Contains(d.Policy, ","):
			who = "policies " + strings.ReplaceAll(d.Policy, ",", ", ")
		}
		reason := d.Reason
		if reason == "" {
			reason = "no reason given"
		}
		return "[parley: not run: blocked by " + who + ": " + reason + "]", true
	case events.DecisionUnavailable:
		return "[parley: not run: " + d.Reason + "]", true
	}
	return "", false
}
