package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
)

// BucketThreads is the gateway's KV bucket of thread ownership. Keys:
// "t.<thread>" → ThreadOwner (JSON), claimed with kv.Create so one
// claimant is pending on every replica, confirmed only by the processor's
// verdict (verify.go), and changed (shares, the verdict) only with
// compare-and-set on its revision; "u.<user>.<thread>" → the claim (or
// share) time, an index for listing a user's threads, the owner's and
// those shared with them, written once the claim is confirmed (<user> is
// the subject in unpadded base64url, so any subject makes a valid key).
const BucketThreads = "parley_gateway_threads"

// MaxThreadsListed bounds GET /v1/threads: at most this many of a user's
// threads are returned (the first in key order, then sorted newest claim
// first); the response says "truncated" when there were more.
const MaxThreadsListed = 1000

// ThreadOwner is the value of "t.<thread>" in BucketThreads.
type ThreadOwner struct {
	// Owner is the subject of the user whose message (or share) first
	// named the thread.
	Owner     string    `json:"owner"`
	CreatedAt time.Time `json:"createdAt"`
	// Shared are the subjects of the users the owner shared the thread
	// with, in the order granted: each may read the thread, send messages
	// to it and answer its questions once the claim is accepted (a share
	// of a pending claim gives nothing until then, and goes with the claim
	// when the processor refuses it). At most events.MaxShares.
	Shared []string `json:"shared,omitempty"`
	// Granted are the subjects of every user the thread was ever shared
	// with, revoked ones included: the processor keeps a grant once an
	// owner's message carried it, and refuses a message that would take
	// its record over events.MaxShares, so that bound applies here. At
	// most events.MaxShares.
	Granted []string `json:"granted,omitempty"`
	// Verdict is VerdictPending until the gateway saw the processor accept
	// a message of Owner on the thread, then VerdictAccepted. A record
	// without it (written before verdicts were followed) is verified like
	// a pending one.
	Verdict string `json:"verdict,omitempty"`
	// EventID is the ID of the claim's first message (turn.requested):
	// its rejection releases the claim. Empty for a claim made by a share
	// until the owner's first message.
	EventID string `json:"eventId,omitempty"`
	// FromSeq is the PARLEY_CHAT sequence the verdict is looked for from
	// (the stream's next sequence when the claim was made).
	FromSeq uint64 `json:"fromSeq,omitempty"`
	// ProcessorShared is true when the processor accepted Owner as a party
	// the thread's owner there (an integrator, say) shared it with, not as
	// that owner: Owner may use the thread but not share it on (the
	// processor takes grants only from its owner), so Shared counts for
	// nothing. Set when the claim is confirmed.
	ProcessorShared bool `json:"processorShared,omitempty"`
	// EpochSeq and EpochAt are the PARLEY_CHAT sequence and stored time
	// (the server's clock) of the newest event of the thread known to
	// belong to the processor's ownership the claim was confirmed under:
	// at first the echo that confirmed it, then moved on as the thread's
	// later events are checked (epoch.go). Zero for a claim confirmed
	// before epochs were followed.
	EpochSeq uint64    `json:"epochSeq,omitempty"`
	EpochAt  time.Time `json:"epochAt,omitzero"`
	// StartSeq is the PARLEY_CHAT sequence of the first accepted message
	// of the processor's ownership the claim was confirmed under: reads
	// show nothing stored before it (an earlier owner's events). Set when
	// the claim is confirmed; zero before epochs were followed.
	StartSeq uint64 `json:"startSeq,omitempty"`
	// Title is the thread's title for lists: threadTitle of the text of
	// the claim's first message. Empty for a claim made by a share until
	// the owner's first message, and for records written before titles.
	Title string `json:"title,omitempty"`
}

// sharedWith returns the users Shared gives access to once the claim is
// accepted: none when Owner is only a party the processor's owner shared
// the thread with.
func (t ThreadOwner) sharedWith() []string {
	if t.ProcessorShared {
		return nil
	}
	return t.Shared
}

// member reports whether user is the owner or one the thread is shared
// with, whatever the verdict.
func (t ThreadOwner) member(user string) bool {
	return t.Owner == user || slices.Contains(t.Shared, user)
}

// allows reports whether user may use the thread now: the processor
// accepted the owner's claim, and user is the owner or shared with.
func (t ThreadOwner) allows(user string) bool {
	return t.Verdict == VerdictAccepted && (t.Owner == user || slices.Contains(t.sharedWith(), user))
}

// ThreadSummary is one entry of GET /v1/threads.
type ThreadSummary struct {
	Thread    string    `json:"thread"`
	CreatedAt time.Time `json:"createdAt"`
	// Title is the text of the thread's first message, on one line, cut
	// to MaxTitle characters (see threadTitle); "" when unknown.
	Title string `json:"title"`
}

// MaxTitle bounds ThreadSummary.Title: at most 80 characters (Unicode
// code points), the ellipsis of a cut title included.
const MaxTitle = 80

// threadTitle is the title of a thread whose first message is text: its
// words on one line (runs of white space, newlines included, become one
// space) and, when that is longer than MaxTitle characters, cut at the
// last word boundary that leaves room for "…" (in the middle of a word
// only when its first word is that long).
func threadTitle(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	r := []rune(t)
	if len(r) <= MaxTitle {
		return t
	}
	cut := r[:MaxTitle-1] // room for the ellipsis
	if i := strings.LastIndexByte(string(cut), ' '); i > 0 && r[MaxTitle-1] != ' ' {
		return string(cut)[:i] + "…"
	}
	return strings.TrimRight(string(cut), " ") + "…"
}

// errNotOwner means the thread exists and belongs to someone else, or (for
// lookups) does not exist: callers answer 404 either way.
var errNotOwner = errors.New("thread not found")

type ownership struct {
	// kv holds the index ("u.<user>.<thread>"); claims the claim records
	// ("t.<thread>", claimKey) of the same bucket.
	kv     jetstream.KeyValue
	claims *kvstate.Store[ThreadOwner]
	// verdicts reads the processor's verdicts on claims (verify.go).
	verdicts *verdicts
	// idle is the gap between a thread's events that ends a claim's
	// epoch (epoch.go: epochIdle of Options.ThreadTTL).
	idle time.Duration
}

// openOwnership creates the bucket, or opens it when another replica did
// (kvstate.OpenBucket: create before update, retried under ctx's start-up
// policy, so gateways starting at once on a fresh cluster all come up).
func openOwnership(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int) (*ownership, error) {
	b, err := kvstate.OpenBucket[json.RawMessage](ctx, js, BucketThreads, kvstate.BucketOptions{Storage: storage, Replicas: replicas})
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", BucketThreads, err)
	}
	// Every single-request KV operation is bounded by bus.RequestTimeout.
	return &ownership{kv: bus.BoundedKV(b.KV()),
		claims: kvstate.NewStore(b, kvstate.StoreOptions[ThreadOwner]{Name: "owner of"})}, nil
}

// claimKey is the key of thread's claim record.
func claimKey(thread string) string { return "t." + thread }

func userKey(user string) string { return base64.RawURLEncoding.EncodeToString([]byte(user)) }

// check returns nil when user may use thread (allows, with a pending
// claim's verdict looked up in what is stored), errNotOwner otherwise.
func (o *ownership) check(ctx context.Context, thread, user string) error {
	_, err := o.access(ctx, thread, user, 0)
	return err
}

// index lists thread among user's threads (GET /v1/threads).
func (o *ownership) index(ctx context.Context, thread, user string, at time.Time) error {
	ts, _ := at.MarshalText()
	if _, err := o.kv.Put(ctx, "u."+userKey(user)+"."+thread, ts); err != nil {
		return fmt.Errorf("indexing %s: %w", thread, err)
	}
	return nil
}

// Errors of share, answered 403, 400 and 409.
var (
	errNotThreadOwner = errors.New("only the thread's owner may share it")
	errShareOwner     = errors.New("the owner cannot be shared their own thread")
	errSharedToOwner  = errors.New("the thread was shared with you at the processor by its owner there, who alone may share it")
	errTooManyShares  = fmt.Errorf("a thread is shared with at most %d users, revoked ones included", events.MaxShares)
)

// share grants (grant) or revokes thread to other on behalf of owner,
// making a pending claim for owner first when nobody has claimed the
// thread, and returns the record as written. A share of a pending claim is
// recorded but allows nothing until the processor accepts the claim
// (ThreadOwner.allows); a pending claim's verdict is looked up in what is
// stored first. Granting twice or revoking a user without a grant changes
// nothing. Errors: errNotOwner (owner may not see the thread: someone
// else's, the processor refused owner's claim, or owner is only shared a
// pending claim), errNotThreadOwner (owner is only shared it),
// errShareOwner, and errTooManyShares (a grant beyond events.MaxShares).
func (o *ownership) share(ctx context.Context, thread, owner, other string, grant bool) (ThreadOwner, error) {
	if grant {
		// A share may claim only a thread that has no events yet (the
		// web chat shares a new thread before its first message, so the
		// message carries the share): a claim made by a share has no
		// message the processor judges, so it must not close a name
		// another principal already uses (ShareClaimTTL bounds the rest).
		used, err := o.hasEvents(ctx, thread)
		if err != nil {
			return ThreadOwner{}, err
		}
		if !used {
			if _, err := o.createClaim(ctx, thread, owner, "", ""); err != nil && !errors.Is(err, errClaimed) {
				return ThreadOwner{}, err
			}
		}
	}
	r, err := o.get(ctx, thread)
	if err != nil {
		return ThreadOwner{}, err
	}
	if r, err = o.current(ctx, thread, r); err != nil {
		return ThreadOwner{}, err // errNotOwner: its epoch ended (epoch.go)
	}
	if r.Owner == owner && r.Verdict != VerdictAccepted {
		// Maybe the processor already decided on owner's claim.
		out, _, err := o.resolve(ctx, thread, owner, r, "", 0)
		switch {
		case err != nil:
			return ThreadOwner{}, err
		case out == outcomeRejected:
			return ThreadOwner{}, errNotOwner // released: the thread is someone else's
		case out == outcomeAccepted:
			// Confirmed: read the record again.
			if r, err = o.get(ctx, thread); err != nil {
				return ThreadOwner{}, err
			}
			if r, err = o.current(ctx, thread, r); err != nil {
				return ThreadOwner{}, err
			}
		}
	}
	// refused is the error of a share the record does not allow.
	var refused error
	t, _, err := o.claims.MutateFrom(ctx, claimKey(thread), &r.ThreadOwner, r.rev, false, func(t *ThreadOwner) error {
		if refused = mayShare(*t, owner, other, grant); refused != nil {
			return refused
		}
		has := slices.Contains(t.Shared, other)
		for _, s := range t.Shared { // records written before Granted
			if !slices.Contains(t.Granted, s) {
				t.Granted = append(t.Granted, s)
			}
		}
		known := slices.Contains(t.Granted, other)
		switch {
		case grant && !has && !known && len(t.Granted) >= events.MaxShares:
			refused = errTooManyShares
			return refused
		case grant && !has:
			t.Shared = append(t.Shared, other)
			if !known {
				t.Granted = append(t.Granted, other)
			}
		case !grant && has:
			t.Shared = slices.DeleteFunc(t.Shared, func(s string) bool { return s == other })
		default:
			return kvstate.ErrNoChange
		}
		return nil
	})
	switch {
	case refused != nil && errors.Is(err, refused):
		return ThreadOwner{}, refused
	case errors.Is(err, kvstate.ErrNotFound):
		return ThreadOwner{}, errNotOwner
	case err != nil:
		return ThreadOwner{}, fmt.Errorf("sharing %s: %w", thread, err)
	}
	// The record decides access; the index only lists. It is written
	// after the record (and again on a repeated PUT or DELETE), so a
	// crash between the two heals on the next call; a pending claim's
	// shares are indexed when it is confirmed (confirm).
	switch {
	case grant && t.Verdict == VerdictAccepted:
		err = o.index(ctx, thread, other, time.Now().UTC())
	case !grant:
		if err = o.kv.Delete(ctx, "u."+userKey(other)+"."+thread); err != nil {
			err = fmt.Errorf("unindexing %s: %w", thread, err)
		}
	}
	return *t, err
}

// mayShare returns nil when owner may grant (grant) or revoke other's
// share of the claim t, else the error share answers.
func mayShare(t ThreadOwner, owner, other string, grant bool) error {
	switch {
	case !t.member(owner):
		return errNotOwner
	case t.Owner != owner && t.Verdict != VerdictAccepted:
		return errNotOwner // a pending claim shows nothing to those it is shared with
	case t.Owner != owner && t.ProcessorShared:
		return errNotOwner // those it is shared with have no access either
	case t.Owner != owner:
		return errNotThreadOwner
	case grant && t.ProcessorShared:
		return errSharedToOwner
	case other == owner:
		return errShareOwner
	}
	return nil
}

// list returns at most MaxThreadsListed of user's threads (the first in
// key order), sorted newest claim first; truncated says there were more.
func (o *ownership) list(ctx context.Context, user string) ([]ThreadSummary, bool, error) {
	prefix := "u." + userKey(user) + "."
	lister, err := o.kv.ListKeysFiltered(ctx, prefix+">")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return []ThreadSummary{}, false, nil
		}
		return nil, false, fmt.Errorf("listing threads: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var out []ThreadSummary
	truncated := false
	for k := range lister.Keys() {
		if len(out) == MaxThreadsListed {
			truncated = true
			break
		}
		s := ThreadSummary{Thread: strings.TrimPrefix(k, prefix)}
		if e, err := o.kv.Get(ctx, k); err == nil {
			_ = s.CreatedAt.UnmarshalText(e.Value())
		}
		// The title is the record's, shown only to whom the record gives
		// the thread (an index entry may outlive its claim).
		if r, err := o.get(ctx, s.Thread); err == nil && r.allows(user) {
			s.Title = r.Title
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	if out == nil {
		out = []ThreadSummary{}
	}
	return out, truncated, nil
}
