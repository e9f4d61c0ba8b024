package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Violation is one rule a value breaks: Path names the field (a property
// name, or a dotted path such as "requestedSchema.properties.age.minimum"
// or "annotations.priority") and Rule says what is wrong.
type Violation struct {
	Path string `json:"path"`
	Rule string `json:"rule"`
}

// String formats the violation as "path: rule" (or just the rule when Path
// is empty).
func (v Violation) String() string {
	if v.Path == "" {
		return v.Rule
	}
	return v.Path + ": " + v.Rule
}

// ValidationError lists every violation found. Its Error text is one
// "path: rule" per violation, joined by "; ". Every validating function of
// this package returns its failures as a *ValidationError.
type ValidationError struct {
	Violations []Violation `json:"violations"`
}

// Error returns the violations as "path: rule", joined by "; ".
func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.String()
	}
	return strings.Join(parts, "; ")
}

// Violations returns the violations carried by err: those of a
// *ValidationError (found with errors.As), or, for any other non-nil error,
// one violation with an empty path and err's text. It returns nil for a nil
// error.
func Violations(err error) []Violation {
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve.Violations
	}
	return []Violation{{Rule: err.Error()}}
}

// violations collects Violations.
type violations []Violation

func (vs *violations) add(path, rule string) { *vs = append(*vs, Violation{path, rule}) }

func (vs *violations) addf(path, format string, args ...any) {
	vs.add(path, fmt.Sprintf(format, args...))
}

// merge appends the violations of err under prefix (joined with sep
// unless the inner path is empty or starts with "[").
func (vs *violations) merge(prefix string, err error) {
	for _, v := range Violations(err) {
		*vs = append(*vs, Violation{joinPath(prefix, v.Path), v.Rule})
	}
}

func joinPath(prefix, path string) string {
	switch {
	case prefix == "":
		return path
	case path == "":
		return prefix
	case strings.HasPrefix(path, "["):
		return prefix + path
	}
	return prefix + "." + path
}

func (vs violations) err() error {
	if len(vs) == 0 {
		return nil
	}
	return &ValidationError{Violations: vs}
}

// metaPath is the path of key k in a _meta object.
func metaPath(k string) string { return "_meta[" + strconv.Quote(k) + "]" }

// decodeError turns a JSON decoding error into a *ValidationError naming
// the field, or returns err unchanged when it names none.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &ValidationError{Violations: []Violation{{te.Field, "must be " + jsonTypeName(te.Type)}}}
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve
	}
	return err
}

// jsonTypeName names the JSON type a Go type decodes from.
func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.String {
			return "an array of strings"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a different type"
}

// unmarshalAs decodes b into w (a wire copy without methods), turning a
// field of the wrong JSON type into a *ValidationError naming it and
// prefixing the violations a member's own decoder returns (such as a
// ContentList's) with the member name in fields.
func unmarshalAs(b []byte, w any, fields ...string) error {
	err := json.Unmarshal(b, w)
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if errors.As(err, &ve) && len(fields) > 0 {
		// Find which member failed by decoding each alone.
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) == nil {
			for _, f := range fields {
				if raw, ok := m[f]; ok && !isNull(raw) {
					probe := reflect.New(reflect.TypeOf(w).Elem())
					if e := json.Unmarshal(mustObject(f, raw), probe.Interface()); e != nil {
						var vs violations
						vs.merge(f, e)
						return vs.err()
					}
				}
			}
		}
	}
	return decodeError(err)
}

func mustObject(field string, raw json.RawMessage) []byte {
	b, _ := json.Marshal(map[string]json.RawMessage{field: raw})
	return b
}
