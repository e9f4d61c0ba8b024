package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/google/uuid"
)

// Header is a NATS message header: a map of header names to values. It has
// the same underlying type as nats.Header and converts to it directly.
// Lookups are case-sensitive, as in nats.go: the codec writes and reads
// lowercase "ce-" names.
type Header = map[string][]string

const (
	headerPrefix      = "ce-"
	headerContentType = "Content-Type"
	// DataContentTypeJSON is the datacontenttype of every parley event.
	DataContentTypeJSON = "application/json"
)

// DataSchemaBase prefixes each event type's dataschema URI.
const DataSchemaBase = "https://parley.dev/schema/"

// New returns an event with a fresh UUIDv7 ID, the given source, type and
// subject (the thread ID, or "" for none), the current time, and data
// marshalled as JSON. It fails only when data cannot be marshalled.
func New(source string, typ Type, subject string, data any) (*event.Event, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("generating event id: %w", err)
	}
	return NewWithID(id.String(), source, typ, subject, data)
}

// NewWithID is New with a caller-chosen ID, for events whose ID must be the
// same on every retry (see DerivedID), so JetStream drops the copy.
func NewWithID(id, source string, typ Type, subject string, data any) (*event.Event, error) {
	e := event.New()
	e.SetID(id)
	e.SetSource(source)
	e.SetType(typ)
	if subject != "" {
		e.SetSubject(subject)
	}
	e.SetTime(time.Now().UTC())
	e.SetDataSchema(DataSchemaBase + typ + ".json")
	if err := e.SetData(DataContentTypeJSON, data); err != nil {
		return nil, fmt.Errorf("encoding %s data: %w", typ, err)
	}
	return &e, nil
}

var derivedNamespace = uuid.MustParse("6f6c3c5e-6a36-4e43-9d2a-7061726c6579")

// DerivedID returns a deterministic UUID (version 5) for the parts, so an
// event produced again after a crash has the same ID and the same
// Nats-Msg-Id.
func DerivedID(parts ...string) string {
	return uuid.NewSHA1(derivedNamespace, []byte(strings.Join(parts, "\x00"))).String()
}

// Data decodes the event's JSON data into a T. The error says which type
// failed to decode and why.
func Data[T any](e *event.Event) (T, error) {
	var v T
	if len(e.Data()) == 0 {
		return v, fmt.Errorf("data: required for %s", e.Type())
	}
	if err := json.Unmarshal(e.Data(), &v); err != nil {
		return v, fmt.Errorf("data: decoding %s: %w", e.Type(), err)
	}
	return v, nil
}

// Encode writes e in CloudEvents binary content mode for NATS: every
// attribute and extension as a lowercase "ce-<name>" header (values in
// canonical string form, percent-encoded), and the data as the body. It
// fails when e is not a valid CloudEvent (the error names the attribute).
func Encode(e *event.Event) (Header, []byte, error) {
	if err := e.Validate(); err != nil {
		return nil, nil, fmt.Errorf("invalid event: %w", err)
	}
	h := make(Header, 8+len(e.Extensions()))
	set := func(name, value string) { h[headerPrefix+name] = []string{pctEncode(value)} }
	set("specversion", e.SpecVersion())
	set("id", e.ID())
	set("source", e.Source())
	set("type", e.Type())
	if s := e.Subject(); s != "" {
		set("subject", s)
	}
	if !e.Time().IsZero() {
		set("time", types.FormatTime(e.Time()))
	}
	if ct := e.DataContentType(); ct != "" {
		set("datacontenttype", ct)
	}
	if ds := e.DataSchema(); ds != "" {
		set("dataschema", ds)
	}
	for name, v := range e.Extensions() {
		s, err := types.Format(v)
		if err != nil {
			return nil, nil, fmt.Errorf("extension %s: %w", name, err)
		}
		set(name, s)
	}
	return h, e.Data(), nil
}

// AttributeError is Decode's error for one CloudEvents attribute: it names
// the attribute as its NATS header ("ce-id", "ce-source", …) and the rule
// the value broke, so a worker can reject the event naming the field.
type AttributeError struct {
	// Header is the attribute's header name, e.g. "ce-id".
	Header string
	// Rule says what is wrong, e.g. "malformed percent-encoding at byte 3".
	Rule string
	// Err is the underlying error, if any (e.g. ErrNotCloudEvent).
	Err error
}

// Error returns "<header>: <rule>".
func (e *AttributeError) Error() string { return e.Header + ": " + e.Rule }

// Unwrap returns the underlying error.
func (e *AttributeError) Unwrap() error { return e.Err }

func attrErr(header, format string, args ...any) *AttributeError {
	return &AttributeError{Header: header, Rule: fmt.Sprintf(format, args...)}
}

// ErrNotCloudEvent is wrapped by Decode's error when a message carries no
// "ce-specversion" header and no structured-mode Content-Type.
var ErrNotCloudEvent = errors.New("not a CloudEvent")

// Decode reads a CloudEvent from a NATS message's headers and body: binary
// mode, or structured mode when Content-Type starts with
// "application/cloudevents". A missing or invalid required attribute
// (specversion, id, source, type) or a malformed optional one fails with an
// error that names its header, e.g. "ce-source: required"; in binary mode
// that error is an *AttributeError. Values are checked after
// percent-decoding: source must be a URI-reference, dataschema a URI, time
// an RFC 3339 timestamp, datacontenttype a media type.
func Decode(h Header, body []byte) (*event.Event, error) {
	if ct := first(h, headerContentType); strings.HasPrefix(strings.ToLower(ct), "application/cloudevents") {
		e := event.New()
		if err := json.Unmarshal(body, &e); err != nil {
			return nil, fmt.Errorf("structured cloudevent: %w", err)
		}
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("structured cloudevent: %w", err)
		}
		return &e, nil
	}
	get := func(name string) (string, bool, error) {
		vs, ok := h[headerPrefix+name]
		if !ok || len(vs) == 0 {
			return "", false, nil
		}
		v, err := pctDecode(vs[0])
		if err != nil {
			return "", true, attrErr(headerPrefix+name, "%v", err)
		}
		return v, true, nil
	}
	sv, ok, err := get("specversion")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &AttributeError{Header: "ce-specversion", Rule: fmt.Sprintf("required (%v)", ErrNotCloudEvent), Err: ErrNotCloudEvent}
	}
	if sv != event.CloudEventsVersionV1 {
		return nil, attrErr("ce-specversion", "%q is not supported (want %q)", sv, event.CloudEventsVersionV1)
	}
	e := event.New()
	for _, name := range []string{"id", "source", "type"} {
		v, ok, err := get(name)
		if err != nil {
			return nil, err
		}
		if !ok || v == "" {
			return nil, attrErr(headerPrefix+name, "required")
		}
		switch name {
		case "id":
			e.SetID(v)
		case "source":
			if types.ParseURIRef(v) == nil {
				return nil, attrErr("ce-source", "%q is not a URI-reference", v)
			}
			e.SetSource(v)
		case "type":
			e.SetType(v)
		}
	}
	for name, vs := range h {
		lname, isCE := strings.CutPrefix(name, headerPrefix)
		if !isCE || len(vs) == 0 {
			continue
		}
		v, err := pctDecode(vs[0])
		if err != nil {
			return nil, attrErr(name, "%v", err)
		}
		switch lname {
		case "specversion", "id", "source", "type":
		case "subject":
			e.SetSubject(v)
		case "time":
			t, err := types.ParseTime(v)
			if err != nil {
				return nil, attrErr("ce-time", "%q is not an RFC 3339 timestamp", v)
			}
			e.SetTime(t)
		case "datacontenttype":
			if _, _, err := mime.ParseMediaType(v); err != nil {
				return nil, attrErr("ce-datacontenttype", "%q is not a media type (RFC 2045)", v)
			}
			e.SetDataContentType(v)
		case "dataschema":
			if types.ParseURI(v) == nil {
				return nil, attrErr("ce-dataschema", "%q is not a URI", v)
			}
			e.SetDataSchema(v)
		default:
			if !validExtensionName(lname) {
				return nil, attrErr(name, "extension name must be lowercase a-z and 0-9")
			}
			e.SetExtension(lname, v)
		}
	}
	if len(body) > 0 {
		e.DataEncoded = body
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("invalid cloudevent: %w", err)
	}
	return &e, nil
}

func first(h Header, k string) string {
	if vs := h[k]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func validExtensionName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

const upperhex = "0123456789ABCDEF"

// pctEncode percent-encodes space, '"', '%' and every byte outside
// U+0021..U+007E, as the CloudEvents NATS binding requires.
func pctEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b = append(b, '%', upperhex[c>>4], upperhex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func needsEscape(c byte) bool { return c <= 0x20 || c >= 0x7F || c == '"' || c == '%' }

// pctDecode reverses pctEncode and rejects malformed escapes and invalid UTF-8.
func pctDecode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		if !utf8.ValidString(s) {
			return "", errors.New("value is not valid UTF-8")
		}
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
			return "", fmt.Errorf("malformed percent-encoding at byte %d", i)
		}
		b = append(b, byte(unhex(s[i+1])<<4|unhex(s[i+2])))
		i += 2
	}
	if !utf8.Valid(b) {
		return "", errors.New("value is not valid UTF-8")
	}
	return string(b), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
