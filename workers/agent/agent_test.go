package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// rig is one agent on an embedded server, driven by calling Handle with
// the events the processor and the tool-executor would send. The test
// plays the tool-executor; policy answers every pre-execute request.
type rig struct {
	t        *testing.T
	ctx      context.Context
	a        *Agent
	b        *bus.Client
	outcomes chan *event.Event
}

// allowAll is a policy that allows every call.
func allowAll(events.PreExecuteRequest) any {
	return events.PolicyDecision{Decision: events.DecisionAllow, Policy: "test", ConfigVersion: "v1"}
}

// newRig starts the rig with one policy service, "test", answering with
// policy's value as the reply data; the agent expects only "test".
func newRig(t *testing.T, rules string, policy func(events.PreExecuteRequest) any, tools ...schema.Tool) *rig {
	t.Helper()
	return newRigPolicies(t, rules, map[string]func(events.PreExecuteRequest) any{"test": policy}, []string{"test"}, tools...)
}

// newRigPolicies starts the rig with one policy service per entry of
// policies (each in its own queue group, as separate policy services
// are), and an agent that expects the policies named in expected.
func newRigPolicies(t *testing.T, rules string, policies map[string]func(events.PreExecuteRequest) any, expected []string, tools ...schema.Tool) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := bustest.NewServer(t)
	nc := srv.Connect(t)
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	reg, err := kvstate.OpenTools(ctx, b.JetStream(), b.Storage(), b.Replicas())
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		if err := reg.Register(ctx, tl); err != nil {
			t.Fatal(err)
		}
	}
	for name, policy := range policies {
		go func() {
			_ = b.Serve(ctx, bus.Endpoint{Service: "test-policy-" + name, Version: "0.0.1", Name: "pre_execute",
				Subject: events.SubjectPreExecAll, QueueGroup: name, ReplyAs: name}, func(_ context.Context, req *event.Event) (*event.Event, error) {
				in, err := events.Data[events.PreExecuteRequest](req)
				if err != nil {
					return nil, err
				}
				return events.New("/test/policy", events.TypePreExecuteDecided, req.Subject(), policy(in))
			})
		}()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := nc.Request("$SRV.PING.test-policy-"+name, nil, 100*time.Millisecond); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("test policy service %s did not come up within 5s", name)
			}
		}
	}
	provider, err := model.NewScripted([]byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(ctx, b, provider, &Options{PreExecuteTimeout: 2 * time.Second, Policies: expected})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, ctx: ctx, a: a, b: b, outcomes: make(chan *event.Event, 16)}
	sub, err := nc.Subscribe("parley.agent.run.*", func(m *nats.Msg) {
		if m.Subject == events.SubjectRunRequested || m.Subject == events.SubjectRunResumed {
			return
		}
		e, err := events.Decode(events.Header(m.Header), m.Data)
		if err != nil {
			t.Errorf("undecodable outcome on %s: %v", m.Subject, err)
			return
		}
		r.outcomes <- e
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return r
}

// request hands the agent a run.requested for runID with the history msgs.
func (r *rig) request(runID string, msgs ...schema.ChatMessage) error {
	r.t.Helper()
	e, err := events.New("/test/processor", events.TypeRunRequested, "t1",
		events.RunRequested{RunID: runID, TurnID: "turn-" + runID, Thread: "t1", Agent: "default", Messages: msgs})
	if err != nil {
		r.t.Fatal(err)
	}
	return r.a.Handle(r.ctx, &bus.Delivery{Event: e, Subject: events.SubjectRunRequested, NumDelivered: 1})
}

// result hands the agent a tool result.
func (r *rig) result(res events.ToolResult) error {
	r.t.Helper()
	e, err := events.New("/test/toolexec", events.TypeToolResultReady, "t1", res)
	if err != nil {
		r.t.Fatal(err)
	}
	return r.a.Handle(r.ctx, &bus.Delivery{Event: e, Subject: events.ToolResultSubject(res.RunID), NumDelivered: 1})
}

// outcome waits for the next run.completed, run.paused or run.failed.
func (r *rig) outcome() *event.Event {
	r.t.Helper()
	select {
	case e := <-r.outcomes:
		return e
	case <-time.After(10 * time.Second):
		r.t.Fatal("no run outcome within 10s")
		return nil
	}
}

// completed waits for the outcome and requires run.completed.
func (r *rig) completed() events.RunCompleted {
	r.t.Helper()
	e := r.outcome()
	if events.TypeOf(e) != events.TypeRunCompleted {
		r.t.Fatalf("outcome %s: %s, want run.completed", e.Type(), e.Data())
	}
	out, err := events.Data[events.RunCompleted](e)
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

func user(text string) schema.ChatMessage {
	return schema.ChatMessage{Role: schema.RoleUser, Text: text}
}

// oneCall is a rules file that calls tool with args, then answers with the
// result's text.
func oneCall(tool, args string) string {
	return `{"rules":[{"name":"r","match":".","steps":[{"tool_calls":[{"name":"` + tool + `","arguments":` + args +
		`}]},{"text":"{{.Last.Text}}"}]}],"fallback":"?"}`
}

func tool(name string, readOnly bool, inputSchema string) schema.Tool {
	return schema.Tool{Name: name, Description: "A test tool.", InputSchema: json.RawMessage(inputSchema),
		Annotations: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(readOnly)}}
}

// TestLargeToolResultStaysOutOfTheRunRecord (in the agent):
// a tool result of several MiB (text, thousands of blocks, a large
// structuredContent) no longer overflows the run checkpoint. The model
// reads the text cut with a note, the run record keeps a reduced copy with
// a reference, the whole result is in the object store, and the run
// completes with a bounded final message.
//
// The run record is written before tool calls are dispatched (a finished
// run is not written again), so the model calls a second tool after the
// large result: the checkpoint before that call holds the result.
func TestLargeToolResultStaysOutOfTheRunRecord(t *testing.T) {
	rules := `{"rules":[{"name":"r","match":".","steps":[{"tool_calls":[{"name":"dump","arguments":{}}]},` +
		`{"tool_calls":[{"name":"more","arguments":{}}]},{"text":"{{(index .Results 0).Text}}"}]}],"fallback":"?"}`
	r := newRig(t, rules, allowAll, tool("dump", true, `{"type":"object"}`), tool("more", true, `{"type":"object"}`))
	if err := r.request("run1", user("dump it")); err != nil {
		t.Fatal(err)
	}
	big := &schema.CallToolResult{Content: schema.ContentList{schema.Text(strings.Repeat("entity line of text\n", 100_000))}}
	rows := make([]any, 0, 5000)
	for i := range 5000 {
		big.Content = append(big.Content, &schema.ResourceLink{URI: fmt.Sprintf("https://site.example/node/e%d", i),
			Name: fmt.Sprintf("Entity %d", i), MIMEType: "text/html"})
		rows = append(rows, map[string]any{"id": fmt.Sprintf("e%d", i), "title": "Entity"})
	}
	big.StructuredContent = map[string]any{"entities": rows}
	whole, _ := json.Marshal(big)
	if err := r.result(events.ToolResult{RunID: "run1", CallID: "call_0_0", Result: big}); err != nil {
		t.Fatalf("handling a %d-byte tool result: %v", len(whole), err)
	}
	if err := r.result(events.ToolResult{RunID: "run1", CallID: "call_1_0", Result: &schema.CallToolResult{Content: schema.ContentList{schema.Text("more")}}}); err != nil {
		t.Fatal(err)
	}
	done := r.completed()
	if n := len(done.Message.Text); n > MaxResultTextBytes+1024 {
		t.Errorf("final text is %d bytes, want at most about %d", n, MaxResultTextBytes)
	}
	if !strings.Contains(done.Message.Text, "Output cut") || !strings.Contains(done.Message.Text, "limit and cursor") ||
		strings.Count(done.Message.Text, "Output cut") != 1 {
		t.Errorf("final text does not say it was cut and how to get more: ...%s", done.Message.Text[len(done.Message.Text)-300:])
	}
	if b, _ := json.Marshal(done.Message); len(b) > MaxInlineResultBytes+MaxUserBlocksBytes {
		t.Errorf("final message is %d bytes", len(b))
	}
	kve, err := r.a.runs.KV().Get(r.ctx, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(kve.Value()); n > MaxRunBytes {
		t.Errorf("run record is %d bytes, want at most %d", n, MaxRunBytes)
	}
	t.Logf("tool result %d bytes; run record %d bytes; final text %d bytes", len(whole), len(kve.Value()), len(done.Message.Text))
	var run Run
	if err := json.Unmarshal(kve.Value(), &run); err != nil {
		t.Fatal(err)
	}
	var ref ResultRef
	for _, m := range run.Messages {
		if m.Role == model.RoleTool && m.Result != nil {
			raw, _ := json.Marshal(m.Result.Meta[MetaResultRef])
			_ = json.Unmarshal(raw, &ref)
		}
	}
	if ref.Name == "" || ref.Size != len(whole) {
		t.Fatalf("run record's tool result has reference %+v, want one to the %d-byte result", ref, len(whole))
	}
	stored, err := r.a.results.GetBytes(r.ctx, ref.Name)
	if err != nil || len(stored) != len(whole) {
		t.Fatalf("object %s: %d bytes, %v; want the whole result", ref.Name, len(stored), err)
	}
}

// TestRunRecordBounded (for history): a run handed more
// history than a run record can hold (60 messages of 32 KiB) drops the
// oldest messages and completes, instead of failing to checkpoint.
// The model calls a tool, so the run is checkpointed before the call is
// dispatched.
func TestRunRecordBounded(t *testing.T) {
	r := newRig(t, `{"rules":[{"name":"r","match":"hello","steps":[{"tool_calls":[{"name":"t","arguments":{}}]},{"text":"hi"}]}],"fallback":"?"}`,
		allowAll, tool("t", true, `{"type":"object"}`))
	var msgs []schema.ChatMessage
	for i := range 60 {
		role := schema.RoleUser
		if i%2 == 1 {
			role = schema.RoleAssistant
		}
		msgs = append(msgs, schema.ChatMessage{Role: role, Text: fmt.Sprintf("%d ", i) + strings.Repeat("x", 32<<10)})
	}
	msgs = append(msgs, user("hello"))
	if err := r.request("run2", msgs...); err != nil {
		t.Fatalf("run with %d messages of history: %v", len(msgs), err)
	}
	kve, err := r.a.runs.KV().Get(r.ctx, "run2")
	if err != nil {
		t.Fatalf("the checkpoint before the tool call: %v", err)
	}
	if n := len(kve.Value()); n > MaxRunBytes {
		t.Errorf("run record is %d bytes, want at most %d", n, MaxRunBytes)
	}
	if err := r.result(events.ToolResult{RunID: "run2", CallID: "call_0_0", Result: &schema.CallToolResult{Content: schema.ContentList{schema.Text("ok")}}}); err != nil {
		t.Fatal(err)
	}
	if done := r.completed(); done.Message.Text != "hi" {
		t.Errorf("final = %q", done.Message.Text)
	}
}

// TestInvalidFormsBecomeToolErrors: a form from
// a tool (input required) that is not a valid elicitation, or is oversize
// (250 KB), is never asked: the call becomes a tool error the model reads,
// and the run completes. (A policy sends no form at all: see
// TestPolicyReplyWithConfirmationTextVetoes.)
func TestInvalidFormsBecomeToolErrors(t *testing.T) {
	nested := schema.ElicitRequestParams{Message: "Where?", RequestedSchema: schema.RequestedSchema{Type: "object",
		Properties: map[string]*schema.PropertySchema{"address": {Type: "object"}}}}
	huge := schema.ElicitRequestParams{Message: strings.Repeat("Please read all of this. ", 10_000),
		RequestedSchema: schema.RequestedSchema{Type: "object",
			Properties: map[string]*schema.PropertySchema{"ok": {Type: "boolean"}}}}
	for name, form := range map[string]schema.ElicitRequestParams{"nested": nested, "250KB": huge} {
		t.Run("tool/"+name, func(t *testing.T) {
			r := newRig(t, oneCall("ask", `{}`), allowAll, tool("ask", true, `{"type":"object"}`))
			if err := r.request("run3", user("ask me")); err != nil {
				t.Fatal(err)
			}
			ir := &schema.InputRequiredResult{ResultType: schema.ResultTypeInputRequired, RequestState: "s",
				InputRequests: map[string]schema.InputRequest{"q": {Method: schema.MethodElicitationCreate, Params: form}}}
			if err := r.result(events.ToolResult{RunID: "run3", CallID: "call_0_0", InputRequired: ir}); err != nil {
				t.Fatalf("handling the result: %v", err)
			}
			done := r.completed()
			if !strings.Contains(done.Message.Text, "cannot be shown to the user") {
				t.Errorf("final = %.300q, want the refused form explained", done.Message.Text)
			}
		})
	}
}

// TestFormDefaultsDowngraded: a tool form whose string property has a
// default (a 2025-11-25 prefill) is asked, not refused, under the
// 2025-06-18 form revision, without the default; under 2025-11-25 it is
// asked with it. A later shape that is more than a hint (a titled enum)
// is still refused under 2025-06-18.
func TestFormDefaultsDowngraded(t *testing.T) {
	prefilled := schema.ElicitRequestParams{Message: "Title and date?", RequestedSchema: schema.RequestedSchema{Type: "object",
		Properties: map[string]*schema.PropertySchema{
			"title": {Type: "string", Title: "Title", Default: json.RawMessage(`"Launch party"`)},
			"date":  {Type: "string", Format: "date", Title: "Date"},
		}, Required: []string{"title", "date"}}}
	titled := schema.ElicitRequestParams{Message: "Size?", RequestedSchema: schema.RequestedSchema{Type: "object",
		Properties: map[string]*schema.PropertySchema{
			"size": {Type: "string", OneOf: []schema.EnumOption{{Const: "s", Title: "Small"}}, Default: json.RawMessage(`"s"`)},
		}}}
	for _, tc := range []struct {
		rev         schema.Revision
		form        schema.ElicitRequestParams
		wantDefault string // "" for none; "refused" for a refused form
	}{
		{schema.Rev20250618, prefilled, ""},
		{schema.Rev20251125, prefilled, `"Launch party"`},
		{schema.Rev20250618, titled, "refused"},
	} {
		t.Run(string(tc.rev)+"/"+tc.form.Message, func(t *testing.T) {
			r := newRig(t, oneCall("ask", `{}`), allowAll, tool("ask", true, `{"type":"object"}`))
			r.a.opts.FormRevision = tc.rev
			if err := r.request("run-prefill", user("ask me")); err != nil {
				t.Fatal(err)
			}
			ir := &schema.InputRequiredResult{ResultType: schema.ResultTypeInputRequired, RequestState: "s",
				InputRequests: map[string]schema.InputRequest{"q": {Method: schema.MethodElicitationCreate, Params: tc.form}}}
			if err := r.result(events.ToolResult{RunID: "run-prefill", CallID: "call_0_0", InputRequired: ir}); err != nil {
				t.Fatalf("handling the result: %v", err)
			}
			e := r.outcome()
			if tc.wantDefault == "refused" {
				done, err := events.Data[events.RunCompleted](e)
				if events.TypeOf(e) != events.TypeRunCompleted || err != nil || !strings.Contains(done.Message.Text, "cannot be shown to the user") {
					t.Errorf("outcome %s: %.300s, want the titled enum refused", e.Type(), e.Data())
				}
				return
			}
			if events.TypeOf(e) != events.TypeRunPaused {
				t.Fatalf("outcome %s: %.300s, want run.paused with the form asked", e.Type(), e.Data())
			}
			paused, err := events.Data[events.RunPaused](e)
			if err != nil || len(paused.Elicitations) != 1 {
				t.Fatalf("paused = %+v, %v; want one form", paused, err)
			}
			props := paused.Elicitations[0].Request.RequestedSchema.Properties
			if got := string(props["title"].Default); got != tc.wantDefault {
				t.Errorf("title default = %q, want %q", got, tc.wantDefault)
			}
			if props["title"].Title != "Title" || props["date"].Format != "date" {
				t.Errorf("form lost more than the default: %+v %+v", props["title"], props["date"])
			}
			if tc.form.RequestedSchema.Properties["title"] != nil && tc.form.RequestedSchema.Properties["title"].Default == nil {
				t.Error("the tool's own form was modified")
			}
		})
	}
}

// TestArgumentErrorIsNoDecision: a call that fails
// argument validation is refused before policy, so it records no decision
// (never "decision": ""), and the model reads an error phrased for a
// person, not validator text.
func TestArgumentErrorIsNoDecision(t *testing.T) {
	del := tool("delete_entities", false, `{"type":"object","properties":{"ids":{"type":"array","items":{"type":"string"},"minItems":1}},"required":["ids"]}`)
	del.Title = "Delete site entities"
	r := newRig(t, oneCall("delete_entities", `{"ids":[]}`), allowAll, del)
	if err := r.request("run5", user("delete the drafts")); err != nil {
		t.Fatal(err)
	}
	done := r.completed()
	if len(done.Decisions) != 0 {
		t.Errorf("decisions = %+v, want none for a call refused before policy", done.Decisions)
	}
	text := done.Message.Text
	for _, raw := range []string{"arguments.ids", "minItems:", "Value should"} {
		if strings.Contains(text, raw) {
			t.Errorf("final %q shows validator text %q", text, raw)
		}
	}
	if !strings.Contains(text, "Delete site entities was not run") || !strings.Contains(text, "ids should have at least 1 item") {
		t.Errorf("final = %q, want a sentence naming the tool and the field", text)
	}
}

// TestDecisionValuesDocumented: every decision a run records has one of the
// values docs/events.md lists.
func TestDecisionValuesDocumented(t *testing.T) {
	documented := map[string]bool{events.DecisionAllow: true, events.DecisionVeto: true,
		events.DecisionConfirm: true, events.DecisionUnavailable: true}
	rules := `{"rules":[{"name":"r","match":".","steps":[{"tool_calls":[
	  {"name":"look","arguments":{}},{"name":"nope","arguments":{}},{"name":"look","arguments":{"bad":1}}]},
	  {"text":"done"}]}],"fallback":"?"}`
	r := newRig(t, rules, allowAll, tool("look", true, `{"type":"object","additionalProperties":false}`))
	if err := r.request("run6", user("go")); err != nil {
		t.Fatal(err)
	}
	if err := r.result(events.ToolResult{RunID: "run6", CallID: "call_0_0", Result: &schema.CallToolResult{
		Content: schema.ContentList{schema.Text("ok")}}}); err != nil {
		t.Fatal(err)
	}
	done := r.completed()
	if len(done.Decisions) != 1 {
		t.Errorf("decisions = %+v, want one (the allowed call)", done.Decisions)
	}
	for _, d := range done.Decisions {
		if !documented[d.Decision] {
			t.Errorf("decision %+v has an undocumented value", d)
		}
	}
}

// TestOldToolResultsShortened (for a long run): fifteen
// steps of 30 KiB results would make a run record of about 700 KiB; the
// oldest results are shortened instead and the run completes.
func TestOldToolResultsShortened(t *testing.T) {
	steps := strings.Repeat(`{"tool_calls":[{"name":"look","arguments":{}}]},`, 15)
	rules := `{"rules":[{"name":"r","match":".","steps":[` + steps + `{"text":"done"}]}],"fallback":"?"}`
	r := newRig(t, rules, allowAll, tool("look", true, `{"type":"object"}`))
	if err := r.request("run7", user("look a lot")); err != nil {
		t.Fatal(err)
	}
	for step := range 15 {
		res := &schema.CallToolResult{Content: schema.ContentList{schema.Text(fmt.Sprintf("step %d ", step) + strings.Repeat("y", 30<<10))}}
		if err := r.result(events.ToolResult{RunID: "run7", CallID: fmt.Sprintf("call_%d_0", step), Result: res}); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	if done := r.completed(); done.Message.Text != "done" {
		t.Errorf("final = %q", done.Message.Text)
	}
	kve, err := r.a.runs.KV().Get(r.ctx, "run7")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(kve.Value()); n > MaxRunBytes {
		t.Errorf("run record is %d bytes, want at most %d", n, MaxRunBytes)
	}
	var run Run
	if err := json.Unmarshal(kve.Value(), &run); err != nil {
		t.Fatal(err)
	}
	for _, m := range run.Messages {
		if m.Role == model.RoleTool {
			if !strings.Contains(m.Text, "shortened to keep the run record small") {
				t.Errorf("oldest tool result not shortened: %.80q", m.Text)
			}
			break
		}
	}
}

// TestRunTooLargeFailsCleanly: a run that cannot be brought under
// MaxRunBytes (this turn's own message is larger) fails with
// run_too_large: the handler succeeds, nothing is dead-lettered.
func TestRunTooLargeFailsCleanly(t *testing.T) {
	r := newRig(t, `{"rules":[],"fallback":"?"}`, allowAll)
	if err := r.request("run8", user(strings.Repeat("z", MaxRunBytes+1))); err != nil {
		t.Fatalf("handler error (would be retried, then dead-lettered): %v", err)
	}
	e := r.outcome()
	f, err := events.Data[events.RunFailed](e)
	if err != nil || events.TypeOf(e) != events.TypeRunFailed || f.Reason != RejectRunTooLarge {
		t.Fatalf("outcome %s %s, want run.failed %s", e.Type(), e.Data(), RejectRunTooLarge)
	}
}

// TestCutText: a cut never splits a character and always says what was
// cut; the final message's blocks are bounded with a count of the rest.
func TestCutText(t *testing.T) {
	s := strings.Repeat("é", 100) // 200 bytes
	got := cutText(s, 51, "hint")
	head, _, _ := strings.Cut(got, "\n")
	if !utf8.ValidString(head) || len(head) != 50 || !strings.Contains(got, "the first 50 of 200 bytes") || !strings.HasSuffix(got, "hint]") {
		t.Errorf("cutText = %q", got)
	}
	if cutText("short", 10, "x") != "short" {
		t.Error("a text under the limit was changed")
	}
	var blocks schema.ContentList
	for i := range 2000 {
		blocks = append(blocks, &schema.ResourceLink{URI: fmt.Sprintf("https://site.example/node/%d", i), Name: "n"})
	}
	text, kept := boundUserBlocks("answer", blocks)
	b, _ := json.Marshal(kept)
	if len(b) > MaxUserBlocksBytes || len(kept) == 0 || !strings.Contains(text, fmt.Sprintf("(%d more items are not shown here.)", 2000-len(kept))) {
		t.Errorf("kept %d blocks (%d bytes), text %q", len(kept), len(b), text)
	}
}

// TestOversizeArgumentsRefused: arguments over MaxArgumentsBytes are a
// tool error before policy (no decision), never a tool.call event that
// could not be published.
func TestOversizeArgumentsRefused(t *testing.T) {
	big, _ := json.Marshal(map[string]string{"text": strings.Repeat("w", MaxArgumentsBytes)})
	r := newRig(t, oneCall("note", string(big)), allowAll, tool("note", true, `{"type":"object"}`))
	if err := r.request("run9", user("note this")); err != nil {
		t.Fatal(err)
	}
	done := r.completed()
	if !strings.Contains(done.Message.Text, "more than the limit") || len(done.Decisions) != 0 {
		t.Errorf("final = %q, decisions %+v; want the limit named and no decision", done.Message.Text, done.Decisions)
	}
}

// TestModelGivenWholeStoredResult is breaker item 5 (b) in the agent: a
// result stored by reference, whose structuredContent the run record's
// copy leaves out, reaches the model whole (here: the rules read the
// structuredContent rows); and when the stored result cannot be loaded,
// the model's text says so instead of silently giving the reduced copy.
func TestModelGivenWholeStoredResult(t *testing.T) {
	rules := `{"rules":[{"name":"r","match":".","steps":[{"tool_calls":[{"name":"dump","arguments":{}}]},` +
		`{"text":"rows={{len .Last.Structured.entities}}"}]}],"fallback":"?"}`
	r := newRig(t, rules, allowAll, tool("dump", true, `{"type":"object"}`))
	if err := r.request("run1", user("dump it")); err != nil {
		t.Fatal(err)
	}
	big := &schema.CallToolResult{Content: schema.ContentList{schema.Text(strings.Repeat("entity line of text\n", 5_000))}}
	rows := make([]any, 0, 2000)
	for i := range 2000 {
		rows = append(rows, map[string]any{"id": fmt.Sprintf("e%d", i), "title": "Entity with a title"})
	}
	big.StructuredContent = map[string]any{"entities": rows}
	if err := r.result(events.ToolResult{RunID: "run1", CallID: "call_0_0", Result: big}); err != nil {
		t.Fatal(err)
	}
	if got := r.completed().Message.Text; got != "rows=2000" {
		t.Fatalf("final text %q, want the model to have read all 2000 rows", got)
	}

	// The stored object is gone (e.g. its TTL passed): the reduced copy,
	// with a note.
	reduced := reduceResult(big, 123456, &ResultRef{Bucket: ResultsBucket, Name: "gone.call.0", Size: 123456})
	run := &Run{RunID: "run2", Messages: []model.Message{{Role: model.RoleUser, Text: "dump it"},
		{Role: model.RoleTool, ToolName: "dump", Text: modelText(reduced) + "\nUser instructions: be brief", Result: reduced}}}
	msgs := r.a.modelMessages(r.ctx, run)
	if txt := msgs[1].Text; !strings.Contains(txt, "The whole result could not be loaded") ||
		!strings.Contains(txt, "structuredContent left out") || msgs[1].Result.StructuredContent != nil {
		t.Fatalf("model text for a missing object: ...%s", txt[max(0, len(txt)-400):])
	}
	if run.Messages[1].Text == msgs[1].Text {
		t.Fatal("modelMessages changed the run record's messages")
	}
}
