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

// EditedArguments returns the raw JSON of _meta["dev.parley/arguments"]
// (schema.MetaArguments) in the data of an elicitation.responded, exactly
// as sent (numbers as written), and whether it is there. Decoding the
// answer into ElicitationResponded reads _meta generically, so the
// processor takes the edit from here to bind exactly what was sent.
func EditedArguments(data []byte) (json.RawMessage, bool) {
	var raw struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(data, &raw) != nil {
		return nil, false
	}
	v, ok := raw.Meta[schema.MetaArguments]
	if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return nil, false
	}
	return v, true
}
