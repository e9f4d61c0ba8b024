package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
)

// A gateway claim follows the processor's verdict (docs/SECURITY.md
// "Thread ownership through the gateway"). The processor decides who owns a
// thread: the party of its first accepted message (workers/processor
// ownership.go). The gateway's record "t.<thread>" in BucketThreads only
// reserves the thread among the gateway's users (kv.Create: one claimant
// across replicas) and is "pending" until the gateway sees the processor
// accept a message of the claimant: its echo in PARLEY_CHAT with the
// extension attributes principal = the gateway's principal and onbehalfof =
// the user. Reads (GET, the event stream, answers) of a pending claim are
// 404, like an unknown thread. A rejection of the claim's first message
// (turn.rejected naming its event ID; `forbidden` when someone else owns the
// thread) releases the claim: the record is deleted with its revision, so
// a replica that confirmed it meanwhile is not undone. A verdict that came
// while no gateway was waiting (a restart, the verdict wait elapsed) is
// found on the next request by reading the thread's turn.requested and
// turn.rejected events from the claim's FromSeq.
//
// Shares (shares.go) live in the same record and follow its verdict: the
// owner may share a pending claim (or share an unclaimed thread, which
// makes a pending claim without a first message yet), but the users it is
// shared with get 404 like strangers until the processor accepts the
// owner's claim (ThreadOwner.allows), and a refused claim is deleted with
// its shares. So a share never opens a thread the processor did not give
// its owner.

// Verdicts of a claim (ThreadOwner.Verdict).
const (
	// VerdictPending: the processor has not yet been seen accepting a
	// message of the claimant.
	VerdictPending = "pending"
	// VerdictAccepted: the processor accepted a message of the claimant
	// on the thread (it owns the thread or the thread is shared with it).
	VerdictAccepted = "accepted"
)

// MaxVerdictScan bounds the thread events read to resolve one pending
// claim (the thread's turn.requested and turn.rejected events from the
// claim's FromSeq). A claim
// whose verdict is not among them stays pending (reads answer 404); a
// later request scans again.
const MaxVerdictScan = 10000

// verdicts finds the processor's verdicts on the gateway's claims in
// PARLEY_CHAT.
type verdicts struct {
	js        jetstream.JetStream
	principal string
	// follow is Gateway.follow: an ordered consumer on PARLEY_CHAT.
	follow func(ctx context.Context, filters []string, startSeq uint64) (<-chan item, func(), error)
}

// outcome is what the thread's events say about a claim.
type outcome int

const (
	outcomePending  outcome = iota // no verdict seen
	outcomeAccepted                // an echo of the claimant's input
	outcomeRejected                // the claim's first message was refused
)

// verdictSubjects are the subjects of the events that carry verdicts on
// principal's turn.requested inputs on thread: the echo (turn.requested)
// and turn.rejected, in the thread or, for a message of a party that is
// not (yet) the thread's, under principal (events.RefusedSubject).
func verdictSubjects(principal, thread string) []string {
	return []string{events.ChatSubject(thread, events.ChatTurnRequested), events.ChatSubject(thread, events.ChatTurnRejected),
		events.RefusedSubject(principal, thread, events.ChatTurnRejected)}
}

// judge reads the thread's turn.requested and turn.rejected events from the claim's FromSeq (1 for a
// record written before verdicts were followed) and returns the claim's
// outcome: accepted on an echo of any message of user (through the
// gateway's principal); rejected when the claim's first message, or the
// message also (when not ""), was refused and no echo of user follows in
// what is stored. With wait 0 it reads what is stored now; otherwise it
// also waits up to wait for a verdict to be published. rej is the refusal
// when the outcome is rejected, echo the claimant's accepted message when
// it is accepted.
func (v *verdicts) judge(ctx context.Context, thread, user string, t ThreadOwner, also string, wait time.Duration) (out outcome, rej *events.TurnRejected, echo item, err error) {
	from := max(t.FromSeq, 1)
	scan := wait <= 0
	if scan {
		rctx, cancel := bus.WithRequestTimeout(ctx)
		defer cancel()
		stream, err := v.js.Stream(rctx, events.StreamChat)
		if err != nil {
			return outcomePending, nil, item{}, fmt.Errorf("opening %s: %w", events.StreamChat, err)
		}
		var last uint64
		for _, subj := range verdictSubjects(v.principal, thread) {
			m, err := stream.GetLastMsgForSubject(rctx, subj)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return outcomePending, nil, item{}, fmt.Errorf("reading the last %s: %w", subj, err)
			}
			last = max(last, m.Sequence)
		}
		if last < from {
			return outcomePending, nil, item{}, nil // no verdict stored since the claim
		}
		wait = 30 * time.Second // bounds reading what is stored
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	items, stop, err := v.follow(ctx, verdictSubjects(v.principal, thread), from)
	if err != nil {
		return outcomePending, nil, item{}, err
	}
	defer stop()
	want := events.Identity{Principal: v.principal, OnBehalfOf: user}
	final := func() (outcome, *events.TurnRejected, item, error) {
		if rej != nil {
			return outcomeRejected, rej, item{}, nil
		}
		return outcomePending, nil, item{}, nil
	}
	for n := 1; ; n++ {
		it, ok := nextItem(ctx, items)
		if !ok {
			return final()
		}
		if it.ev != nil {
			switch events.TypeOf(it.ev) {
			case events.TypeTurnRequested:
				// Any accepted message of the claimant proves the
				// processor lets it use the thread.
				if events.EchoIdentity(it.ev).Same(want) {
					return outcomeAccepted, nil, it, nil
				}
			case events.TypeTurnRejected:
				d, err := events.Data[events.TurnRejected](it.ev)
				who := events.EchoIdentity(it.ev) // the refused party (none from an earlier processor)
				if err == nil && d.RequestEventID != "" && (d.RequestEventID == t.EventID || d.RequestEventID == also) &&
					(who.Principal == "" || who.Principal == v.principal) {
					rej = &d
				}
			}
		}
		// Everything stored is read: a refusal stands (no later echo of
		// the claimant); with nothing found, a scan ends pending.
		if it.numPending == 0 && (rej != nil || scan) {
			return final()
		}
		if n >= MaxVerdictScan {
			return final()
		}
	}
}

// rec is a claim record and its KV revision.
type rec struct {
	ThreadOwner
	rev uint64
}

// get reads thread's claim record; errNotOwner when there is none.
func (o *ownership) get(ctx context.Context, thread string) (rec, error) {
	t, rev, err := o.claims.Get(ctx, claimKey(thread))
	if errors.Is(err, kvstate.ErrNotFound) {
		return rec{}, errNotOwner
	}
	if err != nil {
		return rec{}, fmt.Errorf("reading owner of %s: %w", thread, err)
	}
	return rec{*t, rev}, nil
}

// access returns thread's record when user may use it: the processor
// accepted the owner's claim and user is the owner or one it is shared
// with. A pending claim is resolved first, on behalf of its owner (only
// the owner's own request waits up to wait for the verdict; one of a user
// it is shared with reads what is stored): a share of a pending claim
// gives nothing until then. errNotOwner when the thread is unclaimed,
// someone else's, pending or refused.
func (o *ownership) access(ctx context.Context, thread, user string, wait time.Duration) (ThreadOwner, error) {
	r, err := o.get(ctx, thread)
	if err != nil {
		return ThreadOwner{}, err
	}
	if !r.member(user) {
		return ThreadOwner{}, errNotOwner
	}
	if r.Verdict == VerdictAccepted {
		// Only while the processor's ownership it was confirmed under
		// lasts (epoch.go).
		if r, err = o.current(ctx, thread, r); err != nil {
			return ThreadOwner{}, err
		}
		if !r.allows(user) {
			return ThreadOwner{}, errNotOwner
		}
		return r.ThreadOwner, nil
	}
	if r.Owner != user {
		wait = 0
	}
	out, _, err := o.resolve(ctx, thread, r.Owner, r, "", wait)
	if err != nil {
		return ThreadOwner{}, err
	}
	if out != outcomeAccepted {
		return ThreadOwner{}, errNotOwner
	}
	// Confirmed: read the record as confirm left it (shares may have
	// changed meanwhile).
	if r, err = o.get(ctx, thread); err != nil {
		return ThreadOwner{}, err
	}
	if !r.allows(user) {
		return ThreadOwner{}, errNotOwner
	}
	return r.ThreadOwner, nil
}

// resolve looks for the verdict on r, owner's claim (and on owner's
// message also, when not ""), and records it: an accepted claim is
// confirmed (and indexed for owner and those it is shared with), a
// rejected one released with its shares.
func (o *ownership) resolve(ctx context.Context, thread, owner string, r rec, also string, wait time.Duration) (outcome, *events.TurnRejected, error) {
	out, rej, echo, err := o.verdicts.judge(ctx, thread, owner, r.ThreadOwner, also, wait)
	if err != nil {
		return outcomePending, nil, err
	}
	switch out {
	case outcomeAccepted:
		err = o.confirm(ctx, thread, owner, r, echo)
	case outcomeRejected:
		err = o.release(ctx, thread, owner, r)
	}
	return out, rej, err
}

// errClaimChanged: the claim record is no longer the one a write was
// meant for (another owner's, or confirmed meanwhile).
var errClaimChanged = errors.New("the claim changed")

// confirm records the processor's acceptance of owner's claim r, shown by
// echo (owner's accepted message, the first point of the claim's epoch:
// epoch.go), and indexes the thread for owner and the users it is shared
// with. Another replica confirming first is not an error; a share written
// meanwhile is kept (the record is read again and confirmed with it).
func (o *ownership) confirm(ctx context.Context, thread, owner string, r rec, echo item) error {
	start, own, err := o.epochStart(ctx, thread, echo, events.Identity{Principal: o.verdicts.principal, OnBehalfOf: owner})
	if err != nil {
		return fmt.Errorf("confirming the claim on %s: %w", thread, err)
	}
	t, _, err := o.claims.MutateFrom(ctx, claimKey(thread), &r.ThreadOwner, r.rev, false, func(t *ThreadOwner) error {
		if t.Owner != owner {
			return errClaimChanged
		}
		if t.Verdict == VerdictAccepted {
			return kvstate.ErrNoChange // another replica confirmed it
		}
		t.Verdict, t.ProcessorShared = VerdictAccepted, !own
		t.EpochSeq, t.EpochAt, t.StartSeq = echo.seq, echo.time.UTC(), start
		return nil
	})
	if errors.Is(err, errClaimChanged) {
		return fmt.Errorf("confirming the claim on %s: it is no longer %s's", thread, owner)
	}
	if errors.Is(err, kvstate.ErrNotFound) {
		err = errNotOwner
	}
	if err != nil {
		return fmt.Errorf("confirming the claim on %s: %w", thread, err)
	}
	r.ThreadOwner = *t
	for _, u := range append([]string{owner}, r.sharedWith()...) {
		if err := o.index(ctx, thread, u, r.CreatedAt); err != nil {
			return err
		}
	}
	return nil
}

// release deletes owner's claim r, which the processor refused, with its
// shares, as long as it is still owner's pending claim (its revision, read
// again when a share changed it), and the index entries of owner and the
// users it was shared with.
func (o *ownership) release(ctx context.Context, thread, owner string, r rec) error {
	// Not when another claim took its place, or another replica saw it
	// accepted.
	pending := func(c ThreadOwner) bool { return c.Owner == owner && c.Verdict != VerdictAccepted }
	return o.deleteClaim(ctx, thread, r, pending, "releasing")
}

// deleteClaim deletes the claim r on thread while keep holds for it
// (read again after another replica's write: a share, a verdict), then
// the index entries of its owner and of the users it was shared with;
// what ("voiding", "releasing") names the action in errors. A claim for
// which keep does not hold is left as it is (nil); one deleted meanwhile
// counts as deleted.
func (o *ownership) deleteClaim(ctx context.Context, thread string, r rec, keep func(ThreadOwner) bool, what string) error {
	del, err := o.claims.DeleteIf(ctx, claimKey(thread), &r.ThreadOwner, r.rev, func(t *ThreadOwner) bool { return keep(*t) })
	if err != nil {
		return fmt.Errorf("%s the claim on %s: %w", what, thread, err)
	}
	if del == nil {
		return nil
	}
	for _, u := range slices.Concat([]string{del.Owner}, del.Shared) {
		if err := o.kv.Delete(ctx, "u."+userKey(u)+"."+thread); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("%s the index of %s: %w", what, thread, err)
		}
	}
	return nil
}

// unusedShareClaim reports whether t is a claim another user than user
// made by a share, never followed by a message for ShareClaimTTL.
func unusedShareClaim(t ThreadOwner, user string) bool {
	return !t.member(user) && t.EventID == "" && t.Verdict != VerdictAccepted && time.Since(t.CreatedAt) > ShareClaimTTL
}

// nextItem returns the next item of items, or ok false when items is
// closed or ctx is done (the caller tells them apart by ctx.Err).
func nextItem(ctx context.Context, items <-chan item) (it item, ok bool) {
	select {
	case it, ok = <-items:
	case <-ctx.Done():
	}
	return it, ok
}

// errClaimed: the thread has a claim record already (createClaim).
var errClaimed = errors.New("the thread is claimed already")

// createClaim creates user's pending claim on thread for the message
// eventID titled title ("" and "" for a claim made by a share);
// errClaimed when the thread is claimed already.
func (o *ownership) createClaim(ctx context.Context, thread, user, eventID, title string) (rec, error) {
	from, err := o.nextChatSeq(ctx)
	if err != nil {
		return rec{}, err
	}
	t := ThreadOwner{Owner: user, CreatedAt: time.Now().UTC(), Verdict: VerdictPending, EventID: eventID, FromSeq: from, Title: title}
	rev, err := o.claims.Create(ctx, claimKey(thread), &t)
	if errors.Is(err, kvstate.ErrConflict) {
		return rec{}, errClaimed
	}
	if err != nil {
		return rec{}, fmt.Errorf("claiming %s: %w", thread, err)
	}
	return rec{t, rev}, nil
}

// claimFor reserves thread for user's message eventID, titled title
// (threadTitle of its text; the title of a claim it creates): it creates a
// pending claim when the thread is unclaimed (or its earlier claim was
// refused), and returns the record to follow, with pending false when the
// processor already accepted user's claim, or the owner's when user is
// shared the thread. It returns errNotOwner when another user holds the
// claim and user is not shared it, or is shared a claim not yet accepted.
func (o *ownership) claimFor(ctx context.Context, thread, user, eventID, title string) (r rec, pending bool, err error) {
	for range 3 {
		r, err = o.get(ctx, thread)
		switch {
		case errors.Is(err, errNotOwner):
			// Not a thread the processor gave someone else (epoch.go).
			if ok, err := o.mayClaim(ctx, thread, user); err != nil {
				return rec{}, false, err
			} else if !ok {
				return rec{}, false, errNotOwner
			}
			r, err := o.createClaim(ctx, thread, user, eventID, title)
			if errors.Is(err, errClaimed) {
				continue // another request claimed it first: read its claim
			}
			if err != nil {
				return rec{}, false, err
			}
			return r, true, nil
		case err != nil:
			return rec{}, false, err
		case unusedShareClaim(r.ThreadOwner, user):
			// Another user's claim made by a share and never followed by
			// a message: void after ShareClaimTTL, so a name cannot be
			// squatted by sharing it.
			unused := func(t *ThreadOwner) bool { return unusedShareClaim(*t, user) }
			if _, err := o.claims.DeleteIf(ctx, claimKey(thread), &r.ThreadOwner, r.rev, unused); err != nil {
				return rec{}, false, fmt.Errorf("releasing an unused claim of %s: %w", thread, err)
			}
			continue
		case !r.member(user):
			return rec{}, false, errNotOwner
		case r.Verdict == VerdictAccepted && !r.allows(user):
			return rec{}, false, errNotOwner
		case r.Verdict == VerdictAccepted:
			// A claim whose processor ownership ended (epoch.go) is
			// voided: claim anew, for the processor to judge.
			if r, err = o.current(ctx, thread, r); errors.Is(err, errNotOwner) {
				continue
			} else if err != nil {
				return rec{}, false, err
			}
			// The index is rewritten on every message, so a crash between
			// confirming (or sharing) and indexing heals on the user's
			// next message.
			if err := o.index(ctx, thread, user, r.CreatedAt); err != nil {
				return rec{}, false, err
			}
			return r, false, nil
		}
		// A claim not yet accepted (user's own, or the owner's of one
		// shared with user): maybe a verdict came.
		out, _, err := o.resolve(ctx, thread, r.Owner, r, "", 0)
		switch {
		case err != nil:
			return rec{}, false, err
		case out == outcomeAccepted:
			continue // confirmed: read it again (and index user)
		case out == outcomePending && r.Owner != user:
			return rec{}, false, errNotOwner // a share of a pending claim allows nothing yet
		case out == outcomePending && r.EventID == "":
			// A claim made by a share (or before verdicts were followed):
			// this is its first message, whose refusal releases it. The
			// name may have been taken since the share (an integrator's
			// first message): then, as for any first message, nothing is
			// published into someone else's thread (G3) and the claim is
			// released.
			if ok, err := o.mayClaim(ctx, thread, user); err != nil {
				return rec{}, false, err
			} else if !ok {
				if err := o.release(ctx, thread, user, r); err != nil {
					return rec{}, false, err
				}
				return rec{}, false, errNotOwner
			}
			owner := r.Owner
			t, rev, err := o.claims.MutateFrom(ctx, claimKey(thread), &r.ThreadOwner, r.rev, false, func(t *ThreadOwner) error {
				if t.Owner != owner || t.Verdict == VerdictAccepted || t.EventID != "" {
					return errClaimChanged
				}
				t.EventID, t.Title = eventID, title
				return nil
			})
			if errors.Is(err, errClaimChanged) || errors.Is(err, kvstate.ErrNotFound) {
				continue // another message's claim, or settled, meanwhile: read it again
			}
			if err != nil {
				return rec{}, false, fmt.Errorf("claiming %s: %w", thread, err)
			}
			return rec{*t, rev}, true, nil
		case out == outcomePending:
			return r, true, nil
		case r.Owner != user:
			return rec{}, false, errNotOwner // the owner's claim was refused
		}
		// refused and released: claim anew for this message.
	}
	return rec{}, false, fmt.Errorf("claiming %s: the claim changed three times while reading it; retry", thread)
}

// nextChatSeq returns the sequence the next PARLEY_CHAT message will have
// at least: a verdict on a message published after this call is stored at
// or after it.
// ShareClaimTTL is how long a claim made by a share (PUT .../shares/{user}
// of a thread nobody claimed) holds the thread's name without a message:
// after it, another user's first message takes the name over.
var ShareClaimTTL = 10 * time.Minute

// hasEvents reports whether thread has any event in PARLEY_CHAT (someone,
// maybe another principal, already uses the name).
func (o *ownership) hasEvents(ctx context.Context, thread string) (bool, error) {
	ctx, cancel := bus.WithRequestTimeout(ctx)
	defer cancel()
	stream, err := o.verdicts.js.Stream(ctx, events.StreamChat)
	if err != nil {
		return false, fmt.Errorf("opening %s: %w", events.StreamChat, err)
	}
	_, err = stream.GetLastMsgForSubject(ctx, events.ChatThreadSubjects(thread))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s of %s: %w", events.StreamChat, thread, err)
	}
	return true, nil
}

func (o *ownership) nextChatSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := bus.WithRequestTimeout(ctx)
	defer cancel()
	stream, err := o.verdicts.js.Stream(ctx, events.StreamChat)
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", events.StreamChat, err)
	}
	return stream.CachedInfo().State.LastSeq + 1, nil
}

// answerMessage answers POST .../messages after the message e was
// published under the pending claim r: it waits up to VerdictWait for the
// processor's verdict. Accepted: 202 "accepted" (the claim is confirmed).
// Refused: the claim is released and the answer is 404 for `forbidden`
// (the thread is someone else's: like an unknown thread, its owner is not
// named) or the rejection's problem otherwise. No verdict yet: 202
// "pending" (the claim is resolved on a later request).
func (g *Gateway) answerMessage(w http.ResponseWriter, r *http.Request, thread, user string, c rec, eventID string) {
	out, rej, err := g.owners.resolve(r.Context(), thread, user, c, eventID, g.opts.VerdictWait)
	switch {
	case err != nil:
		g.unavailable(w, r, err)
	case out == outcomeAccepted:
		w.Header().Set("Location", "/v1/threads/"+thread+"/events")
		writeJSON(w, http.StatusAccepted, Accepted{EventID: eventID, Thread: thread, Status: VerdictAccepted})
	case out == outcomeRejected && rej.Reason == events.RejectForbidden:
		g.notFound(w)
	case out == outcomeRejected:
		writeProblem(w, Problem{Status: rejectionStatus(rej.Reason), Reason: rej.Reason,
			Detail: "the message was refused: " + rej.Reason, EventID: rej.RequestEventID, Errors: rej.Errors,
			Title: "message rejected: " + rej.Reason})
	default:
		w.Header().Set("Location", "/v1/threads/"+thread+"/events")
		writeJSON(w, http.StatusAccepted, Accepted{EventID: eventID, Thread: thread, Status: VerdictPending})
	}
}
