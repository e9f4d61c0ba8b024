package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// recordingModel answers with the scripted model and keeps every request.
type recordingModel struct {
	model.Provider
	mu   sync.Mutex
	reqs []model.Request
}

func (r *recordingModel) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Provider.Complete(ctx, req)
}

func (r *recordingModel) requests() []model.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]model.Request(nil), r.reqs...)
}

// privateNote is a page only ann may see (builtin.Entity.Owner).
const privateNote = "Ann's private notes: the launch moves to March."

// refSystem starts parley with a recording model and a private page of
// ann's in the site, and returns a client that speaks for end users (the
// gateway principal).
func refSystem(t *testing.T) (*system, *recordingModel, *client.Client) {
	t.Helper()
	scripted, err := model.LoadScripted("")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingModel{Provider: scripted}
	s := start(t, options{provider: rec})
	kv, err := s.bus.JetStream().KeyValue(s.ctx, builtin.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(builtin.Entity{ID: "page-ann", Type: builtin.TypePage, Title: "Launch notes", Status: builtin.StatusDraft,
		Body: privateNote, Created: time.Now().UTC(), Owner: "ann"})
	if _, err := kv.Put(s.ctx, "entity.page-ann", b); err != nil {
		t.Fatal(err)
	}
	return s, rec, client.NewWithOptions(s.bus, &client.Options{Principal: events.PrincipalGateway})
}

// sendRefs publishes a message from user on thread with a context
// reference block per entity (events.ReferenceLink).
func sendRefs(t *testing.T, s *system, gw *client.Client, thread, user, text string, blocks ...schema.Content) *event.Event {
	t.Helper()
	e, err := events.New("/parley/test", events.TypeTurnRequested, thread, events.TurnRequested{User: user,
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: text, Content: blocks}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.Publish(s.ctx, e); err != nil {
		t.Fatal(err)
	}
	return e
}

func ref(typ, id string) schema.Content {
	return events.ReferenceLink(schema.Entity{EntityType: typ, ID: id}, "")
}

// Two references, one of them private to the sender: the model request
// carries both as resolved for the sender (label, canonical link,
// summary with the body), not the claim blocks; the answer links back
// to both; a consumer that ignores blocks reads the message's text.
func TestReferencesReachTheModel(t *testing.T) {
	s, rec, gw := refSystem(t)
	e := sendRefs(t, s, gw, "refs1", "ann", "summarise these", ref("page", "page-1"), ref("page", "page-ann"))
	done := s.rec.await(t, 10*time.Second, "refs1", events.TypeTurnCompleted, 1)

	reqs := rec.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	msgs := reqs[0].Messages
	user := msgs[len(msgs)-1]
	if user.Role != model.RoleUser || user.Text != "summarise these" || len(user.Content) != 0 || len(user.References) != 2 {
		t.Fatalf("the model's user message: %+v; want the text, no claim blocks, two resolved references", user)
	}
	for i, want := range []struct{ id, label, uri, body string }{
		{"page-1", "About us", "https://site.example/node/page-1", "The about us page of the demo site."},
		{"page-ann", "Launch notes", "https://site.example/node/page-ann", privateNote},
	} {
		r := user.References[i]
		if r.Entity.ID != want.id || r.Entity.Label != want.label || r.URI != want.uri || !strings.Contains(r.Summary, want.body) || r.Block != i {
			t.Errorf("reference %d: %+v; want %+v", i, r, want)
		}
	}
	if txt := model.ReferencesText(user.References); !strings.Contains(txt, "The user referenced") || !strings.Contains(txt, privateNote) {
		t.Errorf("what a provider shows the model:\n%s", txt)
	}

	tc, err := events.Data[events.TurnCompleted](done)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tc.Message.Text, privateNote) {
		t.Errorf("answer %q does not use the private page's body", tc.Message.Text)
	}
	var links []string
	for _, c := range tc.Message.Content {
		if l, ok := c.(*schema.ResourceLink); ok {
			if ent, _ := l.Meta.Entity(); ent != nil {
				links = append(links, ent.ID+" "+l.URI)
			}
		}
	}
	if strings.Join(links, ",") != "page-1 https://site.example/node/page-1,page-ann https://site.example/node/page-ann" {
		t.Errorf("links back on the answer: %v", links)
	}

	// A block-unaware consumer of PARLEY_CHAT reads the text as before.
	echo := s.rec.await(t, 5*time.Second, "refs1", events.TypeTurnRequested, 1)
	var plain struct {
		Message struct {
			Text string `json:"text"`
		} `json:"message"`
	}
	if err := json.Unmarshal(echo.Data(), &plain); err != nil || plain.Message.Text != "summarise these" || echo.ID() != e.ID() {
		t.Errorf("block-unaware read of the echo: %+v, %v", plain, err)
	}
	if strings.Contains(string(echo.Data()), privateNote) {
		t.Errorf("the echo carries what was resolved: %s", echo.Data())
	}
}

// A reference to an entity that does not exist and one to an entity the
// sender may not see are refused alike (reference_unavailable, the same
// rule: the refusal tells nothing about the entity); the model is never
// called.
func TestReferencesRefused(t *testing.T) {
	s, rec, gw := refSystem(t)
	var rules []string
	for _, tt := range []struct {
		thread, user string
		block        schema.Content
	}{
		{"refs-missing", "bob", ref("page", "page-nope")},
		{"refs-private", "bob", ref("page", "page-ann")},
		{"refs-type", "ann", ref("article", "page-ann")},
	} {
		e := sendRefs(t, s, gw, tt.thread, tt.user, "summarise this", schema.Text("intro"), tt.block)
		rj := s.rec.await(t, 10*time.Second, tt.thread, events.TypeTurnRejected, 1)
		d, err := events.Data[events.TurnRejected](rj)
		if err != nil {
			t.Fatal(err)
		}
		if d.RequestEventID != e.ID() || d.Reason != events.RejectReferenceUnavailable || len(d.Errors) != 1 || d.Errors[0].Path != "data.message.content[1]" {
			t.Errorf("%s: %+v; want reference_unavailable naming data.message.content[1]", tt.thread, d)
		}
		if strings.Contains(string(rj.Data()), "Launch notes") || strings.Contains(string(rj.Data()), "March") {
			t.Errorf("%s: the refusal leaks the entity: %s", tt.thread, rj.Data())
		}
		if len(d.Errors) == 1 {
			rules = append(rules, d.Errors[0].Rule)
		}
		if got := s.rec.matching(tt.thread, events.TypeTurnRequested); len(got) != 0 {
			t.Errorf("%s: a refused message was echoed", tt.thread)
		}
	}
	if len(rules) != 3 || rules[0] != rules[1] || rules[1] != rules[2] || rules[0] != events.ReferenceUnavailableRule {
		t.Errorf("rules %q; want one rule for missing, private and mistyped", rules)
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("%d model requests; a refused reference must reach no model", n)
	}
}

// Too many references, or one too large, are refused before anything is
// resolved, naming the field and the bound.
func TestReferencesBounds(t *testing.T) {
	s, rec, gw := refSystem(t)
	var many []schema.Content
	for range events.MaxReferences + 1 {
		many = append(many, ref("page", "page-1"))
	}
	sendRefs(t, s, gw, "refs-many", "ann", "summarise these", many...)
	big := events.ReferenceLink(schema.Entity{EntityType: "page", ID: "page-1"}, "")
	big.Description = strings.Repeat("d", events.MaxReferenceBlockBytes)
	sendRefs(t, s, gw, "refs-big", "ann", "summarise this", big)
	for _, tt := range []struct{ thread, reason, path, rule string }{
		{"refs-many", events.RejectInvalidEvent, "data.message.content", "at most 8 context references"},
		{"refs-big", events.RejectMessageTooLarge, "data.message.content[0]", "over the limit of 4096"},
	} {
		d, err := events.Data[events.TurnRejected](s.rec.await(t, 10*time.Second, tt.thread, events.TypeTurnRejected, 1))
		if err != nil {
			t.Fatal(err)
		}
		if d.Reason != tt.reason || len(d.Errors) != 1 || d.Errors[0].Path != tt.path || !strings.Contains(d.Errors[0].Rule, tt.rule) {
			t.Errorf("%s: %+v; want %s naming %s (%s)", tt.thread, d, tt.reason, tt.path, tt.rule)
		}
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("%d model requests; want none", n)
	}
}

// The gateway's message body takes references in content: in bounds they
// reach the processor (which resolves them as the signed-in user), out of
// bounds they are a problem naming the field; a reference the user may
// not see is refused with the processor's verdict.
func TestGatewayReferences(t *testing.T) {
	s, _, _ := refSystem(t)
	x := s.startGateway(nil)
	link := func(id string) map[string]any {
		return map[string]any{"type": "resource_link", "uri": "entity:page/" + id, "name": id,
			"_meta": map[string]any{schema.MetaEntity: map[string]any{"entity_type": "page", "id": id}}}
	}
	path := "/v1/threads/gw-refs/messages"
	resp, body := x.do("POST", path, aliceToken, map[string]any{"text": "summarise this", "content": []any{link("page-1")}})
	if resp.StatusCode != 202 {
		t.Fatalf("POST with a reference: %d %s", resp.StatusCode, body)
	}
	if txt := s.completed("gw-refs", 1); !strings.Contains(txt, "The about us page of the demo site.") {
		t.Errorf("answer %q", txt)
	}

	var many []any
	for range events.MaxReferences + 1 {
		many = append(many, link("page-1"))
	}
	resp, body = x.do("POST", "/v1/threads/gw-refs2/messages", aliceToken, map[string]any{"text": "summarise these", "content": many})
	if resp.StatusCode != 400 || !strings.Contains(string(body), `"path":"content"`) || !strings.Contains(string(body), "at most 8 context references") {
		t.Errorf("nine references: %d %s; want 400 naming content", resp.StatusCode, body)
	}

	resp, body = x.do("POST", "/v1/threads/gw-refs3/messages", aliceToken, map[string]any{"text": "summarise this", "content": []any{link("page-ann")}})
	if resp.StatusCode == 202 || !strings.Contains(string(body), events.RejectReferenceUnavailable) || strings.Contains(string(body), "Launch notes") {
		t.Errorf("another user's private page: %d %s; want the processor's reference_unavailable", resp.StatusCode, body)
	}
}
