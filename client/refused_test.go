package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
)

// Credentials taken for another principal's (their reply inbox refused
// by the server) make reading a thread fail at once with the refusal,
// not after the whole retry budget with "no answer from the NATS server
// in time" (what `parley send` said after 30 s).
func TestWatchWithRefusedInboxFailsAtOnce(t *testing.T) {
	srv := bustest.NewServerWithUsers(t, &server.User{Username: "integrator", Password: "p", Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.>", "parley.in.integrator.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_integrator.>"}},
	}}, &server.User{Username: "admin", Password: "p"})
	admin, err := nats.Connect(srv.ClientURL(), nats.UserInfo("admin", "p"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	ab, err := bus.New(admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ab.EnsureStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("integrator", "p"), nats.CustomInboxPrefix("_INBOX_gateway"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	start := time.Now()
	_, err = New(b, "/test").Watch(ctx, WatchOptions{Thread: "t1", FromStart: true})
	var pe *bus.PermissionError
	if !errors.As(err, &pe) || !pe.Inbox {
		t.Fatalf("watching with a refused inbox: %v after %v, want the inbox's PermissionError", err, time.Since(start))
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("failed after %v, want well within the retry budget", took)
	}
}
