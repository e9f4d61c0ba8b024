package events

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/schema"
)

// The integrator input stream (docs/events.md "Input"): integrators publish
// turn.requested and elicitation.responded on
// parley.in.<principal>.<thread>.<suffix>, where <principal> is the NATS
// principal (user) they are authenticated as. The server's permissions let
// each integrator publish only under its own principal token, so the
// processor takes the token as the authenticated publisher. Only the
// processor reads the stream; it echoes every accepted input into
// PARLEY_CHAT (ChatSubject, same event ID) with the extension attributes
// ExtPrincipal and ExtOnBehalfOf, so PARLEY_CHAT holds only what parley's
// own principals publish.
const (
	// StreamInput is the processor's work queue of integrator input:
	// parley.in.>.
	StreamInput = "PARLEY_INPUT"
	// SubjectInputAll is every subject of StreamInput.
	SubjectInputAll = "parley.in.>"

	subjectInputPrefix = "parley.in."
)

// Principals parley's own commands connect as (docs/SECURITY.md).
const (
	// PrincipalIntegrator is the default principal of an integrator
	// (client.Options.Principal, `parley send|answer|chat`).
	PrincipalIntegrator = "integrator"
	// PrincipalGateway is the principal of `parley gateway`: an integrator
	// trusted to speak for the end users it authenticates (onBehalfOf).
	PrincipalGateway = "gateway"
)

// Extension attributes the processor sets on the echo of an accepted input
// in PARLEY_CHAT (CloudEvents extensions: lowercase a-z0-9).
const (
	// ExtPrincipal is the NATS principal that published the input (the
	// <principal> token of its input subject).
	ExtPrincipal = "principal"
	// ExtOnBehalfOf is the end user a trusted principal spoke for (set
	// only when the processor honoured the claim). On input, an
	// integrator may set it to claim an end user (see Identity).
	ExtOnBehalfOf = "onbehalfof"
)

// InputSubject returns parley.in.<principal>.<thread>.<suffix>, suffix being
// ChatTurnRequested or ChatElicitationResponded.
func InputSubject(principal, thread, suffix string) string {
	return subjectInputPrefix + principal + "." + thread + "." + suffix
}

// InputThreadSubjects returns the filter parley.in.*.<thread>.<suffix>: one
// thread's inputs of one kind, from every principal.
func InputThreadSubjects(thread, suffix string) string {
	return subjectInputPrefix + "*." + thread + "." + suffix
}

// InputSuffix returns the input subject suffix of an event type an
// integrator may publish: ChatTurnRequested for TypeTurnRequested,
// ChatElicitationResponded for TypeElicitationResponded; ok is false for
// every other type.
func InputSuffix(typ Type) (suffix string, ok bool) {
	switch typ {
	case TypeTurnRequested:
		return ChatTurnRequested, true
	case TypeElicitationResponded:
		return ChatElicitationResponded, true
	}
	return "", false
}

// SubjectError is the error of ParseInputSubject: the subject and the rule
// it breaks.
type SubjectError struct {
	Subject string
	Rule    string
}

func (e *SubjectError) Error() string { return fmt.Sprintf("subject %q: %s", e.Subject, e.Rule) }

// ParseInputSubject splits parley.in.<principal>.<thread>.<suffix>. It fails
// with a *SubjectError naming the rule when the subject has another prefix,
// too few or too many tokens (a thread "a.b" makes one more token), a
// principal or thread that is not a ValidToken, or a suffix other than
// turn.requested and elicitation.responded.
func ParseInputSubject(subject string) (principal, thread, suffix string, err error) {
	rest, ok := strings.CutPrefix(subject, subjectInputPrefix)
	if !ok {
		return "", "", "", &SubjectError{subject, "not an input subject (" + SubjectInputAll + ")"}
	}
	toks := strings.Split(rest, ".")
	if len(toks) != 4 {
		return "", "", "", &SubjectError{subject, fmt.Sprintf("must be parley.in.<principal>.<thread>.turn.requested "+
			"or .elicitation.responded (%d tokens after parley.in, want 4; a thread ID cannot contain dots)", len(toks))}
	}
	principal, thread, suffix = toks[0], toks[1], toks[2]+"."+toks[3]
	if err := ValidToken("principal", principal); err != nil {
		return "", "", "", &SubjectError{subject, err.Error()}
	}
	if err := ValidToken("thread", thread); err != nil {
		return "", "", "", &SubjectError{subject, err.Error()}
	}
	if suffix != ChatTurnRequested && suffix != ChatElicitationResponded {
		return "", "", "", &SubjectError{subject, fmt.Sprintf("%q is not an input kind (turn.requested, elicitation.responded)", suffix)}
	}
	return principal, thread, suffix, nil
}

// Identity is who did something, as authenticated: the NATS principal that
// published it and, when that principal is trusted to speak for end users
// (the processor's --trusted-principals), the end user it spoke for. It is
// the `answeredBy` of a decision (DecisionRecord, Answer) and a thread's
// owner. A decision never carries a name nobody authenticated: OnBehalfOf
// is set only when the processor honoured the claim.
type Identity struct {
	// Principal is the publisher's NATS principal ("" only in records
	// written before parley authenticated answerers: see UnmarshalJSON).
	Principal string `json:"principal"`
	// OnBehalfOf is the end user (e.g. the gateway token's subject);
	// optional.
	OnBehalfOf string `json:"onBehalfOf,omitempty"`
}

// IsZero reports whether id names nobody.
func (id Identity) IsZero() bool { return id == Identity{} }

// String formats id as "principal" or "onBehalfOf (via principal)".
func (id Identity) String() string {
	switch {
	case id.OnBehalfOf != "" && id.Principal != "":
		return id.OnBehalfOf + " (via " + id.Principal + ")"
	case id.OnBehalfOf != "":
		return id.OnBehalfOf + " (unverified)"
	}
	return id.Principal
}

// Same reports whether id and other are the same party: the same principal
// and the same end user.
func (id Identity) Same(other Identity) bool { return id == other }

// UnmarshalJSON decodes an Identity object. A JSON string — the free-text
// `answeredBy` of records and events written before parley authenticated
// answerers — decodes as {OnBehalfOf: s} with no Principal, which String
// shows as unverified.
func (id *Identity) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*id = Identity{OnBehalfOf: s}
		return nil
	}
	type plain Identity
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*id = Identity(p)
	return nil
}

// EchoIdentity returns who sent an input, as the processor's echo of it in
// PARLEY_CHAT says (the extension attributes principal and onbehalfof);
// zero for any other event.
func EchoIdentity(e *event.Event) Identity {
	principal, _ := e.Extensions()[ExtPrincipal].(string)
	if principal == "" {
		return Identity{}
	}
	obo, _ := e.Extensions()[ExtOnBehalfOf].(string)
	return Identity{Principal: principal, OnBehalfOf: obo}
}

// inputMembers are the members an integrator's input may carry, per
// type, and those of the objects inside it that CheckInput checks too.
var (
	turnMembers     = []string{"agent", "message", "user", "share"}
	messageMembers  = []string{"role", "text", "content", "_meta"}
	shareMembers    = []string{"principal", "onBehalfOf"}
	responseMembers = []string{"elicitationId", "answeredBy", "action", "content", "_meta"}
)

// RuleUnknownMember is the rule of CheckInput's violations (and of the
// gateway's refusal of a body member it does not know).
const RuleUnknownMember = "unknown member: not part of this input's shape (docs/events.md); remove it or check its spelling"

// CheckInput checks the data of an integrator's input of type typ
// (turn.requested, elicitation.responded) for members the type does not
// define: at the top level, in data.message and in each data.share[i]
// of a turn.requested, and at the top level of an elicitation.responded
// (its content and _meta are open objects). Such a member is refused, not
// ignored, on every entrance alike (the gateway's bodies refuse theirs):
// a misspelt "actoin" or a member a later version defines would
// otherwise be dropped silently. It returns one violation per member,
// path "data.<member>" (sorted), and nil for other types or data that is
// not an object (the decoder reports that).
func CheckInput(typ Type, data []byte) []schema.Violation {
	var allowed []string
	switch typ {
	case TypeTurnRequested:
		allowed = turnMembers
	case TypeElicitationResponded:
		allowed = responseMembers
	default:
		return nil
	}
	var vs []schema.Violation
	top := unknownMembers(data, "data", allowed, &vs)
	if typ == TypeTurnRequested && top != nil {
		if m, ok := top["message"]; ok {
			unknownMembers(m, "data.message", messageMembers, &vs)
		}
		var share []json.RawMessage
		if s, ok := top["share"]; ok && json.Unmarshal(s, &share) == nil {
			for i, sh := range share {
				unknownMembers(sh, fmt.Sprintf("data.share[%d]", i), shareMembers, &vs)
			}
		}
	}
	slices.SortFunc(vs, func(a, b schema.Violation) int { return strings.Compare(a.Path, b.Path) })
	return vs
}

// unknownMembers appends to vs a violation for each member of the object
// data (at path) not in allowed, and returns the object's members (nil
// when data is not an object).
func unknownMembers(data json.RawMessage, path string, allowed []string, vs *[]schema.Violation) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	for k := range m {
		if !slices.Contains(allowed, k) {
			*vs = append(*vs, schema.Violation{Path: path + "." + k, Rule: RuleUnknownMember})
		}
	}
	return m
}
