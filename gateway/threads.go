package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/kvstate"
)

// BucketThreads is the gateway's KV bucket of thread ownership. Keys:
// "t.<thread>" → ThreadOwner (JSON), claimed with kv.Create so one
// claimant is pending on every replica, and confirmed only by the
// processor's verdict (verify.go); "u.<user>.<thread>" → the claim time,
// an index for listing a user's threads, written when the claim is
// confirmed (<user> is the subject in unpadded base64url, so any subject
// makes a valid key).
const BucketThreads = "parley_gateway_threads"

// MaxThreadsListed bounds GET /v1/threads: at most this many of a user's
// threads are returned (the first in key order, then sorted newest claim
// first); the response says "truncated" when there were more.
const MaxThreadsListed = 1000

// ThreadOwner is the value of "t.<thread>" in BucketThreads.
type ThreadOwner struct {
	Owner     string    `json:"owner"`
	CreatedAt time.Time `json:"createdAt"`
	// Verdict is VerdictPending until the gateway saw the processor accept
	// a message of Owner on the thread, then VerdictAccepted. A record
	// without it (written before verdicts were followed) is verified like
	// a pending one.
	Verdict string `json:"verdict,omitempty"`
	// EventID is the ID of the claim's first message (turn.requested):
	// its rejection releases the claim.
	EventID string `json:"eventId,omitempty"`
	// FromSeq is the PARLEY_CHAT sequence the verdict is looked for from
	// (the stream's next sequence when the claim was made).
	FromSeq uint64 `json:"fromSeq,omitempty"`
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
	// verdicts reads the processor's verdicts on claims (verify.go).
	verdicts *verdicts
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

// check returns nil when user owns thread as the processor decided (its
// claim is accepted, verify.go), errNotOwner otherwise.
func (o *ownership) check(ctx context.Context, thread, user string) error {
	return o.verified(ctx, thread, user, 0)
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
