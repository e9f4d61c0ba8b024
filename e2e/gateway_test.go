package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/gateway"
	"github.com/parley-dev/parley/schema"
)

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789ab"
	carolToken = "carol-token-0123456789"
)

var testTokens = gateway.StaticTokens{aliceToken: "alice", bobToken: "bob", carolToken: "carol"}

// gw is one gateway replica on its own NATS connection, served by an
// httptest server.
type gw struct {
	t   *testing.T
	g   *gateway.Gateway
	srv *httptest.Server
}

func (s *system) startGateway(opts *gateway.Options) *gw {
	s.t.Helper()
	nc := s.srv.Connect(s.t)
	b, err := bus.New(nc, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if opts == nil {
		opts = &gateway.Options{}
	}
	if opts.VerdictWait == 0 {
		opts.VerdictWait = 3 * time.Second
	}
	opts.Logger = s.log.With("worker", "gateway")
	g, err := gateway.New(s.ctx, b, testTokens, opts)
	if err != nil {
		s.t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	x := &gw{t: s.t, g: g, srv: srv}
	s.t.Cleanup(x.stop)
	return x
}

// stop ends the event streams and the server, as Serve does on shutdown.
func (x *gw) stop() {
	x.g.Close()
	x.srv.Close()
}

func (x *gw) do(method, path, token string, body any) (*http.Response, []byte) {
	x.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, _ := http.NewRequest(method, x.srv.URL+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		x.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

func (x *gw) send(token, thread, text string) gateway.Accepted {
	x.t.Helper()
	resp, body := x.do("POST", "/v1/threads/"+thread+"/messages", token, map[string]any{"text": text})
	if resp.StatusCode != http.StatusAccepted {
		x.t.Fatalf("POST messages = %d %s, want 202", resp.StatusCode, body)
	}
	var a gateway.Accepted
	if err := json.Unmarshal(body, &a); err != nil || a.EventID == "" {
		x.t.Fatalf("POST messages body %s: %v", body, err)
	}
	return a
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id   uint64
	data map[string]any
}

// sse reads a thread's event stream until ctx ends or the server ends it.
func (x *gw) sse(ctx context.Context, token, thread string, lastID uint64) <-chan sseEvent {
	x.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", x.srv.URL+"/v1/threads/"+thread+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(lastID, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		x.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		x.t.Fatalf("GET events = %d %s", resp.StatusCode, b)
	}
	out := make(chan sseEvent, 256)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.data != nil {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id, _ = strconv.ParseUint(line[4:], 10, 64)
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(line[6:]), &ev.data)
			}
		}
	}()
	return out
}

// awaitType reads from ch until an event of type typ; it returns every
// event read.
func awaitType(t *testing.T, ch <-chan sseEvent, typ events.Type) []sseEvent {
	t.Helper()
	var seen []sseEvent
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended before %s; read %d events", typ, len(seen))
			}
			seen = append(seen, ev)
			if ev.data["type"] == string(typ) {
				return seen
			}
		case <-timeout:
			t.Fatalf("no %s within 15s; read %d events", typ, len(seen))
		}
	}
}

func elicitationIDOf(t *testing.T, ev sseEvent) string {
	t.Helper()
	data, _ := ev.data["data"].(map[string]any)
	meta, _ := data["_meta"].(map[string]any)
	id, _ := meta[schema.MetaElicitationID].(string)
	if id == "" {
		t.Fatalf("elicitation.requested without an ID: %v", ev.data)
	}
	return id
}

// storedCount counts PARLEY_CHAT messages on subject.
func (s *system) storedCount(subject string) uint64 {
	s.t.Helper()
	st, err := s.bus.JetStream().Stream(s.ctx, events.StreamChat)
	if err != nil {
		s.t.Fatal(err)
	}
	info, err := st.Info(s.ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		s.t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

func TestGatewayRequiresToken(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	for _, tc := range []struct{ name, method, path, token string }{
		{"no token", "GET", "/v1/threads", ""},
		{"bad token", "GET", "/v1/threads", "not-a-real-token-at-all"},
		{"no token post", "POST", "/v1/threads/g1/messages", ""},
		{"no token events", "GET", "/v1/threads/g1/events", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := x.do(tc.method, tc.path, tc.token, map[string]any{"text": "hi"})
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s %s = %d %s, want 401", tc.method, tc.path, resp.StatusCode, body)
			}
			if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", resp.Header.Get("WWW-Authenticate"))
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q, want application/problem+json", ct)
			}
		})
	}
	if n := s.storedCount(events.ChatThreadSubjects("g1")); n != 0 {
		t.Fatalf("%d events stored for g1 after unauthenticated requests, want 0", n)
	}
}

// Bob cannot see, stream, write to or answer in alice's thread: 404 and
// nothing published; alice's question stays pending and she answers it.
func TestGatewayOtherUsersThreadNotFound(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	x.send(aliceToken, "g2", deleteDrafts)
	id, _ := s.question("g2", 1)
	s.rec.await(t, 10*time.Second, "g2", events.TypeTurnPaused, 1)
	before := s.storedCount(events.ChatThreadSubjects("g2"))
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/threads/g2", nil},
		{"GET", "/v1/threads/g2/events", nil},
		{"POST", "/v1/threads/g2/messages", map[string]any{"text": "hello"}},
		{"POST", "/v1/threads/g2/elicitations/" + id, map[string]any{"action": "accept"}},
	} {
		resp, body := x.do(tc.method, tc.path, bobToken, tc.body)
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("bob %s %s = %d %s, want 404", tc.method, tc.path, resp.StatusCode, body)
		}
	}
	resp, body := x.do("GET", "/v1/threads", bobToken, nil)
	if resp.StatusCode != 200 || strings.Contains(string(body), "g2") {
		t.Fatalf("bob's thread list = %d %s, want 200 without g2", resp.StatusCode, body)
	}
	if after := s.storedCount(events.ChatThreadSubjects("g2")); after != before {
		t.Fatalf("events of g2: %d before bob, %d after; want nothing published", before, after)
	}
	if s.drafts() != 10 {
		t.Fatalf("drafts = %d, want 10 (bob's accept must not run the delete)", s.drafts())
	}
	// Alice's question is still pending; the thread's state says so.
	resp, body = x.do("GET", "/v1/threads/g2", aliceToken, nil)
	var st gateway.ThreadState
	if err := json.Unmarshal(body, &st); err != nil || resp.StatusCode != 200 {
		t.Fatalf("alice GET thread = %d %s", resp.StatusCode, body)
	}
	if st.State != gateway.StatePaused || len(st.Pending) != 1 || st.Pending[0].Meta[schema.MetaElicitationID] != id {
		t.Fatalf("state = %s, want paused with %s pending", body, id)
	}
	resp, body = x.do("GET", "/v1/threads", aliceToken, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"thread":"g2"`) {
		t.Fatalf("alice's thread list = %d %s, want g2", resp.StatusCode, body)
	}
}

// The answer's answeredBy is the token's subject, recorded on the decision
// of turn.completed; an invalid answer comes back as 422 with the field.
func TestGatewayAnsweredByIsTokenSubject(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	x.send(aliceToken, "g3", "create an event for the launch party")
	stream := x.sse(ctx, aliceToken, "g3", 0)
	seen := awaitType(t, stream, events.TypeElicitationRequested)
	form := elicitationIDOf(t, seen[len(seen)-1])
	resp, body := x.do("POST", "/v1/threads/g3/elicitations/"+form, aliceToken,
		map[string]any{"action": "accept", "content": map[string]any{"title": "Launch party", "date": "next friday"}})
	var p gateway.Problem
	_ = json.Unmarshal(body, &p)
	if resp.StatusCode != http.StatusUnprocessableEntity || p.Reason != events.RejectInvalidContent ||
		len(p.Errors) == 0 || p.Errors[0].Path != "date" || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("invalid date answer = %d %s, want 422 invalid_content naming date", resp.StatusCode, body)
	}
	resp, body = x.do("POST", "/v1/threads/g3/elicitations/"+form, aliceToken,
		map[string]any{"action": "accept", "content": map[string]any{"title": "Launch party", "date": "2026-12-12"}})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("valid answer = %d %s, want 202", resp.StatusCode, body)
	}
	awaitType(t, stream, events.TypeTurnCompleted)
	// A second answer to the consumed question: 409 already_consumed.
	resp, body = x.do("POST", "/v1/threads/g3/elicitations/"+form, aliceToken, map[string]any{"action": "decline"})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), events.RejectAlreadyConsumed) {
		t.Fatalf("second answer = %d %s, want 409 already_consumed", resp.StatusCode, body)
	}
	resp, body = x.do("POST", "/v1/threads/g3/elicitations/no-such-question", aliceToken, map[string]any{"action": "accept"})
	if resp.StatusCode != http.StatusGone || !strings.Contains(string(body), events.RejectUnknownOrExpired) {
		t.Fatalf("unknown question = %d %s, want 410 unknown_or_expired", resp.StatusCode, body)
	}

	// A tool confirmation: the decision records alice, from her token.
	x.send(aliceToken, "g3", deleteDrafts)
	seen = awaitType(t, stream, events.TypeElicitationRequested)
	confirm := elicitationIDOf(t, seen[len(seen)-1])
	resp, body = x.do("POST", "/v1/threads/g3/elicitations/"+confirm, aliceToken, map[string]any{"action": "accept"})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("confirm = %d %s, want 202", resp.StatusCode, body)
	}
	e := s.rec.await(t, 10*time.Second, "g3", events.TypeTurnCompleted, 2)
	tc, err := events.Data[events.TurnCompleted](e)
	if err != nil {
		t.Fatal(err)
	}
	var del *events.DecisionRecord
	for i, d := range tc.Decisions {
		if d.Tool == "delete_entities" {
			del = &tc.Decisions[i]
		}
	}
	if del == nil || del.AnsweredBy != (events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "alice"}) || del.Action != schema.ActionAccept || del.ElicitationID != confirm {
		t.Fatalf("decisions = %s, want alice's accept of %s", mustJSON(tc.Decisions), confirm)
	}
	if got := s.rec.matching("g3", events.TypeTurnRequested); len(got) != 2 {
		t.Fatalf("turn.requested events = %d, want 2", len(got))
	} else if d, _ := events.Data[events.TurnRequested](got[0]); d.User != "alice" {
		t.Fatalf("turn.requested user = %q, want alice", d.User)
	}
}

// A client reads part of a thread from one gateway, the gateway stops, and
// the client resumes on a new gateway with Last-Event-ID: every stored
// event of the thread arrives exactly once, in order.
func TestGatewaySSEResumesAcrossRestart(t *testing.T) {
	s := start(t, options{})
	a := s.startGateway(nil)
	a.send(aliceToken, "g4", "list everything")
	s.completed("g4", 1)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	first := awaitType(t, a.sse(ctx, aliceToken, "g4", 0), events.TypeTurnCompleted)
	streamA := a.sse(ctx, aliceToken, "g4", first[len(first)-1].id)
	a.send(aliceToken, "g4", deleteDrafts)
	got := append([]sseEvent(nil), first...)
	got = append(got, awaitType(t, streamA, events.TypeElicitationRequested)...)
	a.stop()
	for range streamA { // the stream ends cleanly with the gateway
	}
	b := s.startGateway(nil)
	b.send(aliceToken, "g4", "list everything again")
	streamB := b.sse(ctx, aliceToken, "g4", got[len(got)-1].id)
	got = append(got, awaitType(t, streamB, events.TypeTurnCompleted)...)
	// Compare with what the stream holds for the thread.
	want := s.storedSeqs(events.ChatThreadSubjects("g4"))
	var ids []uint64
	for _, ev := range got {
		ids = append(ids, ev.id)
	}
	if fmt.Sprint(ids) != fmt.Sprint(want[:len(ids)]) {
		t.Fatalf("SSE ids across the restart = %v\nstored = %v", ids, want)
	}
}

// storedSeqs lists the stream sequences stored on subject.
func (s *system) storedSeqs(subject string) []uint64 {
	s.t.Helper()
	cons, err := s.bus.JetStream().OrderedConsumer(s.ctx, events.StreamChat,
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []uint64
	for {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			s.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			md, _ := m.Metadata()
			out = append(out, md.Sequence.Stream)
			n++
		}
		if n == 0 {
			return out
		}
	}
}

// Two gateway replicas on one NATS serve the same thread: ownership
// claimed through one holds on the other; a race for a new thread has one
// winner; a message through one and an answer through the other work.
func TestGatewayTwoReplicas(t *testing.T) {
	s := start(t, options{})
	a, b := s.startGateway(nil), s.startGateway(nil)
	a.send(aliceToken, "g5", deleteDrafts)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	seen := awaitType(t, b.sse(ctx, aliceToken, "g5", 0), events.TypeElicitationRequested)
	id := elicitationIDOf(t, seen[len(seen)-1])
	if resp, body := b.do("POST", "/v1/threads/g5/messages", bobToken, map[string]any{"text": "mine now"}); resp.StatusCode != 404 {
		t.Fatalf("bob via replica B = %d %s, want 404", resp.StatusCode, body)
	}
	if resp, body := b.do("POST", "/v1/threads/g5/elicitations/"+id, aliceToken, map[string]any{"action": "accept"}); resp.StatusCode != 202 {
		t.Fatalf("alice's answer via B = %d %s, want 202", resp.StatusCode, body)
	}
	if text := s.completed("g5", 1); !strings.Contains(text, "Deleted 10") {
		t.Fatalf("completed = %q", text)
	}
	// Race: alice through A, bob through B, for the same new thread.
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, c := range []struct {
		x   *gw
		tok string
	}{{a, aliceToken}, {b, bobToken}} {
		wg.Go(func() {
			resp, _ := c.x.do("POST", "/v1/threads/g6/messages", c.tok, map[string]any{"text": "list everything"})
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	if !(codes[0] == 202 && codes[1] == 404 || codes[0] == 404 && codes[1] == 202) {
		t.Fatalf("race for g6: codes %v, want one 202 and one 404", codes)
	}
	s.rec.await(t, 5*time.Second, "g6", events.TypeTurnRequested, 1) // the processor's echo
	time.Sleep(200 * time.Millisecond)
	if n := s.storedCount(events.ChatSubject("g6", events.ChatTurnRequested)); n != 1 {
		t.Fatalf("g6 turn.requested stored = %d, want 1", n)
	}
}

// Alice shares her thread with bob through one replica: bob sees it (list,
// state, events) through the other, answers the confirmation her next
// message leads to — the decision names bob — and sends a message of his
// own; carol still gets 404 and bob may not share further. After the
// revoke bob gets 404 again and nothing he sends is published. A question
// pending before the share stays the owner's (the processor takes grants
// from the owner's messages only): bob's answer is refused forbidden.
func TestGatewayShares(t *testing.T) {
	s := start(t, options{})
	a, b := s.startGateway(nil), s.startGateway(nil)
	a.send(aliceToken, "g7", "list everything")
	s.completed("g7", 1)
	share := func(x *gw, method, token, user string, want int) gateway.ThreadAccess {
		t.Helper()
		resp, body := x.do(method, "/v1/threads/g7/shares/"+user, token, nil)
		if resp.StatusCode != want {
			t.Fatalf("%s share %s = %d %s, want %d", method, user, resp.StatusCode, body, want)
		}
		var acc gateway.ThreadAccess
		_ = json.Unmarshal(body, &acc)
		return acc
	}
	share(a, "PUT", bobToken, "bob", http.StatusNotFound) // not his thread
	if resp, body := b.do("GET", "/v1/threads/g7", bobToken, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob GET g7 before the share = %d %s, want 404", resp.StatusCode, body)
	}
	// A pending question, then the share: the question stays alice's.
	a.send(aliceToken, "g7", deleteDrafts)
	early, _ := s.question("g7", 1)
	if acc := share(a, "PUT", aliceToken, "bob", http.StatusOK); acc.Owner != "alice" || fmt.Sprint(acc.Shared) != "[bob]" {
		t.Fatalf("share = %+v, want owner alice shared [bob]", acc)
	}
	share(a, "PUT", aliceToken, "bob", http.StatusOK) // idempotent
	share(a, "PUT", aliceToken, "alice", http.StatusBadRequest)
	share(b, "PUT", bobToken, "carol", http.StatusForbidden)
	resp, body := b.do("POST", "/v1/threads/g7/elicitations/"+early, bobToken, map[string]any{"action": "accept"})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), events.RejectForbidden) {
		t.Fatalf("bob's answer to the question asked before the share = %d %s, want 403 forbidden", resp.StatusCode, body)
	}
	if s.drafts() != 10 {
		t.Fatalf("drafts = %d, want 10", s.drafts())
	}

	// Bob sees the thread through replica B.
	resp, body = b.do("GET", "/v1/threads", bobToken, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"thread":"g7"`) {
		t.Fatalf("bob's list = %d %s, want g7", resp.StatusCode, body)
	}
	resp, body = b.do("GET", "/v1/threads/g7", bobToken, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"owner":"alice"`) || !strings.Contains(string(body), `"shared":["bob"]`) {
		t.Fatalf("bob GET g7 = %d %s, want owner alice shared [bob]", resp.StatusCode, body)
	}
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/threads/g7", nil},
		{"GET", "/v1/threads/g7/events", nil},
		{"POST", "/v1/threads/g7/messages", map[string]any{"text": "hello"}},
		{"PUT", "/v1/threads/g7/shares/carol", nil},
	} {
		if resp, body := b.do(tc.method, tc.path, carolToken, tc.body); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("carol %s %s = %d %s, want 404", tc.method, tc.path, resp.StatusCode, body)
		}
	}

	// Alice's next message carries the share: bob answers its question.
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	stream := b.sse(ctx, bobToken, "g7", 0)
	a.send(aliceToken, "g7", deleteDrafts)
	late, _ := s.question("g7", 2)
	resp, body = b.do("POST", "/v1/threads/g7/elicitations/"+late, bobToken, map[string]any{"action": "accept"})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("bob's answer = %d %s, want 202", resp.StatusCode, body)
	}
	e := s.rec.await(t, 10*time.Second, "g7", events.TypeTurnCompleted, 2)
	tc, err := events.Data[events.TurnCompleted](e)
	if err != nil {
		t.Fatal(err)
	}
	bob := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}
	var answered []events.Identity
	for _, d := range tc.Decisions {
		if d.ElicitationID == late {
			answered = append(answered, d.AnsweredBy)
		}
	}
	if len(answered) != 1 || answered[0] != bob || s.drafts() != 0 {
		t.Fatalf("decisions %s, drafts %d; want bob's accept of %s and the drafts deleted", mustJSON(tc.Decisions), s.drafts(), late)
	}
	awaitType(t, stream, events.TypeTurnCompleted) // bob's event stream saw it
	b.send(bobToken, "g7", "list everything")
	s.completed("g7", 3)
	if got := s.rec.matching("g7", events.TypeTurnRejected); len(got) != 0 {
		t.Fatalf("turn.rejected on g7: %s", got[0].Data())
	}

	// The revoke: bob is a stranger again on every replica.
	if acc := share(b, "DELETE", aliceToken, "bob", http.StatusOK); len(acc.Shared) != 0 {
		t.Fatalf("after the revoke shared = %v, want none", acc.Shared)
	}
	share(b, "DELETE", aliceToken, "bob", http.StatusOK) // idempotent
	before := s.storedCount(events.ChatThreadSubjects("g7"))
	for _, x := range []*gw{a, b} {
		for _, tc := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/v1/threads/g7", nil},
			{"GET", "/v1/threads/g7/events", nil},
			{"POST", "/v1/threads/g7/messages", map[string]any{"text": "hello"}},
		} {
			if resp, body := x.do(tc.method, tc.path, bobToken, tc.body); resp.StatusCode != http.StatusNotFound {
				t.Fatalf("bob after the revoke %s %s = %d %s, want 404", tc.method, tc.path, resp.StatusCode, body)
			}
		}
	}
	if resp, body := a.do("GET", "/v1/threads", bobToken, nil); strings.Contains(string(body), "g7") {
		t.Fatalf("bob's list after the revoke = %d %s, want no g7", resp.StatusCode, body)
	}
	if after := s.storedCount(events.ChatThreadSubjects("g7")); after != before {
		t.Fatalf("events of g7: %d before, %d after bob's refused requests", before, after)
	}
}
