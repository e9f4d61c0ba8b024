package agent

import (
	"fmt"
	"testing"

	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// A tool's citation anchors point into the tool's text, so the final
// message keeps the source without them (it would otherwise mark the wrong
// span, or fail validation); suggested replies stop at the schema's bound.
func TestEnrichFinalAnchorsAndBounds(t *testing.T) {
	r := &schema.CallToolResult{}
	r.Meta.SetCitations([]schema.Citation{{URL: "https://a.example/", Anchors: []schema.Anchor{{Start: 0, End: 200}}}})
	final := schema.ChatMessage{Role: schema.RoleAssistant, Text: "short"}
	var many []string
	for i := range schema.MaxSuggestedReplies + 3 {
		many = append(many, fmt.Sprint("reply ", i))
	}
	enrichFinal(&final, []model.Message{{Role: model.RoleUser, Text: "q"}, {Role: model.RoleTool, Result: r}}, many)
	cs, _ := final.Meta.Citations()
	if len(cs) != 1 || cs[0].Anchors != nil {
		t.Errorf("citations = %+v, want the source without anchors", cs)
	}
	if rs, _ := final.Meta.SuggestedReplies(); len(rs) != schema.MaxSuggestedReplies {
		t.Errorf("suggested replies = %d, want the bound %d", len(rs), schema.MaxSuggestedReplies)
	}
	if err := final.Validate(); err != nil {
		t.Errorf("final message invalid: %v", err)
	}
}
