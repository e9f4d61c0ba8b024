package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/events"
)

// RequestMany gathers the replies of every service in its own queue group,
// stops when the caller says so, and reports no responders.
func TestRequestManyGathers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	subject := events.PreExecuteSubject("default", "search")
	req := preExecEvent(t)

	rctx, rcancel := context.WithTimeout(ctx, time.Second)
	_, err := e.c.RequestMany(rctx, subject, req, 0, func(Reply) bool { return true })
	rcancel()
	if !errors.Is(err, ErrNoResponders) {
		t.Fatalf("nobody listening: %v, want no responders", err)
	}

	for _, name := range []string{"a", "b", "c"} {
		go func() {
			_ = e.c.Serve(ctx, Endpoint{Service: "policy-" + name, Version: "1.0.0", Name: "pre_execute",
				Subject: events.SubjectPreExecAll, QueueGroup: name}, func(_ context.Context, req *event.Event) (*event.Event, error) {
				if name == "c" {
					return nil, errors.New("policy store down")
				}
				return events.New(events.SourceGate, events.TypePreExecuteDecided, req.Subject(),
					events.PolicyDecision{Policy: name, Decision: events.DecisionAllow})
			})
		}()
	}
	gather := func(max int, stop func(seen map[string]bool) bool) (map[string]bool, int, time.Duration, error) {
		seen := map[string]bool{}
		errs := 0
		start := time.Now()
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		_, err := e.c.RequestMany(rctx, subject, req, max, func(r Reply) bool {
			var se *ServiceError
			switch {
			case errors.As(r.Err, &se):
				errs++
			case r.Err != nil:
				t.Errorf("reply: %v", r.Err)
			default:
				d, _ := events.Data[events.PolicyDecision](r.Event)
				seen[d.Policy] = true
			}
			return !stop(seen)
		})
		return seen, errs, time.Since(start), err
	}
	waitFor(t, 3*time.Second, "three services", func() bool {
		seen, errs, _, err := gather(0, func(map[string]bool) bool { return false })
		if err != nil && !errors.Is(err, ErrNoResponders) {
			t.Fatalf("RequestMany: %v", err)
		}
		return len(seen) == 2 && errs == 1
	})
	// Stopping once a and b answered does not wait for the deadline.
	seen, _, took, err := gather(0, func(seen map[string]bool) bool { return seen["a"] && seen["b"] })
	if err != nil {
		t.Fatalf("RequestMany: %v", err)
	}
	if !seen["a"] || !seen["b"] || took > 900*time.Millisecond {
		t.Errorf("gathered %v in %v, want a and b well before the 1s deadline", seen, took)
	}
	// max bounds the replies handed over.
	n := 0
	rctx, rcancel = context.WithTimeout(ctx, time.Second)
	defer rcancel()
	if _, err := e.c.RequestMany(rctx, subject, req, 1, func(Reply) bool { n++; return true }); err != nil || n != 1 {
		t.Errorf("max 1: %d replies, %v", n, err)
	}
}
