package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
)

// The chat names a confirmation's entities by the titles the entity
// lookup service answers: it reads no tool's bucket (the server here has
// none).
func TestEntityTitlesFromLookup(t *testing.T) {
	srv := bustest.NewServer(t)
	b, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var asked atomic.Int32
	go func() {
		_ = b.Serve(ctx, bus.Endpoint{Service: "test-lookup", Version: "1.0.0", Name: "entities",
			Subject: events.SubjectLookupEntities, QueueGroup: "lookup"},
			func(_ context.Context, req *event.Event) (*event.Event, error) {
				asked.Add(1)
				return events.KindLookupEntitiesAnswered.New("/test/lookup", "", "", events.LookupEntitiesReply{
					Entities: []events.LookupEntity{{ID: "article-2", Label: "Ten tips for faster page loads", EntityType: "article"}}})
			})
	}()
	titles := entityTitles(ctx, client.New(b, "/test"))
	var got string
	for deadline := time.Now().Add(5 * time.Second); got == "" && time.Now().Before(deadline); {
		if got = titles("article-2"); got == "" {
			time.Sleep(10 * time.Millisecond) // the service registers asynchronously
		}
	}
	if got != "Ten tips for faster page loads" {
		t.Fatalf(`titles("article-2") = %q, want "Ten tips for faster page loads"`, got)
	}
	n := asked.Load()
	if got := titles("article-2"); got != "Ten tips for faster page loads" || asked.Load() != n {
		t.Errorf(`titles("article-2") again = %q after %d more lookups, want the remembered title and none`, got, asked.Load()-n)
	}
}
