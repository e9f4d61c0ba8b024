package bus

import (
	"context"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/events"
)

func TestIsInbox(t *testing.T) {
	for subject, want := range map[string]bool{
		"_INBOX.abc.1": true, "_INBOX_gateway.abc": true, "_INBOX_integrator.x.y": true,
		"_INBOX": false, "_INBOX.": false, "_INBOX_.x": false, "_INBOXES.x": false, "_INBOX_gateway": false,
		"$KV.parley_tools.list_entities": false, "parley.agent.run.resumed": false, "": false,
	} {
		if got := IsInbox(subject); got != want {
			t.Errorf("IsInbox(%q) = %v, want %v", subject, got, want)
		}
	}
}

// A request whose reply subject is not an inbox is not answered: the
// responder would otherwise publish, with its own permissions, wherever the
// requester chose (the tool-executor writing parley_tools for an
// integrator's entity lookup). A request with an inbox is answered.
func TestServeAnswersOnlyInboxes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ep := Endpoint{Service: "parley-lookup", Version: "1.0.0", Name: "entities", Subject: events.SubjectLookupEntities}
	go func() {
		_ = e.c.Serve(ctx, ep, func(ctx context.Context, req *event.Event) (*event.Event, error) {
			return events.New(events.SourceGate, events.TypeLookupEntitiesAnswered, "", events.LookupEntitiesReply{})
		})
	}()
	req, err := events.New(events.SourceGate, events.TypeLookupEntitiesRequested, "", events.LookupEntitiesRequest{Query: "a"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the service to answer an inbox", func() bool {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		_, err := e.c.Request(rctx, events.SubjectLookupEntities, req)
		return err == nil
	})

	target := "parley.agent.run.resumed"
	sub, err := e.nc.SubscribeSync(target)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := e.c.message(ctx, events.SubjectLookupEntities, req)
	if err != nil {
		t.Fatal(err)
	}
	msg.Reply = target
	if err := e.nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	_ = e.nc.Flush()
	if m, err := sub.NextMsg(700 * time.Millisecond); err != nats.ErrTimeout {
		t.Fatalf("a reply was published on %s (%v): %v", target, err, m)
	}
}
