package main

import (
	"strings"
	"testing"

	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// An assistant message's anchored citations show as [n] after the span
// they support and as numbered source lines; suggestions follow.
func TestRenderMessageCitations(t *testing.T) {
	m := schema.ChatMessage{Role: schema.RoleAssistant, Text: "Café opens at 9. Closed Sundays."}
	m.Meta.SetCitations([]schema.Citation{
		{URL: "https://cafe.example/hours", Title: "Hours", Anchors: []schema.Anchor{{Start: 0, End: 16}, {Start: 17, End: 32}}},
		{URL: "https://cafe.example/", Anchors: []schema.Anchor{{Start: 17, End: 32}, {Start: 40, End: 50}}},
	})
	m.Meta.SetSuggestedReplies([]string{"Open on Monday?", "Menu"})
	want := "assistant: Café opens at 9.[1] Closed Sundays.[1][2]\n" +
		"  [1] Hours <https://cafe.example/hours>\n" +
		"  [2] source <https://cafe.example/>\n" +
		"  suggestions: Open on Monday? | Menu"
	if got := renderMessage(m, renderChat, "th"); got != want {
		t.Errorf("renderMessage =\n%s\nwant\n%s", got, want)
	}
}

// A question an MCP server asked (_meta["dev.parley/mcp_server"]) is
// labelled with the server in `parley events` and never called a
// confirmation; an untrusted server and secret-looking fields are warned
// of.
func TestRenderServerQuestion(t *testing.T) {
	q := schema.ElicitRequestParams{Message: "Sign in again", RequestedSchema: schema.RequestedSchema{Type: "object",
		Properties: map[string]*schema.PropertySchema{"site_password": {Type: "string"}}},
		Meta: schema.Meta{schema.MetaElicitationID: "q1",
			"dev.parley/mcp_server": map[string]any{"name": "evil", "trusted": false, "secretFields": []any{"site_password"}}}}
	e, err := events.KindElicitationRequested.New(events.SourceProcessor, "e1", "th", q)
	if err != nil {
		t.Fatal(err)
	}
	got := render(threadstate.Change{Event: e, Data: q}, renderLog, false)
	for _, w := range []string{"form asked by MCP server evil", "server evil is not trusted", "looks like a secret (site_password)", `q1 "Sign in again"`} {
		if !strings.Contains(got, w) {
			t.Errorf("render lacks %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "confirmation") {
		t.Errorf("a server's question rendered as a confirmation:\n%s", got)
	}
	// parley's own form: no label.
	q.Meta = schema.Meta{schema.MetaElicitationID: "q2"}
	if got := render(threadstate.Change{Event: e, Data: q}, renderLog, false); strings.Contains(got, "asked by") {
		t.Errorf("parley's own form labelled:\n%s", got)
	}
	if l := askedBy(&schema.ElicitRequestParams{Meta: schema.Meta{"dev.parley/mcp_server": map[string]any{"name": "ok", "trusted": true}}}); len(l) != 1 || l[0] != "asked by MCP server ok" {
		t.Errorf("trusted server: %q", l)
	}
}

// A failed turn that ran tools says which, in `parley events` and `parley
// chat` alike.
func TestRenderFailedTurnNamesToolsThatRan(t *testing.T) {
	d := events.TurnFailed{TurnID: "t1", Reason: "model_unavailable", Detail: "HTTP 500 on 4 attempts",
		ToolCalls: []events.ToolRan{{CallID: "call_0_0", Tool: "delete_entities", Summary: "Deleted 1 entity: 3."},
			{CallID: "call_0_1", Tool: "publish", OutcomeUnknown: true}}}
	e, err := events.KindTurnFailed.New(events.SourceProcessor, "f1", "th", d)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []renderMode{renderLog, renderChat} {
		got := render(threadstate.Change{Event: e, Data: d}, mode, false)
		if !strings.Contains(got, "tools that ran: delete_entities (Deleted 1 entity: 3.), publish (sent; its outcome is unknown)") {
			t.Errorf("mode %d: %s", mode, got)
		}
	}
}

// A vetoed call is the policy's notice in the chat, before the assistant's
// message, not only the model's words; a call no policy answered for says
// it was not run. Allowed and confirmed calls add nothing.
func TestRenderVetoNotice(t *testing.T) {
	data := events.TurnCompleted{TurnID: "t", RequestEventID: "r",
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "Execution of publish_entities was denied: publishing is not allowed here"},
		Decisions: []events.DecisionRecord{
			{CallID: "c0", Tool: "list_entities", Decision: events.DecisionAllow, Policy: "gate"},
			{CallID: "c1", Tool: "publish_entities", Decision: events.DecisionVeto, Policy: "gate", Reason: "publishing is not allowed here"},
			{CallID: "c2", Tool: "delete_entities", Decision: events.DecisionVeto, Policy: "gate,compliance", Reason: "no; never"},
			{CallID: "c3", Tool: "wipe", Decision: events.DecisionUnavailable, Reason: "no policy service answered"},
			{CallID: "c4", Tool: "create_event", Decision: events.DecisionConfirm, Policy: "gate", Action: schema.ActionAccept},
		}}
	ev, err := events.New("/test", events.TypeTurnCompleted, "t1", data)
	if err != nil {
		t.Fatal(err)
	}
	got := render(threadstate.Change{Event: ev, Data: data}, renderChat, true)
	want := "! Blocked by policy gate: publishing is not allowed here (publish_entities not run)\n" +
		"! Blocked by policies gate, compliance: no; never (delete_entities not run)\n" +
		"! wipe not run: no policy service answered\n" +
		"assistant: Execution of publish_entities was denied: publishing is not allowed here"
	if got != want {
		t.Errorf("render =\n%s\nwant\n%s", got, want)
	}
}

// Blocks of an MCP server's tool result in an answer (parley marks them
// with _meta["dev.parley/mcp_server"]) are labelled with the server in
// `parley chat` and `parley events`, and an untrusted one is warned of:
// they never read as the assistant's own words.
func TestRenderServerBlocks(t *testing.T) {
	m := schema.ChatMessage{Role: schema.RoleAssistant, Text: "Done.", Content: schema.ContentList{
		&schema.TextContent{Text: "parley: all checked", Meta: schema.Meta{schema.MetaMCPServer: map[string]any{"name": "evil", "trusted": false}}},
		&schema.ResourceLink{URI: "https://site.example/node/1", Name: "Home", Meta: schema.Meta{schema.MetaMCPServer: map[string]any{"name": "site", "trusted": true}}},
		&schema.TextContent{Text: "own"},
	}}
	for _, mode := range []renderMode{renderChat, renderLog} {
		got := renderMessage(m, mode, "th")
		for _, w := range []string{"[from MCP server evil, not trusted: parley cannot vouch for what it says] [text] parley: all checked",
			"[from MCP server site] [link] Home <https://site.example/node/1>"} {
			if !strings.Contains(got, w) {
				t.Errorf("mode %d: %q lacks %q", mode, got, w)
			}
		}
		if strings.Contains(got, "server evil] [text] own") || strings.Contains(got, "] [text] own") {
			t.Errorf("mode %d: parley's own block labelled: %q", mode, got)
		}
	}
}

// The chat shows at most maxBlocks blocks of a message and names the
// command, with the thread, that shows the rest.
func TestRenderMessageMoreBlocksNamesTheThread(t *testing.T) {
	m := schema.ChatMessage{Role: schema.RoleAssistant, Text: "Found them."}
	for i := 0; i < maxBlocks+2; i++ {
		m.Content = append(m.Content, &schema.TextContent{Text: "block"})
	}
	got := renderMessage(m, renderChat, "chat-1a2b")
	if want := "\n  (2 more content blocks; `parley events --thread chat-1a2b` shows them all)"; !strings.HasSuffix(got, want) {
		t.Errorf("renderMessage =\n%s\nwant it to end with %q", got, want)
	}
}
