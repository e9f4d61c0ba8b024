package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/gate"
	"github.com/parley-dev/parley/workers/processor"
)

// confirmAll gates every non-read-only tool (create_event included).
var confirmAll = &gate.Config{Agents: map[string]gate.AgentConfig{"*": {RequireToolConfirmation: true}}}

// One model step asks three gated calls and one read-only call: only the
// gated ones ask, each gets its own elicitation, they are answered in the
// order 3, 1, 2 by different people, and the run resumes once all three are
// settled with exactly one result per call.
func TestParallelApprovalsAnyOrder(t *testing.T) {
	s := start(t, options{gate: confirmAll, processors: 2})
	// Through the gateway principal, trusted to name its users: alice's
	// thread, shared with bob and carol.
	gw := s.client.WithPrincipal(events.PrincipalGateway)
	req, err := events.New("/parley/test", events.TypeTurnRequested, "p1", events.TurnRequested{User: "alice",
		Share:   []events.Identity{{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}, {Principal: events.PrincipalGateway, OnBehalfOf: "carol"}},
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: "plan three events for the sprint"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.Publish(s.ctx, req); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 3)
	titles := make([]string, 3)
	for i := range 3 {
		id, q := s.question("p1", i+1)
		ids[i] = id
		raw, _ := json.Marshal(q.Meta[schema.MetaToolCall])
		var tc schema.ToolCallMeta
		if err := json.Unmarshal(raw, &tc); err != nil || tc.Name != "create_event" {
			t.Fatalf("question %d is not a create_event confirmation: %s", i+1, raw)
		}
		titles[i] = string(tc.Arguments)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(s.rec.matching("p1", events.TypeElicitationRequested)); n != 3 {
		t.Fatalf("%d questions, want 3 (the read-only call must not ask)", n)
	}
	answer := func(i int, action schema.ElicitAction, by string, content map[string]any) {
		if _, err := gw.Answer(s.ctx, "p1", ids[i], schema.ElicitResult{Action: action, Content: content}, by); err != nil {
			t.Fatal(err)
		}
	}
	answer(2, schema.ActionAccept, "carol", nil)
	answer(0, schema.ActionDecline, "alice", map[string]any{"instructions": "not the kickoff"})
	time.Sleep(300 * time.Millisecond)
	if n := len(s.rec.matching("p1", events.TypeTurnCompleted)); n != 0 {
		t.Fatal("the run resumed before every question was settled")
	}
	answer(1, schema.ActionAccept, "bob", nil)
	e := s.rec.await(t, 10*time.Second, "p1", events.TypeTurnCompleted, 1)
	tc, err := events.Data[events.TurnCompleted](e)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(tc.Message.Text, "- "); got != 3 {
		t.Fatalf("final message lists %d results, want one per gated call:\n%s", got, tc.Message.Text)
	}
	if !strings.Contains(tc.Message.Text, "User declined execution of create_event: not the kickoff") {
		t.Fatalf("decline missing from:\n%s", tc.Message.Text)
	}
	if l := s.ledger(); len(l) != 2 {
		t.Fatalf("ledger has %d effects, want 2 (two accepted)", len(l))
	}
	by := map[string]string{}
	for _, d := range tc.Decisions {
		if d.Tool == "create_event" {
			by[d.ElicitationID] = d.AnsweredBy.OnBehalfOf + "/" + string(d.Action)
			if d.AnsweredBy.Principal != events.PrincipalGateway {
				t.Fatalf("decision answered by %+v, want through the gateway principal", d.AnsweredBy)
			}
		} else if !d.AnsweredBy.IsZero() || d.Action != "" {
			t.Fatalf("machine decision presented as a person's: %+v", d)
		}
	}
	want := map[string]string{ids[0]: "alice/decline", ids[1]: "bob/accept", ids[2]: "carol/accept"}
	for id, w := range want {
		if by[id] != w {
			t.Fatalf("decisions = %v, want %v", by, want)
		}
	}
	if s.model.calls.Load() != 2 {
		t.Fatalf("model called %d times, want 2 (one step, one answer)", s.model.calls.Load())
	}
}

// Cancelling one of several questions ends the iteration and withdraws the
// others.
func TestCancelOneOfParallelApprovals(t *testing.T) {
	s := start(t, options{gate: confirmAll})
	s.send("p2", "plan three events for the offsite")
	first, _ := s.question("p2", 1)
	s.question("p2", 3)
	s.answer("p2", first, schema.ActionCancel, nil)
	if text := s.completed("p2", 1); !strings.Contains(text, "cancelled") {
		t.Fatalf("completed = %q, want a cancellation", text)
	}
	c := s.rec.await(t, 5*time.Second, "p2", events.TypeElicitationCancelled, 1)
	d, _ := events.Data[events.ElicitationCancelled](c)
	if len(d.ElicitationIDs) != 2 {
		t.Fatalf("withdrawn %v, want the two other questions", d.ElicitationIDs)
	}
	if len(s.ledger()) != 0 {
		t.Fatal("a cancelled step ran a tool")
	}
}

// An answer meant for an older call never lands on a newer one.
func TestStaleAnswerForOlderCall(t *testing.T) {
	s := start(t, options{})
	s.send("p3", deleteDrafts)
	old, _ := s.question("p3", 1)
	s.answer("p3", old, schema.ActionDecline, nil)
	s.completed("p3", 1)
	s.send("p3", deleteDrafts)
	newer, _ := s.question("p3", 2)
	if newer == old {
		t.Fatal("the new call reused the old elicitation ID")
	}
	s.answer("p3", old, schema.ActionAccept, nil) // a stale accept
	rej := s.rec.await(t, 5*time.Second, "p3", events.TypeElicitationRejected, 1)
	d, _ := events.Data[events.ElicitationRejected](rej)
	if d.Reason != events.RejectUnknownOrExpired || d.ElicitationID != old {
		t.Fatalf("rejection = %+v, want unknown_or_expired for the old ID", d)
	}
	if n := s.drafts(); n != 10 {
		t.Fatalf("the stale accept deleted something: %d drafts left", n)
	}
	s.answer("p3", newer, schema.ActionAccept, nil)
	if text := s.completed("p3", 2); !strings.Contains(text, "Deleted 10") {
		t.Fatalf("completed = %q", text)
	}
}

// Messages of one thread are taken in order, one turn at a time, even with
// two processors handling events in parallel.
func TestFIFOOnOneThread(t *testing.T) {
	s := start(t, options{processors: 2})
	var sent, requests []string
	for i := range 8 {
		text := "list everything"
		if i%2 == 1 {
			text = "what can you do?"
		}
		id := s.send("fifo", text).ID()
		requests = append(requests, id)
		sent = append(sent, events.DerivedID("turn", id))
	}
	s.rec.await(t, 20*time.Second, "fifo", events.TypeTurnCompleted, len(sent))
	var got []string
	for _, e := range s.rec.matching("fifo", events.TypeTurnCompleted) {
		tc, _ := events.Data[events.TurnCompleted](e)
		got = append(got, tc.TurnID)
		if want := requests[len(got)-1]; tc.RequestEventID != want {
			t.Fatalf("turn.completed %d answers request %s, want %s", len(got), tc.RequestEventID, want)
		}
	}
	for i := range sent {
		if got[i] != sent[i] {
			t.Fatalf("turn %d completed out of order:\n got %v\nwant %v", i, got, sent)
		}
	}
}

// A new message on a paused thread cancels the pending question and starts
// a new turn; the old question can no longer be answered.
func TestNewMessageOnPausedThreadCancels(t *testing.T) {
	s := start(t, options{})
	s.send("p4", deleteDrafts)
	id, _ := s.question("p4", 1)
	s.send("p4", "list everything")
	c := s.rec.await(t, 5*time.Second, "p4", events.TypeElicitationCancelled, 1)
	d, _ := events.Data[events.ElicitationCancelled](c)
	if len(d.ElicitationIDs) != 1 || d.ElicitationIDs[0] != id {
		t.Fatalf("cancelled %v, want [%s]", d.ElicitationIDs, id)
	}
	s.completed("p4", 1)
	s.answer("p4", id, schema.ActionAccept, nil)
	rej := s.rec.await(t, 5*time.Second, "p4", events.TypeElicitationRejected, 1)
	if r, _ := events.Data[events.ElicitationRejected](rej); r.Reason != events.RejectUnknownOrExpired {
		t.Fatalf("late answer: %+v, want unknown_or_expired", r)
	}
	if s.drafts() != 10 {
		t.Fatal("the cancelled confirmation ran")
	}
}

// A pause record of a format this code does not read fails closed with
// state_incompatible, and the thread stays usable.
func TestStateIncompatible(t *testing.T) {
	s := start(t, options{})
	s.send("p5", deleteDrafts)
	id, _ := s.question("p5", 1)
	kv, err := s.bus.JetStream().KeyValue(s.ctx, kvstate.BucketPaused)
	if err != nil {
		t.Fatal(err)
	}
	th, _, _ := s.storedThread("p5")
	key := th.Paused.Record
	entry, err := kv.Get(s.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec["format"] = 99 // written by a future version
	data, _ := json.Marshal(rec)
	if _, err := kv.Update(s.ctx, key, data, entry.Revision()); err != nil {
		t.Fatal(err)
	}
	// A processor that has not read the record (the one that wrote it
	// keeps it cached: a record is never rewritten).
	s.stopProcessor("A")
	s.startProcessor("B")
	s.answer("p5", id, schema.ActionAccept, nil)
	rej := s.rec.await(t, 5*time.Second, "p5", events.TypeElicitationRejected, 1)
	if r, _ := events.Data[events.ElicitationRejected](rej); r.Reason != events.RejectStateIncompatible {
		t.Fatalf("rejection = %+v, want state_incompatible", r)
	}
	f := s.rec.await(t, 5*time.Second, "p5", events.TypeTurnFailed, 1)
	if d, _ := events.Data[events.TurnFailed](f); d.Reason != events.RejectStateIncompatible {
		t.Fatalf("turn.failed = %+v", d)
	}
	if s.drafts() != 10 {
		t.Fatal("an incompatible record was acted on")
	}
	s.send("p5", "list everything")
	s.completed("p5", 1)
}

// An event that cannot be decoded is refused like any other invalid
// turn.requested: turn.rejected invalid_event naming the attribute (the
// message is taken off PARLEY_INPUT), and the thread goes on.
func TestPoisonMessageRejected(t *testing.T) {
	s := start(t, options{})
	msg := &nats.Msg{Subject: events.InputSubject(events.PrincipalIntegrator, "p6", events.ChatTurnRequested), Data: []byte("not an event"),
		Header: nats.Header{"x-origin": []string{"fuzzer"}}}
	if _, err := s.bus.JetStream().PublishMsg(s.ctx, msg); err != nil {
		t.Fatal(err)
	}
	r := s.rec.await(t, 5*time.Second, "p6", events.TypeTurnRejected, 1)
	if d, _ := events.Data[events.TurnRejected](r); d.Reason != events.RejectInvalidEvent || len(d.Errors) != 1 ||
		d.Errors[0].Path != "ce-specversion" {
		t.Fatalf("turn.rejected = %s, want invalid_event naming ce-specversion", mustJSON(d))
	}
	// The thread still works.
	s.send("p6", "list everything")
	s.completed("p6", 1)
}

// A pause that expires while no processor runs is announced when one
// starts (the expiry markers are read through a durable consumer).
func TestExpiryWhileProcessorsDown(t *testing.T) {
	s := start(t, options{pauseTTL: time.Second})
	s.send("p7", deleteDrafts)
	id, _ := s.question("p7", 1)
	s.stopProcessor("A")
	time.Sleep(2500 * time.Millisecond) // the TTL passes with nobody watching
	if n := len(s.rec.matching("p7", events.TypeElicitationExpired)); n != 0 {
		t.Fatalf("expired announced with no processor running?")
	}
	s.startProcessor("B")
	s.rec.await(t, 10*time.Second, "p7", events.TypeElicitationExpired, 1)
	s.answer("p7", id, schema.ActionAccept, nil)
	rej := s.rec.await(t, 5*time.Second, "p7", events.TypeElicitationRejected, 1)
	if r, _ := events.Data[events.ElicitationRejected](rej); r.Reason != events.RejectUnknownOrExpired {
		t.Fatalf("late answer: %+v", r)
	}
	s.send("p7", "list everything")
	s.completed("p7", 1)
}

// At most processor.MaxQueue messages wait behind a running turn; one more is
// refused with thread_busy, and the queued ones all run, in order.
func TestThreadBusy(t *testing.T) {
	s := start(t, options{noGate: true}) // the destructive call waits ~0.7 s for a policy
	s.send("busy", deleteDrafts)
	for range processor.MaxQueue + 1 {
		s.send("busy", "list everything")
	}
	rej := s.rec.await(t, 10*time.Second, "busy", events.TypeTurnRejected, 1)
	if d, _ := events.Data[events.TurnRejected](rej); d.Reason != events.RejectThreadBusy {
		t.Fatalf("rejection = %+v, want thread_busy", d)
	}
	s.rec.await(t, 30*time.Second, "busy", events.TypeTurnCompleted, processor.MaxQueue+1)
	if n := len(s.rec.matching("busy", events.TypeTurnRejected)); n != 1 {
		t.Fatalf("%d refusals, want 1", n)
	}
}
