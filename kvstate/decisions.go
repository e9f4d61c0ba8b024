package kvstate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// BucketDecisions is the bucket of decision records: the evidence the
// tool-executor needs before it runs a tool that is not read-only. Only
// the agent writes it; the tool-executor reads it.
const BucketDecisions = "parley_decisions"

// DecisionFormat is the format version of CallDecision.
const DecisionFormat = 1

// Answerer is who confirmed a call: the authenticated principal that
// answered, and the end user it spoke for when it is trusted to speak for
// users.
type Answerer struct {
	Principal  string `json:"principal"`
	OnBehalfOf string `json:"onBehalfOf,omitempty"`
}

// CallDecision is the decision record of one dispatch of one tool call,
// stored under DecisionKey(Run, Call, Round) in parley_decisions. The agent
// creates it after the policies decided (allow) or after a person accepted
// the confirmation (confirm), before it publishes the call; the
// tool-executor runs a tool that is not read-only only when the record
// exists and its Tool and ArgumentsSHA256 match the call exactly.
type CallDecision struct {
	// Format is DecisionFormat.
	Format int `json:"format"`
	// Run, Call and Round identify the dispatch (the run ID, parley's call
	// ID, and the input-required round, 0 for the first execution).
	Run   string `json:"run"`
	Call  string `json:"call"`
	Round int    `json:"round"`
	// Tool is the registered tool name the call runs.
	Tool string `json:"tool"`
	// ArgumentsSHA256 is schema.ArgumentsSHA256 of the call's arguments.
	ArgumentsSHA256 string `json:"argumentsSHA256"`
	// Annotations are those of the registered definition the policies
	// decided on (nil: none). The tool-executor refuses the call when they
	// claim read-only or non-destructive and its own definition does not:
	// the decision was made on a definition that was not the executor's.
	Annotations *schema.ToolAnnotations `json:"annotations,omitempty"`
	// Decision is events.DecisionAllow (every policy allowed) or
	// events.DecisionConfirm (a policy asked, and a person accepted).
	Decision string `json:"decision"`
	// Policies is every policy's answer (at most events.MaxPolicyReplies).
	Policies []events.PolicyDecision `json:"policies"`
	// ConfirmedBy is who accepted the confirmation (Decision confirm; nil
	// when the answer named nobody).
	ConfirmedBy *Answerer `json:"confirmedBy,omitempty"`
	// StandingApproval is the standing approval the call ran under (its
	// ID), when ConfirmedBy granted it for the tool in the thread earlier
	// rather than confirming this call. Optional.
	StandingApproval string `json:"standingApproval,omitempty"`
	// At is when the agent wrote the record.
	At time.Time `json:"at"`
}

// Same reports whether d and o decide the same dispatch the same way
// (everything but At).
func (d CallDecision) Same(o CallDecision) bool {
	if d.Format != o.Format || d.Run != o.Run || d.Call != o.Call || d.Round != o.Round || d.Tool != o.Tool ||
		d.ArgumentsSHA256 != o.ArgumentsSHA256 || d.Decision != o.Decision || len(d.Policies) != len(o.Policies) ||
		(d.ConfirmedBy == nil) != (o.ConfirmedBy == nil) || d.StandingApproval != o.StandingApproval {
		return false
	}
	if d.ConfirmedBy != nil && *d.ConfirmedBy != *o.ConfirmedBy {
		return false
	}
	if a, b := d.Annotations, o.Annotations; a.ReadOnly() != b.ReadOnly() || a.Destructive() != b.Destructive() ||
		a.Idempotent() != b.Idempotent() {
		return false
	}
	for i := range d.Policies {
		if d.Policies[i] != o.Policies[i] {
			return false
		}
	}
	return true
}

// DecisionKey is the key of a decision record: "<run>.<call>.<round>"
// (run and call IDs are KV-key safe: UUIDs and parley's derived call IDs).
func DecisionKey(run, call string, round int) string {
	return run + "." + call + "." + strconv.Itoa(round)
}

// Decisions is the parley_decisions bucket.
type Decisions struct {
	b *Bucket[CallDecision]
}

// DecisionTTL is how long a decision record is kept: it is needed only
// until its call ran (the call is published right after it), and a fixed
// value keeps the agent and the tool-executor, which both open the bucket,
// from reconfiguring it back and forth.
const DecisionTTL = 48 * time.Hour

// OpenDecisions creates or updates the decisions bucket (History 1, TTL
// DecisionTTL).
func OpenDecisions(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int) (*Decisions, error) {
	b, err := OpenBucket[CallDecision](ctx, js, BucketDecisions, BucketOptions{Storage: storage, Replicas: replicas, TTL: DecisionTTL})
	if err != nil {
		return nil, err
	}
	return &Decisions{b: b}, nil
}

// ErrDecisionDiffers is returned by Record when the key already holds a
// record that decides the dispatch differently.
var ErrDecisionDiffers = errors.New("kvstate: a different decision is already recorded for this call")

// Record creates d under its key. It is idempotent: when the key already
// holds the same decision (a redelivery recording again) it returns nil;
// when it holds a different one it returns an error wrapping
// ErrDecisionDiffers and leaves the stored record alone.
func (s *Decisions) Record(ctx context.Context, d CallDecision) error {
	if d.Format == 0 {
		d.Format = DecisionFormat
	}
	key := DecisionKey(d.Run, d.Call, d.Round)
	_, err := s.b.Create(ctx, key, d, 0)
	if !errors.Is(err, ErrConflict) {
		return err
	}
	have, _, gerr := s.b.Get(ctx, key)
	if gerr != nil {
		return fmt.Errorf("reading %s/%s after a conflicting create: %w", BucketDecisions, key, gerr)
	}
	if !have.Same(d) {
		return fmt.Errorf("%s/%s: %w", BucketDecisions, key, ErrDecisionDiffers)
	}
	return nil
}

// Get returns the decision record of one dispatch, or an error wrapping
// ErrNotFound, or ErrIncompatible for a record of another format.
func (s *Decisions) Get(ctx context.Context, run, call string, round int) (CallDecision, error) {
	key := DecisionKey(run, call, round)
	d, _, err := s.b.Get(ctx, key)
	if err != nil {
		return d, err
	}
	if d.Format != DecisionFormat {
		return d, fmt.Errorf("%s/%s: format %d, this code reads %d: %w", BucketDecisions, key, d.Format, DecisionFormat, ErrIncompatible)
	}
	return d, nil
}
