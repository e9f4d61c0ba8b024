package client

import (
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Attack on refusals: a refusal names the refused event by the ID its
// sender chose. Answers are not ordered like messages, and an integrator
// may read PARLEY_INPUT by sequence, so another principal (mallory) can
// see the victim's answer ID before the processor takes the answer and
// race it with an invalid answer of its own under that ID: its refusal
// then comes before the victim's answer is taken (echoed). The refusal
// carries the refused sender's principal (as an echo does); the victim's
// Deliver must not take mallory's refusal for its verdict. A refusal of
// the victim's own principal, or one without the attribute (an earlier
// processor), still is.
func TestDeliverIgnoresAnotherPrincipalsRefusal(t *testing.T) {
	srv := newRestartable(t)
	cl := newClient(t, srv.url(), RetryPolicy{})
	chat := func(typ events.Type, suffix, id, principal string, data any) {
		t.Helper()
		e, err := events.NewWithID(id, events.SourceProcessor, typ, "w1", data)
		if err != nil {
			t.Fatal(err)
		}
		if principal != "" {
			e.SetExtension(events.ExtPrincipal, principal)
		}
		if _, err := Publish(t.Context(), cl.Bus(), events.ChatSubject("w1", suffix), e, cl.retry); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, refusedBy string
		want            Outcome
	}{
		{"another principal's refusal", "mallory", OutcomeAccepted},
		{"its own principal's refusal", events.PrincipalIntegrator, OutcomeRejected},
		{"a refusal naming no principal", "", OutcomeRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer, err := cl.Response("w1", "q1", schema.ElicitResult{Action: schema.ActionAccept}, "")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan *Verdict, 1)
			go func() {
				v, err := cl.Deliver(t.Context(), answer, 10*time.Second)
				if err != nil {
					t.Error(err)
				}
				done <- v
			}()
			// The processor, once the answer is stored: the refusal of
			// the event under its ID, then (unless it was its own) its echo.
			deadline := time.Now().Add(5 * time.Second)
			for storedWithID(t, cl, events.InputSubject(events.PrincipalIntegrator, "w1", events.ChatElicitationResponded), answer.ID()) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the answer was not stored")
				}
				time.Sleep(10 * time.Millisecond)
			}
			chat(events.TypeElicitationRejected, events.ChatElicitationRejected, "rej-"+answer.ID(), tc.refusedBy, events.ElicitationRejected{ElicitationID: "q1",
				RespondedEventID: answer.ID(), Reason: events.RejectInvalidEvent, Detail: "action: must be accept, decline or cancel"})
			chat(events.TypeElicitationResponded, events.ChatElicitationResponded, answer.ID(), events.PrincipalIntegrator,
				events.ElicitationResponded{ElicitationID: "q1", Action: schema.ActionAccept})
			v := <-done
			if v == nil || v.Outcome != tc.want {
				t.Fatalf("verdict %+v, want %s", v, tc.want)
			}
		})
	}
}
