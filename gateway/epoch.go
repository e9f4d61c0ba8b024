package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
)

// A confirmed claim lasts only as long as the processor's ownership it was
// confirmed under (docs/SECURITY.md "Thread ownership through the
// gateway"). The processor forgets a thread ThreadTTL after its record was
// last written (workers/processor Options.ThreadTTL; 30 days by default);
// then the next principal to send becomes the owner. The processor also
// resets a record it cannot read (a turn.failed with reason
// state_incompatible), after which the next sender owns the thread too.
// The gateway cannot read the processor's record, so it follows the
// thread's events in PARLEY_CHAT: an ownership of the processor (an
// "epoch" here) ends
//
//   - for a claim whose owner is only a party an integrator shared the
//     thread with: at an idle gap, two consecutive events of the thread
//     (other than progress and message deltas, which no record write
//     accompanies) stored at least the idle bound apart (epochIdle:
//     Options.ThreadTTL less a margin, so the gateway ends the epoch
//     before the processor can have forgotten the thread; the times are
//     the server's, so no gateway clock is involved). A claim whose owner
//     is the processor's owner does not end at a gap: the first accepted
//     message after it tells (the rule below). Ending it at the gap let a
//     party the owner had shared the thread with (even one revoked since:
//     the processor keeps grants) post first after the gap, while the
//     processor still held the owner's record, and take the thread from
//     its owner;
//   - at a reset (turn.failed, reason state_incompatible, naming no turn);
//   - at an accepted message (turn.requested echo) of a party the claim
//     does not know, when the claim's owner is the processor's owner: the
//     processor accepts only its owner and the parties the owner's
//     messages shared the thread with, which through the gateway are the
//     users the claim was ever shared with (ThreadOwner.Granted). (When
//     the owner is only a party an integrator shared the thread with,
//     that integrator may share it with anyone, so only the two rules
//     above apply.)
//
// An ended epoch voids the claim: it is deleted (with its revision) with
// its shares and index entries, every route answers 404 like an unknown
// thread, and the owner's next message makes a new pending claim that the
// processor judges. Every read applies the rules to each event it would
// show (GET /v1/threads/{thread} folds, the event stream writes) and shows
// nothing from the first event that ends the epoch; every route first
// reads the thread's last event (one stream get) and, when it is at least
// the idle bound newer than the claim's verified point (EpochSeq,
// EpochAt), scans the thread's events from that point (at most
// MaxEpochScan) and records how far they were checked. For a claim whose
// owner is the processor's owner, events stored before the claim was made
// (FromSeq) belong to an earlier epoch and are not shown either.

// DefaultThreadTTL is the default of Options.ThreadTTL: the processor's
// default ThreadTTL.
const DefaultThreadTTL = 30 * 24 * time.Hour

// MaxEpochScan bounds the thread events one request reads to check a
// claim's epoch (epoch.go) beyond what it shows. When more are stored, the
// request goes on from what was checked (reads still check each event they
// show) and the next request continues from there.
const MaxEpochScan = 10000

// epochIdle returns the idle gap that ends an epoch for the processor's
// thread TTL ttl: ttl less a margin of a tenth of it, at most a day. The
// margin covers the time between a record write and an event published
// after it (a redelivered handler) and the clocks of the NATS servers
// holding the processor's bucket and PARLEY_CHAT: ending an epoch too
// early only makes the owner's next message claim the thread again.
func epochIdle(ttl time.Duration) time.Duration {
	return ttl - min(ttl/10, 24*time.Hour)
}

// epochRule applies the rules above to a claim's events in stream order.
type epochRule struct {
	idle  time.Duration
	owner events.Identity
	// parties are the identities the processor may accept besides the
	// owner; nil and unchecked when shared.
	parties []events.Identity
	// shared is ThreadOwner.ProcessorShared.
	shared bool
	// prev is when the previous counted event was stored (zero: none).
	prev time.Time
}

// rule returns the rule for claim t, starting after its verified point.
func (o *ownership) rule(t ThreadOwner) *epochRule {
	r := &epochRule{idle: o.idle, owner: events.Identity{Principal: o.verdicts.principal, OnBehalfOf: t.Owner},
		shared: t.ProcessorShared, prev: t.EpochAt}
	if !t.ProcessorShared {
		for _, u := range slices.Concat(t.Granted, t.Shared) {
			r.parties = append(r.parties, events.Identity{Principal: o.verdicts.principal, OnBehalfOf: u})
		}
	}
	return r
}

// counts reports whether ev takes part in the rules: progress and message
// deltas (published while a turn runs, without a record write) do not.
func counts(ev *event.Event) bool {
	switch events.TypeOf(ev) {
	case "", events.TypeProgress, events.TypeMessageDelta:
		return false
	}
	return true
}

// step reports whether ev, stored at at, still belongs to the claim's
// epoch; false means the epoch ended before it.
func (r *epochRule) step(at time.Time, ev *event.Event) bool {
	if !counts(ev) {
		return true
	}
	gap := !r.prev.IsZero() && at.Sub(r.prev) >= r.idle
	r.prev = at
	echo := events.TypeOf(ev) == events.TypeTurnRequested
	who := events.EchoIdentity(ev)
	switch {
	case gap && r.shared:
		// A party an integrator shared the thread with cannot tell the
		// integrator's own messages from a new owner's: an idle gap
		// long enough for the processor to forget ends its epoch.
		return false
	case events.TypeOf(ev) == events.TypeTurnFailed:
		d, err := events.Data[events.TurnFailed](ev)
		// The processor's reset of a record it cannot read names no turn;
		// a turn that failed state_incompatible (a pause or a run it
		// could not resume) left the record, and its owner, as they were.
		return err != nil || d.Reason != events.RejectStateIncompatible || d.TurnID != ""
	case echo && !r.shared:
		return who.Same(r.owner) || slices.ContainsFunc(r.parties, who.Same)
	}
	return true
}

// firstShown returns the first PARLEY_CHAT sequence of the thread a read
// of claim t may show: the first accepted message of the processor's
// ownership t was confirmed under (StartSeq: a party an integrator shared
// the thread with reads what was said before it joined, but nothing of an
// earlier owner). For a claim confirmed before StartSeq was recorded:
// where the claim began (FromSeq) when its owner is the processor's
// owner, else 1.
func firstShown(t ThreadOwner) uint64 {
	switch {
	case t.StartSeq > 0:
		return t.StartSeq
	case t.ProcessorShared:
		return 1
	}
	return max(t.FromSeq, 1)
}

// lastEvent returns the sequence and stored time of the thread's newest
// event in PARLEY_CHAT (0 when it has none): one stream get.
func (o *ownership) lastEvent(ctx context.Context, thread string) (uint64, time.Time, error) {
	ctx, cancel := bus.WithRequestTimeout(ctx)
	defer cancel()
	stream, err := o.verdicts.js.Stream(ctx, events.StreamChat)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("opening %s: %w", events.StreamChat, err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, events.ChatThreadSubjects(thread))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, time.Time{}, nil
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("reading the last event of %s: %w", thread, err)
	}
	return m.Sequence, m.Time, nil
}

// current returns r when its epoch has not visibly ended, errNotOwner
// (after voiding r) when it has. A pending claim is returned as it is.
// Cost: one stream get; a scan of at most MaxEpochScan events when the
// thread's newest event is at least the idle bound newer than r's
// verified point.
func (o *ownership) current(ctx context.Context, thread string, r rec) (rec, error) {
	if r.Verdict != VerdictAccepted {
		return r, nil
	}
	seq, at, err := o.lastEvent(ctx, thread)
	if err != nil {
		return rec{}, err
	}
	if seq <= r.EpochSeq || (!r.EpochAt.IsZero() && at.Sub(r.EpochAt) < o.idle) {
		// Nothing new, or too little time for an idle gap since the
		// verified point (the reads check each event they show).
		return r, nil
	}
	return o.scanEpoch(ctx, thread, r, seq)
}

// scanEpoch checks r's epoch on the thread's events after its verified
// point up to sequence last (at most MaxEpochScan of them), records how
// far it checked, and voids r (errNotOwner) when the epoch ended.
func (o *ownership) scanEpoch(ctx context.Context, thread string, r rec, last uint64) (rec, error) {
	from := max(r.EpochSeq+1, firstShown(r.ThreadOwner))
	if last < from {
		return r, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	items, stop, err := o.verdicts.follow(ctx, []string{events.ChatThreadSubjects(thread)}, from)
	if err != nil {
		return rec{}, err
	}
	defer stop()
	rule := o.rule(r.ThreadOwner)
	checked := r.ThreadOwner
	for n := 1; ; n++ {
		it, ok := nextItem(ctx, items)
		if !ok {
			if err := ctx.Err(); err != nil {
				return rec{}, fmt.Errorf("reading the events of %s: %w", thread, err)
			}
			break
		}
		if !rule.step(it.time, it.ev) {
			return rec{}, o.void(ctx, thread, r)
		}
		if counts(it.ev) {
			checked.EpochSeq, checked.EpochAt = it.seq, it.time.UTC()
		}
		if it.seq >= last || it.numPending == 0 || n >= MaxEpochScan {
			break
		}
	}
	return o.checkedTo(ctx, thread, r, checked.EpochSeq, checked.EpochAt)
}

// checkedTo records that r's events up to seq (the last of them stored at
// at) were checked, unless the record moved further meanwhile, and returns
// the record as written. A record of another confirmation is left, and
// errNotOwner returned.
func (o *ownership) checkedTo(ctx context.Context, thread string, r rec, seq uint64, at time.Time) (rec, error) {
	owner, from := r.Owner, r.FromSeq
	t, rev, err := o.claims.MutateFrom(ctx, claimKey(thread), &r.ThreadOwner, r.rev, false, func(t *ThreadOwner) error {
		if t.Owner != owner || t.FromSeq != from || t.Verdict != VerdictAccepted {
			return errNotOwner
		}
		if t.EpochSeq >= seq {
			return kvstate.ErrNoChange
		}
		t.EpochSeq, t.EpochAt = seq, at
		return nil
	})
	switch {
	case errors.Is(err, errNotOwner) || errors.Is(err, kvstate.ErrNotFound):
		return rec{}, errNotOwner
	case err != nil:
		return rec{}, fmt.Errorf("recording the checked events of %s: %w", thread, err)
	}
	return rec{*t, rev}, nil
}

// settle is called by a read whose rule refused the thread's event at seq:
// it checks the current record's epoch up to seq (scanEpoch, with the
// parties as they are now: a share granted since the read began is
// known) and returns the record when the event belongs to its epoch after
// all (the read goes on with a rule made from it). Otherwise the read
// shows nothing from seq: errNotOwner (the claim voided, or not yet
// checked that far), or the error that kept it from checking.
func (o *ownership) settle(ctx context.Context, thread string, seq uint64) (ThreadOwner, error) {
	r, err := o.get(ctx, thread)
	if err != nil {
		return ThreadOwner{}, err
	}
	if r.Verdict != VerdictAccepted {
		return ThreadOwner{}, errNotOwner
	}
	if r, err = o.scanEpoch(ctx, thread, r, seq); err != nil {
		return ThreadOwner{}, err
	}
	if r.EpochSeq < seq {
		return ThreadOwner{}, errNotOwner
	}
	return r.ThreadOwner, nil
}

// epochReader applies a claim's epoch rules to the events a read shows, in
// stream order (GET /v1/threads/{thread}, the event stream).
type epochReader struct {
	o      *ownership
	thread string
	t      ThreadOwner
	rule   *epochRule
}

func (o *ownership) reader(thread string, t ThreadOwner) *epochReader {
	return &epochReader{o: o, thread: thread, t: t, rule: o.rule(t)}
}

// shows reports (nil) whether the read may show the event it read at seq
// (stored at at); events up to the claim's verified point are shown. On
// errNotOwner the read shows nothing from this event on and ends.
func (e *epochReader) shows(ctx context.Context, seq uint64, at time.Time, ev *event.Event) error {
	if seq <= e.t.EpochSeq {
		return nil
	}
	if e.rule.step(at, ev) {
		return nil
	}
	t, err := e.o.settle(ctx, e.thread, seq)
	if err != nil {
		return err
	}
	e.t, e.rule = t, e.o.rule(t)
	return nil
}

// void deletes r, a confirmed claim whose epoch ended, with its shares and
// the index entries of its owner and the users it was shared with, and
// returns errNotOwner (or the error that kept it from deleting). A record
// changed meanwhile (a share, recorded progress) is deleted too as long as
// it is the same confirmation (owner and FromSeq); a newer claim is left.
func (o *ownership) void(ctx context.Context, thread string, r rec) error {
	same := func(c ThreadOwner) bool {
		return c.Owner == r.Owner && c.FromSeq == r.FromSeq && c.Verdict == VerdictAccepted
	}
	if err := o.deleteClaim(ctx, thread, r, same, "voiding"); err != nil {
		return err
	}
	return errNotOwner
}

// mayClaim reports whether user's message may make the first claim on
// thread, which has no claim in BucketThreads: the thread has no accepted
// message (turn.requested echo) in PARLEY_CHAT, or its last one is at
// least the idle bound old (the processor may have forgotten the thread,
// so its verdict decides), or the processor's current ownership of it
// (the echoes since the last idle gap between them, at most
// MaxVerdictScan) includes an accepted message of user or one sharing the
// thread with user. Otherwise the thread is someone else's at the
// processor, which would refuse the message forbidden and write the
// refusal into that owner's thread: the gateway answers 404 instead and
// publishes nothing. Cost: one stream get; the scan only for a thread
// that has recent accepted messages and no claim.
func (o *ownership) mayClaim(ctx context.Context, thread, user string) (bool, error) {
	subj := events.ChatSubject(thread, events.ChatTurnRequested)
	rctx, cancel := bus.WithRequestTimeout(ctx)
	defer cancel()
	stream, err := o.verdicts.js.Stream(rctx, events.StreamChat)
	if err != nil {
		return false, fmt.Errorf("opening %s: %w", events.StreamChat, err)
	}
	last, err := stream.GetLastMsgForSubject(rctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the last message of %s: %w", thread, err)
	}
	if time.Since(last.Time) >= o.idle {
		return true, nil
	}
	ctx, cancelScan := context.WithTimeout(ctx, 30*time.Second)
	defer cancelScan()
	items, stop, err := o.verdicts.follow(ctx, []string{subj}, 1)
	if err != nil {
		return false, err
	}
	defer stop()
	me := events.Identity{Principal: o.verdicts.principal, OnBehalfOf: user}
	found := false
	var prev time.Time
	for n := 1; ; n++ {
		it, ok := nextItem(ctx, items)
		if !ok {
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("reading the messages of %s: %w", thread, err)
			}
			return found, nil
		}
		if it.ev != nil {
			if !prev.IsZero() && it.time.Sub(prev) >= o.idle {
				found = false // a new ownership at the processor
			}
			prev = it.time
			if events.EchoIdentity(it.ev).Same(me) {
				found = true
			} else if d, err := events.Data[events.TurnRequested](it.ev); err == nil && slices.ContainsFunc(d.Share, me.Same) {
				found = true
			}
		}
		if it.seq >= last.Sequence || it.numPending == 0 || n >= MaxVerdictScan {
			return found, nil
		}
	}
}

// epochStart finds where the processor's ownership of thread that holds
// the accepted message echo (a turn.requested echo at echo.seq) began:
// the first accepted message after the last idle gap between the thread's
// accepted messages up to echo (at most MaxVerdictScan of them). It
// returns that message's sequence and whether who sent it (who is then
// the processor's owner, not a party the owner shared the thread with).
// When the scan cannot reach echo, it assumes the narrower view and
// right: the ownership begins at echo and who is not its owner.
func (o *ownership) epochStart(ctx context.Context, thread string, echo item, who events.Identity) (uint64, bool, error) {
	if echo.seq == 0 {
		return 0, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	items, stop, err := o.verdicts.follow(ctx, []string{events.ChatSubject(thread, events.ChatTurnRequested)}, 1)
	if err != nil {
		return 0, false, err
	}
	defer stop()
	var (
		start uint64
		owner bool
		prev  time.Time
	)
	for n := 1; ; n++ {
		it, ok := nextItem(ctx, items)
		if !ok {
			if err := ctx.Err(); err != nil {
				return 0, false, fmt.Errorf("reading the messages of %s: %w", thread, err)
			}
			return echo.seq, false, nil
		}
		if it.ev != nil {
			if start == 0 || (!prev.IsZero() && it.time.Sub(prev) >= o.idle) {
				start, owner = it.seq, events.EchoIdentity(it.ev).Same(who)
			}
			prev = it.time
		}
		if it.seq >= echo.seq {
			return start, owner, nil
		}
		if it.numPending == 0 || n >= MaxVerdictScan {
			return echo.seq, false, nil
		}
	}
}
