package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/mcpschema"
	"github.com/parley-dev/parley/schema"
)

// TestMain says, in one line, which conformance tests were skipped because
// the official MCP schemas are missing (under CI=true they fail instead).
func TestMain(m *testing.M) { os.Exit(mcpschema.Run(m)) }

// mcpSchema compiles a definition of the official MCP schema of rev (see
// internal/mcpschema for where it is looked up).
func mcpSchema(t *testing.T, rev, def string) *jsonschema.Schema {
	t.Helper()
	path := filepath.Join(mcpschema.Dir(t, rev), rev, "schema.json")
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	sch, err := c.Compile(path + def)
	if err != nil {
		t.Fatalf("compiling %s%s: %v", path, def, err)
	}
	return sch
}

func validateJSON(t *testing.T, sch *jsonschema.Schema, what string, data []byte) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("%s does not validate: %v\n%s", what, err, data)
	}
}

// Every elicitation.requested the processor publishes carries valid MCP
// 2025-06-18 `elicitation/create` params, and every content block of an
// assistant message is a valid MCP ContentBlock.
func TestEmittedShapesValidateAgainstMCPSchema(t *testing.T) {
	elicit := mcpSchema(t, "2025-06-18", "#/definitions/ElicitRequest")
	block := mcpSchema(t, "2025-06-18", "#/definitions/ContentBlock")
	s := start(t, options{})

	s.send("about", "show me the About page")
	id, q := s.question("about", 1)
	s.answer("about", id, schema.ActionAccept, map[string]any{"id": q.RequestedSchema.Properties["id"].Enum[0]})
	s.completed("about", 1)

	s.send("event", "create an event for the launch party")
	id, _ = s.question("event", 1)
	s.answer("event", id, schema.ActionAccept, map[string]any{"title": "Launch", "date": "2026-12-01"})
	s.completed("event", 1)

	s.send("delete", deleteDrafts)
	id, _ = s.question("delete", 1)
	s.answer("delete", id, schema.ActionAccept, nil)
	s.completed("delete", 1)

	n, blocks := 0, 0
	for _, thread := range []string{"about", "event", "delete"} {
		for _, e := range s.rec.matching(thread, events.TypeElicitationRequested) {
			n++
			req := []byte(`{"method":"elicitation/create","params":` + string(e.Data()) + `}`)
			validateJSON(t, elicit, thread+" elicitation.requested", req)
		}
		for _, e := range s.rec.matching(thread, events.TypeTurnCompleted) {
			tc, err := events.Data[events.TurnCompleted](e)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tc.Message.Content {
				blocks++
				validateJSON(t, block, thread+" content block", []byte(mustJSON(c)))
			}
		}
	}
	if n != 3 || blocks == 0 {
		t.Fatalf("checked %d elicitations and %d blocks, want 3 and some", n, blocks)
	}
}
