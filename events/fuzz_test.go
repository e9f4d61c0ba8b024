package events

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// parseFuzzHeaders turns "name: value" lines into a Header (repeated names
// append values).
func parseFuzzHeaders(s string) Header {
	h := Header{}
	for line := range strings.SplitSeq(s, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		h[name] = append(h[name], strings.TrimPrefix(value, " "))
	}
	return h
}

// FuzzDecode decodes arbitrary headers and bodies: Decode must not panic, a
// binary-mode error must name the header (or the attribute sdk-go
// rejected), and an event it accepts must encode and decode again to the
// same headers and body.
func FuzzDecode(f *testing.F) {
	e := fullEvent(f)
	e.SetSubject(`a "quoted" 100% ü`)
	h, body, err := Encode(e)
	if err != nil {
		f.Fatal(err)
	}
	var b strings.Builder
	for name, vs := range h {
		b.WriteString(name + ": " + vs[0] + "\n")
	}
	f.Add(b.String(), body)
	f.Fuzz(func(t *testing.T, headers string, body []byte) {
		h := parseFuzzHeaders(headers)
		e, err := Decode(h, body)
		if err != nil {
			structured := strings.HasPrefix(strings.ToLower(first(h, headerContentType)), "application/cloudevents")
			if msg := err.Error(); !structured && !strings.HasPrefix(msg, "ce-") && !strings.HasPrefix(msg, "invalid cloudevent: ") {
				t.Fatalf("Decode error %q names no attribute", msg)
			}
			return
		}
		h1, b1, err := Encode(e)
		if err != nil {
			t.Fatalf("Encode(accepted event): %v", err)
		}
		e2, err := Decode(h1, b1)
		if err != nil {
			t.Fatalf("Decode(Encode(accepted event)) with headers %q: %v", h1, err)
		}
		h2, b2, err := Encode(e2)
		if err != nil {
			t.Fatalf("second Encode: %v", err)
		}
		if diff := cmp.Diff(h1, h2); diff != "" {
			t.Fatalf("headers not stable (-first +second):\n%s", diff)
		}
		if string(b1) != string(b2) {
			t.Fatalf("body not stable: %q then %q", b1, b2)
		}
	})
}
