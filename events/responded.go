package events

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/parley-dev/parley/schema"
)

// UnmarshalJSON decodes an elicitation.responded payload. A decline or
// cancel is always honoured: MCP gives those actions no content, so a
// content that is not an object (a string, a number, an array) is dropped
// rather than failing the whole answer and leaving the question open. An
// accept whose content is not an object fails, naming data.content.
func (r *ElicitationResponded) UnmarshalJSON(b []byte) error {
	type plain ElicitationResponded
	var raw struct {
		plain
		Content json.RawMessage `json:"content,omitempty"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*r = ElicitationResponded(raw.plain)
	r.Content = nil
	c := bytes.TrimSpace(raw.Content)
	if len(c) == 0 || bytes.Equal(c, []byte("null")) {
		return nil
	}
	if c[0] != '{' {
		if r.Action == schema.ActionDecline || r.Action == schema.ActionCancel {
			return nil
		}
		return fmt.Errorf("data.content: must be an object (MCP ElicitResult.content), got %s", jsonKind(c[0]))
	}
	return json.Unmarshal(c, &r.Content)
}

func jsonKind(first byte) string {
	switch first {
	case '"':
		return "a string"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}
