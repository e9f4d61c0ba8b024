package threadstate

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// step is one event of a table test and what the fold must say after it.
type step struct {
	name    string
	ev      func() *event.Event
	status  Status
	pending []string
	// settled, when set, is the last settlement: "<id> <how>".
	settled string
	ended   bool
	opened  string
}

func mk(t *testing.T, id string, typ events.Type, data any, ext ...string) func() *event.Event {
	return func() *event.Event {
		t.Helper()
		e, err := events.NewWithID(id, "/test", typ, "th", data)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(ext); i += 2 {
			e.SetExtension(ext[i], ext[i+1])
		}
		return e
	}
}

func q(id string) schema.ElicitRequestParams {
	return schema.ElicitRequestParams{Message: "q " + id, Meta: schema.Meta{schema.MetaElicitationID: id},
		RequestedSchema: schema.RequestedSchema{Type: "object"}}
}

func msg(text string) events.TurnRequested {
	return events.TurnRequested{Message: schema.ChatMessage{Role: schema.RoleUser, Text: text}}
}

func TestFold(t *testing.T) {
	turn := func(req string) string { return events.DerivedID("turn", req) }
	tests := []struct {
		name  string
		steps []step
	}{
		{"pause, invalid answer, valid answer, withdrawal", []step{
			{name: "requested", ev: mk(t, "m1", events.TypeTurnRequested, msg("hi")), status: Running},
			{name: "asks a", ev: mk(t, "qa", events.TypeElicitationRequested, q("a"), events.ExtTurnID, turn("m1")), status: Running, pending: []string{"a"}, opened: "a"},
			{name: "asks b", ev: mk(t, "qb", events.TypeElicitationRequested, q("b")), status: Running, pending: []string{"a", "b"}, opened: "b"},
			{name: "paused", ev: mk(t, "p1", events.TypeTurnPaused, events.TurnPaused{TurnID: turn("m1"), RequestEventID: "m1", ElicitationIDs: []string{"a", "b"}}), status: Paused, pending: []string{"a", "b"}},
			{name: "a answered", ev: mk(t, "r1", events.TypeElicitationResponded, events.ElicitationResponded{ElicitationID: "a", Action: schema.ActionAccept}), status: Paused, pending: []string{"b"}, settled: "a answered"},
			{name: "a invalid", ev: mk(t, "x1", events.TypeElicitationRejected, events.ElicitationRejected{ElicitationID: "a", RespondedEventID: "r1", Reason: events.RejectInvalidContent}), status: Paused, pending: []string{"b", "a"}, opened: "a"},
			{name: "an answer refused before it was taken", ev: mk(t, "x2", events.TypeElicitationRejected, events.ElicitationRejected{ElicitationID: "a", RespondedEventID: "zz", Reason: events.RejectInvalidContent}), status: Paused, pending: []string{"b", "a"}, opened: "a"},
			{name: "a late answer refused", ev: mk(t, "x3", events.TypeElicitationRejected, events.ElicitationRejected{ElicitationID: "a", RespondedEventID: "zz", Reason: events.RejectAlreadyConsumed}), status: Paused, pending: []string{"b", "a"}},
			{name: "a declined", ev: mk(t, "r2", events.TypeElicitationResponded, events.ElicitationResponded{ElicitationID: "a", Action: schema.ActionDecline}), status: Paused, pending: []string{"b"}, settled: "a declined"},
			{name: "b withdrawn", ev: mk(t, "c1", events.TypeElicitationCancelled, events.ElicitationCancelled{TurnID: turn("m1"), ElicitationIDs: []string{"b"}, Reason: "superseded"}), status: Idle, settled: "b withdrawn", ended: true},
		}},
		{"pause and expiry", []step{
			{name: "requested", ev: mk(t, "m2", events.TypeTurnRequested, msg("again")), status: Running},
			{name: "asks c", ev: mk(t, "qc", events.TypeElicitationRequested, q("c")), status: Running, pending: []string{"c"}, opened: "c"},
			{name: "paused", ev: mk(t, "p2", events.TypeTurnPaused, events.TurnPaused{TurnID: turn("m2"), RequestEventID: "m2", ElicitationIDs: []string{"c"}}), status: Paused, pending: []string{"c"}},
			{name: "expired", ev: mk(t, "e2", events.TypeElicitationExpired, events.ElicitationExpired{TurnID: turn("m2"), ElicitationIDs: []string{"c"}}), status: Idle, settled: "c expired", ended: true},
		}},
		{"answers resume the turn, which completes", []step{
			{name: "requested", ev: mk(t, "m3", events.TypeTurnRequested, msg("delete")), status: Running},
			{name: "asks d", ev: mk(t, "qd", events.TypeElicitationRequested, q("d")), status: Running, pending: []string{"d"}, opened: "d"},
			{name: "paused", ev: mk(t, "p3", events.TypeTurnPaused, events.TurnPaused{TurnID: turn("m3"), RequestEventID: "m3"}), status: Paused, pending: []string{"d"}},
			{name: "d cancelled", ev: mk(t, "r3", events.TypeElicitationResponded, events.ElicitationResponded{ElicitationID: "d", Action: schema.ActionCancel}), status: Running, settled: "d cancelled"},
			{name: "completed", ev: mk(t, "k3", events.TypeTurnCompleted, events.TurnCompleted{TurnID: turn("m3"), RequestEventID: "m3"}), status: Idle, ended: true},
		}},
		{"queue: two messages, a rejection, a failure", []step{
			{name: "first", ev: mk(t, "m4", events.TypeTurnRequested, msg("one")), status: Running},
			{name: "second", ev: mk(t, "m5", events.TypeTurnRequested, msg("two")), status: Running},
			{name: "third refused", ev: mk(t, "j6", events.TypeTurnRejected, events.TurnRejected{RequestEventID: "m6", Reason: events.RejectThreadBusy}), status: Running},
			{name: "first completes", ev: mk(t, "k4", events.TypeTurnCompleted, events.TurnCompleted{TurnID: turn("m4")}), status: Running, ended: true},
			{name: "second fails", ev: mk(t, "f5", events.TypeTurnFailed, events.TurnFailed{TurnID: turn("m5"), RequestEventID: "m5", Reason: "agent_failed"}), status: Failed, ended: true},
			{name: "a new message", ev: mk(t, "m7", events.TypeTurnRequested, msg("three")), status: Running},
			{name: "it completes", ev: mk(t, "k7", events.TypeTurnCompleted, events.TurnCompleted{TurnID: turn("m7"), RequestEventID: "m7"}), status: Idle, ended: true},
		}},
		{"a message failing before its turn leaves the pause", []step{
			{name: "requested", ev: mk(t, "m8", events.TypeTurnRequested, msg("x")), status: Running},
			{name: "asks e", ev: mk(t, "qe", events.TypeElicitationRequested, q("e")), status: Running, pending: []string{"e"}, opened: "e"},
			{name: "paused", ev: mk(t, "p8", events.TypeTurnPaused, events.TurnPaused{TurnID: turn("m8"), RequestEventID: "m8"}), status: Paused, pending: []string{"e"}},
			{name: "another message fails unstarted", ev: mk(t, "f9", events.TypeTurnFailed, events.TurnFailed{RequestEventID: "m9", Reason: "dead_lettered"}), status: Paused, pending: []string{"e"}},
			{name: "the turn fails with e open", ev: mk(t, "f8", events.TypeTurnFailed, events.TurnFailed{TurnID: turn("m8"), Reason: "agent_failed"}), status: Failed, settled: "e withdrawn", ended: true},
		}},
		{"undecodable data changes nothing", []step{
			{name: "garbage question", ev: func() *event.Event {
				e := mk(t, "g1", events.TypeElicitationRequested, q("g"))()
				_ = e.SetData("application/json", []byte(`[1]`))
				return e
			}, status: Idle},
			{name: "a question without ID", ev: mk(t, "g2", events.TypeElicitationRequested, schema.ElicitRequestParams{Message: "?"}), status: Idle},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f Fold
			for i, s := range tt.steps {
				ch := f.Apply(uint64(i+1), s.ev())
				if got := f.Status(); got != s.status || ch.To != got {
					t.Errorf("%s: status %s (change to %s), want %s", s.name, got, ch.To, s.status)
				}
				if got := f.PendingIDs(); !slices.Equal(got, s.pending) && (len(got) > 0 || len(s.pending) > 0) {
					t.Errorf("%s: pending %v, want %v", s.name, got, s.pending)
				}
				if s.settled != "" {
					st := f.Settled()
					if last := st[len(st)-1]; fmt.Sprintf("%s %s", last.ID, last.How) != s.settled {
						t.Errorf("%s: settled %s %s, want %s", s.name, last.ID, last.How, s.settled)
					}
					if len(ch.Settled) == 0 {
						t.Errorf("%s: the change lists no settlement", s.name)
					}
				}
				if ch.Ended != s.ended {
					t.Errorf("%s: ended %v, want %v", s.name, ch.Ended, s.ended)
				}
				if got := ""; ch.Opened != nil || s.opened != "" {
					if ch.Opened != nil {
						got = ch.Opened.ID
					}
					if got != s.opened {
						t.Errorf("%s: opened %q, want %q", s.name, got, s.opened)
					}
				}
				if f.LastSeq != uint64(i+1) {
					t.Errorf("%s: LastSeq %d", s.name, f.LastSeq)
				}
			}
		})
	}
}

// Expect counts a sent message as running before its echo; the echo does
// not count it twice, and its rejection closes it. Position tells an
// accepted message from one not taken yet, and its place in the queue.
func TestExpectAndPosition(t *testing.T) {
	var f Fold
	f.Expect("m1")
	if f.Status() != Running || f.TurnID != events.DerivedID("turn", "m1") {
		t.Fatalf("expected message: status %s, turn %s", f.Status(), f.TurnID)
	}
	if acc, ahead := f.Position("m1"); acc || ahead != 0 {
		t.Errorf("before the echo: accepted %v ahead %d", acc, ahead)
	}
	f.Apply(1, mk(t, "m1", events.TypeTurnRequested, msg("a"))())
	f.Apply(2, mk(t, "m2", events.TypeTurnRequested, msg("b"))())
	if acc, ahead := f.Position("m2"); !acc || ahead != 1 {
		t.Errorf("second message: accepted %v ahead %d, want true 1", acc, ahead)
	}
	f.Apply(3, mk(t, "k1", events.TypeTurnCompleted, events.TurnCompleted{RequestEventID: "m1"})())
	if acc, ahead := f.Position("m2"); !acc || ahead != 0 || f.TurnID != events.DerivedID("turn", "m2") {
		t.Errorf("after the first ended: accepted %v ahead %d turn %s", acc, ahead, f.TurnID)
	}
	f.Apply(4, mk(t, "k2", events.TypeTurnCompleted, events.TurnCompleted{RequestEventID: "m2"})())
	f.Expect("m3")
	f.Apply(5, mk(t, "j3", events.TypeTurnRejected, events.TurnRejected{RequestEventID: "m3"})())
	if f.Status() != Idle {
		t.Errorf("after the rejection: %s, want idle", f.Status())
	}
	if acc, ahead := f.Position("m1"); !acc || ahead != -1 {
		t.Errorf("ended message: accepted %v ahead %d, want true -1", acc, ahead)
	}
}

// Progress is the running turn's last; a pause or the end clears it.
func TestProgress(t *testing.T) {
	var f Fold
	f.Apply(1, mk(t, "m1", events.TypeTurnRequested, msg("a"))())
	ch := f.Apply(2, mk(t, "g1", events.TypeProgress, schema.Progress{ProgressToken: schema.ProgressToken{}, Progress: 1, Message: "Thinking"})())
	if f.Progress == nil || f.Progress.Message != "Thinking" {
		t.Fatalf("progress %+v", f.Progress)
	}
	if _, ok := ch.Data.(schema.Progress); !ok {
		t.Errorf("change data %T, want schema.Progress", ch.Data)
	}
	f.Apply(3, mk(t, "k1", events.TypeTurnCompleted, events.TurnCompleted{RequestEventID: "m1"})())
	if f.Progress != nil {
		t.Errorf("progress after the end: %+v", f.Progress)
	}
}

// A progress notification stored after its turn ended (an agent
// replica's late timer) is stale: it is not the running turn's progress,
// neither when the thread is idle nor when the next turn runs.
func TestProgressAfterItsTurn(t *testing.T) {
	var f Fold
	t1, t2 := events.DerivedID("turn", "m1"), events.DerivedID("turn", "m2")
	prog := func(id, turn string) *event.Event {
		return mk(t, id, events.TypeProgress, schema.Progress{Progress: 1, Message: id}, events.ExtTurnID, turn)()
	}
	f.Apply(1, mk(t, "m1", events.TypeTurnRequested, msg("a"))())
	if ch := f.Apply(2, prog("g1", t1)); ch.Stale || f.Progress == nil {
		t.Fatalf("the running turn's progress: stale %v, progress %+v", ch.Stale, f.Progress)
	}
	f.Apply(3, mk(t, "m2", events.TypeTurnRequested, msg("b"))())
	f.Apply(4, mk(t, "k1", events.TypeTurnCompleted, events.TurnCompleted{TurnID: t1, RequestEventID: "m1"})())
	if ch := f.Apply(5, prog("g2", t1)); !ch.Stale || f.Progress != nil {
		t.Errorf("the ended turn's progress while the next runs: stale %v, progress %+v", ch.Stale, f.Progress)
	}
	if ch := f.Apply(6, prog("g3", t2)); ch.Stale || f.Progress == nil || f.Progress.Message != "g3" {
		t.Errorf("the next turn's progress: stale %v, progress %+v", ch.Stale, f.Progress)
	}
	f.Apply(7, mk(t, "k2", events.TypeTurnCompleted, events.TurnCompleted{TurnID: t2, RequestEventID: "m2"})())
	if ch := f.Apply(8, prog("g4", t2)); !ch.Stale || f.Progress != nil || f.Status() != Idle {
		t.Errorf("progress after the last turn: stale %v, progress %+v, status %v", ch.Stale, f.Progress, f.Status())
	}
}

// The values that grow with a thread's events are bounded.
func TestBounds(t *testing.T) {
	var f Fold
	for i := range MaxOpenMessages + 10 {
		f.Apply(uint64(i), mk(t, fmt.Sprintf("m%d", i), events.TypeTurnRequested, msg("x"))())
	}
	if len(f.open) != MaxOpenMessages || len(f.seen) != MaxOpenMessages {
		t.Errorf("open %d seen %d, want %d", len(f.open), len(f.seen), MaxOpenMessages)
	}
	for i := range MaxSettled + 10 {
		id := fmt.Sprintf("q%d", i)
		f.Apply(0, mk(t, "e"+id, events.TypeElicitationRequested, q(id))())
		f.Apply(0, mk(t, "r"+id, events.TypeElicitationResponded, events.ElicitationResponded{ElicitationID: id, Action: schema.ActionAccept})())
	}
	if len(f.settled) != MaxSettled || len(f.answers) > MaxPending {
		t.Errorf("settled %d answers %d", len(f.settled), len(f.answers))
	}
	if s, ok := f.Settlement(fmt.Sprintf("q%d", MaxSettled+9)); !ok || s.How != Answered {
		t.Errorf("newest settlement: %+v %v", s, ok)
	}
}
