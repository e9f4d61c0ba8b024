package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Standing approvals (GET and DELETE /v1/threads/{thread}/approvals): the
// tools a person allowed for the thread (events.Approval), which the
// processor keeps. The gateway checks its own record first — any member
// may list, only the owner may revoke — and asks the processor
// (events.ApprovalsSubject) as the owner, as it does for the thread's
// state; the processor checks again.

// The approvals routes (approvals.go).
var (
	RouteListApprovals   = Route{http.MethodGet, "/v1/threads/{thread}/approvals"}
	RouteRevokeApprovals = Route{http.MethodDelete, "/v1/threads/{thread}/approvals"}
)

// ReasonApprovalsUnavailable is the 503 of an approvals request no
// processor answered.
const ReasonApprovalsUnavailable = "approvals_unavailable"

// approvalsWait bounds how long the approvals routes wait for the
// processor.
const approvalsWait = 3 * time.Second

// ThreadApprovals is the body of GET and DELETE
// /v1/threads/{thread}/approvals: the thread's standing approvals (after a
// DELETE, those left) and, after a DELETE, those it revoked.
type ThreadApprovals struct {
	Thread    string            `json:"thread"`
	Approvals []events.Approval `json:"approvals"`
	Revoked   []events.Approval `json:"revoked,omitempty"`
}

func (g *Gateway) getApprovals(w http.ResponseWriter, r *http.Request, user string) {
	g.approvals(w, r, user, "")
}

// deleteApprovals revokes the thread's approvals of ?tool= (every one
// when absent); only the owner may.
func (g *Gateway) deleteApprovals(w http.ResponseWriter, r *http.Request, user string) {
	tool := r.URL.Query().Get("tool")
	if tool == "" {
		tool = "*"
	} else if err := events.ValidToken("tool", tool); err != nil {
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest, Detail: "tool: " + err.Error(),
			Errors: []schema.Violation{{Path: "tool", Rule: err.Error()}}})
		return
	}
	g.approvals(w, r, user, tool)
}

func (g *Gateway) approvals(w http.ResponseWriter, r *http.Request, user, revoke string) {
	thread, ok := threadParam(w, r)
	if !ok {
		return
	}
	rec, err := g.owners.access(r.Context(), thread, user, 0)
	if !g.owned(w, r, err) {
		return
	}
	if revoke != "" && rec.Owner != user {
		writeProblem(w, Problem{Status: http.StatusForbidden, Reason: ReasonForbidden,
			Detail: "only the thread's owner may revoke its standing approvals"})
		return
	}
	reply, err := g.askApprovals(r.Context(), thread, rec.Owner, revoke)
	if err != nil {
		g.log.WarnContext(r.Context(), "approvals: the processor did not answer", "subject", thread, "error", err)
		writeProblem(w, Problem{Status: http.StatusServiceUnavailable, Reason: ReasonApprovalsUnavailable,
			Detail: "no processor answered about the thread's standing approvals; retry later"})
		return
	}
	if reply.Forbidden {
		// The processor's record of the thread has another owner (the
		// gateway's record is behind): as for a stranger.
		g.notFound(w)
		return
	}
	if revoke != "" {
		g.log.InfoContext(r.Context(), "standing approvals revoked", "thread", thread, "user", user, "tool", revoke,
			"revoked", len(reply.Revoked))
	}
	writeJSON(w, http.StatusOK, ThreadApprovals{Thread: thread, Approvals: reply.Approvals, Revoked: reply.Revoked})
}

// askApprovals asks the processor for thread's approvals as owner
// (revoking revoke's first, when set).
func (g *Gateway) askApprovals(ctx context.Context, thread, owner, revoke string) (*events.ApprovalsReply, error) {
	e, err := events.New(SourceGateway, events.TypeApprovalsRequested, thread,
		events.ApprovalsRequest{OnBehalfOf: owner, Revoke: revoke})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, approvalsWait)
	defer cancel()
	reply, err := g.bus.Request(ctx, events.ApprovalsSubject(g.opts.Principal, thread), e)
	if err != nil {
		return nil, err
	}
	out, err := events.Data[events.ApprovalsReply](reply)
	if err == nil && events.TypeOf(reply) != events.TypeApprovalsAnswered {
		err = errors.New("not an approvals answer")
	}
	if err != nil {
		return nil, fmt.Errorf("the processor answered %s: %w", reply.Type(), err)
	}
	if out.Approvals == nil {
		out.Approvals = []events.Approval{}
	}
	return &out, nil
}
