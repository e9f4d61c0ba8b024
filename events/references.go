package events

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/parley-dev/parley/schema"
)

// Context references (docs/events.md "Context references"): a user message
// may carry, beside its text, content blocks that point at site entities
// (a resource_link, or an embedded resource, with
// _meta["drupal.org/ai.entity"]). Text stays authoritative; the blocks are
// the sender's claim. Before the turn starts the processor resolves them
// by request-reply on SubjectResolveReferences, as the party that sent the
// message; the entity's owner (the tool-executor's site, or any site
// integration) answers which of them that person may see and what they
// hold. A reference that is missing or not the person's to see refuses the
// message (RejectReferenceUnavailable) with one rule for both
// (ReferenceUnavailableRule), so the refusal tells nothing about the
// entity.
const (
	// SubjectResolveReferences is the request subject. Only the processor
	// may publish it (it names the person; docs/SECURITY.md), and the
	// lookup service (NATS micro "parley-lookup", endpoint "resolve",
	// queue group "lookup") answers.
	SubjectResolveReferences = "parley.lookup.resolve"
	// TypeResolveReferencesRequested is the request event. Data:
	// ResolveReferencesRequest. Subject attribute: the thread.
	TypeResolveReferencesRequested Type = "dev.parley.lookup.resolve.requested"
	// TypeResolveReferencesAnswered is the reply event. Data:
	// ResolveReferencesReply.
	TypeResolveReferencesAnswered Type = "dev.parley.lookup.resolve.answered"
)

// Bounds of a message's context references. A message over them is
// refused before anything is resolved: too many is invalid_event naming
// data.message.content, a block too large message_too_large naming the
// block.
const (
	// MaxReferences bounds the reference blocks of one message.
	MaxReferences = 8
	// MaxReferenceBlockBytes bounds one reference block as JSON.
	MaxReferenceBlockBytes = 4 << 10
	// MaxReferenceSummaryBytes bounds the summary a resolver returns for
	// one reference; the processor cuts a longer one (at a character
	// boundary, ending with "…").
	MaxReferenceSummaryBytes = 1 << 10
)

// RejectReferenceUnavailable refuses a turn.requested with a context
// reference that the lookup service did not resolve for the sender: the
// entity is missing or the sender may not see it (one rule for both,
// ReferenceUnavailableRule), or no lookup service answered
// (ReferenceUncheckedRule). Nothing is queued and no model sees the message.
const RejectReferenceUnavailable = "reference_unavailable"

// ReferenceUnavailableRule is the rule of a refused reference, the same
// whether the entity does not exist or the sender may not see it.
const ReferenceUnavailableRule = "the referenced entity is not available to you (it does not exist, or you may not see it)"

// ReferenceUncheckedRule is the rule when the references could not be
// checked (no lookup service answered in time); sending again may work.
const ReferenceUncheckedRule = "the context references could not be checked (no entity lookup service answered); send the message again later"

// ResolveReferencesRequest asks the entity's owner to resolve references
// for one person.
type ResolveReferencesRequest struct {
	// User is the party that sent the message, as the processor
	// authenticated it: the end user (OnBehalfOf) when a trusted principal
	// spoke for one, else the principal itself.
	User Identity `json:"user"`
	// References are the claimed entities, 1..MaxReferences, in block
	// order.
	References []schema.Entity `json:"references"`
}

// Validate checks the request; the error is a *schema.ValidationError.
func (r ResolveReferencesRequest) Validate() error {
	var vs []schema.Violation
	if r.User.Principal == "" {
		vs = append(vs, schema.Violation{Path: "user.principal", Rule: "required"})
	}
	if n := len(r.References); n == 0 || n > MaxReferences {
		vs = append(vs, schema.Violation{Path: "references", Rule: fmt.Sprintf("must have 1 to %d items, got %d", MaxReferences, n)})
	}
	for i, e := range r.References {
		for _, v := range schema.Violations(e.Validate()) {
			vs = append(vs, schema.Violation{Path: fmt.Sprintf("references[%d].%s", i, v.Path), Rule: v.Rule})
		}
	}
	if len(vs) > 0 {
		return &schema.ValidationError{Violations: vs}
	}
	return nil
}

// Person is the name a resolver checks visibility against: the end user
// when there is one, else the principal.
func (r ResolveReferencesRequest) Person() string {
	if r.User.OnBehalfOf != "" {
		return r.User.OnBehalfOf
	}
	return r.User.Principal
}

// ResolveReferencesReply answers a ResolveReferencesRequest: one result per
// reference, in order.
type ResolveReferencesReply struct {
	Results []ReferenceResult `json:"results"`
}

// ReferenceResult is one resolved reference. Available false means the
// person may not use it (missing, or not theirs to see); the other fields
// are then empty, so a reply tells nothing about an entity the person may
// not see.
type ReferenceResult struct {
	Available bool `json:"available"`
	// Entity names the entity as its owner does (Label: its title).
	Entity schema.Entity `json:"entity,omitzero"`
	// URI is the entity's canonical link.
	URI string `json:"uri,omitempty"`
	// Summary is a short plain-text description of the entity for the
	// model, at most MaxReferenceSummaryBytes (longer is cut).
	Summary string `json:"summary,omitempty"`
}

// Reference is one reference block of a message: its index in the content
// and the entity it claims.
type Reference struct {
	Block  int
	Entity schema.Entity
}

// MessageReferences returns the reference blocks of content (see
// schema.ReferenceOf) and the violations of the bounds: more than
// MaxReferences (path prefix+"content", invalid), a block over
// MaxReferenceBlockBytes (path prefix+"content[i]", a rule containing
// "over the limit"), and _meta["dev.parley/references"] on the message
// (reserved for parley). prefix is "data.message." on the bus, "" on the
// gateway's body.
func MessageReferences(prefix string, m schema.ChatMessage) ([]Reference, []schema.Violation) {
	var refs []Reference
	var vs []schema.Violation
	for i, c := range m.Content {
		e, ok := schema.ReferenceOf(c)
		if !ok {
			continue
		}
		refs = append(refs, Reference{Block: i, Entity: e})
		if b, err := json.Marshal(c); err == nil && len(b) > MaxReferenceBlockBytes {
			vs = append(vs, schema.Violation{Path: fmt.Sprintf("%scontent[%d]", prefix, i),
				Rule: fmt.Sprintf("%d bytes is over the limit of %d for a context reference block", len(b), MaxReferenceBlockBytes)})
		}
	}
	if len(refs) > MaxReferences {
		vs = append(vs, schema.Violation{Path: prefix + "content",
			Rule: fmt.Sprintf("must have at most %d context references (blocks with _meta[%q]), got %d", MaxReferences, schema.MetaEntity, len(refs))})
	}
	if _, ok := m.Meta[schema.MetaReferences]; ok {
		vs = append(vs, schema.Violation{Path: fmt.Sprintf("%s_meta[%q]", prefix, schema.MetaReferences),
			Rule: "reserved for parley: the processor records there what it resolved"})
	}
	return refs, vs
}

// ParseReference reads a reference written as "<entity_type>:<id>"
// ("page:page-1"), as `parley send --ref` and `parley chat`'s /ref take
// it. The error says what is wrong.
func ParseReference(s string) (schema.Entity, error) {
	typ, id, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok || typ == "" || id == "" {
		return schema.Entity{}, fmt.Errorf("%q is not <entity_type>:<id> (e.g. page:page-1)", s)
	}
	e := schema.Entity{EntityType: typ, ID: id}
	if err := e.Validate(); err != nil {
		return schema.Entity{}, fmt.Errorf("%q: %w", s, err)
	}
	return e, nil
}

// ReferenceURI is the URI a client gives a reference whose link it does
// not know: entity:<entity_type>/<id> (the form Drupal's link fields use).
func ReferenceURI(e schema.Entity) string {
	return "entity:" + e.EntityType + "/" + url.PathEscape(e.ID)
}

// ReferenceLink is the resource_link block of a context reference to e:
// uri ReferenceURI(e) (or uri when not empty), name the label (or
// "<entity_type>:<id>"), _meta["drupal.org/ai.entity"] = e.
func ReferenceLink(e schema.Entity, uri string) *schema.ResourceLink {
	if uri == "" {
		uri = ReferenceURI(e)
	}
	name := e.Label
	if name == "" {
		name = e.EntityType + ":" + e.ID
	}
	return &schema.ResourceLink{URI: uri, Name: name, Meta: schema.Meta{schema.MetaEntity: e}}
}
