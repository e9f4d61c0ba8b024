package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

const eveTok = "eve-token-0123456789abcdef"

// newVerdictGateway is a gateway for users dev and eve, with a short
// verdict wait (these tests run no processor: they publish its verdicts).
func newVerdictGateway(t *testing.T) (*Gateway, *bustest.Server) {
	t.Helper()
	srv := bustest.NewServer(t)
	b, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(t.Context()); err != nil { // the workers' job
		t.Fatal(err)
	}
	g, err := New(t.Context(), b, StaticTokens{devTok: "dev", eveTok: "eve"}, &Options{VerdictWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return g, srv
}

// publishChat stores e in PARLEY_CHAT as the processor would.
func publishChat(t *testing.T, g *Gateway, thread, suffix string, e *event.Event) {
	t.Helper()
	if _, err := g.bus.Publish(t.Context(), events.ChatSubject(thread, suffix), e); err != nil {
		t.Fatal(err)
	}
}

// postPending posts a first message and expects 202 "pending".
func postPending(t *testing.T, g *Gateway, token, thread string) Accepted {
	t.Helper()
	w := request(t, g.Handler(), "POST", "/v1/threads/"+thread+"/messages", token, `{"text":"hi"}`, nil)
	var a Accepted
	if err := json.Unmarshal(w.Body.Bytes(), &a); w.Code != 202 || err != nil || a.Status != VerdictPending {
		t.Fatalf("POST %s = %d %s, want 202 pending", thread, w.Code, w.Body)
	}
	return a
}

func reads(t *testing.T, g *Gateway, token, thread string) (get, answer int) {
	t.Helper()
	get = request(t, g.Handler(), "GET", "/v1/threads/"+thread, token, "", nil).Code
	answer = request(t, g.Handler(), "POST", "/v1/threads/"+thread+"/elicitations/e1", token, `{"action":"decline"}`, nil).Code
	return get, answer
}

// A claim gives read access only once the processor accepted a message of
// the claimant (its echo with principal gateway and onbehalfof the user);
// an echo of someone else does not confirm it.
func TestClaimPendingUntilAccepted(t *testing.T) {
	g, _ := newVerdictGateway(t)
	postPending(t, g, devTok, "t1")
	if get, answer := reads(t, g, devTok, "t1"); get != 404 || answer != 404 {
		t.Fatalf("pending claim: GET %d, answer %d; want 404 both", get, answer)
	}
	if w := request(t, g.Handler(), "GET", "/v1/threads", devTok, "", nil); strings.Contains(w.Body.String(), `"t1"`) {
		t.Fatalf("pending claim listed: %s", w.Body)
	}
	// Someone else's message accepted first (an integrator's): not dev's.
	other, err := events.New("/test", events.TypeTurnRequested, "t1",
		events.TurnRequested{Message: schema.ChatMessage{Role: schema.RoleUser, Text: "mine"}})
	if err != nil {
		t.Fatal(err)
	}
	other.SetExtension(events.ExtPrincipal, events.PrincipalIntegrator)
	publishChat(t, g, "t1", events.ChatTurnRequested, other)
	if get, _ := reads(t, g, devTok, "t1"); get != 404 {
		t.Fatalf("after an integrator's echo: GET %d, want 404", get)
	}
	echoInput(t, g, "t1", events.ChatTurnRequested)
	w := request(t, g.Handler(), "GET", "/v1/threads/t1", devTok, "", nil)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"owner":"dev"`) {
		t.Fatalf("after dev's echo: GET %d %s, want 200 owner dev", w.Code, w.Body)
	}
	r, err := g.owners.get(t.Context(), "t1")
	if err != nil || r.Verdict != VerdictAccepted {
		t.Fatalf("record = %+v, %v; want accepted", r, err)
	}
	if w := request(t, g.Handler(), "GET", "/v1/threads", devTok, "", nil); !strings.Contains(w.Body.String(), `"thread":"t1"`) {
		t.Fatalf("confirmed claim not listed: %s", w.Body)
	}
	// Later messages are published without waiting.
	w = request(t, g.Handler(), "POST", "/v1/threads/t1/messages", devTok, `{"text":"again"}`, nil)
	if w.Code != 202 || !strings.Contains(w.Body.String(), `"status":"published"`) {
		t.Fatalf("second POST = %d %s, want 202 published", w.Code, w.Body)
	}
	if w := request(t, g.Handler(), "POST", "/v1/threads/t1/messages", eveTok, `{"text":"x"}`, nil); w.Code != 404 {
		t.Fatalf("eve POST = %d, want 404", w.Code)
	}
}

// A refused first message releases the claim (found on the next request,
// as after a gateway restart): the claimant reads nothing, and the thread
// can be claimed again.
func TestClaimReleasedOnRejection(t *testing.T) {
	g, _ := newVerdictGateway(t)
	a := postPending(t, g, devTok, "t2")
	rej, err := events.New("/parley/processor", events.TypeTurnRejected, "t2", events.TurnRejected{RequestEventID: a.EventID,
		Reason: events.RejectForbidden, Errors: []schema.Violation{{Rule: "thread t2 belongs to integrator"}}})
	if err != nil {
		t.Fatal(err)
	}
	publishChat(t, g, "t2", events.ChatTurnRejected, rej)
	if get, answer := reads(t, g, devTok, "t2"); get != 404 || answer != 404 {
		t.Fatalf("refused claim: GET %d, answer %d; want 404 both", get, answer)
	}
	if _, err := g.owners.get(t.Context(), "t2"); err != errNotOwner {
		t.Fatalf("refused claim still recorded: %v", err)
	}
	// Released: eve's message claims it (pending again).
	postPending(t, g, eveTok, "t2")
}

// A refusal that arrives while the POST waits answers it: 404 for
// forbidden (the owner is not named), and the claim is released.
func TestClaimForbiddenWhileWaiting(t *testing.T) {
	g, _ := newVerdictGateway(t)
	g.opts.VerdictWait = 10 * time.Second
	done := make(chan struct{})
	go func() {
		defer close(done)
		s, err := g.bus.JetStream().Stream(t.Context(), events.StreamInput)
		if err != nil {
			t.Error(err)
			return
		}
		for range 200 {
			m, err := s.GetLastMsgForSubject(t.Context(), events.InputSubject(events.PrincipalGateway, "t3", events.ChatTurnRequested))
			if err == nil {
				e, _ := events.Decode(events.Header(m.Header), m.Data)
				rej, _ := events.New("/parley/processor", events.TypeTurnRejected, "t3",
					events.TurnRejected{RequestEventID: e.ID(), Reason: events.RejectForbidden})
				publishChat(t, g, "t3", events.ChatTurnRejected, rej)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Error("the message was never published")
	}()
	start := time.Now()
	w := request(t, g.Handler(), "POST", "/v1/threads/t3/messages", devTok, `{"text":"hi"}`, nil)
	<-done
	if w.Code != http.StatusNotFound || strings.Contains(w.Body.String(), "integrator") {
		t.Fatalf("POST = %d %s, want 404 naming nobody", w.Code, w.Body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("POST took %v: the verdict was not seen while waiting", d)
	}
	if _, err := g.owners.get(t.Context(), "t3"); err != errNotOwner {
		t.Fatalf("refused claim still recorded: %v", err)
	}
}

// A record written before verdicts were followed (no verdict) is not
// trusted: it is confirmed only by an echo of its owner's message.
func TestLegacyClaimVerified(t *testing.T) {
	g, _ := newVerdictGateway(t)
	val, _ := json.Marshal(ThreadOwner{Owner: "dev", CreatedAt: time.Now()})
	if _, err := g.owners.kv.Create(t.Context(), "t.t4", val); err != nil {
		t.Fatal(err)
	}
	if get, _ := reads(t, g, devTok, "t4"); get != 404 {
		t.Fatalf("legacy claim without an echo: GET %d, want 404", get)
	}
	w := request(t, g.Handler(), "POST", "/v1/threads/t4/messages", devTok, `{"text":"hi"}`, nil)
	if w.Code != 202 || !strings.Contains(w.Body.String(), `"status":"pending"`) {
		t.Fatalf("POST = %d %s, want 202 pending", w.Code, w.Body)
	}
	echoInput(t, g, "t4", events.ChatTurnRequested)
	if get, _ := reads(t, g, devTok, "t4"); get != 200 {
		t.Fatalf("legacy claim after the echo: GET %d, want 200", get)
	}
}

// The event stream of the user's own pending claim waits for the verdict
// (the web chat opens it right after the first message): once the
// processor accepts, it streams the thread.
func TestStreamWaitsForOwnPendingClaim(t *testing.T) {
	g, _ := newVerdictGateway(t)
	postPending(t, g, devTok, "t6")
	hs := httptest.NewServer(g.Handler())
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+"/v1/threads/t6/events", nil)
	req.Header.Set("Authorization", "Bearer "+devTok)
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		got <- result{resp, err}
	}()
	time.Sleep(500 * time.Millisecond) // the request waits for the verdict
	echoInput(t, g, "t6", events.ChatTurnRequested)
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	resp := res.resp
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("event stream of dev's pending claim = %d, want 200 once accepted", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"type":"dev.parley.turn.requested"`) {
			return
		}
	}
	t.Fatalf("stream ended without dev's message: %v", sc.Err())
}
