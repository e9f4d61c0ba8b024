package openai_test

import (
	"context"
	"strings"
	"testing"

	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/model/openai/openaitest"
	"github.com/parley-dev/parley/schema"
)

// A user message's resolved context references reach the model after the
// text, marked as the user's and resolved by parley, one line each.
func TestUserReferences(t *testing.T) {
	srv := openaitest.New(t, openaitest.Reply{File: "testdata/text.sse"})
	p := newProvider(t, srv, "")
	_, err := p.Complete(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "compare these",
		References: []schema.ResolvedReference{
			{Entity: schema.Entity{EntityType: "page", ID: "page-1", Label: "About us"}, URI: "https://site.example/node/page-1", Summary: "The about us page."},
			{Block: 1, Entity: schema.Entity{EntityType: "page", ID: "page-2", Label: "Contact"}, URI: "https://site.example/node/page-2", Summary: "The contact page."},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	user, _ := srv.Requests()[0]["messages"].([]any)[0].(map[string]any)["content"].(string)
	for _, want := range []string{"compare these\n\nThe user referenced these entities (parley resolved each for this user",
		`- page page-1 "About us" <https://site.example/node/page-1>: The about us page.`,
		`- page page-2 "Contact" <https://site.example/node/page-2>: The contact page.`} {
		if !strings.Contains(user, want) {
			t.Errorf("user message %q lacks %q", user, want)
		}
	}
}
