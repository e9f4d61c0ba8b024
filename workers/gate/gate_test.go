package gate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/gate"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// The gating matrix of design section 4, asked over NATS request-reply:
// agent toggle off/on × always/never/by_annotation × read-only/unannotated.
func TestGatingMatrixOverTheBus(t *testing.T) {
	srv := bustest.NewServer(t)
	readOnly := schema.Tool{Name: "lookup", Description: "Look things up.", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true)}}
	unannotated := schema.Tool{Name: "wipe", Title: "Wipe the site", Description: "Removes everything.",
		InputSchema: json.RawMessage(`{"type":"object"}`)}
	want := map[string]string{ // toggle/mode/tool -> decision
		"off/always/lookup": "allow", "off/always/wipe": "allow",
		"off/never/lookup": "allow", "off/never/wipe": "allow",
		"off/by_annotation/lookup": "allow", "off/by_annotation/wipe": "allow",
		"on/always/lookup": "confirm", "on/always/wipe": "confirm",
		"on/never/lookup": "allow", "on/never/wipe": "allow",
		"on/by_annotation/lookup": "allow", "on/by_annotation/wipe": "confirm",
	}
	cfg := &gate.Config{Agents: map[string]gate.AgentConfig{}}
	for _, toggle := range []string{"off", "on"} {
		for _, mode := range []string{gate.ModeAlways, gate.ModeNever, gate.ModeByAnnotation} {
			agentName := toggle + "-" + mode
			cfg.Agents[agentName] = gate.AgentConfig{RequireToolConfirmation: toggle == "on",
				Tools: map[string]string{"lookup": mode, "wipe": mode}}
		}
	}
	// An agent with no per-tool modes gets by_annotation.
	cfg.Agents["on-default"] = gate.AgentConfig{RequireToolConfirmation: true}
	want["on/default/lookup"], want["on/default/wipe"] = "allow", "confirm"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gb, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gate.New(gb, cfg, nil).Run(ctx) }()
	cb, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitGate(t, srv)
	for key, wantDecision := range want {
		parts := strings.Split(key, "/")
		toggle, mode, toolName := parts[0], parts[1], parts[2]
		tool := readOnly
		if toolName == "wipe" {
			tool = unannotated
		}
		agentName := toggle + "-" + mode
		call := schema.ToolCall{ID: "call_1", Name: tool.Name, Arguments: json.RawMessage(`{"all":true}`)}
		req, err := events.New("/test", events.TypePreExecuteRequested, "thread1",
			events.PreExecuteRequest{Agent: agentName, Thread: "thread1", RunID: "run1", Call: call, Tool: tool})
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		reply, err := ask(rctx, cb, events.PreExecuteSubject(agentName, tool.Name), req, gate.PolicyName)
		rcancel()
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		d := strictDecision(t, reply)
		if d.Decision != wantDecision {
			t.Errorf("%s: decision %q, want %q", key, d.Decision, wantDecision)
		}
		if d.ConfigVersion != cfg.Version() || d.Policy != gate.PolicyName {
			t.Errorf("%s: decision not signed with policy and config version: %+v", key, d)
		}
	}
}

// strictDecision decodes a reply as the closed PolicyDecision contract:
// the gate's answer carries a decision only, never a confirmation's text
// or arguments.
func strictDecision(t *testing.T, reply *event.Event) events.PolicyDecision {
	t.Helper()
	if events.TypeOf(reply) != events.TypePreExecuteDecided {
		t.Fatalf("reply type %q", reply.Type())
	}
	dec := json.NewDecoder(bytes.NewReader(reply.Data()))
	dec.DisallowUnknownFields()
	var d events.PolicyDecision
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("reply %s is not a bare decision: %v", reply.Data(), err)
	}
	return d
}

func TestDenyMode(t *testing.T) {
	cfg, err := gate.ParseConfig([]byte(`{"agents":{"*":{"tools":{"wipe":"deny"},"deny_reasons":{"wipe":"never on Fridays"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Decide(events.PreExecuteRequest{Agent: "any", Call: schema.ToolCall{Name: "wipe"}})
	if d.Decision != events.DecisionVeto || d.Reason != "never on Fridays" {
		t.Fatalf("decision = %+v, want veto with the configured reason", d)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	_, err := gate.ParseConfig([]byte(`{"agents":{"a":{"tools":{"wipe":"sometimes"}}}}`))
	if err == nil || !strings.Contains(err.Error(), "agents.a.tools.wipe") {
		t.Fatalf("err = %v, want it to name agents.a.tools.wipe", err)
	}
	_, err = gate.ParseConfig([]byte(`{"agents":{"bad name":{}}}`))
	if err == nil {
		t.Fatal("agent name with a space accepted")
	}
	// A typo must not silently switch confirmation off.
	_, err = gate.ParseConfig([]byte(`{"agents":{"*":{"require_tool_confirmaton":true}}}`))
	if err == nil || !strings.Contains(err.Error(), "require_tool_confirmaton") {
		t.Fatalf("err = %v, want the unknown key named", err)
	}
	_, err = gate.ParseConfig([]byte(`{"agent":{"*":{"require_tool_confirmation":true}}}`))
	if err == nil {
		t.Fatal("a misspelt top-level key was accepted")
	}
}

// waitGate waits up to 5 s for the gate's micro service to answer
// discovery. No responders comes back at once, so it pauses between tries.
func waitGate(t *testing.T, srv *bustest.Server) {
	nc := srv.Connect(t)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := nc.Request("$SRV.PING.parley-gate", nil, 100*time.Millisecond); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("gate did not come up within 5s")
}

// TestUnreadableAnnotationConfirms (at the gate): a
// pre-execute request whose tool definition has "readOnlyHint": "true" (a
// string) is answered — the annotation counts as absent, so by_annotation
// asks for confirmation — instead of an error reply that fails every turn.
func TestUnreadableAnnotationConfirms(t *testing.T) {
	srv := bustest.NewServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gb, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gate.New(gb, nil, nil).Run(ctx) }()
	cb, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitGate(t, srv)
	for name, tool := range map[string]string{
		"string hint":  `{"name":"wipe","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":"true"}}`,
		"unreadable":   `{"name":7,"annotations":{"readOnlyHint":"true"}}`,
		"not a object": `"wipe"`,
	} {
		data := json.RawMessage(`{"agent":"a","thread":"t1","runId":"r1","call":{"id":"c1","name":"wipe","arguments":{}},"tool":` + tool + `}`)
		req, err := events.New("/test", events.TypePreExecuteRequested, "t1", data)
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		reply, err := ask(rctx, cb, events.PreExecuteSubject("a", "wipe"), req, gate.PolicyName)
		rcancel()
		if err != nil {
			t.Fatalf("%s: %v, want a decision", name, err)
		}
		d := strictDecision(t, reply)
		if d.Decision != events.DecisionConfirm {
			t.Errorf("%s: decision %+v, want confirm (unreadable annotation = absent = destructive)", name, d)
		}
	}
}

// ask sends a pre-execute request as the agent does and returns the first
// reply, which must come from policy (it arrives on <reply>.<policy>).
func ask(ctx context.Context, b *bus.Client, subject string, req *event.Event, policy string) (*event.Event, error) {
	var got *bus.Reply
	_, err := b.RequestMany(ctx, subject, events.PreExecuteReplyScope, req, 1, func(r bus.Reply) bool {
		got = &r
		return false
	})
	switch {
	case err != nil:
		return nil, err
	case got == nil:
		return nil, ctx.Err()
	case got.Err != nil:
		return nil, got.Err
	case got.Responder != policy:
		return nil, fmt.Errorf("reply from %q, want it on <reply>.%s", got.Responder, policy)
	}
	return got.Event, nil
}

// The policy parley dev runs without --gate-config vetoes publishing for
// every agent, and deleting for the agent "support", each with a reason a
// person can read; the other tools decide as DefaultConfig does, except
// that "support" runs them unconfirmed.
func TestDevConfig(t *testing.T) {
	dev, def := gate.DevConfig(), gate.DefaultConfig()
	vetoes := map[string]string{ // agent/tool -> reason
		"default/publish_entities": "publishing is not allowed here",
		"support/publish_entities": "publishing is not allowed here",
		"support/delete_entities":  "support agents never delete content",
	}
	for _, agentName := range []string{"default", "support"} {
		for _, tl := range (&builtin.Site{}).Tools() {
			tool := tl.Definition()
			req := events.PreExecuteRequest{Agent: agentName, Thread: "t", RunID: "r",
				Call: schema.ToolCall{ID: "c", Name: tool.Name, Arguments: json.RawMessage(`{}`)}, Tool: tool}
			got, key := dev.Decide(req), agentName+"/"+tool.Name
			want := def.Decide(req)
			switch reason, vetoed := vetoes[key]; {
			case vetoed:
				want = events.PolicyDecision{Decision: events.DecisionVeto, Reason: reason}
			case agentName == "support":
				want = events.PolicyDecision{Decision: events.DecisionAllow}
			}
			if got.Decision != want.Decision || (want.Decision == events.DecisionVeto && got.Reason != want.Reason) {
				t.Errorf("%s: %s %q, want %s %q", key, got.Decision, got.Reason, want.Decision, want.Reason)
			}
		}
	}
}

// docs/POLICY.md shows parley dev's demo policy as it is.
func TestDevConfigDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/POLICY.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### parley dev's demo policy")
	_, block, ok2 := strings.Cut(section, "```json\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/POLICY.md has no JSON block under \"### parley dev's demo policy\"")
	}
	documented, err := gate.ParseConfig([]byte(block))
	if err != nil {
		t.Fatalf("docs/POLICY.md: %v", err)
	}
	if got, want := documented.Version(), gate.DevConfig().Version(); got != want {
		t.Errorf("docs/POLICY.md shows a policy (%s) other than gate.DevConfig (%s):\n%s", got, want, block)
	}
}

// The gate marks a confirm "ask every time" for the tools its
// configuration lists under ask_every_time, and for every tool of an agent
// with standing_approvals false; other confirms carry no mark, and an
// allow never does.
func TestAskEveryTime(t *testing.T) {
	cfg, err := gate.ParseConfig([]byte(`{"agents":{
	  "*":{"require_tool_confirmation":true,"ask_every_time":["wipe"]},
	  "strict":{"require_tool_confirmation":true,"standing_approvals":false}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		agent, tool string
		want        bool
	}{{"any", "wipe", true}, {"any", "delete_entities", false}, {"strict", "delete_entities", true}} {
		d := cfg.Decide(events.PreExecuteRequest{Agent: tt.agent, Call: schema.ToolCall{Name: tt.tool}})
		if d.Decision != events.DecisionConfirm || d.AskEveryTime != tt.want {
			t.Errorf("Decide(%s, %s) = %+v, want confirm with askEveryTime %v", tt.agent, tt.tool, d, tt.want)
		}
	}
	ro := true
	d := cfg.Decide(events.PreExecuteRequest{Agent: "any", Call: schema.ToolCall{Name: "wipe"},
		Tool: schema.Tool{Name: "wipe", Annotations: &schema.ToolAnnotations{ReadOnlyHint: &ro}}})
	if d.Decision != events.DecisionAllow || d.AskEveryTime {
		t.Errorf("read-only wipe = %+v, want a plain allow", d)
	}
	if _, err := gate.ParseConfig([]byte(`{"agents":{"*":{"ask_every_time":["bad tool"]}}}`)); err == nil ||
		!strings.Contains(err.Error(), "agents.*.ask_every_time[0]") {
		t.Fatalf("err = %v, want it to name agents.*.ask_every_time[0]", err)
	}
}
