package processor

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// pauseOf is a pause of turn at runs sequence runSeq on questions ids,
// expiring in an hour.
func pauseOf(turn string, runSeq uint64, ids ...string) *PausedTurn {
	pt := &PausedTurn{TurnID: turn, RunID: turn, RunSeq: runSeq, ExpiresAt: time.Now().Add(time.Hour), Record: pauseKey("t", runSeq)}
	for _, id := range ids {
		pt.Elicitations = append(pt.Elicitations, Elicitation{PendingElicitation: events.PendingElicitation{ID: id}, Status: StatusPending})
	}
	return pt
}

// pausedOn pauses t's active turn at runs sequence runSeq with mark.
func pausedOn(t *Thread, runSeq, mark uint64, ids ...string) *Thread {
	if err := applyPause(t, pauseOf(t.TurnID, runSeq, ids...), pauseID(runSeq), mark); err != nil {
		panic(err)
	}
	return t
}

// resumed answers every open question of t's paused turn and resumes it.
func resumed(t *Thread) {
	for i := range t.Paused.Elicitations {
		t.Paused.Elicitations[i].Status = StatusConsumed
	}
	resumePaused(t)
}

func pauseID(runSeq uint64) string { return "pause-" + strconv.FormatUint(runSeq, 10) }

func queueIDs(t *Thread) []string {
	var ids []string
	for _, m := range t.Queue {
		ids = append(ids, m.EventID)
	}
	return ids
}

// A late run.paused (or completion) of a turn that moved
// past it is stale; the thread's state is never rewound.
func TestClassifyRunOutcomes(t *testing.T) {
	turn := turnOf("m1")
	ended := running()
	pausedOn(ended, 10, 1, "q1")
	resumed(ended)
	pausedOn(ended, 20, 1, "q2") // the turn's second pause
	resumed(ended)
	if err := applyEnd(ended, turn, "done", 30, nil, ranTools{}, ""); err != nil {
		t.Fatal(err)
	}

	resumedAgain := running()
	pausedOn(resumedAgain, 10, 1, "q1")
	resumed(resumedAgain)
	pausedOn(resumedAgain, 20, 1, "q2")
	resumed(resumedAgain)

	pausedNow := pausedOn(running(), 10, 1, "q1")

	pausedAgain := running()
	pausedOn(pausedAgain, 10, 1, "q1")
	resumed(pausedAgain)
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
	if err := applyPause(ended, pauseOf(turn, 10, "q1"), "p1", 5); !errors.Is(err, kvstate.ErrNoChange) || ended.State != before.State {
		t.Errorf("applyPause(stale) = %v, state %s, want ErrNoChange, %s", err, ended.State, before.State)
	}
}

// The ordering rule. Messages run in stream order;
// a message already in the stream when the turn paused queues behind it; a
// later one supersedes it and joins the end of the queue, whose head runs
// first.
func TestApplyMessageOrdering(t *testing.T) {
	// settledPaused is a thread paused on a turn whose answers are all in
	// but not yet resumed (the old format resumed in a write of its
	// own, after the paused record's).
	settledPaused := func() *Thread {
		th := pausedOn(running(), 10, 1, "q1")
		th.Paused.Elicitations[0].Status = StatusConsumed
		th.Paused.Resumed = true
		return th
	}
	tests := []struct {
		name          string
		thread        func() *Thread
		id            string
		seq           uint64
		at            time.Duration // after now
		wantAct       msgAction
		wantErr       error
		wantStarted   string
		wantQueue     []string
		wantState     string
		wantCancelled []string
		wantExpired   []string
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
			id:     "m3", seq: 3, wantCancelled: []string{"q1"},
			wantAct: msgSupersede, wantStarted: "m2", wantQueue: []string{"m3"}, wantState: ThreadRunning,
		},
		{
			name:   "supersede of an empty queue starts the message",
			thread: func() *Thread { return pausedOn(running(), 10, 1, "q1") },
			id:     "m2", seq: 2, wantCancelled: []string{"q1"},
			wantAct: msgSupersede, wantStarted: "m2", wantState: ThreadRunning,
		},
		{
			name:   "supersede past the pause's expiry names its questions expired",
			thread: func() *Thread { return pausedOn(running(), 10, 1, "q1") },
			id:     "m2", seq: 2, at: 2 * time.Hour, wantExpired: []string{"q1"},
			wantAct: msgSupersede, wantStarted: "m2", wantState: ThreadRunning,
		},
		{
			name:   "answers all in (resuming): queue",
			thread: settledPaused,
			id:     "m2", seq: 2, wantAct: msgSupersede, wantQueue: []string{"m2"}, wantState: ThreadPaused,
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
			_, started, err := applyMessage(th, msg(tt.id), tt.seq, time.Now().Add(tt.at))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("applyMessage error = %v, want %v", err, tt.wantErr)
			}
			if started != tt.wantStarted || th.State != tt.wantState || !slices.Equal(queueIDs(th), tt.wantQueue) {
				t.Errorf("started %q, state %s, queue %v; want %q, %s, %v", started, th.State, queueIDs(th),
					tt.wantStarted, tt.wantState, tt.wantQueue)
			}
			if tt.wantAct == msgSupersede && tt.wantStarted != "" {
				sup := th.Superseded
				if sup == nil || sup.By != tt.id || sup.TurnID != turnOf("m1") || sup.Started != tt.wantStarted ||
					!slices.Equal(sup.Cancelled, tt.wantCancelled) || !slices.Equal(sup.Expired, tt.wantExpired) {
					t.Errorf("Superseded = %+v, want by %s of %s, started %s, cancelled %v, expired %v", sup, tt.id, turnOf("m1"),
						tt.wantStarted, tt.wantCancelled, tt.wantExpired)
				}
				if got := startedByMessage(th, tt.id); got != tt.wantStarted {
					t.Errorf("startedByMessage after supersede = %q, want %q", got, tt.wantStarted)
				}
				// Withdrawn in the same write: no answer can take them.
				if len(tt.wantCancelled) > 0 && (th.Paused.WithdrawnBy != tt.id || len(th.Paused.PendingIDs()) != 0) {
					t.Errorf("paused turn after supersede = %+v, want its questions withdrawn by %s", th.Paused, tt.id)
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
	refused, _, err := applyMessage(th, msg("late"), 100, time.Now())
	if err != nil || !refused || th.State != ThreadPaused || len(th.pending()) != 1 {
		t.Errorf("applyMessage = refused %v, %v, state %s, pending %v; want refused, paused on e1", refused, err, th.State, th.pending())
	}
}

// A withdrawal stored in the old format, in its own paused
// record (and died before recording the thread) is announced by the
// redelivered message, not made again.
func TestPlanWithdraw(t *testing.T) {
	now := time.Now()
	paused := func() *Thread {
		th := pausedOn(running(), 10, 1, "q1", "q2", "q3")
		th.Paused.Elicitations[0].Status = StatusConsumed
		return th
	}
	th := paused()
	po := planWithdraw(th, "m2", now)
	if r := th.Paused; !slices.Equal(po.cancelled, []string{"q2", "q3"}) || r.WithdrawnBy != "m2" ||
		!slices.Equal(r.Withdrawn, []string{"q2", "q3"}) || !r.Settled() {
		t.Fatalf("first withdraw: %+v paused=%+v", po, r)
	}
	// An old-format processor stored that and died; the message is redelivered.
	if po = planWithdraw(th, "m2", now); !slices.Equal(po.cancelled, []string{"q2", "q3"}) {
		t.Errorf("redelivered withdraw = %+v, want the stored withdrawn list", po)
	}
	// Past expiresAt the questions are expired, not withdrawn.
	th = paused()
	if po = planWithdraw(th, "m2", now.Add(2*time.Hour)); !slices.Equal(po.expired, []string{"q2", "q3"}) || po.cancelled != nil ||
		th.Paused.WithdrawnBy != "" {
		t.Errorf("withdraw at expiresAt = %+v, want expired", po)
	}
	// An old-format pause whose record is gone: nothing to name.
	th = paused()
	th.Paused = nil
	if po = planWithdraw(th, "m2", now); po.expired != nil || po.cancelled != nil {
		t.Errorf("withdraw of a gone record = %+v, want nothing named", po)
	}
	th = paused()
	for i := range th.Paused.Elicitations {
		th.Paused.Elicitations[i].Status = StatusConsumed
	}
	th.Paused.Resumed = true
	if po = planWithdraw(th, "m2", now); !po.resuming {
		t.Errorf("withdraw of a settled pause = %+v, want resuming", po)
	}
}

// An expiry names only the questions still open, and
// only the expiry of the pause record the thread is paused on ends it.
func TestExpiryListsOnlyOpenQuestions(t *testing.T) {
	th := pausedOn(running("m2"), 10, 2, "q1", "q2")
	turn := th.TurnID
	v := applyAnswer(th, "a1", events.ElicitationResponded{ElicitationID: "q1", Action: schema.ActionDecline},
		events.Identity{Principal: events.PrincipalIntegrator}, time.Now())
	if !v.consumed || th.State != ThreadPaused || !slices.Equal(th.pending(), []string{"q2"}) {
		t.Fatalf("after one answer: %+v, state %s, pending %v; want q2 open", v, th.State, th.pending())
	}
	for _, key := range []string{pauseKey("t", 9), "t", pauseKey("other", 10)} {
		if err := applyExpiry(th, key, time.Now()); !errors.Is(err, kvstate.ErrNoChange) {
			t.Errorf("expiry of %s = %v, want ErrNoChange (not the record of this pause)", key, err)
		}
	}
	if err := applyExpiry(th, pauseKey("t", 10), time.Now()); err != nil {
		t.Fatal(err)
	}
	if th.Expired == nil || !slices.Equal(th.Expired.ElicitationIDs, []string{"q2"}) || th.Expired.TurnID != turn {
		t.Errorf("Expired = %+v, want only q2 of %s", th.Expired, turn)
	}
	if th.State != ThreadRunning || th.StartedBy != "m2" {
		t.Errorf("after expiry: %s started by %s, want the queued m2 running", th.State, th.StartedBy)
	}
	if err := applyExpiry(th, pauseKey("t", 10), time.Now()); !errors.Is(err, kvstate.ErrNoChange) {
		t.Errorf("second expiry = %v, want ErrNoChange", err)
	}
	// An old-format pause (no paused turn in the thread) ends with
	// the expiry of its record, keyed by the thread.
	legacy := pausedOn(running(), 10, 1, "q1")
	legacy.Paused = nil
	if err := applyExpiry(legacy, "t", time.Now()); err != nil || legacy.State != ThreadIdle {
		t.Errorf("legacy expiry = %v, state %s; want idle", err, legacy.State)
	}
}

// Decline and cancel are always honoured; stray content is
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
	rec := func() *Thread {
		th := pausedOn(running(), 10, 1, "q1", "q2")
		th.Paused.ExpiresAt = now.Add(time.Minute)
		for i := range th.Paused.Elicitations {
			th.Paused.Elicitations[i].Request = form
		}
		return th
	}
	ans := func(q string, action schema.ElicitAction, content map[string]any) events.ElicitationResponded {
		return events.ElicitationResponded{ElicitationID: q, Action: action, Content: content, AnsweredBy: "ann"}
	}
	ann := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "ann"}
	date := map[string]any{"date": "2026-12-12"}
	answered := func(id string, in events.ElicitationResponded) func() *Thread {
		return func() *Thread {
			th := rec()
			applyAnswer(th, id, in, ann, now)
			return th
		}
	}
	tests := []struct {
		name          string
		rec           func() *Thread
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
		{"second answer", answered("a1", ans("q1", schema.ActionAccept, date)),
			"a2", ans("q1", schema.ActionAccept, date), now, events.RejectAlreadyConsumed, false, nil, false},
		{"redelivered winner", answered("a1", ans("q1", schema.ActionCancel, nil)),
			"a1", ans("q1", schema.ActionCancel, nil), now, "", false, []string{"q2"}, true},
		{"answer to a withdrawn question", answered("a1", ans("q1", schema.ActionCancel, nil)),
			"a2", ans("q2", schema.ActionAccept, date), now, events.RejectUnknownOrExpired, false, nil, true},
		{"last answer settles", answered("a1", ans("q1", schema.ActionAccept, date)),
			"a2", ans("q2", schema.ActionDecline, nil), now, "", true, nil, true},
		{"the turn ended while the question was open", func() *Thread {
			th := rec()
			if err := applyEnd(th, th.TurnID, "f1", 11, nil, ranTools{}, ""); err != nil {
				panic(err)
			}
			return th
		}, "a1", ans("q1", schema.ActionAccept, date), now, events.RejectUnknownOrExpired, false, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := tt.rec()
			state := th.State
			v := applyAnswer(th, tt.id, tt.in, ann, tt.at)
			r := th.Paused
			if v.reason != tt.wantReason || v.consumed != tt.wantConsumed || !slices.Equal(v.withdrawn, tt.wantWithdrawn) ||
				r.Resumed != tt.wantResumed {
				t.Fatalf("verdict %+v, resumed %v; want reason %q, consumed %v, withdrawn %v, resumed %v",
					v, r.Resumed, tt.wantReason, tt.wantConsumed, tt.wantWithdrawn, tt.wantResumed)
			}
			if v.consumed != v.write {
				t.Errorf("consumed %v but write %v", v.consumed, v.write)
			}
			// The answer that settles the pause resumes the turn in the
			// same write; any other leaves the thread as it was.
			switch {
			case v.consumed && tt.wantResumed:
				if th.State != ThreadRunning || !th.Seen(tt.id) {
					t.Errorf("after the settling answer: state %s, seen %v; want running, the answer recorded", th.State, th.Seen(tt.id))
				}
			case th.State != state:
				t.Errorf("state %s, want %s unchanged", th.State, state)
			}
			if v.consumed {
				el := r.Find(tt.in.ElicitationID)
				if el.Status != StatusConsumed || el.ResponseEventID != tt.id || el.AnsweredBy != ann {
					t.Errorf("consumed elicitation = %+v", el)
				}
				if el.Result.Action != schema.ActionAccept && el.Result.Content != nil {
					t.Errorf("a %s kept content %v", el.Result.Action, el.Result.Content)
				}
			}
		})
	}
}

// The queue is bounded in bytes as well as in messages, so queue, history
// and paused turn fit the KV value together.
func TestQueueBoundedInBytes(t *testing.T) {
	th := running()
	big := func(id string) QueuedMessage {
		m := msg(id)
		m.Message.Text = strings.Repeat("x", events.MaxMessageText)
		return m
	}
	fits := MaxQueueBytes / queueBytes(big("probe"))
	for i := range fits {
		if refused, _, err := applyMessage(th, big(fmt.Sprint("b", i)), uint64(2+i), time.Now()); err != nil || refused {
			t.Fatalf("message %d of %d refused (%v)", i+1, fits, err)
		}
	}
	refused, _, err := applyMessage(th, big("over"), uint64(2+fits), time.Now())
	if err != nil || !refused || len(th.Queue) != fits || !slices.Contains(th.Refused, "over") {
		t.Errorf("message past %d bytes: refused %v, %v, queue %d; want refused, queue %d", MaxQueueBytes, refused, err, len(th.Queue), fits)
	}
	if n := queueBytes(th.Queue...); n > MaxQueueBytes {
		t.Errorf("queue holds %d bytes, over %d", n, MaxQueueBytes)
	}
}
