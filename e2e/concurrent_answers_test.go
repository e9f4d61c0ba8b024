package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// The thread aggregate on a real server with three processors:
// on several threads at once, every question of a three-question pause is
// answered twice (a double click, two event IDs) while a new message is
// sent, all concurrently. Per thread: at most one accepted answer per
// question; the pause ends one way only — every answer in and the turn
// completes once (the message queues behind it), or the message
// supersedes it and withdraws exactly the questions not yet answered, and
// the turn never completes; a rejected answer is already_consumed or
// (superseded) unknown_or_expired; the new message's turn completes once.
func TestConcurrentAnswersAndSupersede(t *testing.T) {
	s := start(t, options{gate: confirmAll, processors: 3})
	const threads = 4
	ids := map[string][]string{}
	for i := range threads {
		th := fmt.Sprint("rv", i)
		s.send(th, "plan three events for the sprint")
	}
	for i := range threads {
		th := fmt.Sprint("rv", i)
		for n := 1; n <= 3; n++ {
			id, _ := s.question(th, n)
			ids[th] = append(ids[th], id)
		}
	}
	time.Sleep(200 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range threads {
		th := fmt.Sprint("rv", i)
		for _, q := range ids[th] {
			for range 2 {
				wg.Go(func() { s.answer(th, q, schema.ActionAccept, nil) })
			}
		}
		wg.Go(func() { s.send(th, "hello") })
	}
	wg.Wait()
	for i := range threads {
		th := fmt.Sprint("rv", i)
		s.completed(th, 1) // the new message's turn, or the paused one's
		// Let the thread settle: the other turn, if any, completes too.
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			done := len(s.rec.matching(th, events.TypeTurnCompleted))
			cancelled := len(s.rec.matching(th, events.TypeElicitationCancelled))
			if done == 2 || done == 1 && cancelled == 1 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		checkAnsweredTwiceThread(t, s, th, ids[th])
	}
}

func checkAnsweredTwiceThread(t *testing.T, s *system, th string, qs []string) {
	t.Helper()
	accepted := map[string]int{}
	for _, e := range s.rec.matching(th, events.TypeElicitationResponded) {
		d, _ := events.Data[events.ElicitationResponded](e)
		accepted[d.ElicitationID]++
	}
	for _, q := range qs {
		if accepted[q] > 1 {
			t.Errorf("%s: question %s accepted %d times", th, q, accepted[q])
		}
	}
	cancelled := s.rec.matching(th, events.TypeElicitationCancelled)
	completed := s.rec.matching(th, events.TypeTurnCompleted)
	var firstTurn string
	if r := s.rec.matching(th, events.TypeTurnPaused); len(r) > 0 {
		d, _ := events.Data[events.TurnPaused](r[0])
		firstTurn = d.TurnID
	}
	pausedDone := 0
	for _, e := range completed {
		if d, _ := events.Data[events.TurnCompleted](e); d.TurnID == firstTurn {
			pausedDone++
		}
	}
	t.Logf("%s: %d withdrawn notices, %d turns completed, accepted %v", th, len(cancelled), len(completed), accepted)
	switch len(cancelled) {
	case 0: // every answer came in first: the turn resumed
		if pausedDone != 1 || len(completed) != 2 {
			t.Errorf("%s: not superseded, yet the paused turn completed %d times, %d turns in all; want 1, 2:\n%s", th, pausedDone, len(completed), s.rec.dump(th))
		}
		for _, q := range qs {
			if accepted[q] != 1 {
				t.Errorf("%s: resumed, yet question %s accepted %d times", th, q, accepted[q])
			}
		}
	case 1:
		d, _ := events.Data[events.ElicitationCancelled](cancelled[0])
		if pausedDone != 0 || len(completed) != 1 {
			t.Errorf("%s: superseded, yet the paused turn completed %d times, %d turns in all; want 0, 1:\n%s", th, pausedDone, len(completed), s.rec.dump(th))
		}
		withdrawn := map[string]bool{}
		for _, id := range d.ElicitationIDs {
			withdrawn[id] = true
		}
		for _, q := range qs {
			if withdrawn[q] == (accepted[q] == 1) {
				t.Errorf("%s: question %s accepted %d times, withdrawn %v: want exactly one of them", th, q, accepted[q], withdrawn[q])
			}
		}
	default:
		t.Errorf("%s: %d elicitation.cancelled, want at most 1:\n%s", th, len(cancelled), s.rec.dump(th))
	}
	for _, r := range s.rec.rejections(th) {
		if r.Reason != events.RejectAlreadyConsumed && r.Reason != events.RejectUnknownOrExpired {
			t.Errorf("%s: answer to %s rejected %s (%s)", th, r.ElicitationID, r.Reason, r.Detail)
		}
	}
	if n := len(s.rec.matching(th, events.TypeElicitationRejected)) + len(s.rec.matching(th, events.TypeElicitationResponded)); n != 6 {
		t.Errorf("%s: %d answers accepted or rejected, want all 6:\n%s", th, n, s.rec.dump(th))
	}
}
