package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// CheckJSON checks JSON that came from outside (an event's data, an
// answer, a tool call's arguments, a policy's reply, an HTTP body) for
// what encoding/json accepts silently: a member name repeated in one
// object (encoding/json keeps the last, so {"action":"decline",
// "action":"accept"} reads as accept while a reader that keeps the first
// sees decline), and strings that are not valid Unicode (encoding/json
// replaces invalid UTF-8 and unpaired UTF-16 surrogate escapes with
// U+FFFD). RFC 8259 section 4 says names SHOULD be unique and section
// 8.1 that text MUST be UTF-8; I-JSON (RFC 7493) makes both a MUST.
//
// It returns nil or a *ValidationError with one violation whose path
// names the member (dotted, arrays as [i], "" for the top level), e.g.
// {Path: "content.name", Rule: `duplicate member "name"`}. JSON that is
// not well formed is left to the decoder that reads it next (nil, or a
// violation where the scan cannot go on). One pass, no allocation for
// objects of up to 16 members whose names have no escapes.
func CheckJSON(data []byte) error {
	var path [8]pathElem
	s := scanner{data: data, path: path[:0]}
	s.value(0)
	if s.bad == nil {
		return nil
	}
	return &ValidationError{Violations: []Violation{*s.bad}}
}

// maxCheckDepth bounds the nesting CheckJSON follows (encoding/json's own
// limit is 10000); deeper JSON is refused.
const maxCheckDepth = 10000

// scanner is CheckJSON's state: the input, the position, the path of
// the value being read (for the error), and the first violation found.
type scanner struct {
	data []byte
	pos  int
	path []pathElem
	bad  *Violation
}

// pathElem is one step of the path: a member name or an array index.
type pathElem struct {
	name  []byte
	index int
	isIdx bool
}

func (s *scanner) fail(rule string) {
	if s.bad != nil {
		return
	}
	var b bytes.Buffer
	for _, e := range s.path {
		if e.isIdx {
			fmt.Fprintf(&b, "[%d]", e.index)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.Write(e.name)
	}
	s.bad = &Violation{Path: b.String(), Rule: rule}
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// value reads one JSON value at depth.
func (s *scanner) value(depth int) {
	s.skipSpace()
	if s.pos >= len(s.data) || s.bad != nil {
		return
	}
	if depth > maxCheckDepth {
		s.fail(fmt.Sprintf("nested deeper than %d", maxCheckDepth))
		return
	}
	switch s.data[s.pos] {
	case '{':
		s.object(depth)
	case '[':
		s.array(depth)
	case '"':
		s.str()
	default:
		// A number or a literal: up to the next delimiter.
		for s.pos < len(s.data) {
			switch s.data[s.pos] {
			case ',', ']', '}', ' ', '\t', '\n', '\r':
				return
			}
			s.pos++
		}
	}
}

// smallObject is how many member names an object keeps in a slice before
// it switches to a map.
const smallObject = 16

func (s *scanner) object(depth int) {
	s.pos++ // '{'
	var (
		small [smallObject][]byte
		n     int
		large map[string]struct{}
	)
	for {
		s.skipSpace()
		if s.pos >= len(s.data) || s.bad != nil {
			return
		}
		switch s.data[s.pos] {
		case '}':
			s.pos++
			return
		case ',':
			s.pos++
			continue
		case '"':
		default:
			return // not well formed: the decoder says so
		}
		name, ok := s.str()
		if !ok {
			return
		}
		dup := false
		if large != nil {
			if _, dup = large[string(name)]; !dup {
				large[string(name)] = struct{}{}
			}
		} else {
			for _, k := range small[:n] {
				if bytes.Equal(k, name) {
					dup = true
					break
				}
			}
			if n < smallObject {
				small[n] = name
				n++
			} else {
				large = make(map[string]struct{}, 2*smallObject)
				for _, k := range small {
					large[string(k)] = struct{}{}
				}
				large[string(name)] = struct{}{}
			}
		}
		if dup {
			s.path = append(s.path, pathElem{name: name})
			s.fail(fmt.Sprintf("duplicate member %q (a member name may appear once in an object)", name))
			return
		}
		s.skipSpace()
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			return
		}
		s.pos++
		s.path = append(s.path, pathElem{name: name})
		s.value(depth + 1)
		s.path = s.path[:len(s.path)-1]
	}
}

func (s *scanner) array(depth int) {
	s.pos++ // '['
	for i := 0; ; {
		s.skipSpace()
		if s.pos >= len(s.data) || s.bad != nil {
			return
		}
		switch s.data[s.pos] {
		case ']':
			s.pos++
			return
		case ',':
			s.pos++
			i++
			continue
		}
		start := s.pos
		s.path = append(s.path, pathElem{index: i, isIdx: true})
		s.value(depth + 1)
		s.path = s.path[:len(s.path)-1]
		if s.pos == start {
			return // not well formed
		}
	}
}

// str reads a string at s.pos (its opening quote) and returns its value
// (for a member name); it checks that the string is valid UTF-8 and that
// its \u escapes pair their surrogates. A string without escapes is
// returned as a slice of the input, not copied.
func (s *scanner) str() ([]byte, bool) {
	s.pos++ // opening quote
	start := s.pos
	escaped := false
	ascii := true
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			raw := s.data[start:s.pos]
			s.pos++
			if !ascii && !utf8.Valid(raw) {
				s.fail("invalid UTF-8 in a string (" + badRune(raw) + ")")
				return nil, false
			}
			if !escaped {
				return raw, true
			}
			return s.unescape(raw)
		case c == '\\':
			escaped = true
			s.pos += 2
		case c >= utf8.RuneSelf:
			ascii = false
			s.pos++
		default:
			s.pos++
		}
	}
	return nil, false // unterminated: the decoder says so
}

// unescape decodes raw (a string's bytes between its quotes, with
// escapes), refusing an unpaired surrogate escape.
func (s *scanner) unescape(raw []byte) ([]byte, bool) {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case 'u':
			r, ok := hex4(raw, i+1)
			if !ok {
				return nil, false // not well formed: the decoder says so
			}
			i += 4
			if utf16.IsSurrogate(r) {
				var r2 rune = -1
				if r < 0xDC00 && i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					r2, _ = hex4(raw, i+3)
				}
				d := utf16.DecodeRune(r, r2)
				if d == utf8.RuneError {
					s.fail(fmt.Sprintf(`invalid UTF-16 in a string (\u%04X is half of a surrogate pair, without its other half)`, r))
					return nil, false
				}
				i += 6
				r = d
			}
			out = utf8.AppendRune(out, r)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		default: // '"', '\\', '/'
			out = append(out, raw[i])
		}
	}
	return out, true
}

// hex4 reads 4 hex digits of raw at i.
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[i:i+4]), 16, 32)
	return rune(n), err == nil
}

// badRune describes the first invalid byte of raw: its offset in the
// string and value.
func badRune(raw []byte) string {
	for i := 0; i < len(raw); {
		r, size := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Sprintf("byte 0x%02X at offset %d", raw[i], i)
		}
		i += size
	}
	return "a byte sequence that is not UTF-8"
}

// DecodeStrict decodes JSON from outside into v after CheckJSON: a
// duplicate member name or a string that is not valid Unicode fails
// (*ValidationError naming the member) rather than being read the way
// encoding/json reads them.
func DecodeStrict(data []byte, v any) error {
	if err := CheckJSON(data); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}
