package events

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/parley-dev/parley/schema"
)

// A decline or cancel is honoured whatever its content; an accept needs an
// object, and the error names data.content.
func TestElicitationRespondedContent(t *testing.T) {
	for _, c := range []struct {
		body    string
		wantErr string
		keys    int
	}{
		{`{"elicitationId":"q","action":"decline","content":"a string"}`, "", 0},
		{`{"elicitationId":"q","action":"cancel","content":[1,2]}`, "", 0},
		{`{"elicitationId":"q","action":"decline","content":7}`, "", 0},
		{`{"elicitationId":"q","action":"decline","content":{"instructions":"no"}}`, "", 1},
		{`{"elicitationId":"q","action":"accept","content":null}`, "", 0},
		{`{"elicitationId":"q","action":"accept","content":{"a":1,"b":"x"}}`, "", 2},
		{`{"elicitationId":"q","action":"accept","content":"a string"}`, "data.content: must be an object", 0},
	} {
		var r ElicitationResponded
		err := json.Unmarshal([]byte(c.body), &r)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.body, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: err = %v, want %q", c.body, err, c.wantErr)
		case err == nil && (r.ElicitationID != "q" || len(r.Content) != c.keys):
			t.Errorf("%s: decoded %+v, want id q and %d content keys", c.body, r, c.keys)
		}
	}
	var r ElicitationResponded
	if err := json.Unmarshal([]byte(`{"elicitationId":"q","action":"decline","content":"x","_meta":{"k":"v"},"answeredBy":"ann"}`), &r); err != nil ||
		r.Action != schema.ActionDecline || r.AnsweredBy != "ann" || r.Meta["k"] != "v" {
		t.Errorf("other fields lost: %+v, %v", r, err)
	}
}
