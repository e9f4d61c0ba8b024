package client

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// chatEvent builds a thread event as the processor publishes it.
func chatEvent(t *testing.T, id string, typ events.Type, thread string, data any) *event.Event {
	t.Helper()
	e, err := events.NewWithID(id, events.SourceProcessor, typ, thread, data)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// store publishes e into PARLEY_CHAT under its thread's subject.
func store(t *testing.T, cl *Client, suffix string, e *event.Event) {
	t.Helper()
	if _, err := Publish(t.Context(), cl.Bus(), events.ChatSubject(e.Subject(), suffix), e, cl.retry); err != nil {
		t.Fatal(err)
	}
}

// titleQuestion is a form asking a required title of at most 10
// characters.
func titleQuestion(id string) schema.ElicitRequestParams {
	max := 10
	return schema.ElicitRequestParams{Message: "Title?", Meta: schema.Meta{schema.MetaElicitationID: id},
		RequestedSchema: schema.RequestedSchema{Type: "object", Required: []string{"title"},
			Properties: map[string]*schema.PropertySchema{"title": {Type: "string", MaxLength: &max}}}}
}

// A Session joining a paused thread knows its pending question from the
// stored events; it refuses an invalid answer and one to a question that
// is not pending before publishing; it follows new events (a withdrawal),
// and counts its own message as running before any processor takes it.
func TestSession(t *testing.T) {
	r := newRestartable(t)
	cl := newClient(t, r.url(), RetryPolicy{Budget: 5 * time.Second})
	const th = "sess1"
	turn := events.DerivedID("turn", "m1")
	store(t, cl, events.ChatTurnRequested, chatEvent(t, "m1", events.TypeTurnRequested, th,
		events.TurnRequested{Message: schema.ChatMessage{Role: schema.RoleUser, Text: "new event"}}))
	q := chatEvent(t, "q1", events.TypeElicitationRequested, th, titleQuestion("e1"))
	q.SetExtension(events.ExtTurnID, turn)
	store(t, cl, events.ChatElicitationRequested, q)
	store(t, cl, events.ChatTurnPaused, chatEvent(t, "p1", events.TypeTurnPaused, th,
		events.TurnPaused{TurnID: turn, RequestEventID: "m1", ElicitationIDs: []string{"e1"}}))

	s, err := cl.Follow(t.Context(), th, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Status() != threadstate.Paused || s.TurnID() != turn {
		t.Fatalf("joined: status %s turn %s, want paused %s", s.Status(), s.TurnID(), turn)
	}
	if p, ok := s.Question("e1"); !ok || p.Params.Message != "Title?" {
		t.Fatalf("pending e1: %+v %v", p, ok)
	}

	// Invalid content is refused before anything is published.
	_, err = s.Respond(t.Context(), "e1", schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"title": "far too long a title"}})
	var invalid *schema.ValidationError
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), "title") {
		t.Errorf("invalid answer: %v, want a validation error naming title", err)
	}
	if _, err := s.Respond(t.Context(), "nope", schema.ElicitResult{Action: schema.ActionCancel}); !errors.Is(err, ErrNotPending) {
		t.Errorf("answer to an unknown question: %v, want ErrNotPending", err)
	}
	if n := inputMsgs(t, cl); n != 0 {
		t.Errorf("%d inputs published, want none", n)
	}

	// A valid answer is published on the principal's input subject.
	ans, err := s.Respond(t.Context(), "e1", schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"title": "Launch"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := storedWithID(t, cl, events.InputSubject(events.PrincipalIntegrator, th, events.ChatElicitationResponded), ans.ID()); n != 1 {
		t.Errorf("the answer is stored %d times, want 1", n)
	}
	if n := inputMsgs(t, cl); n != 1 {
		t.Errorf("%d inputs published, want 1", n)
	}

	// The processor withdraws the question: the session delivers the
	// change and settles it.
	store(t, cl, events.ChatElicitationCancelled, chatEvent(t, "c1", events.TypeElicitationCancelled, th,
		events.ElicitationCancelled{TurnID: turn, ElicitationIDs: []string{"e1"}, Reason: "superseded"}))
	it := next(t, s)
	if len(it.Settled) != 1 || it.Settled[0].How != threadstate.Withdrawn || !it.Ended {
		t.Errorf("withdrawal: %+v", it.Change)
	}
	if s.Status() != threadstate.Idle {
		t.Errorf("after the withdrawal: %s, want idle", s.Status())
	}
	if _, err := s.Respond(t.Context(), "e1", schema.ElicitResult{Action: schema.ActionCancel}); !errors.Is(err, ErrNotPending) || !strings.Contains(err.Error(), "withdrawn") {
		t.Errorf("answer to a withdrawn question: %v", err)
	}

	// A message sent by the session counts as running before its echo;
	// the echo is Mine.
	ev, _, err := s.Ask(t.Context(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	if s.Status() != threadstate.Running {
		t.Errorf("after Ask: %s, want running", s.Status())
	}
	store(t, cl, events.ChatTurnRequested, ev)
	if it := next(t, s); !it.Mine {
		t.Errorf("the echo of the session's message is not Mine: %+v", it)
	}
}

// inputMsgs returns how many messages PARLEY_INPUT holds.
func inputMsgs(t *testing.T, cl *Client) uint64 {
	t.Helper()
	st, err := cl.Bus().JetStream().Stream(t.Context(), events.StreamInput)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// next returns the session's next item within 5 s.
func next(t *testing.T, s *Session) SessionItem {
	t.Helper()
	select {
	case it, ok := <-s.Items():
		if !ok {
			t.Fatal("the session ended")
		}
		return it
	case <-time.After(5 * time.Second):
		t.Fatal("no item within 5 s")
	}
	return SessionItem{}
}

// The verdict matchers read decoded changes: a turn's outcome by its
// request or its turn, a pause with its questions, an answer's echo and
// rejection; another message's outcome is not matched.
func TestMatchers(t *testing.T) {
	turn := events.DerivedID("turn", "m1")
	m := newTurnMatcher("m1", events.PrincipalIntegrator)
	q := chatEvent(t, "q1", events.TypeElicitationRequested, "t", titleQuestion("e1"))
	q.SetExtension(events.ExtTurnID, turn)
	if v := m.event(threadstate.Decode(q)); v != nil {
		t.Fatalf("a question is no verdict: %+v", v)
	}
	other := chatEvent(t, "k2", events.TypeTurnCompleted, "t", events.TurnCompleted{TurnID: "turn-other", RequestEventID: "m2"})
	if v := m.event(threadstate.Decode(other)); v != nil {
		t.Errorf("another turn's completion matched: %+v", v)
	}
	rej := chatEvent(t, "j2", events.TypeTurnRejected, "t", events.TurnRejected{RequestEventID: "m2"})
	if v := m.event(threadstate.Decode(rej)); v != nil {
		t.Errorf("another message's rejection matched: %+v", v)
	}
	p := chatEvent(t, "p1", events.TypeTurnPaused, "t", events.TurnPaused{TurnID: turn, ElicitationIDs: []string{"e1"}})
	v := m.event(threadstate.Decode(p))
	if v == nil || v.Outcome != OutcomePaused || len(v.Questions) != 1 || v.Questions[0].ID() != "q1" {
		t.Errorf("pause by turn: %+v", v)
	}
	f := chatEvent(t, "f1", events.TypeTurnFailed, "t", events.TurnFailed{RequestEventID: "m1", Reason: "x"})
	if v := m.event(threadstate.Decode(f)); v == nil || v.Outcome != OutcomeFailed {
		t.Errorf("failure by request: %+v", v)
	}

	a := &answerMatcher{respondedID: "r1", elicitationID: "e1"}
	echo := chatEvent(t, "r1", events.TypeElicitationResponded, "t", events.ElicitationResponded{ElicitationID: "e1", Action: schema.ActionAccept})
	if v := a.event(threadstate.Decode(echo)); v == nil || v.Outcome != OutcomeAccepted {
		t.Errorf("echo: %+v", v)
	}
	bad := chatEvent(t, "x1", events.TypeElicitationRejected, "t", events.ElicitationRejected{ElicitationID: "e1", RespondedEventID: "r1", Reason: "invalid_content"})
	if v := a.event(threadstate.Decode(bad)); v == nil || v.Outcome != OutcomeRejected {
		t.Errorf("rejection: %+v", v)
	}
	if v := a.event(threadstate.Decode(other)); v != nil {
		t.Errorf("a turn's end matched an answer: %+v", v)
	}
}

// A message without a verdict is described from the thread's fold.
func TestDescribeWait(t *testing.T) {
	var f threadstate.Fold
	if got := describeWait(&f, "m1", ""); !strings.Contains(got, "not yet taken by a processor") {
		t.Errorf("empty thread: %q", got)
	}
	f.Apply(1, chatEvent(t, "m1", events.TypeTurnRequested, "t", events.TurnRequested{Message: schema.ChatMessage{Role: "user", Text: "a"}}))
	f.Apply(2, chatEvent(t, "m2", events.TypeTurnRequested, "t", events.TurnRequested{Message: schema.ChatMessage{Role: "user", Text: "b"}}))
	if got := describeWait(&f, "m2", ""); !strings.Contains(got, "queued behind 1 earlier message") {
		t.Errorf("queued: %q", got)
	}
	if got := describeWait(&f, "m1", ""); !strings.Contains(got, "still running") {
		t.Errorf("running: %q", got)
	}
	f.Apply(3, chatEvent(t, "q1", events.TypeElicitationRequested, "t", titleQuestion("e1")))
	f.Apply(4, chatEvent(t, "p1", events.TypeTurnPaused, "t", events.TurnPaused{TurnID: events.DerivedID("turn", "m1"), RequestEventID: "m1"}))
	if got := describeWait(&f, "m1", ""); !strings.Contains(got, "paused, waiting for answers [e1]") {
		t.Errorf("paused: %q", got)
	}
	if got := describeWait(&f, "r9", "e1"); !strings.Contains(got, "still open") {
		t.Errorf("answer to an open question: %q", got)
	}
}
