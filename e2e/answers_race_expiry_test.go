package e2e

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Answers racing a pause's expiry on a real
// server with three processors and a one-second pause TTL. On several
// threads a turn pauses with three questions; each question is answered
// twice (two event IDs) at random moments around expiresAt, some threads
// also get a new message then. Per thread: each answer gets exactly one
// verdict, at most one is accepted per question; the paused turn ends one
// way only — resumed (every question accepted, turn.completed once, no
// elicitation.expired or .cancelled) or ended unanswered
// (elicitation.expired or .cancelled once, naming no accepted question,
// and no turn.completed, turn.failed or run.resumed for it); a created
// event exists only for a turn that completed, once per accepted question.
func TestCrashAnswersRaceExpiry(t *testing.T) {
	s := start(t, options{gate: confirmAll, processors: 3, pauseTTL: time.Second})
	const threads = 6
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var mu sync.Mutex
	delay := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(600+rnd.IntN(800)) * time.Millisecond // 0.6-1.4 s after the questions
	}
	for i := range threads {
		s.send(fmt.Sprint("rx", i), "plan three events for the race")
	}
	ids := map[string][]string{}
	for i := range threads {
		th := fmt.Sprint("rx", i)
		for n := 1; n <= 3; n++ {
			id, _ := s.question(th, n)
			ids[th] = append(ids[th], id)
		}
	}
	var wg sync.WaitGroup
	for i := range threads {
		th := fmt.Sprint("rx", i)
		for _, q := range ids[th] {
			for range 2 {
				d := delay()
				wg.Go(func() { time.Sleep(d); s.answer(th, q, schema.ActionAccept, nil) })
			}
		}
		if i%2 == 1 {
			d := delay()
			wg.Go(func() { time.Sleep(d); s.send(th, "list all events") })
		}
	}
	wg.Wait()
	// Every verdict is in once the expiry (the record's TTL: 2 s) and the
	// turns that resumed have ended.
	deadline := time.Now().Add(15 * time.Second)
	for i := range threads {
		th := fmt.Sprint("rx", i)
		want := 1 + i%2 // turns to end: the paused one, and the new message's
		for time.Now().Before(deadline) {
			ended := len(s.rec.matching(th, events.TypeTurnCompleted)) + len(s.rec.matching(th, events.TypeTurnFailed)) +
				len(s.rec.matching(th, events.TypeElicitationExpired)) + len(s.rec.matching(th, events.TypeElicitationCancelled))
			verdicts := len(s.rec.matching(th, events.TypeElicitationRejected)) + len(s.rec.matching(th, events.TypeElicitationResponded))
			if ended >= want && verdicts >= 6 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(500 * time.Millisecond)
	created := map[string]int{}
	for _, le := range s.ledger() {
		created[le.Tool]++
	}
	completedPaused := 0
	for i := range threads {
		th := fmt.Sprint("rx", i)
		completedPaused += checkRaceThread(t, s, th, ids[th], i%2 == 1)
	}
	// Each completed paused turn created three events (every question
	// accepted); no other turn created any.
	if got, want := created["create_event"], 3*completedPaused; got != want {
		t.Errorf("create_event executed %d times, want %d (3 per paused turn that completed, %d)", got, want, completedPaused)
	}
}

// checkRaceThread checks one thread of TestCrashAnswersRaceExpiry and
// returns 1 if its paused turn completed.
func checkRaceThread(t *testing.T, s *system, th string, qs []string, sentMessage bool) int {
	t.Helper()
	var pausedTurn string
	if r := s.rec.matching(th, events.TypeTurnPaused); len(r) > 0 {
		d, _ := events.Data[events.TurnPaused](r[0])
		pausedTurn = d.TurnID
	}
	accepted := map[string]int{}
	verdicts := map[string]int{}
	for _, e := range s.rec.matching(th, events.TypeElicitationResponded) {
		d, _ := events.Data[events.ElicitationResponded](e)
		accepted[d.ElicitationID]++
		verdicts[e.ID()]++
	}
	for _, r := range s.rec.rejections(th) {
		verdicts[r.RespondedEventID]++
		if r.Reason != events.RejectAlreadyConsumed && r.Reason != events.RejectUnknownOrExpired {
			t.Errorf("%s: answer to %s rejected %s (%s)", th, r.ElicitationID, r.Reason, r.Detail)
		}
	}
	if len(verdicts) != 6 {
		t.Errorf("%s: %d of 6 answers got a verdict:\n%s", th, len(verdicts), s.rec.dump(th))
	}
	for id, n := range verdicts {
		if n != 1 {
			t.Errorf("%s: answer %s got %d verdicts", th, id, n)
		}
	}
	for _, q := range qs {
		if accepted[q] > 1 {
			t.Errorf("%s: question %s accepted %d times", th, q, accepted[q])
		}
	}
	ends := func(typ events.Type) int {
		n := 0
		for _, e := range s.rec.matching(th, typ) {
			if v, _ := e.Extensions()[events.ExtTurnID].(string); v == pausedTurn {
				n++
			}
		}
		return n
	}
	completed, failed := ends(events.TypeTurnCompleted), ends(events.TypeTurnFailed)
	var unanswered []string // named by elicitation.expired / .cancelled
	for _, typ := range []events.Type{events.TypeElicitationExpired, events.TypeElicitationCancelled} {
		for _, e := range s.rec.matching(th, typ) {
			var d struct {
				TurnID         string   `json:"turnId"`
				ElicitationIDs []string `json:"elicitationIds"`
			}
			_ = e.DataAs(&d)
			if d.TurnID == pausedTurn {
				unanswered = append(unanswered, d.ElicitationIDs...)
			}
		}
	}
	ended := 0
	if len(s.rec.matching(th, events.TypeElicitationExpired))+len(s.rec.matching(th, events.TypeElicitationCancelled)) > 0 {
		ended = 1
	}
	t.Logf("%s: accepted %v, completed %d, failed %d, ended unanswered %v (message sent: %v)", th, accepted, completed, failed, unanswered, sentMessage)
	switch {
	case completed+failed+ended != 1 || len(s.rec.matching(th, events.TypeElicitationExpired))+len(s.rec.matching(th, events.TypeElicitationCancelled)) > 1:
		t.Errorf("%s: the paused turn ended %d times (completed %d, failed %d, expired or withdrawn %d); want once:\n%s",
			th, completed+failed+ended, completed, failed, ended, s.rec.dump(th))
	case completed == 1:
		for _, q := range qs {
			if accepted[q] != 1 {
				t.Errorf("%s: the turn resumed, yet question %s accepted %d times", th, q, accepted[q])
			}
		}
	case ended == 1:
		for _, q := range unanswered {
			if accepted[q] > 0 {
				t.Errorf("%s: question %s accepted and named expired or withdrawn:\n%s", th, q, s.rec.dump(th))
			}
		}
		if n := len(s.rec.matching(th, events.TypeElicitationExpired)); n > 0 && !slices.ContainsFunc(qs, func(q string) bool { return accepted[q] == 0 }) {
			t.Errorf("%s: every question accepted, yet the turn expired:\n%s", th, s.rec.dump(th))
		}
	}
	if completed == 1 {
		return 1
	}
	return 0
}
