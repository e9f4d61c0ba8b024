package builtin

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// LookupService is the NATS micro service name of the entity lookup.
const LookupService = "parley-lookup"

// ServeLookup answers entity lookups (events.SubjectLookupEntities, NATS
// micro service LookupService, queue group "lookup") and reference
// resolutions (events.SubjectResolveReferences, endpoint "resolve": see
// Resolve) from the site's content until ctx ends: read-only, no policy,
// no ledger. It returns nil when ctx ends, or the first error adding an
// endpoint (the other one is stopped).
func (s *Site) ServeLookup(ctx context.Context, b *bus.Client) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, serve := range []func(context.Context, *bus.Client) error{s.serveEntities, s.serveResolve} {
		wg.Go(func() {
			if errs[i] = serve(ctx, b); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// serveResolve answers events.SubjectResolveReferences with Resolve.
func (s *Site) serveResolve(ctx context.Context, b *bus.Client) error {
	return b.Serve(ctx, bus.Endpoint{Service: LookupService + "-resolve", Version: "1.0.0", Name: "resolve",
		Subject: events.SubjectResolveReferences, QueueGroup: "lookup",
		Description: "Context references of a user message, resolved for the person who sent it"},
		func(ctx context.Context, req *event.Event) (*event.Event, error) {
			r, err := events.KindResolveReferencesRequested.Data(req)
			if err != nil {
				return nil, err
			}
			reply, err := s.Resolve(ctx, r)
			if err != nil {
				return nil, err
			}
			return events.KindResolveReferencesAnswered.New(SourceLookup, "", req.Subject(), reply)
		})
}

// Resolve resolves r's references for r.Person(): a reference is
// available when the entity is live, its type is the one claimed (or
// "node", which every demo entity is) and the person may see it
// (Entity.VisibleTo); its result then carries the entity (Label: the
// title), its link and a summary (title, type, status, date, body; at
// most events.MaxReferenceSummaryBytes). Any other reference is
// unavailable with nothing else set, whatever the reason. An invalid
// request is an error naming the field; a KV failure a wrapped error.
func (s *Site) Resolve(ctx context.Context, r events.ResolveReferencesRequest) (events.ResolveReferencesReply, error) {
	if err := r.Validate(); err != nil {
		return events.ResolveReferencesReply{}, err
	}
	out := events.ResolveReferencesReply{Results: make([]events.ReferenceResult, len(r.References))}
	for i, ref := range r.References {
		e, _, err := s.getAny(ctx, ref.ID)
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return events.ResolveReferencesReply{}, err
		}
		if ref.EntityType != e.Type && ref.EntityType != "node" || !e.VisibleTo(r.Person()) {
			continue
		}
		sum := summary(e)
		if e.Body != "" {
			sum += ": " + e.Body
		}
		if len(sum) > events.MaxReferenceSummaryBytes {
			sum = strings.ToValidUTF8(sum[:events.MaxReferenceSummaryBytes-len("…")], "") + "…"
		}
		out.Results[i] = events.ReferenceResult{Available: true, URI: s.link(e).URI, Summary: sum,
			Entity: schema.Entity{EntityType: e.Type, ID: e.ID, Bundle: e.Type, Status: e.Status, Label: e.Title}}
	}
	return out, nil
}

// serveEntities answers events.SubjectLookupEntities with Lookup.
func (s *Site) serveEntities(ctx context.Context, b *bus.Client) error {
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
// (case-insensitively) and that r.User may see (Entity.VisibleTo), titles
// that start with it first, then by title and ID; at most r.Limit (default events.DefaultLookupLimit), Truncated
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
	all, err := s.allEntities(ctx)
	if err != nil {
		return events.LookupEntitiesReply{}, err
	}
	// A private entity is found only by its owner.
	all = slices.DeleteFunc(all, func(e Entity) bool { return !e.VisibleTo(r.User) })
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
