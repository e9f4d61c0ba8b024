package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

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
	_, err := e.c.RequestMany(rctx, subject, "", req, 0, func(Reply) bool { return true })
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
		_, err := e.c.RequestMany(rctx, subject, "", req, max, func(r Reply) bool {
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
	if _, err := e.c.RequestMany(rctx, subject, "", req, 1, func(Reply) bool { n++; return true }); err != nil || n != 1 {
		t.Errorf("max 1: %d replies, %v", n, err)
	}
}

// A responder that names itself (Endpoint.ReplyAs) answers on
// <reply>.<name>, and RequestMany says who answered from that subject
// (Reply.Responder), whatever the reply's data claims; a reply on the
// bare reply subject has no responder. The reply subject carries the
// scope after the inbox prefix.
func TestRequestManyResponders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	subject := events.PreExecuteSubject("default", "search")
	replies := make(chan string, 8)
	for _, name := range []string{"named", "bare"} {
		ep := Endpoint{Service: "policy-" + name, Version: "1.0.0", Name: "pre_execute",
			Subject: events.SubjectPreExecAll, QueueGroup: name}
		if name == "named" {
			ep.ReplyAs = "named"
		}
		go func() {
			_ = e.c.Serve(ctx, ep, func(_ context.Context, req *event.Event) (*event.Event, error) {
				return events.New(events.SourceGate, events.TypePreExecuteDecided, req.Subject(),
					events.PolicyDecision{Policy: "someone-else", Decision: events.DecisionAllow})
			})
		}()
	}
	if _, err := e.nc.Subscribe(events.SubjectPreExecAll, func(m *nats.Msg) { replies <- m.Reply }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "two services", func() bool {
		got := map[string]bool{}
		rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer rcancel()
		_, err := e.c.RequestMany(rctx, subject, events.PreExecuteReplyScope, preExecEvent(t), 0, func(r Reply) bool {
			if r.Err != nil {
				t.Errorf("reply: %v", r.Err)
			}
			got["<"+r.Responder+">"] = true
			return true
		})
		if err != nil && !errors.Is(err, ErrNoResponders) {
			t.Fatal(err)
		}
		return len(got) == 2 && got["<named>"] && got["<>"]
	})
	for len(replies) > 0 {
		if r := <-replies; !strings.HasPrefix(r, "_INBOX."+events.PreExecuteReplyScope+".") {
			t.Errorf("reply subject %q, want _INBOX.%s.<unique>", r, events.PreExecuteReplyScope)
		}
	}
}

// Requests with a scope share one reply subscription of the connection:
// concurrent requests each get their own replies (routed by the reply
// subject's unique token, with the responder's token below it), no
// request subscribes on its own, and a reply arriving after its request
// returned reaches nobody.
func TestRequestManySharesReplySubscription(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	subject := events.PreExecuteSubject("default", "search")
	go func() {
		_ = e.c.Serve(ctx, Endpoint{Service: "policy-echo", Version: "1.0.0", Name: "pre_execute",
			Subject: events.SubjectPreExecAll, QueueGroup: "echo", ReplyAs: "echo"}, func(_ context.Context, req *event.Event) (*event.Event, error) {
			// The decision's reason echoes the request's thread.
			return events.New(events.SourceGate, events.TypePreExecuteDecided, req.Subject(),
				events.PolicyDecision{Policy: "echo", Decision: events.DecisionAllow, Reason: req.Subject()})
		})
	}()
	ask := func(thread string) (string, int, error) {
		req, err := events.New(events.SourceAgent, events.TypePreExecuteRequested, thread,
			events.PreExecuteRequest{Agent: "default", Thread: thread, RunID: "r1"})
		if err != nil {
			return "", 0, err
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		var reason string
		subs := 0
		_, err = e.c.RequestMany(rctx, subject, events.PreExecuteReplyScope, req, 1, func(r Reply) bool {
			subs = e.nc.NumSubscriptions()
			if r.Err != nil {
				reason = r.Err.Error()
				return false
			}
			d, _ := events.Data[events.PolicyDecision](r.Event)
			reason = d.Reason
			return false
		})
		return reason, subs, err
	}
	waitFor(t, 3*time.Second, "the service", func() bool {
		_, _, err := ask("warm-up")
		return err == nil
	})
	base := e.nc.NumSubscriptions()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			thread := fmt.Sprintf("thread-%d", i)
			got, subs, err := ask(thread)
			if err != nil || got != thread {
				t.Errorf("request of %s: reply %q, %v", thread, got, err)
			}
			if subs != base {
				t.Errorf("request of %s: %d subscriptions while waiting, want the shared %d", thread, subs, base)
			}
		})
	}
	wg.Wait()
	// A late reply (its request returned) is dropped, not delivered to
	// the next request.
	m, err := e.c.replyMux(events.PreExecuteReplyScope)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Publish(m.prefix+"gone.echo", []byte("late")); err != nil {
		t.Fatal(err)
	}
	if got, _, err := ask("after"); err != nil || got != "after" {
		t.Errorf("request after a late reply: %q, %v", got, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.waiting) != 0 {
		t.Errorf("%d requests still registered after all returned", len(m.waiting))
	}
}
