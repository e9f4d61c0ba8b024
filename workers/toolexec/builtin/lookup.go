package builtin

import (
	"context"
	"slices"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
)

// LookupService is the NATS micro service name of the entity lookup.
const LookupService = "parley-lookup"

// ServeLookup answers entity lookups (events.SubjectLookupEntities, NATS
// micro service LookupService, queue group "lookup") from the site's
// content until ctx ends: read-only, no policy, no ledger. It returns nil
// when ctx ends, or the error adding the service.
func (s *Site) ServeLookup(ctx context.Context, b *bus.Client) error {
	return b.Serve(ctx, bus.Endpoint{Service: LookupService, Version: "1.0.0", Name: "entities",
		Subject: events.SubjectLookupEntities, QueueGroup: "lookup",
		Description: "Site entities whose title or ID contains a query (entity_autocomplete)"},
		func(ctx context.Context, req *event.Event) (*event.Event, error) {
			r, err := events.KindLookupEntitiesRequested.Data(req)
			if err != nil {
				return nil, err
			}
			reply, err := s.Lookup(ctx, r)
			if err != nil {
				return nil, err
			}
			return events.KindLookupEntitiesAnswered.New(SourceLookup, "", "", reply)
		})
}

// SourceLookup is the CloudEvents source of lookup replies.
const SourceLookup = "/parley/toolexec/lookup"

// Lookup returns the live entities whose title or ID contains r.Query
// (case-insensitively), titles that start with it first, then by title
// and ID; at most r.Limit (default events.DefaultLookupLimit), Truncated
// when more matched. r.TargetType is "node" (every demo entity is a node)
// or an entity type; r.Bundles narrows to those types. An invalid request
// is an error naming the field.
func (s *Site) Lookup(ctx context.Context, r events.LookupEntitiesRequest) (events.LookupEntitiesReply, error) {
	if err := r.Validate(); err != nil {
		return events.LookupEntitiesReply{}, err
	}
	limit := r.Limit
	if limit == 0 {
		limit = events.DefaultLookupLimit
	}
	all, err := s.Entities(ctx)
	if err != nil {
		return events.LookupEntitiesReply{}, err
	}
	q := strings.ToLower(strings.TrimSpace(r.Query))
	var found []Entity
	for _, e := range all {
		if r.TargetType != "" && r.TargetType != "node" && r.TargetType != e.Type {
			continue
		}
		if len(r.Bundles) > 0 && !slices.Contains(r.Bundles, e.Type) {
			continue
		}
		if strings.Contains(strings.ToLower(e.Title), q) || strings.Contains(strings.ToLower(e.ID), q) {
			found = append(found, e)
		}
	}
	prefix := func(e Entity) int {
		if strings.HasPrefix(strings.ToLower(e.Title), q) {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(found, func(a, b Entity) int {
		if d := prefix(a) - prefix(b); d != 0 {
			return d
		}
		if c := strings.Compare(strings.ToLower(a.Title), strings.ToLower(b.Title)); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	out := events.LookupEntitiesReply{Entities: []events.LookupEntity{}}
	if len(found) > limit {
		found, out.Truncated = found[:limit], true
	}
	for _, e := range found {
		out.Entities = append(out.Entities, events.LookupEntity{ID: e.ID, Label: e.Title, EntityType: e.Type,
			Bundle: e.Type, Status: e.Status, URI: s.link(e).URI})
	}
	return out, nil
}
