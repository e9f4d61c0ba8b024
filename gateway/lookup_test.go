package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// GET /v1/lookup/entities: authenticated, validated, answered by the lookup
// service over NATS, and 503 lookup_unavailable while none runs.
func TestLookupEntities(t *testing.T) {
	srv := bustest.NewServer(t)
	nc, js := srv.JetStream(t)
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(t.Context()); err != nil { // the workers' job
		t.Fatal(err)
	}
	g, err := New(t.Context(), b, StaticTokens{devTok: "dev"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := g.Handler()
	const about = "/v1/lookup/entities?q=About&type=node&bundle=page&limit=5"
	if w := request(t, h, "GET", about, "", "", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", w.Code)
	}
	w := request(t, h, "GET", about, devTok, "", nil)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"reason":"lookup_unavailable"`) || w.Header().Get("Retry-After") == "" {
		t.Errorf("no lookup service: %d %s, want 503 lookup_unavailable with Retry-After", w.Code, w.Body)
	}
	w = request(t, h, "GET", "/v1/lookup/entities?q=%20&limit=0&bundle=Page&type=Node", devTok, "", nil)
	var p Problem
	_ = json.Unmarshal(w.Body.Bytes(), &p)
	var paths []string
	for _, v := range p.Errors {
		paths = append(paths, v.Path+": "+v.Rule)
	}
	if w.Code != 400 || strings.Join(paths, "; ") != "limit: must be an integer from 1 to 50; q: required; "+
		"type: must be a machine name (lower-case letters, digits, underscores); bundle[0]: must be a machine name (lower-case letters, digits, underscores)" {
		t.Errorf("bad lookup: %d %q, want 400 naming each parameter", w.Code, paths)
	}

	site, err := builtin.OpenSite(t.Context(), js, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- site.ServeLookup(ctx, sb) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(5 * time.Second)
	for w = request(t, h, "GET", about, devTok, "", nil); w.Code == 503 && time.Now().Before(deadline); w = request(t, h, "GET", about, devTok, "", nil) {
		time.Sleep(20 * time.Millisecond)
	}
	var got events.LookupEntitiesReply
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != 200 || err != nil {
		t.Fatalf("lookup: %d %s", w.Code, w.Body)
	}
	var ids []string
	for _, e := range got.Entities {
		ids = append(ids, e.ID+"="+e.Label)
	}
	if strings.Join(ids, "|") != "page-3=About the team|page-5=About this site|page-1=About us" || got.Truncated {
		t.Errorf("lookup About pages = %q (truncated %v)", ids, got.Truncated)
	}
	if w := request(t, h, "GET", "/v1/lookup/entities?q=zzz-none", devTok, "", nil); w.Code != 200 || !strings.Contains(w.Body.String(), `"entities":[]`) {
		t.Errorf("no match: %d %s, want 200 with an empty list", w.Code, w.Body)
	}
}
