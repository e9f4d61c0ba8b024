package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// Standing approvals (events.MetaStanding; docs/POLICY.md). The processor
// owns them: it authenticates the accept that grants one, knows the
// thread's parties for a list or a revoke, and the pause and thread TTLs
// that bound them. They live in BucketApprovals under
// <thread>.<agent>.<tool> with a per-key TTL until the approval's
// expiry; the bucket's own TTL is the thread TTL, so no approval outlives
// its thread (parley has no thread deletion: a thread's record goes when
// it is untouched for ThreadTTL).

// BucketApprovals is the processor's bucket of standing approvals.
const BucketApprovals = "parley_approvals"

// approvalKey is the key of the approval of tool by agent in thread.
func approvalKey(thread, agent, tool string) string {
	return thread + "." + agent + "." + tool
}

// approvalStore is the processor's access to BucketApprovals: every
// write goes through s, which keeps each record's TTL until its
// ExpiresAt; b only lists a thread's keys.
type approvalStore struct {
	b *kvstate.Bucket[json.RawMessage]
	s *kvstate.Store[events.Approval]
}

func openApprovals(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int, threadTTL time.Duration) (*approvalStore, error) {
	b, err := kvstate.OpenBucket[json.RawMessage](ctx, js, BucketApprovals,
		kvstate.BucketOptions{Storage: storage, Replicas: replicas, TTL: threadTTL, PerKeyTTL: true})
	if err != nil {
		return nil, err
	}
	return &approvalStore{b: b, s: kvstate.NewStore(b, kvstate.StoreOptions[events.Approval]{
		Name:      "standing approval",
		ExpiresAt: func(a *events.Approval) time.Time { return a.ExpiresAt },
	})}, nil
}

// list returns thread's live approvals, sorted by agent and tool.
func (s *approvalStore) list(ctx context.Context, thread string) ([]events.Approval, []uint64, error) {
	lister, err := s.b.KV().ListKeysFiltered(ctx, thread+".>")
	if err != nil {
		return nil, nil, fmt.Errorf("listing the approvals of %s: %w", thread, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []events.Approval
	var revs []uint64
	now := time.Now()
	for _, k := range keys {
		a, rev, err := s.s.Get(ctx, k)
		if errors.Is(err, kvstate.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if !now.Before(a.ExpiresAt) {
			continue // expired to the second; the server removes it
		}
		out = append(out, *a)
		revs = append(revs, rev)
	}
	return out, revs, nil
}

// standingMax is how long an approval of a tool may last: the pause TTL
// for a destructive tool (or one whose annotations are unknown), the
// thread TTL otherwise.
func (p *Processor) standingMax(destructive bool) time.Duration {
	if destructive {
		return p.opts.PauseTTL
	}
	return p.opts.ThreadTTL
}

// destructiveCall reports whether the confirmation request asks about a
// tool that is not known to be harmless: MCP destructiveHint (default
// true) of the annotations the agent put in _meta["drupal.org/ai.tool_call"].
func destructiveCall(req *schema.ElicitRequestParams) bool {
	raw, err := json.Marshal(req.Meta[schema.MetaToolCall])
	if err != nil {
		return true
	}
	var tc schema.ToolCallMeta
	if json.Unmarshal(raw, &tc) != nil || tc.Annotations == nil {
		return true
	}
	return !tc.Annotations.ReadOnly() && tc.Annotations.Destructive()
}

// offerStanding adds the standing-approval offer (events.StandingOffer)
// to a tool confirmation whose policies allow one: a confirm no policy
// marked "ask every time", while the deployment has standing approvals
// on. Other questions get no offer, and an answer cannot grant one.
func (p *Processor) offerStanding(pe *events.PendingElicitation) {
	if p.opts.NoStandingApprovals || pe.Kind != events.KindToolConfirmation || pe.Decision == nil ||
		pe.Decision.Decision != events.DecisionConfirm || pe.Decision.AsksEveryTime() {
		return
	}
	limit := p.standingMax(destructiveCall(&pe.Request))
	offer := events.StandingOffer{Scopes: []string{events.StandingScopeThread}, MaxSeconds: int(limit / time.Second)}
	for _, d := range p.opts.StandingTTLs {
		if d < limit {
			offer.TTLSeconds = append(offer.TTLSeconds, int(d/time.Second))
		}
	}
	pe.Request.Meta = maps.Clone(pe.Request.Meta)
	if pe.Request.Meta == nil {
		pe.Request.Meta = schema.Meta{}
	}
	pe.Request.Meta[events.MetaStanding] = offer
}

// standingPath is the field an answer's standing choice is named by in
// violations.
const standingPath = "_meta." + events.MetaStanding

// standingChoice reads the standing approval an answer r to the question
// el grants: nil when it grants none. The violations name the field and
// the rule: a choice on a question that offered none, another scope, or a
// lifetime not offered. A choice on anything but an accept is no grant
// (dropped names it).
func standingChoice(el *Elicitation, r schema.ElicitResult) (choice *events.StandingChoice, dropped string, vs []schema.Violation) {
	raw, ok := r.Meta[events.MetaStanding]
	if !ok {
		return nil, "", nil
	}
	if r.Action != schema.ActionAccept {
		return nil, standingPath, nil
	}
	offerRaw, offered := el.Request.Meta[events.MetaStanding]
	if !offered {
		return nil, "", []schema.Violation{{Path: standingPath,
			Rule: "this question offers no standing approval (a policy asks every time, or it is not a tool confirmation)"}}
	}
	var offer events.StandingOffer
	b, _ := json.Marshal(offerRaw)
	_ = json.Unmarshal(b, &offer)
	b, err := json.Marshal(raw)
	var c events.StandingChoice
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&c)
	}
	if err != nil {
		return nil, "", []schema.Violation{{Path: standingPath, Rule: `must be {"scope": "thread", "ttlSeconds"?: integer}: ` + err.Error()}}
	}
	if c.Scope != events.StandingScopeThread {
		return nil, "", []schema.Violation{{Path: standingPath + ".scope", Rule: fmt.Sprintf(`%q must be "thread"`, c.Scope)}}
	}
	if c.TTLSeconds != 0 && !slices.Contains(offer.TTLSeconds, c.TTLSeconds) {
		return nil, "", []schema.Violation{{Path: standingPath + ".ttlSeconds",
			Rule: fmt.Sprintf("%d must be one of the lifetimes offered, %v (or absent)", c.TTLSeconds, offer.TTLSeconds)}}
	}
	return &c, "", nil
}

// checkStandingRoom refuses a grant that would give thread more than
// events.MaxApprovalsPerThread approvals (replacing the one of the same
// agent and tool does not count).
func (p *Processor) checkStandingRoom(ctx context.Context, thread, agent, tool string) []schema.Violation {
	have, _, err := p.approvals.list(ctx, thread)
	if err != nil {
		return []schema.Violation{{Path: standingPath, Rule: "the thread's standing approvals cannot be read: " + err.Error()}}
	}
	n := 0
	for _, a := range have {
		if a.Agent != agent || a.Tool != tool {
			n++
		}
	}
	if n >= events.MaxApprovalsPerThread {
		return []schema.Violation{{Path: standingPath, Rule: fmt.Sprintf(
			"the thread holds %d standing approvals, the most it may; revoke one first", n)}}
	}
	return nil
}

// standingRoom checks, before an accept that grants a standing approval
// is consumed, that the thread has room for one more
// (checkStandingRoom); nil when the answer grants none.
func (p *Processor) standingRoom(ctx context.Context, t *Thread, in events.ElicitationResponded) []schema.Violation {
	if p.approvals == nil || in.Action != schema.ActionAccept || t.Paused == nil {
		return nil
	}
	if _, ok := in.Meta[events.MetaStanding]; !ok {
		return nil
	}
	el := t.Paused.Find(in.ElicitationID)
	if el == nil || el.Status != StatusPending {
		return nil // refused or settled by the usual checks
	}
	return p.checkStandingRoom(ctx, t.ID, t.Paused.Agent, el.Tool)
}

// grantStanding stores the standing approval the consumed accept of el
// grants (if it grants one) and announces approval.granted. Called only
// when the answer was consumed now: a redelivery does not grant again (a
// revoke in between stays revoked). It replaces an earlier approval of
// the same tool and agent.
func (p *Processor) grantStanding(ctx context.Context, t *Thread, el *Elicitation) error {
	if p.approvals == nil || el == nil || el.Result == nil || t.Paused == nil {
		return nil
	}
	c, _, vs := standingChoice(el, *el.Result)
	if c == nil || len(vs) > 0 {
		return nil
	}
	agent := t.Paused.Agent
	destructive := destructiveCall(&el.Request)
	life := p.standingMax(destructive)
	if c.TTLSeconds > 0 && time.Duration(c.TTLSeconds)*time.Second < life {
		life = time.Duration(c.TTLSeconds) * time.Second
	}
	granted := el.AnsweredAt
	if granted.IsZero() {
		granted = time.Now().UTC()
	}
	a := events.Approval{ID: events.DerivedID("approval", t.ID, el.ID), Thread: t.ID, Agent: agent, Tool: el.Tool,
		Scope: c.Scope, GrantedBy: el.AnsweredBy, GrantedAt: granted, ExpiresAt: granted.Add(life),
		ElicitationID: el.ID, Destructive: destructive}
	key := approvalKey(t.ID, agent, el.Tool)
	// Replace: the grant overwrites whatever approval of the tool is
	// there, even one this version cannot read.
	_, err := p.approvals.s.Replace(ctx, key, &a)
	if errors.Is(err, kvstate.ErrExpired) {
		return nil // granted longer ago than it lasts (a slow redelivery)
	}
	if err != nil {
		return fmt.Errorf("storing the standing approval of %s: %w", key, err)
	}
	p.log.InfoContext(ctx, "standing approval granted", "subject", t.ID, "tool", el.Tool, "agent", agent,
		"granted_by", a.GrantedBy.String(), "expires_at", a.ExpiresAt)
	return publishChat(ctx, p, t.ID, events.KindApprovalGranted, events.DerivedID("approval.granted", a.ID),
		t.Paused.TurnID, events.ApprovalGranted{Approval: a})
}

// ServeApprovals answers the integrators' approvals requests
// (events.SubjectApprovalsAll) and the agent's approval-use requests
// (events.SubjectApprovalUseAll) until ctx is cancelled. Replicas share
// the queue group "processor-approvals".
func (p *Processor) ServeApprovals(ctx context.Context) error {
	errs := make(chan error, 2)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		errs <- p.bus.Serve(ctx, bus.Endpoint{
			Service: StateService, Version: "0.1.0", Name: "approvals", Subject: events.SubjectApprovalsAll,
			QueueGroup: "processor-approvals", Description: "parley processor: list and revoke a thread's standing approvals",
		}, p.answerApprovals)
	}()
	go func() {
		errs <- p.bus.Serve(ctx, bus.Endpoint{
			Service: StateService, Version: "0.1.0", Name: "approval-use", Subject: events.SubjectApprovalUseAll,
			QueueGroup: "processor-approvals", Description: "parley processor: whether a call runs under a standing approval",
		}, p.answerApprovalUse)
	}()
	err := <-errs
	cancel()
	if err2 := <-errs; err == nil {
		err = err2
	}
	return err
}

// answerApprovals lists or revokes the standing approvals of the thread
// of parley.approvals.<principal>.<thread>: any party of the thread may
// list them, only its owner may revoke.
func (p *Processor) answerApprovals(ctx context.Context, req *event.Event) (*event.Event, error) {
	principal, thread, ok := events.ParseApprovalsSubject(bus.RequestSubject(ctx))
	if !ok {
		return nil, fmt.Errorf("subject %q: must be parley.approvals.<principal>.<thread> with tokens of A-Z a-z 0-9 _ -", bus.RequestSubject(ctx))
	}
	in, err := events.Data[events.ApprovalsRequest](req)
	if err != nil {
		return nil, err
	}
	if in.Revoke != "" && in.Revoke != "*" {
		if err := events.ValidToken("data.revoke", in.Revoke); err != nil {
			return nil, fmt.Errorf(`%w (or "*" for every approval)`, err)
		}
	}
	reply := events.ApprovalsReply{Thread: thread, Approvals: []events.Approval{}}
	answer := func() (*event.Event, error) {
		return events.KindApprovalsAnswered.New(events.SourceProcessor, events.DerivedID("approvals", req.ID()), thread, reply)
	}
	who, err := p.identify(principal, req, in.OnBehalfOf, "data.onBehalfOf")
	if err != nil {
		reply.Forbidden = true
		return answer()
	}
	t, _, err := p.threads.Get(ctx, thread)
	if err != nil {
		return nil, fmt.Errorf("reading thread %s: %w", thread, err)
	}
	if mayUse(t, who) != nil || (in.Revoke != "" && t.Owner != nil && !t.Owner.Same(who)) {
		reply.Forbidden = true
		return answer()
	}
	have, revs, err := p.approvals.list(ctx, thread)
	if err != nil {
		return nil, err
	}
	for i, a := range have {
		if in.Revoke == "" || (in.Revoke != "*" && in.Revoke != a.Tool) {
			reply.Approvals = append(reply.Approvals, a)
			continue
		}
		// The revoke deletes the revision it read: a use recorded in
		// between (a newer revision) means the call ran before the
		// revoke; reading again and deleting that one still revokes
		// (whatever the record then holds: keep always holds).
		if _, err := p.approvals.s.DeleteIf(ctx, approvalKey(thread, a.Agent, a.Tool), &a, revs[i],
			func(*events.Approval) bool { return true }); err != nil {
			return nil, err
		}
		reply.Revoked = append(reply.Revoked, a)
		p.log.InfoContext(ctx, "standing approval revoked", "subject", thread, "tool", a.Tool, "agent", a.Agent,
			"revoked_by", who.String())
		if err := publishChat(ctx, p, thread, events.KindApprovalRevoked, events.DerivedID("approval.revoked", a.ID),
			"", events.ApprovalRevoked{Approval: a, RevokedBy: who}); err != nil {
			return nil, err
		}
	}
	return answer()
}

// answerApprovalUse answers the agent: may the call run under the
// standing approval of the subject's agent, thread and tool? The use is
// recorded (a revision-checked write, keeping the expiry) before the
// answer, so a revoke racing the call either came first (the key is gone:
// no approval, the person is asked) or comes after the use.
func (p *Processor) answerApprovalUse(ctx context.Context, req *event.Event) (*event.Event, error) {
	agent, thread, tool, ok := events.ParseApprovalUseSubject(bus.RequestSubject(ctx))
	if !ok {
		return nil, fmt.Errorf("subject %q: must be parley.approval.use.<agent>.<thread>.<tool>", bus.RequestSubject(ctx))
	}
	in, err := events.Data[events.ApprovalUseRequest](req)
	if err != nil {
		return nil, err
	}
	var reply events.ApprovalUseReply
	if !p.opts.NoStandingApprovals {
		a, err := p.useApproval(ctx, thread, agent, tool)
		if err != nil {
			return nil, err
		}
		if a != nil {
			reply.Approval = a
			if err := publishChat(ctx, p, thread, events.KindApprovalUsed,
				events.DerivedID("approval.used", a.ID, in.RunID, in.CallID, fmt.Sprint(in.Round)), "",
				events.ApprovalUsed{Approval: *a, RunID: in.RunID, CallID: in.CallID}); err != nil {
				return nil, err
			}
		}
	}
	return events.KindApprovalUseAnswered.New(events.SourceProcessor, events.DerivedID("approval.use", req.ID()), thread, reply)
}

// useApproval records one use of the approval of tool by agent in thread
// and returns it; nil when there is none (never granted, revoked or
// expired).
func (p *Processor) useApproval(ctx context.Context, thread, agent, tool string) (*events.Approval, error) {
	a, _, err := p.approvals.s.Mutate(ctx, approvalKey(thread, agent, tool), func(a *events.Approval) error {
		if a.Thread != thread || a.Agent != agent || a.Tool != tool {
			return errNotThisCall // never written so; refuse rather than trust
		}
		a.Uses++
		return nil
	})
	switch {
	case errors.Is(err, kvstate.ErrNotFound), errors.Is(err, kvstate.ErrExpired), errors.Is(err, errNotThisCall):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return a, nil
}

// errNotThisCall: the approval under a call's key names another thread,
// agent or tool.
var errNotThisCall = errors.New("the standing approval is not this call's")
