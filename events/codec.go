package events

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/google/uuid"

	"github.com/parley-dev/parley/schema"
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
	setSource(&e, source)
	e.SetType(string(typ))
	if subject != "" {
		e.SetSubject(subject)
	}
	e.SetTime(time.Now().UTC())
	setDataSchema(&e, DataSchemaBase+string(typ)+".json")
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

// InputData is Data for an event from outside parley (an integrator's
// turn.requested or elicitation.responded): data that repeats a member
// name in an object or holds a string that is not valid Unicode
// (schema.CheckJSON) fails with a *schema.ValidationError whose path
// starts with "data" (e.g. "data.message.text"), before anything is
// decoded: encoding/json would keep the last of the repeated members and
// read invalid text as U+FFFD. parley's own events are written by
// encoding/json and carry, verbatim, only what was checked on its way in
// (tool arguments: schema.CanonicalArguments), so Data does not check
// them again.
func InputData[T any](e *event.Event) (T, error) {
	if len(e.Data()) > 0 {
		if err := CheckData(e.Data()); err != nil {
			var v T
			return v, err
		}
	}
	return Data[T](e)
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

// CheckData is schema.CheckJSON for an event's data: its violation's
// path is prefixed with "data" ("data.content.name"; "data" for the top
// level).
func CheckData(data []byte) error {
	err := schema.CheckJSON(data)
	if err == nil {
		return nil
	}
	vs := schema.Violations(err)
	for i := range vs {
		vs[i].Path = strings.TrimSuffix("data."+vs[i].Path, ".")
		if strings.HasPrefix(vs[i].Path, "data.[") {
			vs[i].Path = "data" + vs[i].Path[len("data."):]
		}
	}
	return &schema.ValidationError{Violations: vs}
}

// Encode writes e in CloudEvents binary content mode for NATS: every
// attribute and extension as a lowercase "ce-<name>" header (values in
// canonical string form, percent-encoded), and the data as the body. It
// fails when e is not a valid CloudEvent (the error names the attribute).
func Encode(e *event.Event) (Header, []byte, error) {
	if err := valid(e); err != nil {
		return nil, nil, fmt.Errorf("invalid event: %w", err)
	}
	n := 8 + len(e.Extensions())
	h := make(Header, n)
	// One backing array for every header's single value.
	vals := make([]string, 0, n)
	set := func(header, value string) {
		vals = append(vals, pctEncode(value))
		h[header] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set("ce-specversion", e.SpecVersion())
	set("ce-id", e.ID())
	set("ce-source", e.Source())
	set("ce-type", e.Type())
	if s := e.Subject(); s != "" {
		set("ce-subject", s)
	}
	if !e.Time().IsZero() {
		set("ce-time", types.FormatTime(e.Time()))
	}
	if ct := e.DataContentType(); ct != "" {
		set("ce-datacontenttype", ct)
	}
	if ds := e.DataSchema(); ds != "" {
		set("ce-dataschema", ds)
	}
	for name, v := range e.Extensions() {
		s, err := types.Format(v)
		if err != nil {
			return nil, nil, fmt.Errorf("extension %s: %w", name, err)
		}
		set(headerPrefix+name, s)
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
	// ID is the event's id when it could be read (decoded and valid), so
	// a rejection can name the event; "" otherwise.
	ID string
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
// *AttributeError that names it ("ce-source" in binary mode, "source" in
// structured mode) and carries the event's id when that was readable.
// Values are checked after percent-decoding: source must be a
// URI-reference and dataschema a URI (RFC 3986), time an RFC 3339
// timestamp, datacontenttype a JSON media type (application/json or
// "+json": parley's events are JSON), and id, source, subject and type
// must not contain control characters.
func Decode(h Header, body []byte) (*event.Event, error) {
	if ct := first(h, headerContentType); strings.HasPrefix(strings.ToLower(ct), "application/cloudevents") {
		return decodeStructured(body)
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
	var id string
	withID := func(err error) error {
		var ae *AttributeError
		if errors.As(err, &ae) {
			ae.ID = id
		}
		return err
	}
	if v, ok, err := get("id"); err == nil && ok && strings.TrimSpace(v) != "" && checkAttr("ce-id", "id", v) == nil {
		id = v
	}
	for _, name := range [...]string{"id", "source", "type"} {
		v, ok, err := get(name)
		if err != nil {
			return nil, withID(err)
		}
		if !ok || v == "" {
			return nil, withID(attrErr(headerPrefix+name, "required"))
		}
		if err := checkAttr(headerPrefix+name, name, v); err != nil {
			return nil, withID(err)
		}
		switch name {
		case "id":
			e.SetID(v)
		case "source":
			setSource(&e, v)
		case "type":
			e.SetType(v)
		}
	}
	for name, vs := range h {
		lname, isCE := strings.CutPrefix(name, headerPrefix)
		if !isCE || len(vs) == 0 {
			continue
		}
		switch lname {
		case "specversion", "id", "source", "type":
			continue // read and checked above
		}
		v, err := pctDecode(vs[0])
		if err != nil {
			return nil, withID(attrErr(name, "%v", err))
		}
		switch lname {
		case "time":
			t, err := types.ParseTime(v)
			if err != nil {
				return nil, withID(attrErr(name, "%q is not an RFC 3339 timestamp", v))
			}
			e.SetTime(t)
			continue
		}
		if err := checkAttr(name, lname, v); err != nil {
			return nil, withID(err)
		}
		switch lname {
		case "subject":
			e.SetSubject(v)
		case "datacontenttype":
			e.SetDataContentType(v)
		case "dataschema":
			setDataSchema(&e, v)
		default:
			if !validExtensionName(lname) {
				return nil, withID(attrErr(name, "extension name must be lowercase a-z and 0-9"))
			}
			e.SetExtension(lname, v)
		}
	}
	if len(body) > 0 {
		e.DataEncoded = body
	}
	if err := valid(&e); err != nil {
		return nil, withID(sdkAttrErr(headerPrefix, err))
	}
	return &e, nil
}

// decodeStructured reads a structured-mode event (the whole event as a
// JSON object), checking its string attributes as Decode does; errors name
// the JSON member ("source") and carry the id when it was readable.
func decodeStructured(body []byte) (*event.Event, error) {
	if err := schema.CheckJSON(body); err != nil {
		v := schema.Violations(err)[0]
		return nil, &AttributeError{Header: cmp.Or(v.Path, "event"), Rule: v.Rule, Err: err}
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil || members == nil {
		return nil, &AttributeError{Header: "event", Rule: "structured cloudevent: must be a JSON object"}
	}
	var id string
	if raw, ok := members["id"]; ok {
		var v string
		if json.Unmarshal(raw, &v) == nil && strings.TrimSpace(v) != "" && checkAttr("id", "id", v) == nil {
			id = v
		}
	}
	for _, name := range []string{"specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema"} {
		raw, ok := members[name]
		if !ok {
			switch name {
			case "specversion", "id", "source", "type":
				return nil, &AttributeError{Header: name, Rule: "required", ID: id}
			}
			continue
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, &AttributeError{Header: name, Rule: "must be a string", ID: id}
		}
		if name == "specversion" && v != event.CloudEventsVersionV1 {
			return nil, &AttributeError{Header: name, Rule: fmt.Sprintf("%q is not supported (want %q)", v, event.CloudEventsVersionV1), ID: id}
		}
		if err := checkAttr(name, name, v); err != nil {
			err.ID = id
			return nil, err
		}
	}
	e := event.New()
	if err := json.Unmarshal(body, &e); err != nil {
		ae := sdkAttrErr("", err)
		ae.ID = id
		return nil, ae
	}
	if err := e.Validate(); err != nil {
		ae := sdkAttrErr("", err)
		ae.ID = id
		return nil, ae
	}
	return &e, nil
}

// sdkAttrErr turns an SDK error into an *AttributeError: it names the
// first attribute of an event.ValidationError (prefixed, e.g. "ce-id"),
// "event" otherwise, and keeps the message on one line.
func sdkAttrErr(prefix string, err error) *AttributeError {
	var ve event.ValidationError
	if errors.As(err, &ve) && len(ve) > 0 {
		names := make([]string, 0, len(ve))
		for name := range ve {
			names = append(names, name)
		}
		slices.Sort(names)
		return &AttributeError{Header: prefix + names[0], Rule: cleanSDKError(ve[names[0]]), Err: err}
	}
	return &AttributeError{Header: "event", Rule: cleanSDKError(err), Err: err}
}

// cleanSDKError is the SDK's message on one line, without trailing space.
func cleanSDKError(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// checkAttr checks the decoded value v of attribute name (reported as
// label); it returns nil for values it has no rule for.
func checkAttr(label, name, v string) *AttributeError {
	switch name {
	case "id", "source", "subject", "type":
		if i := strings.IndexFunc(v, unicode.IsControl); i >= 0 {
			return attrErr(label, "must not contain control characters (found %U at byte %d)", []rune(v[i:])[0], i)
		}
	}
	switch name {
	case "source":
		if _, ok := parseSource(v); v != "" && !ok {
			return attrErr(label, "%q is not a URI-reference (RFC 3986)", v)
		}
	case "time":
		if _, err := types.ParseTime(v); err != nil {
			return attrErr(label, "%q is not an RFC 3339 timestamp", v)
		}
	case "datacontenttype":
		mt, isJSON := jsonContentType(v)
		if !mt {
			return attrErr(label, "%q is not a media type (RFC 2045)", v)
		}
		if !isJSON {
			return attrErr(label, "%q is not JSON: parley events carry application/json (or a +json type)", v)
		}
	case "dataschema":
		if _, ok, relative := parseSchema(v); !ok {
			if relative {
				return attrErr(label, "%q is not an absolute URI (RFC 3986: a scheme is required)", v)
			}
			return attrErr(label, "%q is not a URI (RFC 3986)", v)
		}
	}
	return nil
}

// validURIRef reports whether s is an RFC 3986 URI-reference: only
// unreserved, reserved and percent-encoded characters, and parseable.
func validURIRef(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~:/?#[]@!$&'()*+,;=", c) >= 0:
		case c == '%':
			if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
				return false
			}
			i += 2
		default:
			return false
		}
	}
	_, err := url.Parse(s)
	return err == nil
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
