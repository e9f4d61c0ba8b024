package gateway

import (
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/parley-dev/parley/schema"
)

// SchemaPath is the route of the event data schemas:
// GET /schema/<type>.json serves the JSON Schema an event's dataschema URI
// (https://parley.dev/schema/<type>.json) names, so the URI resolves against
// a gateway too. No authentication: the schemas are the public contract.
const SchemaPath = "/schema/{file}"

// schemaHandler serves schema.EventSchemas: 200 with
// application/schema+json for a known file, a 404 problem otherwise.
func schemaHandler() http.Handler {
	files := schema.EventSchemas()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		b, err := fs.ReadFile(files, name)
		if err != nil || path.Base(name) != name || !strings.HasSuffix(name, ".json") {
			writeProblem(w, Problem{Status: http.StatusNotFound, Reason: ReasonNotFound,
				Detail: "no schema " + name + "; GET /schema/<event type>.json, e.g. /schema/dev.parley.turn.requested.json"})
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/schema+json")
		h.Set("Cache-Control", "public, max-age=3600")
		h.Set("X-Content-Type-Options", "nosniff")
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(b)
	})
}
