package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/gateway"
	"github.com/parley-dev/parley/schema"
)

// deletedIDs lists the entities the ledger records as deleted.
func (s *system) deletedIDs() []string {
	var ids []string
	for _, l := range s.ledger() {
		if l.Tool == "delete_entities" {
			ids = append(ids, l.IDs...)
		}
	}
	slices.Sort(ids)
	return ids
}

// editAnswer publishes an accept of question id on thread with the edited
// arguments args.
func (s *system) editAnswer(thread, id, args string) *events.ElicitationResponded {
	s.t.Helper()
	res := schema.ElicitResult{Action: schema.ActionAccept, Meta: schema.Meta{schema.MetaArguments: json.RawMessage(args)}}
	e, err := s.client.Answer(s.ctx, thread, id, res, "")
	if err != nil {
		s.t.Fatal(err)
	}
	d, _ := events.Data[events.ElicitationResponded](e)
	d.ElicitationID = e.ID() // the event's ID, for the caller
	return &d
}

// Over NATS: an invalid edit is refused naming the field and the question
// stays open; the valid edit then runs exactly what the person confirmed
// (the ledger deletes article-2 alone of the ten drafts); the model's
// message and the decision say the arguments were changed.
func TestEditedConfirmationRunsExactlyTheEdit(t *testing.T) {
	s := start(t, options{})
	s.send("ed1", deleteDrafts)
	id, q := s.question("ed1", 1)
	if _, ok := q.InputSchemaOf(); !ok {
		t.Fatalf("the confirmation carries no input schema to edit against: %s", mustJSON(q.Meta))
	}
	before := s.drafts()

	bad := s.editAnswer("ed1", id, `{"ids":[]}`)
	s.rec.await(t, 10*time.Second, "ed1", events.TypeElicitationRejected, 1)
	rej := s.rec.rejections("ed1")
	if len(rej) != 1 || rej[0].RespondedEventID != bad.ElicitationID || rej[0].Reason != events.RejectInvalidContent ||
		len(rej[0].Errors) == 0 || rej[0].Errors[0].Path != `_meta["dev.parley/arguments"].ids` || !strings.Contains(rej[0].Detail, "still open") {
		t.Fatalf("rejections %s, want invalid_content naming the field, the question still open", mustJSON(rej))
	}

	s.editAnswer("ed1", id, `{"ids":["article-2"]}`)
	text := s.completed("ed1", 1)
	if got := s.deletedIDs(); !slices.Equal(got, []string{"article-2"}) {
		t.Fatalf("deleted %v, want exactly the edit [article-2]", got)
	}
	if n := s.drafts(); n != before-1 {
		t.Errorf("drafts %d after the edited delete, want %d", n, before-1)
	}
	if !strings.Contains(text, `to {"ids":["article-2"]}`) || !strings.Contains(text, "Deleted 1 entity") {
		t.Errorf("final message %q, want the edit and its real result", text)
	}
	tc, _ := events.Data[events.TurnCompleted](s.rec.await(t, time.Second, "ed1", events.TypeTurnCompleted, 1))
	var del *events.DecisionRecord
	for i := range tc.Decisions {
		if tc.Decisions[i].Tool == "delete_entities" {
			del = &tc.Decisions[i]
		}
	}
	if del == nil || !del.Edited || !strings.Contains(string(del.OriginalArguments), "article-4") || del.Action != schema.ActionAccept {
		t.Errorf("decisions %s, want the delete marked edited with the model's arguments", mustJSON(tc.Decisions))
	}
}

// Two answers race for one confirmation, one plain and one with an edit:
// exactly one wins, and what ran is what the winner confirmed.
func TestEditedAnswerRacesPlainAnswer(t *testing.T) {
	s := start(t, options{processors: 2})
	s.send("ed2", deleteDrafts)
	id, _ := s.question("ed2", 1)
	before := s.drafts()
	var wg sync.WaitGroup
	wg.Go(func() { s.editAnswer("ed2", id, `{"ids":["article-4"]}`) })
	wg.Go(func() { s.answer("ed2", id, schema.ActionAccept, nil) })
	wg.Wait()
	s.completed("ed2", 1)
	s.rec.await(t, 10*time.Second, "ed2", events.TypeElicitationRejected, 1)
	rej := s.rec.rejections("ed2")
	if len(rej) != 1 || rej[0].Reason != events.RejectAlreadyConsumed {
		t.Fatalf("rejections %s, want one already_consumed", mustJSON(rej))
	}
	var winner events.ElicitationResponded
	for _, e := range s.rec.matching("ed2", events.TypeElicitationResponded) {
		if e.ID() != rej[0].RespondedEventID {
			winner, _ = events.Data[events.ElicitationResponded](e)
		}
	}
	got := s.deletedIDs()
	if _, edited := winner.Meta[schema.MetaArguments]; edited {
		if !slices.Equal(got, []string{"article-4"}) {
			t.Errorf("the edit won, deleted %v; want [article-4]", got)
		}
	} else if len(got) != before {
		t.Errorf("the plain accept won, deleted %v; want all %d drafts", got, before)
	}
}

// The gateway's answer body takes the edit as "arguments": a bad one is a
// problem naming the member (400 for its shape, 422 naming arguments.ids
// for the tool's schema, the question still open), and the valid one runs.
func TestGatewayEditedAnswer(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	x.send(aliceToken, "ged", deleteDrafts)
	stream := x.sse(ctx, aliceToken, "ged", 0)
	seen := awaitType(t, stream, events.TypeElicitationRequested)
	id := elicitationIDOf(t, seen[len(seen)-1])
	path := "/v1/threads/ged/elicitations/" + id
	for _, tt := range []struct {
		name   string
		body   map[string]any
		status int
		path   string
	}{
		{"not an object", map[string]any{"action": "accept", "arguments": []string{"article-2"}}, http.StatusBadRequest, "arguments"},
		{"with decline", map[string]any{"action": "decline", "arguments": map[string]any{"ids": []string{"article-2"}}}, http.StatusBadRequest, "arguments"},
		{"against the schema", map[string]any{"action": "accept", "arguments": map[string]any{"ids": []string{}}}, http.StatusUnprocessableEntity, "arguments.ids"},
	} {
		resp, body := x.do("POST", path, aliceToken, tt.body)
		var p gateway.Problem
		_ = json.Unmarshal(body, &p)
		if resp.StatusCode != tt.status || len(p.Errors) == 0 || p.Errors[0].Path != tt.path {
			t.Errorf("%s: %d %s, want %d naming %s", tt.name, resp.StatusCode, body, tt.status, tt.path)
		}
	}
	resp, body := x.do("POST", path, aliceToken, map[string]any{"action": "accept", "arguments": map[string]any{"ids": []string{"article-5"}}})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("valid edit: %d %s, want 202", resp.StatusCode, body)
	}
	awaitType(t, stream, events.TypeTurnCompleted)
	if got := s.deletedIDs(); !slices.Equal(got, []string{"article-5"}) {
		t.Errorf("deleted %v, want exactly the edit [article-5]", got)
	}
}

// An edit under a key that only looks like _meta["dev.parley/arguments"]
// (another case), over NATS and through the gateway's _meta, is refused
// naming that key: read as a plain accept it deleted all ten drafts, the
// model's call, when the person meant one.
func TestEditMisspelledKeyRunsNothing(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	s.send("edk", deleteDrafts)
	id, _ := s.question("edk", 1)
	x.send(aliceToken, "edg", deleteDrafts)
	gid, _ := s.question("edg", 1)
	before := s.drafts()
	res := schema.ElicitResult{Action: schema.ActionAccept, Meta: schema.Meta{"Dev.Parley/Arguments": json.RawMessage(`{"ids":["article-2"]}`)}}
	if _, err := s.client.Answer(s.ctx, "edk", id, res, ""); err != nil {
		t.Fatal(err)
	}
	s.rec.await(t, 10*time.Second, "edk", events.TypeElicitationRejected, 1)
	rej := s.rec.rejections("edk")
	if len(rej) != 1 || rej[0].Reason != events.RejectInvalidContent || len(rej[0].Errors) == 0 || rej[0].Errors[0].Path != `_meta["Dev.Parley/Arguments"]` {
		t.Fatalf("rejections %s, want invalid_content naming the look-alike key", mustJSON(rej))
	}

	resp, body := x.do("POST", "/v1/threads/edg/elicitations/"+gid, aliceToken, map[string]any{"action": "accept",
		"_meta": map[string]any{"DEV.PARLEY/ARGUMENTS": map[string]any{"ids": []string{"article-2"}}}})
	var p gateway.Problem
	_ = json.Unmarshal(body, &p)
	if resp.StatusCode != http.StatusUnprocessableEntity || len(p.Errors) == 0 || p.Errors[0].Path != `_meta["DEV.PARLEY/ARGUMENTS"]` {
		t.Errorf("gateway: %d %s, want 422 naming the look-alike key", resp.StatusCode, body)
	}
	if n := s.drafts(); n != before {
		t.Fatalf("drafts %d after look-alike edits, want all %d kept (the question stays open)", n, before)
	}
	s.editAnswer("edk", id, `{"ids":["article-2"]}`)
	s.completed("edk", 1)
	if got := s.deletedIDs(); !slices.Equal(got, []string{"article-2"}) {
		t.Errorf("deleted %v, want exactly the edit [article-2]", got)
	}
}
