package events

import (
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/schema"
)

// TypeOf returns e's CloudEvents type as a Type ("" for a nil event), so a
// switch or a map over Types needs no conversion.
func TypeOf(e *event.Event) Type {
	if e == nil {
		return ""
	}
	return Type(e.Type())
}

// Kind is a catalogue event type bound to the Go type T of its data: the
// one value a publisher passes to build an event (New) and name its subject
// (Subject), and a consumer passes to route and decode it (Data, and
// bus.On). The type, the subject and the payload of an event built from a
// Kind cannot disagree: all three come from the catalogue entry. The Kinds
// are the Kind* variables of this package, one per catalogue entry (the
// catalogue is built from them); the zero Kind names no type, and its
// methods fail.
type Kind[T any] struct{ typ Type }

// Type returns the CloudEvents type.
func (k Kind[T]) Type() Type { return k.typ }

// Entry returns the kind's catalogue entry; ok is false only for the zero
// Kind.
func (k Kind[T]) Entry() (Entry, bool) { return Lookup(k.typ) }

// New returns an event of the kind from source with data, and subject
// (the CloudEvents subject: the thread ID, or "" for none). id is the
// event's ID: "" for a fresh UUIDv7 (as New), or a DerivedID for an event
// that must keep its ID on every retry (as NewWithID). It fails for the
// zero Kind, or when data cannot be marshalled.
func (k Kind[T]) New(source, id, subject string, data T) (*event.Event, error) {
	if k.typ == "" {
		return nil, fmt.Errorf("type: required (the zero events.Kind names no catalogue type)")
	}
	if id == "" {
		return New(source, k.typ, subject, data)
	}
	return NewWithID(id, source, k.typ, subject, data)
}

// Data decodes e's data as the kind's payload. It fails, naming the field
// and the rule, when e is of another type ("type: …") or its data is
// missing or does not decode into T ("data: …").
func (k Kind[T]) Data(e *event.Event) (T, error) {
	if got := TypeOf(e); got != k.typ {
		var zero T
		return zero, fmt.Errorf("type: %q, want %q", got, k.typ)
	}
	return Data[T](e)
}

// Subject returns the subject the event travels on in stream (its route
// there, see Route.SubjectFor), with the route's parameters replaced by
// values in order, e.g. KindTurnFailed.Subject(StreamChat, thread) is
// parley.chat.<thread>.turn.failed. stream "" names the request-reply
// route. It fails, naming the rule, when the kind has no route in stream,
// or a value is not a token (the error names the parameter).
func (k Kind[T]) Subject(stream string, values ...string) (string, error) {
	return routeSubject(k.typ, stream, values)
}

// SubjectOf returns the subject e travels on in stream: the route of e's
// type there (see Kind.Subject), with values for its parameters. A
// publisher that derives the subject from the event this way cannot send
// an event on another type's subject. It fails, naming the rule, for a type
// that is not in the catalogue or has no route in stream, or a value that
// is not a token.
func SubjectOf(e *event.Event, stream string, values ...string) (string, error) {
	return routeSubject(TypeOf(e), stream, values)
}

func routeSubject(t Type, stream string, values []string) (string, error) {
	e, ok := Lookup(t)
	if !ok {
		return "", fmt.Errorf("type: %q is not in the catalogue", t)
	}
	for _, r := range e.Routes {
		if r.Stream == stream && r.Subject != "" {
			return r.SubjectFor(values...)
		}
	}
	return "", fmt.Errorf("type %s: no route in stream %q", t, stream)
}

// The catalogue's kinds, one per event type (see Catalog), in its order.
var (
	KindTurnRequested           = Kind[TurnRequested]{TypeTurnRequested}
	KindElicitationResponded    = Kind[ElicitationResponded]{TypeElicitationResponded}
	KindTurnPaused              = Kind[TurnPaused]{TypeTurnPaused}
	KindElicitationRequested    = Kind[schema.ElicitRequestParams]{TypeElicitationRequested}
	KindElicitationRejected     = Kind[ElicitationRejected]{TypeElicitationRejected}
	KindElicitationExpired      = Kind[ElicitationExpired]{TypeElicitationExpired}
	KindElicitationCancelled    = Kind[ElicitationCancelled]{TypeElicitationCancelled}
	KindTurnCompleted           = Kind[TurnCompleted]{TypeTurnCompleted}
	KindTurnFailed              = Kind[TurnFailed]{TypeTurnFailed}
	KindTurnRejected            = Kind[TurnRejected]{TypeTurnRejected}
	KindMessageDelta            = Kind[MessageDelta]{TypeMessageDelta}
	KindProgress                = Kind[schema.Progress]{TypeProgress}
	KindRunRequested            = Kind[RunRequested]{TypeRunRequested}
	KindRunResumed              = Kind[RunResumed]{TypeRunResumed}
	KindToolResultReady         = Kind[ToolResult]{TypeToolResultReady}
	KindRunCompleted            = Kind[RunCompleted]{TypeRunCompleted}
	KindRunPaused               = Kind[RunPaused]{TypeRunPaused}
	KindRunFailed               = Kind[RunFailed]{TypeRunFailed}
	KindToolCallRequested       = Kind[ToolCallRequested]{TypeToolCallRequested}
	KindPreExecuteRequested     = Kind[PreExecuteRequest]{TypePreExecuteRequested}
	KindPreExecuteDecided       = Kind[PolicyDecision]{TypePreExecuteDecided}
	KindLookupEntitiesRequested = Kind[LookupEntitiesRequest]{TypeLookupEntitiesRequested}
	KindLookupEntitiesAnswered  = Kind[LookupEntitiesReply]{TypeLookupEntitiesAnswered}
	// KindResolveReferencesRequested is dev.parley.lookup.resolve.requested.
	KindResolveReferencesRequested = Kind[ResolveReferencesRequest]{TypeResolveReferencesRequested}
	// KindResolveReferencesAnswered is dev.parley.lookup.resolve.answered.
	KindResolveReferencesAnswered = Kind[ResolveReferencesReply]{TypeResolveReferencesAnswered}
	KindThreadStateRequested      = Kind[ThreadStateRequest]{TypeThreadStateRequested}
	KindThreadStateAnswered       = Kind[ThreadStateReply]{TypeThreadStateAnswered}
	KindDeadLettered              = Kind[DeadLetter]{TypeDeadLettered}
	KindApprovalGranted           = Kind[ApprovalGranted]{TypeApprovalGranted}
	KindApprovalUsed              = Kind[ApprovalUsed]{TypeApprovalUsed}
	KindApprovalRevoked           = Kind[ApprovalRevoked]{TypeApprovalRevoked}
	KindApprovalsRequested        = Kind[ApprovalsRequest]{TypeApprovalsRequested}
	KindApprovalsAnswered         = Kind[ApprovalsReply]{TypeApprovalsAnswered}
	KindApprovalUseRequested      = Kind[ApprovalUseRequest]{TypeApprovalUseRequested}
	KindApprovalUseAnswered       = Kind[ApprovalUseReply]{TypeApprovalUseAnswered}
)
