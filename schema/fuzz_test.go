package schema

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	kjs "github.com/kaptinlin/jsonschema"
)

// FuzzUnmarshalContent decodes arbitrary bytes as a content block: it must
// not panic, and a block it accepts must validate and survive a round trip.
func FuzzUnmarshalContent(f *testing.F) {
	for _, c := range emittedBlocks() {
		b, _ := json.Marshal(c)
		f.Add(b)
	}
	f.Add([]byte(`{"type":"image","data":"!!","mimeType":""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := UnmarshalContent(data)
		if err != nil {
			return
		}
		if err := ValidateContent(c); err != nil {
			t.Fatalf("accepted block fails ValidateContent: %v", err)
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		c2, err := UnmarshalContent(b)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		if diff := cmp.Diff(c, c2); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

// FuzzNewElicitRequest builds requests from arbitrary requested schemas:
// no panic, and an accepted request encodes, decodes and validates again.
func FuzzNewElicitRequest(f *testing.F) {
	f.Add([]byte(`{"type":"object","properties":{"a":{"type":"string","format":"email"}},"required":["a"]}`), false)
	f.Add([]byte(`{"type":"object","properties":{"m":{"type":"array","items":{"anyOf":[{"const":"x","title":"X"}]},"default":["x"]}}}`), true)
	f.Add([]byte(`{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":0,"default":1.5}}}`), true)
	f.Fuzz(func(t *testing.T, schema []byte, extended bool) {
		var rs RequestedSchema
		if json.Unmarshal(schema, &rs) != nil {
			return
		}
		rev := Rev20250618
		if extended {
			rev = Rev20251125
		}
		p, err := NewElicitRequest("m", rs, &ElicitOptions{Revision: rev})
		if err != nil {
			if _, ok := err.(*ValidationError); !ok {
				t.Fatalf("error is %T", err)
			}
			return
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back ElicitRequestParams
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", b, err)
		}
		if err := back.Validate(rev); err != nil {
			t.Fatalf("re-validating %s: %v", b, err)
		}
	})
}

// FuzzElicitResultValidate checks arbitrary results against arbitrary
// valid requests: no panic, errors are *ValidationError, and content this
// package accepts is also accepted by a general JSON Schema validator
// (kaptinlin/jsonschema) given the same requested schema.
func FuzzElicitResultValidate(f *testing.F) {
	f.Add([]byte(`{"type":"object","properties":{"a":{"type":"string","minLength":1},"n":{"type":"integer","maximum":5}},"required":["a"]}`), []byte(`{"action":"accept","content":{"a":"x","n":3}}`))
	f.Add([]byte(`{"type":"object","properties":{"m":{"type":"array","items":{"type":"string","enum":["x","y"]},"maxItems":1}}}`), []byte(`{"action":"accept","content":{"m":["x","y"]}}`))
	f.Add([]byte(`{"type":"object","properties":{"instructions":{"type":"string"}}}`), []byte(`{"action":"decline","content":{"instructions":"no"}}`))
	f.Fuzz(func(t *testing.T, schema, result []byte) {
		var rs RequestedSchema
		if json.Unmarshal(schema, &rs) != nil {
			return
		}
		req, err := NewElicitRequest("m", rs, &ElicitOptions{Revision: Rev20251125})
		if err != nil {
			return
		}
		var res ElicitResult
		if json.Unmarshal(result, &res) != nil {
			return
		}
		err = res.Validate(req)
		if err != nil {
			if _, ok := err.(*ValidationError); !ok {
				t.Fatalf("error is %T", err)
			}
			return
		}
		if res.Action != ActionAccept || res.Content == nil {
			return
		}
		// Cross-check with a general validator; enumNames is not
		// standard, drop it.
		raw, _ := json.Marshal(req.RequestedSchema)
		var generic map[string]any
		_ = json.Unmarshal(raw, &generic)
		for _, p := range generic["properties"].(map[string]any) {
			delete(p.(map[string]any), "enumNames")
			delete(p.(map[string]any), "default")
		}
		raw, _ = json.Marshal(generic)
		s, err := kjs.NewCompiler().Compile(raw)
		if err != nil {
			return
		}
		content, _ := json.Marshal(res.Content)
		if r := s.ValidateJSON(content); !r.IsValid() {
			t.Fatalf("schema %s accepts %s here but not in kaptinlin/jsonschema: %v", raw, content, r.ToList())
		}
	})
}
