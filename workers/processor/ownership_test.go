package processor

import (
	"slices"
	"testing"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// messageAs handles turn.requested id (data in) published by principal at
// PARLEY_INPUT sequence seq.
func (h *harness) messageAs(principal, id string, seq uint64, in events.TurnRequested) error {
	h.t.Helper()
	h.inStream(seq)
	if in.Message.Text == "" {
		in.Message = schema.ChatMessage{Role: schema.RoleUser, Text: "message " + id}
	}
	e, err := events.NewWithID(id, "/test", events.TypeTurnRequested, "t", in)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(principal, "t", events.ChatTurnRequested),
		StreamSeq: seq, NumDelivered: 1})
}

// answerAs handles elicitation.responded id accepting question, published
// by principal and claiming the end user by ("" for none).
func (h *harness) answerAs(principal, id, question, by string) {
	h.t.Helper()
	e, err := events.NewWithID(id, "/test", events.TypeElicitationResponded, "t", events.ElicitationResponded{
		ElicitationID: question, Action: schema.ActionAccept, AnsweredBy: by})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(principal, "t", events.ChatElicitationResponded),
		StreamSeq: 100, NumDelivered: 1}); err != nil {
		h.t.Fatalf("answer %s: %v", id, err)
	}
}

// turnRejectedFor returns the reason of the turn.rejected naming id ("" if none).
func turnRejectedFor(h *harness, id string) string {
	for _, e := range h.pub.of(events.TypeTurnRejected) {
		d, _ := events.Data[events.TurnRejected](e)
		if d.RequestEventID == id {
			return d.Reason
		}
	}
	return ""
}

// Another principal answers alice's question → forbidden,
// nothing consumed; the real answer still works and is recorded as alice's
// (through the gateway, which is trusted to name her).
func TestAnswerFromAnotherPrincipalForbidden(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	if err := h.messageAs(events.PrincipalGateway, "m1", 1, events.TurnRequested{User: "alice"}); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	for _, a := range []struct{ principal, id, by string }{
		{events.PrincipalIntegrator, "x1", ""},      // another principal
		{events.PrincipalIntegrator, "x2", "alice"}, // naming alice, untrusted
		{events.PrincipalGateway, "x3", "mallory"},  // another user of the gateway
		{events.PrincipalGateway, "x4", ""},         // the gateway, naming nobody
	} {
		h.answerAs(a.principal, a.id, "q1", a.by)
		if r := rejectedFor(h, a.id); r != events.RejectForbidden {
			t.Errorf("answer %s by %s/%q: rejection %q, want forbidden", a.id, a.principal, a.by, r)
		}
	}
	if rec := h.paused(); rec.Find("q1").Status != StatusPending {
		t.Fatalf("after the refused answers the question is %+v; want still pending", rec.Find("q1"))
	}
	if n := len(h.pub.of(events.TypeElicitationResponded)); n != 0 {
		t.Fatalf("%d refused answers echoed into PARLEY_CHAT", n)
	}
	h.answerAs(events.PrincipalGateway, "a1", "q1", "alice")
	if r := rejectedFor(h, "a1"); r != "" {
		t.Fatalf("alice's answer rejected %q", r)
	}
	resumed := h.pub.of(events.TypeRunResumed)
	if len(resumed) != 1 {
		t.Fatalf("%d run.resumed, want 1", len(resumed))
	}
	d, _ := events.Data[events.RunResumed](resumed[0])
	want := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "alice"}
	if len(d.Answers) != 1 || d.Answers[0].AnsweredBy != want {
		t.Fatalf("answers %+v, want one answered by %+v", d.Answers, want)
	}
	echo := h.pub.of(events.TypeElicitationResponded)
	if len(echo) != 1 || echo[0].ID() != "a1" || events.EchoIdentity(echo[0]) != want {
		t.Fatalf("echo = %v, want a1 with principal gateway, onbehalfof alice", echo)
	}
}

// An untrusted principal's self-declared answeredBy is
// refused, never recorded as that user; without it the answer counts as
// the principal's own.
func TestSelfDeclaredAnsweredByNotRecorded(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	// A first message naming a user from the untrusted principal is
	// refused: it neither starts a turn nor makes anyone the owner.
	if err := h.messageAs(events.PrincipalIntegrator, "m0", 1, events.TurnRequested{User: "alice"}); err != nil {
		t.Fatal(err)
	}
	if r := turnRejectedFor(h, "m0"); r != events.RejectForbidden {
		t.Fatalf("turn naming alice from the integrator: rejection %q, want forbidden", r)
	}
	if th, _, _ := h.p.threads.Get(h.ctx, "t"); th.Owner != nil || len(h.runsStarted()) != 0 {
		t.Fatalf("after the refused message: owner %v, runs %v; want none", th.Owner, h.runsStarted())
	}
	if err := h.message("m1", 2); err != nil { // integrator's thread
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	h.answerAs(events.PrincipalIntegrator, "x1", "q1", "alice")
	if r := rejectedFor(h, "x1"); r != events.RejectForbidden {
		t.Fatalf("self-declared answeredBy: rejection %q, want forbidden", r)
	}
	h.answerAs(events.PrincipalIntegrator, "a1", "q1", "")
	if el := h.paused().Find("q1"); el.Status != StatusConsumed || el.AnsweredBy != (events.Identity{Principal: events.PrincipalIntegrator}) {
		t.Fatalf("question = %+v, want consumed by the integrator principal, naming no user", el)
	}
}

// A message from a party the thread does not belong to is
// refused forbidden before anything is touched: the paused turn keeps its
// questions and nothing is queued; a party the owner shared the thread
// with may answer, but not share it further.
func TestMessageFromNonOwnerForbiddenAndShares(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	bob := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}
	if err := h.messageAs(events.PrincipalGateway, "m1", 1, events.TurnRequested{User: "alice", Share: []events.Identity{bob}}); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	if err := h.messageAs(events.PrincipalIntegrator, "m2", 2, events.TurnRequested{}); err != nil {
		t.Fatal(err)
	}
	if r := turnRejectedFor(h, "m2"); r != events.RejectForbidden {
		t.Fatalf("message from another principal: rejection %q, want forbidden", r)
	}
	th, _, _ := h.p.threads.Get(h.ctx, "t")
	if len(th.Queue) != 0 || th.State != ThreadPaused || len(h.pub.of(events.TypeElicitationCancelled)) != 0 {
		t.Fatalf("after the refused message: state %s, queue %d, cancelled %d; want paused, nothing queued or withdrawn",
			th.State, len(th.Queue), len(h.pub.of(events.TypeElicitationCancelled)))
	}
	if th.LastTurnSeq != 2 {
		t.Errorf("LastTurnSeq = %d, want 2 (the refused message is dealt with; later ones need not wait)", th.LastTurnSeq)
	}
	// bob, shared by alice, may not share the thread further.
	if err := h.messageAs(events.PrincipalGateway, "m3", 3, events.TurnRequested{User: "bob",
		Share: []events.Identity{{Principal: events.PrincipalIntegrator}}}); err != nil {
		t.Fatal(err)
	}
	if r := turnRejectedFor(h, "m3"); r != events.RejectForbidden {
		t.Fatalf("a share from bob: rejection %q, want forbidden", r)
	}
	h.answerAs(events.PrincipalGateway, "a1", "q1", "bob")
	if r := rejectedFor(h, "a1"); r != "" {
		t.Fatalf("bob's answer rejected %q", r)
	}
	th, _, _ = h.p.threads.Get(h.ctx, "t")
	if th.Owner == nil || *th.Owner != (events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "alice"}) ||
		!slices.Equal(th.Shared, []events.Identity{bob}) {
		t.Fatalf("owner %v, shared %v; want alice's, shared with bob only", th.Owner, th.Shared)
	}
}

// A thread record written when input was in PARLEY_CHAT carries
// PARLEY_CHAT sequences; they are not compared with PARLEY_INPUT's: a
// message sent after the pause still supersedes it rather than queueing
// behind a mark from the other stream.
func TestLegacyChatSequencesIgnored(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	th, rev := h.threads.load("t")
	th.InputSeqs, th.LastTurnSeq, th.PauseMark = false, 500, 500 // as the old format wrote it
	if err := h.threads.save(th, rev); err != nil {
		t.Fatal(err)
	}
	h.p.threads = h.p.threadStore(h.threads, true) // a replica that has not read it yet
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	if n := len(h.pub.of(events.TypeElicitationCancelled)); n != 1 {
		t.Fatalf("%d elicitation.cancelled, want 1: m2 supersedes the pause", n)
	}
}
