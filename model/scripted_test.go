package model

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/parley-dev/parley/schema"
)

func TestRulesErrorsNameTheField(t *testing.T) {
	tests := []struct {
		rules, want string
	}{
		{`{"rules":[{"name":"r","match":"(","steps":[{"text":"x"}]}]}`, "rules[0] (r).match"},
		{`{"rules":[{"name":"r","match":"x","steps":[]}]}`, "rules[0] (r).steps: at least one step"},
		{`{"rules":[{"name":"r","match":"x","steps":[{}]}]}`, "rules[0] (r).steps[0]: exactly one of text or tool_calls"},
		{`{"rules":[{"name":"r","match":"x","steps":[{"tool_calls":[{"arguments":{}}]}]}]}`, "rules[0] (r).steps[0].tool_calls[0].name: required"},
		{`{"rules":[{"name":"r","match":"x","steps":[{"text":"{{.Nope"}]}]}`, "rules[0] (r).steps[0]"},
		{`{"rules":[],"extra":1}`, "unknown field"},
	}
	for _, tt := range tests {
		_, err := NewScripted([]byte(tt.rules))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewScripted(%s) = %v, want an error containing %q", tt.rules, err, tt.want)
		}
	}
}

func TestDefaultRulesParse(t *testing.T) {
	if _, err := LoadScripted(""); err != nil {
		t.Fatal(err)
	}
}

// The default create-event rule passes a title the message names ("called",
// "named" or "titled", quoted or not), and no arguments otherwise.
func TestDefaultRulesCreateEventTitle(t *testing.T) {
	s, err := LoadScripted("")
	if err != nil {
		t.Fatal(err)
	}
	for msg, want := range map[string]string{
		"create an event called Launch party":          `{"title":"Launch party"}`,
		"Create an event named Launch party.":          `{"title":"Launch party"}`,
		`create an event titled "Board meeting: Q3"`:   `{"title":"Board meeting: Q3"}`,
		"please create an event called “Summer fête”!": `{"title":"Summer fête"}`,
		"create an event called 'Launch'":              `{"title":"Launch"}`,
		"create an event":                              `{}`,
		"create an event for the launch party":         `{}`,
		"Create an event.":                             `{}`,
	} {
		r, err := s.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Text: msg}}})
		if err != nil || len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "create_event" {
			t.Errorf("%q: %+v, %v; want one create_event call", msg, r, err)
			continue
		}
		var got, wantV any
		if err := json.Unmarshal(r.ToolCalls[0].Arguments, &got); err != nil {
			t.Errorf("%q: arguments %s: %v", msg, r.ToolCalls[0].Arguments, err)
			continue
		}
		_ = json.Unmarshal([]byte(want), &wantV)
		if !reflect.DeepEqual(got, wantV) {
			t.Errorf("%q: arguments %s, want %s", msg, r.ToolCalls[0].Arguments, want)
		}
	}
}

// Steps advance with each tool-call round after the latest user message,
// templates see the match and the results, and the last step repeats.
func TestScriptedSteps(t *testing.T) {
	s, err := NewScripted([]byte(`{"rules":[{"name":"del","match":"(?i)delete the (\\w+) articles","steps":[
	  {"tool_calls":[{"name":"list","arguments_template":"{\"status\": {{json (index .Match 1)}}}"}]},
	  {"tool_calls":[{"name":"delete","arguments_template":"{\"ids\": {{json .Last.Structured.ids}}}"}]},
	  {"text":"{{if hasPrefix .Last.Text \"User declined\"}}kept{{else}}{{.Last.Text}}{{end}}"}]}],
	  "fallback":"?"}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	msgs := []Message{{Role: RoleUser, Text: "please delete the draft articles"}}
	r, err := s.Complete(ctx, Request{Messages: msgs})
	if err != nil || len(r.ToolCalls) != 1 || string(r.ToolCalls[0].Arguments) != `{"status": "draft"}` {
		t.Fatalf("step 0 = %+v, %v", r, err)
	}
	msgs = append(msgs, Message{Role: RoleAssistant, ToolCalls: r.ToolCalls},
		Message{Role: RoleTool, ToolName: "list", Text: "2 found", Result: &schema.CallToolResult{
			StructuredContent: map[string]any{"ids": []any{"a", "b"}}}})
	r, err = s.Complete(ctx, Request{Messages: msgs})
	if err != nil || len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "delete" {
		t.Fatalf("step 1 = %+v, %v", r, err)
	}
	var args struct{ IDs []string }
	if err := json.Unmarshal(r.ToolCalls[0].Arguments, &args); err != nil || len(args.IDs) != 2 {
		t.Fatalf("step 1 arguments %s", r.ToolCalls[0].Arguments)
	}
	if r.ToolCalls[0].ID == "" {
		t.Fatal("tool call without an ID")
	}
	msgs = append(msgs, Message{Role: RoleAssistant, ToolCalls: r.ToolCalls},
		Message{Role: RoleTool, ToolName: "delete", Text: "User declined execution of delete: no"})
	r, err = s.Complete(ctx, Request{Messages: msgs})
	if err != nil || r.Text != "kept" || len(r.ToolCalls) != 0 {
		t.Fatalf("step 2 = %+v, %v", r, err)
	}
	// A new user message starts the rule again from its first step; no
	// rule matching gives the fallback.
	r, _ = s.Complete(ctx, Request{Messages: append(msgs, Message{Role: RoleUser, Text: "hello"})})
	if r.Text != "?" {
		t.Fatalf("fallback = %+v", r)
	}
	if _, err := s.Complete(ctx, Request{}); err == nil {
		t.Fatal("no user message accepted")
	}
}

// A template that renders invalid JSON arguments is an error, not a call.
func TestScriptedInvalidArguments(t *testing.T) {
	s, err := NewScripted([]byte(`{"rules":[{"name":"r","match":"x","steps":[{"tool_calls":[{"name":"t","arguments_template":"{not json"}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Text: "x"}}}); err == nil ||
		!strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("err = %v", err)
	}
}
