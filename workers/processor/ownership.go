package processor

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Thread ownership (docs/SECURITY.md). The principal of an
// input is its subject's token, which the server's permissions pin to the
// publisher's NATS user. A principal the processor trusts to speak for end
// users (Options.TrustedPrincipals, e.g. the gateway) may name the end user
// (onBehalfOf: the extension attribute onbehalfof, or data.user of a
// turn.requested, data.answeredBy of an elicitation.responded); from any
// other principal such a claim is refused forbidden rather than recorded
// or silently dropped, so a decision never carries a name nobody
// authenticated. The first message recorded on a thread makes its party
// the owner; the owner may share the thread (TurnRequested.Share); every
// other party's message or answer is refused forbidden, and nothing is
// queued or consumed.

// errForbidden is a refusal of the thread's owner rules. Its text reaches
// the thread's events, which its owner reads: it never quotes the sender's
// data (an attacker's text would appear in the victim's thread) nor names
// the owner (an end user's name would reach another principal). Its text is the
// rejection's detail.
type errForbidden struct{ detail string }

func (e *errForbidden) Error() string { return e.detail }

func forbidden(format string, args ...any) error {
	return &errForbidden{detail: fmt.Sprintf(format, args...)}
}

// isForbidden reports whether err is a refusal of the owner rules, and
// returns its detail.
func isForbidden(err error) (string, bool) {
	var f *errForbidden
	if errors.As(err, &f) {
		return f.detail, true
	}
	return "", false
}

// identify returns who sent the input e from principal: the principal and,
// when it is trusted to speak for users, the end user it names (the
// extension attribute onbehalfof, else claim, the payload's own field).
// A claim from an untrusted principal, or two claims that differ, is
// forbidden.
func (p *Processor) identify(principal string, e *event.Event, claim, claimField string) (events.Identity, error) {
	who := events.Identity{Principal: principal}
	ext, _ := e.Extensions()[events.ExtOnBehalfOf].(string)
	switch {
	case ext != "" && claim != "" && ext != claim:
		return who, forbidden("the extension attribute %s and %s name different users", events.ExtOnBehalfOf, claimField)
	case ext != "":
		claim, claimField = ext, "the extension attribute "+events.ExtOnBehalfOf
	}
	if claim == "" {
		return who, nil
	}
	if len(claim) > maxOnBehalfOf {
		return who, fmt.Errorf("%s: %d bytes; at most %d", claimField, len(claim), maxOnBehalfOf)
	}
	if !slices.Contains(p.opts.TrustedPrincipals, principal) {
		return who, forbidden("principal %q is not trusted to speak for users, so %s cannot be honoured "+
			"(the processor's --trusted-principals lists those that are); send the event without it", principal, claimField)
	}
	who.OnBehalfOf = claim
	return who, nil
}

// mayUse reports (nil) whether who may send messages to and answer the
// questions of thread t: it is t's owner or one t was shared with, or t has
// no owner yet.
func mayUse(t *Thread, who events.Identity) error {
	if t.Owner == nil || t.Owner.Same(who) || slices.ContainsFunc(t.Shared, who.Same) {
		return nil
	}
	return forbidden("thread %s belongs to another party; %s may not use it", t.ID, who)
}

// mayAnswer reports (nil) whether who, who may use thread t (mayUse), may
// answer the questions of t's paused turn: the owner, and the parties the
// thread was shared with before the turn's message was sent
// (PausedTurn.Grants; grants only grow, so they are the first Grants of
// t.Shared). A share covers the questions of the owner's messages sent
// after it: a question already asked, or asked for a message sent
// earlier, stays with the parties that had the thread then, also when the
// share reaches the processor with a message that queues behind the turn.
func mayAnswer(t *Thread, who events.Identity) error {
	pt := t.Paused
	if pt == nil || pt.Grants == nil || t.Owner == nil || t.Owner.Same(who) {
		return nil
	}
	if slices.ContainsFunc(t.Shared[:min(*pt.Grants, len(t.Shared))], who.Same) {
		return nil
	}
	return forbidden("this question was asked for a message sent before thread %s was shared with this party; "+
		"only the owner and the parties it was shared with then may answer it", t.ID)
}

// checkOwnership reports (nil) whether applyOwnership would accept who's
// message sharing t with share, without changing t.
func checkOwnership(t *Thread, who events.Identity, share []events.Identity) error {
	c := *t
	c.Owner = nil
	if t.Owner != nil {
		owner := *t.Owner
		c.Owner = &owner
	}
	c.Shared = slices.Clone(t.Shared)
	return applyOwnership(&c, who, share)
}

// applyOwnership records who, sending a message to t that shares it with
// share: the owner of a thread that has none, and the grants. Only the
// owner may share; the grants are bounded by events.MaxShares.
func applyOwnership(t *Thread, who events.Identity, share []events.Identity) error {
	if err := mayUse(t, who); err != nil {
		return err
	}
	if t.Owner == nil {
		owner := who
		t.Owner = &owner
	}
	if len(share) == 0 {
		return nil
	}
	if !t.Owner.Same(who) {
		return forbidden("only the owner of thread %s may share it", t.ID)
	}
	for _, s := range share {
		if !s.Same(*t.Owner) && !slices.ContainsFunc(t.Shared, s.Same) {
			t.Shared = append(t.Shared, s)
		}
	}
	if len(t.Shared) > events.MaxShares {
		return errTooManyShares
	}
	return nil
}

// errTooManyShares: a message would share its thread with more than
// events.MaxShares parties.
var errTooManyShares = errors.New("too many shares")

// validateShare checks TurnRequested.Share; the violations name fields.
func validateShare(share []events.Identity) []schema.Violation {
	var vs []schema.Violation
	if len(share) > events.MaxShares {
		vs = append(vs, schema.Violation{Path: "data.share", Rule: fmt.Sprintf("%d entries; at most %d", len(share), events.MaxShares)})
	}
	for i, s := range share {
		if err := events.ValidToken("principal", s.Principal); err != nil {
			vs = append(vs, schema.Violation{Path: fmt.Sprintf("data.share[%d].principal", i), Rule: err.Error()})
		}
		if len(s.OnBehalfOf) > maxOnBehalfOf {
			vs = append(vs, schema.Violation{Path: fmt.Sprintf("data.share[%d].onBehalfOf", i),
				Rule: fmt.Sprintf("%d bytes; at most %d", len(s.OnBehalfOf), maxOnBehalfOf)})
		}
	}
	return vs
}

// maxOnBehalfOf bounds the end user's name in a claim or a share (bytes).
const maxOnBehalfOf = 256
