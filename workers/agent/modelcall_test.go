package agent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

func TestEnrichFinal(t *testing.T) {
	withCites := func(urls ...string) *schema.CallToolResult {
		r := &schema.CallToolResult{StructuredContent: map[string]any{"n": len(urls)}}
		var cs []schema.Citation
		for _, u := range urls {
			cs = append(cs, schema.Citation{URL: u, Title: "t " + u})
		}
		r.Meta.SetCitations(cs)
		return r
	}
	msgs := []model.Message{
		{Role: model.RoleUser, Text: "old"},
		{Role: model.RoleTool, Result: withCites("https://old.example/")}, // an earlier turn's
		{Role: model.RoleUser, Text: "now"},
		{Role: model.RoleTool, Result: withCites("https://a.example/", "not a uri")},
		{Role: model.RoleTool, Result: withCites("https://a.example/", "https://b.example/")},
	}
	final := schema.ChatMessage{Role: schema.RoleAssistant, Text: "x"}
	final.Meta.SetCitations([]schema.Citation{{URL: "https://chunk.example/"}})
	enrichFinal(&final, msgs, []string{"next?", " "})
	cs, err := final.Meta.Citations()
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, c := range cs {
		urls = append(urls, c.URL)
	}
	if got := strings.Join(urls, " "); got != "https://chunk.example/ https://a.example/ https://b.example/" {
		t.Errorf("citations = %s", got)
	}
	if sc, _ := final.Meta[schema.MetaStructuredContent].(map[string]any); fmt.Sprint(sc["n"]) != "2" {
		t.Errorf("structured_content = %v, want the latest result's", final.Meta[schema.MetaStructuredContent])
	}
	if rs, _ := final.Meta.SuggestedReplies(); len(rs) != 1 || rs[0] != "next?" {
		t.Errorf("suggested replies = %q", rs)
	}
	if err := final.Validate(); err != nil {
		t.Errorf("final message invalid: %v", err)
	}
	// Bounds: at most maxCitations; an oversized structuredContent is left out.
	var many []string
	for i := range 50 {
		many = append(many, fmt.Sprintf("https://e.example/%d", i))
	}
	big := withCites(many...)
	big.StructuredContent = map[string]any{"blob": strings.Repeat("x", maxStructuredBytes)}
	f2 := schema.ChatMessage{Role: schema.RoleAssistant}
	enrichFinal(&f2, []model.Message{{Role: model.RoleUser}, {Role: model.RoleTool, Result: big}}, nil)
	if cs, _ := f2.Meta.Citations(); len(cs) != maxCitations {
		t.Errorf("citations = %d, want the bound %d", len(cs), maxCitations)
	}
	if _, ok := f2.Meta[schema.MetaStructuredContent]; ok {
		t.Error("an oversized structuredContent was copied")
	}
}
