package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// TestLargeSiteListTurnCompletes (end to end): on a site
// of more than 1,200 entities a "list" turn completes (before, the
// list_entities result overflowed the run checkpoint and the turn was
// dead-lettered), and its answer says how to see the rest.
func TestLargeSiteListTurnCompletes(t *testing.T) {
	s := start(t, options{})
	create, ok := s.site.Tool(builtin.ToolCreateEvent)
	if !ok {
		t.Fatal("no create_event tool")
	}
	for i := range 1200 {
		args, _ := json.Marshal(map[string]string{"title": fmt.Sprintf("Community meetup number %d with a longer title", i), "date": "2027-03-01"})
		r, err := create.Call(s.ctx, builtin.Request{CallID: fmt.Sprintf("seed-%d", i), Arguments: args})
		if err != nil || r.Call == nil || r.Call.IsError {
			t.Fatalf("seeding event %d: %+v, %v", i, r, err)
		}
	}
	ents, err := s.site.Entities(s.ctx)
	if err != nil || len(ents) < 1200 {
		t.Fatalf("site has %d entities, %v", len(ents), err)
	}
	s.send("big", "list everything")
	text := s.completed("big", 1)
	if !strings.Contains(text, fmt.Sprintf("Found %d entities; showing 1 to %d", len(ents), builtin.DefaultListLimit)) ||
		!strings.Contains(text, "cursor") {
		t.Fatalf("completed = %.400q, want the first page and how to continue", text)
	}
	if n := len(s.rec.matching("big", events.TypeTurnFailed)); n != 0 {
		t.Fatalf("%d turn.failed on the large site:\n%s", n, s.rec.dump("big"))
	}
}

// TestDeleteDraftsTwice (as README shows it): after the
// drafts are deleted, asking again answers in plain words, records no
// decision for the refused call, and every recorded decision has a
// documented value.
func TestDeleteDraftsTwice(t *testing.T) {
	s := start(t, options{})
	s.send("t1", "delete the 10 draft articles")
	id, _ := s.question("t1", 1)
	s.answer("t1", id, schema.ActionAccept, nil)
	if text := s.completed("t1", 1); !strings.Contains(text, "Deleted 10") {
		t.Fatalf("first turn = %q", text)
	}
	s.send("t1", "delete the 10 draft articles")
	e := s.rec.await(t, 10*time.Second, "t1", events.TypeTurnCompleted, 2)
	tc, err := events.Data[events.TurnCompleted](e)
	if err != nil {
		t.Fatal(err)
	}
	if tc.Message.Text != "There are no draft articles, so nothing was deleted." {
		t.Errorf("second turn = %q, want it said in plain words", tc.Message.Text)
	}
	documented := map[string]bool{events.DecisionAllow: true, events.DecisionVeto: true,
		events.DecisionConfirm: true, events.DecisionUnavailable: true}
	for _, d := range tc.Decisions {
		if !documented[d.Decision] || d.Tool == builtin.ToolDeleteEntities {
			t.Errorf("second turn recorded %+v; want only documented decisions, none for the refused delete", d)
		}
	}
	if n := len(s.rec.matching("t1", events.TypeElicitationRequested)); n != 1 {
		t.Errorf("%d confirmations asked, want 1 (none for the empty delete)", n)
	}
}
