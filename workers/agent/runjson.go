package agent

import (
	"encoding/json"
	"slices"

	"github.com/parley-dev/parley/events"
)

// The stored layout of a run (RunFormat 2), in the checkpoint and the
// snapshot of a paused run, stores each call's policy decision once:
//
//   - "policy" (the decision as the policy service gave it) is left out,
//     with "policyIsDecision": true, when it equals "decision" (until a
//     person answers, it is the same decision);
//   - each "awaiting" entry's "decision" is left out, with
//     "decisionIsCall": true, when it equals the call's "decision";
//   - a decision's "policies" is left out, with "onePolicy": true, when
//     its only entry repeats the decision's own policy, decision, reason
//     and configuration version;
//   - "modelCallId" is left out when it equals the call's ID (the reader
//     of RunFormat 1 already took "" to mean that).
//
// Reading restores every copy, so a run decodes as it did in RunFormat
// 1, and a RunFormat 1 record (which has none of the markers) reads as
// before: a paused turn written by the previous release resumes.

// callStateFields is CallState without its JSON methods.
type callStateFields CallState

// storedCallState is CallState as stored.
type storedCallState struct {
	callStateFields
	ModelCallID      string          `json:"modelCallId,omitempty"`
	Decision         *storedDecision `json:"decision,omitempty"`
	Awaiting         []storedPending `json:"awaiting,omitempty"`
	Policy           *storedDecision `json:"policy,omitempty"`
	PolicyIsDecision bool            `json:"policyIsDecision,omitempty"`
}

// storedDecision is an events.Decision as stored.
type storedDecision struct {
	events.Decision
	Policies  []events.PolicyDecision `json:"policies,omitempty"`
	OnePolicy bool                    `json:"onePolicy,omitempty"`
}

// storedPending is an events.PendingElicitation as stored.
type storedPending struct {
	events.PendingElicitation
	Decision       *storedDecision `json:"decision,omitempty"`
	DecisionIsCall bool            `json:"decisionIsCall,omitempty"`
}

// MarshalJSON writes c in the stored layout of RunFormat 2.
func (c CallState) MarshalJSON() ([]byte, error) {
	s := storedCallState{callStateFields: callStateFields(c), Decision: storeDecision(c.Decision)}
	if c.ModelCallID != c.Call.ID {
		s.ModelCallID = c.ModelCallID
	}
	if c.Policy != nil && sameDecision(c.Policy, c.Decision) {
		s.PolicyIsDecision = true
	} else {
		s.Policy = storeDecision(c.Policy)
	}
	if len(c.Awaiting) > 0 {
		s.Awaiting = make([]storedPending, len(c.Awaiting))
		for i, p := range c.Awaiting {
			s.Awaiting[i].PendingElicitation = p
			if p.Decision != nil && sameDecision(p.Decision, c.Decision) {
				s.Awaiting[i].DecisionIsCall = true
			} else {
				s.Awaiting[i].Decision = storeDecision(p.Decision)
			}
		}
	}
	return json.Marshal(s)
}

// UnmarshalJSON reads c in the stored layout of RunFormat 2 or 1.
func (c *CallState) UnmarshalJSON(b []byte) error {
	var s storedCallState
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*c = CallState(s.callStateFields)
	c.ModelCallID = s.ModelCallID
	c.Decision = s.Decision.restore()
	c.Policy = s.Policy.restore()
	if s.PolicyIsDecision {
		c.Policy = cloneDecision(c.Decision)
	}
	c.Awaiting = nil
	if s.Awaiting != nil {
		c.Awaiting = make([]events.PendingElicitation, len(s.Awaiting))
		for i, p := range s.Awaiting {
			c.Awaiting[i] = p.PendingElicitation
			c.Awaiting[i].Decision = p.Decision.restore()
			if p.DecisionIsCall {
				c.Awaiting[i].Decision = cloneDecision(c.Decision)
			}
		}
	}
	return nil
}

// MarshalJSON writes r with Format RunFormat: its calls are in that
// format's layout whatever format r was read in.
func (r Run) MarshalJSON() ([]byte, error) {
	type fields Run
	f := fields(r)
	f.Format = RunFormat
	return json.Marshal(f)
}

// storeDecision is d as stored: "policies" left out when it only
// repeats d.
func storeDecision(d *events.Decision) *storedDecision {
	if d == nil {
		return nil
	}
	s := &storedDecision{Decision: *d, Policies: d.Policies}
	if len(d.Policies) == 1 && d.Policies[0] == (events.PolicyDecision{Policy: d.Policy, Decision: d.Decision,
		Reason: d.Reason, ConfigVersion: d.ConfigVersion}) {
		s.Policies, s.OnePolicy = nil, true
	}
	return s
}

// restore is the decision s stores (nil for nil).
func (s *storedDecision) restore() *events.Decision {
	if s == nil {
		return nil
	}
	d := s.Decision
	d.Policies = s.Policies
	if s.OnePolicy {
		d.Policies = []events.PolicyDecision{{Policy: d.Policy, Decision: d.Decision, Reason: d.Reason,
			ConfigVersion: d.ConfigVersion}}
	}
	return &d
}

func sameDecision(a, b *events.Decision) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Decision == b.Decision && a.Reason == b.Reason && a.Policy == b.Policy &&
		a.ConfigVersion == b.ConfigVersion && slices.Equal(a.Policies, b.Policies)
}

func cloneDecision(d *events.Decision) *events.Decision {
	if d == nil {
		return nil
	}
	c := *d
	c.Policies = slices.Clone(d.Policies)
	return &c
}
