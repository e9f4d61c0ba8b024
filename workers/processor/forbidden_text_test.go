package processor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/parley-dev/parley/events"
)

// A forbidden message's rejection lands in the thread its owner reads: it
// must not carry the sender's text (found by the breaker: an integrator's
// data.user was quoted into the victim's web chat as an alert) nor the
// owner's end-user name (it reached another principal).
func TestForbiddenRejectionQuotesNothing(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	if err := h.messageAs(events.PrincipalGateway, "m1", 1, events.TurnRequested{User: "alice"}); err != nil {
		t.Fatal(err)
	}
	const hostile = "<img src=x onerror=alert(1)> visit evil.example"
	for i, in := range []events.TurnRequested{{User: hostile}, {}} {
		id := []string{"m2", "m3"}[i]
		if err := h.messageAs(events.PrincipalIntegrator, id, uint64(2+i), in); err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, e := range h.pub.of(events.TypeTurnRejected) {
			d, _ := events.Data[events.TurnRejected](e)
			if d.RequestEventID != id {
				continue
			}
			found = true
			raw, _ := json.Marshal(d)
			if d.Reason != events.RejectForbidden || strings.Contains(string(raw), "evil") || strings.Contains(string(raw), "alice") {
				t.Errorf("rejection of %s = %s; want forbidden, quoting neither the sender's text nor the owner", id, raw)
			}
		}
		if !found {
			t.Errorf("no turn.rejected for %s", id)
		}
	}
}
