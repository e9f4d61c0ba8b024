package events

import (
	"strings"
	"time"
)

// Standing approvals: a person who confirms a tool call may allow later
// calls of the same tool, by the same agent, in the same thread, to run
// without asking again (like an editor's "allow for this session"). The
// processor owns them (bucket parley_approvals, key
// <thread>.<agent>.<tool>, per-key TTL): it authenticates the answer that
// grants one, checks the thread's parties for a list or a revoke, and
// answers the agent's question at call time. Rules (docs/POLICY.md):
// only a policy's confirm is ever covered, never a veto; never when a
// policy marked its decision AskEveryTime; never beyond the thread; never
// longer than the pause TTL for a destructive tool.
const (
	// MetaStanding is the _meta key of a standing approval. On a tool
	// confirmation's elicitation.requested it is the offer
	// (StandingOffer): present only when the call may be covered. On the
	// accept answer (elicitation.responded) it is the person's choice
	// (StandingChoice).
	MetaStanding = "dev.parley/standing"
	// StandingScopeThread is the one scope: the thread the question was
	// asked in.
	StandingScopeThread = "thread"
	// MaxApprovalsPerThread bounds the standing approvals one thread
	// holds (one per agent and tool): an answer that would grant one more
	// is rejected invalid_content naming _meta.
	MaxApprovalsPerThread = 32
)

// StandingOffer is _meta["dev.parley/standing"] on a tool confirmation:
// which standing approvals the person may grant with their accept.
type StandingOffer struct {
	// Scopes are the scopes offered: ["thread"].
	Scopes []string `json:"scopes"`
	// TTLSeconds are the bounded lifetimes offered besides the default
	// (absent: the default only). Units: seconds.
	TTLSeconds []int `json:"ttlSeconds,omitempty"`
	// MaxSeconds is how long an approval granted without ttlSeconds lasts
	// at most (the pause TTL for a destructive tool, the thread TTL
	// otherwise). Units: seconds.
	MaxSeconds int `json:"maxSeconds"`
}

// StandingChoice is _meta["dev.parley/standing"] on an accept answer: the
// standing approval the person grants.
type StandingChoice struct {
	// Scope must be StandingScopeThread.
	Scope string `json:"scope"`
	// TTLSeconds, when set, must be one of the offer's TTLSeconds.
	// Optional. Units: seconds.
	TTLSeconds int `json:"ttlSeconds,omitempty"`
}

// Approval is one standing approval: calls of Tool by Agent in Thread run
// without a question until ExpiresAt, where a policy asks to confirm them.
type Approval struct {
	// ID identifies the grant (derived from the elicitation that granted
	// it).
	ID     string `json:"id"`
	Thread string `json:"thread"`
	Agent  string `json:"agent"`
	Tool   string `json:"tool"`
	Scope  string `json:"scope"`
	// GrantedBy is who granted it, as authenticated: the answerer of the
	// confirmation (answeredBy).
	GrantedBy Identity  `json:"grantedBy"`
	GrantedAt time.Time `json:"grantedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	// ElicitationID is the confirmation whose accept granted it.
	ElicitationID string `json:"elicitationId"`
	// Destructive says the tool is not known to be harmless (MCP
	// destructiveHint, default true): its approval lasts at most the
	// pause TTL.
	Destructive bool `json:"destructive,omitempty"`
	// Uses counts the calls run under it.
	Uses int `json:"uses,omitempty"`
}

// ApprovalGranted is the data of dev.parley.approval.granted.
type ApprovalGranted struct {
	Approval Approval `json:"approval"`
}

// ApprovalUsed is the data of dev.parley.approval.used: one call ran
// without a question under Approval.
type ApprovalUsed struct {
	Approval Approval `json:"approval"`
	RunID    string   `json:"runId"`
	CallID   string   `json:"callId"`
}

// ApprovalRevoked is the data of dev.parley.approval.revoked.
type ApprovalRevoked struct {
	Approval Approval `json:"approval"`
	// RevokedBy is who revoked it, as authenticated.
	RevokedBy Identity `json:"revokedBy"`
}

// StandingUse is how a call ran under a standing approval, on its
// DecisionRecord.
type StandingUse struct {
	ApprovalID string    `json:"approvalId"`
	GrantedBy  Identity  `json:"grantedBy"`
	GrantedAt  time.Time `json:"grantedAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
}

// Approvals: integrators list and revoke a thread's standing approvals by
// request-reply with the processor (NATS micro service
// "parley-processor", endpoint "approvals"), on
// parley.approvals.<principal>.<thread> — their own principal's subject,
// as for the thread state. The agent asks at call time on
// parley.approval.use.<agent>.<thread>.<tool>.
const (
	// TypeApprovalsRequested lists or revokes a thread's standing
	// approvals. Data: ApprovalsRequest.
	TypeApprovalsRequested Type = "dev.parley.approvals.requested"
	// TypeApprovalsAnswered is its reply. Data: ApprovalsReply.
	TypeApprovalsAnswered Type = "dev.parley.approvals.answered"
	// TypeApprovalUseRequested is the agent's question at call time.
	// Data: ApprovalUseRequest.
	TypeApprovalUseRequested Type = "dev.parley.approval.use.requested"
	// TypeApprovalUseAnswered is its reply. Data: ApprovalUseReply.
	TypeApprovalUseAnswered Type = "dev.parley.approval.use.answered"
	// TypeApprovalGranted: a person granted a standing approval.
	TypeApprovalGranted Type = "dev.parley.approval.granted"
	// TypeApprovalUsed: a call ran under a standing approval.
	TypeApprovalUsed Type = "dev.parley.approval.used"
	// TypeApprovalRevoked: a party revoked a standing approval.
	TypeApprovalRevoked Type = "dev.parley.approval.revoked"

	// ChatApprovalGranted, ChatApprovalUsed and ChatApprovalRevoked are
	// the chat subject suffixes of the approval events.
	ChatApprovalGranted = "approval.granted"
	ChatApprovalUsed    = "approval.used"
	ChatApprovalRevoked = "approval.revoked"

	// SubjectApprovalsAll is every approvals request subject.
	SubjectApprovalsAll = "parley.approvals.>"
	// SubjectApprovalUseAll is every approval-use request subject.
	SubjectApprovalUseAll    = "parley.approval.use.>"
	subjectApprovalsPrefix   = "parley.approvals."
	subjectApprovalUsePrefix = "parley.approval.use."
	approvalsPattern         = "parley.approvals.{principal}.{thread}"
	approvalUsePattern       = "parley.approval.use.{agent}.{thread}.{tool}"
)

// ApprovalsSubject returns parley.approvals.<principal>.<thread>.
func ApprovalsSubject(principal, thread string) string {
	return subjectApprovalsPrefix + principal + "." + thread
}

// ParseApprovalsSubject splits parley.approvals.<principal>.<thread>; ok
// is false for any other subject or tokens.
func ParseApprovalsSubject(subject string) (principal, thread string, ok bool) {
	rest, found := strings.CutPrefix(subject, subjectApprovalsPrefix)
	if !found {
		return "", "", false
	}
	principal, thread, ok = strings.Cut(rest, ".")
	return principal, thread, ok && ValidToken("principal", principal) == nil && ValidToken("thread", thread) == nil
}

// ApprovalUseSubject returns parley.approval.use.<agent>.<thread>.<tool>.
func ApprovalUseSubject(agent, thread, tool string) string {
	return subjectApprovalUsePrefix + agent + "." + thread + "." + tool
}

// ParseApprovalUseSubject splits parley.approval.use.<agent>.<thread>.<tool>.
func ParseApprovalUseSubject(subject string) (agent, thread, tool string, ok bool) {
	rest, found := strings.CutPrefix(subject, subjectApprovalUsePrefix)
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return "", "", "", false
	}
	for i, n := range []string{"agent", "thread", "tool"} {
		if ValidToken(n, parts[i]) != nil {
			return "", "", "", false
		}
	}
	return parts[0], parts[1], parts[2], true
}

// ApprovalsRequest lists a thread's standing approvals, or revokes some.
type ApprovalsRequest struct {
	// OnBehalfOf is the end user a trusted principal (the gateway)
	// speaks for. Optional.
	OnBehalfOf string `json:"onBehalfOf,omitempty"`
	// Revoke, when set, revokes the approvals of this tool ("*": every
	// approval of the thread); only the thread's owner may. Optional.
	Revoke string `json:"revoke,omitempty"`
}

// ApprovalsReply is a thread's standing approvals (after a revoke, those
// left) and those revoked.
type ApprovalsReply struct {
	Thread string `json:"thread"`
	// Forbidden: the asker is not a party of the thread (for a revoke:
	// not its owner); nothing else is said.
	Forbidden bool       `json:"forbidden,omitempty"`
	Approvals []Approval `json:"approvals"`
	Revoked   []Approval `json:"revoked,omitempty"`
}

// ApprovalUseRequest is the agent's question: may this call run under a
// standing approval? Asked only for a policy's confirm that no policy
// marked AskEveryTime.
type ApprovalUseRequest struct {
	RunID  string `json:"runId"`
	CallID string `json:"callId"`
	Round  int    `json:"round"`
}

// ApprovalUseReply answers an ApprovalUseRequest: Approval is set when the
// call may run (the use was recorded before the answer, so a revoke that
// comes later does not undo it, and one that came first wins).
type ApprovalUseReply struct {
	Approval *Approval `json:"approval,omitempty"`
}

// AsksEveryTime reports whether any policy that asked to confirm the call
// marked its answer "ask every time": no standing approval covers it.
func (d *Decision) AsksEveryTime() bool {
	if d == nil {
		return true
	}
	for _, p := range d.Policies {
		if p.AskEveryTime {
			return true
		}
	}
	return false
}
