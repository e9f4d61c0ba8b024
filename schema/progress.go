package schema

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
)

// MethodProgress is the JSON-RPC method of an MCP progress notification.
const MethodProgress = "notifications/progress"

// ProgressToken is an MCP progress token (MCP 2025-06-18 schema,
// ProgressToken): a string or an integer, chosen by the requester and echoed
// by every progress notification. Tokens are comparable, so they can key a
// map of active requests. The zero ProgressToken is "no token".
type ProgressToken struct {
	s     string
	n     int64
	isInt bool
}

// StringToken returns the string progress token s.
func StringToken(s string) ProgressToken { return ProgressToken{s: s} }

// IntToken returns the integer progress token n.
func IntToken(n int64) ProgressToken { return ProgressToken{n: n, isInt: true} }

// IsZero reports whether t is the zero token (no token).
func (t ProgressToken) IsZero() bool { return t == ProgressToken{} }

// IsInt reports whether t is an integer token.
func (t ProgressToken) IsInt() bool { return t.isInt }

// Int returns the integer of an integer token (0 for a string token).
func (t ProgressToken) Int() int64 { return t.n }

// String returns the token's text: the string itself, or the integer in
// decimal.
func (t ProgressToken) String() string {
	if t.isInt {
		return strconv.FormatInt(t.n, 10)
	}
	return t.s
}

// Equal reports whether t and u are the same token (a string token never
// equals an integer token).
func (t ProgressToken) Equal(u ProgressToken) bool { return t == u }

// MarshalJSON encodes a JSON string or integer.
func (t ProgressToken) MarshalJSON() ([]byte, error) {
	if t.isInt {
		return strconv.AppendInt(nil, t.n, 10), nil
	}
	return json.Marshal(t.s)
}

// UnmarshalJSON accepts a JSON string or an integer (a whole number that
// fits in 64 bits, e.g. 7 or 7.0); null leaves t unchanged; anything else is
// an error.
func (t *ProgressToken) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = StringToken(s)
		return nil
	}
	if n, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		*t = IntToken(n)
		return nil
	}
	if f, err := strconv.ParseFloat(string(b), 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		*t = IntToken(int64(f))
		return nil
	}
	return &ValidationError{Violations: []Violation{{"", "progress token must be a string or an integer"}}}
}

// Progress is the params object of an MCP `notifications/progress`
// notification (MCP 2025-06-18 schema, ProgressNotification.params;
// 2025-11-25, ProgressNotificationParams): the token of the request it
// reports on, the progress so far, the total when known, and an optional
// message. Progress and Total are plain numbers in the tool's own unit (items,
// bytes, steps) and may be fractional; Progress must increase with every
// notification for a token.
type Progress struct {
	ProgressToken ProgressToken `json:"progressToken"`
	Progress      float64       `json:"progress"`
	Total         *float64      `json:"total,omitempty"`
	Message       string        `json:"message,omitempty"`
	Meta          Meta          `json:"_meta,omitzero"`
}

// Validate checks one notification: a token is set, progress and total are
// finite numbers, progress is not negative, total (when set) is not
// negative, and _meta is valid. The error is a *ValidationError.
func (p *Progress) Validate() error {
	var vs violations
	if p.ProgressToken.IsZero() {
		vs.add("progressToken", "required")
	}
	if !isFinite(p.Progress) || p.Progress < 0 {
		vs.add("progress", "must be a finite number ≥ 0")
	}
	if p.Total != nil && (!isFinite(*p.Total) || *p.Total < 0) {
		vs.add("total", "must be a finite number ≥ 0")
	}
	vs.merge("", p.Meta.Validate())
	return vs.err()
}

// ValidateAfter checks p (see Validate) as the notification that follows
// prev for the same request: the same token and a progress strictly greater
// than prev's ("progress: must increase (was 3, now 3)"). A nil prev checks
// p alone. The error is a *ValidationError.
func (p *Progress) ValidateAfter(prev *Progress) error {
	var vs violations
	vs.merge("", p.Validate())
	if prev != nil {
		if p.ProgressToken != prev.ProgressToken {
			vs.addf("progressToken", "must be the same token (was %s, now %s)", prev.ProgressToken, p.ProgressToken)
		} else if !(p.Progress > prev.Progress) {
			vs.addf("progress", "must increase (was %v, now %v)", prev.Progress, p.Progress)
		}
	}
	return vs.err()
}

// UnmarshalJSON decodes the notification params; a missing progressToken
// or progress is an error naming the field.
func (p *Progress) UnmarshalJSON(b []byte) error {
	type wire Progress
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		var ve *ValidationError
		if asValidation(err, &ve) {
			return &ValidationError{Violations: []Violation{{"progressToken", "must be a string or an integer"}}}
		}
		return decodeError(err)
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	var vs violations
	for _, k := range []string{"progressToken", "progress"} {
		if v, ok := m[k]; !ok || string(v) == "null" {
			vs.add(k, "required")
		}
	}
	*p = Progress(w)
	return vs.err()
}

func asValidation(err error, ve **ValidationError) bool {
	e, ok := err.(*ValidationError)
	if ok {
		*ve = e
	}
	return ok
}
