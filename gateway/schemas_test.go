package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parley-dev/parley/events"
)

// TestSchemaRoute checks that every catalogue type's dataschema URI path
// resolves on the gateway (without a token) to the repository's schema file, and that
// anything else is a 404 problem.
func TestSchemaRoute(t *testing.T) {
	mux := newTestGateway(t, &Options{DisableWeb: true}).Handler()
	for _, e := range events.Catalog() {
		path := strings.TrimPrefix(e.DataSchema(), "https://parley.dev")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/schema+json" {
			t.Errorf("GET %s: %d %s", path, rec.Code, rec.Header().Get("Content-Type"))
			continue
		}
		want, err := os.ReadFile(filepath.Join("..", e.SchemaFile()))
		if err != nil {
			t.Fatal(err)
		}
		if rec.Body.String() != string(want) {
			t.Errorf("GET %s does not serve %s", path, e.SchemaFile())
		}
		var doc struct {
			ID string `json:"$id"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.ID != e.DataSchema() {
			t.Errorf("GET %s: $id %q (%v), want %s", path, doc.ID, err, e.DataSchema())
		}
	}
	for _, path := range []string{"/schema/nope.json", "/schema/eventschemas.go", "/schema/..%2fgo.mod"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusNotFound || !strings.Contains(rec.Header().Get("Content-Type"), "problem+json") {
			t.Errorf("GET %s: %d %s, want a 404 problem", path, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
}
