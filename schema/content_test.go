package schema

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func ptr[T any](v T) *T { return &v }

// TestContentRoundTrip marshals every block kind, compares the exact JSON,
// decodes it again and compares the values.
func TestContentRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   Content
		want string
	}{
		{"text", Text("hi"), `{"type":"text","text":"hi"}`},
		{"empty text", Text(""), `{"type":"text","text":""}`},
		{"priority 0 is kept", &TextContent{Text: "a", Annotations: &Annotations{Priority: ptr(0.0)}},
			`{"type":"text","text":"a","annotations":{"priority":0}}`},
		{"no priority", &TextContent{Text: "a", Annotations: &Annotations{Audience: []Role{RoleUser}}},
			`{"type":"text","text":"a","annotations":{"audience":["user"]}}`},
		{"empty audience is kept", &TextContent{Text: "a", Annotations: &Annotations{Audience: []Role{}}},
			`{"type":"text","text":"a","annotations":{"audience":[]}}`},
		{"full annotations", &TextContent{Text: "a", Annotations: &Annotations{
			Audience: []Role{RoleUser, RoleAssistant}, Priority: ptr(1.0), LastModified: "2025-01-12T15:00:58Z"}},
			`{"type":"text","text":"a","annotations":{"audience":["user","assistant"],"priority":1,"lastModified":"2025-01-12T15:00:58Z"}}`},
		{"meta", &TextContent{Text: "a", Meta: Meta{MetaStatusItem: "Searching"}},
			`{"type":"text","text":"a","_meta":{"drupal.org/ai.status_item":"Searching"}}`},
		{"empty meta is kept", &TextContent{Text: "a", Meta: Meta{}}, `{"type":"text","text":"a","_meta":{}}`},
		{"image", &ImageContent{Data: "aGVsbG8=", MIMEType: "image/png"},
			`{"type":"image","data":"aGVsbG8=","mimeType":"image/png"}`},
		{"audio", &AudioContent{Data: "aGVsbG8=", MIMEType: "audio/wav", Annotations: &Annotations{Priority: ptr(0.5)}},
			`{"type":"audio","data":"aGVsbG8=","mimeType":"audio/wav","annotations":{"priority":0.5}}`},
		{"resource link", &ResourceLink{URI: "file:///tmp/a.txt", Name: "a.txt", Title: "A", Description: "d", MIMEType: "text/plain", Size: ptr(int64(0))},
			`{"type":"resource_link","uri":"file:///tmp/a.txt","name":"a.txt","title":"A","description":"d","mimeType":"text/plain","size":0}`},
		{"resource link with icon", &ResourceLink{URI: "https://x.test/a", Name: "a", Icons: []Icon{{Src: "https://x.test/i.png", MIMEType: "image/png", Sizes: []string{"48x48"}, Theme: "dark"}}},
			`{"type":"resource_link","uri":"https://x.test/a","name":"a","icons":[{"src":"https://x.test/i.png","mimeType":"image/png","sizes":["48x48"],"theme":"dark"}]}`},
		{"text resource", &EmbeddedResource{Resource: ResourceContents{URI: "demo://r/1", MIMEType: "text/plain", Text: ptr("")}},
			`{"type":"resource","resource":{"uri":"demo://r/1","mimeType":"text/plain","text":""}}`},
		{"blob resource", &EmbeddedResource{Resource: ResourceContents{URI: "demo://r/2", Blob: ptr("AAEC")}, Annotations: &Annotations{Audience: []Role{RoleAssistant}}},
			`{"type":"resource","resource":{"uri":"demo://r/2","blob":"AAEC"},"annotations":{"audience":["assistant"]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("Marshal = %s, want %s", b, tt.want)
			}
			got, err := UnmarshalContent(b)
			if err != nil {
				t.Fatalf("UnmarshalContent(%s) = %v", b, err)
			}
			if diff := cmp.Diff(tt.in, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			if err := ValidateContent(got); err != nil {
				t.Errorf("ValidateContent = %v", err)
			}
		})
	}
}

func TestUnmarshalContentErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"not JSON", `{`, "content block: not valid JSON"},
		{"not an object", `[1]`, "content block: must be a JSON object"},
		{"no type", `{"text":"a"}`, "type: required"},
		{"type not a string", `{"type":1}`, "type: must be a string"},
		{"unknown type", `{"type":"video","data":"x"}`, `type: unknown content block type "video"`},
		{"sampling-only type", `{"type":"tool_use"}`, `type: unknown content block type "tool_use"`},
		{"text missing", `{"type":"text"}`, "text: required"},
		{"text null", `{"type":"text","text":null}`, "text: required"},
		{"text wrong type", `{"type":"text","text":5}`, "text: must be a string"},
		{"image no mimeType", `{"type":"image","data":"aGVsbG8="}`, "mimeType: required"},
		{"image empty mimeType", `{"type":"image","data":"aGVsbG8=","mimeType":""}`, "mimeType: required"},
		{"image bad mimeType", `{"type":"image","data":"aGVsbG8=","mimeType":"png"}`, "mimeType: must be a media type such as image/png"},
		{"image no data", `{"type":"image","mimeType":"image/png"}`, "data: required"},
		{"image bad base64", `{"type":"image","data":"not base64!","mimeType":"image/png"}`, "data: must be base64"},
		{"image unpadded base64", `{"type":"image","data":"aGVsbG8","mimeType":"image/png"}`, "data: must be base64"},
		{"image base64 with newline", `{"type":"image","data":"aGVs\nbG8=","mimeType":"image/png"}`, "data: must be base64"},
		{"audio no mimeType and bad data", `{"type":"audio","data":"%%"}`, "data: must be base64; mimeType: required"},
		{"link no uri", `{"type":"resource_link","name":"a"}`, "uri: required"},
		{"link relative uri", `{"type":"resource_link","uri":"a/b","name":"a"}`, "uri: must be an absolute URI"},
		{"link no name", `{"type":"resource_link","uri":"file:///a"}`, "name: required"},
		{"link negative size", `{"type":"resource_link","uri":"file:///a","name":"a","size":-1}`, "size: must not be negative"},
		{"link fractional size", `{"type":"resource_link","uri":"file:///a","name":"a","size":1.5}`, "size: must be an integer"},
		{"link icon scheme", `{"type":"resource_link","uri":"file:///a","name":"a","icons":[{"src":"javascript:alert(1)"}]}`, "icons[0].src: must be an https: or data: URI"},
		{"resource missing", `{"type":"resource"}`, "resource: required"},
		{"resource no uri", `{"type":"resource","resource":{"text":"x"}}`, "resource.uri: required"},
		{"resource neither", `{"type":"resource","resource":{"uri":"demo://a"}}`, "resource: must have text or blob"},
		{"resource both", `{"type":"resource","resource":{"uri":"demo://a","text":"x","blob":"AAEC"}}`, "resource: must not have both text and blob"},
		{"resource bad blob", `{"type":"resource","resource":{"uri":"demo://a","blob":"???"}}`, "resource.blob: must be base64"},
		{"resource meta key", `{"type":"resource","resource":{"uri":"demo://a","text":"x","_meta":{"mcp.dev/x":1}}}`, `resource._meta["mcp.dev/x"]: prefix "mcp.dev/" is reserved for MCP`},
		{"audience", `{"type":"text","text":"a","annotations":{"audience":["system"]}}`, `annotations.audience[0]: must be "user" or "assistant"`},
		{"priority above 1", `{"type":"text","text":"a","annotations":{"priority":1.5}}`, "annotations.priority: must be a number between 0 and 1"},
		{"priority below 0", `{"type":"text","text":"a","annotations":{"priority":-0.1}}`, "annotations.priority: must be a number between 0 and 1"},
		{"priority string", `{"type":"text","text":"a","annotations":{"priority":"high"}}`, "annotations.priority: must be a number"},
		{"lastModified", `{"type":"text","text":"a","annotations":{"lastModified":"yesterday"}}`, "annotations.lastModified: must be an ISO 8601 date-time such as 2025-01-12T15:00:58Z"},
		{"meta not an object", `{"type":"text","text":"a","_meta":[]}`, "_meta: must be an object"},
		{"meta bad key", `{"type":"text","text":"a","_meta":{"drupal.org/ai/citations":[]}}`, `_meta["drupal.org/ai/citations"]: name "ai/citations" must not contain "/" (the first "/" ends the prefix)`},
		{"meta bad registered value", `{"type":"text","text":"a","_meta":{"drupal.org/ai.suggested_replies":"yes"}}`, `_meta["drupal.org/ai.suggested_replies"]: must be an array of strings`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := UnmarshalContent([]byte(tt.in))
			if err == nil {
				t.Fatalf("UnmarshalContent(%s) = %#v, want error %q", tt.in, c, tt.want)
			}
			if _, ok := err.(*ValidationError); !ok {
				t.Errorf("error is %T, want *ValidationError", err)
			}
			if err.Error() != tt.want {
				t.Errorf("UnmarshalContent(%s) error = %q, want %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestContentList(t *testing.T) {
	in := `[{"type":"text","text":"a"},{"type":"image","data":"aGVsbG8=","mimeType":"image/png"}]`
	var l ContentList
	if err := json.Unmarshal([]byte(in), &l); err != nil {
		t.Fatal(err)
	}
	if len(l) != 2 || l[1].ContentType() != "image" {
		t.Fatalf("decoded %#v", l)
	}
	b, _ := json.Marshal(l)
	if string(b) != in {
		t.Errorf("Marshal = %s, want %s", b, in)
	}
	b, _ = json.Marshal(ContentList(nil))
	if string(b) != "[]" {
		t.Errorf("Marshal(nil) = %s, want []", b)
	}
	err := json.Unmarshal([]byte(`[{"type":"text","text":"a"},{"type":"image"},{"type":"x"}]`), &l)
	want := `[1].data: required; [1].mimeType: required; [2].type: unknown content block type "x"`
	if err == nil || err.Error() != want {
		t.Errorf("Unmarshal error = %v, want %s", err, want)
	}
	var m ChatMessage
	err = json.Unmarshal([]byte(`{"role":"assistant","text":"a","content":[{"type":"audio","data":"AA=="}]}`), &m)
	if want := "content[0].mimeType: required"; err == nil || err.Error() != want {
		t.Errorf("ChatMessage error = %v, want %s", err, want)
	}
}

func TestValidateContentGoValues(t *testing.T) {
	tests := []struct {
		name string
		in   Content
		want string
	}{
		{"nil", nil, "missing content block"},
		{"typed nil", (*TextContent)(nil), "missing content block"},
		{"image", &ImageContent{}, "data: required; mimeType: required"},
		{"link", &ResourceLink{}, "uri: required; name: required"},
		{"NaN priority", &TextContent{Annotations: &Annotations{Priority: ptr(nan())}}, "annotations.priority: must be a number between 0 and 1"},
		{"resource link mime", &ResourceLink{URI: "x:y", Name: "n", MIMEType: "text"}, "mimeType: must be a media type such as text/plain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateContent(tt.in)
			if err == nil || err.Error() != tt.want {
				t.Errorf("ValidateContent = %v, want %s", err, tt.want)
			}
		})
	}
}

func nan() float64 {
	var z float64
	return z / z
}

func TestFormats(t *testing.T) {
	tests := []struct {
		format, in string
		ok         bool
	}{
		{FormatEmail, "ada@example.com", true},
		{FormatEmail, "a.b+c@sub.example.org", true},
		{FormatEmail, "ada", false},
		{FormatEmail, "ada@", false},
		{FormatEmail, "@example.com", false},
		{FormatEmail, "Ada <ada@example.com>", false},
		{FormatEmail, " ada@example.com", false},
		{FormatEmail, "a b@example.com", false},
		{FormatURI, "https://example.com/a?b=c#d", true},
		{FormatURI, "urn:isbn:0451450523", true},
		{FormatURI, "mailto:ada@example.com", true},
		{FormatURI, "https://example.com/a%20b", true},
		{FormatURI, "example.com", false},
		{FormatURI, "/relative/path", false},
		{FormatURI, "https://example.com/a b", false},
		{FormatURI, "https://example.com/%zz", false},
		{FormatURI, "1http://x", false},
		{FormatURI, "https://exämple.com", false},
		{FormatDate, "2025-06-18", true},
		{FormatDate, "2024-02-29", true},
		{FormatDate, "2025-02-29", false},
		{FormatDate, "2025-13-01", false},
		{FormatDate, "2025-6-18", false},
		{FormatDate, "18/06/2025", false},
		{FormatDate, "2025-06-18T00:00:00Z", false},
		{FormatDateTime, "2025-06-18T09:30:00Z", true},
		{FormatDateTime, "2025-06-18t09:30:00.123z", true},
		{FormatDateTime, "2025-06-18T09:30:00+02:00", true},
		{FormatDateTime, "2016-12-31T23:59:60Z", true},
		{FormatDateTime, "2025-06-18T09:30:00", false},
		{FormatDateTime, "2025-06-18 09:30:00Z", false},
		{FormatDateTime, "2025-06-18T24:00:00Z", false},
		{FormatDateTime, "2025-06-18T09:30:00.Z", false},
		{FormatDateTime, "2025-06-18T09:30:00+0200", false},
		{FormatDateTime, "2025-06-18", false},
		{"hostname", "example.com", false},
	}
	for _, tt := range tests {
		if got := CheckFormat(tt.format, tt.in); got != tt.ok {
			t.Errorf("CheckFormat(%q, %q) = %v, want %v", tt.format, tt.in, got, tt.ok)
		}
	}
	if !strings.Contains(formatRule(FormatDate), "YYYY-MM-DD") {
		t.Error("formatRule(date) lost its hint")
	}
}
