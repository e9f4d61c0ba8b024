package events

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/parley-dev/parley/schema"
)

var testTime = time.Date(2026, 5, 17, 10, 11, 12, 123456789, time.UTC)

// fullEvent sets every CloudEvents attribute and two extensions.
func fullEvent(t testing.TB) *event.Event {
	t.Helper()
	e, err := NewWithID("0191a5e4-7c1d-7000-8000-000000000001", SourceProcessor, TypeTurnRequested, "thread-1",
		TurnRequested{Agent: "default", Message: schema.ChatMessage{Role: schema.RoleUser, Text: "hi"}})
	if err != nil {
		t.Fatalf("NewWithID: %v", err)
	}
	e.SetTime(testTime)
	e.SetExtension(ExtTurnID, "turn-1")
	e.SetExtension(ExtTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	return e
}

// attrs is every attribute of e in canonical string form, for comparison
// (event.Event has unexported fields cmp cannot look at).
func attrs(e *event.Event) map[string]string {
	m := map[string]string{
		"specversion": e.SpecVersion(), "id": e.ID(), "source": e.Source(), "type": e.Type(),
		"subject": e.Subject(), "datacontenttype": e.DataContentType(), "dataschema": e.DataSchema(),
		"data": string(e.Data()),
	}
	if !e.Time().IsZero() {
		m["time"] = e.Time().UTC().Format(time.RFC3339Nano)
	}
	for k, v := range e.Extensions() {
		m["ext:"+k] = v.(string)
	}
	return m
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	e := fullEvent(t)
	h, body, err := Encode(e)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	wantHeaders := Header{
		"ce-specversion":     {"1.0"},
		"ce-id":              {"0191a5e4-7c1d-7000-8000-000000000001"},
		"ce-source":          {"/parley/processor"},
		"ce-type":            {"dev.parley.turn.requested"},
		"ce-subject":         {"thread-1"},
		"ce-time":            {"2026-05-17T10:11:12.123456789Z"},
		"ce-datacontenttype": {"application/json"},
		"ce-dataschema":      {"https://parley.dev/schema/dev.parley.turn.requested.json"},
		"ce-turnid":          {"turn-1"},
		"ce-traceparent":     {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	if diff := cmp.Diff(wantHeaders, h); diff != "" {
		t.Errorf("Encode headers (-want +got):\n%s", diff)
	}
	if want := `{"agent":"default","message":{"role":"user","text":"hi"}}`; string(body) != want {
		t.Errorf("Encode body = %s, want %s", body, want)
	}

	got, err := Decode(h, body)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if diff := cmp.Diff(attrs(e), attrs(got)); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if !got.Time().Equal(testTime) {
		t.Errorf("Decode time = %v, want %v", got.Time(), testTime)
	}
	data, err := Data[TurnRequested](got)
	if err != nil {
		t.Fatalf("Data: %v", err)
	}
	if data.Message.Text != "hi" || data.Agent != "default" {
		t.Errorf("Data = %+v, want agent default and text hi", data)
	}
}

func TestEncodeOmitsUnsetOptionalAttributes(t *testing.T) {
	e := event.New()
	e.SetID("1")
	e.SetSource("/s")
	e.SetType("t")
	h, body, err := Encode(&e)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	want := []string{"ce-id", "ce-source", "ce-specversion", "ce-type"}
	if got := slices.Sorted(maps.Keys(h)); !slices.Equal(got, want) {
		t.Errorf("Encode headers = %v, want %v", got, want)
	}
	if body != nil {
		t.Errorf("Encode body = %q, want nil", body)
	}
	got, err := Decode(h, body)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if diff := cmp.Diff(attrs(&e), attrs(got)); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestEncodeInvalidEvent(t *testing.T) {
	e := event.New()
	e.SetSource("/s")
	e.SetType("t")
	_, _, err := Encode(&e)
	if err == nil || !strings.Contains(err.Error(), "id") {
		t.Fatalf("Encode(no id) error = %v, want one naming id", err)
	}
}

func TestEncodeNonStringExtension(t *testing.T) {
	// Binary mode carries no type information: a non-string extension is
	// written in canonical string form and decodes as a string.
	e := fullEvent(t)
	e.SetExtension("attempt", 3)
	e.SetExtension("flag", true)
	h, body, err := Encode(e)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if got := h["ce-attempt"]; !slices.Equal(got, []string{"3"}) {
		t.Errorf("ce-attempt = %q, want [3]", got)
	}
	if got := h["ce-flag"]; !slices.Equal(got, []string{"true"}) {
		t.Errorf("ce-flag = %q, want [true]", got)
	}
	got, err := Decode(h, body)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if v := got.Extensions()["attempt"]; v != "3" {
		t.Errorf("decoded attempt = %#v, want \"3\"", v)
	}
}

func TestPercentEncoding(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "thread-1/a:b+c~!", "thread-1/a:b+c~!"},
		{"space", "a b", "a%20b"},
		{"double quote", `say "hi"`, "say%20%22hi%22"},
		{"percent", "100%", "100%25"},
		{"percent escape stays literal", "%41", "%2541"},
		{"tab and newline", "a\tb\nc", "a%09b%0Ac"},
		{"DEL", "a\x7fb", "a%7Fb"},
		{"two-byte UTF-8", "Grüße", "Gr%C3%BC%C3%9Fe"},
		{"three-byte UTF-8", "€", "%E2%82%AC"},
		{"four-byte UTF-8", "😀", "%F0%9F%98%80"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pctEncode(tt.in); got != tt.want {
				t.Errorf("pctEncode(%q) = %q, want %q", tt.in, got, tt.want)
			}
			got, err := pctDecode(tt.want)
			if err != nil || got != tt.in {
				t.Errorf("pctDecode(%q) = %q, %v, want %q", tt.want, got, err, tt.in)
			}

			// The same through the codec, on a header and an extension.
			e := fullEvent(t)
			control := strings.IndexFunc(tt.in, unicode.IsControl) >= 0
			if tt.in != "" {
				e.SetSubject(tt.in)
				if control { // a subject never carries control characters (checked by Decode)
					e.SetSubject("s")
				}
				e.SetExtension("note", tt.in)
			}
			h, body, err := Encode(e)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if tt.in != "" && !control {
				if got := h["ce-subject"][0]; got != tt.want {
					t.Errorf("ce-subject = %q, want %q", got, tt.want)
				}
				if got := h["ce-note"][0]; got != tt.want {
					t.Errorf("ce-note = %q, want %q", got, tt.want)
				}
			}
			for k, vs := range h {
				for _, v := range vs {
					for i := 0; i < len(v); i++ {
						if c := v[i]; c <= 0x20 || c >= 0x7f || c == '"' {
							t.Errorf("header %s = %q has unescaped byte %#x", k, v, c)
						}
					}
				}
			}
			d, err := Decode(h, body)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(attrs(e), attrs(d)); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeLowercaseHex(t *testing.T) {
	h := validHeaders()
	h["ce-subject"] = []string{"Gr%c3%bc%c3%9fe%20%e2%82%ac"}
	h["ce-note"] = []string{"a%2fb%3Ac"}
	e, err := Decode(h, nil)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got, want := e.Subject(), "Grüße €"; got != want {
		t.Errorf("subject = %q, want %q", got, want)
	}
	if got, want := e.Extensions()["note"], "a/b:c"; got != want {
		t.Errorf("note = %q, want %q", got, want)
	}
}

func validHeaders() Header {
	return Header{
		"ce-specversion": {"1.0"},
		"ce-id":          {"id-1"},
		"ce-source":      {"/parley/test"},
		"ce-type":        {"dev.parley.test"},
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(h Header)
		wantErr string // substring naming the attribute
	}{
		{"missing specversion", func(h Header) { delete(h, "ce-specversion") }, "ce-specversion: required"},
		{"no headers at all", func(h Header) { clear(h) }, "ce-specversion: required"},
		{"wrong specversion", func(h Header) { h["ce-specversion"] = []string{"0.3"} }, `ce-specversion: "0.3" is not supported`},
		{"missing id", func(h Header) { delete(h, "ce-id") }, "ce-id: required"},
		{"empty id", func(h Header) { h["ce-id"] = []string{""} }, "ce-id: required"},
		{"missing source", func(h Header) { delete(h, "ce-source") }, "ce-source: required"},
		{"source not a URI-reference", func(h Header) { h["ce-source"] = []string{":nope"} }, "ce-source:"},
		{"missing type", func(h Header) { delete(h, "ce-type") }, "ce-type: required"},
		{"bad time", func(h Header) { h["ce-time"] = []string{"yesterday"} }, "ce-time:"},
		{"time without zone", func(h Header) { h["ce-time"] = []string{"2026-05-17T10:11:12"} }, "ce-time:"},
		{"bad dataschema", func(h Header) { h["ce-dataschema"] = []string{":nope"} }, "ce-dataschema:"},
		{"invalid UTF-8 after decoding", func(h Header) { h["ce-subject"] = []string{"a%FFb"} }, "ce-subject: value is not valid UTF-8"},
		{"invalid UTF-8 in required attribute", func(h Header) { h["ce-id"] = []string{"%C3%28"} }, "ce-id: value is not valid UTF-8"},
		{"raw invalid UTF-8", func(h Header) { h["ce-turnid"] = []string{"a\xffb"} }, "ce-turnid: value is not valid UTF-8"},
		{"truncated escape at end", func(h Header) { h["ce-type"] = []string{"abc%4"} }, "ce-type: malformed percent-encoding"},
		{"lone percent", func(h Header) { h["ce-subject"] = []string{"%"} }, "ce-subject: malformed percent-encoding"},
		{"non-hex escape", func(h Header) { h["ce-source"] = []string{"/a%G1"} }, "ce-source: malformed percent-encoding"},
		{"escape in extension", func(h Header) { h["ce-turnid"] = []string{"x%2"} }, "ce-turnid: malformed percent-encoding"},
		{"extension with underscore", func(h Header) { h["ce-thread_id"] = []string{"t"} }, "ce-thread_id: extension name"},
		{"extension with uppercase", func(h Header) { h["ce-TurnID"] = []string{"t"} }, "ce-TurnID: extension name"},
		{"extension with dash", func(h Header) { h["ce-turn-id"] = []string{"t"} }, "ce-turn-id: extension name"},
		{"empty extension name", func(h Header) { h["ce-"] = []string{"t"} }, "ce-: extension name"},
		{"bad datacontenttype", func(h Header) { h["ce-datacontenttype"] = []string{"not a media type;"} }, "ce-datacontenttype:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := validHeaders()
			tt.edit(h)
			e, err := Decode(h, []byte(`{}`))
			if err == nil {
				t.Fatalf("Decode = %v, want error containing %q", e, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Decode error = %q, want it to contain %q", err, tt.wantErr)
			}
			// One verdict: the error names the attribute as a field, so a
			// worker can reject the event naming it.
			var ae *AttributeError
			if !errors.As(err, &ae) {
				t.Fatalf("Decode error %q is not an *AttributeError", err)
			}
			if want, _, _ := strings.Cut(tt.wantErr, ":"); !strings.HasSuffix(want, ae.Header) || ae.Rule == "" {
				t.Errorf("AttributeError = {Header: %q, Rule: %q}, want the header of %q", ae.Header, ae.Rule, tt.wantErr)
			}
		})
	}
}

func TestDecodeNotCloudEvent(t *testing.T) {
	_, err := Decode(Header{"Nats-Msg-Id": {"x"}}, []byte("hello"))
	if !errors.Is(err, ErrNotCloudEvent) {
		t.Errorf("Decode(plain message) error = %v, want ErrNotCloudEvent", err)
	}
	_, err = Decode(validHeaders(), nil)
	if err != nil {
		t.Fatalf("Decode(valid) = %v", err)
	}
	h := validHeaders()
	delete(h, "ce-id")
	if _, err := Decode(h, nil); errors.Is(err, ErrNotCloudEvent) {
		t.Errorf("Decode(missing id) error %v wraps ErrNotCloudEvent; only a missing specversion should", err)
	}
}

func TestDecodeIgnoresOtherHeaders(t *testing.T) {
	h := validHeaders()
	h["traceparent"] = []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	h["Nats-Msg-Id"] = []string{"id-1"}
	h["content-type"] = []string{"text/plain"}
	e, err := Decode(h, []byte("x"))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if len(e.Extensions()) != 0 {
		t.Errorf("extensions = %v, want none (non-ce headers are not attributes)", e.Extensions())
	}
	if string(e.Data()) != "x" {
		t.Errorf("data = %q, want x", e.Data())
	}
}

func TestDecodeStructured(t *testing.T) {
	body := []byte(`{
		"specversion": "1.0",
		"id": "s-1",
		"source": "/parley/cli",
		"type": "dev.parley.turn.requested",
		"subject": "thread-9",
		"time": "2026-05-17T10:11:12.5Z",
		"datacontenttype": "application/json",
		"dataschema": "https://parley.dev/schema/dev.parley.turn.requested.json",
		"turnid": "turn-9",
		"data":{"message":{"role":"user","text":"héllo"}}
	}`)
	for _, ct := range []string{
		"application/cloudevents+json",
		"application/cloudevents+json; charset=utf-8",
		"Application/CloudEvents+JSON",
	} {
		t.Run(ct, func(t *testing.T) {
			// Binary-mode headers are ignored in structured mode.
			h := Header{"Content-Type": {ct}, "ce-id": {"binary-id"}}
			e, err := Decode(h, body)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			want := map[string]string{
				"specversion": "1.0", "id": "s-1", "source": "/parley/cli", "type": "dev.parley.turn.requested",
				"subject": "thread-9", "time": "2026-05-17T10:11:12.5Z", "datacontenttype": "application/json",
				"dataschema": "https://parley.dev/schema/dev.parley.turn.requested.json", "ext:turnid": "turn-9",
				"data": `{"message":{"role":"user","text":"héllo"}}`,
			}
			if diff := cmp.Diff(want, attrs(e)); diff != "" {
				t.Errorf("Decode structured (-want +got):\n%s", diff)
			}
			d, err := Data[TurnRequested](e)
			if err != nil || d.Message.Text != "héllo" {
				t.Errorf("Data = %+v, %v, want text héllo", d, err)
			}
		})
	}
}

func TestDecodeStructuredErrors(t *testing.T) {
	tests := []struct {
		name, body, wantErr string
	}{
		{"not JSON", `{`, "structured cloudevent"},
		{"missing id", `{"specversion":"1.0","source":"/s","type":"t"}`, "id"},
		{"missing source", `{"specversion":"1.0","id":"1","type":"t"}`, "source"},
		{"missing type", `{"specversion":"1.0","id":"1","source":"/s"}`, "type"},
		{"missing specversion", `{"id":"1","source":"/s","type":"t"}`, "specversion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(Header{"Content-Type": {"application/cloudevents+json"}}, []byte(tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Decode(%s) error = %v, want one containing %q", tt.body, err, tt.wantErr)
			}
		})
	}
}

func TestDecodeDataContentTypeIsNotContentType(t *testing.T) {
	// The NATS binding maps datacontenttype to ce-datacontenttype; a
	// Content-Type header that is not application/cloudevents* leaves the
	// message in binary mode.
	h := validHeaders()
	h["Content-Type"] = []string{"application/json"}
	e, err := Decode(h, []byte(`{}`))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if e.ID() != "id-1" {
		t.Errorf("id = %q, want id-1 (binary mode)", e.ID())
	}
}

func TestDerivedID(t *testing.T) {
	a := DerivedID("dlq", "PARLEY_AGENT", "agent", "42")
	if b := DerivedID("dlq", "PARLEY_AGENT", "agent", "42"); a != b {
		t.Errorf("DerivedID not deterministic: %s != %s", a, b)
	}
	u, err := uuid.Parse(a)
	if err != nil {
		t.Fatalf("DerivedID = %q is not a UUID: %v", a, err)
	}
	if u.Version() != 5 {
		t.Errorf("DerivedID version = %d, want 5", u.Version())
	}
	distinct := map[string][]string{}
	for _, parts := range [][]string{
		{"dlq", "PARLEY_AGENT", "agent", "42"},
		{"dlq", "PARLEY_AGENT", "agent", "43"},
		{"ab", "c"},
		{"a", "bc"},
		{"abc"},
		{},
	} {
		id := DerivedID(parts...)
		if prev, dup := distinct[id]; dup {
			t.Errorf("DerivedID(%q) = DerivedID(%q) = %s", parts, prev, id)
		}
		distinct[id] = parts
	}
	// Pinned: a change of namespace or joining would change the IDs of
	// events already in flight and defeat deduplication across versions.
	if want := uuid.NewSHA1(derivedNamespace, []byte("a\x00b")).String(); DerivedID("a", "b") != want {
		t.Errorf("DerivedID(a, b) = %s, want %s", DerivedID("a", "b"), want)
	}
}

func TestNewSetsAttributes(t *testing.T) {
	before := time.Now()
	e, err := New(SourceAgent, TypeRunCompleted, "thread-2", RunCompleted{RunID: "r"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	u, err := uuid.Parse(e.ID())
	if err != nil || u.Version() != 7 {
		t.Errorf("New id = %q (%v), want a UUIDv7", e.ID(), err)
	}
	if e.Source() != SourceAgent || TypeOf(e) != TypeRunCompleted || e.Subject() != "thread-2" {
		t.Errorf("New attributes = %s %s %s", e.Source(), e.Type(), e.Subject())
	}
	if e.Time().Before(before.Add(-time.Second)) || e.Time().Location() != time.UTC {
		t.Errorf("New time = %v, want now in UTC", e.Time())
	}
	if e.DataSchema() != DataSchemaBase+string(TypeRunCompleted)+".json" || e.DataContentType() != DataContentTypeJSON {
		t.Errorf("New dataschema/datacontenttype = %s %s", e.DataSchema(), e.DataContentType())
	}
	noSubject, err := New(SourceAgent, TypeRunCompleted, "", nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if noSubject.Context.GetSubject() != "" {
		t.Errorf("New with empty subject set subject %q", noSubject.Subject())
	}
	if _, err := New(SourceAgent, TypeRunCompleted, "", func() {}); err == nil {
		t.Error("New(unmarshallable data) succeeded, want error")
	}
}

func TestDataErrors(t *testing.T) {
	e := event.New()
	e.SetType(string(TypeRunFailed))
	if _, err := Data[RunFailed](&e); err == nil || !strings.Contains(err.Error(), string(TypeRunFailed)) {
		t.Errorf("Data(no data) error = %v, want one naming %s", err, TypeRunFailed)
	}
	e.DataEncoded = []byte(`{"runId": 7}`)
	if _, err := Data[RunFailed](&e); err == nil || !strings.Contains(err.Error(), string(TypeRunFailed)) {
		t.Errorf("Data(bad data) error = %v, want one naming %s", err, TypeRunFailed)
	}
}

func BenchmarkEncode(b *testing.B) {
	e := fullEvent(b)
	e.SetSubject("thread with spaces and ü")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Encode(e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	e := fullEvent(b)
	e.SetSubject("thread with spaces and ü")
	h, body, err := Encode(e)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(h, body); err != nil {
			b.Fatal(err)
		}
	}
}
