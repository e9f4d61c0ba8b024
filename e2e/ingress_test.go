package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// The cross-thread Nats-Msg-Id pre-claim no longer
// suppresses anything. An integrator publishes, on its own input subject,
// a message carrying the Nats-Msg-Id that the victim thread's turn.completed
// will have; input and output are separate streams, so the victim still
// gets its answer, and the attacker's message is refused as the invalid
// turn.requested it is.
func TestCrossThreadMsgIDPreclaimCannotSuppress(t *testing.T) {
	s := start(t, options{})
	victim, err := s.client.TurnRequest("victim", "", "list everything", "")
	if err != nil {
		t.Fatal(err)
	}
	completedID := events.DerivedID("turn.completed", victim.Subject(), events.DerivedID("turn", victim.ID()))
	forged, err := events.NewWithID(completedID, events.SourceProcessor, events.TypeTurnCompleted, "attacker",
		events.TurnCompleted{TurnID: "x", Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "forged"}})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := s.client.Publish(s.ctx, forged)
	if err == nil {
		t.Fatalf("client.Publish of a turn.completed = %+v, want refused (integrators publish only input types)", ack)
	}
	// Raw, on the attacker's own input subject, with the pre-claimed ID.
	if _, err := s.bus.Publish(s.ctx, events.InputSubject(events.PrincipalIntegrator, "attacker", events.ChatTurnRequested), forged); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Publish(s.ctx, victim); err != nil {
		t.Fatal(err)
	}
	done := s.rec.await(t, 10*time.Second, "victim", events.TypeTurnCompleted, 1)
	if done.ID() != completedID {
		t.Fatalf("turn.completed id %s, want the derived %s", done.ID(), completedID)
	}
	if d, _ := events.Data[events.TurnCompleted](done); !strings.Contains(d.Message.Text, "Found") {
		t.Fatalf("victim's answer = %q", d.Message.Text)
	}
	rej := s.rec.await(t, 10*time.Second, "attacker", events.TypeTurnRejected, 1)
	if d, _ := events.Data[events.TurnRejected](rej); d.Reason != events.RejectInvalidEvent {
		t.Fatalf("attacker's message: %+v, want invalid_event", d)
	}
}

// The same pre-claim through the processor's echo (found by the breaker):
// a VALID turn.requested on the attacker's own thread, with the ID of the
// victim's future turn.completed, is accepted and echoed into PARLEY_CHAT.
// The echo's Nats-Msg-Id is namespaced by the principal (bus.MsgID), so
// the victim's turn.completed is still stored under its derived ID and
// delivered, not dropped as a duplicate and dead-lettered.
func TestEchoCannotPreclaimDerivedID(t *testing.T) {
	s := start(t, options{})
	victim, err := s.client.TurnRequest("victim", "", "list everything", "")
	if err != nil {
		t.Fatal(err)
	}
	completedID := events.DerivedID("turn.completed", victim.Subject(), events.DerivedID("turn", victim.ID()))
	claim, err := s.client.TurnRequest("attacker", "", "list everything", "")
	if err != nil {
		t.Fatal(err)
	}
	claim.SetID(completedID)
	if _, err := s.client.Publish(s.ctx, claim); err != nil {
		t.Fatal(err)
	}
	s.rec.await(t, 10*time.Second, "attacker", events.TypeTurnCompleted, 1)
	if _, err := s.client.Publish(s.ctx, victim); err != nil {
		t.Fatal(err)
	}
	done := s.rec.await(t, 10*time.Second, "victim", events.TypeTurnCompleted, 1)
	if done.ID() != completedID {
		t.Fatalf("turn.completed id %s, want the derived %s", done.ID(), completedID)
	}
	if d, _ := events.Data[events.TurnCompleted](done); !strings.Contains(d.Message.Text, "Found") {
		t.Fatalf("victim's answer = %q", d.Message.Text)
	}
}

// Input on a subject that does not parse — a thread "a.b"
// (one token too many), too few tokens, a principal that is not a token —
// is dead-lettered with the reason, never ignored.
func TestBadInputSubjectsDeadLettered(t *testing.T) {
	s := start(t, options{})
	e, err := s.client.TurnRequest("ok", "", "list everything", "")
	if err != nil {
		t.Fatal(err)
	}
	h, body, err := events.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"parley.in.integrator.a.b.turn.requested": "a thread ID cannot contain dots",
		"parley.in.integrator.turn.requested":     "want 4",
		"parley.in.in~val!d.t.turn.requested":     "principal",
	}
	for subject := range bad {
		if _, err := s.bus.JetStream().PublishMsg(s.ctx, &nats.Msg{Subject: subject, Header: nats.Header(h), Data: body}); err != nil {
			t.Fatalf("publishing on %s: %v", subject, err)
		}
	}
	dlq, err := s.bus.JetStream().Stream(s.ctx, events.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(bad) && time.Now().Before(deadline) {
		got = map[string]string{}
		for seq := uint64(1); ; seq++ {
			ctx, cancel := context.WithTimeout(s.ctx, time.Second)
			m, err := dlq.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(events.DeadLetterSubject(events.StreamInput, "processor")))
			cancel()
			if err != nil {
				break
			}
			seq = m.Sequence
			var d struct {
				Data events.DeadLetter `json:"data"`
			}
			ev, err := events.Decode(events.Header(m.Header), m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(ev.Data(), &d.Data); err != nil {
				t.Fatal(err)
			}
			got[d.Data.Subject] = d.Data.Reason
		}
		time.Sleep(100 * time.Millisecond)
	}
	for subject, rule := range bad {
		if !strings.Contains(got[subject], rule) {
			t.Errorf("dead letter of %s: reason %q, want it to say %q", subject, got[subject], rule)
		}
	}
	// Nothing of them reached a thread; the input stream is empty.
	in, err := s.bus.JetStream().Stream(s.ctx, events.StreamInput)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := in.Info(s.ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("PARLEY_INPUT after the dead letters: %+v, %v; want empty", info.State, err)
	}
}

// On a real server: another principal answering the
// thread's question is refused forbidden and consumes nothing; the owner's
// answer then completes the turn, recorded as the owner's principal.
func TestAnswerByAnotherPrincipalForbidden(t *testing.T) {
	s := start(t, options{})
	s.send("own", deleteDrafts)
	id, _ := s.question("own", 1)
	other := s.client.WithPrincipal("mallory")
	if _, err := other.Answer(s.ctx, "own", id, schema.ElicitResult{Action: schema.ActionAccept}, ""); err != nil {
		t.Fatal(err)
	}
	rej := s.rec.await(t, 5*time.Second, "own", events.TypeElicitationRejected, 1)
	if d, _ := events.Data[events.ElicitationRejected](rej); d.Reason != events.RejectForbidden {
		t.Fatalf("mallory's answer: %+v, want forbidden", d)
	}
	if l := s.ledger(); len(l) != 0 {
		t.Fatalf("the tool ran on mallory's answer: %+v", l)
	}
	s.answer("own", id, schema.ActionAccept, nil)
	e := s.rec.await(t, 10*time.Second, "own", events.TypeTurnCompleted, 1)
	tc, _ := events.Data[events.TurnCompleted](e)
	for _, d := range tc.Decisions {
		if d.ElicitationID == id && d.AnsweredBy != (events.Identity{Principal: events.PrincipalIntegrator}) {
			t.Fatalf("decision answered by %+v, want the integrator principal", d.AnsweredBy)
		}
	}
}
