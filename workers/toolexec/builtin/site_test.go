package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/schema"
)

// newSite opens a site on a fresh embedded server.
func newSite(t *testing.T) (*Site, jetstream.JetStream) {
	t.Helper()
	srv := bustest.NewServer(t)
	_, js := srv.JetStream(t)
	s, err := OpenSite(t.Context(), js, nil)
	if err != nil {
		t.Fatalf("OpenSite: %v", err)
	}
	return s, js
}

// call runs a tool by name and fails the test on an infrastructure error.
func call(t *testing.T, s *Site, name string, req Request) Result {
	t.Helper()
	tool, ok := s.Tool(name)
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	r, err := tool.Call(t.Context(), req)
	if err != nil {
		t.Fatalf("%s.Call(%s): %v", name, req.Arguments, err)
	}
	if (r.Call == nil) == (r.InputRequired == nil) {
		t.Fatalf("%s.Call(%s) = %+v, want exactly one of Call and InputRequired", name, req.Arguments, r)
	}
	return r
}

// callOK runs a tool and requires a successful CallToolResult.
func callOK(t *testing.T, s *Site, name string, req Request) *schema.CallToolResult {
	t.Helper()
	r := call(t, s, name, req)
	if r.Call == nil || r.Call.IsError {
		t.Fatalf("%s.Call(%s) = %s, want a successful result", name, req.Arguments, dump(r))
	}
	return r.Call
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// text returns the text of the result's first text block.
func text(r *schema.CallToolResult) string {
	for _, c := range r.Content {
		if tc, ok := c.(*schema.TextContent); ok {
			return tc.Text
		}
	}
	return ""
}

func links(r *schema.CallToolResult) []*schema.ResourceLink {
	var out []*schema.ResourceLink
	for _, c := range r.Content {
		if l, ok := c.(*schema.ResourceLink); ok {
			out = append(out, l)
		}
	}
	return out
}

func TestOpenSiteConcurrentSeeding(t *testing.T) {
	srv := bustest.NewServer(t)
	const starters = 4
	sites := make([]*Site, starters)
	errs := make([]error, starters)
	var wg sync.WaitGroup
	for i := range starters {
		_, js := srv.JetStream(t) // one connection per starter, like separate processes
		wg.Go(func() { sites[i], errs[i] = OpenSite(t.Context(), js, nil) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("OpenSite #%d: %v", i, err)
		}
	}
	all, err := sites[0].Entities(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 30 {
		t.Errorf("len(Entities) = %d after concurrent seeding, want 30", len(all))
	}
	// One revision per entity: nobody wrote an entity twice.
	_, js := srv.JetStream(t)
	kv, err := js.KeyValue(t.Context(), DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Values(); got != 31 { // 30 entities + meta.seeded
		t.Errorf("bucket holds %d values, want 31 (30 entities, 1 marker)", got)
	}

	// A deleted fixture entity stays deleted when another starter comes up,
	// even one that missed the marker.
	if err := kv.Delete(t.Context(), "entity.article-1"); err != nil {
		t.Fatal(err)
	}
	if err := sites[1].seedEntitiesOnly(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSite(t.Context(), js, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sites[0].Entity(t.Context(), "article-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Entity(article-1) after delete and reseed: err = %v, want ErrNotFound", err)
	}
}

// seedEntitiesOnly runs seeding as a starter that did not see the marker.
func (s *Site) seedEntitiesOnly(ctx context.Context) error {
	if err := s.kv.Delete(ctx, seededKey); err != nil {
		return err
	}
	return s.seed(ctx)
}

func TestFixture(t *testing.T) {
	s, _ := newSite(t)
	all, err := s.Entities(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range all {
		count[e.Type]++
		count[e.Type+"/"+e.Status]++
		if strings.Contains(strings.ToLower(e.Title), "about") {
			count["about"]++
			if e.Type != TypePage || !strings.HasPrefix(e.Title, "About") {
				t.Errorf("entity %s title %q mentions about but is not an About page", e.ID, e.Title)
			}
		}
		if !validID.MatchString(e.ID) || e.Title == "" || e.Created.IsZero() {
			t.Errorf("fixture entity %+v: bad id, title or created", e)
		}
		if (e.Type == TypeEvent) != schema.CheckFormat(schema.FormatDate, e.Date) {
			t.Errorf("fixture entity %s: type %s with date %q", e.ID, e.Type, e.Date)
		}
	}
	want := map[string]int{
		"article": 15, "article/draft": 10, "article/published": 5,
		"page": 8, "page/published": 8, "event": 7, "event/published": 7, "about": 3,
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("fixture count %s = %d, want %d", k, count[k], n)
		}
	}
	if !slices.IsSortedFunc(all, func(a, b Entity) int { return strings.Compare(a.ID, b.ID) }) {
		t.Error("Entities not sorted by ID")
	}
	if _, err := s.Entity(t.Context(), "nope-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Entity(nope-1) err = %v, want ErrNotFound", err)
	}
	if _, err := s.Entity(t.Context(), "bad id/with.chars"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Entity(bad id) err = %v, want ErrNotFound", err)
	}
}

func TestLedgerKey(t *testing.T) {
	for _, id := range []string{"call_1", "call-abc_DEF", "call 1", "a.b", "ünïcode", strings.Repeat("x", 200), "*", ">"} {
		k := ledgerKey(id)
		if !strings.HasPrefix(k, "ledger.") || !regexpKey.MatchString(k) {
			t.Errorf("ledgerKey(%q) = %q, not a valid KV key", id, k)
		}
	}
	if ledgerKey("a b") == ledgerKey("a_b") {
		t.Error("ledgerKey collides for a b / a_b")
	}
}
