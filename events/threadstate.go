package events

import (
	"strings"
	"time"

	"github.com/parley-dev/parley/schema"
)

// Thread state: a read-only NATS request-reply (NATS micro service
// "parley-processor", endpoint "thread-state", queue group
// "processor-state") in which the processor answers where a thread stands
// from its own record — the source of truth of what is pending — rather
// than from the thread's events, which PARLEY_CHAT's limits may have
// dropped (an old question evicted by a flood of other threads) or which
// may be too many to read. An integrator (the gateway, `parley chat`,
// client.PendingQuestions) asks on parley.state.<principal>.<thread>, its
// own principal's subject (the only one its permissions let it publish
// on); the processor takes the principal from the subject and answers only
// a party of the thread. It never reads the processor's buckets itself.
const (
	// TypeThreadStateRequested is the request event. Data:
	// ThreadStateRequest. Subject attribute: the thread.
	TypeThreadStateRequested Type = "dev.parley.thread.state.requested"
	// TypeThreadStateAnswered is the reply event. Data: ThreadStateReply.
	TypeThreadStateAnswered Type = "dev.parley.thread.state.answered"

	// SubjectThreadStateAll is every thread-state request subject (the
	// processor's endpoint).
	SubjectThreadStateAll = "parley.state.>"
	subjectStatePrefix    = "parley.state."
	threadStatePattern    = "parley.state.{principal}.{thread}"
)

// ThreadStateSubject returns parley.state.<principal>.<thread>: where
// principal asks for thread's state.
func ThreadStateSubject(principal, thread string) string {
	return subjectStatePrefix + principal + "." + thread
}

// ParseThreadStateSubject splits parley.state.<principal>.<thread>; ok is
// false for any other subject, or a principal or thread that is not a
// token.
func ParseThreadStateSubject(subject string) (principal, thread string, ok bool) {
	rest, found := strings.CutPrefix(subject, subjectStatePrefix)
	if !found {
		return "", "", false
	}
	principal, thread, ok = strings.Cut(rest, ".")
	return principal, thread, ok && ValidToken("principal", principal) == nil && ValidToken("thread", thread) == nil
}

// ThreadStateRequest asks for a thread's state.
type ThreadStateRequest struct {
	// OnBehalfOf is the end user the asking principal speaks for; honoured
	// only from a principal trusted to speak for users (the gateway), as
	// on input (Identity). Optional.
	OnBehalfOf string `json:"onBehalfOf,omitempty"`
}

// ThreadStateReply is where a thread stands, from the processor's record.
type ThreadStateReply struct {
	// Thread is the thread asked about.
	Thread string `json:"thread"`
	// Forbidden is true when the asker is not a party of the thread
	// (its owner or one the owner shared it with): nothing else is said.
	Forbidden bool `json:"forbidden,omitempty"`
	// State is idle, running or paused (the processor's thread states);
	// "" when Forbidden.
	State string `json:"state,omitempty"`
	// TurnID is the active turn (running or paused).
	TurnID string `json:"turnId,omitempty"`
	// Pending are the questions of the paused turn still open, as asked
	// (elicitation/create params with _meta["drupal.org/ai.elicitation_id"]);
	// none unless State is paused.
	Pending []schema.ElicitRequestParams `json:"pending,omitempty"`
	// ExpiresAt is when the pending questions stop taking answers.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// Queued is how many messages wait behind the active turn.
	Queued int `json:"queued,omitempty"`
}
