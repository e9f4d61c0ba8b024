package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/processor"
)

// epochSystem is a gateway (users dev and eve) and a real processor on one
// embedded NATS server, both with the thread TTL ttl.
type epochSystem struct {
	g   *Gateway
	b   *bus.Client
	srv *bustest.Server
}

func newEpochSystem(t *testing.T, ttl time.Duration) *epochSystem {
	t.Helper()
	return newEpochSystemTTLs(t, ttl, ttl)
}

// newEpochSystemTTLs is newEpochSystem with the gateway's ThreadTTL gwTTL
// and the processor's procTTL.
func newEpochSystemTTLs(t *testing.T, gwTTL, procTTL time.Duration) *epochSystem {
	t.Helper()
	srv := bustest.NewServer(t)
	pb, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pb.EnsureStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	p, err := processor.New(t.Context(), pb, &processor.Options{ThreadTTL: procTTL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	b, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(t.Context(), b, StaticTokens{devTok: "dev", eveTok: "eve"}, &Options{ThreadTTL: gwTTL, VerdictWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return &epochSystem{g: g, b: b, srv: srv}
}

// post sends a message as token and returns the status and the Accepted
// status ("" for a problem).
func (s *epochSystem) post(t *testing.T, token, thread string) (int, string) {
	t.Helper()
	w := request(t, s.g.Handler(), "POST", "/v1/threads/"+thread+"/messages", token, `{"text":"hello"}`, nil)
	var a Accepted
	_ = json.Unmarshal(w.Body.Bytes(), &a)
	return w.Code, a.Status
}

// integratorSends publishes a message of the integrator principal to
// thread, as `parley send` does, and waits for the processor's verdict:
// true when it accepted it (its echo is in PARLEY_CHAT).
func (s *epochSystem) integratorSends(t *testing.T, thread string) bool {
	t.Helper()
	e, err := events.New("/test/integrator", events.TypeTurnRequested, thread,
		events.TurnRequested{Message: schema.ChatMessage{Role: schema.RoleUser, Text: "the integrator's secret plan"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.b.Publish(t.Context(), events.InputSubject("integrator", thread, events.ChatTurnRequested), e); err != nil {
		t.Fatal(err)
	}
	stream, err := s.b.JetStream().Stream(t.Context(), events.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		// A refusal of a message to someone else's thread is stored
		// under the integrator's principal, not in the thread.
		if _, err := stream.GetLastMsgForSubject(t.Context(), events.RefusedSubject("integrator", thread, events.ChatTurnRejected)); err == nil {
			return false
		}
		if m, err := stream.GetLastMsgForSubject(t.Context(), events.ChatSubject(thread, events.ChatTurnRequested)); err == nil {
			if ev, err := events.Decode(events.Header(m.Header), m.Data); err == nil && ev.ID() == e.ID() {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no verdict on the integrator's message within 10s")
	return false
}

// awaitEcho waits until the processor echoed the message id on thread.
func (s *epochSystem) awaitEcho(t *testing.T, thread, id string) {
	t.Helper()
	stream, err := s.b.JetStream().Stream(t.Context(), events.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m, err := stream.GetLastMsgForSubject(t.Context(), events.ChatSubject(thread, events.ChatTurnRequested)); err == nil {
			if ev, err := events.Decode(events.Header(m.Header), m.Data); err == nil && ev.ID() == id {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no echo of %s within 10s", id)
}

// awaitForgotten waits until the processor's record of thread expired.
func (s *epochSystem) awaitForgotten(t *testing.T, thread string) {
	t.Helper()
	kv, err := s.b.JetStream().KeyValue(t.Context(), kvstate.BucketThreads)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := kv.Get(t.Context(), thread); errors.Is(err, jetstream.ErrKeyNotFound) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the processor's record of %s did not expire within 20s", thread)
}

// sseEvents opens the thread's event stream as token on hs and returns its
// status and a channel of the data lines it writes (closed when it ends).
func sseEvents(t *testing.T, hs *httptest.Server, token, thread string) (int, <-chan string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", hs.URL+"/v1/threads/"+thread+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				lines <- d
			}
		}
	}()
	return resp.StatusCode, lines
}

// G2: a gateway claim lasts only as long as the processor's ownership.
// dev claims t, the thread idles past the processor's ThreadTTL (its
// record expires), an integrator sends to t and the processor accepts it
// (the integrator owns t now). dev's GET and event stream then answer
// 404, the stream dev had open ends without showing the integrator's
// message, t leaves dev's list, and dev's message is refused 404.
func TestClaimEndsWhenProcessorForgetsThread(t *testing.T) {
	const ttl = 2 * time.Second
	s := newEpochSystem(t, ttl)
	hs := httptest.NewServer(s.g.Handler())
	t.Cleanup(hs.Close) // after t.Context ends the open streams' requests
	if code, st := s.post(t, devTok, "t1"); code != http.StatusAccepted || st != VerdictAccepted {
		t.Fatalf("dev's first message = %d %q, want 202 accepted", code, st)
	}
	if w := request(t, s.g.Handler(), "GET", "/v1/threads/t1", devTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("dev's GET of its thread = %d %s", w.Code, w.Body)
	}
	code, open := sseEvents(t, hs, devTok, "t1")
	if code != http.StatusOK {
		t.Fatalf("dev's event stream = %d", code)
	}
	s.awaitForgotten(t, "t1")
	if !s.integratorSends(t, "t1") {
		t.Fatal("the processor refused the integrator's message to a thread it forgot")
	}
	// The stream dev had open ends, without the integrator's message.
	timeout := time.After(10 * time.Second)
	for ended := false; !ended; {
		select {
		case d, ok := <-open:
			if !ok {
				ended = true
				break
			}
			if strings.Contains(d, "secret plan") {
				t.Fatalf("dev's open event stream showed the integrator's message: %s", d)
			}
		case <-timeout:
			t.Fatal("dev's open event stream did not end after the integrator took the thread over")
		}
	}
	w := request(t, s.g.Handler(), "GET", "/v1/threads/t1", devTok, "", nil)
	if w.Code != http.StatusNotFound {
		t.Fatalf("dev's GET after the integrator took t1 = %d %s, want 404", w.Code, w.Body)
	}
	if code, lines := sseEvents(t, hs, devTok, "t1"); code != http.StatusNotFound {
		for d := range lines {
			t.Logf("shown: %s", d)
		}
		t.Fatalf("dev's event stream after the integrator took t1 = %d, want 404", code)
	}
	if w := request(t, s.g.Handler(), "GET", "/v1/threads", devTok, "", nil); strings.Contains(w.Body.String(), `"t1"`) {
		t.Fatalf("t1 still in dev's list: %s", w.Body)
	}
	if code, st := s.post(t, devTok, "t1"); code != http.StatusNotFound {
		t.Fatalf("dev's message to the integrator's t1 = %d %q, want 404", code, st)
	}
	// Refused by the gateway (G3): nothing published, so no refusal in
	// the integrator's thread.
	stream, err := s.b.JetStream().Stream(t.Context(), events.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := stream.GetLastMsgForSubject(t.Context(), events.ChatSubject("t1", events.ChatTurnRejected)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a refusal in the integrator's t1 (%v, %v), want none", m, err)
	}
}

// The owner coming back after the processor forgot its thread (nobody
// else took it) keeps it: the processor gives it to the owner again, and
// the gateway follows.
func TestClaimKeptWhenOwnerReturns(t *testing.T) {
	const ttl = 2 * time.Second
	s := newEpochSystem(t, ttl)
	if code, st := s.post(t, devTok, "t2"); code != http.StatusAccepted || st != VerdictAccepted {
		t.Fatalf("dev's first message = %d %q, want 202 accepted", code, st)
	}
	s.awaitForgotten(t, "t2")
	w := request(t, s.g.Handler(), "POST", "/v1/threads/t2/messages", devTok, `{"text":"back"}`, nil)
	var a Accepted
	if err := json.Unmarshal(w.Body.Bytes(), &a); w.Code != http.StatusAccepted || err != nil {
		t.Fatalf("dev's message after the processor forgot t2 = %d %s, want 202", w.Code, w.Body)
	}
	s.awaitEcho(t, "t2", a.EventID)
	if w := request(t, s.g.Handler(), "GET", "/v1/threads/t2", devTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("dev's GET of t2 after coming back = %d %s, want 200", w.Code, w.Body)
	}
	if r, err := s.g.owners.get(t.Context(), "t2"); err != nil || r.Owner != "dev" || r.Verdict != VerdictAccepted {
		t.Fatalf("t2's claim after dev came back: %+v, %v", r.ThreadOwner, err)
	}
	// eve still cannot take it.
	if code, _ := s.post(t, eveTok, "t2"); code != http.StatusNotFound {
		t.Fatalf("eve's message to dev's t2 = %d, want 404", code)
	}
}

// A message accepted from a party a confirmed claim does not know ends the
// claim even without an idle gap (the processor's record was reset or
// removed, and someone else owns the thread now): reads answer 404 and
// show nothing of it.
func TestClaimEndsOnForeignEcho(t *testing.T) {
	g, _ := newVerdictGateway(t)
	postPending(t, g, devTok, "f1")
	echoInput(t, g, "f1", events.ChatTurnRequested)
	if w := request(t, g.Handler(), "GET", "/v1/threads/f1", devTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("dev's GET after the echo = %d %s", w.Code, w.Body)
	}
	// Advance the claim's verified point, as reads do after an idle
	// bound: here, the cheap check never scans (no gap), so the GET's
	// fold must apply the rules itself.
	other := foreignEcho(t, "f1", "integrator", "")
	publishChat(t, g, "f1", events.ChatTurnRequested, other)
	if w := request(t, g.Handler(), "GET", "/v1/threads/f1", devTok, "", nil); w.Code != http.StatusNotFound {
		t.Fatalf("dev's GET after an integrator's accepted message = %d %s, want 404", w.Code, w.Body)
	}
	if _, err := g.owners.get(t.Context(), "f1"); !errors.Is(err, errNotOwner) {
		t.Fatalf("the claim after the foreign echo: %v, want voided", err)
	}
}

// A user the owner shared the thread with is a known party: their
// accepted message does not end the claim.
func TestClaimKeptOnSharedUsersEcho(t *testing.T) {
	g, _ := newVerdictGateway(t)
	if w := request(t, g.Handler(), "PUT", "/v1/threads/f2/shares/eve", devTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("share = %d %s", w.Code, w.Body)
	}
	postPending(t, g, devTok, "f2")
	echoInput(t, g, "f2", events.ChatTurnRequested)
	publishChat(t, g, "f2", events.ChatTurnRequested, foreignEcho(t, "f2", events.PrincipalGateway, "eve"))
	for _, tok := range []string{devTok, eveTok} {
		if w := request(t, g.Handler(), "GET", "/v1/threads/f2", tok, "", nil); w.Code != http.StatusOK {
			t.Fatalf("GET as %s after eve's accepted message = %d %s, want 200", tok, w.Code, w.Body)
		}
	}
}

// foreignEcho is the processor's echo of a message of principal (on behalf
// of obo when not "").
func foreignEcho(t *testing.T, thread, principal, obo string) *event.Event {
	t.Helper()
	e, err := events.New("/test", events.TypeTurnRequested, thread,
		events.TurnRequested{User: obo, Message: schema.ChatMessage{Role: schema.RoleUser, Text: "someone else"}})
	if err != nil {
		t.Fatal(err)
	}
	e.SetExtension(events.ExtPrincipal, principal)
	if obo != "" {
		e.SetExtension(events.ExtOnBehalfOf, obo)
	}
	return e
}

// The rules, on synthetic times.
func TestEpochRule(t *testing.T) {
	o := &ownership{idle: time.Hour, verdicts: &verdicts{principal: events.PrincipalGateway}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	echo := func(principal, obo string) *event.Event { return foreignEcho(t, "x", principal, obo) }
	completed := mustEvent(t, events.TypeTurnCompleted, events.TurnCompleted{TurnID: "t"})
	delta := mustEvent(t, events.TypeMessageDelta, events.MessageDelta{TurnID: "t", RunID: "r", Step: 1, Generation: "g", Attempt: 1, Chunk: schema.ChatMessage{Role: schema.RoleAssistant, Text: "x"}})
	reset := mustEvent(t, events.TypeTurnFailed, events.TurnFailed{Reason: events.RejectStateIncompatible, Detail: "reset"})
	failed := mustEvent(t, events.TypeTurnFailed, events.TurnFailed{TurnID: "t", Reason: "model_error"})
	own := ThreadOwner{Owner: "dev", Verdict: VerdictAccepted, Granted: []string{"eve"}, EpochAt: t0}
	shared := own
	shared.ProcessorShared = true
	type step struct {
		after time.Duration
		ev    *event.Event
		want  bool
	}
	for _, c := range []struct {
		name  string
		t     ThreadOwner
		steps []step
	}{
		{"owner and granted users, within the bound", own, []step{
			{time.Minute, echo("gateway", "dev"), true}, {2 * time.Minute, completed, true},
			{50 * time.Minute, echo("gateway", "eve"), true}, {59 * time.Minute, failed, true}}},
		{"an integrator's message", own, []step{{time.Minute, echo("integrator", ""), false}}},
		{"another gateway user's message", own, []step{{time.Minute, echo("gateway", "mallory"), false}}},
		{"a gap, then someone else", own, []step{{time.Minute, completed, true}, {62 * time.Minute, echo("integrator", ""), false}}},
		// The processor accepts a granted (even revoked) party while it
		// holds the owner's record: a gap does not let her take the
		// thread. If the processor had forgotten
		// it and she is its new owner, the owner who once shared it
		// with her still reads it (docs/SECURITY.md, Known limits).
		{"a gap, then a granted user", own, []step{{61 * time.Minute, echo("gateway", "eve"), true}}},
		{"a gap, then the owner again", own, []step{{61 * time.Minute, echo("gateway", "dev"), true}, {62 * time.Minute, completed, true}}},
		{"a gap, then another event first, then someone else", own, []step{{61 * time.Minute, completed, true}, {62 * time.Minute, echo("integrator", ""), false}}},
		{"deltas do not fill a gap", own, []step{{30 * time.Minute, delta, true}, {61 * time.Minute, echo("integrator", ""), false}}},
		{"a reset", own, []step{{time.Minute, reset, false}}},
		{"a turn failed state_incompatible (no reset)", own, []step{{time.Minute, mustEvent(t, events.TypeTurnFailed,
			events.TurnFailed{TurnID: "t", Reason: events.RejectStateIncompatible}), true}}},
		{"processor-shared: the integrator's and others' messages", shared, []step{
			{time.Minute, echo("integrator", ""), true}, {2 * time.Minute, echo("acme", ""), true}, {3 * time.Minute, echo("gateway", "dev"), true}}},
		{"processor-shared: a gap, even then the owner", shared, []step{{61 * time.Minute, echo("gateway", "dev"), false}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := o.rule(c.t)
			for i, s := range c.steps {
				if got := r.step(t0.Add(s.after), s.ev); got != s.want {
					t.Fatalf("step %d (%s at +%v) = %v, want %v", i, s.ev.Type(), s.after, got, s.want)
				}
			}
		})
	}
}

func TestEpochIdle(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		30 * 24 * time.Hour: 29 * 24 * time.Hour,
		2 * time.Second:     1800 * time.Millisecond,
	} {
		if got := epochIdle(ttl); got != want {
			t.Errorf("epochIdle(%v) = %v, want %v", ttl, got, want)
		}
	}
}

// gatewayInputs counts the gateway's messages to thread in PARLEY_INPUT.
func gatewayInputs(t *testing.T, g *Gateway, thread string) uint64 {
	t.Helper()
	s, err := g.bus.JetStream().Stream(t.Context(), events.StreamInput)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(events.InputSubject(events.PrincipalGateway, thread, events.ChatTurnRequested)))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// G3: a user's first message to a thread the processor gave someone else
// (an integrator's accepted message, recent, sharing nothing with the
// user) is answered 404 by the gateway, which publishes nothing and
// claims nothing: no refusal lands in the owner's thread.
func TestPostToForeignThreadPublishesNothing(t *testing.T) {
	g, _ := newVerdictGateway(t)
	publishChat(t, g, "i1", events.ChatTurnRequested, foreignEcho(t, "i1", events.PrincipalIntegrator, ""))
	w := request(t, g.Handler(), "POST", "/v1/threads/i1/messages", devTok, `{"text":"let me in"}`, nil)
	if w.Code != http.StatusNotFound {
		t.Fatalf("dev POST to the integrator's i1 = %d %s, want 404", w.Code, w.Body)
	}
	if n := gatewayInputs(t, g, "i1"); n != 0 {
		t.Fatalf("the gateway published %d messages to i1, want none", n)
	}
	if _, err := g.owners.get(t.Context(), "i1"); !errors.Is(err, errNotOwner) {
		t.Fatalf("a claim on i1: %v, want none", err)
	}
	// A thread whose accepted messages share it with dev is dev's to use.
	shared := foreignEcho(t, "i2", events.PrincipalIntegrator, "")
	if err := shared.SetData(event.ApplicationJSON, events.TurnRequested{Message: schema.ChatMessage{Role: schema.RoleUser, Text: "x"},
		Share: []events.Identity{{Principal: events.PrincipalGateway, OnBehalfOf: "dev"}}}); err != nil {
		t.Fatal(err)
	}
	publishChat(t, g, "i2", events.ChatTurnRequested, shared)
	publishChat(t, g, "i2", events.ChatTurnRequested, foreignEcho(t, "i2", events.PrincipalIntegrator, ""))
	postPending(t, g, devTok, "i2")
	if n := gatewayInputs(t, g, "i2"); n != 1 {
		t.Fatalf("the gateway published %d messages to i2, want 1", n)
	}
	// So is a thread with only refusals (no accepted message).
	rej := mustEvent(t, events.TypeTurnRejected, events.TurnRejected{RequestEventID: "x", Reason: events.RejectForbidden})
	publishChat(t, g, "i3", events.ChatTurnRejected, rej)
	postPending(t, g, devTok, "i3")
}

// G3 with a real processor: an integrator's thread the processor forgot
// (idle past its ThreadTTL) is the next sender's, and the gateway lets a
// user's message through for the processor to decide.
func TestPostToForgottenThread(t *testing.T) {
	const ttl = 2 * time.Second
	s := newEpochSystem(t, ttl)
	if !s.integratorSends(t, "t3") {
		t.Fatal("the integrator's first message was refused")
	}
	if code, _ := s.post(t, devTok, "t3"); code != http.StatusNotFound {
		t.Fatalf("dev's message to the integrator's t3 = %d, want 404", code)
	}
	s.awaitForgotten(t, "t3")
	if code, st := s.post(t, devTok, "t3"); code != http.StatusAccepted || st != VerdictAccepted {
		t.Fatalf("dev's message to the forgotten t3 = %d %q, want 202 accepted", code, st)
	}
	if w := request(t, s.g.Handler(), "GET", "/v1/threads/t3", devTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("dev's GET of t3 = %d %s, want 200", w.Code, w.Body)
	}
	// dev's stream starts with dev's message: the integrator's, from the
	// processor's earlier ownership, is not shown.
	hs := httptest.NewServer(s.g.Handler())
	t.Cleanup(hs.Close)
	code, lines := sseEvents(t, hs, devTok, "t3")
	if code != http.StatusOK {
		t.Fatalf("dev's event stream of t3 = %d", code)
	}
	select {
	case d := <-lines:
		if strings.Contains(d, "secret plan") || !strings.Contains(d, "hello") {
			t.Fatalf("dev's stream of t3 starts with %s, want dev's message", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dev's stream of t3 showed nothing")
	}
}

// After an idle gap, while the processor still holds the owner's record,
// a user the owner shared the thread with (even one revoked since: the
// processor keeps grants) cannot take the thread: the owner keeps it, a
// shared user's message is a shared user's, a revoked user gets 404
// (the gap must not end the owner's claim and make the first poster
// after it the gateway's owner).
func TestGrantedUserCannotTakeThreadAfterIdleGap(t *testing.T) {
	s := newEpochSystemTTLs(t, 2*time.Second, time.Hour) // gateway idle bound 1.8 s
	h := s.g.Handler()
	for _, thread := range []string{"w1", "w2"} {
		if w := request(t, h, "PUT", "/v1/threads/"+thread+"/shares/eve", devTok, "", nil); w.Code != 200 {
			t.Fatalf("share %s: %d %s", thread, w.Code, w.Body)
		}
		if code, st := s.post(t, devTok, thread); code != 202 || st != VerdictAccepted {
			t.Fatalf("dev's first message to %s = %d %q", thread, code, st)
		}
	}
	if w := request(t, h, "DELETE", "/v1/threads/w2/shares/eve", devTok, "", nil); w.Code != 200 {
		t.Fatalf("revoke: %d %s", w.Code, w.Body)
	}
	time.Sleep(2200 * time.Millisecond) // past the gateway's idle bound; the processor's record lives

	// w1: eve, shared, posts first after the gap.
	w := request(t, h, "POST", "/v1/threads/w1/messages", eveTok, `{"text":"hello"}`, nil)
	var a Accepted
	if err := json.Unmarshal(w.Body.Bytes(), &a); w.Code != 202 || err != nil {
		t.Fatalf("shared eve's message after the gap = %d %s, want 202", w.Code, w.Body)
	}
	s.awaitEcho(t, "w1", a.EventID) // accepted by the processor, as a shared party
	for _, tok := range []string{devTok, eveTok} {
		if w := request(t, h, "GET", "/v1/threads/w1", tok, "", nil); w.Code != 200 || !strings.Contains(w.Body.String(), `"owner":"dev"`) {
			t.Errorf("GET w1 as %s after eve's message = %d %s, want 200 owned by dev", tok, w.Code, w.Body)
		}
	}
	if code, _ := s.post(t, devTok, "w1"); code != 202 {
		t.Errorf("dev's message to w1 after eve's = %d: the owner lost his thread", code)
	}

	// w2: an integrator's refused message after the gap, then revoked eve.
	if s.integratorSends(t, "w2") {
		t.Fatal("the processor accepted an integrator's message on dev's thread")
	}
	if code, _ := s.post(t, eveTok, "w2"); code != 404 {
		t.Errorf("revoked eve's message to w2 after the gap = %d, want 404", code)
	}
	if w := request(t, h, "GET", "/v1/threads/w2", eveTok, "", nil); w.Code != 404 {
		t.Errorf("GET w2 as revoked eve = %d, want 404", w.Code)
	}
	if code, _ := s.post(t, devTok, "w2"); code != 202 {
		t.Errorf("dev's message to w2 = %d: the owner lost his thread", code)
	}
}

// A claim made by a share on an unused name, whose name an integrator
// then starts, does not let its user publish into the integrator's
// thread: the first message is 404, nothing is published, and the claim
// is released.
func TestShareClaimOnNameTakenSincePublishesNothing(t *testing.T) {
	s := newEpochSystem(t, time.Hour)
	h := s.g.Handler()
	if w := request(t, h, "PUT", "/v1/threads/sq2/shares/eve", devTok, "", nil); w.Code != 200 {
		t.Fatalf("share of an unused name: %d %s", w.Code, w.Body)
	}
	if !s.integratorSends(t, "sq2") {
		t.Fatal("the processor refused the integrator's first message")
	}
	if code, st := s.post(t, devTok, "sq2"); code != 404 {
		t.Errorf("dev's first message to sq2, now the integrator's = %d %q, want 404", code, st)
	}
	stream, err := s.b.JetStream().Stream(t.Context(), events.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a refusal, had a message been published
	if _, err := stream.GetLastMsgForSubject(t.Context(), events.ChatSubject("sq2", events.ChatTurnRejected)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a refusal was stored in the integrator's thread (err %v)", err)
	}
	if w := request(t, h, "GET", "/v1/threads/sq2", devTok, "", nil); w.Code != 404 {
		t.Errorf("GET sq2 as dev = %d, want 404", w.Code)
	}
}
