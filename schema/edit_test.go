package schema

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCheckEdit(t *testing.T) {
	tool := &Tool{Name: "delete_entities", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"ids":{"type":"array","items":{"type":"string"},"minItems":1}},"required":["ids"],"additionalProperties":false}`)}
	confirm := NewConfirmationRequest(tool, ToolCall{ID: "c1", Name: "delete_entities", Arguments: json.RawMessage(`{"ids":["a","b"]}`)})
	noSchema := NewConfirmationRequest(&Tool{Name: "x"}, ToolCall{ID: "c1", Name: "x", Arguments: json.RawMessage(`{}`)})
	form := &ElicitRequestParams{Message: "m", RequestedSchema: RequestedSchema{Type: "object"}}
	tests := []struct {
		name     string
		req      *ElicitRequestParams
		raw      string
		want     string // canonical arguments, or "" on error
		wantPath string
		wantRule string
	}{
		{"valid edit, canonical", confirm, `{ "ids" : ["b"] }`, `{"ids":["b"]}`, "", ""},
		{"empty list", confirm, `{"ids":[]}`, "", `_meta["dev.parley/arguments"].ids`, "minItems"},
		{"unknown member", confirm, `{"ids":["a"],"all":true}`, "", `_meta["dev.parley/arguments"].all`, "false"},
		{"not an object", confirm, `["a"]`, "", `_meta["dev.parley/arguments"]`, "must be a JSON object"},
		{"duplicate member", confirm, `{"ids":["a"],"ids":["b"]}`, "", `_meta["dev.parley/arguments"]`, "duplicate"},
		{"too large", confirm, `{"ids":["` + strings.Repeat("a", MaxEditedArgumentsBytes) + `"]}`, "", `_meta["dev.parley/arguments"]`, "over the limit"},
		{"a form", form, `{"ids":["a"]}`, "", `_meta["dev.parley/arguments"]`, "only the answer to a tool confirmation"},
		{"no schema offered", noSchema, `{}`, "", `_meta["dev.parley/arguments"]`, "offers no edit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckEdit(tt.req, json.RawMessage(tt.raw))
			if tt.want != "" {
				if err != nil || string(got) != tt.want {
					t.Fatalf("CheckEdit = %s, %v; want %s", got, err, tt.want)
				}
				return
			}
			vs := Violations(err)
			if len(vs) == 0 {
				t.Fatalf("CheckEdit = %s, nil; want a violation at %s", got, tt.wantPath)
			}
			if vs[0].Path != tt.wantPath || !strings.Contains(strings.ToLower(vs[0].Rule), strings.ToLower(tt.wantRule)) {
				t.Errorf("CheckEdit violation = %+v; want path %s, rule containing %q", vs[0], tt.wantPath, tt.wantRule)
			}
		})
	}
}

func TestConfirmationOmitsLargeSchema(t *testing.T) {
	big := `{"type":"object","description":"` + strings.Repeat("x", MaxEditSchemaBytes) + `"}`
	p := NewConfirmationRequest(&Tool{Name: "t", InputSchema: json.RawMessage(big)}, ToolCall{ID: "c", Name: "t"})
	if _, ok := p.InputSchemaOf(); ok {
		t.Errorf("a confirmation carried an input schema over MaxEditSchemaBytes")
	}
	if !SameArguments(json.RawMessage(`{"a":1,"b":[2]}`), json.RawMessage(` {"b":[2], "a":1}`)) {
		t.Errorf("SameArguments of one value in two encodings = false")
	}
}
