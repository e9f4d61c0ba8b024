package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/model/openai/openaitest"
	"github.com/parley-dev/parley/schema"
)

// A confirmed delete runs, then every model call fails (HTTP 500): the
// turn fails model_unavailable naming the delete (toolCalls), and the next
// turn's model request holds the delete call and its result (the
// assistant's tool call and the tool message), so the model does not ask
// to delete again. Real workers on an embedded server, the real
// OpenAI-compatible provider against a local server.
func TestEffectsSurviveAFailedTurn(t *testing.T) {
	srv := openaitest.New(t)
	s := start(t, options{provider: openAIProvider(t, srv)})
	id := s.firstDraft()
	boom := openaitest.Reply{Status: 500, Body: `{"error":{"message":"The server had an error","type":"server_error"}}`}
	// The delete, then 500 on each of the provider's 3 attempts
	// (MaxRetries 2).
	srv.Add(openaitest.Reply{File: sse + "tool_delete_reused_id.sse", Replace: map[string]string{"__ID__": id}}, boom, boom, boom)
	s.send("fx1", "delete one draft")
	qid, _ := s.question("fx1", 1)
	s.answer("fx1", qid, schema.ActionAccept, nil)
	tf, err := events.Data[events.TurnFailed](s.rec.await(t, 20*time.Second, "fx1", events.TypeTurnFailed, 1))
	if err != nil {
		t.Fatal(err)
	}
	if n := s.drafts(); n != 9 {
		t.Fatalf("drafts = %d, want 9 (the delete ran)", n)
	}
	if tf.Reason != model.ReasonUnavailable || len(tf.ToolCalls) != 1 || tf.ToolCalls[0].Tool != "delete_entities" ||
		tf.ToolCalls[0].IsError || tf.ToolCalls[0].Summary == "" || tf.ToolCalls[0].OutcomeUnknown {
		t.Fatalf("turn.failed = %+v, want model_unavailable naming the delete and its result", tf)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Fatalf("model requests = %d, want 4 (the delete, then 3 failed attempts)", n)
	}

	srv.Add(reply("text.sse"))
	s.send("fx1", "did that work?")
	s.turnCompleted("fx1", 1)
	reqs := srv.Requests()
	msgs, _ := reqs[len(reqs)-1]["messages"].([]any)
	var callID, result, roles []string
	for _, m := range msgs {
		mm, _ := m.(map[string]any)
		role, _ := mm["role"].(string)
		roles = append(roles, role)
		if calls, ok := mm["tool_calls"].([]any); ok && role == "assistant" {
			for _, c := range calls {
				cm, _ := c.(map[string]any)
				fn, _ := cm["function"].(map[string]any)
				if name, _ := fn["name"].(string); name == "delete_entities" {
					args, _ := fn["arguments"].(string)
					if !strings.Contains(args, id) {
						t.Errorf("the delete call's arguments %s do not name %s", args, id)
					}
					cid, _ := cm["id"].(string)
					callID = append(callID, cid)
				}
			}
		}
		if role == "tool" {
			cid, _ := mm["tool_call_id"].(string)
			text, _ := mm["content"].(string)
			result = append(result, cid+"="+text)
		}
	}
	if len(callID) != 1 || len(result) != 1 || !strings.HasPrefix(result[0], callID[0]+"=") ||
		!strings.Contains(result[0], tf.ToolCalls[0].Summary) {
		t.Fatalf("next model request: delete calls %q, tool results %q (roles %v); want the delete and its result %q",
			callID, result, roles, tf.ToolCalls[0].Summary)
	}
	if got := strings.Join(roles, ","); !strings.HasSuffix(got, "user,assistant,tool,assistant,user") {
		t.Errorf("next model request roles = %s, want …user,assistant(call),tool,assistant(note),user", got)
	}
}
