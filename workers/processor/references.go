package processor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// requester asks a NATS request-reply service (bus.Client.Request).
type requester interface {
	Request(ctx context.Context, subject string, e *event.Event) (*event.Event, error)
}

// resolveTimeout bounds the wait for the lookup service to resolve a
// message's context references.
const resolveTimeout = 5 * time.Second

// resolveReferences resolves the context references of m (see
// events.MessageReferences; validateTurn checked their bounds) as who, the
// party that sent it, through the lookup service
// (events.SubjectResolveReferences). All available: m with what was
// resolved at _meta["dev.parley/references"] (summaries cut to
// events.MaxReferenceSummaryBytes). Otherwise the violations that refuse
// the message (events.RejectReferenceUnavailable): one per reference the
// person may not use, with one rule whether the entity is missing or not
// theirs to see, or one naming data.message.content when no service
// answered. A message without references is returned as it is.
func (p *Processor) resolveReferences(ctx context.Context, thread string, who events.Identity, m schema.ChatMessage) (schema.ChatMessage, []schema.Violation) {
	refs, _ := events.MessageReferences("data.message.", m)
	if len(refs) == 0 {
		return m, nil
	}
	unchecked := []schema.Violation{{Path: "data.message.content", Rule: events.ReferenceUncheckedRule}}
	if p.resolver == nil {
		return m, unchecked
	}
	req := events.ResolveReferencesRequest{User: who}
	for _, r := range refs {
		req.References = append(req.References, r.Entity)
	}
	e, err := events.KindResolveReferencesRequested.New(events.SourceProcessor, "", thread, req)
	if err != nil {
		p.log.WarnContext(ctx, "context references not resolved", "subject", thread, "error", err)
		return m, unchecked
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	reply, err := p.resolver.Request(rctx, events.SubjectResolveReferences, e)
	var out events.ResolveReferencesReply
	if err == nil {
		out, err = events.KindResolveReferencesAnswered.Data(reply)
	}
	if err == nil && len(out.Results) != len(refs) {
		err = fmt.Errorf("the lookup service answered %d results for %d references", len(out.Results), len(refs))
	}
	if err != nil {
		p.log.WarnContext(ctx, "context references not resolved", "subject", thread, "error", err)
		return m, unchecked
	}
	var vs []schema.Violation
	resolved := make([]schema.ResolvedReference, 0, len(refs))
	for i, r := range out.Results {
		if !r.Available {
			vs = append(vs, schema.Violation{Path: contentPath(refs[i].Block), Rule: events.ReferenceUnavailableRule})
			continue
		}
		sum := r.Summary
		if len(sum) > events.MaxReferenceSummaryBytes {
			sum = strings.ToValidUTF8(sum[:events.MaxReferenceSummaryBytes-len("…")], "") + "…"
		}
		ent := r.Entity
		if ent.Validate() != nil {
			ent = refs[i].Entity // the resolver named it badly: keep the claim's identity
			ent.Label = ""
		}
		if len(ent.Label) > schema.MaxEntityLabelBytes {
			ent.Label = strings.ToValidUTF8(ent.Label[:schema.MaxEntityLabelBytes], "")
		}
		uri := r.URI
		if schema.ValidateContent(&schema.ResourceLink{URI: uri, Name: "uri"}) != nil {
			uri = events.ReferenceURI(ent)
		}
		resolved = append(resolved, schema.ResolvedReference{Block: refs[i].Block, Entity: ent, URI: uri, Summary: sum})
	}
	if len(vs) > 0 {
		return m, vs
	}
	m.Meta = m.Meta.Clone()
	m.Meta.SetReferences(resolved)
	return m, nil
}

// historyMeta is what the thread's history keeps of a user message's
// _meta: only the references the processor resolved.
func historyMeta(m schema.Meta) schema.Meta {
	if rs := m.References(); len(rs) > 0 {
		return schema.Meta{schema.MetaReferences: rs}
	}
	return nil
}

func contentPath(block int) string { return fmt.Sprintf("data.message.content[%d]", block) }
