package processor

import (
	"encoding/json"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
)

// A decline whose content is not an object (a string) is honoured: the
// question is consumed and the turn resumes, not rejected invalid_event.
func TestDeclineWithNonObjectContentResumes(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	e := cloudevents.New()
	e.SetID("a1")
	e.SetSource("/test")
	e.SetType(string(events.TypeElicitationResponded))
	e.SetSubject("t")
	if err := e.SetData("application/json", json.RawMessage(`{"elicitationId":"q1","action":"decline","content":"a string"}`)); err != nil {
		t.Fatal(err)
	}
	if err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: &e, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatElicitationResponded),
		StreamSeq: 100, NumDelivered: 1}); err != nil {
		t.Fatal(err)
	}
	if r := rejectedFor(h, "a1"); r != "" {
		t.Fatalf("decline with string content rejected %q", r)
	}
	if len(h.pub.of(events.TypeRunResumed)) != 1 {
		t.Errorf("decline with string content did not resume the turn")
	}
}
