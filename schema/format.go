package schema

import (
	"encoding/base64"
	"math"
	"mime"
	"net/mail"
	"net/url"
	"strings"
)

// The string formats MCP allows in an elicitation's StringSchema. They are
// checked for real by this package: the Go SDK and many JSON Schema
// libraries treat "format" as an annotation only.
const (
	FormatEmail    = "email"     // an RFC 5321 mailbox, e.g. "ada@example.com"
	FormatURI      = "uri"       // an absolute RFC 3986 URI, e.g. "https://example.com/x"
	FormatDate     = "date"      // an RFC 3339 full-date, e.g. "2025-06-18"
	FormatDateTime = "date-time" // an RFC 3339 date-time, e.g. "2025-06-18T09:30:00Z"
)

// CheckFormat reports whether s is valid for format f (one of FormatEmail,
// FormatURI, FormatDate or FormatDateTime). It returns false for any other
// format.
func CheckFormat(f, s string) bool {
	switch f {
	case FormatEmail:
		return isEmail(s)
	case FormatURI:
		return isURI(s)
	case FormatDate:
		return isDate(s)
	case FormatDateTime:
		return isDateTime(s)
	}
	return false
}

// formatRule is the violation text for a value that breaks format f.
func formatRule(f string) string {
	switch f {
	case FormatEmail:
		return "must be an email address"
	case FormatURI:
		return "must be an absolute URI"
	case FormatDate:
		return "must be a date (YYYY-MM-DD)"
	case FormatDateTime:
		return "must be an RFC 3339 date-time"
	}
	return "has unknown format " + f
}

// isEmail accepts a bare RFC 5322 addr-spec with a domain, no display name
// and no surrounding whitespace.
func isEmail(s string) bool {
	if s == "" || strings.TrimSpace(s) != s || strings.ContainsAny(s, "<>\r\n") {
		return false
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != s {
		return false
	}
	at := strings.LastIndexByte(s, '@')
	return at > 0 && at < len(s)-1
}

// isURI accepts an absolute RFC 3986 URI: a scheme, then only URI
// characters with well-formed percent-encodings.
func isURI(s string) bool {
	colon := strings.IndexByte(s, ':')
	if colon < 1 {
		return false
	}
	for i := 0; i < colon; i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~:/?#[]@!$&'()*+,;=", c) >= 0:
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
		default:
			return false
		}
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme != ""
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// digits parses s[i:i+n] as a decimal number; ok is false if any byte is
// not a digit or s is too short.
func digits(s string, i, n int) (v int, ok bool) {
	if i+n > len(s) {
		return 0, false
	}
	for _, c := range []byte(s[i : i+n]) {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// isDate accepts an RFC 3339 full-date (YYYY-MM-DD) naming a real day.
func isDate(s string) bool {
	return len(s) == 10 && fullDate(s)
}

func fullDate(s string) bool {
	y, ok1 := digits(s, 0, 4)
	m, ok2 := digits(s, 5, 2)
	d, ok3 := digits(s, 8, 2)
	if !ok1 || !ok2 || !ok3 || s[4] != '-' || s[7] != '-' || m < 1 || m > 12 || d < 1 {
		return false
	}
	days := [...]int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[m-1]
	if m == 2 && y%4 == 0 && (y%100 != 0 || y%400 == 0) {
		days = 29
	}
	return d <= days
}

// isDateTime accepts an RFC 3339 date-time: full-date "T" partial-time
// time-offset, e.g. 2025-06-18T09:30:00.5+02:00 ("t" and "z" allowed, as
// RFC 3339 section 5.6 notes; a leap second only at minute 59).
func isDateTime(s string) bool {
	if len(s) < 20 || !fullDate(s[:10]) || (s[10] != 'T' && s[10] != 't') {
		return false
	}
	h, ok1 := digits(s, 11, 2)
	mi, ok2 := digits(s, 14, 2)
	sec, ok3 := digits(s, 17, 2)
	if !ok1 || !ok2 || !ok3 || s[13] != ':' || s[16] != ':' || h > 23 || mi > 59 || sec > 60 || (sec == 60 && mi != 59) {
		return false
	}
	rest := s[19:]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
			n++
		}
		if n == 1 {
			return false
		}
		rest = rest[n:]
	}
	switch {
	case rest == "Z" || rest == "z":
		return true
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, ok1 := digits(rest, 1, 2)
		om, ok2 := digits(rest, 4, 2)
		return ok1 && ok2 && oh <= 23 && om <= 59
	}
	return false
}

// isBase64 accepts standard, padded RFC 4648 base64 without line breaks.
func isBase64(s string) bool {
	if strings.ContainsAny(s, "\r\n") {
		return false
	}
	_, err := base64.StdEncoding.Strict().DecodeString(s)
	return err == nil
}

// isMediaType accepts a "type/subtype" media type with optional parameters.
func isMediaType(s string) bool {
	mt, _, err := mime.ParseMediaType(s)
	return err == nil && strings.Count(mt, "/") == 1 && !strings.HasPrefix(mt, "/") && !strings.HasSuffix(mt, "/")
}

func isFinite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
