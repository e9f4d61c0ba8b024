package e2e

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/gate"
)

// standingRules delete or publish one draft article per message, so every
// turn makes one call of the tool.
const standingRules = `{"rules": [
 {"name": "delete-one", "match": "(?i)delete one draft",
  "steps": [
   {"tool_calls": [{"name": "list_entities", "arguments": {"type": "article", "status": "draft"}}]},
   {"tool_calls": [{"name": "delete_entities", "arguments_template": "{\"ids\": [{{json (index .Last.Structured.ids 0)}}]}"}]},
   {"text": "delete: {{.Last.Text}}"}]},
 {"name": "publish-one", "match": "(?i)publish one draft",
  "steps": [
   {"tool_calls": [{"name": "list_entities", "arguments": {"type": "article", "status": "draft"}}]},
   {"tool_calls": [{"name": "publish_entities", "arguments_template": "{\"ids\": [{{json (index .Last.Structured.ids 0)}}]}"}]},
   {"text": "publish: {{.Last.Text}}"}]}],
 "fallback": "?"}`

// acceptStanding accepts question id of thread granting a standing
// approval for the thread (ttl 0: the default lifetime).
func (s *system) acceptStanding(thread, id string, ttl int) *event.Event {
	s.t.Helper()
	choice := map[string]any{"scope": "thread"}
	if ttl > 0 {
		choice["ttlSeconds"] = ttl
	}
	e, err := s.client.Answer(s.ctx, thread, id, schema.ElicitResult{Action: schema.ActionAccept,
		Meta: schema.Meta{events.MetaStanding: choice}}, "")
	if err != nil {
		s.t.Fatal(err)
	}
	return e
}

// questions counts the questions asked on thread.
func (s *system) questions(thread string) int {
	return len(s.rec.matching(thread, events.TypeElicitationRequested))
}

// lastDecision returns the decision record of tool in the n-th
// turn.completed of thread.
func (s *system) lastDecision(thread string, n int, tool string) events.DecisionRecord {
	s.t.Helper()
	tc, err := events.Data[events.TurnCompleted](s.rec.await(s.t, 10*time.Second, thread, events.TypeTurnCompleted, n))
	if err != nil {
		s.t.Fatal(err)
	}
	for _, d := range tc.Decisions {
		if d.Tool == tool {
			return d
		}
	}
	s.t.Fatalf("turn.completed %d of %s has no decision for %s: %+v", n, thread, tool, tc.Decisions)
	return events.DecisionRecord{}
}

// grant runs "delete one draft" on thread and grants a standing approval
// on its confirmation; it returns after the turn completed.
func (s *system) grant(thread string, ttl int) {
	s.t.Helper()
	before := s.questions(thread)
	s.send(thread, "delete one draft")
	id, q := s.question(thread, before+1)
	if _, ok := q.Meta[events.MetaStanding]; !ok {
		s.t.Fatalf("the confirmation offers no standing approval: %v", q.Meta)
	}
	s.acceptStanding(thread, id, ttl)
	s.rec.await(s.t, 10*time.Second, thread, events.TypeApprovalGranted, 1)
	s.completed(thread, len(s.rec.matching(thread, events.TypeTurnCompleted))+1)
}

// A person allows delete_entities for the thread: the next delete in that
// thread runs without a question, its decision record says under whose
// standing approval (and no person answered it), and approval.granted and
// approval.used are on the bus with who granted it. Another tool, and the
// same tool in another thread, still ask; after a revoke the tool asks
// again.
func TestStandingApprovalSkipsTheNextConfirmation(t *testing.T) {
	s := start(t, options{rules: standingRules})
	s.grant("st1", 0)
	g, err := events.Data[events.ApprovalGranted](s.rec.matching("st1", events.TypeApprovalGranted)[0])
	if err != nil {
		t.Fatal(err)
	}
	if g.Approval.Tool != "delete_entities" || g.Approval.GrantedBy.Principal == "" || !g.Approval.Destructive ||
		g.Approval.ExpiresAt.Sub(g.Approval.GrantedAt) > s.opts.pauseTTL {
		t.Fatalf("granted %+v, want delete_entities by the answerer, destructive, at most the pause TTL", g.Approval)
	}
	drafts := s.drafts()

	s.send("st1", "delete one draft")
	s.completed("st1", 2)
	if n := s.questions("st1"); n != 1 {
		t.Fatalf("the second delete asked %d questions in all, want only the first", n)
	}
	if got := s.drafts(); got != drafts-1 {
		t.Fatalf("drafts %d, want %d: the second delete did not run", got, drafts-1)
	}
	d := s.lastDecision("st1", 2, "delete_entities")
	if d.Decision != events.DecisionConfirm || d.StandingApproval == nil || d.StandingApproval.ApprovalID != g.Approval.ID ||
		d.Action != "" || !d.AnsweredBy.IsZero() {
		t.Fatalf("decision %+v, want the policy's confirm under the standing approval, answered by nobody", d)
	}
	used := s.rec.await(t, 5*time.Second, "st1", events.TypeApprovalUsed, 1)
	if u, _ := events.Data[events.ApprovalUsed](used); u.Approval.ID != g.Approval.ID || u.CallID != d.CallID {
		t.Fatalf("approval.used %s, want the approval and call %s", used.Data(), d.CallID)
	}

	// Another tool asks.
	s.send("st1", "publish one draft")
	s.question("st1", 2)
	if n := len(s.rec.matching("st1", events.TypeApprovalUsed)); n != 1 {
		t.Fatalf("publish ran under the delete's approval (%d uses)", n)
	}
	id, _ := s.question("st1", 2)
	s.answer("st1", id, schema.ActionDecline, nil)
	s.completed("st1", 3)

	// The same tool in another thread asks.
	s.send("st2", "delete one draft")
	id, _ = s.question("st2", 1)
	s.answer("st2", id, schema.ActionDecline, nil)
	s.completed("st2", 1)

	// Listed, then revoked: the question comes back.
	list, err := s.client.Approvals(s.ctx, "st1", "", "")
	if err != nil || len(list.Approvals) != 1 || list.Approvals[0].Tool != "delete_entities" || list.Approvals[0].Uses != 1 {
		t.Fatalf("Approvals = %+v, %v, want the delete's, used once", list, err)
	}
	if l2, err := s.client.Approvals(s.ctx, "st2", "", ""); err != nil || len(l2.Approvals) != 0 {
		t.Fatalf("Approvals(st2) = %+v, %v, want none", l2, err)
	}
	rv, err := s.client.Approvals(s.ctx, "st1", "", "delete_entities")
	if err != nil || len(rv.Revoked) != 1 || len(rv.Approvals) != 0 {
		t.Fatalf("revoke = %+v, %v, want the delete's revoked, none left", rv, err)
	}
	r, err := events.Data[events.ApprovalRevoked](s.rec.await(t, 5*time.Second, "st1", events.TypeApprovalRevoked, 1))
	if err != nil || r.Approval.ID != g.Approval.ID || r.RevokedBy.Principal == "" {
		t.Fatalf("approval.revoked %+v, %v", r, err)
	}
	s.send("st1", "delete one draft")
	s.question("st1", 3)
}

// A stranger can neither list nor revoke a thread's approvals.
func TestStandingApprovalsBelongToTheThreadsParties(t *testing.T) {
	s := start(t, options{rules: standingRules})
	s.grant("st3", 0)
	other := s.client.WithPrincipal("mallory")
	if _, err := other.Approvals(s.ctx, "st3", "", ""); err == nil {
		t.Fatal("a stranger listed the thread's approvals")
	}
	if _, err := other.Approvals(s.ctx, "st3", "", "*"); err == nil {
		t.Fatal("a stranger revoked the thread's approvals")
	}
	if l, err := s.client.Approvals(s.ctx, "st3", "", ""); err != nil || len(l.Approvals) != 1 {
		t.Fatalf("Approvals = %+v, %v, want the approval still there", l, err)
	}
}

// switchPolicy is a policy service "switch" whose answer the test
// changes for delete_entities (it allows every other tool): the agent does not expect it, but its veto counts when it
// arrives before the gate's answer settles.
func switchPolicy(t *testing.T, s *system, decision *atomic.Value) {
	t.Helper()
	ctx, cancel := context.WithCancel(s.ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = s.bus.Serve(ctx, bus.Endpoint{Service: "parley-switch", Version: "0.1.0", Name: "pre_execute",
			Subject: events.SubjectPreExecAll, QueueGroup: "switch", ReplyAs: "switch"},
			func(ctx context.Context, req *event.Event) (*event.Event, error) {
				in, err := events.Data[events.PreExecuteRequest](req)
				if err != nil {
					return nil, err
				}
				d := events.PolicyDecision{Policy: "switch", Decision: events.DecisionAllow, Reason: "switched"}
				if in.Call.Name == "delete_entities" {
					d = decision.Load().(events.PolicyDecision)
				}
				return events.KindPreExecuteDecided.New("/parley/test", events.DerivedID("switch", req.ID()), req.Subject(), d)
			})
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// A veto is never overridden by a standing approval.
func TestStandingApprovalNeverPassesAVeto(t *testing.T) {
	s := start(t, options{rules: standingRules})
	var decision atomic.Value
	decision.Store(events.PolicyDecision{Policy: "switch", Decision: events.DecisionAllow})
	switchPolicy(t, s, &decision)
	time.Sleep(200 * time.Millisecond) // the service subscribes
	s.grant("st4", 0)
	decision.Store(events.PolicyDecision{Policy: "switch", Decision: events.DecisionVeto, Reason: "switched"})
	drafts := s.drafts()
	s.send("st4", "delete one draft")
	text := s.completed("st4", 2)
	if !strings.Contains(text, "denied") || s.drafts() != drafts {
		t.Fatalf("completed %q with %d drafts (had %d), want the veto", text, s.drafts(), drafts)
	}
	if d := s.lastDecision("st4", 2, "delete_entities"); d.Decision != events.DecisionVeto || d.StandingApproval != nil {
		t.Fatalf("decision %+v, want a veto, no standing approval", d)
	}
	if n := len(s.rec.matching("st4", events.TypeApprovalUsed)); n != 0 {
		t.Fatalf("the vetoed call used the approval %d times", n)
	}
}

// A policy that marks its confirm "ask every time" (here: the gating
// configuration's ask_every_time for the tool) gets no standing
// approval: the confirmation offers none, an answer that grants one
// anyway is refused naming the field, and the next call asks again.
func TestStandingApprovalAskEveryTime(t *testing.T) {
	cfg, err := gate.ParseConfig([]byte(`{"agents":{"*":{"require_tool_confirmation":true,
	  "tools":{"create_event":"never"},"ask_every_time":["delete_entities"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, options{rules: standingRules, gate: cfg})
	s.send("st5", "delete one draft")
	id, q := s.question("st5", 1)
	if _, ok := q.Meta[events.MetaStanding]; ok {
		t.Fatalf("an ask-every-time confirmation offers a standing approval: %v", q.Meta)
	}
	s.acceptStanding("st5", id, 0)
	s.rec.await(t, 5*time.Second, "st5", events.TypeElicitationRejected, 1)
	rj := s.rec.rejections("st5")[0]
	if rj.Reason != events.RejectInvalidContent || len(rj.Errors) == 0 || rj.Errors[0].Path != "_meta."+events.MetaStanding {
		t.Fatalf("rejection %+v, want invalid_content naming _meta.%s", rj, events.MetaStanding)
	}
	s.answer("st5", id, schema.ActionAccept, nil)
	s.completed("st5", 1)
	s.send("st5", "delete one draft")
	s.question("st5", 2)
}

// The deployment's per-agent switch (standing_approvals: false) forbids
// them for every tool of the agent.
func TestStandingApprovalForbiddenForTheAgent(t *testing.T) {
	cfg, err := gate.ParseConfig([]byte(`{"agents":{"*":{"require_tool_confirmation":true,"standing_approvals":false}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, options{rules: standingRules, gate: cfg})
	s.send("st6", "delete one draft")
	id, q := s.question("st6", 1)
	if _, ok := q.Meta[events.MetaStanding]; ok {
		t.Fatalf("a confirmation of an agent without standing approvals offers one: %v", q.Meta)
	}
	s.answer("st6", id, schema.ActionAccept, nil)
	s.completed("st6", 1)
	s.send("st6", "delete one draft")
	s.question("st6", 2)
}

// A standing approval of a destructive tool lasts at most the pause TTL:
// once it expired, the tool asks again.
func TestStandingApprovalExpires(t *testing.T) {
	s := start(t, options{rules: standingRules, pauseTTL: 3 * time.Second})
	s.grant("st7", 0)
	g, _ := events.Data[events.ApprovalGranted](s.rec.matching("st7", events.TypeApprovalGranted)[0])
	if life := g.Approval.ExpiresAt.Sub(g.Approval.GrantedAt); life != 3*time.Second {
		t.Fatalf("approval lasts %v, want the pause TTL, 3s", life)
	}
	time.Sleep(time.Until(g.Approval.ExpiresAt) + 1500*time.Millisecond)
	s.send("st7", "delete one draft")
	s.question("st7", 2)
}

// A revoke racing calls: no call asked after the revoke returned runs
// under the approval. Uses go straight to the processor's endpoint (as the
// agent asks), in a loop beside the revoke.
func TestStandingApprovalRevokeRacingACall(t *testing.T) {
	s := start(t, options{rules: standingRules})
	s.grant("st8", 0)
	g, _ := events.Data[events.ApprovalGranted](s.rec.matching("st8", events.TypeApprovalGranted)[0])
	use := func(i int) bool {
		req, err := events.KindApprovalUseRequested.New("/parley/test", events.DerivedID("race", "st8", string(rune(i))), "st8",
			events.ApprovalUseRequest{RunID: "race", CallID: "c" + string(rune('a'+i%26)), Round: i})
		if err != nil {
			t.Fatal(err)
		}
		reply, err := s.bus.Request(s.ctx, events.ApprovalUseSubject(g.Approval.Agent, "st8", "delete_entities"), req)
		if err != nil {
			t.Error(err)
			return false
		}
		out, _ := events.Data[events.ApprovalUseReply](reply)
		return out.Approval != nil
	}
	var revoked atomic.Int64 // UnixNano when the revoke returned
	var after atomic.Int64   // uses approved although asked after it
	var approved atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w * 1000; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				asked := time.Now().UnixNano()
				ok := use(i)
				if ok {
					approved.Add(1)
				}
				if r := revoked.Load(); ok && r != 0 && asked > r {
					after.Add(1)
				}
			}
		})
	}
	began := time.Now()
	time.Sleep(100 * time.Millisecond)
	if _, err := s.client.Approvals(s.ctx, "st8", "", "delete_entities"); err != nil {
		t.Fatal(err)
	}
	revoked.Store(time.Now().UnixNano())
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d uses approved (a revision-checked write and an approval.used event each) in %v before the revoke, 4 askers",
		approved.Load(), time.Duration(revoked.Load()-began.UnixNano()))
	if approved.Load() == 0 {
		t.Fatal("no use was approved before the revoke: the race was not run")
	}
	if n := after.Load(); n != 0 {
		t.Fatalf("%d uses asked after the revoke returned were approved", n)
	}
}

// A policy that marks its confirm "ask every time" after an approval was
// granted: the approval is there, yet the call asks (the agent does not
// consult approvals for such a decision).
func TestStandingApprovalAskEveryTimeAfterAGrant(t *testing.T) {
	s := start(t, options{rules: standingRules})
	var decision atomic.Value
	decision.Store(events.PolicyDecision{Policy: "switch", Decision: events.DecisionAllow})
	switchPolicy(t, s, &decision)
	time.Sleep(200 * time.Millisecond) // the service subscribes
	s.grant("st9", 0)
	decision.Store(events.PolicyDecision{Policy: "switch", Decision: events.DecisionConfirm, AskEveryTime: true})
	s.send("st9", "delete one draft")
	s.question("st9", 2)
	if n := len(s.rec.matching("st9", events.TypeApprovalUsed)); n != 0 {
		t.Fatalf("an ask-every-time call used the approval %d times", n)
	}
	if l, err := s.client.Approvals(s.ctx, "st9", "", ""); err != nil || len(l.Approvals) != 1 {
		t.Fatalf("Approvals = %+v, %v, want the approval still there", l, err)
	}
}
