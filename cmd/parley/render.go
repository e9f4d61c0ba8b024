package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// renderMode is the density of the one event renderer.
type renderMode int

const (
	// renderLog is `parley events` and send/answer's verdicts: one
	// "[thread] type" head per event, then everything it carries.
	renderLog renderMode = iota
	// renderChat is `parley chat`: conversation lines; questions are
	// asked by the chat's prompts, and settlements are said by the chat
	// (chatSession.settled), so their events render as "".
	renderChat
)

// render renders one folded event of a thread (the one switch over event
// payloads of the CLI; threadstate decoded them). mine says the event is
// the reader's own or the outcome of one (client.SessionItem.Mine). The
// text may hold control characters: it is printed through a terminal-safe
// writer (env.withSafeOutput). "" means nothing to show in mode.
func render(ch threadstate.Change, mode renderMode, mine bool) string {
	ev := ch.Event
	head := ""
	if mode == renderLog {
		head = fmt.Sprintf("[%s] %-22s ", ev.Subject(), strings.TrimPrefix(ev.Type(), "dev.parley."))
	}
	// body returns the head and text in log mode, the chat text in chat
	// mode.
	body := func(log, chat string) string {
		if mode == renderLog {
			return trimLines(head + log)
		}
		return chat
	}
	if ch.DataErr != nil {
		return body(string(ev.Data()), fmt.Sprintf("! %s event with unreadable data: %v", ev.Type(), ch.DataErr))
	}
	switch d := ch.Data.(type) {
	case events.TurnRequested:
		who := "someone"
		if id := events.EchoIdentity(ev).String(); id != "" {
			who = id
		}
		if mine {
			return body("user: "+indent(d.Message.Text)+blocks(d.Message.Content), "")
		}
		return body("user: "+indent(d.Message.Text)+blocks(d.Message.Content), who+": "+indentRest(d.Message.Text))
	case events.TurnCompleted:
		return body(renderMessage(d.Message, mode, ev.Subject())+decisions(d.Decisions), blocked(d.Decisions)+renderMessage(d.Message, mode, ev.Subject()))
	case events.TurnPaused:
		// The prose restates questions asked as elicitations; the chat
		// shows it only when one did not arrive as an elicitation.
		chat := ""
		if len(d.ElicitationIDs) == 0 || len(ch.Unasked) > 0 {
			chat = renderMessage(d.Message, mode, ev.Subject())
		}
		return body(renderMessage(d.Message, mode, ev.Subject()), chat)
	case events.TurnFailed:
		ran := toolsRan(d)
		return body(d.Reason+detailAndErrors(d.Detail, nil)+ran, fmt.Sprintf("! the turn failed (%s): %s", d.Reason, d.Detail)+ran)
	case events.TurnRejected:
		return body(fmt.Sprintf("message %s refused: %s%s", d.RequestEventID, d.Reason, detailAndErrors("", d.Errors)),
			fmt.Sprintf("! message rejected (%s)%s", d.Reason, violationList(d.Errors)))
	case schema.ElicitRequestParams:
		id := threadstate.ElicitationID(d)
		chat := ""
		if id == "" {
			chat = fmt.Sprintf("! a question without an elicitation ID (it cannot be answered): %s", d.Message)
		}
		kind := "form"
		if d.IsToolConfirmation() {
			kind = "confirmation"
		}
		if notice := askedBy(&d); len(notice) > 0 {
			// A server's question is never parley's confirmation (schema
			// refuses one marked as both; the tool-executor strips the marker).
			kind = "form " + strings.Join(notice, "; ")
		}
		return body(fmt.Sprintf("%s %s %q%s", kind, id, d.Message, fields(&d.RequestedSchema)), chat)
	case events.ElicitationResponded:
		content := ""
		if len(d.Content) > 0 {
			b, _ := json.Marshal(d.Content)
			content = " " + string(b)
		}
		if raw, ok := events.EditedArguments(ev.Data()); ok {
			content += " with changed arguments " + compactJSON(raw)
		}
		by := ""
		if who := events.EchoIdentity(ev); !who.IsZero() {
			by = " by " + who.String()
		}
		return body(fmt.Sprintf("%s %s%s%s", d.ElicitationID, d.Action, content, by), "")
	case events.ElicitationRejected:
		whose := "your answer"
		if !mine {
			whose = "an answer from elsewhere"
		}
		detail := ""
		if d.Detail != "" {
			detail = ": " + d.Detail
		}
		return body(fmt.Sprintf("%s %s%s", d.ElicitationID, d.Reason, detailAndErrors(d.Detail, d.Errors)),
			fmt.Sprintf("! %s was rejected (%s)%s%s", whose, d.Reason, detail, violationList(d.Errors)))
	case events.ElicitationExpired:
		return body(fmt.Sprintf("%s unanswered; turn %s ended, the thread is idle", strings.Join(d.ElicitationIDs, ", "), d.TurnID), "")
	case events.ElicitationCancelled:
		reason := ""
		if d.Reason != "" {
			reason = ": " + d.Reason
		}
		return body(fmt.Sprintf("%s withdrawn (turn %s)%s", strings.Join(d.ElicitationIDs, ", "), d.TurnID, reason), "")
	case schema.Progress:
		return body(progressLine(d), "  … "+statusOf(d))
	}
	return body(string(ev.Data()), "")
}

// askedBy says who asked a question that an MCP server asked
// (_meta["dev.parley/mcp_server"], set by parley's tool-executor): "asked
// by MCP server <name>", then a warning when the server is not trusted
// and one naming the fields that look like they ask for a secret
// (schema.SecretFields); nil for a question parley itself asked.
func askedBy(req *schema.ElicitRequestParams) []string {
	ms, err := req.Meta.MCPServer()
	if err != nil {
		return []string{"asked by an MCP server whose name is unreadable (" + err.Error() + ")",
			"! parley cannot vouch for it: do not give it passwords, keys or other secrets"}
	}
	if ms == nil {
		return nil
	}
	out := []string{"asked by MCP server " + ms.Name}
	if !ms.Trusted {
		out = append(out, fmt.Sprintf("! server %s is not trusted: parley cannot vouch for this question or what the server does with the answer", ms.Name))
	}
	if len(ms.SecretFields) > 0 {
		out = append(out, fmt.Sprintf("! it asks for what looks like a secret (%s): MCP forbids asking for passwords, keys, tokens or payment details in a form; do not enter them here",
			strings.Join(ms.SecretFields, ", ")))
	}
	return out
}

// blocked renders, one notice line each, the calls of ds that policy kept
// from running: "! Blocked by policy gate: <reason> (tool not run)" for a
// veto, "! tool not run: <reason>" when no policy service answered. The
// chat shows them before the assistant's message, so a veto reads as the
// policy's, not as the model's words.
func blocked(ds []events.DecisionRecord) string {
	var b strings.Builder
	for _, d := range ds {
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
			fmt.Fprintf(&b, "! Blocked by %s: %s (%s not run)\n", who, reason, d.Tool)
		case events.DecisionUnavailable:
			fmt.Fprintf(&b, "! %s not run: %s\n", d.Tool, d.Reason)
		}
	}
	return b.String()
}

// statusOf is what a progress notification says: its status item
// (_meta["drupal.org/ai.status_item"]), else its message.
func statusOf(p schema.Progress) string {
	if st, _ := p.Meta.StatusItem(); st != "" {
		return st
	}
	return p.Message
}

// progressLine renders a progress notification: "n/total status" when
// it has a total; else its status alone, since progress without a total
// is only an ordinal (MCP: it increases, nothing more; parley's agent
// counts steps and phases in it) and means nothing to a person. With
// neither a total nor a status, the number is all there is.
func progressLine(p schema.Progress) string {
	st := statusOf(p)
	switch {
	case p.Total != nil && st != "":
		return fmtNum(p.Progress) + "/" + fmtNum(*p.Total) + " " + st
	case p.Total != nil:
		return fmtNum(p.Progress) + "/" + fmtNum(*p.Total)
	case st != "":
		return st
	}
	return fmtNum(p.Progress)
}

// maxBlocks is how many content blocks of a message the chat shows.
const maxBlocks = 8

// renderMessage renders an assistant message of thread: its text
// (citations marked [n]), then its blocks, citations and suggested
// replies, one per line. Continuation lines are indented 4 spaces in log
// mode, 2 in the chat, which shows at most maxBlocks blocks and names the
// `parley events --thread <thread>` command that shows the rest.
func renderMessage(m schema.ChatMessage, mode renderMode, thread string) string {
	var b strings.Builder
	ind, more := "\n  ", len(m.Content)
	if mode == renderLog {
		ind = "\n    "
	} else if len(m.Content) > maxBlocks+1 {
		more = maxBlocks
	}
	b.WriteString("assistant: ")
	cs, _ := m.Meta.Citations()
	text := markCitations(m.Text, cs)
	if mode == renderLog {
		b.WriteString(indent(text))
	} else {
		b.WriteString(indentRest(text))
	}
	for _, c := range m.Content[:more] {
		b.WriteString(ind)
		b.WriteString(renderBlock(c))
	}
	if more < len(m.Content) {
		fmt.Fprintf(&b, "%s(%d more content blocks; `parley events --thread %s` shows them all)", ind, len(m.Content)-more, thread)
	}
	for i, c := range cs {
		title := c.Title
		if title == "" {
			title = "source"
		}
		fmt.Fprintf(&b, "%s[%d] %s <%s>", ind, i+1, title, c.URL)
	}
	if rs, err := m.Meta.SuggestedReplies(); err == nil && len(rs) > 0 {
		fmt.Fprintf(&b, "%ssuggestions: %s", ind, strings.Join(rs, " | "))
	}
	return b.String()
}

// markCitations puts "[n]" after each span of text that citation n (from
// 1) anchors (offsets in code points; anchors outside the text are
// ignored).
func markCitations(text string, cs []schema.Citation) string {
	at := map[int][]int{}
	runes := []rune(text)
	for i, c := range cs {
		for _, a := range c.Anchors {
			if a.Start >= 0 && a.End > a.Start && a.End <= len(runes) && !slices.Contains(at[a.End], i+1) {
				at[a.End] = append(at[a.End], i+1)
			}
		}
	}
	if len(at) == 0 {
		return text
	}
	var b strings.Builder
	for k := 0; k <= len(runes); k++ {
		for _, n := range at[k] {
			fmt.Fprintf(&b, "[%d]", n)
		}
		if k < len(runes) {
			b.WriteRune(runes[k])
		}
	}
	return b.String()
}

// toolsRan says which tool calls a failed turn executed (turn.failed
// toolCalls), "" when none: "; tools that ran: name (summary), …".
func toolsRan(d events.TurnFailed) string {
	if len(d.ToolCalls) == 0 {
		return ""
	}
	parts := make([]string, 0, len(d.ToolCalls)+1)
	for _, c := range d.ToolCalls {
		switch {
		case c.OutcomeUnknown:
			parts = append(parts, c.Tool+" (sent; its outcome is unknown)")
		case c.IsError:
			parts = append(parts, c.Tool+" (failed: "+c.Summary+")")
		default:
			parts = append(parts, c.Tool+" ("+c.Summary+")")
		}
	}
	if d.ToolCallsOmitted > 0 {
		parts = append(parts, fmt.Sprintf("%d more", d.ToolCallsOmitted))
	}
	return "; tools that ran: " + strings.Join(parts, ", ")
}
