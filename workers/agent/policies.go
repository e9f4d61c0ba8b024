package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/metrics"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// DefaultPolicies is the policy set an agent expects by default: the gate.
var DefaultPolicies = []string{"gate"}

// preExecute asks every policy service about c and combines their answers
// (see combine). One request goes out on
// parley.tool.pre_execute.<agent>.<tool> with the reply subject
// _INBOX_<principal>.pre_execute.<unique>; each policy answers on
// <reply>.<its name> (events.PolicyReplySubject), and the agent takes the
// policy's name from that subject, never from the reply's data: under
// parley's NATS permissions only policy P's principal may publish there.
// Replies are gathered until every expected policy answered (then, unless
// one vetoed or the tool is read-only, for PreExecuteSettle more, so a
// second reply for a policy still counts), MaxPolicyReplies arrived or
// PreExecuteTimeout passed.
// When nobody answers at all (no responders, or silence until the
// deadline) it asks again, up to three times, before concluding
// policy_unavailable.
func (a *Agent) preExecute(ctx context.Context, run *Run, c *CallState, tool *schema.Tool) (*events.Decision, error) {
	if err := events.ValidToken("agent", run.Agent); err != nil {
		return nil, bus.Permanent(err)
	}
	data := events.PreExecuteRequest{Agent: run.Agent, Thread: run.Thread, RunID: run.RunID, Call: c.Call, Tool: *tool}
	if c.Edit != nil {
		data.Edited = &events.EditedCall{OriginalArguments: c.Edit.OriginalArguments, By: c.Edit.By}
	}
	req, err := events.KindPreExecuteRequested.New(events.SourceAgent,
		events.DerivedID(append([]string{"pre_execute", run.RunID, c.Call.ID, fmt.Sprint(c.Round)}, editKey(c)...)...), run.Thread, data)
	if err != nil {
		return nil, err
	}
	subject, err := events.SubjectOf(req, "", run.Agent, c.Call.Name)
	if err != nil {
		return nil, bus.Permanent(err)
	}
	var (
		g    *gathering
		last error
	)
	// Only a call that is not read-only (by the registered definition)
	// waits PreExecuteSettle for a second answer of a policy: that wait is
	// what keeps a stricter answer from being lost to a faster one, and it
	// matters where the call changes something; a read turn pays nothing.
	readOnly := tool.Annotations.ReadOnly()
	for attempt, pause := range []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, 0} {
		g = &gathering{a: a, run: run, c: c, byPolicy: map[string]int{}}
		rctx, cancel := context.WithTimeout(ctx, a.opts.PreExecuteTimeout)
		var settle *time.Timer
		_, last = a.bus.RequestMany(rctx, subject, events.PreExecuteReplyScope, req, events.MaxPolicyReplies,
			func(r bus.Reply) bool {
				if !g.add(ctx, r) {
					return true
				}
				if !allAnswered(a.opts.Policies, g.answered()) {
					return true
				}
				if g.vetoed() || readOnly {
					// Nothing is stricter than a veto; and a read-only
					// call does not wait for a second answer (below).
					return false
				}
				if settle == nil {
					settle = time.AfterFunc(a.opts.PreExecuteSettle, cancel)
				}
				return true
			})
		if settle != nil {
			settle.Stop()
		}
		cancel()
		if len(g.got) > 0 || pause == 0 || ctx.Err() != nil {
			break
		}
		a.log.WarnContext(ctx, "pre-execute request unanswered; asking again", "tool", c.Call.Name,
			"run_id", run.RunID, "attempt", attempt+1, "timeout", a.opts.PreExecuteTimeout, "error", last)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err // shutting down: not a verdict
	}
	got := g.got
	d := combine(a.opts.Policies, got, tool.Annotations.ReadOnly(), a.opts.PreExecuteTimeout)
	if len(got) == 0 {
		switch {
		case bus.IsNoResponders(last):
			d.Reason = "no policy service is subscribed"
		case last != nil:
			d.Reason = "no policy service answered: " + last.Error()
		default:
			d.Reason = "no policy service answered within " + a.opts.PreExecuteTimeout.String()
		}
	}
	recordSpan(ctx, c, d)
	return &d, nil
}

// gathering is the replies of one pre-execute request: one entry per
// policy, in the order policies first answered.
type gathering struct {
	a        *Agent
	run      *Run
	c        *CallState
	got      []events.PolicyDecision
	byPolicy map[string]int // policy name -> index in got
}

// add reads one reply and reports whether it counts. A reply on the bare
// reply subject names no policy NATS vouches for: it is logged and
// ignored. A second reply for a policy is logged and counted
// (metrics.PolicyDuplicateReply); the stricter of the two is kept (veto >
// confirm > allow > no decision).
func (g *gathering) add(ctx context.Context, r bus.Reply) bool {
	if r.Responder == "" || events.ValidToken("policy", r.Responder) != nil {
		g.a.log.WarnContext(ctx, "pre-execute reply not on <reply>.<policy>: nobody vouches for who sent it; ignored",
			"tool", g.c.Call.Name, "run_id", g.run.RunID, "responder", shortToken(r.Responder))
		return false
	}
	d := g.a.readReply(ctx, g.run, g.c, r)
	i, dup := g.byPolicy[d.Policy]
	if !dup {
		g.byPolicy[d.Policy] = len(g.got)
		g.got = append(g.got, d)
		return true
	}
	metrics.PolicyDuplicateReply(ctx, d.Policy)
	first := g.got[i]
	if strictness(d.Decision) > strictness(first.Decision) {
		g.got[i] = d
	}
	g.a.log.WarnContext(ctx, "a policy answered one pre-execute request twice; the stricter answer counts",
		"tool", g.c.Call.Name, "run_id", g.run.RunID, "policy", d.Policy,
		"first", first.Decision, "second", d.Decision, "kept", g.got[i].Decision)
	return true
}

// answered is the set of policies that gave a decision.
func (g *gathering) answered() map[string]bool {
	out := make(map[string]bool, len(g.got))
	for _, d := range g.got {
		if d.Decision != events.DecisionUnavailable {
			out[d.Policy] = true
		}
	}
	return out
}

// vetoed reports whether any policy vetoed.
func (g *gathering) vetoed() bool {
	for _, d := range g.got {
		if d.Decision == events.DecisionVeto {
			return true
		}
	}
	return false
}

// shortToken is s cut to 64 bytes (valid UTF-8), for a log line.
func shortToken(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.ToValidUTF8(s, "?")
}

// strictness orders decisions: veto > confirm > allow > anything else (no
// decision).
func strictness(decision string) int {
	switch decision {
	case events.DecisionVeto:
		return 3
	case events.DecisionConfirm:
		return 2
	case events.DecisionAllow:
		return 1
	}
	return 0
}

// allAnswered reports whether every expected policy has answered.
func allAnswered(expected []string, answered map[string]bool) bool {
	for _, p := range expected {
		if !answered[p] {
			return false
		}
	}
	return true
}

// readReply reads one reply of policy r.Responder (the policy the subject
// it arrived on names). The reply contract is closed
// (events.PolicyDecision): a reply that is unreadable, of another type,
// without a policy name or decision, naming another policy than the one
// that sent it, or with any other member — such as an elicitation, a
// message or arguments a policy has no business sending — is malformed and
// counts as a veto of that policy (reason policy_malformed), logged. A
// micro error reply (the policy failed) counts as that policy being
// unavailable.
func (a *Agent) readReply(ctx context.Context, run *Run, c *CallState, r bus.Reply) events.PolicyDecision {
	policy := r.Responder
	if r.Err != nil {
		var se *bus.ServiceError
		if errors.As(r.Err, &se) {
			a.log.ErrorContext(ctx, "a policy service answered with an error", "tool", c.Call.Name, "run_id", run.RunID,
				"policy", policy, "error", r.Err)
			return events.PolicyDecision{Policy: policy, Decision: events.DecisionUnavailable, Reason: cutReason("policy_error: " + r.Err.Error())}
		}
	}
	d, err := decodeReply(r)
	if err == nil && d.Policy != policy {
		err = fmt.Errorf("data.policy: %q, but the reply came from policy %s (a policy answers only as itself)", d.Policy, policy)
	}
	if err != nil {
		a.log.ErrorContext(ctx, "malformed policy reply; counted as a veto (fail closed)", "tool", c.Call.Name,
			"run_id", run.RunID, "policy", policy, "error", err)
		return events.PolicyDecision{Policy: policy, Decision: events.DecisionVeto,
			Reason: cutReason(events.ReasonPolicyMalformed + ": " + err.Error())}
	}
	d.Reason = cutReason(d.Reason)
	return d
}

// decodeReply decodes a reply strictly as an events.PolicyDecision. On
// error the returned decision carries the policy name the data gives when
// it could be read (readReply attributes the answer to the policy that
// sent it, whatever the data says).
func decodeReply(r bus.Reply) (events.PolicyDecision, error) {
	if r.Err != nil {
		return events.PolicyDecision{}, r.Err
	}
	e := r.Event
	var named struct {
		Policy string `json:"policy"`
	}
	var d events.PolicyDecision
	if json.Unmarshal(e.Data(), &named) == nil && events.ValidToken("policy", named.Policy) == nil {
		d.Policy = named.Policy
	}
	if events.TypeOf(e) != events.TypePreExecuteDecided {
		return d, fmt.Errorf("type: %q, want %q", e.Type(), events.TypePreExecuteDecided)
	}
	// A repeated member ("decision" twice: encoding/json keeps the last,
	// another reader the first) or text that is not valid Unicode.
	if err := events.CheckData(e.Data()); err != nil {
		return d, err
	}
	dec := json.NewDecoder(bytes.NewReader(e.Data()))
	dec.DisallowUnknownFields()
	var in events.PolicyDecision
	if err := dec.Decode(&in); err != nil {
		return d, fmt.Errorf("data: %w (a policy answers only policy, decision, reason, configVersion, reconfirm and askEveryTime)", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return d, errors.New("data: unexpected data after the JSON object")
	}
	if err := events.ValidToken("policy", in.Policy); err != nil {
		return d, fmt.Errorf("data.%w", err)
	}
	switch in.Decision {
	case events.DecisionAllow, events.DecisionVeto, events.DecisionConfirm:
	default:
		return in, fmt.Errorf(`data.decision: %q must be "allow", "veto" or "confirm"`, in.Decision)
	}
	return in, nil
}

// cutReason keeps a reason within events.MaxPolicyReasonBytes (on a rune
// boundary).
func cutReason(s string) string {
	if len(s) <= events.MaxPolicyReasonBytes {
		return s
	}
	cut := events.MaxPolicyReasonBytes - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// combine is the decision rule (docs/POLICY.md). got holds every reply in
// arrival order; each expected policy that gave no decision is added as a
// policy_timeout entry: a veto when the tool is not read-only (fail
// closed), else policy_unavailable (ignored). Then any veto wins; then any
// confirm; allow only when every answering policy allowed. When no policy
// gave a decision at all the result is policy_unavailable (the caller
// runs a read-only tool and fails any other closed, as with no policy).
func combine(expected []string, got []events.PolicyDecision, readOnly bool, timeout time.Duration) events.Decision {
	all := slices.Clone(got)
	decided := map[string]bool{}
	for _, d := range got {
		if d.Decision != events.DecisionUnavailable {
			decided[d.Policy] = true
		}
	}
	if len(decided) == 0 {
		for _, p := range expected {
			all = append(all, events.PolicyDecision{Policy: p, Decision: events.DecisionUnavailable,
				Reason: fmt.Sprintf("%s: no answer within %s", events.ReasonPolicyTimeout, timeout)})
		}
		return events.Decision{Decision: events.DecisionUnavailable, Policies: all}
	}
	for _, p := range expected {
		if decided[p] {
			continue
		}
		d := events.PolicyDecision{Policy: p, Decision: events.DecisionVeto,
			Reason: fmt.Sprintf("%s: policy %s did not answer within %s", events.ReasonPolicyTimeout, p, timeout)}
		if readOnly {
			d.Decision = events.DecisionUnavailable
		}
		all = append(all, d)
	}
	out := events.DecisionAllow
	for _, d := range all {
		switch {
		case d.Decision == events.DecisionVeto:
			out = events.DecisionVeto
		case d.Decision == events.DecisionConfirm && out != events.DecisionVeto:
			out = events.DecisionConfirm
		}
	}
	var names, reasons, versions []string
	for _, d := range all {
		if d.Decision != out {
			continue
		}
		names = append(names, d.Policy)
		if d.Reason != "" {
			reasons = append(reasons, d.Reason)
		}
		if d.ConfigVersion != "" && !slices.Contains(versions, d.ConfigVersion) {
			versions = append(versions, d.ConfigVersion)
		}
	}
	return events.Decision{Decision: out, Policy: strings.Join(names, ","), Reason: cutReason(strings.Join(reasons, "; ")),
		ConfigVersion: strings.Join(versions, ","), Policies: all}
}

// recordSpan adds every policy's answer to the span of ctx, as the event
// "parley.pre_execute.decided".
func recordSpan(ctx context.Context, c *CallState, d events.Decision) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	var names, decisions, reasons, versions []string
	for _, p := range d.Policies {
		names = append(names, p.Policy)
		decisions = append(decisions, p.Decision)
		reasons = append(reasons, p.Reason)
		versions = append(versions, p.ConfigVersion)
	}
	span.AddEvent("parley.pre_execute.decided", trace.WithAttributes(
		attribute.String("parley.tool.name", c.Call.Name),
		attribute.String("parley.tool.call_id", c.Call.ID),
		attribute.String("parley.policy.decision", d.Decision),
		attribute.StringSlice("parley.policy.names", names),
		attribute.StringSlice("parley.policy.decisions", decisions),
		attribute.StringSlice("parley.policy.reasons", reasons),
		attribute.StringSlice("parley.policy.config_versions", versions),
	))
}

// recordDecision writes the decision record of c's next dispatch into
// parley_decisions, the evidence the tool-executor checks before running a
// tool that is not read-only: the policies allowed it, or a policy asked
// and a person accepted. ann are the annotations of the registered
// definition the call was decided on. A call with neither (a read-only
// tool run while no policy answered) gets no record. Recording again on a
// redelivery is a no-op; a record that differs is logged and left alone
// (the tool-executor compares the tool and arguments, which cannot differ
// for one dispatch).
func (a *Agent) recordDecision(ctx context.Context, run *Run, c *CallState, ann *schema.ToolAnnotations) error {
	p := c.Policy
	if p == nil {
		p = c.Decision
	}
	if p == nil {
		return nil
	}
	rec := kvstate.CallDecision{Format: kvstate.DecisionFormat, Run: run.RunID, Call: c.Call.ID, Round: c.Round,
		Tool: c.Call.Name, Decision: p.Decision, Policies: p.Policies, Annotations: ann, At: time.Now().UTC()}
	switch p.Decision {
	case events.DecisionAllow:
	case events.DecisionConfirm:
		if c.Standing != nil { // a person allowed the tool in the thread earlier
			rec.ConfirmedBy = &kvstate.Answerer{Principal: c.Standing.GrantedBy.Principal, OnBehalfOf: c.Standing.GrantedBy.OnBehalfOf}
			rec.StandingApproval = c.Standing.ApprovalID
			break
		}
		if c.Answer == nil || c.Answer.Result.Action != schema.ActionAccept {
			return nil // not accepted: nothing may run (and nothing is dispatched)
		}
		rec.ConfirmedBy = answerer(*c.Answer)
	default:
		return nil
	}
	if rec.Policies == nil {
		// A record from before policies were gathered: the one decision.
		rec.Policies = []events.PolicyDecision{{Policy: p.Policy, Decision: p.Decision, Reason: p.Reason, ConfigVersion: p.ConfigVersion}}
	}
	sum, err := schema.ArgumentsSHA256(c.Call.Arguments)
	if err != nil {
		return bus.Permanent(fmt.Errorf("hashing the arguments of %s: %w", c.Call.ID, err))
	}
	rec.ArgumentsSHA256 = sum
	err = a.decisions.Record(ctx, rec)
	if errors.Is(err, kvstate.ErrDecisionDiffers) {
		a.log.ErrorContext(ctx, "a different decision record exists for this dispatch; leaving it", "tool", c.Call.Name,
			"run_id", run.RunID, "call_id", c.Call.ID, "round", c.Round)
		return nil
	}
	return err
}

// answerer reads who answered a confirmation. The answer's answeredBy is
// read from its JSON form, so both shapes parse: a string (a name, before
// answerers were authenticated) and {principal, onBehalfOf?}. nil when it
// names nobody.
func answerer(ans events.Answer) *kvstate.Answerer {
	if ans.AnsweredBy.IsZero() {
		return nil
	}
	// A legacy free-text answeredBy decodes with no Principal: it stays
	// an unverified onBehalfOf, never a principal.
	return &kvstate.Answerer{Principal: ans.AnsweredBy.Principal, OnBehalfOf: ans.AnsweredBy.OnBehalfOf}
}
