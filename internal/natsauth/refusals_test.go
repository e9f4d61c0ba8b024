package natsauth_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/processor"
)

// busAs connects principal to the secured server as a bus client (its own
// credentials and inbox prefix).
func (s *secured) busAs(t *testing.T, principal string) *bus.Client {
	t.Helper()
	nc, err := natsauth.Connect(s.srv.ClientURL(), "test-"+principal, s.creds(principal), nil)
	if err != nil {
		t.Fatalf("%s: %v", principal, err)
	}
	t.Cleanup(nc.Close)
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startProcessor runs a processor on its own principal against s (no
// agent: a turn it starts stays running).
func (s *secured) startProcessor(t *testing.T, ctx context.Context) *bus.Client {
	t.Helper()
	b := s.busAs(t, natsauth.Processor)
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := processor.New(ctx, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	rctx, cancel := context.WithCancel(ctx)
	go func() { done <- p.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b
}

// subjectCounts returns how many messages PARLEY_CHAT holds on each
// subject matching filter (read as admin).
func subjectCounts(t *testing.T, ctx context.Context, admin *bus.Client, filter string) map[string]uint64 {
	t.Helper()
	st, err := admin.JetStream().Stream(ctx, events.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// awaitInputDrained waits until the processor has handled everything in
// PARLEY_INPUT (a work queue).
func awaitInputDrained(t *testing.T, ctx context.Context, admin *bus.Client) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := admin.JetStream().Stream(ctx, events.StreamInput)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("PARLEY_INPUT still holds %d messages", info.State.Msgs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A second integrator (mallory) sends answers and messages to the thread
// of the first (integrator), which it may not use. Each is refused
// forbidden, and mallory learns it (its Deliver returns the verdict), but
// none of the refusals is stored in the owner's thread: they are under
// mallory's principal (events.RefusedSubject). Stored in the thread, a
// stranger's refusals push the thread's real events past every reader's
// read limit (client.MaxPendingScan, gateway.MaxStateEvents).
func TestStrangersRefusalsStayOutOfTheThread(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := newSecured(t, "mallory")
	s.startProcessor(t, ctx)
	admin := s.busAs(t, natsauth.Admin)

	owner := client.NewWithOptions(s.busAs(t, natsauth.Integrator), &client.Options{Principal: natsauth.Integrator})
	first, err := owner.TurnRequest("t1", "", "hello", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Publish(ctx, first); err != nil {
		t.Fatal(err)
	}
	awaitInputDrained(t, ctx, admin) // taken: the thread is the owner's

	mallory := client.NewWithOptions(s.busAs(t, "mallory"), &client.Options{Principal: "mallory"})
	const answers = 200
	for i := range answers {
		e, err := mallory.Response("t1", fmt.Sprintf("el-%d", i), schema.ElicitResult{Action: schema.ActionAccept}, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mallory.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := mallory.TurnRequest("t1", "", "let me in", "")
	if err != nil {
		t.Fatal(err)
	}
	v, err := mallory.Deliver(ctx, msg, 60*time.Second)
	if err != nil || v.Outcome != client.OutcomeRejected {
		t.Fatalf("mallory's message: %+v, %v; want rejected", v, err)
	}
	if d, err := events.Data[events.TurnRejected](v.Event); err != nil || d.Reason != events.RejectForbidden {
		t.Errorf("mallory's refusal: %+v, %v; want reason forbidden", d, err)
	}
	awaitInputDrained(t, ctx, admin)

	inThread := subjectCounts(t, ctx, admin, events.ChatThreadSubjects("t1"))
	for subj, n := range inThread {
		if subj != events.ChatSubject("t1", events.ChatTurnRequested) {
			t.Errorf("the owner's thread holds %d events on %s; want only the owner's message", n, subj)
		}
	}
	refused := subjectCounts(t, ctx, admin, events.RefusedThreadSubjects("mallory", "t1"))
	if got := refused[events.RefusedSubject("mallory", "t1", events.ChatElicitationRejected)]; got != answers {
		t.Errorf("mallory's refused answers stored under mallory: %d, want %d", got, answers)
	}
	if got := refused[events.RefusedSubject("mallory", "t1", events.ChatTurnRejected)]; got != 1 {
		t.Errorf("mallory's refused messages stored under mallory: %d, want 1", got)
	}
	f, err := owner.FoldThread(ctx, "t1")
	if err != nil {
		t.Fatalf("the owner's fold of t1: %v", err)
	}
	if got := f.Status(); got != threadstate.Running {
		t.Errorf("the owner's fold of t1: %s, want running (its turn waits for an agent)", got)
	}
}
