package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model/openai/openaitest"
	"github.com/parley-dev/parley/schema"
)

// modelDown is one model call's attempts all answering HTTP 500 (the
// provider's first try and its MaxRetries of 2).
func modelDown() []openaitest.Reply {
	r := openaitest.Reply{Status: http.StatusInternalServerError, Body: `{"error":{"message":"upstream down","type":"server_error"}}`}
	return []openaitest.Reply{r, r, r}
}

// A confirmed delete runs, then every model call of the turn fails: the
// turn fails naming the delete, and the next turn's model request holds
// the delete's call and its result, so the model does not ask again.
func TestEffectSurvivesModelOutage(t *testing.T) {
	srv := openaitest.New(t)
	s := start(t, options{provider: openAIProvider(t, srv)})
	id := s.firstDraft()
	d, calls := openaitest.ToolDelta, openaitest.ToolCalls
	srv.Add(openaitest.Reply{Events: []string{openaitest.Role(),
		calls(d(0, "call_Rm", "delete_entities", `{"ids": ["`+id+`"]}`)),
		openaitest.Finish("tool_calls"), openaitest.Done}})
	srv.Add(modelDown()...)
	s.send("ef1", "delete one draft")
	qid, _ := s.question("ef1", 1)
	s.answer("ef1", qid, schema.ActionAccept, nil)
	tf, err := events.Data[events.TurnFailed](s.rec.await(t, 30*time.Second, "ef1", events.TypeTurnFailed, 1))
	if err != nil {
		t.Fatal(err)
	}
	if s.drafts() != 9 {
		t.Fatalf("drafts = %d, want 9 (the confirmed delete ran)", s.drafts())
	}
	if len(tf.ToolCalls) != 1 || tf.ToolCalls[0].Tool != "delete_entities" || tf.ToolCalls[0].Summary == "" {
		t.Errorf("turn.failed toolCalls = %+v, want the delete with a summary", tf.ToolCalls)
	}
	n := len(srv.Requests())
	srv.Add(reply("text.sse"))
	s.send("ef1", "what happened?")
	s.turnCompleted("ef1", 1)
	req := srv.Requests()[n]
	raw, _ := json.Marshal(req["messages"])
	if !strings.Contains(string(raw), "delete_entities") || !strings.Contains(string(raw), id) {
		t.Errorf("the next turn's model request lacks the delete call: %s", raw)
	}
	if len(toolMessages(req)) != 1 {
		t.Errorf("the next turn's model request has %d tool results, want the delete's: %s", len(toolMessages(req)), raw)
	}
}

// A turn pauses on a delete after a read-only call of the same step ran;
// whatever ends the pause (a new message supersedes it, the question is
// cancelled, the pause expires), the next model request holds the call
// that ran and its result.
func TestEffectSurvivesPauseEnd(t *testing.T) {
	for _, end := range []string{"supersede", "cancel", "expiry"} {
		t.Run(end, func(t *testing.T) {
			srv := openaitest.New(t)
			o := options{provider: openAIProvider(t, srv)}
			if end == "expiry" {
				o.pauseTTL = 2 * time.Second
			}
			s := start(t, o)
			id := s.firstDraft()
			d, calls := openaitest.ToolDelta, openaitest.ToolCalls
			srv.Add(openaitest.Reply{Events: []string{openaitest.Role(),
				calls(d(0, "call_Ls", "list_entities", `{"type": "article"}`)),
				calls(d(1, "call_Rm", "delete_entities", `{"ids": ["`+id+`"]}`)),
				openaitest.Finish("tool_calls"), openaitest.Done}})
			s.send("ep", "list and delete one draft")
			qid, _ := s.question("ep", 1)
			n := len(srv.Requests())
			srv.Add(reply("text.sse"))
			switch end {
			case "supersede":
				s.send("ep", "never mind, what is there?")
			case "cancel":
				s.answer("ep", qid, schema.ActionCancel, nil)
			case "expiry":
				s.rec.await(t, 30*time.Second, "ep", events.TypeElicitationExpired, 1)
				s.send("ep", "what is there?")
			}
			s.turnCompleted("ep", 1)
			if len(srv.Requests()) == n { // the turn ended without the model: ask again
				s.send("ep", "what is there?")
				s.turnCompleted("ep", 2)
			}
			req := srv.Requests()[n]
			raw, _ := json.Marshal(req["messages"])
			if !strings.Contains(string(raw), `"name":"list_entities"`) || !strings.Contains(string(raw), "Found 15 entities") {
				t.Errorf("the model request after the %s lacks the list_entities call and its result: %s", end, raw)
			}
			if s.drafts() != 10 {
				t.Errorf("drafts = %d, want 10 (the delete never ran)", s.drafts())
			}
		})
	}
}
