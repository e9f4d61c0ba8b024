package events

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
)

// The codec's check of an event to encode agrees with the SDK's
// Validate, valid and invalid alike (it only skips the SDK's allocations
// for a valid event), and its error is the SDK's.
func TestValidMatchesSDK(t *testing.T) {
	cases := map[string]func(e *event.Event){
		"valid":                    func(*event.Event) {},
		"blank id":                 func(e *event.Event) { e.SetID("  ") },
		"no source":                func(e *event.Event) { e.Context.(*event.EventContextV1).Source.Path = "" },
		"blank type":               func(e *event.Event) { e.SetType(" ") },
		"relative dataschema":      func(e *event.Event) { e.SetDataSchema("schema/x.json") },
		"bad content type":         func(e *event.Event) { e.SetDataContentType("application/") },
		"other content type":       func(e *event.Event) { e.SetDataContentType("text/plain") },
		"source the SDK refused":   func(e *event.Event) { e.SetSource("%zz") },
		"source with a fragment":   func(e *event.Event) { e.SetSource("#frag") },
		"no content type":          func(e *event.Event) { e.Context.(*event.EventContextV1).DataContentType = nil },
		"subject set then cleared": func(e *event.Event) { e.SetSubject(" ") },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			e := fullEvent(t)
			mutate(e)
			want, got := e.Validate(), valid(e)
			if (want == nil) != (got == nil) || (want != nil && want.Error() != got.Error()) {
				t.Errorf("valid: %v, want the SDK's %v", got, want)
			}
		})
	}
}

// Decoded sources, data schemas and content types are remembered as
// checked up to maxCachedAttrs distinct values each; past the bound
// every value is still checked (and decoded) as before.
func TestAttrCacheBound(t *testing.T) {
	before := sourceCache.n.Load()
	for i := range maxCachedAttrs + 50 {
		e := fullEvent(t)
		e.SetSource(fmt.Sprintf("/integrator/bound-%d", i))
		h, body, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(h, body)
		if err != nil {
			t.Fatalf("source %d: %v", i, err)
		}
		if got.Source() != e.Source() {
			t.Fatalf("source %q, want %q", got.Source(), e.Source())
		}
	}
	if n := sourceCache.n.Load(); n > maxCachedAttrs || n <= before {
		t.Errorf("%d sources remembered, want at most %d (and more than before, %d)", n, maxCachedAttrs, before)
	}
	// An invalid source is refused past the bound as before it.
	e := fullEvent(t)
	h, body, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	h["ce-source"] = []string{"bad%20source%7Cpipe"}
	if _, err := Decode(h, body); err == nil || !strings.Contains(err.Error(), "ce-source") {
		t.Errorf("invalid source past the bound: %v, want a ce-source error", err)
	}
}
