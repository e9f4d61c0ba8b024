package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/parley-dev/parley/events"
)

// StandingTimeout bounds how long the agent waits for the processor's
// answer whether a call runs under a standing approval. Without an answer
// (no processor, a timeout) the person is asked: failing safe.
const StandingTimeout = 2 * time.Second

// runStanding decides c, which the policies asked a person to confirm,
// under a standing approval when one covers it (docs/POLICY.md): unless a
// policy marked its decision "ask every time", it asks the processor (the
// owner of the approvals) on parley.approval.use.<agent>.<thread>.<tool>,
// which records the use before it answers, so a revoke racing the call
// either came first (the person is asked) or comes after the use. On an
// approval the call is dispatched with c.Standing set (the decision
// record then names who granted the approval, never a person answering
// this call) and runStanding reports true; otherwise nothing changes.
// Only a confirm is ever covered: a veto never reaches here.
func (a *Agent) runStanding(ctx context.Context, run *Run, c *CallState) bool {
	if c.Policy == nil || c.Policy.Decision != events.DecisionConfirm || c.Policy.AsksEveryTime() || c.Answer != nil {
		return false
	}
	if events.ValidToken("agent", run.Agent) != nil || events.ValidToken("thread", run.Thread) != nil {
		return false
	}
	req, err := events.KindApprovalUseRequested.New(events.SourceAgent,
		events.DerivedID("approval.use", run.RunID, c.Call.ID, fmt.Sprint(c.Round)), run.Thread,
		events.ApprovalUseRequest{RunID: run.RunID, CallID: c.Call.ID, Round: c.Round})
	if err != nil {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, StandingTimeout)
	defer cancel()
	reply, err := a.bus.Request(rctx, events.ApprovalUseSubject(run.Agent, run.Thread, c.Call.Name), req)
	if err != nil {
		a.log.WarnContext(ctx, "no answer whether a standing approval covers the call; asking the person", "tool", c.Call.Name,
			"run_id", run.RunID, "error", err)
		return false
	}
	out, err := events.Data[events.ApprovalUseReply](reply)
	if err != nil || events.TypeOf(reply) != events.TypeApprovalUseAnswered {
		a.log.ErrorContext(ctx, "unreadable answer about a standing approval; asking the person", "tool", c.Call.Name,
			"run_id", run.RunID, "type", reply.Type(), "error", err)
		return false
	}
	ap := out.Approval
	if ap == nil || ap.Thread != run.Thread || ap.Agent != run.Agent || ap.Tool != c.Call.Name {
		return false
	}
	c.Standing = &events.StandingUse{ApprovalID: ap.ID, GrantedBy: ap.GrantedBy, GrantedAt: ap.GrantedAt, ExpiresAt: ap.ExpiresAt}
	c.Decision = &events.Decision{Decision: events.DecisionAllow,
		Reason: "allowed by the standing approval " + ap.GrantedBy.String() + " granted for " + c.Call.Name + " in this thread",
		Policy: c.Policy.Policy, ConfigVersion: c.Policy.ConfigVersion}
	c.Status = callDispatched
	a.log.InfoContext(ctx, "tool call runs under a standing approval", "tool", c.Call.Name, "run_id", run.RunID,
		"approval", ap.ID, "granted_by", ap.GrantedBy.String())
	return true
}
