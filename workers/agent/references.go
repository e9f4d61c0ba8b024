package agent

import (
	"fmt"
	"strings"

	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// MaxReferenceContextBytes bounds the summaries of one user message's
// context references that reach the model (model.Message.References):
// each reference keeps its entity, URI and label, and its summary is cut
// (at a character boundary, ending with "…") to its share of what is left
// of the budget. A message's references are at most
// events.MaxReferences, each summary at most
// events.MaxReferenceSummaryBytes, so the budget binds only when a
// resolver's summaries are long.
const MaxReferenceContextBytes = 6 << 10

// withReferences makes the model message of a user message that carries
// resolved context references (_meta["dev.parley/references"], recorded
// by the processor): the references, their summaries bounded by
// MaxReferenceContextBytes, and the message's other blocks. The reference
// blocks themselves — the sender's claim — are left out: the model reads
// what parley resolved instead.
func withReferences(m schema.ChatMessage, out model.Message) model.Message {
	refs := m.Meta.References()
	if len(refs) == 0 {
		return out
	}
	claimed := map[int]bool{}
	bounded := make([]schema.ResolvedReference, len(refs))
	left := MaxReferenceContextBytes
	for i, r := range refs {
		claimed[r.Block] = true
		share := left / (len(refs) - i)
		if len(r.Summary) > share {
			r.Summary = strings.ToValidUTF8(r.Summary[:max(0, share-len("…"))], "") + "…"
		}
		left -= len(r.Summary)
		bounded[i] = r
	}
	var content schema.ContentList
	for i, c := range m.Content {
		if !claimed[i] {
			content = append(content, c)
		}
	}
	out.Content = content
	out.References = bounded
	return out
}

// referenceLinks are the resource_link blocks the final message carries
// back to the context references of the turn's user message (the last
// user message of msgs): one per reference, its entity at
// _meta["drupal.org/ai.entity"], for the user to follow.
func referenceLinks(msgs []model.Message) schema.ContentList {
	var refs []schema.ResolvedReference
	for _, m := range msgs {
		if m.Role == model.RoleUser {
			refs = m.References
		}
	}
	var out schema.ContentList
	for _, r := range refs {
		name := r.Entity.Label
		if name == "" {
			name = fmt.Sprintf("%s %s", r.Entity.EntityType, r.Entity.ID)
		}
		out = append(out, &schema.ResourceLink{URI: r.URI, Name: name,
			Description: "Referenced in your message",
			Meta:        schema.Meta{schema.MetaEntity: r.Entity}})
	}
	return out
}
