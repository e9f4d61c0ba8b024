package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// frozen returns, once, a snapshot of the thread taken earlier: the
// processor loaded the thread, froze (SIGSTOP) past AckWait, and continues.
type frozen struct {
	kvstate.Records
	snap *Thread
}

func (f *frozen) Get(ctx context.Context, id string) (json.RawMessage, uint64, error) {
	if f.snap != nil {
		s := f.snap
		f.snap = nil
		data, err := json.Marshal(s)
		return data, 1, err
	}
	return f.Records.Get(ctx, id)
}

// frozenReplay drives turn 1 (paused as q1, answered, completed) and turn 2,
// then lets a processor that read the thread while turn 1 was running
// apply turn 1's pause late. pauseT2 says whether turn 2 pauses (q2) first;
// lose expires turn 1's pause record before the late pause (its TTL ran out).
// fromCache: the replica's thread cache holds what it read, instead of a
// read returning it.
func frozenReplay(t *testing.T, pauseT2, lose, fromCache bool) *harness {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	snap, snapRev, _ := h.p.threads.Get(h.ctx, "t") // turn 1 running: what the frozen processor saw
	turn := events.DerivedID("turn", "m1")
	h.pause("m1", "p1", 10, "q1") // handled by another replica
	h.answer("a1", "q1")
	h.run(events.TypeRunCompleted, "c1", 11, events.RunCompleted{RunID: turn, TurnID: turn,
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	if pauseT2 {
		h.pause("m2", "p2", 12, "q2")
	}
	if lose {
		h.pauses.expire(pauseKey("t", 10))
		h.p.pauses.cache.Drop(pauseKey("t", 10)) // as another replica sees it
	}
	if fromCache {
		// The frozen replica's cache holds the record it saw.
		h.p.threads = h.p.threadStore(h.threads, true)
		h.p.threads.Remember("t", snap, snapRev)
	} else {
		h.p.threads = h.p.threadStore(&frozen{Records: h.threads, snap: snap}, false)
	}
	h.pause("m1", "p1", 10, "q1") // the frozen replica continues with p1
	return h
}

// rejectedFor returns the reason of the elicitation.rejected of answer id ("" if none).
func rejectedFor(h *harness, id string) string {
	for _, e := range h.pub.of(events.TypeElicitationRejected) {
		d, _ := events.Data[events.ElicitationRejected](e)
		if d.RespondedEventID == id {
			return d.Reason
		}
	}
	return ""
}

// A late pause of an earlier turn never replaces a later turn's paused
// record, and the later turn's answer resumes it.
func TestFrozenPauseAcrossTurns(t *testing.T) {
	for _, fromCache := range []bool{false, true} {
		t.Run(fmt.Sprint("fromCache=", fromCache), func(t *testing.T) { frozenPauseAcrossTurns(t, fromCache) })
	}
}

func frozenPauseAcrossTurns(t *testing.T, fromCache bool) {
	h := frozenReplay(t, true, false, fromCache)
	if rec := h.paused(); rec == nil || rec.Find("q2") == nil {
		t.Fatalf("the late pause of turn 1 replaced turn 2's paused turn: %+v", rec)
	}
	before := len(h.pub.of(events.TypeRunResumed))
	h.answer("a2", "q2")
	if len(h.pub.of(events.TypeRunResumed)) == before {
		t.Errorf("the answer to q2 did not resume turn 2 (rejected %q)", rejectedFor(h, "a2"))
	}
}

// A second answer to an answered question of an ended turn is rejected,
// never consumed silently, whatever late pause came in between.
func TestFrozenPauseReanswer(t *testing.T) {
	for _, c := range []struct {
		name          string
		pauseT2, lose bool
		want          string
	}{
		{"turn 2 paused", true, false, events.RejectUnknownOrExpired},
		{"turn 2 running", false, false, events.RejectAlreadyConsumed},
		{"turn 1 record gone", false, true, events.RejectUnknownOrExpired},
	} {
		for _, fromCache := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fromCache=%v", c.name, fromCache), func(t *testing.T) {
				h := frozenReplay(t, c.pauseT2, c.lose, fromCache)
				n := len(h.pub.of(events.TypeRunResumed))
				h.answer("a3", "q1")
				if got := len(h.pub.of(events.TypeRunResumed)); got != n {
					t.Errorf("a second answer to q1 of an ended turn resumed a run")
				}
				if got := rejectedFor(h, "a3"); got != c.want {
					t.Errorf("second answer to q1: rejected %q, want %q", got, c.want)
				}
			})
		}
	}
}
