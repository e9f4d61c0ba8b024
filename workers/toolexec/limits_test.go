package toolexec

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

func lastText(t *testing.T, r *schema.CallToolResult) string {
	t.Helper()
	if len(r.Content) == 0 {
		t.Fatal("reduced result has no content")
	}
	tc, ok := r.Content[len(r.Content)-1].(*schema.TextContent)
	if !ok {
		t.Fatalf("last block is %T, want the note", r.Content[len(r.Content)-1])
	}
	return tc.Text
}

// TestBoundResultSmallUnchanged: a result within the limit is returned as is.
func TestBoundResultSmallUnchanged(t *testing.T) {
	r := &schema.CallToolResult{Content: schema.ContentList{schema.Text("hello")}, StructuredContent: map[string]any{"a": 1}}
	if got := boundResult(r, MaxResultBytes); got != r {
		t.Fatalf("small result changed: %+v", got)
	}
	res := events.ToolResult{RunID: "r", CallID: "c", Result: r}
	if got, size := boundToolResult("t", res); size != 0 || got.Result != r {
		t.Fatalf("boundToolResult changed a small result (size %d)", size)
	}
}

// TestBoundResultHugeText is breaker item 5 (a): a ~750 KB get_entity
// text (multi-byte, with characters JSON escapes) is cut at a character
// boundary to fit, with a note naming the original size and how to ask
// for less.
func TestBoundResultHugeText(t *testing.T) {
	body := strings.Repeat("Grüße <b>\"quoted\"</b> & more\n", 750_000/32)
	res := events.ToolResult{RunID: "run-1", CallID: "call-1", Round: 0,
		Result: &schema.CallToolResult{Content: schema.ContentList{schema.Text("Page 1: Huge\n\n" + body)},
			StructuredContent: map[string]any{"id": "page-1", "title": "Huge"}}}
	orig := encodedSize(res)
	got, size := boundToolResult("get_entity", res)
	if size != orig {
		t.Fatalf("reported size %d, want %d", size, orig)
	}
	if n := encodedSize(got); n > MaxResultBytes {
		t.Fatalf("reduced result is %d bytes, over %d", n, MaxResultBytes)
	}
	first := got.Result.Content[0].(*schema.TextContent).Text
	if !utf8.ValidString(first) || !strings.HasPrefix(first, "Page 1: Huge") || len(first) < 64<<10 {
		t.Fatalf("cut text: valid=%v len=%d prefix=%.40q", utf8.ValidString(first), len(first), first)
	}
	note := lastText(t, got.Result)
	for _, want := range []string{"Result reduced", "limit of", "bytes of text are shown", "Ask the tool for less"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
	if got.Result.StructuredContent["id"] != "page-1" {
		t.Errorf("small structuredContent was not kept: %v", got.Result.StructuredContent)
	}
	if got.RunID != "run-1" || got.CallID != "call-1" {
		t.Errorf("envelope changed: %+v", got)
	}
}

// TestBoundResultDropsWithNotes: structuredContent that alone is over the
// limit, and non-text blocks beyond the room, are left out, and the note
// says so; the result stays an error if it was one.
func TestBoundResultDropsWithNotes(t *testing.T) {
	big := strings.Repeat("x", 300<<10)
	img := &schema.ImageContent{Data: strings.Repeat("QUFB", 50<<10), MIMEType: "image/png"} // 200 KiB
	r := &schema.CallToolResult{IsError: true,
		Content:           schema.ContentList{schema.Text("short text"), img, img},
		StructuredContent: map[string]any{"blob": big},
		Meta:              schema.Meta{"big": big}}
	got := boundResult(r, MaxResultBytes)
	if n := encodedSize(got); n > MaxResultBytes {
		t.Fatalf("reduced result is %d bytes, over %d", n, MaxResultBytes)
	}
	if !got.IsError || got.StructuredContent != nil || len(got.Meta) != 0 {
		t.Fatalf("isError=%v structured kept=%v meta kept=%v", got.IsError, got.StructuredContent != nil, len(got.Meta) != 0)
	}
	images := 0
	for _, c := range got.Content {
		if _, ok := c.(*schema.ImageContent); ok {
			images++
		}
	}
	if images != 1 {
		t.Errorf("%d images kept, want 1 (the second does not fit)", images)
	}
	note := lastText(t, got)
	for _, want := range []string{"structuredContent (", "_meta (", "1 content blocks (", "Ask the tool for less"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
	if got.Content[0].(*schema.TextContent).Text != "short text" {
		t.Errorf("short text was changed: %v", got.Content[0])
	}
	if _, err := json.Marshal(got); err != nil {
		t.Fatal(err)
	}
}

// TestBoundToolResultHugeQuestion: an input-required result too large to
// publish becomes a tool error naming the size.
func TestBoundToolResultHugeQuestion(t *testing.T) {
	res := events.ToolResult{RunID: "r", CallID: "c", InputRequired: &schema.InputRequiredResult{
		ResultType: "input_required", RequestState: strings.Repeat("s", 400<<10)}}
	got, size := boundToolResult("ask", res)
	if size == 0 || got.InputRequired != nil || got.Result == nil || !got.Result.IsError ||
		!strings.Contains(got.Result.Content[0].(*schema.TextContent).Text, "limit of") {
		t.Fatalf("got %+v (size %d)", got, size)
	}
}
