package bus

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
)

// delivery builds an in-memory Delivery of an event of typ with raw JSON
// data (no NATS: the router reads only Event and Subject).
func delivery(t *testing.T, typ events.Type, data string) *Delivery {
	t.Helper()
	e := event.New()
	e.SetID("e1")
	e.SetSource("/test")
	e.SetType(string(typ))
	e.SetSubject("th")
	if err := e.SetData(events.DataContentTypeJSON, []byte(data)); err != nil {
		t.Fatal(err)
	}
	return &Delivery{Event: &e, Subject: "parley.agent.run.completed", NumDelivered: 1, StreamSeq: 7}
}

func TestRouterDecodesOnceToTheTypedHandler(t *testing.T) {
	r := NewRouter()
	var gotDone events.RunCompleted
	var gotFailed events.RunFailed
	On(r, events.KindRunCompleted, func(_ context.Context, d *Delivery, in events.RunCompleted) error {
		gotDone = in
		if d.StreamSeq != 7 {
			t.Errorf("delivery not passed through: %+v", d)
		}
		return nil
	})
	On(r, events.KindRunFailed, func(_ context.Context, _ *Delivery, in events.RunFailed) error {
		gotFailed = in
		return errors.New("transient")
	})
	if err := r.Handle(t.Context(), delivery(t, events.TypeRunCompleted, `{"runId":"r1","turnId":"t1"}`)); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if gotDone.RunID != "r1" || gotDone.TurnID != "t1" {
		t.Errorf("run.completed handler got %+v", gotDone)
	}
	// The handler's own error is the verdict, not made permanent.
	err := r.Handle(t.Context(), delivery(t, events.TypeRunFailed, `{"runId":"r2","error":"boom"}`))
	if err == nil || IsPermanent(err) || err.Error() != "transient" {
		t.Errorf("handler error = %v (permanent %v), want the handler's own transient error", err, IsPermanent(err))
	}
	if gotFailed.RunID != "r2" {
		t.Errorf("run.failed handler got %+v", gotFailed)
	}
	if got := r.Types(); len(got) != 2 || got[0] != events.TypeRunCompleted || got[1] != events.TypeRunFailed {
		t.Errorf("Types() = %v", got)
	}
}

func TestRouterUndecodableDataIsPermanentNamingTheField(t *testing.T) {
	r := NewRouter()
	called := false
	On(r, events.KindRunCompleted, func(context.Context, *Delivery, events.RunCompleted) error {
		called = true
		return nil
	})
	for name, data := range map[string]string{
		"wrong field type": `{"runId":7}`,
		"not JSON":         `{"runId":`,
	} {
		err := r.Handle(t.Context(), delivery(t, events.TypeRunCompleted, data))
		if !IsPermanent(err) {
			t.Errorf("%s: err = %v, want permanent", name, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "data: decoding "+string(events.TypeRunCompleted)) {
			t.Errorf("%s: err = %q, want it to name the data and the type", name, err)
		}
		if name == "wrong field type" && !strings.Contains(err.Error(), "runId") {
			t.Errorf("%s: err = %q, want it to name the field runId", name, err)
		}
	}
	e := delivery(t, events.TypeRunCompleted, `{}`)
	e.Event.DataEncoded = nil
	if err := r.Handle(t.Context(), e); !IsPermanent(err) || !strings.Contains(err.Error(), "data: required") {
		t.Errorf("no data: err = %v, want permanent data: required", err)
	}
	if called {
		t.Error("the handler ran on data that does not decode")
	}
}

func TestRouterUnroutedTypeIsPermanent(t *testing.T) {
	r := NewRouter()
	On(r, events.KindRunCompleted, func(context.Context, *Delivery, events.RunCompleted) error { return nil })
	for _, typ := range []events.Type{events.TypeRunPaused, "com.example.unknown"} {
		err := r.Handle(t.Context(), delivery(t, typ, `{}`))
		var ue *UnroutedError
		if !IsPermanent(err) || !errors.As(err, &ue) || ue.Type != typ {
			t.Fatalf("%s: err = %v, want a permanent *UnroutedError", typ, err)
		}
		if !strings.Contains(err.Error(), "unrouted type") || !strings.Contains(err.Error(), string(events.TypeRunCompleted)) {
			t.Errorf("%s: err = %q, want it to say unrouted type and list the routed ones", typ, err)
		}
	}
	if err := r.Handle(t.Context(), &Delivery{Subject: "x"}); !IsPermanent(err) || !strings.HasPrefix(err.Error(), "event: required") {
		t.Errorf("no event: err = %v", err)
	}
}

func TestOnPanicsOnASecondRouteForAType(t *testing.T) {
	r := NewRouter()
	h := func(context.Context, *Delivery, events.RunCompleted) error { return nil }
	On(r, events.KindRunCompleted, h)
	for name, f := range map[string]func(){
		"twice": func() { On(r, events.KindRunCompleted, h) },
		"zero":  func() { On(r, events.Kind[events.RunCompleted]{}, h) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: On did not panic", name)
				}
			}()
			f()
		}()
	}
}

// subjecter is what every events.Kind has, whatever its payload.
type subjecter interface {
	Type() events.Type
	Subject(stream string, values ...string) (string, error)
}

// kinds lists every events.Kind; TestKindSubjectsAreStoredByTheirStream
// fails when a catalogue type is missing here.
var kinds = []subjecter{
	events.KindTurnRequested, events.KindElicitationResponded, events.KindTurnPaused,
	events.KindElicitationRequested, events.KindElicitationRejected, events.KindElicitationExpired,
	events.KindElicitationCancelled, events.KindTurnCompleted, events.KindTurnFailed, events.KindTurnRejected,
	events.KindMessageDelta, events.KindProgress, events.KindRunRequested, events.KindRunResumed,
	events.KindToolResultReady, events.KindRunCompleted, events.KindRunPaused, events.KindRunFailed,
	events.KindToolCallRequested, events.KindPreExecuteRequested, events.KindPreExecuteDecided,
	events.KindLookupEntitiesRequested, events.KindLookupEntitiesAnswered, events.KindThreadStateRequested, events.KindThreadStateAnswered, events.KindDeadLettered,
	events.KindResolveReferencesRequested, events.KindResolveReferencesAnswered,
	events.KindApprovalGranted, events.KindApprovalUsed, events.KindApprovalRevoked,
	events.KindApprovalsRequested, events.KindApprovalsAnswered, events.KindApprovalUseRequested, events.KindApprovalUseAnswered,
}

// TestKindSubjectsAreStoredByTheirStream publishes on every stored route
// of every catalogue type, with the subject its Kind builds, to the
// streams EnsureStreams creates, and checks that the route's own stream
// (and no other) stored it.
func TestKindSubjectsAreStoredByTheirStream(t *testing.T) {
	env := newEnv(t)
	byType := map[events.Type]subjecter{}
	for _, k := range kinds {
		byType[k.Type()] = k
	}
	for _, entry := range events.Catalog() {
		k, ok := byType[entry.Type]
		if !ok {
			t.Errorf("%s: no events.Kind in this test's list", entry.Type)
			continue
		}
		for _, r := range entry.Routes {
			if r.Stream == "" {
				continue // request-reply: core NATS
			}
			values := make([]string, len(r.Params()))
			for i := range values {
				values[i] = "v" + string(rune('a'+i))
			}
			// A kind's subject is its first route in the stream; a further
			// route in the same stream (a refusal under its sender's
			// principal) is built from the route.
			subject, err := k.Subject(r.Stream, values...)
			if len(values) != len(firstRoute(entry, r.Stream).Params()) {
				subject, err = r.SubjectFor(values...)
			}
			if err != nil {
				t.Errorf("%s: Subject(%s, %v): %v", entry.Type, r.Stream, values, err)
				continue
			}
			ack, err := env.js.Publish(t.Context(), subject, []byte(`{}`))
			if err != nil {
				t.Errorf("%s: %s is stored by no stream: %v", entry.Type, subject, err)
				continue
			}
			if ack.Stream != r.Stream {
				t.Errorf("%s: %s stored by %s, the catalogue says %s", entry.Type, subject, ack.Stream, r.Stream)
			}
		}
	}
}

// firstRoute is entry's first route in stream with a subject.
func firstRoute(entry events.Entry, stream string) events.Route {
	for _, r := range entry.Routes {
		if r.Stream == stream && r.Subject != "" {
			return r
		}
	}
	return events.Route{}
}

// fakePublisher records what PublishTo sends (no NATS).
type fakePublisher struct{ subjects []string }

func (f *fakePublisher) Publish(_ context.Context, subject string, _ *event.Event) (*jetstream.PubAck, error) {
	f.subjects = append(f.subjects, subject)
	return &jetstream.PubAck{}, nil
}

func TestPublishToTakesTheSubjectFromTheEventType(t *testing.T) {
	var p fakePublisher
	e, err := events.KindTurnFailed.New(events.SourceProcessor, "", "th1", events.TurnFailed{Reason: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PublishTo(t.Context(), &p, events.StreamChat, e, "th1"); err != nil {
		t.Fatal(err)
	}
	if len(p.subjects) != 1 || p.subjects[0] != "parley.chat.th1.turn.failed" {
		t.Errorf("published on %v", p.subjects)
	}
	// No route of turn.failed in PARLEY_AGENT; a thread that is not a token.
	for _, tc := range []struct {
		stream, value, want string
	}{
		{events.StreamAgent, "th1", `no route in stream "PARLEY_AGENT"`},
		{events.StreamChat, "a.b", "thread: "},
	} {
		_, err := PublishTo(t.Context(), &p, tc.stream, e, tc.value)
		if !IsPermanent(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PublishTo(%s, %s): %v, want permanent %q", tc.stream, tc.value, err, tc.want)
		}
	}
	if len(p.subjects) != 1 {
		t.Errorf("a refused event was published: %v", p.subjects)
	}
}
