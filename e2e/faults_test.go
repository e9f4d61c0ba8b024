package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// Tests of the thread state machine under crashes and races, expiry and
// bad input, each on a real embedded server.

// completedTurns returns the turn IDs of thread's turn.completed events in
// stream order.
func (s *system) completedTurns(thread string) []string {
	var ids []string
	for _, e := range s.rec.matching(thread, events.TypeTurnCompleted) {
		tc, _ := events.Data[events.TurnCompleted](e)
		ids = append(ids, tc.TurnID)
	}
	return ids
}

// Item 1: a late copy of a turn's first run.paused (a processor frozen past
// AckWait, or killed before acking) after the turn paused again and
// completed is ignored: the paused record is not rewound, and the thread's
// next turn asks normally instead of being dead-lettered.
func TestLatePauseIgnored(t *testing.T) {
	s := start(t, options{gate: confirmAll})
	nc := s.srv.Connect(t)
	pauses, err := nc.SubscribeSync(events.SubjectRunPaused)
	if err != nil {
		t.Fatal(err)
	}
	s.send("lp", "create an event for the launch party")
	confirm, q := s.question("lp", 1)
	if !q.IsToolConfirmation() {
		t.Fatalf("question 1 = %s, want a confirmation", mustJSON(q))
	}
	s.answer("lp", confirm, schema.ActionAccept, nil)
	form, _ := s.question("lp", 2)
	s.answer("lp", form, schema.ActionAccept, map[string]any{"title": "Launch party", "date": "2026-12-12"})
	s.completed("lp", 1)

	first, err := pauses.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("the first run.paused was not seen: %v", err)
	}
	late := &nats.Msg{Subject: first.Subject, Header: nats.Header{}, Data: first.Data}
	for k, v := range first.Header {
		if k != nats.MsgIdHdr {
			late.Header[k] = v
		}
	}
	if _, err := s.bus.JetStream().PublishMsg(s.ctx, late); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let the processor handle the late pause

	s.send("lp", "create an event for the kickoff")
	c2, _ := s.question("lp", 3)
	s.answer("lp", c2, schema.ActionAccept, nil)
	f2, _ := s.question("lp", 4)
	s.answer("lp", f2, schema.ActionAccept, map[string]any{"title": "Kickoff", "date": "2026-12-13"})
	if text := s.completed("lp", 2); !strings.Contains(text, "Kickoff") {
		t.Fatalf("second turn completed = %q", text)
	}
	if n := len(s.rec.matching("lp", events.TypeTurnFailed)); n != 0 {
		t.Fatalf("%d turn.failed on the thread:\n%s", n, s.rec.dump("lp"))
	}
}

// startAgent starts an agent on its own connection (for a system started
// with noAgent), stopped with the test.
func (s *system) startAgent() {
	s.t.Helper()
	s.startAgentIn(s.model)
}

// Item 2, as the issue reproduces it: no agent running, #1 starts and #2
// queues; an agent starts and #1 pauses; #3, sent after the pause,
// supersedes #1 and runs after #2 (stream order), not before it.
func TestFIFOAcrossSupersede(t *testing.T) {
	s := start(t, options{processors: 2, noAgent: true})
	m1 := s.send("fs", deleteDrafts)
	m2 := s.send("fs", "list everything")
	kv, err := s.bus.JetStream().KeyValue(s.ctx, kvstate.BucketThreads)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// Only the queue of the processor's record.
		var th struct {
			Queue []struct {
				EventID string `json:"eventId"`
			} `json:"queue"`
		}
		entry, err := kv.Get(s.ctx, "fs")
		if err == nil {
			err = json.Unmarshal(entry.Value(), &th)
		}
		if err == nil && len(th.Queue) == 1 && th.Queue[0].EventID == m2.ID() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("#2 was not queued behind #1: %+v, %v", th, err)
		}
	}
	s.startAgent()
	s.rec.await(t, 10*time.Second, "fs", events.TypeTurnPaused, 1)
	m3 := s.send("fs", "what can you do?")
	c := s.rec.await(t, 10*time.Second, "fs", events.TypeElicitationCancelled, 1)
	if d, _ := events.Data[events.ElicitationCancelled](c); d.TurnID != events.DerivedID("turn", m1.ID()) {
		t.Fatalf("cancelled %+v, want the questions of the first turn", d)
	}
	s.rec.await(t, 10*time.Second, "fs", events.TypeTurnCompleted, 2)
	want := []string{events.DerivedID("turn", m2.ID()), events.DerivedID("turn", m3.ID())}
	if got := s.completedTurns("fs"); !slices.Equal(got, want) {
		t.Fatalf("turns completed in order %v, want %v (queued message first)\n%s", got, want, s.rec.dump("fs"))
	}
}

// Item 4: two messages sent back to back (1 ms apart) to an idle thread:
// the second was in the stream before the first turn paused, so it queues
// behind the pause (documented rule, docs/events.md) and runs after the
// answer, every time.
func TestBackToBackMessagesQueue(t *testing.T) {
	s := start(t, options{processors: 2})
	const pairs = 6
	threads := make([]string, pairs)
	seconds := make([]string, pairs)
	for i := range pairs {
		th := "bb" + string(rune('a'+i))
		threads[i] = th
		s.send(th, deleteDrafts)
		time.Sleep(time.Millisecond)
		seconds[i] = s.send(th, "list everything").ID()
	}
	for i, th := range threads {
		id, _ := s.question(th, 1)
		time.Sleep(100 * time.Millisecond) // the queued message must not overtake the pause
		if n := len(s.rec.matching(th, events.TypeTurnCompleted)); n != 0 {
			t.Fatalf("pair %d: the second message ran while the first turn waited:\n%s", i, s.rec.dump(th))
		}
		s.answer(th, id, schema.ActionDecline, nil)
		s.rec.await(t, 10*time.Second, th, events.TypeTurnCompleted, 2)
		if got := s.completedTurns(th); got[1] != events.DerivedID("turn", seconds[i]) {
			t.Fatalf("pair %d: completed %v, want the second message last", i, got)
		}
		if n := len(s.rec.matching(th, events.TypeElicitationCancelled)); n != 0 {
			t.Fatalf("pair %d: the first turn was superseded:\n%s", i, s.rec.dump(th))
		}
	}
	if n := s.drafts(); n != 10 {
		t.Fatalf("drafts = %d, want 10 (every deletion declined)", n)
	}
}

// Item 3, across an upgrade: a processor of the version before the
// thread held its paused turn, killed after storing the withdrawal of the
// turn's questions in their own record and before recording the new turn:
// this version adopts that record, and the redelivered message announces
// the withdrawal (elicitation.cancelled), so the superseded turn has an
// end. (This version withdraws in the thread's own write; the chaos test
// kills it between that write and the announcement.)
func TestSupersedeRecoveredAfterCrash(t *testing.T) {
	s := start(t, options{})
	s.send("cr", deleteDrafts)
	q, _ := s.question("cr", 1)
	s.rec.await(t, 10*time.Second, "cr", events.TypeTurnPaused, 1)
	e, err := events.New("/parley/test", events.TypeTurnRequested, "cr", events.TurnRequested{
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: "list everything"}})
	if err != nil {
		t.Fatal(err)
	}
	// What a processor of the version before the thread held its paused
	// turn stored before dying: the withdrawal in the paused turn's own
	// record, the thread still paused.
	s.asLegacy("cr", func(p map[string]any) {
		p["elicitations"].([]any)[0].(map[string]any)["status"] = "cancelled"
		p["withdrawnBy"], p["withdrawn"] = e.ID(), []string{q}
	})
	// The message, redelivered to a live processor.
	if _, err := s.bus.Publish(s.ctx, events.InputSubject(events.PrincipalIntegrator, "cr", events.ChatTurnRequested), e); err != nil {
		t.Fatal(err)
	}
	c := s.rec.await(t, 10*time.Second, "cr", events.TypeElicitationCancelled, 1)
	if d, _ := events.Data[events.ElicitationCancelled](c); !slices.Equal(d.ElicitationIDs, []string{q}) {
		t.Fatalf("cancelled %v, want [%s]", d.ElicitationIDs, q)
	}
	s.completed("cr", 1)
}

// Item 6: with three confirmations in one step and one accepted, the
// expiry lists only the two still pending.
func TestExpiryListsOnlyPending(t *testing.T) {
	s := start(t, options{gate: confirmAll, pauseTTL: 2 * time.Second})
	s.send("ex", "plan three events for expiry")
	first, _ := s.question("ex", 1)
	second, _ := s.question("ex", 2)
	third, _ := s.question("ex", 3)
	s.answer("ex", first, schema.ActionAccept, nil)
	x := s.rec.await(t, 10*time.Second, "ex", events.TypeElicitationExpired, 1)
	d, _ := events.Data[events.ElicitationExpired](x)
	got := slices.Sorted(slices.Values(d.ElicitationIDs))
	want := slices.Sorted(slices.Values([]string{second, third}))
	if !slices.Equal(got, want) {
		t.Fatalf("expired %v, want only the pending %v (not the accepted %s)", d.ElicitationIDs, want, first)
	}
}

// Item 8: a decline or cancel that carries content is honoured (the
// content is dropped), never refused as invalid_content.
func TestDeclineAndCancelWithContentHonoured(t *testing.T) {
	s := start(t, options{})
	for _, c := range []struct {
		thread string
		action schema.ElicitAction
	}{{"dc1", schema.ActionDecline}, {"dc2", schema.ActionCancel}} {
		s.send(c.thread, "create an event for the launch party")
		id, _ := s.question(c.thread, 1)
		s.answer(c.thread, id, c.action, map[string]any{"title": "Launch party", "date": "not a date"})
		s.completed(c.thread, 1)
		if r := s.rec.rejections(c.thread); len(r) != 0 {
			t.Fatalf("%s with content rejected: %+v", c.action, r)
		}
	}
	// A confirmation's decline keeps its instructions.
	s.send("dc3", deleteDrafts)
	id, _ := s.question("dc3", 1)
	s.answer("dc3", id, schema.ActionDecline, map[string]any{"instructions": "keep them", "stray": true})
	if text := s.completed("dc3", 1); !strings.Contains(text, "keep them") {
		t.Fatalf("completed = %q, want the instructions", text)
	}
}

// Item 10: one decoder, one verdict. A malformed attribute on
// turn.requested is refused turn.rejected invalid_event naming the
// attribute, as on elicitation.responded; the thread goes on.
func TestMalformedHeaderRejected(t *testing.T) {
	s := start(t, options{})
	raw := func(suffix string, header nats.Header, data string) {
		h := nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"req-1"}, "ce-source": {"/test"},
			"ce-type": {string(events.TypeTurnRequested)}, "ce-subject": {"mh"}, "Content-Type": {"application/json"}}
		for k, v := range header {
			h[k] = v
		}
		if _, err := s.bus.JetStream().PublishMsg(s.ctx, &nats.Msg{Subject: events.InputSubject(events.PrincipalIntegrator, "mh", suffix), Header: h,
			Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	raw(events.ChatTurnRequested, nats.Header{"ce-id": {"req%zz"}}, `{"message":{"role":"user","text":"list everything"}}`)
	raw(events.ChatTurnRequested, nats.Header{"ce-id": {"req-2"}, "ce-source": {":nope"}}, `{"message":{"role":"user","text":"list everything"}}`)
	raw(events.ChatElicitationResponded, nats.Header{"ce-id": {"ans%zz"}, "ce-type": {string(events.TypeElicitationResponded)}},
		`{"elicitationId":"e1","action":"cancel"}`)
	s.rec.await(t, 10*time.Second, "mh", events.TypeTurnRejected, 2)
	var paths []string
	for _, e := range s.rec.matching("mh", events.TypeTurnRejected) {
		d, _ := events.Data[events.TurnRejected](e)
		if d.Reason != events.RejectInvalidEvent || len(d.Errors) != 1 {
			t.Fatalf("turn.rejected = %s, want invalid_event with one error", mustJSON(d))
		}
		paths = append(paths, d.Errors[0].Path)
	}
	if slices.Sort(paths); !slices.Equal(paths, []string{"ce-id", "ce-source"}) {
		t.Fatalf("rejections name %v, want [ce-id ce-source]", paths)
	}
	r := s.rec.await(t, 10*time.Second, "mh", events.TypeElicitationRejected, 1)
	if d, _ := events.Data[events.ElicitationRejected](r); d.Reason != events.RejectInvalidEvent || len(d.Errors) != 1 ||
		d.Errors[0].Path != "ce-id" || d.ElicitationID != "e1" {
		t.Fatalf("elicitation.rejected = %s, want invalid_event naming ce-id for e1", mustJSON(d))
	}
	if n := len(s.rec.matching("mh", events.TypeTurnFailed)); n != 0 {
		t.Fatalf("turn.failed on the thread:\n%s", s.rec.dump("mh"))
	}
	s.send("mh", "list everything")
	s.completed("mh", 1)
}
