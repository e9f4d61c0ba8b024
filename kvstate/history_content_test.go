package kvstate

import (
	"strings"
	"testing"

	"github.com/parley-dev/parley/schema"
)

// Content blocks count against MaxHistoryBytes, so a history of messages
// with large blocks stays bounded.
func TestHistoryBoundCountsContent(t *testing.T) {
	var th Thread
	big := &schema.ImageContent{MIMEType: "image/png", Data: strings.Repeat("A", 100<<10)}
	for range 5 {
		th.Append(schema.ChatMessage{Role: schema.RoleUser, Text: "look", Content: schema.ContentList{big}})
	}
	size := 0
	for _, m := range th.History {
		size += historySize(m)
	}
	if size > MaxHistoryBytes || len(th.History) == 5 {
		t.Errorf("history of %d messages is %d bytes, want at most %d", len(th.History), size, MaxHistoryBytes)
	}
	if len(th.History[len(th.History)-1].Content) != 1 {
		t.Error("the newest message lost its content")
	}
}
