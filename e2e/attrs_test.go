package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/events"
)

// TestMalformedAttributesAfterDecoding: attribute values are checked after
// percent-decoding and in structured mode too; each rejection names the
// attribute and the event's id, and no turn runs for them.
func TestMalformedAttributesAfterDecoding(t *testing.T) {
	s := start(t, options{})
	pub := func(h nats.Header, data string) {
		if _, err := s.bus.JetStream().PublishMsg(s.ctx, &nats.Msg{Subject: events.InputSubject(events.PrincipalIntegrator, "ma", events.ChatTurnRequested),
			Header: h, Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	binary := func(id, k, v string) nats.Header {
		h := nats.Header{"ce-specversion": {"1.0"}, "ce-id": {id}, "ce-source": {"/test"},
			"ce-type": {string(events.TypeTurnRequested)}, "ce-subject": {"ma"}, "Content-Type": {"application/json"}}
		h[k] = []string{v}
		return h
	}
	msg := `{"message":{"role":"user","text":"list everything"}}`
	pub(binary("r1", "ce-source", "a%20b"), msg)
	pub(binary("r2", "ce-datacontenttype", "text/plain"), msg)
	pub(binary("r3", "ce-dataschema", "not a uri"), msg)
	pub(nats.Header{"Content-Type": {"application/cloudevents+json"}},
		`{"specversion":"1.0","id":"r4","source":"a b","type":"`+string(events.TypeTurnRequested)+`","subject":"ma","data":`+msg+`}`)
	s.rec.await(t, 10*time.Second, "ma", events.TypeTurnRejected, 4)
	var got []string
	for _, e := range s.rec.matching("ma", events.TypeTurnRejected) {
		d, _ := events.Data[events.TurnRejected](e)
		if d.Reason != events.RejectInvalidEvent || len(d.Errors) != 1 {
			t.Fatalf("turn.rejected = %s, want invalid_event with one error", mustJSON(d))
		}
		got = append(got, d.RequestEventID+" "+d.Errors[0].Path)
	}
	slices.Sort(got)
	if want := []string{"r1 ce-source", "r2 ce-datacontenttype", "r3 ce-dataschema", "r4 source"}; !slices.Equal(got, want) {
		t.Fatalf("rejections (requestEventId path) = %q, want %q\n%s", got, want, s.rec.dump("ma"))
	}
	if n := len(s.rec.matching("ma", events.TypeRunRequested)); n != 0 {
		t.Fatalf("%d runs requested for malformed events:\n%s", n, s.rec.dump("ma"))
	}
}
