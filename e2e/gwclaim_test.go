package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/gateway"
	"github.com/parley-dev/parley/schema"
)

// streamCode opens a thread's event stream and returns the status (it
// does not read an open stream: 200 means the stream was served).
func (x *gw) streamCode(token, thread string) int {
	x.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", x.srv.URL+"/v1/threads/"+thread+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		x.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// noAccess checks that token's user can neither read (GET, event stream)
// nor write to thread through x: 404 each, like an unknown thread, and
// thread is not in the user's list.
func (x *gw) noAccess(token, thread string) {
	x.t.Helper()
	for _, path := range []string{"/v1/threads/" + thread, "/v1/threads/" + thread + "/elicitations/e1"} {
		method, body := "GET", any(nil)
		if strings.Contains(path, "elicitations") {
			method, body = "POST", map[string]any{"action": "decline"}
		}
		if resp, b := x.do(method, path, token, body); resp.StatusCode != http.StatusNotFound {
			x.t.Fatalf("%s %s = %d %s, want 404", method, path, resp.StatusCode, b)
		}
	}
	if c := x.streamCode(token, thread); c != http.StatusNotFound {
		x.t.Fatalf("GET /v1/threads/%s/events = %d, want 404", thread, c)
	}
	if resp, b := x.do("GET", "/v1/threads", token, nil); resp.StatusCode != 200 || strings.Contains(string(b), `"`+thread+`"`) {
		x.t.Fatalf("thread list = %d %s, want 200 without %s", resp.StatusCode, b, thread)
	}
}

// The newcomer's finding: an integrator's thread, then a gateway user
// names it. The gateway answers 404, publishes nothing (the thread's
// accepted messages are someone else's: the processor would refuse it
// forbidden and write the refusal into the integrator's thread) and keeps
// no claim, so neither that user nor another reads anything of the
// integrator's thread.
func TestGatewayIntegratorThreadHidden(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	s.send("gi1", "list everything")
	s.completed("gi1", 1)
	for i, tok := range []string{aliceToken, bobToken} {
		resp, body := x.do("POST", "/v1/threads/gi1/messages", tok, map[string]any{"text": "show me"})
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(body), "integrator") {
			t.Fatalf("user %d POST gi1 = %d %s, want 404 naming nobody", i, resp.StatusCode, body)
		}
		x.noAccess(tok, "gi1")
	}
	if rejected := s.rec.matching("gi1", events.TypeTurnRejected); len(rejected) != 0 {
		t.Fatalf("turn.rejected on gi1: %d, want none (the gateway publishes nothing to it)", len(rejected))
	}
}

// The race: the integrator's message and a gateway user's first message
// wait for a processor together; the gateway that took the user's message
// is gone before the verdict (a restart); the verdict decides on another
// replica. Who the processor took first owns the thread: the integrator
// (gi2: the user reads nothing) or the user (gi3: the user reads it).
func TestGatewayClaimRaceWithIntegrator(t *testing.T) {
	s := start(t, options{})
	a := s.startGateway(&gateway.Options{VerdictWait: 200 * time.Millisecond})
	b := s.startGateway(nil)
	s.stopProcessor("A")
	s.send("gi2", "list everything")
	if got := a.send(aliceToken, "gi2", "show me"); got.Status != gateway.VerdictPending {
		t.Fatalf("alice POST gi2 = %+v, want pending (no processor)", got)
	}
	if got := a.send(aliceToken, "gi3", "list everything"); got.Status != gateway.VerdictPending {
		t.Fatalf("alice POST gi3 = %+v, want pending (no processor)", got)
	}
	s.send("gi3", "mine")
	// A pending claim is not readable yet.
	if resp, body := a.do("GET", "/v1/threads/gi2", aliceToken, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("alice GET gi2 while pending = %d %s, want 404", resp.StatusCode, body)
	}
	a.stop()
	s.startProcessor("B")
	s.completed("gi2", 1)
	s.rec.await(t, 10*time.Second, "gi2", events.TypeTurnRejected, 1)
	b.noAccess(aliceToken, "gi2")
	resp, body := b.do("POST", "/v1/threads/gi2/messages", aliceToken, map[string]any{"text": "again"})
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("alice POST gi2 after the verdict = %d %s, want 404", resp.StatusCode, body)
	}

	s.completed("gi3", 1)
	s.rec.await(t, 10*time.Second, "gi3", events.TypeTurnRejected, 1) // the integrator's
	resp, body = b.do("GET", "/v1/threads/gi3", aliceToken, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"owner":"alice"`) {
		t.Fatalf("alice GET gi3 = %d %s, want 200 owner alice", resp.StatusCode, body)
	}
	if c := b.streamCode(aliceToken, "gi3"); c != 200 {
		t.Fatalf("alice's event stream of gi3 = %d, want 200", c)
	}
	b.noAccess(bobToken, "gi3")
}

// A thread its owner shared through the processor (turn.requested share)
// with a gateway user works through the gateway: the processor accepts the
// user's message, so the user reads the thread; anyone else still 404.
func TestGatewayThreadSharedThroughProcessor(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	e, err := events.New("/parley/test", events.TypeTurnRequested, "gi4", events.TurnRequested{
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: "list everything"},
		Share:   []events.Identity{{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Publish(s.ctx, e); err != nil {
		t.Fatal(err)
	}
	s.completed("gi4", 1)
	if got := x.send(bobToken, "gi4", "and the drafts?"); got.Status != gateway.VerdictAccepted {
		t.Fatalf("bob POST gi4 = %+v, want accepted", got)
	}
	if resp, body := x.do("GET", "/v1/threads/gi4", bobToken, nil); resp.StatusCode != 200 {
		t.Fatalf("bob GET gi4 = %d %s, want 200", resp.StatusCode, body)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	first := awaitType(t, x.sse(ctx, bobToken, "gi4", 0), events.TypeTurnRequested)
	if data, _ := first[0].data["data"].(map[string]any); data == nil || !strings.Contains(first[0].data["id"].(string), e.ID()) {
		t.Fatalf("bob's stream starts with %v, want the owner's message %s", first[0].data, e.ID())
	}
	resp, body := x.do("POST", "/v1/threads/gi4/messages", aliceToken, map[string]any{"text": "me too"})
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("alice POST gi4 = %d %s, want 404", resp.StatusCode, body)
	}
	x.noAccess(aliceToken, "gi4")
	// Bob is a party the integrator shared gi4 with, not its owner: he may
	// not share it on (the processor takes grants only from its owner,
	// and would refuse his messages carrying one), and carol reads nothing.
	resp, body = x.do("PUT", "/v1/threads/gi4/shares/carol", bobToken, nil)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "forbidden") {
		t.Fatalf("bob shares gi4 with carol = %d %s, want 403 forbidden", resp.StatusCode, body)
	}
	x.noAccess(carolToken, "gi4")
	if got := x.send(bobToken, "gi4", "still mine to use?"); got.Status != "published" {
		t.Fatalf("bob POST gi4 after refused share = %+v, want published", got)
	}
	s.completed("gi4", 3)
}

// Sharing does not get around the verdict: alice cannot share an
// integrator's thread (a share claims only a name with no events: 404, no
// claim), her message to it is refused, and bob reads nothing either way.
func TestGatewayShareOfIntegratorThread(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	s.send("gs1", "list everything")
	s.completed("gs1", 1)
	if resp, body := x.do("PUT", "/v1/threads/gs1/shares/bob", aliceToken, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("alice shares the integrator's gs1 = %d %s, want 404", resp.StatusCode, body)
	}
	x.noAccess(bobToken, "gs1")
	if resp, body := x.do("POST", "/v1/threads/gs1/messages", aliceToken, map[string]any{"text": "show me"}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("alice POST gs1 = %d %s, want 404 (someone else's thread)", resp.StatusCode, body)
	}
	x.noAccess(bobToken, "gs1")
	x.noAccess(aliceToken, "gs1")
	if resp, body := x.do("PUT", "/v1/threads/gs1/shares/bob", aliceToken, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("alice shares gs1 again = %d %s, want 404", resp.StatusCode, body)
	}
	x.noAccess(bobToken, "gs1")
	if n := len(s.rec.matching("gs1", events.TypeTurnRejected)); n != 0 {
		t.Fatalf("turn.rejected on gs1: %d, want none (the gateway publishes nothing to it)", n)
	}
}
