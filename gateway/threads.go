package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
)

// BucketThreads is the gateway's KV bucket of thread ownership. Keys:
// "t.<thread>" → ThreadOwner (JSON), claimed with kv.Create so the first
// claimant wins on every replica, and changed (shares) only with
// compare-and-set on its revision; "u.<user>.<thread>" → the claim (or
// share) time, an index for listing a user's threads, the owner's and
// those shared with them (<user> is the subject in unpadded base64url, so
// any subject makes a valid key).
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
	// to it and answer its questions. At most events.MaxShares.
	Shared []string `json:"shared,omitempty"`
	// Granted are the subjects of every user the thread was ever shared
	// with, revoked ones included: the processor keeps a grant once an
	// owner's message carried it, and refuses a message that would take
	// its record over events.MaxShares, so that bound applies here. At
	// most events.MaxShares.
	Granted []string `json:"granted,omitempty"`
}

// member reports whether user is the owner or one the thread is shared
// with.
func (t ThreadOwner) member(user string) bool {
	return t.Owner == user || slices.Contains(t.Shared, user)
}

// ThreadSummary is one entry of GET /v1/threads.
type ThreadSummary struct {
	Thread    string    `json:"thread"`
	CreatedAt time.Time `json:"createdAt"`
}

// errNotOwner means the thread exists and belongs to someone else, or (for
// lookups) does not exist: callers answer 404 either way.
var errNotOwner = errors.New("thread not found")

type ownership struct {
	kv jetstream.KeyValue
}

// openOwnership creates the bucket, or opens it when another replica did
// (kvstate.OpenBucket: create before update, retried under ctx's start-up
// policy, so gateways starting at once on a fresh cluster all come up).
func openOwnership(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int) (*ownership, error) {
	b, err := kvstate.OpenBucket[json.RawMessage](ctx, js, BucketThreads, kvstate.BucketOptions{Storage: storage, Replicas: replicas})
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", BucketThreads, err)
	}
	return &ownership{kv: b.KV()}, nil
}

func userKey(user string) string { return base64.RawURLEncoding.EncodeToString([]byte(user)) }

// owner returns the record of thread and its revision; errNotOwner when
// unclaimed.
func (o *ownership) owner(ctx context.Context, thread string) (ThreadOwner, uint64, error) {
	e, err := o.kv.Get(ctx, "t."+thread)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ThreadOwner{}, 0, errNotOwner
	}
	if err != nil {
		return ThreadOwner{}, 0, fmt.Errorf("reading owner of %s: %w", thread, err)
	}
	var t ThreadOwner
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return ThreadOwner{}, 0, fmt.Errorf("decoding owner of %s: %w", thread, err)
	}
	return t, e.Revision(), nil
}

// check returns nil when user owns thread or it is shared with them,
// errNotOwner otherwise.
func (o *ownership) check(ctx context.Context, thread, user string) error {
	_, err := o.access(ctx, thread, user)
	return err
}

// access returns thread's record when user owns it or it is shared with
// them, errNotOwner otherwise.
func (o *ownership) access(ctx context.Context, thread, user string) (ThreadOwner, error) {
	t, _, err := o.owner(ctx, thread)
	if err != nil {
		return ThreadOwner{}, err
	}
	if !t.member(user) {
		return ThreadOwner{}, errNotOwner
	}
	return t, nil
}

// claim makes user the owner of thread if nobody is, and returns
// errNotOwner if someone else already is and it is not shared with user.
// It returns the thread's record.
func (o *ownership) claim(ctx context.Context, thread, user string) (ThreadOwner, error) {
	now := time.Now().UTC()
	t := ThreadOwner{Owner: user, CreatedAt: now}
	val, _ := json.Marshal(t)
	_, err := o.kv.Create(ctx, "t."+thread, val)
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		if t, err = o.access(ctx, thread, user); err != nil {
			return ThreadOwner{}, err
		}
	case err != nil:
		return ThreadOwner{}, fmt.Errorf("claiming %s: %w", thread, err)
	}
	// The index is rewritten on every claim, so a crash between the two
	// writes heals on the user's next message.
	if err := o.index(ctx, thread, user, now); err != nil {
		return ThreadOwner{}, err
	}
	return t, nil
}

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
	errTooManyShares  = fmt.Errorf("a thread is shared with at most %d users, revoked ones included", events.MaxShares)
)

// maxShareAttempts bounds share's compare-and-set retries when requests
// on several replicas change the same record at once; retry n waits n
// times a random 0.25-2.5 ms (at most about 1.3 s in all).
const maxShareAttempts = 32

// share grants (grant) or revokes thread to other on behalf of owner,
// claiming the thread for owner first when nobody has, and returns the
// record as written. Granting twice or revoking a user without a grant
// changes nothing. Errors: errNotOwner (owner may not see the thread),
// errNotThreadOwner (owner is only shared it), errShareOwner, and
// errTooManyShares (a grant beyond events.MaxShares).
func (o *ownership) share(ctx context.Context, thread, owner, other string, grant bool) (ThreadOwner, error) {
	if grant {
		if _, err := o.claim(ctx, thread, owner); err != nil {
			return ThreadOwner{}, err
		}
	}
	for attempt := range maxShareAttempts {
		if attempt > 0 {
			select {
			case <-time.After(time.Duration(attempt) * time.Duration(1+rand.IntN(10)) * time.Millisecond / 4):
			case <-ctx.Done():
				return ThreadOwner{}, ctx.Err()
			}
		}
		t, rev, err := o.owner(ctx, thread)
		if err != nil {
			return ThreadOwner{}, err
		}
		switch {
		case !t.member(owner):
			return ThreadOwner{}, errNotOwner
		case t.Owner != owner:
			return ThreadOwner{}, errNotThreadOwner
		case other == owner:
			return ThreadOwner{}, errShareOwner
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
			return ThreadOwner{}, errTooManyShares
		case grant && !has:
			t.Shared = append(t.Shared, other)
			if !known {
				t.Granted = append(t.Granted, other)
			}
		case !grant && has:
			t.Shared = slices.DeleteFunc(t.Shared, func(s string) bool { return s == other })
		}
		if grant != has {
			val, _ := json.Marshal(t)
			_, err = o.kv.Update(ctx, "t."+thread, val, rev)
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
				continue // another replica changed it: read again
			}
			if err != nil {
				return ThreadOwner{}, fmt.Errorf("sharing %s: %w", thread, err)
			}
		}
		// The record decides access; the index only lists. It is written
		// after the record (and again on a repeated PUT or DELETE), so a
		// crash between the two heals on the next call.
		if grant {
			err = o.index(ctx, thread, other, time.Now().UTC())
		} else if err = o.kv.Delete(ctx, "u."+userKey(other)+"."+thread); err != nil {
			err = fmt.Errorf("unindexing %s: %w", thread, err)
		}
		return t, err
	}
	return ThreadOwner{}, fmt.Errorf("sharing %s: the record kept changing (%d attempts)", thread, maxShareAttempts)
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
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	if out == nil {
		out = []ThreadSummary{}
	}
	return out, truncated, nil
}
