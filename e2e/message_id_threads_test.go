package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// A turn's ID derives from its message's event ID alone (clients compute
// it), and the run ID is the thread's own, but were the events the
// processor announces a turn's end with (turn.completed, turn.failed,
// elicitation.expired, elicitation.cancelled) to take their IDs from
// the turn ID alone, PARLEY_CHAT would drop a second event under the same
// ID within its 2-minute duplicate window. The victim's turn pauses on a
// question; the attacker reads the victim's message ID in PARLEY_CHAT and
// sends, on a thread of its own, a message under that ID, whose turn
// completes at once. The victim then answers: its turn runs and
// completes, but its turn.completed is stored under the ID of the
// attacker's, so the stream drops it as a duplicate and the victim's
// thread never hears how its turn ended (its client waits for ever).
func TestSameMessageIDOnAnotherThreadDoesNotSwallowTurnEnd(t *testing.T) {
	s := start(t, options{})
	victim := s.send("victim", deleteDrafts)
	id, _ := s.question("victim", 1)
	claim, err := s.client.TurnRequest("attacker", "", "list everything", "")
	if err != nil {
		t.Fatal(err)
	}
	claim.SetID(victim.ID())
	// Raw, without a Nats-Msg-Id (PARLEY_INPUT's duplicate window would
	// drop it under the victim's for 2 minutes: an attacker waits them
	// out, or, publishing raw, sets its own).
	h, body, err := events.Encode(claim)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.bus.JetStream().PublishMsg(s.ctx, &nats.Msg{Header: nats.Header(h), Data: body,
		Subject: events.InputSubject("mallory", "attacker", events.ChatTurnRequested)}); err != nil {
		t.Fatal(err)
	}
	s.rec.await(t, 10*time.Second, "attacker", events.TypeTurnCompleted, 1)
	s.answer("victim", id, schema.ActionAccept, nil)
	if text := s.completed("victim", 1); !strings.Contains(text, "Deleted 10") {
		t.Fatalf("victim's answer = %q, want the deletion", text)
	}
}
