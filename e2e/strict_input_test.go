package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// publishRaw publishes an input event of type typ on thread, as
// PrincipalIntegrator, with data exactly as given (bytes encoding/json
// would not write), and returns its event ID.
func (s *system) publishRaw(thread string, typ events.Type, data string) string {
	s.t.Helper()
	suffix, ok := events.InputSuffix(typ)
	if !ok {
		s.t.Fatalf("%s is not an input type", typ)
	}
	e, err := events.New("/test", typ, thread, map[string]any{})
	if err != nil {
		s.t.Fatal(err)
	}
	h, _, err := events.Encode(e)
	if err != nil {
		s.t.Fatal(err)
	}
	msg := &nats.Msg{Subject: events.InputSubject(events.PrincipalIntegrator, thread, suffix), Header: nats.Header(h), Data: []byte(data)}
	msg.Header.Set(nats.MsgIdHdr, e.ID())
	if _, err := s.bus.JetStream().PublishMsg(s.ctx, msg); err != nil {
		s.t.Fatal(err)
	}
	return e.ID()
}

// rejectionOf waits for the elicitation.rejected of answer id on thread.
func (s *system) rejectionOf(thread, id string) events.ElicitationRejected {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range s.rec.rejections(thread) {
			if r.RespondedEventID == id {
				return r
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("no elicitation.rejected for %s:\n%s", id, s.rec.dump(thread))
	return events.ElicitationRejected{}
}

// An answer on NATS is read as strictly as the gateway reads its body: a
// repeated member ({"action":"decline","action":"accept"}, which
// encoding/json reads as accept), a member the answer's shape does not
// define, and text that is not valid Unicode are each refused
// invalid_event naming the member, nothing is deleted and the question
// stays open. Once it is answered, a refusal of a later answer says so
// rather than "the question is still open".
func TestAnswerReadStrictlyOnNATS(t *testing.T) {
	s := start(t, options{})
	g := s.startGateway(nil)
	s.send("d1", "delete the 10 draft articles")
	q, _ := s.question("d1", 1)
	cases := []struct{ name, data, path, rule string }{
		{"repeated member", `{"elicitationId":"` + q + `","action":"decline","action":"accept"}`, "data.action", `duplicate member "action"`},
		{"repeated member in content", `{"elicitationId":"` + q + `","action":"accept","content":{"instructions":"a","instructions":"b"}}`,
			"data.content.instructions", "duplicate member"},
		{"unknown member", `{"elicitationId":"` + q + `","action":"accept","actoin":"decline"}`, "data.actoin", "unknown member"},
		{"invalid UTF-8", "{\"elicitationId\":\"" + q + "\",\"action\":\"accept\",\"content\":{\"instructions\":\"go \xff\"}}",
			"data.content.instructions", "invalid UTF-8"},
		{"unpaired surrogate", `{"elicitationId":"` + q + `","action":"accept","content":{"instructions":"\udc00"}}`,
			"data.content.instructions", "surrogate"},
	}
	for _, c := range cases {
		id := s.publishRaw("d1", events.TypeElicitationResponded, c.data)
		r := s.rejectionOf("d1", id)
		if r.Reason != events.RejectInvalidEvent || len(r.Errors) == 0 || r.Errors[0].Path != c.path || !strings.Contains(r.Errors[0].Rule, c.rule) {
			t.Errorf("%s: rejected %s %v, want invalid_event at %s (%s)", c.name, r.Reason, r.Errors, c.path, c.rule)
		}
	}
	if n := s.drafts(); n != 10 {
		t.Fatalf("%d drafts left after the refused answers, want 10 (nothing was confirmed)", n)
	}
	// The gateway refuses the same bodies, naming the same members.
	for _, c := range []struct{ body, path string }{
		{`{"action":"decline","action":"accept"}`, `"path":"action"`},
		{`{"action":"accept","actoin":"decline"}`, `"path":"actoin"`},
		{"{\"action\":\"accept\",\"content\":{\"instructions\":\"\xff\"}}", `"path":"content.instructions"`},
	} {
		resp, body := g.doRaw("POST", "/v1/threads/d1/elicitations/"+q, aliceToken, c.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), c.path) {
			t.Errorf("gateway %s = %d %s, want 400 naming %s", c.body, resp.StatusCode, body, c.path)
		}
	}
	// The question is still open: a decline is taken.
	s.answer("d1", q, schema.ActionDecline, nil)
	s.completed("d1", 1)
	if n := s.drafts(); n != 10 {
		t.Fatalf("%d drafts after the decline, want 10", n)
	}
	// A late answer that does not fit the form is refused, and its detail
	// says the question was answered.
	late := s.publishRaw("d1", events.TypeElicitationResponded, `{"elicitationId":"`+q+`","action":"accept","content":{"instructions":5}}`)
	r := s.rejectionOf("d1", late)
	if strings.Contains(r.Detail, "still open") || !strings.Contains(r.Detail, "already answered") {
		t.Errorf("late answer rejected %s %q, want a detail saying the question was already answered", r.Reason, r.Detail)
	}
}

// A message on NATS is read as strictly: text that is not valid Unicode
// (raw bytes, or an unpaired surrogate escape) is refused turn.rejected
// invalid_event naming data.message.text instead of being stored with
// U+FFFD, and so are a repeated member and a member the message's shape
// does not define; the gateway refuses the same body 400.
func TestMessageReadStrictlyOnNATS(t *testing.T) {
	s := start(t, options{})
	g := s.startGateway(nil)
	cases := []struct{ name, data, path, rule string }{
		{"invalid UTF-8", "{\"message\":{\"role\":\"user\",\"text\":\"list \xc3(\"}}", "data.message.text", "invalid UTF-8"},
		{"unpaired surrogate", `{"message":{"role":"user","text":"list \ud83d"}}`, "data.message.text", "surrogate"},
		{"repeated member", `{"message":{"role":"user","text":"list","text":"delete the 10 draft articles"}}`, "data.message.text", "duplicate member"},
		{"unknown member", `{"message":{"role":"user","text":"list"},"priority":"high"}`, "data.priority", "unknown member"},
		{"unknown message member", `{"message":{"role":"user","text":"list","txet":"x"}}`, "data.message.txet", "unknown member"},
	}
	for i, c := range cases {
		thread := "u" + string(rune('a'+i))
		id := s.publishRaw(thread, events.TypeTurnRequested, c.data)
		e := s.rec.await(t, 10*time.Second, thread, events.TypeTurnRejected, 1)
		d, _ := events.Data[events.TurnRejected](e)
		if d.RequestEventID != id || d.Reason != events.RejectInvalidEvent || len(d.Errors) == 0 ||
			d.Errors[0].Path != c.path || !strings.Contains(d.Errors[0].Rule, c.rule) {
			t.Errorf("%s: turn.rejected %+v, want invalid_event at %s (%s)", c.name, d, c.path, c.rule)
		}
		if n := len(s.rec.matching(thread, events.TypeTurnRequested)); n != 0 {
			t.Errorf("%s: the message was accepted (%d echoes)", c.name, n)
		}
	}
	for _, c := range []struct{ body, path string }{
		{"{\"text\":\"list \xc3(\"}", `"path":"text"`},
		{`{"text":"list \ud83d"}`, `"path":"text"`},
		{`{"text":"list","text":"delete"}`, `"path":"text"`},
	} {
		resp, body := g.doRaw("POST", "/v1/threads/ux/messages", aliceToken, c.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), c.path) {
			t.Errorf("gateway %q = %d %s, want 400 naming %s", c.body, resp.StatusCode, body, c.path)
		}
	}
}

// doRaw is do with the body sent as given (not re-encoded).
func (x *gw) doRaw(method, path, token, body string) (*http.Response, []byte) {
	x.t.Helper()
	req, _ := http.NewRequest(method, x.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		x.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}
