package toolexec

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// authorize checks a call before anything runs (package documentation,
// "Only what was decided"). A refusal is permanent: the call is
// dead-lettered with the reason (events.ReasonToolSubjectMismatch,
// ReasonNoDecision or ReasonDecisionMismatch first in the message) and
// onDeadLetter answers the agent. A failure to read the decision record is
// returned as is, so the call is retried.
func (x *Executor) authorize(ctx context.Context, subject string, in events.ToolCallRequested, e entry, known bool) error {
	if want := events.ToolCallSubject(in.Call.Name); subject != want {
		return bus.Permanent(fmt.Errorf("%s: call.name %q does not match the subject %q (want %q); nothing was run",
			events.ReasonToolSubjectMismatch, in.Call.Name, subject, want))
	}
	if !known || e.def.Annotations.ReadOnly() {
		return nil // an unknown tool runs nothing; a read-only one needs no decision
	}
	rec, err := x.decisions.Get(ctx, in.RunID, in.Call.ID, in.Round)
	switch {
	case errors.Is(err, kvstate.ErrNotFound), errors.Is(err, jetstream.ErrInvalidKey):
		return bus.Permanent(fmt.Errorf("%s: %s is not read-only and no decision is recorded for run %s call %s round %d; nothing was run",
			events.ReasonNoDecision, in.Call.Name, in.RunID, in.Call.ID, in.Round))
	case errors.Is(err, kvstate.ErrIncompatible):
		return bus.Permanent(fmt.Errorf("%s: the decision record of run %s call %s round %d cannot be read (%v); nothing was run",
			events.ReasonNoDecision, in.RunID, in.Call.ID, in.Round, err))
	case err != nil:
		return fmt.Errorf("reading the decision of %s: %w", in.Call.ID, err)
	}
	mismatch := func(format string, args ...any) error {
		return bus.Permanent(fmt.Errorf("%s: %s; nothing was run", events.ReasonDecisionMismatch, fmt.Sprintf(format, args...)))
	}
	if rec.Run != in.RunID || rec.Call != in.Call.ID || rec.Round != in.Round {
		return mismatch("the record is for run %s call %s round %d", rec.Run, rec.Call, rec.Round)
	}
	if rec.Tool != in.Call.Name {
		return mismatch("%s was decided, the call runs %s", rec.Tool, in.Call.Name)
	}
	switch rec.Decision {
	case events.DecisionAllow, events.DecisionConfirm:
	default:
		return mismatch("the record's decision is %q, not allow or confirm", rec.Decision)
	}
	// The policies decided on the registry's definition; this executor runs
	// its own. A registry entry rewritten to look harmless (readOnlyHint
	// true, destructiveHint false) shows here as a difference.
	if mine := e.def.Annotations; rec.Annotations.ReadOnly() && !mine.ReadOnly() ||
		!rec.Annotations.Destructive() && mine.Destructive() {
		return mismatch("%s was decided as read-only or non-destructive, which its definition here does not say", in.Call.Name)
	}
	sum, err := schema.ArgumentsSHA256(in.Call.Arguments)
	if err != nil {
		return mismatch("the call's arguments cannot be hashed (%v)", err)
	}
	if sum != rec.ArgumentsSHA256 {
		return mismatch("the call's arguments (sha256 %s) are not the ones decided (sha256 %s)", sum, rec.ArgumentsSHA256)
	}
	return nil
}
