package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// CanonicalArguments returns the canonical JSON of a tool call's arguments:
// the same value re-encoded with object members sorted by key, no
// insignificant whitespace, no HTML escaping, and numbers kept as written
// (decoded with UseNumber, so 10000000000000001 stays exact). Empty
// arguments and JSON null become {} (MCP: arguments are an optional
// object). Two encodings of one value have one canonical form, so the
// agent and the tool-executor hash the same bytes whatever re-encoding the
// call went through on the bus.
//
// It fails, naming the rule, when raw is not a single JSON value, is not an
// object, or repeats a member name in any object (JSON parsers differ on
// which duplicate wins, so a call with duplicates could be hashed as one
// value and executed as another).
func CanonicalArguments(raw json.RawMessage) ([]byte, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return []byte("{}"), nil
	}
	if err := noDuplicateNames(raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("arguments: not valid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("arguments: unexpected data after the JSON value")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("arguments: must be a JSON object")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // map keys are encoded sorted
		return nil, fmt.Errorf("arguments: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// ArgumentsSHA256 returns the lowercase hex SHA-256 of
// CanonicalArguments(raw): the digest a decision record binds a call's
// arguments with. Errors are CanonicalArguments'.
func ArgumentsSHA256(raw json.RawMessage) (string, error) {
	c, err := CanonicalArguments(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// noDuplicateNames fails on an object of raw that repeats a member name,
// and on a string that is not valid Unicode (CheckJSON), naming the
// member under "arguments".
func noDuplicateNames(raw []byte) error {
	if err := CheckJSON(raw); err != nil {
		v := Violations(err)[0]
		return fmt.Errorf("%s: %s", joinPath("arguments", v.Path), v.Rule)
	}
	return nil
}
