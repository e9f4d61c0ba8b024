package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

const deleteDrafts = "delete the 10 draft articles"

// The turn pauses in KV; the processor that paused it stops; a processor
// started after the pause resumes it.
func TestPauseThenResumeOnNewProcessor(t *testing.T) {
	s := start(t, options{})
	s.send("t1", deleteDrafts)
	id, q := s.question("t1", 1)
	if !q.IsToolConfirmation() {
		t.Fatalf("want a tool confirmation, got %s", mustJSON(q))
	}
	th, _, _ := s.storedThread("t1")
	if got := pendingOf(th); th.State != "paused" || len(got) != 1 || got[0] != id {
		t.Fatalf("thread %s, pending = %v, want paused on [%s]", th.State, got, id)
	}
	if left := time.Until(th.Paused.ExpiresAt); left <= 0 || left > time.Minute {
		t.Fatalf("paused turn expires in %v, want within the 1m TTL", left)
	}
	// The pause record (the run's snapshot) carries the TTL.
	pkv, err := s.bus.JetStream().KeyValue(s.ctx, kvstate.BucketPaused)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pkv.Get(s.ctx, th.Paused.Record); err != nil {
		t.Fatalf("pause record %s: %v", th.Paused.Record, err)
	}
	s.stopProcessor("A")
	s.startProcessor("B")
	s.answer("t1", id, schema.ActionAccept, nil)
	if text := s.completed("t1", 1); !strings.Contains(text, "Deleted 10") {
		t.Fatalf("completed = %q, want the deletion", text)
	}
	if n := s.drafts(); n != 0 {
		t.Fatalf("drafts left = %d, want 0", n)
	}
	if l := s.ledger(); len(l) != 1 || l[0].Tool != "delete_entities" {
		t.Fatalf("ledger = %+v, want one delete_entities effect", l)
	}
	th, _, _ = s.storedThread("t1")
	if el := th.Paused.Elicitations[0]; el.ID != id || el.Status != "consumed" || el.AnsweredBy != (events.Identity{Principal: events.PrincipalIntegrator}) {
		t.Fatalf("elicitation not recorded as consumed by the integrator principal (no end user: it is not trusted to name one): %+v", el)
	}
}

func TestSecondAnswerAlreadyConsumed(t *testing.T) {
	s := start(t, options{})
	s.send("t2", deleteDrafts)
	id, _ := s.question("t2", 1)
	s.answer("t2", id, schema.ActionAccept, nil)
	s.completed("t2", 1)
	s.answer("t2", id, schema.ActionDecline, nil)
	rej := s.rec.await(t, 5*time.Second, "t2", events.TypeElicitationRejected, 1)
	d, _ := events.Data[events.ElicitationRejected](rej)
	if d.Reason != events.RejectAlreadyConsumed || d.ElicitationID != id {
		t.Fatalf("rejection = %+v, want already_consumed for %s", d, id)
	}
}

// Fifty answers race (across two processors): exactly one wins.
func TestFiftyConcurrentAnswersOneWins(t *testing.T) {
	s := start(t, options{processors: 2})
	s.send("t3", deleteDrafts)
	id, _ := s.question("t3", 1)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { s.answer("t3", id, schema.ActionAccept, nil) })
	}
	wg.Wait()
	s.completed("t3", 1)
	s.rec.await(t, 10*time.Second, "t3", events.TypeElicitationRejected, 49)
	for _, r := range s.rec.rejections("t3") {
		if r.Reason != events.RejectAlreadyConsumed {
			t.Fatalf("rejection reason %q, want already_consumed", r.Reason)
		}
	}
	time.Sleep(300 * time.Millisecond) // let any wrong extra effect land
	if n := len(s.rec.matching("t3", events.TypeTurnCompleted)); n != 1 {
		t.Fatalf("turn.completed %d times, want 1", n)
	}
	if n := len(s.rec.rejections("t3")); n != 49 {
		t.Fatalf("%d rejections, want 49", n)
	}
	if l := s.ledger(); len(l) != 1 {
		t.Fatalf("ledger has %d effects, want 1", len(l))
	}
}

// A paused turn expires with its KV entry: elicitation.expired is announced
// once (two processors watch the marker), and a late answer is told
// unknown_or_expired.
func TestAnswerAfterTTLUnknownOrExpired(t *testing.T) {
	s := start(t, options{pauseTTL: time.Second, processors: 2})
	s.send("t4", deleteDrafts)
	id, _ := s.question("t4", 1)
	s.rec.await(t, 10*time.Second, "t4", events.TypeElicitationExpired, 1)
	s.answer("t4", id, schema.ActionAccept, nil)
	rej := s.rec.await(t, 5*time.Second, "t4", events.TypeElicitationRejected, 1)
	d, _ := events.Data[events.ElicitationRejected](rej)
	if d.Reason != events.RejectUnknownOrExpired {
		t.Fatalf("rejection = %+v, want unknown_or_expired", d)
	}
	if n := len(s.rec.matching("t4", events.TypeElicitationExpired)); n != 1 {
		t.Fatalf("elicitation.expired announced %d times, want once", n)
	}
	if n := s.drafts(); n != 10 {
		t.Fatalf("drafts = %d, want 10 (nothing deleted)", n)
	}
	// The thread is idle again: a new message starts a new turn.
	s.send("t4", "list everything")
	s.completed("t4", 1)
}

func TestInvalidContentKeepsElicitationPending(t *testing.T) {
	s := start(t, options{})
	s.send("t5", "create an event for the launch party")
	id, q := s.question("t5", 1)
	if q.RequestedSchema.Properties["date"] == nil || q.RequestedSchema.Properties["date"].Format != "date" {
		t.Fatalf("want a date field, got %s", mustJSON(q.RequestedSchema))
	}
	s.answer("t5", id, schema.ActionAccept, map[string]any{"title": "Launch party", "date": "next friday"})
	rej := s.rec.await(t, 5*time.Second, "t5", events.TypeElicitationRejected, 1)
	d, _ := events.Data[events.ElicitationRejected](rej)
	if d.Reason != events.RejectInvalidContent || len(d.Errors) == 0 || d.Errors[0].Path != "date" {
		t.Fatalf("rejection = %s, want invalid_content naming date", mustJSON(d))
	}
	s.answer("t5", id, schema.ActionAccept, map[string]any{"title": "Launch party", "date": "2026-12-12"})
	if text := s.completed("t5", 1); !strings.Contains(text, "Launch party") {
		t.Fatalf("completed = %q", text)
	}
}

// A policy service other than the gate vetoes; the model receives the
// denial and the loop continues to an answer.
func TestVetoReachesModel(t *testing.T) {
	s := start(t, options{noGate: true})
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	go func() {
		_ = s.bus.Serve(ctx, bus.Endpoint{Service: "freeze-policy", Version: "1.0.0", Name: "pre_execute",
			Subject: events.SubjectPreExecAll, QueueGroup: "freeze", ReplyAs: "freeze-policy"}, func(_ context.Context, req *event.Event) (*event.Event, error) {
			in, _ := events.Data[events.PreExecuteRequest](req)
			d := events.Decision{Decision: events.DecisionAllow, Policy: "freeze-policy"}
			if !in.Tool.Annotations.ReadOnly() {
				d = events.Decision{Decision: events.DecisionVeto, Reason: "change freeze until Monday", Policy: "freeze-policy"}
			}
			return events.New("/test/freeze", events.TypePreExecuteDecided, req.Subject(), d)
		})
	}()
	waitService(t, s, "freeze-policy")
	s.send("t6", deleteDrafts)
	text := s.completed("t6", 1)
	if !strings.Contains(text, "Execution of delete_entities was denied: change freeze until Monday") {
		t.Fatalf("completed = %q, want the veto text", text)
	}
	if n := s.drafts(); n != 10 {
		t.Fatalf("drafts = %d, want 10", n)
	}
	if n := len(s.rec.matching("t6", events.TypeElicitationRequested)); n != 0 {
		t.Fatalf("a veto asked the user %d times", n)
	}
}

func waitService(t *testing.T, s *system, name string) {
	nc := s.srv.Connect(t)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := nc.Request("$SRV.PING."+name, nil, 200*time.Millisecond); err == nil {
			return
		}
	}
	t.Fatalf("service %s did not come up", name)
}

func TestDeclineMessageReachesModel(t *testing.T) {
	s := start(t, options{})
	s.send("t7", deleteDrafts)
	id, _ := s.question("t7", 1)
	s.answer("t7", id, schema.ActionDecline, map[string]any{"instructions": "only the ones older than a year"})
	text := s.completed("t7", 1)
	if !strings.Contains(text, "User declined execution of delete_entities: only the ones older than a year") {
		t.Fatalf("completed = %q, want the decline with instructions", text)
	}
	if n := s.drafts(); n != 10 {
		t.Fatalf("drafts = %d, want 10", n)
	}
	if got := s.model.calls.Load(); got != 3 {
		t.Fatalf("model called %d times, want 3 (list, delete, answer after decline)", got)
	}
}

func TestCancelEndsIteration(t *testing.T) {
	s := start(t, options{})
	s.send("t8", deleteDrafts)
	id, _ := s.question("t8", 1)
	s.answer("t8", id, schema.ActionCancel, nil)
	text := s.completed("t8", 1)
	if !strings.Contains(text, "cancelled") {
		t.Fatalf("completed = %q, want a cancellation", text)
	}
	if got := s.model.calls.Load(); got != 2 {
		t.Fatalf("model called %d times after cancel, want 2 (no call after the cancel)", got)
	}
	if n := s.drafts(); n != 10 || len(s.ledger()) != 0 {
		t.Fatalf("cancel ran the tool: drafts %d, ledger %v", n, s.ledger())
	}
}

// No policy service: the destructive tool is not run (fail closed) and the
// outcome is an error the model and the operator see, not a decline.
func TestNoPolicyServiceFailsClosed(t *testing.T) {
	s := start(t, options{noGate: true})
	s.send("t9", deleteDrafts)
	text := s.completed("t9", 1)
	if !strings.Contains(text, "policy_unavailable") || strings.Contains(text, "declined") {
		t.Fatalf("completed = %q, want the policy_unavailable error", text)
	}
	if n := s.drafts(); n != 10 || len(s.ledger()) != 0 {
		t.Fatalf("tool ran without a policy: drafts %d, ledger %v", n, s.ledger())
	}
	if n := len(s.rec.matching("t9", events.TypeElicitationRequested)); n != 0 {
		t.Fatalf("asked the user %d times", n)
	}
}

// A message that is not a valid turn.requested is refused with an event
// that names the field, never dropped.
func TestInvalidTurnRejected(t *testing.T) {
	s := start(t, options{})
	e, err := events.New("/test", events.TypeTurnRequested, "t10", events.TurnRequested{Agent: "bad agent!"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.bus.Publish(s.ctx, events.InputSubject(events.PrincipalIntegrator, "t10", events.ChatTurnRequested), e); err != nil {
		t.Fatal(err)
	}
	rej := s.rec.await(t, 5*time.Second, "t10", events.TypeTurnRejected, 1)
	d, _ := events.Data[events.TurnRejected](rej)
	paths := map[string]bool{}
	for _, v := range d.Errors {
		paths[v.Path] = true
	}
	if !paths["data.agent"] || !paths["data.message.text"] || d.RequestEventID != e.ID() {
		t.Fatalf("rejection = %s, want errors naming data.agent and data.message.text", mustJSON(d))
	}
}

// Answers whose envelope or action is wrong are refused as invalid_event,
// never applied: a turn.requested type on an elicitation.responded subject,
// a ce-subject that is not the thread, and an unknown action.
func TestMalformedAnswersRejected(t *testing.T) {
	s := start(t, options{})
	s.send("m1", deleteDrafts)
	id, _ := s.question("m1", 1)
	publish := func(typ events.Type, subject string, data any) {
		e, err := events.New("/test", typ, subject, data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.bus.Publish(s.ctx, events.InputSubject(events.PrincipalIntegrator, "m1", events.ChatElicitationResponded), e); err != nil {
			t.Fatal(err)
		}
	}
	publish(events.TypeTurnRequested, "m1", events.ElicitationResponded{ElicitationID: id, Action: schema.ActionCancel})
	publish(events.TypeElicitationResponded, "other", events.ElicitationResponded{ElicitationID: id, Action: schema.ActionCancel})
	publish(events.TypeElicitationResponded, "m1", events.ElicitationResponded{ElicitationID: id, Action: "maybe"})
	s.rec.await(t, 5*time.Second, "m1", events.TypeElicitationRejected, 3)
	for _, r := range s.rec.rejections("m1") {
		if r.Reason != events.RejectInvalidEvent {
			t.Fatalf("rejection %+v, want invalid_event", r)
		}
	}
	// The question is still open and works.
	s.answer("m1", id, schema.ActionAccept, nil)
	if text := s.completed("m1", 1); !strings.Contains(text, "Deleted 10") {
		t.Fatalf("completed = %q", text)
	}
}

func TestOversizeMessageRejected(t *testing.T) {
	s := start(t, options{})
	s.send("m2", strings.Repeat("x", events.MaxMessageText+1))
	rej := s.rec.await(t, 5*time.Second, "m2", events.TypeTurnRejected, 1)
	if d, _ := events.Data[events.TurnRejected](rej); d.Reason != events.RejectMessageTooLarge {
		t.Fatalf("rejection = %+v, want message_too_large", d)
	}
	s.send("m2", "list everything") // the thread is not blocked behind it
	s.completed("m2", 1)
}

// A call whose arguments do not fit the tool's inputSchema is refused before
// anyone is asked to confirm it.
func TestInvalidArgumentsNotConfirmed(t *testing.T) {
	rules := `{"rules":[{"name":"bad","match":"delete nothing","steps":[
	  {"tool_calls":[{"name":"delete_entities","arguments":{"ids":[]}}]},
	  {"text":"{{.Last.Text}}"}]}],"fallback":"?"}`
	s := start(t, options{rules: rules})
	s.send("m3", "delete nothing")
	text := s.completed("m3", 1)
	if !strings.Contains(text, "was not run") || !strings.Contains(text, "ids should have at least 1 item") {
		t.Fatalf("completed = %q, want the argument error, phrased for a person", text)
	}
	if n := len(s.rec.matching("m3", events.TypeElicitationRequested)); n != 0 {
		t.Fatalf("asked to confirm an invalid call %d times", n)
	}
}
