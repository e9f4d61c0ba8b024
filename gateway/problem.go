package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// ProblemTypeBase prefixes every problem "type" URI: the last segment is
// the reason code (e.g. ".../invalid_content").
const ProblemTypeBase = "https://parley.dev/problems/"

// Problem is an RFC 9457 problem details object (application/problem+json)
// with parley's extension members.
type Problem struct {
	// Type is ProblemTypeBase + Reason.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Reason is the stable code: an elicitation rejection reason
	// (unknown_or_expired, invalid_content, already_consumed, forbidden,
	// ...) or a gateway one (unauthenticated, not_found, too_large,
	// rate_limited, bad_request, unavailable).
	Reason string `json:"reason"`
	// EventID is the event the gateway published, when it published one.
	EventID string `json:"eventId,omitempty"`
	// Errors lists each field and rule on invalid_content and bad_request.
	Errors []schema.Violation `json:"errors,omitempty"`
}

// Gateway reasons (beside the processor's rejection reasons in events).
const (
	ReasonUnauthenticated = "unauthenticated"
	ReasonNotFound        = "not_found"
	ReasonTooLarge        = "too_large"
	ReasonRateLimited     = "rate_limited"
	ReasonBadRequest      = "bad_request"
	ReasonUnavailable     = "unavailable"
	// ReasonForbidden is the rejection of an answer by someone the thread
	// does not belong to.
	ReasonForbidden = "forbidden"
)

// rejectionStatus maps a processor rejection reason to an HTTP status.
func rejectionStatus(reason string) int {
	switch reason {
	case events.RejectUnknownOrExpired:
		return http.StatusGone
	case events.RejectInvalidContent:
		return http.StatusUnprocessableEntity
	case events.RejectAlreadyConsumed, events.RejectStateIncompatible, events.RejectThreadBusy:
		return http.StatusConflict
	case ReasonForbidden:
		return http.StatusForbidden
	case events.RejectMessageTooLarge:
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusBadRequest
	}
}

func writeProblem(w http.ResponseWriter, p Problem) {
	p.Type = ProblemTypeBase + p.Reason
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
