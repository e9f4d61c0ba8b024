package layers

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/parley-dev/parley/"

// allowed lists, for each package of the module, the module's packages it
// may import (directly, outside its tests). A package missing here fails
// the test: a new package states its place. Third-party imports are
// checked by forbidden below.
var allowed = map[string][]string{
	"schema":                  {},
	"events":                  {"schema"},
	"client/threadstate":      {"events", "schema"},
	"model":                   {"schema"},
	"model/openai":            {"model", "schema"},
	"model/openai/openaitest": {},

	"internal/version":    {},
	"internal/natsserver": {},
	"internal/natsauth":   {},
	"internal/testskip":   {},
	"internal/mcpschema":  {"internal/testskip"},
	"internal/telemetry":  {},
	// metrics names its instruments after events and model's failure
	// reasons.
	"internal/metrics": {"events", "model"},
	"internal/health":  {"internal/metrics"},
	// retry is the one retry policy, below both transport and storage.
	"internal/retry": {},

	"bus":         {"events", "internal/health", "internal/metrics", "internal/retry"},
	"bus/bustest": {},
	// Storage never imports transport (bus) nor a worker.
	"kvstate": {"events", "internal/health", "internal/retry", "schema"},

	"client": {"bus", "client/threadstate", "events", "internal/natsauth", "schema"},

	"workers/gate":             {"bus", "events", "schema"},
	"workers/processor":        {"bus", "events", "internal/metrics", "kvstate", "schema"},
	"workers/agent":            {"bus", "events", "internal/metrics", "kvstate", "model", "schema"},
	"workers/toolexec/builtin": {"bus", "events", "kvstate", "schema"},
	"workers/toolexec":         {"bus", "events", "internal/metrics", "kvstate", "schema", "workers/toolexec/builtin"},
	"workers/toolexec/mcpclient": {"bus", "events", "schema", "workers/toolexec",
		"workers/toolexec/builtin"},

	"gateway": {"bus", "client", "client/threadstate", "events", "internal/health", "kvstate", "schema"},

	// The composition roots.
	"internal/starter": {"*"},
	"internal/bench":   {"*"},
	"cmd/parley":       {"*"},

	// Test-only packages.
	"internal/layers": {},
	"e2e":             {"*"},
	"chaos":           {"*"},
	"deploy":          {"*"},
}

// forbidden lists third-party import prefixes a package must not use.
var forbidden = map[string][]string{
	"schema":             {"github.com/nats-io/"},
	"events":             {"github.com/nats-io/"},
	"client/threadstate": {"github.com/nats-io/"},
	"model":              {"github.com/nats-io/"},
	"model/openai":       {"github.com/nats-io/"},
}

type pkg struct {
	ImportPath string
	Imports    []string
}

// TestImports fails on an import that goes against the layering: a
// package importing one of the module's packages it is not allowed to
// (a worker importing another worker, storage importing a worker,
// anything importing a composition root), a value package importing NATS,
// or a package that has no entry in allowed.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		n++
		name := strings.TrimPrefix(p.ImportPath, module)
		ok, known := allowed[name]
		if !known {
			t.Errorf("package %s has no entry in allowed: say which of the module's packages it may import", name)
			continue
		}
		for _, imp := range p.Imports {
			for _, f := range forbidden[name] {
				if strings.HasPrefix(imp, f) {
					t.Errorf("%s imports %s: value packages know nothing of NATS", name, imp)
				}
			}
			dep, ours := strings.CutPrefix(imp, module)
			if !ours || slices.Contains(ok, "*") {
				continue
			}
			if !slices.Contains(ok, dep) {
				t.Errorf("%s imports %s, which the layering does not allow (allowed: %v)", name, dep, ok)
			}
		}
	}
	if n < 20 {
		t.Fatalf("go list found %d packages; is the module there?", n)
	}
}
