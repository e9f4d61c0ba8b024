package schema

import (
	"strings"
	"testing"
)

// TestDecodeToolTolerant (at the decoding level): a string
// readOnlyHint makes the annotations unreadable, and the definition is read
// without them (MCP defaults: destructive), the rule reported; a definition
// whose name is unreadable is still an error.
func TestDecodeToolTolerant(t *testing.T) {
	tool, ignored, err := DecodeToolTolerant([]byte(`{"name":"wipe","inputSchema":{"type":"object"},` +
		`"annotations":{"readOnlyHint":"true"},"_meta":{"drupal.org/ai.entity":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	if tool.Name != "wipe" || tool.Annotations != nil || !ConfirmByAnnotation(tool.Annotations) {
		t.Errorf("tool = %+v, want name wipe without annotations (confirm)", tool)
	}
	var got []string
	for _, v := range ignored {
		got = append(got, v.String())
	}
	if s := strings.Join(got, "; "); !strings.Contains(s, "annotations.readOnlyHint: must be a boolean") {
		t.Errorf("ignored = %q, want the readOnlyHint rule", s)
	}
	if _, _, err := DecodeToolTolerant([]byte(`{"name":5,"inputSchema":{"type":"object"}}`)); err == nil {
		t.Error("an unreadable name was accepted")
	}
	if _, _, err := DecodeToolTolerant([]byte(`[1]`)); err == nil {
		t.Error("a non-object was accepted")
	}
	ok, ignored, err := DecodeToolTolerant([]byte(`{"name":"read","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`))
	if err != nil || len(ignored) > 0 || !ok.Annotations.ReadOnly() {
		t.Errorf("a good definition: %+v, %v, %v", ok, ignored, err)
	}
}
