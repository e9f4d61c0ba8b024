package builtin

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// A private entity (Owner) resolves and is found only for its owner; a
// missing, private or mistyped reference is unavailable with nothing else
// said; the tools do not see private entities at all.
func TestResolveAndPrivacy(t *testing.T) {
	srv := bustest.NewServer(t)
	_, js := srv.JetStream(t)
	s, err := OpenSite(t.Context(), js, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(Entity{ID: "page-ann", Type: TypePage, Title: "Launch notes", Status: StatusDraft,
		Body: strings.Repeat("secret ", 400), Created: time.Now().UTC(), Owner: "ann"})
	if _, err := s.kv.Put(t.Context(), entityKey("page-ann"), b); err != nil {
		t.Fatal(err)
	}
	refs := []schema.Entity{{EntityType: "page", ID: "page-1"}, {EntityType: "page", ID: "page-ann"},
		{EntityType: "page", ID: "nope"}, {EntityType: "article", ID: "page-1"}, {EntityType: "node", ID: "page-1"}}
	for _, tt := range []struct {
		user  events.Identity
		avail []bool
	}{
		{events.Identity{Principal: "gateway", OnBehalfOf: "ann"}, []bool{true, true, false, false, true}},
		{events.Identity{Principal: "gateway", OnBehalfOf: "bob"}, []bool{true, false, false, false, true}},
		{events.Identity{Principal: "ann"}, []bool{true, true, false, false, true}},
	} {
		got, err := s.Resolve(t.Context(), events.ResolveReferencesRequest{User: tt.user, References: refs})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range got.Results {
			if r.Available != tt.avail[i] {
				t.Errorf("%v: reference %d available %v, want %v", tt.user, i, r.Available, tt.avail[i])
			}
			if !r.Available && (r != events.ReferenceResult{}) {
				t.Errorf("%v: unavailable reference %d says more than that: %+v", tt.user, i, r)
			}
			if r.Available && len(r.Summary) > events.MaxReferenceSummaryBytes {
				t.Errorf("summary of %d is %d bytes", i, len(r.Summary))
			}
		}
		if r := got.Results[0]; r.Entity.Label != "About us" || r.URI != "https://site.example/node/page-1" ||
			!strings.Contains(r.Summary, "The about us page of the demo site.") {
			t.Errorf("page-1 resolved as %+v", r)
		}
	}
	if _, err := s.Resolve(t.Context(), events.ResolveReferencesRequest{User: events.Identity{Principal: "x"}}); err == nil {
		t.Error("a request without references resolved")
	}

	for user, want := range map[string]bool{"ann": true, "bob": false, "": false} {
		got, err := s.Lookup(t.Context(), events.LookupEntitiesRequest{Query: "launch", User: user})
		if err != nil {
			t.Fatal(err)
		}
		if found := len(got.Entities) == 1 && got.Entities[0].ID == "page-ann"; found != want {
			t.Errorf("lookup as %q found the private page: %v, want %v (%+v)", user, found, want, got.Entities)
		}
	}
	if _, err := s.Entity(t.Context(), "page-ann"); err != ErrNotFound {
		t.Errorf("the tools' Entity read a private page: %v", err)
	}
	all, err := s.Entities(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		if e.Owner != "" {
			t.Errorf("the tools' Entities listed private %s", e.ID)
		}
	}
}
