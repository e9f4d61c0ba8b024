package bus

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
)

// A publish the server's permissions refuse this connection fails at once
// with an error naming the subject and the rule, instead of waiting for a
// JetStream acknowledgement that never comes (30 s of retries, then "no
// JetStream acknowledgement"): what `parley answer --principal gateway`
// with an integrator's credentials met. An allowed publish on the same
// connection, before and after, is acknowledged.
func TestPublishRefusedByPermissionsFailsAtOnce(t *testing.T) {
	srv := bustest.NewServerWithUsers(t, &server.User{Username: "u", Password: "p", Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.>", "ok.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	}})
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("u", "p"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	handled := make(chan error, 4)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { handled <- err })
	b, err := New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := b.JetStream().CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"ok.>", "no.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	newEvent := func(id string) *event.Event {
		e, err := events.NewWithID(id, "/test", events.TypeTurnRequested, "t1", map[string]string{"x": "y"})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if _, err := b.Publish(ctx, "ok.1", newEvent("a")); err != nil {
		t.Fatalf("allowed publish: %v", err)
	}
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = b.Publish(pctx, "no.1", newEvent("b"))
	took := time.Since(start)
	if !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("refused publish: %v after %v, want a permissions violation", err, took)
	}
	if took > 5*time.Second {
		t.Errorf("refused publish failed after %v, want at once", took)
	}
	if !strings.Contains(err.Error(), `"no.1"`) {
		t.Errorf("error %q does not name the subject", err)
	}
	select {
	case herr := <-handled:
		if !errors.Is(herr, nats.ErrPermissionViolation) {
			t.Errorf("the connection's own error handler got %v", herr)
		}
	case <-time.After(5 * time.Second):
		t.Error("the connection's own error handler was not called")
	}
	if _, err := b.Publish(ctx, "ok.2", newEvent("c")); err != nil {
		t.Fatalf("allowed publish after the refusal: %v", err)
	}
}

// Credentials whose reply inbox the server refuses (another principal's
// inbox prefix) can get no acknowledgement and no reply at all: the first
// publish fails at once with the refused subscription named, and so does
// every later one (Client.Refused), instead of each waiting out its
// retry budget.
func TestReplyInboxRefusedFailsAtOnce(t *testing.T) {
	srv := bustest.NewServerWithUsers(t, &server.User{Username: "u", Password: "p", Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.>", "ok.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_u.>"}},
	}}, &server.User{Username: "admin", Password: "p"})
	admin, err := nats.Connect(srv.ClientURL(), nats.UserInfo("admin", "p"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	ajs, _ := jetstream.New(admin)
	if _, err := ajs.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"ok.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	// u's credentials, taken for another principal's: inbox _INBOX_v.
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("u", "p"), nats.CustomInboxPrefix("_INBOX_v"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.NewWithID("a", "/test", events.TypeTurnRequested, "t1", map[string]string{"x": "y"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for i := range 2 {
		start := time.Now()
		_, err := b.Publish(ctx, "ok.1", e)
		var pe *PermissionError
		if !errors.As(err, &pe) || !pe.Inbox || !strings.HasPrefix(pe.Subject, "_INBOX_v.") {
			t.Fatalf("publish %d with a refused inbox: %v after %v, want a PermissionError naming the inbox", i, err, time.Since(start))
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("publish %d failed after %v, want at once", i, took)
		}
	}
	if !errors.Is(b.Refused(), nats.ErrPermissionViolation) {
		t.Errorf("Refused() = %v, want the inbox's permissions violation", b.Refused())
	}
}
