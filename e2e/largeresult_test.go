package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// TestDeleteManyDraftsSeesStoredResult is breaker item 5 (b): with 1,500
// drafts with long titles the list_entities page is stored by reference
// (parley_results) and its structuredContent is too large for the run
// record; the model must still be given it, so "delete the draft
// articles" asks to delete the ids of the first page instead of answering
// that there are none.
func TestDeleteManyDraftsSeesStoredResult(t *testing.T) {
	s := start(t, options{})
	kv, err := s.bus.JetStream().KeyValue(s.ctx, builtin.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1500 {
		id := fmt.Sprintf("article-d%04d", i)
		e := builtin.Entity{ID: id, Type: builtin.TypeArticle, Status: builtin.StatusDraft,
			Title: fmt.Sprintf("Draft number %04d: %s", i, strings.Repeat("a long title that goes on ", 5))}
		b, _ := json.Marshal(e)
		if _, err := kv.Put(s.ctx, "entity."+id, b); err != nil {
			t.Fatalf("seeding %s: %v", id, err)
		}
	}
	s.send("many", "delete the draft articles")
	_, p := s.question("many", 1)
	// The page is the first 50 drafts in ID order: the 10 seeded by the
	// fixture (article-1 … article-10, byte order) and article-d0000 …
	var page []string
	ents, err := s.site.Entities(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type == builtin.TypeArticle && e.Status == builtin.StatusDraft && len(page) < builtin.DefaultListLimit {
			page = append(page, e.ID)
		}
	}
	pb, _ := json.Marshal(p)
	for _, id := range []string{page[0], page[len(page)-1]} {
		if !strings.Contains(string(pb), id) {
			t.Fatalf("confirmation does not name %s of the page:\n%.2000s", id, pb)
		}
	}
	if strings.Contains(string(pb), "article-d1499") {
		t.Fatalf("confirmation names a draft beyond the first page:\n%.2000s", pb)
	}
	id, _ := s.question("many", 1)
	s.answer("many", id, schema.ActionAccept, nil)
	text := s.completed("many", 1)
	if strings.Contains(text, "no draft articles") || !strings.Contains(text, fmt.Sprintf("Deleted %d", len(page))) {
		t.Fatalf("completed = %.600q, want the %d drafts of the page deleted", text, len(page))
	}
	if n := len(s.rec.matching("many", events.TypeTurnFailed)); n != 0 {
		t.Fatalf("%d turn.failed:\n%s", n, s.rec.dump("many"))
	}
	if got := s.drafts(); got != 1510-len(page) {
		t.Fatalf("%d drafts left, want %d", got, 1510-len(page))
	}
}

// TestHugePageResultBounded is breaker item 5 (a): a ~750 KB page makes
// get_entity return a result larger than NATS' maximum payload. The
// tool-executor reduces it to toolexec.MaxResultBytes instead of failing
// to record it (retried, dead-lettered, the NATS error shown to the user):
// the turn completes with the start of the page and a note that it was cut.
func TestHugePageResultBounded(t *testing.T) {
	s := start(t, options{})
	kv, err := s.bus.JetStream().KeyValue(s.ctx, builtin.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	body := "Huge page starts here. " + strings.Repeat("Lorem ipsum dolor sit amet, <consectetur> \"adipiscing\" elit. ", 750_000/60)
	b, _ := json.Marshal(builtin.Entity{ID: "page-huge", Type: builtin.TypePage, Status: builtin.StatusPublished, Title: "Huge", Body: body})
	if _, err := kv.Put(s.ctx, "entity.page-huge", b); err != nil {
		t.Fatal(err)
	}
	s.send("huge", "show me the Huge page")
	text := s.completed("huge", 1)
	if !strings.HasPrefix(text, "Here it is.") || !strings.Contains(text, "Huge page starts here.") ||
		!strings.Contains(text, "Ask the tool for less") || strings.Contains(text, "maximum payload") {
		t.Fatalf("completed = %.300q … %.300q", text, text[max(0, len(text)-300):])
	}
	if n := len(s.rec.matching("huge", events.TypeTurnFailed)); n != 0 {
		t.Fatalf("%d turn.failed:\n%s", n, s.rec.dump("huge"))
	}
}
