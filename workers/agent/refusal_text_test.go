package agent

import (
	"strings"
	"testing"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// A declined confirmation whose instructions are missing (never given, or
// dropped because they were not a string) ends in a full stop, not in a
// colon followed by nothing; given instructions follow the colon.
func TestDeclineTextWithoutInstructions(t *testing.T) {
	for _, c := range []struct {
		name    string
		content map[string]any
		want    string
	}{
		{"no content", nil, "User declined execution of delete_entities."},
		{"blank", map[string]any{schema.InstructionsProperty: "  "}, "User declined execution of delete_entities."},
		{"not a string", map[string]any{schema.InstructionsProperty: 7}, "User declined execution of delete_entities."},
		{"given", map[string]any{schema.InstructionsProperty: "not now"}, "User declined execution of delete_entities: not now"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c0 := &CallState{Call: schema.ToolCall{ID: "c1", Name: "delete_entities"}, Status: callAwaiting,
				Decision: &events.Decision{Decision: events.DecisionConfirm},
				Awaiting: []events.PendingElicitation{{ID: "q1", Kind: events.KindToolConfirmation, Tool: "delete_entities"}}}
			(&Agent{}).applyAnswers(&Run{}, c0, map[string]events.Answer{"q1": {ElicitationID: "q1",
				Result: schema.ElicitResult{Action: schema.ActionDecline, Content: c.content}}})
			if c0.Result == nil || len(c0.Result.Content) != 1 {
				t.Fatalf("result = %+v, want one text block", c0.Result)
			}
			if got := c0.Result.Content[0].(*schema.TextContent).Text; got != c.want {
				t.Errorf("decline text = %q, want %q", got, c.want)
			}
		})
	}
}

// A call to a tool that cannot exist is refused in a sentence for a
// person, like the other refusals, not the terse "Unknown tool x".
func TestUnknownToolPhrasedForAPerson(t *testing.T) {
	c := &CallState{Call: schema.ToolCall{ID: "c1", Name: "no such/tool"}}
	if err := (&Agent{}).decide(t.Context(), &Run{}, c); err != nil {
		t.Fatal(err)
	}
	if c.Result == nil || !c.Result.IsError || len(c.Result.Content) != 1 {
		t.Fatalf("result = %+v, want one error text", c.Result)
	}
	got := c.Result.Content[0].(*schema.TextContent).Text
	if strings.HasPrefix(got, "Unknown tool") || !strings.Contains(got, `"no such/tool"`) || !strings.Contains(got, "nothing was run") {
		t.Errorf("unknown tool text = %q, want a sentence naming the tool and saying nothing was run", got)
	}
}
