package schema

import (
	"bytes"
	"encoding/json"
	"strings"
)

// A person may accept a tool confirmation with changed arguments ("delete
// only article-2"). MCP form content is a flat object of primitives, so
// the edited arguments travel in parley's own _meta key of the answer
// (MetaArguments); the confirmation offers the edit by carrying the
// tool's input schema (MetaInputSchema), which is what the edit is
// checked against and what a client builds its fields from.

// MetaArguments is the _meta key of an elicitation.responded answer that
// accepts a tool confirmation with changed arguments: a JSON object, the
// complete arguments the person wants run instead of the model's. Valid
// only with action accept on a confirmation that carries
// MetaInputSchema; at most MaxEditedArgumentsBytes.
const MetaArguments = "dev.parley/arguments"

// MetaInputSchema is the _meta key of a tool confirmation (the params of
// its elicitation/create) that carries the registered tool's inputSchema
// (a JSON Schema object): the edit of the arguments it offers is checked
// against it. The agent sets it from the trusted tool definition; it is
// absent when the schema is over MaxEditSchemaBytes, and then the
// confirmation takes no edit.
const MetaInputSchema = "dev.parley/input_schema"

// MaxEditedArgumentsBytes bounds the edited arguments of one answer, as
// compact JSON: 8 KiB. A larger edit is refused (invalid_content naming
// _meta["dev.parley/arguments"]); the question stays open.
const MaxEditedArgumentsBytes = 8 << 10

// MaxEditSchemaBytes bounds the input schema a confirmation carries for
// editing, as compact JSON: 16 KiB. A tool with a larger schema is
// confirmed without MetaInputSchema (its arguments cannot be edited).
const MaxEditSchemaBytes = 16 << 10

// EditPath is the path violations of edited arguments are reported
// under: `_meta["dev.parley/arguments"]`, then the property path
// (`_meta["dev.parley/arguments"].ids`).
var EditPath = metaPath(MetaArguments)

// InputSchemaOf returns the input schema a confirmation carries
// (MetaInputSchema) as JSON, and whether it carries one.
func (p *ElicitRequestParams) InputSchemaOf() (json.RawMessage, bool) {
	v, ok := p.Meta[MetaInputSchema]
	if !ok || v == nil {
		return nil, false
	}
	if raw, ok := v.(json.RawMessage); ok {
		return raw, true
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return raw, true
}

// CheckEdit checks edited arguments raw (the JSON of _meta
// ["dev.parley/arguments"] as received) for the confirmation req: req must
// be a tool confirmation offering edits (MetaInputSchema), raw a JSON
// object of at most MaxEditedArgumentsBytes that fits the input schema.
// It returns the canonical arguments (CanonicalArguments: members sorted,
// numbers as written) to run, or a *ValidationError whose paths start
// with EditPath.
func CheckEdit(req *ElicitRequestParams, raw json.RawMessage) (json.RawMessage, error) {
	var vs violations
	if !req.IsToolConfirmation() {
		vs.add(EditPath, "only the answer to a tool confirmation may change a call's arguments")
		return nil, vs.err()
	}
	inputSchema, ok := req.InputSchemaOf()
	if !ok {
		vs.add(EditPath, "this confirmation offers no edit of its arguments (it carries no _meta[\"dev.parley/input_schema\"])")
		return nil, vs.err()
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		vs.add(EditPath, "must be a JSON object: the complete arguments to run")
		return nil, vs.err()
	}
	canon, err := CanonicalArguments(raw)
	if err != nil {
		vs.add(EditPath, err.Error())
		return nil, vs.err()
	}
	if len(canon) > MaxEditedArgumentsBytes {
		vs.addf(EditPath, "%d bytes is over the limit of %d", len(canon), MaxEditedArgumentsBytes)
		return nil, vs.err()
	}
	tool := Tool{InputSchema: inputSchema}
	if err := tool.ValidateArguments(canon); err != nil {
		for _, v := range Violations(err) {
			p := strings.TrimPrefix(strings.TrimPrefix(v.Path, "arguments"), ".")
			vs.add(joinPath(EditPath, p), v.Rule)
		}
		return nil, vs.err()
	}
	return canon, nil
}

// SameArguments reports whether a and b are the same arguments
// (CanonicalArguments of each is equal); false when either cannot be
// read.
func SameArguments(a, b json.RawMessage) bool {
	ca, err := CanonicalArguments(a)
	if err != nil {
		return false
	}
	cb, err := CanonicalArguments(b)
	return err == nil && bytes.Equal(ca, cb)
}

// editSchema returns the compact input schema of tool for a confirmation
// (MetaInputSchema), or nil when it has none or it is over
// MaxEditSchemaBytes.
func editSchema(tool *Tool) json.RawMessage {
	if len(tool.InputSchema) == 0 || isNull(tool.InputSchema) {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, tool.InputSchema) != nil || b.Len() > MaxEditSchemaBytes {
		return nil
	}
	return json.RawMessage(b.Bytes())
}
