package processor

import (
	"strings"
	"testing"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// An input whose subject does not parse is a permanent
// failure naming the rule (the runner dead-letters it with that reason),
// never ignored.
func TestInputOnBadSubjectDeadLettered(t *testing.T) {
	h := newHarness(t)
	e, err := events.NewWithID("x1", "/test", events.TypeTurnRequested, "a", events.TurnRequested{
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	for subject, rule := range map[string]string{
		"parley.in.integrator.a.b.turn.requested":  "a thread ID cannot contain dots",
		"parley.in.integrator.turn.requested":      "tokens after parley.in, want 4",
		"parley.in.bad$principal.a.turn.requested": "principal",
		"parley.in.integrator.a.turn.completed":    "not an input kind",
	} {
		err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: subject, StreamSeq: 1, NumDelivered: 1})
		if !bus.IsPermanent(err) || !strings.Contains(err.Error(), rule) || !strings.Contains(err.Error(), subject) {
			t.Errorf("HandleInput(%s) = %v; want a permanent error naming the subject and %q", subject, err, rule)
		}
	}
	if len(h.pub.sent) != 0 {
		t.Errorf("published %d events for inputs on bad subjects", len(h.pub.sent))
	}
}

// The whole turn.requested is bounded, blocks and _meta
// too, not only the text: message_too_large, and nothing reaches the
// thread record.
func TestOversizedBlocksRejected(t *testing.T) {
	h := newHarness(t)
	big := strings.Repeat("x", events.MaxTurnRequestBytes)
	for i, msg := range []schema.ChatMessage{
		{Role: schema.RoleUser, Text: "hi", Content: schema.ContentList{&schema.TextContent{Text: big}}},
		{Role: schema.RoleUser, Text: "hi", Meta: schema.Meta{"x": big}},
	} {
		id := []string{"blocks", "meta"}[i]
		if err := h.messageAs(events.PrincipalIntegrator, id, uint64(i+1), events.TurnRequested{Message: msg}); err != nil {
			t.Fatal(err)
		}
		if r := turnRejectedFor(h, id); r != events.RejectMessageTooLarge {
			t.Errorf("%s: rejection %q, want message_too_large", id, r)
		}
	}
	th, _, _ := h.p.threads.Get(h.ctx, "t")
	if len(th.Queue) != 0 || len(th.History) != 0 || th.State != ThreadIdle || len(h.runsStarted()) != 0 {
		t.Fatalf("thread after oversized messages: %+v", th)
	}
}

// An answer's content is bounded per field (a decline's
// instructions) and in all: invalid_content naming the field, the
// question still open; a normal answer then works.
func TestOversizedInstructionsRejected(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	e, err := events.NewWithID("big", "/test", events.TypeElicitationResponded, "t", events.ElicitationResponded{
		ElicitationID: "q1", Action: schema.ActionDecline,
		Content: map[string]any{schema.InstructionsProperty: strings.Repeat("x", events.MaxAnswerField+1)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, StreamSeq: 2, NumDelivered: 1,
		Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatElicitationResponded)}); err != nil {
		t.Fatal(err)
	}
	rej := h.pub.of(events.TypeElicitationRejected)
	if len(rej) != 1 {
		t.Fatalf("%d rejections, want 1", len(rej))
	}
	d, _ := events.Data[events.ElicitationRejected](rej[0])
	if d.Reason != events.RejectInvalidContent || len(d.Errors) != 1 || d.Errors[0].Path != "content."+schema.InstructionsProperty {
		t.Fatalf("rejection %+v, want invalid_content naming content.%s", d, schema.InstructionsProperty)
	}
	if rec := h.paused(); rec.Find("q1").Status != StatusPending {
		t.Fatalf("question after the oversized answer: %+v, want pending", rec.Find("q1"))
	}
	h.answer("a1", "q1")
	if len(h.pub.of(events.TypeRunResumed)) != 1 {
		t.Fatal("the normal answer did not resume the turn")
	}
}
