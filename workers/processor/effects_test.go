package processor

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// A tool call that ran stays in the thread's history whatever ends its
// turn: the run failing (model_unavailable), completing, its pause
// superseded by a newer message or expiring, the run failing after a
// pause without reporting what ran (the pause's record of it is used),
// a run outcome dead-lettered. A failed turn's turn.failed names the
// calls (toolCalls), and the next turn's run.requested carries them in
// its history, before the next user message.
func TestEffectsKeptWhateverEndsTheTurn(t *testing.T) {
	result := &schema.CallToolResult{Content: schema.ContentList{schema.Text("Deleted 1 entity: 3.")}}
	fx := []events.ToolEffect{events.NewToolEffect(schema.ToolCall{ID: "call_0_0", Name: "delete_entities",
		Arguments: json.RawMessage(`{"ids":["3"]}`)}, result, "Deleted 1 entity: 3.")}
	turn := events.DerivedID("turn", "m1")
	pauseWith := func(h *harness, effects []events.ToolEffect) {
		h.run(events.TypeRunPaused, "p1", 10, events.RunPaused{RunID: turn, TurnID: turn, Agent: "default",
			Snapshot: json.RawMessage(`{}`), Elicitations: []events.PendingElicitation{confirmation("q1")}, Effects: effects})
	}
	cases := []struct {
		name   string
		end    func(h *harness)
		failed string // the turn.failed reason, "" when the turn does not fail
		note   string // the history's note after the calls
		reply  string // the assistant's answer after them, if any
	}{
		{name: "model unavailable", failed: "model_unavailable", note: failedNote("model_unavailable"), end: func(h *harness) {
			h.run(events.TypeRunFailed, "f1", 11, events.RunFailed{RunID: turn, TurnID: turn, Reason: "model_unavailable",
				Detail: "HTTP 500 on 4 attempts", Effects: fx})
		}},
		{name: "completed", reply: "Deleted.", end: func(h *harness) {
			h.run(events.TypeRunCompleted, "c1", 11, events.RunCompleted{RunID: turn, TurnID: turn,
				Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "Deleted."}, Effects: fx})
		}},
		{name: "pause superseded", note: supersededNote, end: func(h *harness) {
			pauseWith(h, fx)
			// m2, sent after the pause, supersedes it (below).
		}},
		{name: "pause expired", note: expiredNote, end: func(h *harness) {
			pauseWith(h, fx)
			key := h.paused().Record
			h.pauses.expire(key)
			if err := h.p.onExpired(h.ctx, key); err != nil {
				h.t.Fatal(err)
			}
		}},
		{name: "resumed run fails without its effects", failed: "state_incompatible", note: failedNote("state_incompatible"), end: func(h *harness) {
			pauseWith(h, fx)
			h.answer("a1", "q1")
			h.run(events.TypeRunFailed, "f1", 11, events.RunFailed{RunID: turn, TurnID: turn, Reason: "state_incompatible",
				Detail: "the paused run cannot be resumed by this version of the agent"})
		}},
		{name: "run outcome dead-lettered", failed: "dead_lettered", note: failedNote("dead_lettered"), end: func(h *harness) {
			e, err := events.NewWithID("c1", events.SourceAgent, events.TypeRunCompleted, "t", events.RunCompleted{RunID: turn, TurnID: turn,
				Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "Deleted."}, Effects: fx})
			if err != nil {
				h.t.Fatal(err)
			}
			if err := h.p.compensate(h.ctx, &bus.Delivery{Event: e, Subject: events.SubjectRunCompleted, StreamSeq: 11, NumDelivered: 5},
				errors.New("poisoned")); err != nil {
				h.t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if err := h.message("m1", 1); err != nil {
				t.Fatal(err)
			}
			tc.end(h)
			if err := h.message("m2", 2); err != nil {
				t.Fatal(err)
			}
			failed := h.pub.of(events.TypeTurnFailed)
			switch {
			case tc.failed == "" && len(failed) > 0:
				t.Fatalf("turn.failed %s, want none", failed[0].Data())
			case tc.failed != "":
				if len(failed) != 1 {
					t.Fatalf("%d turn.failed, want 1", len(failed))
				}
				d, _ := events.Data[events.TurnFailed](failed[0])
				if d.Reason != tc.failed || !ranDelete(d.ToolCalls, tc.name != "resumed run fails without its effects") {
					t.Errorf("turn.failed = %s, want reason %s naming the delete", failed[0].Data(), tc.failed)
				}
			}
			if tc.name == "completed" {
				done := h.pub.of(events.TypeTurnCompleted)
				d, _ := events.Data[events.TurnCompleted](done[0])
				if len(done) != 1 || !ranDelete(d.ToolCalls, true) {
					t.Errorf("turn.completed = %s, want it naming the delete with its arguments", done[0].Data())
				}
			}
			if paused := h.pub.of(events.TypeTurnPaused); len(paused) > 0 {
				d, _ := events.Data[events.TurnPaused](paused[0])
				if !ranDelete(d.ToolCalls, true) {
					t.Errorf("turn.paused = %s, want it naming the delete with its arguments", paused[0].Data())
				}
			}
			runs := h.pub.of(events.TypeRunRequested)
			next, _ := events.Data[events.RunRequested](runs[len(runs)-1])
			if next.TurnID != events.DerivedID("turn", "m2") {
				t.Fatalf("last run.requested is for %s, want m2's turn", next.TurnID)
			}
			want := []string{"user:message m1", "assistant:" + tc.note}
			if tc.reply != "" {
				want = append(want, "assistant:"+tc.reply)
			}
			want = append(want, "user:message m2")
			var got []string
			for _, m := range next.Messages {
				got = append(got, string(m.Role)+":"+m.Text)
			}
			if len(got) != len(want) {
				t.Fatalf("next turn's history = %q, want %q", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("next turn's history = %q, want %q", got, want)
				}
			}
			kept := events.ToolEffectsOf(next.Messages[1])
			if len(kept) != 1 || kept[0].Tool != "delete_entities" || string(kept[0].Arguments) != `{"ids":["3"]}` ||
				kept[0].Text != "Deleted 1 entity: 3." {
				t.Errorf("history keeps %+v, want the delete and its result", kept)
			}
		})
	}
}

// ranDelete reports whether calls is exactly the delete of entity 3 that
// TestEffectsKeptWhateverEndsTheTurn runs (with its arguments when
// withArgs: a resumed run that failed without its effects has only the
// pause's record of it, which names no arguments).
func ranDelete(calls []events.ToolRan, withArgs bool) bool {
	if len(calls) != 1 {
		return false
	}
	c := calls[0]
	args := string(c.Arguments) == `{"ids":["3"]}` || !withArgs
	return c.CallID == "call_0_0" && c.Tool == "delete_entities" && c.Summary == "Deleted 1 entity: 3." && !c.IsError && args
}
