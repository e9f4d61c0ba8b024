package openai_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/model/openai/openaitest"
	"github.com/parley-dev/parley/schema"
)

// The model's url_citation annotations become the answer's citations:
// one per URL, anchored in code points, a bad URL left out; with
// suggested replies, anchors into the cut suggestions line are dropped.
func TestCitationsFromAnnotations(t *testing.T) {
	srv := openaitest.New(t, openaitest.Reply{File: "testdata/text_cited.sse"}, openaitest.Reply{File: "testdata/text_cited.sse"})
	p := newProvider(t, srv, `{"agents":{"s":{"suggestReplies":true}}}`)
	resp, err := p.Complete(context.Background(), model.Request{Agent: "plain", Messages: []model.Message{{Role: model.RoleUser, Text: "Drupal 11?"}}})
	if err != nil {
		t.Fatal(err)
	}
	final, err := schema.FoldChunks(resp.Chunks...)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := final.Meta.Citations()
	if err != nil {
		t.Fatal(err)
	}
	want := []schema.Citation{
		{URL: "https://www.drupal.org/blog/drupal-11-0-0", Title: "Drupal 11 released", Anchors: []schema.Anchor{{Start: 0, End: 36}, {Start: 37, End: 72}}},
		{URL: "https://www.drupal.org/project/drupal/releases/11.0.0", Title: "Release notes", Anchors: []schema.Anchor{{Start: 37, End: 72}}},
		{URL: "https://www.drupal.org/docs/upgrading", Title: "Upgrade", Anchors: []schema.Anchor{{Start: 109, End: 122}}},
	}
	if diff := cmp.Diff(want, cs); diff != "" {
		t.Errorf("citations (-want +got):\n%s", diff)
	}
	if final.Text != resp.Text {
		t.Errorf("folded text %q differs from the answer %q", final.Text, resp.Text)
	}
	if got := string([]rune(final.Text)[0:36]); got != "Drupal 11 — released in August 2024." {
		t.Errorf("anchor 0 spans %q", got)
	}
	final.Role = schema.RoleAssistant
	if err := final.Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}

	resp, err = p.Complete(context.Background(), model.Request{Agent: "s", Messages: []model.Message{{Role: model.RoleUser, Text: "Drupal 11?"}}})
	if err != nil {
		t.Fatal(err)
	}
	final, _ = schema.FoldChunks(resp.Chunks...)
	cs, _ = final.Meta.Citations()
	if len(cs) != 3 || cs[2].Anchors != nil || len(cs[0].Anchors) != 2 || strings.Join(resp.SuggestedReplies, "|") != "what changed?|upgrade guide" {
		t.Errorf("with suggestions: citations %+v, replies %q", cs, resp.SuggestedReplies)
	}
	if err := final.Validate(); err != nil {
		t.Errorf("Validate after the suggestions were cut = %v", err)
	}
}

// Tool-result images and audio reach the model only when its settings
// say it takes them (after the step's tool messages, since a tool message
// takes only text); otherwise they are described.
func TestToolResultMedia(t *testing.T) {
	png := "iVBORw0KGgo="
	result := &schema.CallToolResult{Content: schema.ContentList{
		schema.Text("a chart"),
		&schema.ImageContent{MIMEType: "image/png", Data: png},
		&schema.AudioContent{MIMEType: "audio/wav", Data: "UklGRg=="},
		&schema.AudioContent{MIMEType: "audio/ogg", Data: "T2dnUw=="},
	}}
	msgs := []model.Message{
		{Role: model.RoleUser, Text: "chart?"},
		{Role: model.RoleAssistant, ToolCalls: []schema.ToolCall{{ID: "c1", Name: "chart", Arguments: json.RawMessage(`{}`)}}},
		{Role: model.RoleTool, ToolCallID: "c1", ToolName: "chart", Text: "a chart", Result: result},
	}
	srv := openaitest.New(t, openaitest.Reply{File: "testdata/text.sse"}, openaitest.Reply{File: "testdata/text.sse"})
	p := newProvider(t, srv, `{"agents":{"media":{"images":true,"audio":true}}}`)
	for _, agent := range []string{"plain", "media"} {
		if _, err := p.Complete(context.Background(), model.Request{Agent: agent, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	reqs := srv.Requests()
	plain, _ := json.Marshal(reqs[0]["messages"])
	if n := len(reqs[0]["messages"].([]any)); n != 3 || strings.Contains(string(plain), "image_url") || strings.Contains(string(plain), "input_audio") ||
		!strings.Contains(string(plain), "[image image/png, about 9 bytes, not shown to the model]") ||
		!strings.Contains(string(plain), "[audio audio/wav") {
		t.Errorf("without the capabilities: %d messages %s, want 3 with the media described", n, plain)
	}
	msgsOut := reqs[1]["messages"].([]any)
	if len(msgsOut) != 4 {
		t.Fatalf("with the capabilities: %d messages, want the tool message then a user message with the media", len(msgsOut))
	}
	tool, _ := json.Marshal(msgsOut[2])
	if !strings.Contains(string(tool), "attached in the next user message") || !strings.Contains(string(tool), "[audio audio/ogg") {
		t.Errorf("tool message %s: want notes for the attached media and the ogg audio described", tool)
	}
	user := msgsOut[3].(map[string]any)
	parts, _ := json.Marshal(user["content"])
	if user["role"] != "user" || !strings.Contains(string(parts), `"url":"data:image/png;base64,`+png+`"`) ||
		!strings.Contains(string(parts), `"input_audio":{"data":"UklGRg==","format":"wav"}`) || strings.Contains(string(parts), "T2dnUw==") {
		t.Errorf("media message %v: want the png and the wav as parts, not the ogg", user)
	}
}
