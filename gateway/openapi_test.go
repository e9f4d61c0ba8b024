package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/kaptinlin/jsonschema"

	"github.com/parley-dev/parley/events"
)

// openAPI checks responses against docs/openapi.yaml: the status must be
// documented for the route's operation, and a JSON body must validate
// against the documented schema (OpenAPI 3.1 schemas are JSON Schema
// 2020-12; the components' schemas become $defs).
type openAPI struct {
	t      *testing.T
	doc    map[string]any
	routes *http.ServeMux
	seen   map[Route]bool
}

func loadOpenAPI(t *testing.T) *openAPI {
	t.Helper()
	data, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var y any
	if err := yaml.Unmarshal(data, &y); err != nil {
		t.Fatalf("parsing docs/openapi.yaml: %v", err)
	}
	// Through JSON, so every map is a map[string]any.
	j, err := json.Marshal(y)
	if err != nil {
		t.Fatal(err)
	}
	o := &openAPI{t: t, routes: http.NewServeMux(), seen: map[Route]bool{}}
	if err := json.Unmarshal(j, &o.doc); err != nil {
		t.Fatal(err)
	}
	for _, rt := range slices.Concat(Routes, PublicRoutes) {
		o.routes.Handle(rt.Method+" "+rt.Path, http.NotFoundHandler())
	}
	return o
}

func obj(v any, keys ...string) map[string]any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	m, _ := v.(map[string]any)
	return m
}

// check validates the response w to method path.
func (o *openAPI) check(method, path string, w *httptest.ResponseRecorder) {
	o.t.Helper()
	_, pattern := o.routes.Handler(httptest.NewRequest(method, path, nil))
	m, p, ok := strings.Cut(pattern, " ")
	if !ok {
		o.t.Errorf("%s %s is not a route", method, path)
		return
	}
	o.seen[Route{m, p}] = true
	op := obj(o.doc, "paths", p, strings.ToLower(m))
	resp := obj(op, "responses", strconv.Itoa(w.Code))
	if resp == nil {
		o.t.Errorf("%s %s answered %d, which docs/openapi.yaml does not document for it: %s", method, path, w.Code, w.Body)
		return
	}
	if ref, _ := resp["$ref"].(string); ref != "" {
		resp = obj(o.doc, "components", "responses", strings.TrimPrefix(ref, "#/components/responses/"))
	}
	ct, _, _ := strings.Cut(w.Header().Get("Content-Type"), ";")
	media := obj(resp, "content", ct)
	if media == nil {
		o.t.Errorf("%s %s answered %d with %s, which docs/openapi.yaml does not document for it", method, path, w.Code, ct)
		return
	}
	if !strings.HasSuffix(ct, "json") {
		return
	}
	schema := map[string]any{"$defs": obj(o.doc, "components", "schemas")}
	for k, v := range obj(media, "schema") {
		schema[k] = v
	}
	b, _ := json.Marshal(schema)
	b = []byte(strings.ReplaceAll(string(b), "#/components/schemas/", "#/$defs/"))
	s, err := jsonschema.NewCompiler().Compile(b)
	if err != nil {
		o.t.Fatalf("compiling the schema of %s %s %d: %v", m, p, w.Code, err)
	}
	if res := s.ValidateJSON(w.Body.Bytes()); !res.IsValid() {
		list, _ := json.Marshal(res.ToList())
		o.t.Errorf("%s %s %d body %s does not match docs/openapi.yaml: %s", method, path, w.Code, w.Body, list)
	}
}

// Real responses of every route — successes and problems — have a status,
// media type and body that docs/openapi.yaml documents for the route.
func TestResponsesMatchOpenAPI(t *testing.T) {
	o := loadOpenAPI(t)
	g := newTestGateway(t, &Options{RatePerSecond: 1000, RateBurst: 1000, VerdictWait: 50 * time.Millisecond, MaxBodyBytes: 64 << 10})
	h := g.Handler()
	do := func(method, path, token, body string) {
		t.Helper()
		o.check(method, path, request(t, h, method, path, token, body, nil))
	}
	do("GET", "/v1/threads", "", "")                                                                                                                                                                                                                  // 401
	do("GET", "/v1/threads", devTok, "")                                                                                                                                                                                                              // 200, empty
	do("POST", "/v1/threads/t1/messages", devTok, `{"text":"hi"}`)                                                                                                                                                                                    // 202
	do("POST", "/v1/threads/t1/messages", devTok, `{"text":""}`)                                                                                                                                                                                      // 400
	do("POST", "/v1/threads/t1/messages", devTok, `{"txt":"hi"}`)                                                                                                                                                                                     // 400
	do("POST", "/v1/threads/a*b/messages", devTok, `{"text":"hi"}`)                                                                                                                                                                                   // 400
	do("POST", "/v1/threads/t1/messages", devTok, `{"text":"`+strings.Repeat("x", events.MaxMessageText+1)+`"}`)                                                                                                                                      // 413
	do("POST", "/v1/threads/t1/messages", devTok, `{"text":"`+strings.Repeat("x", 70<<10)+`"}`)                                                                                                                                                       // 413 body
	do("GET", "/v1/threads", devTok, "")                                                                                                                                                                                                              // 200
	do("GET", "/v1/threads/t1", devTok, "")                                                                                                                                                                                                           // 200
	do("GET", "/v1/threads/t2", devTok, "")                                                                                                                                                                                                           // 404
	do("GET", "/v1/threads/t2/events", devTok, "")                                                                                                                                                                                                    // 404
	o.check("GET", "/v1/threads/t1/events", request(t, h, "GET", "/v1/threads/t1/events", devTok, "", map[string]string{"Last-Event-ID": "x"}))                                                                                                       // 400
	do("POST", "/v1/threads/t1/elicitations/e1", devTok, `{"action":"accept","content":{"a":"b"}}`)                                                                                                                                                   // 202 pending
	do("POST", "/v1/threads/t1/elicitations/e1", devTok, `{"action":"maybe"}`)                                                                                                                                                                        // 400
	do("POST", "/v1/threads/t2/elicitations/e1", devTok, `{"action":"accept"}`)                                                                                                                                                                       // 404
	do("PUT", "/v1/threads/t1/shares/bob", devTok, "")                                                                                                                                                                                                // 200
	do("PUT", "/v1/threads/t1/shares/dev", devTok, "")                                                                                                                                                                                                // 400
	do("DELETE", "/v1/threads/t1/shares/bob", devTok, "")                                                                                                                                                                                             // 200
	do("DELETE", "/v1/threads/t9/shares/bob", devTok, "")                                                                                                                                                                                             // 404
	do("GET", "/v1/lookup/entities?q=About", devTok, "")                                                                                                                                                                                              // 503: no lookup service
	do("GET", "/v1/lookup/entities?q=", devTok, "")                                                                                                                                                                                                   // 400
	do("POST", "/v1/ai-sdk/chat", devTok, `{"id":"t1","messages":[],"trigger":"submit-message"}`)                                                                                                                                                     // 400
	do("POST", "/v1/ai-sdk/chat", devTok, `{"id":"t1","messages":[{"id":"m","role":"user","parts":[]}],"trigger":"regenerate-message"}`)                                                                                                              // 400
	do("POST", "/v1/ai-sdk/chat", devTok, `{"id":"t2","messages":[{"id":"m","role":"assistant","parts":[{"type":"dynamic-tool","toolCallId":"c","state":"approval-responded","approval":{"id":"e1","approved":true}}]}],"trigger":"submit-message"}`) // 404
	do("GET", "/v1/ai-sdk/chat/t2/stream", devTok, "")                                                                                                                                                                                                // 404
	do("GET", "/v1/ai-sdk/chat/a*b/stream", devTok, "")                                                                                                                                                                                               // 400
	do("POST", "/v1/ag-ui", "", `{}`)                                                                                                                                                                                                                 // 401
	do("POST", "/v1/ag-ui", devTok, `{"threadId":"t1","runId":"r","messages":[],"tools":[{"name":"x","description":"d"}]}`)                                                                                                                           // 400
	do("POST", "/v1/ag-ui", devTok, `{"threadId":"t9","runId":"r","messages":[],"resume":[{"interruptId":"e","status":"cancelled"}]}`)                                                                                                                // 404
	do("GET", "/v1/ag-ui/capabilities", devTok, "")                                                                                                                                                                                                   // 200
	do("GET", "/v1/threads/t1/approvals", devTok, "")                                                                                                                                                                                                 // 503: no processor
	do("GET", "/v1/threads/t9/approvals", devTok, "")                                                                                                                                                                                                 // 404
	do("DELETE", "/v1/threads/t1/approvals?tool=a*b", devTok, "")                                                                                                                                                                                     // 400
	do("DELETE", "/v1/threads/t1/approvals", devTok, "")                                                                                                                                                                                              // 503: no processor
	do("DELETE", "/v1/threads/t9/approvals?tool=x", devTok, "")                                                                                                                                                                                       // 404
	do("GET", "/livez", "", "")
	do("GET", "/readyz", "", "")
	do("GET", "/schema/dev.parley.turn.requested.json", "", "")
	do("GET", "/schema/nothing.json", "", "")
	for _, rt := range slices.Concat(Routes, PublicRoutes) {
		if !o.seen[rt] {
			t.Errorf("%s %s: no response checked", rt.Method, rt.Path)
		}
	}

	// 429 with Retry-After.
	g2 := newTestGateway(t, &Options{RatePerSecond: 0.01, RateBurst: 1})
	for range 2 {
		o.check("GET", "/v1/threads", request(t, g2.Handler(), "GET", "/v1/threads", devTok, "", nil))
	}
}
