package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
)

// serveLookup answers entity lookups on srv with entities, the way a
// site's lookup service does (no bucket exists on the server).
func serveLookup(t *testing.T, b *bus.Client, entities ...events.LookupEntity) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	go func() {
		_ = b.Serve(ctx, bus.Endpoint{Service: "test-lookup", Version: "1.0.0", Name: "entities",
			Subject: events.SubjectLookupEntities, QueueGroup: "lookup"},
			func(_ context.Context, req *event.Event) (*event.Event, error) {
				if _, err := events.KindLookupEntitiesRequested.Data(req); err != nil {
					return nil, err
				}
				return events.KindLookupEntitiesAnswered.New("/test/lookup", "", "", events.LookupEntitiesReply{Entities: entities})
			})
	}()
}

// EntityTitle names an entity from the lookup service's answer, the entity
// whose ID is the one asked for; no service is an error, an unknown ID "".
func TestEntityTitle(t *testing.T) {
	srv := bustest.NewServer(t)
	b, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := New(b, "/test")
	if _, err := c.EntityTitle(t.Context(), "article-1"); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("EntityTitle with no lookup service: error %v, want nats.ErrNoResponders", err)
	}
	serveLookup(t, b,
		events.LookupEntity{ID: "article-10", Label: "Image optimisation checklist", EntityType: "article"},
		events.LookupEntity{ID: "article-1", Label: "Getting started", EntityType: "article"})
	var title string
	for range 200 { // the service registers asynchronously
		if title, err = c.EntityTitle(t.Context(), "article-1"); !errors.Is(err, nats.ErrNoResponders) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || title != "Getting started" {
		t.Fatalf(`EntityTitle("article-1") = %q, %v, want "Getting started"`, title, err)
	}
	if title, err = c.EntityTitle(t.Context(), "page-9"); err != nil || title != "" {
		t.Fatalf(`EntityTitle("page-9") = %q, %v, want "", nil`, title, err)
	}
	if _, err := c.LookupEntities(t.Context(), events.LookupEntitiesRequest{}); err == nil {
		t.Fatal("LookupEntities with no query: no error")
	}
}
