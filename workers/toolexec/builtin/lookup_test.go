package builtin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
)

// Lookup over NATS: matches by title (prefix first) and ID, filters by
// type and bundle, bounds the answer, and refuses a bad request naming the
// field.
func TestServeLookup(t *testing.T) {
	srv := bustest.NewServer(t)
	nc, js := srv.JetStream(t)
	s, err := OpenSite(t.Context(), js, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.ServeLookup(ctx, b) }()
	t.Cleanup(func() { cancel(); <-done })

	ask := func(r events.LookupEntitiesRequest) (events.LookupEntitiesReply, error) {
		t.Helper()
		e, err := events.New("/test", events.TypeLookupEntitiesRequested, "", r)
		if err != nil {
			t.Fatal(err)
		}
		var reply events.LookupEntitiesReply
		for range 50 { // the service may not listen yet
			rctx, rcancel := context.WithTimeout(t.Context(), 2*time.Second)
			out, err := b.Request(rctx, events.SubjectLookupEntities, e)
			rcancel()
			if bus.IsNoResponders(err) {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if err != nil {
				return reply, err
			}
			if events.TypeOf(out) != events.TypeLookupEntitiesAnswered {
				t.Fatalf("reply type %s", out.Type())
			}
			return events.Data[events.LookupEntitiesReply](out)
		}
		t.Fatal("the lookup service never listened")
		return reply, nil
	}
	got, err := ask(events.LookupEntitiesRequest{Query: "about", TargetType: "node", Bundles: []string{"page"}})
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, e := range got.Entities {
		labels = append(labels, e.Label+"="+e.ID)
		if e.EntityType != "page" || e.Bundle != "page" || !strings.HasPrefix(e.URI, "https://site.example/node/") {
			t.Errorf("entity %+v", e)
		}
	}
	if strings.Join(labels, "|") != "About the team=page-3|About this site=page-5|About us=page-1" {
		t.Errorf("about pages = %q, want the three About pages by title", labels)
	}
	// A title that starts with the query comes before one that only
	// contains it.
	if got, err := ask(events.LookupEntitiesRequest{Query: "p", Bundles: []string{"page"}}); err != nil || len(got.Entities) != 8 || got.Entities[0].Label != "Press kit" || got.Entities[1].Label != "Privacy policy" {
		t.Errorf("query p = %+v, %v: want the eight pages (their IDs match), the titles starting with p first", got, err)
	}
	// A bundle that has none; the limit and Truncated.
	if got, err := ask(events.LookupEntitiesRequest{Query: "about", Bundles: []string{"event"}}); err != nil || len(got.Entities) != 0 {
		t.Errorf("about events = %+v, %v, want none", got, err)
	}
	if got, err := ask(events.LookupEntitiesRequest{Query: "article", Limit: 2}); err != nil || len(got.Entities) != 2 || !got.Truncated {
		t.Errorf("limit 2 = %+v, %v, want 2 and truncated", got, err)
	}
	_, err = ask(events.LookupEntitiesRequest{Query: " ", Limit: 99})
	var se *bus.ServiceError
	if !errorsAs(err, &se) || !strings.Contains(se.Description, "query: required") || !strings.Contains(se.Description, "limit: must be 1 to 50, got 99") {
		t.Errorf("bad request: %v, want a service error naming query and limit", err)
	}
}

func errorsAs(err error, se **bus.ServiceError) bool {
	e, ok := err.(*bus.ServiceError)
	if ok {
		*se = e
	}
	return ok
}
