package builtin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// addEvents writes n extra events straight into the site's bucket.
func addEvents(t *testing.T, s *Site, n int) {
	t.Helper()
	for i := range n {
		e := Entity{ID: fmt.Sprintf("event-x%05d", i), Type: TypeEvent, Title: fmt.Sprintf("Community meetup number %d", i),
			Status: StatusDraft, Body: strings.Repeat("An evening of talks and pizza. ", 8), Date: "2027-02-01"}
		data, _ := json.Marshal(e)
		if _, err := s.kv.Put(t.Context(), entityKey(e.ID), data); err != nil {
			t.Fatal(err)
		}
	}
}

// TestListEntitiesPages (at the tool): list_entities
// answers in pages of at most limit entities (default DefaultListLimit), so
// its result stays small on a site of 1,230 entities, and following
// nextCursor visits every matching entity exactly once.
func TestListEntitiesPages(t *testing.T) {
	s, _ := newSite(t)
	addEvents(t, s, 1200)
	all, err := s.Entities(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	first := callOK(t, s, ToolListEntities, Request{CallID: "c1", Arguments: args(map[string]any{})})
	if n := len(first.StructuredContent["ids"].([]any)); n != DefaultListLimit {
		t.Errorf("default page has %d entities, want %d", n, DefaultListLimit)
	}
	if got := first.StructuredContent["total"]; got != float64(len(all)) {
		t.Errorf("total = %v, want %d", got, len(all))
	}
	size, _ := json.Marshal(first)
	t.Logf("first page of %d entities: %d bytes", len(all), len(size))
	if len(size) > 64<<10 {
		t.Errorf("first page is %d bytes on a site of %d entities, want it bounded (<= 64 KiB)", len(size), len(all))
	}
	if next, _ := first.StructuredContent["nextCursor"].(string); next == "" || !strings.Contains(text(first), next) {
		t.Errorf("first page: nextCursor %q, text %q: want the cursor and how to continue", next, text(first)[:200])
	}

	// Follow the cursor with the largest page and a filter.
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("the cursor does not end")
		}
		a := map[string]any{"type": "event", "limit": MaxListLimit}
		if cursor != "" {
			a["cursor"] = cursor
		}
		r := callOK(t, s, ToolListEntities, Request{CallID: "c2", Arguments: args(a)})
		for _, id := range r.StructuredContent["ids"].([]any) {
			seen = append(seen, id.(string))
		}
		next, _ := r.StructuredContent["nextCursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	var want []string
	for _, e := range all {
		if e.Type == TypeEvent {
			want = append(want, e.ID)
		}
	}
	if !slices.Equal(seen, want) {
		t.Errorf("paging visited %d events, want each of the %d once, in ID order", len(seen), len(want))
	}

	for _, bad := range []map[string]any{{"limit": 0}, {"limit": MaxListLimit + 1}, {"limit": 2.5}, {"cursor": 3}} {
		r := call(t, s, ToolListEntities, Request{CallID: "c3", Arguments: args(bad)})
		if r.Call == nil || !r.Call.IsError {
			t.Errorf("list_entities(%s) = %s, want an argument error", dump(bad), dump(r))
		}
	}
}
