package events

import (
	"errors"
	"strings"
	"testing"
)

// Attribute values are checked after decoding, in both content modes; the
// error names the attribute on one line and carries the id when readable.
func TestDecodeAttributeRules(t *testing.T) {
	binary := func(extra map[string]string) Header {
		h := Header{"ce-specversion": {"1.0"}, "ce-id": {"e1"}, "ce-source": {"/s"}, "ce-type": {"t"}}
		for k, v := range extra {
			h[k] = []string{v}
		}
		return h
	}
	structured := Header{"Content-Type": {"application/cloudevents+json"}}
	for _, c := range []struct {
		name     string
		h        Header
		body     string
		attr, id string
	}{
		{"source decodes to a space", binary(map[string]string{"ce-source": "a%20b"}), `{}`, "ce-source", "e1"},
		{"NUL in id", binary(map[string]string{"ce-id": "%00abc"}), `{}`, "ce-id", ""},
		{"control in subject", binary(map[string]string{"ce-subject": "t%0A1"}), `{}`, "ce-subject", "e1"},
		{"control in type", binary(map[string]string{"ce-type": "t%07"}), `{}`, "ce-type", "e1"},
		{"text/plain data", binary(map[string]string{"ce-datacontenttype": "text/plain"}), `{}`, "ce-datacontenttype", "e1"},
		{"relative dataschema", binary(map[string]string{"ce-dataschema": "schema.json"}), `{}`, "ce-dataschema", "e1"},
		{"dataschema with a space", binary(map[string]string{"ce-dataschema": "https://x/a%20b"}), `{}`, "ce-dataschema", "e1"},
		{"structured bad source", structured, `{"specversion":"1.0","id":"e2","source":"a b","type":"t"}`, "source", "e2"},
		{"structured bad dataschema", structured, `{"specversion":"1.0","id":"e3","source":"/s","type":"t","dataschema":"::"}`, "dataschema", "e3"},
		{"structured text/plain", structured, `{"specversion":"1.0","id":"e4","source":"/s","type":"t","datacontenttype":"text/plain"}`, "datacontenttype", "e4"},
		{"structured blank id", structured, `{"specversion":"1.0","id":" ","source":"/s","type":"t"}`, "id", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.h, []byte(c.body))
			var ae *AttributeError
			if !errors.As(err, &ae) {
				t.Fatalf("Decode error = %v, want an *AttributeError naming %s", err, c.attr)
			}
			if ae.Header != c.attr || ae.ID != c.id || strings.ContainsAny(ae.Rule, "\n\r") {
				t.Errorf("error %q (attribute %q, id %q), want attribute %q, id %q, one line", ae.Error(), ae.Header, ae.ID, c.attr, c.id)
			}
		})
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/cloudevents+json", "application/vnd.x+json"} {
		if _, err := Decode(binary(map[string]string{"ce-datacontenttype": ct}), []byte(`{}`)); err != nil {
			t.Errorf("datacontenttype %q: %v", ct, err)
		}
	}
	if _, err := Decode(binary(map[string]string{"ce-source": "https://example.com/a%2520b?x=1#f"}), []byte(`{}`)); err != nil {
		t.Errorf("a percent-encoded source (%%2520 on the wire) must stay valid: %v", err)
	}
}
