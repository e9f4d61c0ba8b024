package gateway

import (
	"net/http"
	"testing"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// A share claims only a name nobody uses yet, and only for ShareClaimTTL
// without a message (found by the second breaker: a share made a pending
// claim no verdict ever resolved, so any user could close any thread name
// for good, even one another principal owned).
func TestShareCannotSquatThreadNames(t *testing.T) {
	g, _ := newVerdictGateway(t)
	h := g.Handler()

	// A thread with events (another principal's): a share claims nothing.
	e, err := events.New("/parley/processor", events.TypeTurnCompleted, "used1",
		events.TurnCompleted{TurnID: "x", Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "theirs"}})
	if err != nil {
		t.Fatal(err)
	}
	publishChat(t, g, "used1", events.ChatTurnCompleted, e)
	if w := request(t, h, "PUT", "/v1/threads/used1/shares/x", devTok, "", nil); w.Code != http.StatusNotFound {
		t.Fatalf("share of a thread in use = %d %s, want 404", w.Code, w.Body)
	}
	if _, err := g.owners.get(t.Context(), "used1"); err != errNotOwner {
		t.Fatalf("a share claimed used1: %v", err)
	}

	// A new name: the share holds it (the web chat shares before the first
	// message), until ShareClaimTTL passes without a message.
	if w := request(t, h, "PUT", "/v1/threads/new1/shares/x", devTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("share of a new thread = %d %s, want 200", w.Code, w.Body)
	}
	if w := request(t, h, "POST", "/v1/threads/new1/messages", eveTok, `{"text":"hi"}`, nil); w.Code != http.StatusNotFound {
		t.Fatalf("eve POST under dev's fresh share claim = %d %s, want 404", w.Code, w.Body)
	}
	prev := ShareClaimTTL
	ShareClaimTTL = 0
	t.Cleanup(func() { ShareClaimTTL = prev })
	postPending(t, g, eveTok, "new1")
	if r, err := g.owners.get(t.Context(), "new1"); err != nil || r.Owner != "eve" {
		t.Fatalf("new1 after the unused share claim expired = %+v, %v; want eve's claim", r, err)
	}
}
