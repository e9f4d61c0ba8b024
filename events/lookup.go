package events

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/parley-dev/parley/schema"
)

// Entity lookup: a read-only NATS request-reply (NATS micro service
// "parley-lookup", queue group "lookup") that answers which site entities
// match a few typed characters. The gateway's GET /v1/lookup/entities asks
// it to back the web chat's entity_autocomplete widget
// (_meta["drupal.org/ai.widgets"]); the tool-executor's demo site answers
// it, and any site integration may answer it instead. It never changes
// anything and is not a tool call: no policy, no ledger.
const (
	// SubjectLookupEntities is the request subject.
	SubjectLookupEntities = "parley.lookup.entities"
	// TypeLookupEntitiesRequested is the request event. Data:
	// LookupEntitiesRequest. Subject attribute: none.
	TypeLookupEntitiesRequested Type = "dev.parley.lookup.entities.requested"
	// TypeLookupEntitiesAnswered is the reply event. Data:
	// LookupEntitiesReply.
	TypeLookupEntitiesAnswered Type = "dev.parley.lookup.entities.answered"
)

// Bounds of a lookup.
const (
	// MaxLookupQueryBytes bounds LookupEntitiesRequest.Query.
	MaxLookupQueryBytes = 200
	// DefaultLookupLimit is the limit when a request names none.
	DefaultLookupLimit = 10
	// MaxLookupLimit bounds LookupEntitiesRequest.Limit; a responder
	// returns at most this many entities and sets Truncated when more
	// matched.
	MaxLookupLimit = 50
	// MaxLookupBundles bounds LookupEntitiesRequest.Bundles.
	MaxLookupBundles = 20
)

// LookupEntitiesRequest asks for the entities whose label (or ID)
// contains Query, case-insensitively.
type LookupEntitiesRequest struct {
	// Query is the typed text: 1 to MaxLookupQueryBytes bytes of UTF-8,
	// not blank.
	Query string `json:"query"`
	// TargetType narrows to one entity type (a Drupal machine name such as
	// "node"); optional. The widget's "target_type" option.
	TargetType string `json:"targetType,omitempty"`
	// Bundles narrows to these bundles ("article", "page"); optional, at
	// most MaxLookupBundles. The widget's "bundles" option.
	Bundles []string `json:"bundles,omitempty"`
	// Limit is the most entities to return, 1..MaxLookupLimit; 0 means
	// DefaultLookupLimit.
	Limit int `json:"limit,omitempty"`
	// User is who asks (the gateway's authenticated user), so a responder
	// can filter what that user may see; optional.
	User string `json:"user,omitempty"`
}

// Validate checks the request. The error is a *schema.ValidationError
// naming each field and its rule ("query: required").
func (r LookupEntitiesRequest) Validate() error {
	var vs []schema.Violation
	add := func(path, format string, args ...any) {
		vs = append(vs, schema.Violation{Path: path, Rule: fmt.Sprintf(format, args...)})
	}
	switch {
	case strings.TrimSpace(r.Query) == "":
		add("query", "required")
	case len(r.Query) > MaxLookupQueryBytes:
		add("query", "must be at most %d bytes, got %d", MaxLookupQueryBytes, len(r.Query))
	case !utf8.ValidString(r.Query):
		add("query", "must be UTF-8")
	}
	const machine = "must be a machine name (lower-case letters, digits, underscores)"
	if r.TargetType != "" && !isMachineName(r.TargetType) {
		add("targetType", machine)
	}
	if len(r.Bundles) > MaxLookupBundles {
		add("bundles", "must have at most %d items, got %d", MaxLookupBundles, len(r.Bundles))
	}
	for i, b := range r.Bundles {
		if !isMachineName(b) {
			add(fmt.Sprintf("bundles[%d]", i), machine)
		}
	}
	if r.Limit < 0 || r.Limit > MaxLookupLimit {
		add("limit", "must be 1 to %d, got %d", MaxLookupLimit, r.Limit)
	}
	if len(vs) > 0 {
		return &schema.ValidationError{Violations: vs}
	}
	return nil
}

// LookupEntitiesReply is the answer: the matching entities, best first.
type LookupEntitiesReply struct {
	// Entities are at most the request's limit.
	Entities []LookupEntity `json:"entities"`
	// Truncated is true when more entities matched than were returned.
	Truncated bool `json:"truncated,omitempty"`
}

// LookupEntity is one match: the value to put in the form (ID) and what to
// show (Label), with the entity's type, bundle, status and link as in
// _meta["drupal.org/ai.entity"] and a resource_link's uri.
type LookupEntity struct {
	ID         string `json:"id"`
	Label      string `json:"label"`
	EntityType string `json:"entity_type"`
	Bundle     string `json:"bundle,omitempty"`
	Status     string `json:"status,omitempty"`
	URI        string `json:"uri,omitempty"`
}

func isMachineName(s string) bool {
	if s == "" || len(s) > 128 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z') && !('0' <= c && c <= '9') && c != '_' {
			return false
		}
	}
	return true
}
