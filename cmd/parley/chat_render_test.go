package main

import (
	"testing"

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
	if got := renderMessage(m, renderChat); got != want {
		t.Errorf("renderMessage =\n%s\nwant\n%s", got, want)
	}
}
