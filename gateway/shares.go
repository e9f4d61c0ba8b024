package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"unicode"
	"unicode/utf8"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Sharing a thread (PUT and DELETE /v1/threads/{thread}/shares/{user}).
//
// The gateway's record in BucketThreads decides who may read, write to
// and answer a thread through any gateway replica: its owner and the
// users it is shared with; everyone else gets 404. The processor keeps a
// record of its own (the owner's and shared parties' identities) and
// takes grants only from the owner's messages (events.TurnRequested.Share),
// so every message the owner sends carries the thread's current shares.
// Consequences, documented in docs/openapi.yaml:
//   - a share counts only once the processor accepted the owner's claim
//     (verify.go): sharing an unclaimed thread makes a pending claim, and
//     the users a pending claim is shared with get 404 like strangers
//     (and the owner's PUT answers "pending": true) until the processor
//     accepts a message of the owner; a refused claim goes with its
//     shares;
//   - a share made before the owner's first message, or before any later
//     one, lets the shared user answer the questions that message leads
//     to; a question already pending when the thread is shared can be
//     answered only by the owner (a shared user's answer to it is
//     refused 403 forbidden by the processor, and nothing is consumed);
//   - a revoke takes effect at the gateway at once (404 for the user on
//     every route); the processor's record keeps the grant, which only a
//     gateway could use on that user's behalf;
//   - so the bound of events.MaxShares counts every user the thread was
//     ever shared with (ThreadOwner.Granted): the processor would refuse
//     the owner's messages beyond it. Sharing again with a revoked user
//     does not count twice.

// ReasonTooManyShares is the 409 of a share beyond events.MaxShares.
const ReasonTooManyShares = "too_many_shares"

// ThreadAccess is the body of PUT and DELETE
// /v1/threads/{thread}/shares/{user}: who may use the thread now.
type ThreadAccess struct {
	Thread string `json:"thread"`
	// Owner is the subject of the thread's owner.
	Owner string `json:"owner"`
	// Shared are the subjects the thread is shared with, in the order
	// granted; at most events.MaxShares.
	Shared []string `json:"shared"`
	// Pending is true while the owner's claim waits for the processor's
	// verdict (verify.go): the shares allow nothing until it accepts a
	// message of the owner, and go with the claim if it refuses.
	Pending bool `json:"pending,omitempty"`
}

// userParam validates the {user} path value: a token subject of 1 to
// MaxSubject bytes of UTF-8 without control characters. It writes the
// problem and returns false when it is not.
func userParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	u := r.PathValue("user")
	var rule string
	switch {
	case u == "":
		rule = "required"
	case len(u) > MaxSubject:
		rule = fmt.Sprintf("%d bytes; at most %d", len(u), MaxSubject)
	case !utf8.ValidString(u):
		rule = "must be UTF-8"
	default:
		for _, c := range u {
			if unicode.IsControl(c) {
				rule = "must not contain control characters"
				break
			}
		}
	}
	if rule != "" {
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest, Detail: "user: " + rule,
			Errors: []schema.Violation{{Path: "user", Rule: rule}}})
		return "", false
	}
	return u, true
}

func (g *Gateway) putShare(w http.ResponseWriter, r *http.Request, user string) {
	g.changeShare(w, r, user, true)
}

func (g *Gateway) deleteShare(w http.ResponseWriter, r *http.Request, user string) {
	g.changeShare(w, r, user, false)
}

// changeShare grants or revokes the thread to {user}; only the owner may.
func (g *Gateway) changeShare(w http.ResponseWriter, r *http.Request, user string, grant bool) {
	thread, ok := threadParam(w, r)
	if !ok {
		return
	}
	other, ok := userParam(w, r)
	if !ok {
		return
	}
	other = sameIssuer(user, other)
	rec, err := g.owners.share(r.Context(), thread, user, other, grant)
	switch {
	case err == nil:
	case errors.Is(err, errNotThreadOwner):
		writeProblem(w, Problem{Status: http.StatusForbidden, Reason: ReasonForbidden,
			Detail: "only the thread's owner may share it or revoke a share"})
		return
	case errors.Is(err, errSharedToOwner):
		writeProblem(w, Problem{Status: http.StatusForbidden, Reason: ReasonForbidden, Detail: err.Error()})
		return
	case errors.Is(err, errShareOwner):
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest, Detail: "user: " + err.Error(),
			Errors: []schema.Violation{{Path: "user", Rule: "must not be the thread's owner"}}})
		return
	case errors.Is(err, errTooManyShares):
		writeProblem(w, Problem{Status: http.StatusConflict, Reason: ReasonTooManyShares,
			Detail: fmt.Sprintf("the thread was already shared with %d users (revoked ones count: the processor keeps their grants), the most allowed; share with one of them again, or start a new thread", events.MaxShares)})
		return
	default:
		if !g.owned(w, r, err) {
			return
		}
	}
	g.log.InfoContext(r.Context(), "thread share changed", "thread", thread, "owner", user, "user", other, "granted", grant)
	writeJSON(w, http.StatusOK, ThreadAccess{Thread: thread, Owner: rec.Owner, Shared: nonNil(rec.Shared),
		Pending: rec.Verdict != VerdictAccepted})
}
