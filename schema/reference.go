package schema

// Context references: a person points a message at a site entity (an
// "@"-mention) with a content block that carries _meta["drupal.org/ai.entity"]
// — a resource_link, or an embedded resource — beside the message's text.
// The block is the sender's claim. parley's processor resolves it through
// the entity's owner (the lookup service) as the person who sent the
// message before a model sees it, and records what it resolved on the
// thread's copy of the message under MetaReferences; the agent gives the
// model those summaries, never the claim.

// MetaReferences is the _meta key, on the thread's copy of a user message,
// of the context references the processor resolved for the message's
// sender: a JSON array of ResolvedReference, one per reference block in
// block order. Reserved for parley (IsReservedMetaKey): a message that
// carries it is refused.
const MetaReferences = "dev.parley/references"

// ResolvedReference is one context reference as resolved for the person
// who sent it: the entity as its owner describes it (Entity.Label its
// title), its canonical URI and a short plain-text Summary of what it
// holds (at most a few KiB; the resolver bounds it).
type ResolvedReference struct {
	// Block is the index of the reference block in the message's content.
	Block int `json:"block"`
	// Entity identifies the entity, as the resolver named it.
	Entity Entity `json:"entity"`
	// URI is the entity's canonical link (a resource_link's uri).
	URI string `json:"uri"`
	// Summary is what the model reads of the entity.
	Summary string `json:"summary"`
}

// ReferenceOf returns the entity a context reference block claims: the
// _meta["drupal.org/ai.entity"] of a resource_link or of an embedded
// resource block (the block's own _meta, not its resource's). ok is false
// for any other block, and for one whose entity cannot be decoded (which
// ChatMessage.Validate reports).
func ReferenceOf(c Content) (e Entity, ok bool) {
	var m Meta
	switch c := c.(type) {
	case *ResourceLink:
		m = c.Meta
	case *EmbeddedResource:
		m = c.Meta
	default:
		return Entity{}, false
	}
	if _, present := m[MetaEntity]; !present {
		return Entity{}, false
	}
	p, err := m.Entity()
	if err != nil || p == nil {
		return Entity{}, false
	}
	return *p, true
}

// References returns the resolved references recorded on m
// (_meta["dev.parley/references"]); nil when there are none or they
// cannot be decoded.
func (m Meta) References() []ResolvedReference {
	v, ok, err := metaGet[[]ResolvedReference](m, MetaReferences)
	if !ok || err != nil {
		return nil
	}
	return v
}

// SetReferences stores rs at _meta["dev.parley/references"].
func (m *Meta) SetReferences(rs []ResolvedReference) { m.set(MetaReferences, rs) }
