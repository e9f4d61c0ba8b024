package gateway

import (
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

func mustEvent(t *testing.T, typ events.Type, data any) *event.Event {
	t.Helper()
	e, err := events.New("/test", typ, "th", data)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func question(id string) schema.ElicitRequestParams {
	return schema.ElicitRequestParams{Message: "q " + id, Meta: schema.Meta{schema.MetaElicitationID: id}}
}

// pendingIDs lists the elicitation IDs of st's pending questions.
func pendingIDs(st *ThreadState) []string {
	var out []string
	for _, p := range st.Pending {
		out = append(out, threadstate.ElicitationID(p))
	}
	return out
}

// GET /v1/threads/{thread}'s state, from the thread's fold, follows a thread through a pause with two questions, an
// invalid answer (question stays open), a valid one, a withdrawal and an
// expiry.
func TestFold(t *testing.T) {
	var f threadstate.Fold
	seq := uint64(0)
	add := func(typ events.Type, data any) *event.Event {
		seq++
		e := mustEvent(t, typ, data)
		f.Apply(seq, e)
		return e
	}
	var st ThreadState
	check := func(step, state string, pending ...string) {
		t.Helper()
		stateOf(&st, &f, false)
		if got := st.State; got != state {
			t.Errorf("%s: state = %s, want %s", step, got, state)
		}
		if got := pendingIDs(&st); len(got) != len(pending) || (len(got) > 0 && got[0] != pending[0]) {
			t.Errorf("%s: pending = %v, want %v", step, got, pending)
		}
	}
	check("empty", StateIdle)
	req := add(events.TypeTurnRequested, events.TurnRequested{Message: schema.ChatMessage{Role: "user", Text: "hi"}})
	check("requested", StateRunning)
	add(events.TypeElicitationRequested, question("a"))
	add(events.TypeElicitationRequested, question("b"))
	add(events.TypeTurnPaused, events.TurnPaused{TurnID: "turn1", RequestEventID: req.ID(), ElicitationIDs: []string{"a", "b"}})
	check("paused", StatePaused, "a", "b")
	bad := add(events.TypeElicitationResponded, events.ElicitationResponded{ElicitationID: "a", Action: "accept"})
	check("answered a", StatePaused, "b")
	add(events.TypeElicitationRejected, events.ElicitationRejected{ElicitationID: "a", RespondedEventID: bad.ID(), Reason: events.RejectInvalidContent})
	check("a invalid", StatePaused, "b", "a")
	add(events.TypeElicitationResponded, events.ElicitationResponded{ElicitationID: "a", Action: "accept"})
	check("a valid", StatePaused, "b")
	add(events.TypeElicitationCancelled, events.ElicitationCancelled{TurnID: "turn1", ElicitationIDs: []string{"b"}, Reason: "superseded"})
	check("b withdrawn", StateIdle)
	if st.LastEventID != seq {
		t.Errorf("lastEventId = %d, want %d", st.LastEventID, seq)
	}

	// A second turn pauses and expires: the thread is idle again.
	req2 := add(events.TypeTurnRequested, events.TurnRequested{Message: schema.ChatMessage{Role: "user", Text: "again"}})
	add(events.TypeElicitationRequested, question("c"))
	add(events.TypeTurnPaused, events.TurnPaused{TurnID: "turn2", RequestEventID: req2.ID(), ElicitationIDs: []string{"c"}})
	check("paused again", StatePaused, "c")
	add(events.TypeElicitationExpired, events.ElicitationExpired{TurnID: "turn2", ElicitationIDs: []string{"c"}})
	check("expired", StateIdle)

	// A third completes.
	req3 := add(events.TypeTurnRequested, events.TurnRequested{Message: schema.ChatMessage{Role: "user", Text: "list"}})
	check("running", StateRunning)
	add(events.TypeTurnCompleted, events.TurnCompleted{TurnID: "turn3", RequestEventID: req3.ID()})
	check("completed", StateIdle)

	// A fourth fails: the thread says so until a new message.
	req4 := add(events.TypeTurnRequested, events.TurnRequested{Message: schema.ChatMessage{Role: "user", Text: "break"}})
	add(events.TypeTurnFailed, events.TurnFailed{TurnID: "turn4", RequestEventID: req4.ID(), Reason: "agent_failed"})
	check("failed", StateFailed)
}
