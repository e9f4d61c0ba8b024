package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/model/openai"
	"github.com/parley-dev/parley/model/openai/openaitest"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// Tests of the OpenAI-compatible provider with the real workers: a local
// server replays recorded chat-completions streams, and each test asserts
// what reached the bus.

const sse = "../model/openai/testdata/"

func reply(file string) openaitest.Reply { return openaitest.Reply{File: sse + file} }

func openAIProvider(t *testing.T, srv *openaitest.Server) model.Provider {
	t.Helper()
	p, err := openai.New(openai.Config{BaseURL: srv.URL(), Model: "gpt-4.1-mini", APIKey: "sk-test",
		Timeout: 5 * time.Second, MaxRetries: 2, MaxRetryDelay: 2 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func startOpenAI(t *testing.T, replies ...openaitest.Reply) (*system, *openaitest.Server) {
	t.Helper()
	srv := openaitest.New(t, replies...)
	return start(t, options{provider: openAIProvider(t, srv)}), srv
}

// startOpenAIAllProgress is startOpenAI with an agent that publishes every
// phase's progress at once (ProgressDelay negative). With the default
// delay, the phases of a turn against the local test server (instant model
// answers, instant policy check and tool) publish no progress at all
// (docs/events.md, "Progress"); tests that pin which statuses a turn's
// phases announce use this.
func startOpenAIAllProgress(t *testing.T, replies ...openaitest.Reply) (*system, *openaitest.Server) {
	t.Helper()
	srv := openaitest.New(t, replies...)
	return start(t, options{provider: openAIProvider(t, srv), progressDelay: -1}), srv
}

// turnCompleted waits for the n-th turn.completed on thread.
func (s *system) turnCompleted(thread string, n int) events.TurnCompleted {
	s.t.Helper()
	tc, err := events.Data[events.TurnCompleted](s.rec.await(s.t, 15*time.Second, thread, events.TypeTurnCompleted, n))
	if err != nil {
		s.t.Fatal(err)
	}
	return tc
}

// deltaText joins the message.delta texts of thread's latest attempt per step.
func (s *system) deltas(thread string) []events.MessageDelta {
	var out []events.MessageDelta
	for _, e := range s.rec.matching(thread, events.TypeMessageDelta) {
		d, err := events.Data[events.MessageDelta](e)
		if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// statuses returns the status items of thread's progress events, checking
// each is valid MCP progress whose progress increases per token.
func (s *system) statuses(thread string) []string {
	s.t.Helper()
	var out []string
	var prev *schema.Progress
	for _, e := range s.rec.matching(thread, events.TypeProgress) {
		p, err := events.Data[schema.Progress](e)
		if err != nil {
			s.t.Fatal(err)
		}
		if err := p.ValidateAfter(prev); err != nil {
			s.t.Errorf("progress %s after %v: %v", e.Data(), prev, err)
		}
		prev = &p
		st, _ := p.Meta.StatusItem()
		out = append(out, st)
	}
	return out
}

func TestOpenAIText(t *testing.T) {
	// All progress at once: this test pins that the model phase announces
	// itself ("Thinking…" first), which an instant answer would not show
	// under the default ProgressDelay.
	s, srv := startOpenAIAllProgress(t, reply("text.sse"))
	s.send("oa1", "hello")
	tc := s.turnCompleted("oa1", 1)
	want := "Hello! I can list, publish or delete your content."
	if tc.Message.Text != want {
		t.Errorf("turn.completed text = %q, want %q", tc.Message.Text, want)
	}
	var streamed strings.Builder
	for _, d := range s.deltas("oa1") {
		if d.TurnID != tc.TurnID || d.Step != 1 || d.Attempt != 1 {
			t.Errorf("delta %+v: want turn %s, step 1, attempt 1", d, tc.TurnID)
		}
		streamed.WriteString(d.Chunk.Text)
	}
	if streamed.String() != want {
		t.Errorf("message.delta texts = %q, want %q", streamed.String(), want)
	}
	var u events.Usage
	raw, _ := json.Marshal(tc.Message.Meta[events.MetaUsage])
	if err := json.Unmarshal(raw, &u); err != nil || u.InputTokens != 412 || u.OutputTokens != 14 || len(u.Calls) != 1 {
		t.Errorf("usage on turn.completed = %s (%v), want 412 in / 14 out over 1 call", raw, err)
	}
	if st := s.statuses("oa1"); len(st) == 0 || st[0] != "Thinking…" {
		t.Errorf("progress status items = %q, want Thinking… first", st)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("model requests = %d, want 1", n)
	}
}

// toolMessages returns the tool_call_id of the tool messages and the IDs of
// the assistant's tool calls in a recorded request.
func toolIDs(req map[string]any) (results, calls []string) {
	for _, m := range req["messages"].([]any) {
		m := m.(map[string]any)
		if m["role"] == "tool" {
			results = append(results, m["tool_call_id"].(string))
		}
		if tcs, ok := m["tool_calls"].([]any); ok {
			for _, tc := range tcs {
				calls = append(calls, tc.(map[string]any)["id"].(string))
			}
		}
	}
	return results, calls
}

func TestOpenAIToolCallSplitAcrossChunks(t *testing.T) {
	// All progress at once: this test pins the four statuses of a step
	// with a tool call. A phase shows only once
	// it lasts agent.DefaultProgressDelay, and against the local test
	// server every phase here is instant, so the default would publish
	// none (docs/events.md, "Progress"; agent TestSlowPhaseShowsProgress
	// pins that a slow phase still shows).
	s, srv := startOpenAIAllProgress(t, reply("tool_list.sse"), reply("text_after_list.sse"))
	s.send("oa2", "how many drafts?")
	tc := s.turnCompleted("oa2", 1)
	if tc.Message.Text != "There are 10 draft articles." {
		t.Errorf("text = %q", tc.Message.Text)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model requests = %d, want 2", len(reqs))
	}
	results, calls := toolIDs(reqs[1])
	if len(results) != 1 || results[0] != "call_Xy12ab" || len(calls) != 1 || calls[0] != "call_Xy12ab" {
		t.Errorf("second request: tool results %q for calls %q, want the model's call_Xy12ab", results, calls)
	}
	msgs := reqs[1]["messages"].([]any)
	if last := msgs[len(msgs)-1].(map[string]any); !strings.Contains(last["content"].(string), "article") {
		t.Errorf("the tool result sent to the model = %v", last["content"])
	}
	if len(tc.Decisions) != 1 || tc.Decisions[0].Tool != "list_entities" || tc.Decisions[0].CallID == "call_Xy12ab" {
		t.Errorf("decisions = %+v, want one for list_entities keyed by parley's call ID", tc.Decisions)
	}
	st := strings.Join(s.statuses("oa2"), "|")
	for _, want := range []string{"Thinking…", "Checking list_entities", "Running list_entities", "list_entities finished"} {
		if !strings.Contains(st, want) {
			t.Errorf("progress %q lacks %q", st, want)
		}
	}
}

func TestOpenAIParallelToolCalls(t *testing.T) {
	s, srv := startOpenAI(t, reply("tool_parallel.sse"), reply("text_after_parallel.sse"))
	s.send("oa3", "show me About and the events")
	tc := s.turnCompleted("oa3", 1)
	if tc.Message.Text != "Here is the About page and the events." {
		t.Errorf("text = %q", tc.Message.Text)
	}
	results, calls := toolIDs(srv.Requests()[1])
	if strings.Join(results, ",") != "call_Par0aa,call_Par1bb" || strings.Join(calls, ",") != "call_Par0aa,call_Par1bb" {
		t.Errorf("second request: results %q, calls %q", results, calls)
	}
	if len(tc.Decisions) != 2 {
		t.Errorf("decisions = %+v, want 2", tc.Decisions)
	}
}

// firstDraft returns a draft article's ID.
func (s *system) firstDraft() string {
	s.t.Helper()
	ents, err := s.site.Entities(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type == builtin.TypeArticle && e.Status == builtin.StatusDraft {
			return e.ID
		}
	}
	s.t.Fatal("no draft article")
	return ""
}

// A model that reuses a tool-call ID in the next step (list, then delete
// with the same ID) must get its confirmation asked and the delete run.
func TestOpenAIReusedToolCallID(t *testing.T) {
	srv := openaitest.New(t)
	s := start(t, options{provider: openAIProvider(t, srv)})
	id := s.firstDraft()
	srv.Add(reply("tool_list.sse"), openaitest.Reply{File: sse + "tool_delete_reused_id.sse", Replace: map[string]string{"__ID__": id}},
		reply("text_deleted.sse"))
	s.send("oa4", "delete one draft")
	qid, q := s.question("oa4", 1)
	if !strings.Contains(q.Message, "delete") && !strings.Contains(strings.ToLower(q.Message), "delete") {
		t.Errorf("question = %q", q.Message)
	}
	s.answer("oa4", qid, schema.ActionAccept, nil)
	tc := s.turnCompleted("oa4", 1)
	if tc.Message.Text != "Deleted the draft article." {
		t.Errorf("text = %q", tc.Message.Text)
	}
	if n := s.drafts(); n != 9 {
		t.Errorf("drafts = %d, want 9", n)
	}
	if len(tc.Decisions) != 2 || tc.Decisions[0].CallID == tc.Decisions[1].CallID {
		t.Errorf("decisions = %+v, want two calls with distinct parley IDs", tc.Decisions)
	}
	results, _ := toolIDs(srv.Requests()[2])
	if strings.Join(results, ",") != "call_Xy12ab,call_Xy12ab" {
		t.Errorf("tool results sent to the model carry %q, want the model's own ID twice", results)
	}
}

func TestOpenAIRetries(t *testing.T) {
	t.Run("429 with Retry-After then success", func(t *testing.T) {
		s, srv := startOpenAI(t, openaitest.Reply{Status: 429, Header: map[string]string{"Retry-After": "1"},
			Body: `{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`},
			reply("text.sse"))
		start := time.Now()
		s.send("oa5", "hello")
		if tc := s.turnCompleted("oa5", 1); !strings.HasPrefix(tc.Message.Text, "Hello!") {
			t.Errorf("text = %q", tc.Message.Text)
		}
		if el := time.Since(start); el < time.Second {
			t.Errorf("turn completed after %v, before the 1s Retry-After", el)
		}
		if n := len(srv.Requests()); n != 2 {
			t.Errorf("model requests = %d, want 2", n)
		}
		if st := strings.Join(s.statuses("oa5"), "|"); !strings.Contains(st, "retrying") {
			t.Errorf("progress %q does not say the model is being retried", st)
		}
	})
	t.Run("500 then success", func(t *testing.T) {
		s, srv := startOpenAI(t, openaitest.Reply{Status: 500, Body: `{"error":{"message":"The server had an error","type":"server_error"}}`}, reply("text.sse"))
		s.send("oa6", "hello")
		s.turnCompleted("oa6", 1)
		if n := len(srv.Requests()); n != 2 {
			t.Errorf("model requests = %d, want 2", n)
		}
	})
	t.Run("400 fails the turn without retry", func(t *testing.T) {
		s, srv := startOpenAI(t, openaitest.Reply{Status: 400,
			Body: `{"error":{"message":"Invalid 'messages[0].content': string too long.","type":"invalid_request_error","param":"messages[0].content","code":"string_above_max_length"}}`})
		s.send("oa7", "hello")
		tf, err := events.Data[events.TurnFailed](s.rec.await(t, 10*time.Second, "oa7", events.TypeTurnFailed, 1))
		if err != nil {
			t.Fatal(err)
		}
		if tf.Reason != model.ReasonRejected || !strings.Contains(tf.Detail, "400") {
			t.Errorf("turn.failed = %+v, want model_rejected naming HTTP 400", tf)
		}
		time.Sleep(200 * time.Millisecond)
		if n := len(srv.Requests()); n != 1 {
			t.Errorf("model requests = %d, want 1 (a 400 is not retried)", n)
		}
	})
	t.Run("stream cut mid-way then success", func(t *testing.T) {
		s, _ := startOpenAI(t, openaitest.Reply{File: sse + "text.sse", CutAfter: 700}, reply("text.sse"))
		s.send("oa8", "hello")
		tc := s.turnCompleted("oa8", 1)
		if tc.Message.Text != "Hello! I can list, publish or delete your content." {
			t.Errorf("text = %q (the cut attempt's text must not be kept)", tc.Message.Text)
		}
		attempts := map[int]bool{}
		for _, d := range s.deltas("oa8") {
			attempts[d.Attempt] = true
		}
		if !attempts[1] || !attempts[2] {
			t.Errorf("delta attempts = %v, want deltas of attempt 1 (cut) and 2", attempts)
		}
	})
	t.Run("stream always cut", func(t *testing.T) {
		cut := openaitest.Reply{File: sse + "text.sse", CutAfter: 700}
		s, _ := startOpenAI(t, cut, cut, cut)
		s.send("oa9", "hello")
		tf, err := events.Data[events.TurnFailed](s.rec.await(t, 15*time.Second, "oa9", events.TypeTurnFailed, 1))
		if err != nil {
			t.Fatal(err)
		}
		if tf.Reason != model.ReasonUnavailable {
			t.Errorf("turn.failed = %+v, want model_unavailable", tf)
		}
	})
}

// startAgentWith runs an agent with provider on its own connection until the
// returned stop is called.
func (s *system) startAgentWith(provider model.Provider) (stop func()) {
	s.t.Helper()
	return s.startAgentIn(provider)
}

// A turn paused with the real provider resumes on a fresh agent (a new
// provider instance) and a fresh processor.
func TestOpenAIPausedTurnResumesOnFreshWorkers(t *testing.T) {
	srv := openaitest.New(t)
	s := start(t, options{noAgent: true})
	stopA := s.startAgentWith(openAIProvider(t, srv))
	id := s.firstDraft()
	srv.Add(reply("tool_list.sse"), openaitest.Reply{File: sse + "tool_delete_reused_id.sse", Replace: map[string]string{"__ID__": id}},
		reply("text_deleted.sse"))
	s.send("oa10", "delete one draft")
	qid, _ := s.question("oa10", 1)
	stopA()
	s.stopProcessor("A")
	s.startProcessor("B")
	stopB := s.startAgentWith(openAIProvider(t, srv))
	defer stopB()
	s.answer("oa10", qid, schema.ActionAccept, nil)
	if tc := s.turnCompleted("oa10", 1); tc.Message.Text != "Deleted the draft article." {
		t.Errorf("text = %q", tc.Message.Text)
	}
	if n := s.drafts(); n != 9 {
		t.Errorf("drafts = %d, want 9", n)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("model requests = %d, want 3", n)
	}
}

// A user message's blocks (a resource_link with the entity it points to)
// reach the model as context.
func TestOpenAIUserContextReachesModel(t *testing.T) {
	s, srv := startOpenAI(t, reply("text.sse"))
	link := events.ReferenceLink(schema.Entity{EntityType: "page", ID: "page-1"}, "")
	e, err := events.New("/parley/test", events.TypeTurnRequested, "oa11", events.TurnRequested{
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: "summarise this", Content: schema.ContentList{link}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.bus.Publish(s.ctx, events.InputSubject(events.PrincipalIntegrator, "oa11", events.ChatTurnRequested), e); err != nil {
		t.Fatal(err)
	}
	s.turnCompleted("oa11", 1)
	msgs := srv.Requests()[0]["messages"].([]any)
	user := msgs[len(msgs)-1].(map[string]any)
	content, _ := user["content"].(string)
	// The reference reaches the model resolved (label, link and summary
	// from the site), never as the sender's unchecked claim.
	for _, want := range []string{"summarise this", "page-1", "About us", "https://site.example/node/page-1", "The about us page of the demo site."} {
		if !strings.Contains(content, want) {
			t.Errorf("user message sent to the model = %q, lacks %q", content, want)
		}
	}
}

// toolMessages returns the content of the tool messages of a recorded
// request, by tool_call_id.
func toolMessages(req map[string]any) map[string]string {
	out := map[string]string{}
	for _, m := range req["messages"].([]any) {
		m := m.(map[string]any)
		if m["role"] == "tool" {
			out[m["tool_call_id"].(string)], _ = m["content"].(string)
		}
	}
	return out
}

// Two parallel calls streamed at one index (0) with different ids, as some
// servers send them, are two calls: both run, and each result goes back to
// the model under its own id.
func TestOpenAIParallelCallsSharingIndex(t *testing.T) {
	d, calls := openaitest.ToolDelta, openaitest.ToolCalls
	shared := openaitest.Reply{Events: []string{openaitest.Role(),
		calls(d(0, "call_Sh0", "get_entity", "")), calls(d(0, "", "", `{"title": "About us"}`)),
		calls(d(0, "call_Sh1", "list_entities", "")), calls(d(0, "", "", `{"type": `)), calls(d(0, "", "", `"event"}`)),
		openaitest.Finish("tool_calls"), openaitest.Usage(540, 44), openaitest.Done}}
	s, srv := startOpenAI(t, shared, reply("text_after_parallel.sse"))
	s.send("oa12", "show me About and the events")
	tc := s.turnCompleted("oa12", 1)
	if tc.Message.Text != "Here is the About page and the events." {
		t.Errorf("text = %q", tc.Message.Text)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model requests = %d, want 2", len(reqs))
	}
	results, ids := toolIDs(reqs[1])
	if strings.Join(results, ",") != "call_Sh0,call_Sh1" || strings.Join(ids, ",") != "call_Sh0,call_Sh1" {
		t.Errorf("second request: results %q, calls %q, want call_Sh0 and call_Sh1", results, ids)
	}
	msgs := toolMessages(reqs[1])
	if !strings.Contains(msgs["call_Sh0"], "About us") || !strings.Contains(msgs["call_Sh1"], "event") {
		t.Errorf("tool results sent to the model = %q, want get_entity's page and list_entities' events", msgs)
	}
	var tools []string
	for _, dec := range tc.Decisions {
		tools = append(tools, dec.Tool)
	}
	if strings.Join(tools, ",") != "get_entity,list_entities" {
		t.Errorf("decisions for %q, want get_entity and list_entities", tools)
	}
}

// A streamed answer whose tool calls cannot be read (here a delete whose
// arguments are cut short) runs none of them — no question, nothing
// deleted — and the model is told why in each call's result.
func TestOpenAIUnreadableToolCallsRunNothing(t *testing.T) {
	srv := openaitest.New(t)
	s := start(t, options{provider: openAIProvider(t, srv)})
	id := s.firstDraft()
	d, calls := openaitest.ToolDelta, openaitest.ToolCalls
	srv.Add(openaitest.Reply{Events: []string{
		calls(d(0, "call_Del", "delete_entities", `{"ids": ["`+id+`"`)),
		calls(d(1, "call_Lst", "list_entities", `{"type": "article"}`)),
		openaitest.Finish("tool_calls"), openaitest.Done}}, reply("text.sse"))
	s.send("oa13", "delete one draft")
	tc := s.turnCompleted("oa13", 1)
	if tc.Message.Text != "Hello! I can list, publish or delete your content." {
		t.Errorf("text = %q", tc.Message.Text)
	}
	if q := s.rec.matching("oa13", events.TypeElicitationRequested); len(q) != 0 {
		t.Errorf("%d questions asked, want none (no call may run)", len(q))
	}
	if n, l := s.drafts(), s.ledger(); n != 10 || len(l) != 0 {
		t.Errorf("drafts = %d, ledger %v: want 10 and nothing done", n, l)
	}
	if len(tc.Decisions) != 0 {
		t.Errorf("decisions = %+v, want none", tc.Decisions)
	}
	msgs := toolMessages(srv.Requests()[1])
	for _, cid := range []string{"call_Del", "call_Lst"} {
		if m := msgs[cid]; !strings.Contains(m, "could not be read") || !strings.Contains(m, "not valid JSON") {
			t.Errorf("tool result for %s sent to the model = %q, want the reason the calls could not be read", cid, m)
		}
	}
}

// A stream that ends with [DONE] but no finish_reason after its text is a
// finished answer: the turn completes from the one request.
func TestOpenAIDoneWithoutFinishReason(t *testing.T) {
	s, srv := startOpenAI(t, openaitest.Reply{Events: []string{openaitest.Role(), openaitest.Text("Hello"),
		openaitest.Text(" there."), openaitest.Done}})
	s.send("oa14", "hello")
	if tc := s.turnCompleted("oa14", 1); tc.Message.Text != "Hello there." {
		t.Errorf("text = %q", tc.Message.Text)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("model requests = %d, want 1 (not retried)", n)
	}
}
