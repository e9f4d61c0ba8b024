package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

const (
	ownerTok = "owner-token-0123456789"
	otherTok = "other-token-0123456789"
)

// shareGateways starts n gateways on one NATS server, each on its own
// connection, with two users: "owner" and "other".
func shareGateways(t *testing.T, n int) []*Gateway {
	t.Helper()
	srv := bustest.NewServer(t)
	var out []*Gateway
	for range n {
		b, err := bus.New(srv.Connect(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.EnsureStreams(t.Context()); err != nil { // the workers' job
			t.Fatal(err)
		}
		g, err := New(t.Context(), b, StaticTokens{ownerTok: "owner", otherTok: "other"}, &Options{RatePerSecond: 100, RateBurst: 100})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	return out
}

func access(t *testing.T, w interface{ Result() *http.Response }, body string) ThreadAccess {
	t.Helper()
	var a ThreadAccess
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	return a
}

// The share routes: owner only, validated, bounded by events.MaxShares,
// idempotent; a grant lets the user read the thread, a revoke takes it
// away; the owner's messages carry the shares to the processor.
func TestShares(t *testing.T) {
	g := shareGateways(t, 1)[0]
	h := g.Handler()
	path := func(user string) string { return "/v1/threads/s1/shares/" + url.PathEscape(user) }

	// Sharing an unclaimed thread makes a pending claim for the caller:
	// the share gives nothing until the processor accepts the owner's
	// claim (verify.go).
	w := request(t, h, "PUT", path("other"), ownerTok, "", nil)
	if w.Code != http.StatusOK {
		t.Fatalf("PUT share = %d %s", w.Code, w.Body)
	}
	if a := access(t, w, w.Body.String()); a.Owner != "owner" || !slices.Equal(a.Shared, []string{"other"}) || !a.Pending {
		t.Fatalf("share = %+v, want owner shared [other], pending", a)
	}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/threads/s1", ""},
		{"POST", "/v1/threads/s1/messages", `{"text":"hi"}`},
		{"POST", "/v1/threads/s1/elicitations/e1", `{"action":"accept"}`},
		{"PUT", path("x"), ""},
	} {
		if w := request(t, h, r.method, r.path, otherTok, r.body, nil); w.Code != http.StatusNotFound {
			t.Errorf("shared a pending claim: %s %s = %d %s, want 404", r.method, r.path, w.Code, w.Body)
		}
	}
	if w := request(t, h, "GET", "/v1/threads", otherTok, "", nil); strings.Contains(w.Body.String(), "s1") {
		t.Fatalf("other's list with a pending share = %s, want no s1", w.Body)
	}
	acceptClaim(t, g, "s1")
	if w := request(t, h, "PUT", path("other"), ownerTok, "", nil); w.Code != http.StatusOK || access(t, w, w.Body.String()).Pending {
		t.Fatalf("PUT share again after the verdict = %d %s, want 200 not pending", w.Code, w.Body)
	}
	if w := request(t, h, "GET", "/v1/threads/s1", otherTok, "", nil); w.Code != http.StatusOK ||
		!strings.Contains(w.Body.String(), `"owner":"owner"`) || !strings.Contains(w.Body.String(), `"shared":["other"]`) ||
		!strings.Contains(w.Body.String(), `"role":"shared"`) {
		t.Fatalf("other GET s1 = %d %s, want 200 naming the owner and the share", w.Code, w.Body)
	}
	if w := request(t, h, "GET", "/v1/threads/s1", ownerTok, "", nil); !strings.Contains(w.Body.String(), `"role":"owner"`) {
		t.Fatalf("owner GET s1 = %d %s, want role owner", w.Code, w.Body)
	}
	if w := request(t, h, "GET", "/v1/threads", otherTok, "", nil); !strings.Contains(w.Body.String(), `"thread":"s1"`) {
		t.Fatalf("other's list = %s, want s1", w.Body)
	}

	for _, tc := range []struct {
		name, method, path, token string
		status                    int
		reason                    string
	}{
		{"shared user shares", "PUT", path("x"), otherTok, 403, ReasonForbidden},
		{"shared user revokes", "DELETE", path("other"), otherTok, 403, ReasonForbidden},
		{"owner shares with self", "PUT", path("owner"), ownerTok, 400, ReasonBadRequest},
		{"control character", "PUT", path("a\nb"), ownerTok, 400, ReasonBadRequest},
		{"too long", "PUT", path(strings.Repeat("u", MaxSubject+1)), ownerTok, 400, ReasonBadRequest},
		{"not UTF-8", "PUT", "/v1/threads/s1/shares/%ff", ownerTok, 400, ReasonBadRequest},
		{"stranger's thread", "PUT", "/v1/threads/s2/shares/x", ownerTok, 200, ""},
		{"stranger shares", "PUT", "/v1/threads/s2/shares/y", otherTok, 404, ReasonNotFound},
		{"stranger revokes", "DELETE", "/v1/threads/s2/shares/x", otherTok, 404, ReasonNotFound},
		{"unclaimed revoke", "DELETE", "/v1/threads/s3/shares/x", ownerTok, 404, ReasonNotFound},
		{"bad thread", "PUT", "/v1/threads/a*b/shares/x", ownerTok, 400, ReasonBadRequest},
		{"no token", "PUT", path("x"), "", 401, ReasonUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := request(t, h, tc.method, tc.path, tc.token, "", nil)
			if w.Code != tc.status || tc.reason != "" && !strings.Contains(w.Body.String(), `"reason":"`+tc.reason+`"`) {
				t.Fatalf("%s %s = %d %s, want %d %s", tc.method, tc.path, w.Code, w.Body, tc.status, tc.reason)
			}
		})
	}

	// The owner's message carries the shares; the shared user's does not
	// (only the owner may share, at the processor too).
	if w := request(t, h, "POST", "/v1/threads/s1/messages", ownerTok, `{"text":"hi"}`, nil); w.Code != http.StatusAccepted {
		t.Fatalf("owner's message = %d %s", w.Code, w.Body)
	}
	if got := lastInputShare(t, g, "s1"); fmt.Sprint(got) != fmt.Sprint([]events.Identity{{Principal: events.PrincipalGateway, OnBehalfOf: "other"}}) {
		t.Fatalf("owner's turn.requested share = %v, want [other via gateway]", got)
	}
	if w := request(t, h, "POST", "/v1/threads/s1/messages", otherTok, `{"text":"hi"}`, nil); w.Code != http.StatusAccepted {
		t.Fatalf("shared user's message = %d %s", w.Code, w.Body)
	}
	if got := lastInputShare(t, g, "s1"); got != nil {
		t.Fatalf("shared user's turn.requested share = %v, want none", got)
	}

	// The bound: MaxShares users, one more is 409, the same one again is
	// fine (nothing changes).
	for i := 1; i < events.MaxShares; i++ {
		if w := request(t, h, "PUT", path(fmt.Sprintf("u%02d", i)), ownerTok, "", nil); w.Code != http.StatusOK {
			t.Fatalf("share %d = %d %s", i, w.Code, w.Body)
		}
	}
	w = request(t, h, "PUT", path("one-too-many"), ownerTok, "", nil)
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), ReasonTooManyShares) {
		t.Fatalf("share %d = %d %s, want 409 %s", events.MaxShares+1, w.Code, w.Body, ReasonTooManyShares)
	}
	if w := request(t, h, "PUT", path("other"), ownerTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("repeated share at the bound = %d %s, want 200", w.Code, w.Body)
	}

	// Revoked users still count (the processor keeps their grants, and
	// would refuse the owner's messages over the bound): a new user is
	// 409 after a revoke, the revoked one may be shared again.
	if w := request(t, h, "DELETE", path("u01"), ownerTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("revoke u01 = %d %s", w.Code, w.Body)
	}
	if w := request(t, h, "PUT", path("newcomer"), ownerTok, "", nil); w.Code != http.StatusConflict {
		t.Fatalf("share after a revoke at the bound = %d %s, want 409", w.Code, w.Body)
	}
	if w := request(t, h, "PUT", path("u01"), ownerTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("share again with the revoked u01 = %d %s, want 200", w.Code, w.Body)
	}

	// The revoke: 404 on every thread route and gone from the list.
	w = request(t, h, "DELETE", path("other"), ownerTok, "", nil)
	if a := access(t, w, w.Body.String()); w.Code != http.StatusOK || slices.Contains(a.Shared, "other") || len(a.Shared) != events.MaxShares-1 {
		t.Fatalf("DELETE share = %d %s", w.Code, w.Body)
	}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/threads/s1", ""},
		{"GET", "/v1/threads/s1/events", ""},
		{"POST", "/v1/threads/s1/messages", `{"text":"hi"}`},
		{"POST", "/v1/threads/s1/elicitations/e1", `{"action":"accept"}`},
	} {
		if w := request(t, h, r.method, r.path, otherTok, r.body, nil); w.Code != http.StatusNotFound {
			t.Errorf("revoked %s %s = %d %s, want 404", r.method, r.path, w.Code, w.Body)
		}
	}
	if w := request(t, h, "GET", "/v1/threads", otherTok, "", nil); strings.Contains(w.Body.String(), "s1") {
		t.Fatalf("other's list after the revoke = %s", w.Body)
	}
}

// acceptClaim sends the owner's message to thread and plays the
// processor accepting it (its echo in PARLEY_CHAT), which confirms the
// owner's claim.
func acceptClaim(t *testing.T, g *Gateway, thread string) {
	t.Helper()
	if w := request(t, g.Handler(), "POST", "/v1/threads/"+thread+"/messages", ownerTok, `{"text":"first"}`, nil); w.Code != http.StatusAccepted {
		t.Fatalf("owner's first message = %d %s", w.Code, w.Body)
	}
	echoInput(t, g, thread, events.ChatTurnRequested)
	if err := g.owners.check(t.Context(), thread, "owner"); err != nil {
		t.Fatalf("owner's claim after the processor's echo: %v", err)
	}
}

// lastInputShare returns the share of the gateway's last turn.requested
// on thread in PARLEY_INPUT.
func lastInputShare(t *testing.T, g *Gateway, thread string) []events.Identity {
	t.Helper()
	s, err := g.bus.JetStream().Stream(t.Context(), events.StreamInput)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(t.Context(), events.InputSubject(events.PrincipalGateway, thread, events.ChatTurnRequested))
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.Decode(events.Header(m.Header), m.Data)
	if err != nil {
		t.Fatal(err)
	}
	d, err := events.Data[events.TurnRequested](e)
	if err != nil {
		t.Fatal(err)
	}
	return d.Share
}

// Grants made at once through two replicas all land (compare-and-set on
// the record's revision; none overwrites another), and never more than
// MaxShares.
func TestSharesConcurrentReplicas(t *testing.T) {
	gs := shareGateways(t, 2)
	if w := request(t, gs[0].Handler(), "POST", "/v1/threads/c1/messages", ownerTok, `{"text":"hi"}`, nil); w.Code != http.StatusAccepted {
		t.Fatalf("claim = %d %s", w.Code, w.Body)
	}
	n := events.MaxShares + 4
	codes := make([]int, n)
	var wg sync.WaitGroup
	began := time.Now()
	for i := range n {
		wg.Go(func() {
			w := request(t, gs[i%2].Handler(), "PUT", fmt.Sprintf("/v1/threads/c1/shares/u%02d", i), ownerTok, "", nil)
			codes[i] = w.Code
		})
	}
	wg.Wait()
	t.Logf("%d concurrent shares through 2 replicas in %v", n, time.Since(began).Round(time.Millisecond))
	ok, full := 0, 0
	for _, c := range codes {
		switch c {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
			full++
		}
	}
	rec, err := gs[1].owners.get(t.Context(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	if ok != events.MaxShares || full != n-events.MaxShares || len(rec.Shared) != events.MaxShares {
		t.Fatalf("codes %v; record shared with %d (%v); want %d granted, the rest 409", codes, len(rec.Shared), rec.Shared, events.MaxShares)
	}
}

// A revoke ends the user's open event streams — at once through the
// watch of the records on another replica, or at the periodic check
// without the watch — and their reconnect is 404; the owner's stream goes
// on.
func TestRevokeEndsEventStream(t *testing.T) {
	t.Run("watch", func(t *testing.T) { testRevokeEndsEventStream(t, &Options{AccessRecheck: time.Hour}) })
	t.Run("recheck", func(t *testing.T) {
		testRevokeEndsEventStream(t, &Options{AccessRecheck: 50 * time.Millisecond, noAccessWatch: true})
	})
}

func testRevokeEndsEventStream(t *testing.T, opts *Options) {
	srv := bustest.NewServer(t)
	b, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(t.Context()); err != nil { // the workers' job
		t.Fatal(err)
	}
	g, err := New(t.Context(), b, StaticTokens{ownerTok: "owner", otherTok: "other"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The share and the revoke go through another replica.
	b2, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.EnsureStreams(t.Context()); err != nil { // the workers' job
		t.Fatal(err)
	}
	g2, err := New(t.Context(), b2, StaticTokens{ownerTok: "owner", otherTok: "other"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	hs := httptest.NewServer(g.Handler())
	defer hs.Close()
	defer g.Close()
	if w := request(t, g2.Handler(), "PUT", "/v1/threads/r1/shares/other", ownerTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("share = %d %s", w.Code, w.Body)
	}
	acceptClaim(t, g2, "r1")
	open := func(tok string) (*http.Response, <-chan error) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", hs.URL+"/v1/threads/r1/events", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET events as %s: %v %v", tok, resp, err)
		}
		ended := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()
		return resp, ended
	}
	otherResp, otherEnded := open(otherTok)
	defer otherResp.Body.Close()
	ownerResp, ownerEnded := open(ownerTok)
	defer ownerResp.Body.Close()
	revoked := time.Now()
	if w := request(t, g2.Handler(), "DELETE", "/v1/threads/r1/shares/other", ownerTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("revoke = %d %s", w.Code, w.Body)
	}
	select {
	case err := <-otherEnded:
		if err != nil {
			t.Fatalf("the revoked user's stream ended with %v, want a clean end", err)
		}
		t.Logf("the stream ended %v after the revoke", time.Since(revoked).Round(time.Millisecond))
	// Well under the hour of AccessRecheck in the watch case: the watch
	// ended it. 10 s, not 2: on a loaded 2-core machine the watch's
	// delivery alone took over 2 s.
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked user's event stream is still open 10s after the revoke")
	}
	select {
	case err := <-ownerEnded:
		t.Fatalf("the owner's stream ended: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if w := request(t, g.Handler(), "GET", "/v1/threads/r1/events", otherTok, "", nil); w.Code != http.StatusNotFound {
		t.Fatalf("reconnect after the revoke = %d, want 404", w.Code)
	}
}

// A share of a claim the processor has not accepted opens nothing: the
// shared user gets 404 on every route while the claim is pending, and when
// the processor refuses the claim's first message (the thread is someone
// else's, an integrator's here) the claim goes with its shares, whether
// the refusal is found by the owner's, the shared user's or a share
// request. Nobody reaches a foreign thread through a share.
func TestShareOfUnverifiedClaim(t *testing.T) {
	g, _ := newVerdictGateway(t)
	h := g.Handler()
	refuse := func(thread, eventID string) {
		t.Helper()
		rej, err := events.New("/parley/processor", events.TypeTurnRejected, thread, events.TurnRejected{RequestEventID: eventID,
			Reason: events.RejectForbidden, Errors: []schema.Violation{{Rule: "thread " + thread + " belongs to integrator"}}})
		if err != nil {
			t.Fatal(err)
		}
		publishChat(t, g, thread, events.ChatTurnRejected, rej)
	}
	// eveSees checks eve gets 404 on thread; held: dev's claim holds it
	// (else her message or share would claim the released thread).
	eveSees := func(thread string, held bool) {
		t.Helper()
		routes := []struct{ method, path, body string }{
			{"GET", "/v1/threads/" + thread, ""},
			{"POST", "/v1/threads/" + thread + "/elicitations/e1", `{"action":"accept"}`},
		}
		if held {
			routes = append(routes, []struct{ method, path, body string }{
				{"PUT", "/v1/threads/" + thread + "/shares/x", ""},
				{"POST", "/v1/threads/" + thread + "/messages", `{"text":"hi"}`},
			}...)
		}
		for _, r := range routes {
			if w := request(t, h, r.method, r.path, eveTok, r.body, nil); w.Code != http.StatusNotFound {
				t.Errorf("eve %s %s = %d %s, want 404", r.method, r.path, w.Code, w.Body)
			}
		}
		if w := request(t, h, "GET", "/v1/threads", eveTok, "", nil); strings.Contains(w.Body.String(), thread) {
			t.Errorf("eve's list = %s, want no %s", w.Body, thread)
		}
	}
	released := func(thread string) {
		t.Helper()
		if r, err := g.owners.get(t.Context(), thread); err != errNotOwner {
			t.Fatalf("refused claim on %s still recorded: %+v, %v", thread, r, err)
		}
	}

	// Shared before the first message; refusal found by eve's request.
	w := request(t, h, "PUT", "/v1/threads/f1/shares/eve", devTok, "", nil)
	if w.Code != http.StatusOK || !access(t, w, w.Body.String()).Pending {
		t.Fatalf("share f1 = %d %s, want 200 pending", w.Code, w.Body)
	}
	eveSees("f1", true)
	a := postPending(t, g, devTok, "f1")
	if r, err := g.owners.get(t.Context(), "f1"); err != nil || r.EventID != a.EventID || !slices.Equal(r.Shared, []string{"eve"}) {
		t.Fatalf("f1 record after dev's first message = %+v, %v; want its event ID %s and the share", r, err, a.EventID)
	}
	refuse("f1", a.EventID)
	eveSees("f1", false)
	released("f1")

	// Shared after the first message; refusal found by dev's share.
	a = postPending(t, g, devTok, "f2")
	if w := request(t, h, "PUT", "/v1/threads/f2/shares/eve", devTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("share f2 = %d %s", w.Code, w.Body)
	}
	eveSees("f2", true)
	refuse("f2", a.EventID)
	if w := request(t, h, "PUT", "/v1/threads/f2/shares/eve", devTok, "", nil); w.Code != http.StatusNotFound {
		t.Fatalf("share of a refused claim = %d %s, want 404", w.Code, w.Body)
	}
	released("f2")
	eveSees("f2", false)

	// Accepted: the share counts from then on.
	postPending(t, g, devTok, "f3")
	if w := request(t, h, "PUT", "/v1/threads/f3/shares/eve", devTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("share f3 = %d %s", w.Code, w.Body)
	}
	echoInput(t, g, "f3", events.ChatTurnRequested)
	if w := request(t, h, "GET", "/v1/threads/f3", eveTok, "", nil); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"role":"shared"`) {
		t.Fatalf("eve GET f3 after the verdict = %d %s, want 200 shared", w.Code, w.Body)
	}
	if w := request(t, h, "GET", "/v1/threads", eveTok, "", nil); !strings.Contains(w.Body.String(), `"thread":"f3"`) {
		t.Fatalf("eve's list after the verdict = %s, want f3", w.Body)
	}
}

// A user the processor accepted as a party an integrator shared the thread
// with (not its owner: the thread's first accepted message is the
// integrator's) may use the thread but not share it on: a share made
// while the claim was pending counts for nothing once it is confirmed,
// and a new one is 403. The processor would refuse the user's messages
// carrying grants, so none are sent.
func TestShareByProcessorSharedParty(t *testing.T) {
	g, _ := newVerdictGateway(t)
	h := g.Handler()
	// The integrator's first message shares the thread with dev.
	first, err := events.New("/test", events.TypeTurnRequested, "p1",
		events.TurnRequested{Message: schema.ChatMessage{Role: schema.RoleUser, Text: "mine"},
			Share: []events.Identity{{Principal: events.PrincipalGateway, OnBehalfOf: "dev"}}})
	if err != nil {
		t.Fatal(err)
	}
	first.SetExtension(events.ExtPrincipal, events.PrincipalIntegrator)
	publishChat(t, g, "p1", events.ChatTurnRequested, first)
	postPending(t, g, devTok, "p1")
	if w := request(t, h, "PUT", "/v1/threads/p1/shares/eve", devTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("share of the pending claim = %d %s", w.Code, w.Body)
	}
	echoInput(t, g, "p1", events.ChatTurnRequested) // the processor accepted dev as a shared party
	if w := request(t, h, "GET", "/v1/threads/p1", devTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("dev GET p1 = %d %s, want 200", w.Code, w.Body)
	}
	if get, answer := reads(t, g, eveTok, "p1"); get != 404 || answer != 404 {
		t.Fatalf("eve, shared by a party that is not the owner: GET %d, answer %d; want 404 both", get, answer)
	}
	if r, err := g.owners.get(t.Context(), "p1"); err != nil || !r.ProcessorShared {
		t.Fatalf("record = %+v, %v; want processorShared", r, err)
	}
	if w := request(t, h, "PUT", "/v1/threads/p1/shares/eve", devTok, "", nil); w.Code != http.StatusForbidden {
		t.Fatalf("dev shares p1 = %d %s, want 403", w.Code, w.Body)
	}
	if w := request(t, h, "POST", "/v1/threads/p1/messages", devTok, `{"text":"again"}`, nil); w.Code != http.StatusAccepted {
		t.Fatalf("dev POST p1 = %d %s", w.Code, w.Body)
	}
	if got := lastInputShare(t, g, "p1"); got != nil {
		t.Fatalf("dev's message carries share %v, want none", got)
	}
}
