package schema

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Citations and suggested replies: the shape, the bounds and the anchors
// within the message text.
func TestCitationValidate(t *testing.T) {
	many := func(n int) []Citation {
		cs := make([]Citation, n)
		for i := range cs {
			cs[i] = Citation{URL: "https://example.com/"}
		}
		return cs
	}
	anchors := func(n int) []Anchor {
		as := make([]Anchor, n)
		for i := range as {
			as[i] = Anchor{Start: 0, End: 1}
		}
		return as
	}
	replies := func(n int) []string {
		rs := make([]string, n)
		for i := range rs {
			rs[i] = "ok"
		}
		return rs
	}
	const p = `_meta["drupal.org/ai.citations"]`
	const r = `_meta["drupal.org/ai.suggested_replies"]`
	tests := []struct {
		name string
		msg  ChatMessage
		want string
	}{
		{"anchored", ChatMessage{Role: RoleAssistant, Text: "Paris is the capital.", Meta: Meta{MetaCitations: []Citation{
			{URL: "https://en.wikipedia.org/wiki/Paris", Title: "Paris", Anchors: []Anchor{{0, 5}, {0, 21}}}}}}, ""},
		// Offsets are code points: "é" is one, "😀" is one (two in UTF-16, four bytes).
		{"code points", ChatMessage{Role: RoleAssistant, Text: "é😀x", Meta: Meta{MetaCitations: []Citation{
			{URL: "https://a.test", Anchors: []Anchor{{1, 3}}}}}}, ""},
		{"past the text", ChatMessage{Role: RoleAssistant, Text: "é😀x", Meta: Meta{MetaCitations: []Citation{
			{URL: "https://a.test", Anchors: []Anchor{{1, 4}}}}}},
			p + `[0].anchors[0].end: must be at most the text's length (3 code points), got 4`},
		{"generic JSON", ChatMessage{Role: RoleAssistant, Text: "abc", Meta: mustMeta(t,
			`{"drupal.org/ai.citations":[{"url":"https://a.test","anchors":[{"start":2,"end":9}]}]}`)},
			p + `[0].anchors[0].end: must be at most the text's length (3 code points), got 9`},
		{"empty and reversed", ChatMessage{Role: RoleAssistant, Text: "abcdef", Meta: Meta{MetaCitations: []Citation{
			{URL: "https://a.test", Anchors: []Anchor{{-1, 2}, {3, 3}, {4, 2}}}}}},
			p + `[0].anchors[0].start: must not be negative, got -1; ` +
				p + `[0].anchors[1].end: must be greater than start (3), got 3; ` +
				p + `[0].anchors[2].end: must be greater than start (4), got 2`},
		{"relative url", ChatMessage{Role: RoleAssistant, Text: "x", Meta: Meta{MetaCitations: []Citation{{URL: "/wiki/Paris"}}}},
			p + `[0].url: must be an absolute URI`},
		{"url with a space", ChatMessage{Role: RoleAssistant, Text: "x", Meta: Meta{MetaCitations: []Citation{{URL: "https://a.test/a b"}}}},
			p + `[0].url: must be an absolute URI`},
		{"long url", ChatMessage{Role: RoleAssistant, Text: "x", Meta: Meta{MetaCitations: []Citation{{URL: "https://a.test/" + strings.Repeat("a", MaxCitationURLBytes)}}}},
			p + `[0].url: must be at most 4096 bytes, got 4111`},
		{"long title", ChatMessage{Role: RoleAssistant, Text: "x", Meta: Meta{MetaCitations: []Citation{{URL: "https://a.test", Title: strings.Repeat("t", MaxCitationTitleBytes+1)}}}},
			p + `[0].title: must be at most 1024 bytes, got 1025`},
		{"at the citation bound", ChatMessage{Role: RoleAssistant, Text: "x", Meta: Meta{MetaCitations: many(MaxCitations)}}, ""},
		{"over the citation bound", ChatMessage{Role: RoleAssistant, Text: "x", Meta: Meta{MetaCitations: many(MaxCitations + 1)}},
			p + `: must have at most 20 items, got 21`},
		{"over the anchor bound", ChatMessage{Role: RoleAssistant, Text: "x", Meta: Meta{MetaCitations: []Citation{{URL: "https://a.test", Anchors: anchors(MaxCitationAnchors + 1)}}}},
			p + `[0].anchors: must have at most 32 items, got 33`},
		{"replies at the bound", ChatMessage{Role: RoleAssistant, Text: "x", Meta: Meta{MetaSuggestedReplies: replies(MaxSuggestedReplies)}}, ""},
		{"too many replies", ChatMessage{Role: RoleAssistant, Text: "x", Meta: Meta{MetaSuggestedReplies: replies(MaxSuggestedReplies + 1)}},
			r + `: must have at most 8 items, got 9`},
		{"long reply", ChatMessage{Role: RoleAssistant, Text: "x", Meta: Meta{MetaSuggestedReplies: []string{strings.Repeat("y", MaxSuggestedReplyBytes+1)}}},
			r + `[0]: must be at most 512 bytes, got 513`},
		{"reply not a string", ChatMessage{Role: RoleAssistant, Text: "x", Meta: mustMeta(t, `{"drupal.org/ai.suggested_replies":[1]}`)},
			r + `: must be a string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if err := tt.msg.Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q\nwant         %q", got, tt.want)
			}
		})
	}
}

// FoldChunks shifts each chunk's anchors by the code points before it, so
// the folded message's anchors point at the same text.
func TestFoldChunksAnchors(t *testing.T) {
	chunks := []ChatMessage{
		{Role: RoleAssistant, Text: "Café ", Meta: Meta{MetaCitations: []Citation{{URL: "https://a.test", Anchors: []Anchor{{0, 4}}}}}},
		{Text: "😀 Paris", Meta: mustMeta(t, `{"drupal.org/ai.citations":[{"url":"https://b.test","anchors":[{"start":2,"end":7}]}]}`)},
	}
	got, err := FoldChunks(chunks...)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := got.Meta.Citations()
	if err != nil {
		t.Fatal(err)
	}
	want := []Citation{{URL: "https://a.test", Anchors: []Anchor{{0, 4}}}, {URL: "https://b.test", Anchors: []Anchor{{7, 12}}}}
	if diff := cmp.Diff(want, cs); diff != "" {
		t.Errorf("citations (-want +got):\n%s", diff)
	}
	runes := []rune(got.Text)
	if s := string(runes[7:12]); s != "Paris" {
		t.Errorf("shifted anchor spans %q, want Paris", s)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}
	// The chunks keep their own anchors.
	if c, _ := chunks[0].Meta.Citations(); c[0].Anchors[0] != (Anchor{0, 4}) {
		t.Errorf("chunk 0 modified: %+v", c)
	}
}
