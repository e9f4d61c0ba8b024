package processor

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

func msg(id string) QueuedMessage {
	return QueuedMessage{EventID: id, Agent: "default", Message: schema.ChatMessage{Role: schema.RoleUser, Text: id}}
}

func turnOf(id string) string { return events.DerivedID("turn", id) }

// running returns a thread running the turn started by m1, with the given
// messages queued.
func running(queued ...string) *Thread {
	t := &Thread{Format: ThreadFormat, ID: "t", State: ThreadIdle}
	startTurn(t, msg("m1"))
	t.MarkHandled("m1")
	t.LastTurnSeq = 1
	for i, id := range queued {
		t.Queue = append(t.Queue, msg(id))
		t.MarkHandled(id)
		t.LastTurnSeq = uint64(2 + i)
	}
	return t
}

// pausedOn pauses t's active turn at runs sequence runSeq with mark.
func pausedOn(t *Thread, runSeq, mark uint64, ids ...string) *Thread {
	if err := applyPause(t, t.TurnID, pauseID(runSeq), runSeq, ids, mark); err != nil {
		panic(err)
	}
	return t
}

func pauseID(runSeq uint64) string { return "pause-" + strconv.FormatUint(runSeq, 10) }

func queueIDs(t *Thread) []string {
	var ids []string
	for _, m := range t.Queue {
		ids = append(ids, m.EventID)
	}
	return ids
}

// Issue 8 item 1: a late run.paused (or completion) of a turn that moved
// past it is stale; the thread's state is never rewound.
func TestClassifyRunOutcomes(t *testing.T) {
	turn := turnOf("m1")
	ended := running()
	pausedOn(ended, 10, 1, "q1")
	_ = applyResume(ended, &kvstate.PausedTurn{TurnID: turn})
	pausedOn(ended, 20, 1, "q2") // the turn's second pause
	_ = applyResume(ended, &kvstate.PausedTurn{TurnID: turn})
	if err := applyEnd(ended, turn, "done", 30, nil); err != nil {
		t.Fatal(err)
	}

	resumedAgain := running()
	pausedOn(resumedAgain, 10, 1, "q1")
	_ = applyResume(resumedAgain, &kvstate.PausedTurn{TurnID: turn})
	pausedOn(resumedAgain, 20, 1, "q2")
	_ = applyResume(resumedAgain, &kvstate.PausedTurn{TurnID: turn})

	pausedNow := pausedOn(running(), 10, 1, "q1")

	pausedAgain := running()
	pausedOn(pausedAgain, 10, 1, "q1")
	_ = applyResume(pausedAgain, &kvstate.PausedTurn{TurnID: turn})
	pausedOn(pausedAgain, 20, 1, "q2")

	tests := []struct {
		name   string
		thread *Thread
		pause  bool // run.paused (else run.completed/failed)
		turnID string
		id     string
		seq    uint64
		want   outcomeAction
	}{
		{"first pause of a running turn", running(), true, turn, "p1", 10, outcomeApply},
		{"pause of another turn", running(), true, turnOf("other"), "p1", 10, outcomeStale},
		{"late first pause after the turn completed", ended, true, turn, "p1", 10, outcomeStale},
		{"late first pause while the turn runs after its second pause", resumedAgain, true, turn, "p1", 10, outcomeStale},
		{"late second pause while the turn runs after it", resumedAgain, true, turn, "p2", 20, outcomeStale},
		{"redelivered pause while paused on it", pausedNow, true, turn, pauseID(10), 10, outcomeRepeat},
		{"a later pause while paused", pausedNow, true, turn, "p9", 11, outcomeStale},
		{"late first pause while paused on the second", pausedAgain, true, turn, pauseID(10), 10, outcomeStale},
		{"completion of the running turn", resumedAgain, false, turn, "c1", 30, outcomeApply},
		{"redelivered completion", ended, false, turn, "done", 30, outcomeRepeat},
		{"another completion of an ended turn", ended, false, turn, "c2", 31, outcomeStale},
		{"completion older than the last pause", resumedAgain, false, turn, "c0", 15, outcomeStale},
		{"failure of the paused turn (agent gave up)", pausedNow, false, turn, "f1", 11, outcomeApply},
		{"failure of another turn", running(), false, turnOf("other"), "f1", 11, outcomeStale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got outcomeAction
			if tt.pause {
				got = classifyPause(tt.thread, tt.turnID, tt.id, tt.seq)
			} else {
				got = classifyEnd(tt.thread, tt.turnID, tt.id, tt.seq)
			}
			if got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	// A stale pause changes nothing.
	before := *ended
	if err := applyPause(ended, turn, "p1", 10, []string{"q1"}, 5); !errors.Is(err, kvstate.ErrNoChange) || ended.State != before.State {
		t.Errorf("applyPause(stale) = %v, state %s, want ErrNoChange, %s", err, ended.State, before.State)
	}
}

// Issue 8 items 2 and 4: the ordering rule. Messages run in stream order;
// a message already in the stream when the turn paused queues behind it; a
// later one supersedes it and joins the end of the queue, whose head runs
// first.
func TestApplyMessageOrdering(t *testing.T) {
	tests := []struct {
		name        string
		thread      func() *Thread
		id          string
		seq         uint64
		po          pauseOutcome
		wantAct     msgAction
		wantErr     error
		wantStarted string
		wantQueue   []string
		wantState   string
	}{
		{
			name:   "idle thread starts",
			thread: func() *Thread { return &Thread{ID: "t", State: ThreadIdle} },
			id:     "m1", seq: 1, wantAct: msgStart, wantStarted: "m1", wantState: ThreadRunning,
		},
		{
			name:   "running thread queues",
			thread: func() *Thread { return running("m2") },
			id:     "m3", seq: 3, wantAct: msgQueue, wantQueue: []string{"m2", "m3"}, wantState: ThreadRunning,
		},
		{
			name:   "message sent before the pause queues behind it (back to back)",
			thread: func() *Thread { return pausedOn(running(), 10, 2, "q1") },
			id:     "m2", seq: 2, wantAct: msgQueue, wantQueue: []string{"m2"}, wantState: ThreadPaused,
		},
		{
			name:   "message sent after the pause supersedes it; the queue head runs first (FIFO)",
			thread: func() *Thread { return pausedOn(running("m2"), 10, 2, "q1") },
			id:     "m3", seq: 3, po: pauseOutcome{turnID: turnOf("m1"), cancelled: []string{"q1"}},
			wantAct: msgSupersede, wantStarted: "m2", wantQueue: []string{"m3"}, wantState: ThreadRunning,
		},
		{
			name:   "supersede of an empty queue starts the message",
			thread: func() *Thread { return pausedOn(running(), 10, 1, "q1") },
			id:     "m2", seq: 2, po: pauseOutcome{turnID: turnOf("m1"), cancelled: []string{"q1"}},
			wantAct: msgSupersede, wantStarted: "m2", wantState: ThreadRunning,
		},
		{
			name:   "supersede without withdrawing first: look again",
			thread: func() *Thread { return pausedOn(running(), 10, 1, "q1") },
			id:     "m2", seq: 2, wantAct: msgSupersede, wantErr: errPauseChanged, wantState: ThreadPaused,
		},
		{
			name:   "answers all in (resuming): queue",
			thread: func() *Thread { return pausedOn(running(), 10, 1, "q1") },
			id:     "m2", seq: 2, po: pauseOutcome{turnID: turnOf("m1"), resuming: true},
			wantAct: msgSupersede, wantQueue: []string{"m2"}, wantState: ThreadPaused,
		},
		{
			name:   "redelivery",
			thread: func() *Thread { return running("m2") },
			id:     "m2", seq: 2, wantAct: msgDuplicate, wantErr: kvstate.ErrNoChange, wantQueue: []string{"m2"}, wantState: ThreadRunning,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := tt.thread()
			if got := classifyMessage(th, tt.id, tt.seq); got != tt.wantAct {
				t.Errorf("classifyMessage = %v, want %v", got, tt.wantAct)
			}
			_, started, err := applyMessage(th, msg(tt.id), tt.seq, tt.po)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("applyMessage error = %v, want %v", err, tt.wantErr)
			}
			if started != tt.wantStarted || th.State != tt.wantState || !slices.Equal(queueIDs(th), tt.wantQueue) {
				t.Errorf("started %q, state %s, queue %v; want %q, %s, %v", started, th.State, queueIDs(th),
					tt.wantStarted, tt.wantState, tt.wantQueue)
			}
			if tt.wantAct == msgSupersede && tt.wantErr == nil && !tt.po.resuming {
				sup := th.Superseded
				if sup == nil || sup.By != tt.id || sup.TurnID != turnOf("m1") || sup.Started != tt.wantStarted ||
					!slices.Equal(sup.Cancelled, tt.po.cancelled) {
					t.Errorf("Superseded = %+v, want by %s of %s, started %s, cancelled %v", sup, tt.id, turnOf("m1"),
						tt.wantStarted, tt.po.cancelled)
				}
				if got := startedByMessage(th, tt.id); got != tt.wantStarted {
					t.Errorf("startedByMessage after supersede = %q, want %q", got, tt.wantStarted)
				}
			}
		})
	}
}

// A full queue refuses a message sent after the pause without withdrawing
// the paused turn's questions.
func TestSupersedeWithFullQueueRefuses(t *testing.T) {
	var ids []string
	for i := range MaxQueue {
		ids = append(ids, "q"+string(rune('a'+i)))
	}
	th := pausedOn(running(ids...), 10, 1, "e1")
	if got := classifyMessage(th, "late", 100); got != msgQueue {
		t.Fatalf("classifyMessage(full queue) = %v, want msgQueue (refused, pause kept)", got)
	}
	refused, _, err := applyMessage(th, msg("late"), 100, pauseOutcome{})
	if err != nil || !refused || th.State != ThreadPaused {
		t.Errorf("applyMessage = refused %v, %v, state %s; want refused, paused", refused, err, th.State)
	}
}

// Issue 8 item 3: the withdrawal is recoverable from the paused record, so
// a redelivered superseding message announces what the first attempt
// withdrew before it died.
func TestPlanWithdraw(t *testing.T) {
	now := time.Now()
	rec := func() *kvstate.PausedTurn {
		r := &kvstate.PausedTurn{TurnID: "turn", ExpiresAt: now.Add(time.Minute)}
		for _, id := range []string{"q1", "q2", "q3"} {
			r.Elicitations = append(r.Elicitations, kvstate.Elicitation{
				PendingElicitation: events.PendingElicitation{ID: id}, Status: kvstate.StatusPending})
		}
		r.Elicitations[0].Status = kvstate.StatusConsumed
		return r
	}
	r := rec()
	po, write := planWithdraw(r, "turn", []string{"q2", "q3"}, "m2", now)
	if !write || !slices.Equal(po.cancelled, []string{"q2", "q3"}) || r.WithdrawnBy != "m2" ||
		!slices.Equal(r.Withdrawn, []string{"q2", "q3"}) || !r.Settled() {
		t.Fatalf("first withdraw: %+v write=%v rec=%+v", po, write, r)
	}
	// The process died after storing r; the message is redelivered.
	po, write = planWithdraw(r, "turn", []string{"q2", "q3"}, "m2", now)
	if write || !slices.Equal(po.cancelled, []string{"q2", "q3"}) {
		t.Errorf("redelivered withdraw = %+v write=%v, want the stored withdrawn list, no write", po, write)
	}
	// Past expiresAt the record is expired even if its key lingers.
	po, write = planWithdraw(rec(), "turn", []string{"q2", "q3"}, "m2", now.Add(time.Minute))
	if write || !slices.Equal(po.expired, []string{"q2", "q3"}) || po.cancelled != nil {
		t.Errorf("withdraw at expiresAt = %+v write=%v, want expired", po, write)
	}
	po, _ = planWithdraw(nil, "turn", []string{"q2"}, "m2", now)
	if !slices.Equal(po.expired, []string{"q2"}) {
		t.Errorf("withdraw of a gone record = %+v, want expired", po)
	}
	settled := rec()
	for i := range settled.Elicitations {
		settled.Elicitations[i].Status = kvstate.StatusConsumed
	}
	settled.Resumed = true
	if po, write = planWithdraw(settled, "turn", nil, "m2", now); write || !po.resuming {
		t.Errorf("withdraw of a settled record = %+v write=%v, want resuming", po, write)
	}
}

// Issue 8 item 6: an expiry names only the questions still open.
func TestExpiryListsOnlyOpenQuestions(t *testing.T) {
	th := pausedOn(running("m2"), 10, 2, "q1", "q2")
	turn := th.TurnID
	if err := applyAnswered(th, turn, "q1"); err != nil {
		t.Fatal(err)
	}
	if err := applyAnswered(th, turn, "q1"); !errors.Is(err, kvstate.ErrNoChange) {
		t.Errorf("applyAnswered twice = %v, want ErrNoChange", err)
	}
	if err := applyAnswered(th, "other", "q2"); !errors.Is(err, kvstate.ErrNoChange) {
		t.Errorf("applyAnswered(other turn) = %v, want ErrNoChange", err)
	}
	if err := applyExpiry(th, time.Now()); err != nil {
		t.Fatal(err)
	}
	if th.Expired == nil || !slices.Equal(th.Expired.ElicitationIDs, []string{"q2"}) || th.Expired.TurnID != turn {
		t.Errorf("Expired = %+v, want only q2 of %s", th.Expired, turn)
	}
	if th.State != ThreadRunning || th.StartedBy != "m2" {
		t.Errorf("after expiry: %s started by %s, want the queued m2 running", th.State, th.StartedBy)
	}
}

// Issue 8 item 8: decline and cancel are always honoured; stray content is
// dropped, a confirmation's decline keeps its instructions.
func TestNormalizeAnswer(t *testing.T) {
	form := &schema.ElicitRequestParams{Message: "When?", RequestedSchema: schema.RequestedSchema{
		Type: "object", Properties: map[string]*schema.PropertySchema{"date": {Type: "string", Format: "date"}},
		Required: []string{"date"}}}
	confirm := schema.NewConfirmationRequest(&schema.Tool{Name: "delete_entities"}, schema.ToolCall{Name: "delete_entities", ID: "c1"})
	tests := []struct {
		name        string
		req         *schema.ElicitRequestParams
		in          schema.ElicitResult
		wantContent map[string]any
		wantDropped []string
	}{
		{"form decline with content", form, schema.ElicitResult{Action: schema.ActionDecline, Content: map[string]any{"date": "x"}}, nil, []string{"content.date"}},
		{"form cancel with content", form, schema.ElicitResult{Action: schema.ActionCancel, Content: map[string]any{"date": "2026-01-01"}}, nil, []string{"content.date"}},
		{"confirmation decline keeps instructions", confirm, schema.ElicitResult{Action: schema.ActionDecline,
			Content: map[string]any{"instructions": "keep them", "extra": 1}}, map[string]any{"instructions": "keep them"}, []string{"content.extra"}},
		{"confirmation decline with non-string instructions", confirm, schema.ElicitResult{Action: schema.ActionDecline,
			Content: map[string]any{"instructions": 42}}, nil, []string{"content.instructions"}},
		{"confirmation cancel drops instructions", confirm, schema.ElicitResult{Action: schema.ActionCancel,
			Content: map[string]any{"instructions": "x"}}, nil, []string{"content.instructions"}},
		{"accept is untouched (validated later)", form, schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"date": "x"}}, map[string]any{"date": "x"}, nil},
		{"decline without content", form, schema.ElicitResult{Action: schema.ActionDecline}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, dropped := normalizeAnswer(tt.in, tt.req)
			if out.Action != tt.in.Action || len(out.Content) != len(tt.wantContent) || !slices.Equal(dropped, tt.wantDropped) {
				t.Fatalf("normalizeAnswer = %+v, dropped %v; want content %v, dropped %v", out, dropped, tt.wantContent, tt.wantDropped)
			}
			for k, v := range tt.wantContent {
				if out.Content[k] != v {
					t.Errorf("content[%s] = %v, want %v", k, out.Content[k], v)
				}
			}
			if out.Action != schema.ActionAccept {
				if err := out.Validate(tt.req); err != nil {
					t.Errorf("the normalized %s does not validate: %v", out.Action, err)
				}
			}
		})
	}
}

// The answer transition: checks in the catalogue's order, exactly one
// winner, cancel withdraws the others, decline with stray content is
// honoured, a redelivered winner is neither rejected nor consumed again.
func TestApplyAnswer(t *testing.T) {
	now := time.Now()
	form := schema.ElicitRequestParams{Message: "When?", RequestedSchema: schema.RequestedSchema{
		Type: "object", Properties: map[string]*schema.PropertySchema{"date": {Type: "string", Format: "date"}},
		Required: []string{"date"}}}
	rec := func() *kvstate.PausedTurn {
		r := &kvstate.PausedTurn{TurnID: "turn", ExpiresAt: now.Add(time.Minute)}
		for _, id := range []string{"q1", "q2"} {
			r.Elicitations = append(r.Elicitations, kvstate.Elicitation{
				PendingElicitation: events.PendingElicitation{ID: id, Request: form}, Status: kvstate.StatusPending})
		}
		return r
	}
	ans := func(q string, action schema.ElicitAction, content map[string]any) events.ElicitationResponded {
		return events.ElicitationResponded{ElicitationID: q, Action: action, Content: content, AnsweredBy: "ann"}
	}
	ann := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "ann"}
	date := map[string]any{"date": "2026-12-12"}
	tests := []struct {
		name          string
		rec           func() *kvstate.PausedTurn
		id            string
		in            events.ElicitationResponded
		at            time.Time
		wantReason    string
		wantConsumed  bool
		wantWithdrawn []string
		wantResumed   bool
	}{
		{"unknown ID", rec, "a1", ans("q9", schema.ActionAccept, date), now, events.RejectUnknownOrExpired, false, nil, false},
		{"after expiresAt", rec, "a1", ans("q1", schema.ActionAccept, date), now.Add(time.Minute), events.RejectUnknownOrExpired, false, nil, false},
		{"invalid content", rec, "a1", ans("q1", schema.ActionAccept, map[string]any{"date": "friday"}), now, events.RejectInvalidContent, false, nil, false},
		{"accept one of two", rec, "a1", ans("q1", schema.ActionAccept, date), now, "", true, nil, false},
		{"decline with stray content is honoured", rec, "a1", ans("q1", schema.ActionDecline, map[string]any{"date": "x"}), now, "", true, nil, false},
		{"cancel withdraws the other", rec, "a1", ans("q1", schema.ActionCancel, date), now, "", true, []string{"q2"}, true},
		{"second answer", func() *kvstate.PausedTurn {
			r := rec()
			applyAnswer(r, "a1", ans("q1", schema.ActionAccept, date), ann, now)
			return r
		}, "a2", ans("q1", schema.ActionAccept, date), now, events.RejectAlreadyConsumed, false, nil, false},
		{"redelivered winner", func() *kvstate.PausedTurn {
			r := rec()
			applyAnswer(r, "a1", ans("q1", schema.ActionCancel, nil), ann, now)
			return r
		}, "a1", ans("q1", schema.ActionCancel, nil), now, "", false, []string{"q2"}, true},
		{"answer to a withdrawn question", func() *kvstate.PausedTurn {
			r := rec()
			applyAnswer(r, "a1", ans("q1", schema.ActionCancel, nil), ann, now)
			return r
		}, "a2", ans("q2", schema.ActionAccept, date), now, events.RejectUnknownOrExpired, false, nil, true},
		{"last answer settles", func() *kvstate.PausedTurn {
			r := rec()
			applyAnswer(r, "a1", ans("q1", schema.ActionAccept, date), ann, now)
			return r
		}, "a2", ans("q2", schema.ActionDecline, nil), now, "", true, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rec()
			v := applyAnswer(r, tt.id, tt.in, ann, tt.at)
			if v.reason != tt.wantReason || v.consumed != tt.wantConsumed || !slices.Equal(v.withdrawn, tt.wantWithdrawn) ||
				r.Resumed != tt.wantResumed {
				t.Fatalf("verdict %+v, resumed %v; want reason %q, consumed %v, withdrawn %v, resumed %v",
					v, r.Resumed, tt.wantReason, tt.wantConsumed, tt.wantWithdrawn, tt.wantResumed)
			}
			if v.consumed {
				el := r.Find(tt.in.ElicitationID)
				if el.Status != kvstate.StatusConsumed || el.ResponseEventID != tt.id || el.AnsweredBy != ann {
					t.Errorf("consumed elicitation = %+v", el)
				}
				if el.Result.Action != schema.ActionAccept && el.Result.Content != nil {
					t.Errorf("a %s kept content %v", el.Result.Action, el.Result.Content)
				}
			}
		})
	}
}
