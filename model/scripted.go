package model

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"text/template"

	"github.com/parley-dev/parley/schema"
)

// Rules is a scripted model's rules file (JSON):
//
//	{"rules": [{"name": "...", "match": "<regexp on the user's message>",
//	            "steps": [{"tool_calls": [{"name": "t", "arguments": {...}}]},
//	                      {"tool_calls": [{"name": "t", "arguments_template": "{\"ids\": {{json .Last.Structured.ids}}}"}]},
//	                      {"text": "Done: {{.Last.Text}}"}]}],
//	 "fallback": "text when no rule matches"}
//
// The first rule whose match finds the latest user message answers. Step n
// is used for the n-th model call after that message (counted by the
// assistant tool-call messages since); the last step repeats. Text and
// arguments_template are Go text/templates over TemplateData, with the
// functions json, hasPrefix and contains.
type Rules struct {
	Rules    []Rule `json:"rules"`
	Fallback string `json:"fallback"`
}

// Rule is one scripted behaviour.
type Rule struct {
	Name  string `json:"name"`
	Match string `json:"match"`
	Steps []Step `json:"steps"`
	re    *regexp.Regexp
}

// Step is one scripted model answer: tool calls, or text.
type Step struct {
	ToolCalls []ScriptedCall `json:"tool_calls,omitempty"`
	Text      string         `json:"text,omitempty"`
	// SuggestedReplies go with a text step: next prompts offered to the
	// user (_meta["drupal.org/ai.suggested_replies"] of the answer).
	SuggestedReplies []string `json:"suggested_replies,omitempty"`
}

// ScriptedCall is a tool call of a step: static Arguments, or an
// ArgumentsTemplate rendering a JSON object.
type ScriptedCall struct {
	Name              string          `json:"name"`
	Arguments         json.RawMessage `json:"arguments,omitempty"`
	ArgumentsTemplate string          `json:"arguments_template,omitempty"`
}

// TemplateData is what step templates see.
type TemplateData struct {
	// User is the latest user message.
	User string
	// Match holds the rule's regexp match on User: the whole match, then
	// each group.
	Match []string
	// Results are the tool results since that message, oldest first.
	Results []ResultData
	// Last is the latest result (zero if none).
	Last ResultData
	// References are the context references of the latest user message
	// as parley resolved them for its sender (Entity.Label, URI,
	// Summary).
	References []schema.ResolvedReference
}

// ResultData is one tool result as templates see it.
type ResultData struct {
	Name       string
	Text       string
	IsError    bool
	Structured map[string]any
}

//go:embed default_rules.json
var defaultRules []byte

// DefaultRules returns the rules shipped for the demo and `parley dev`.
func DefaultRules() []byte { return bytes.Clone(defaultRules) }

// Scripted is a deterministic Provider driven by Rules.
type Scripted struct {
	rules Rules
	tmpl  map[string]*template.Template
}

// LoadScripted reads a rules file; path "" uses DefaultRules.
func LoadScripted(path string) (*Scripted, error) {
	data := DefaultRules()
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("reading rules: %w", err)
		}
	}
	return NewScripted(data)
}

// NewScripted parses rules. Errors name the rule and the field.
func NewScripted(data []byte) (*Scripted, error) {
	var r Rules
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("parsing rules: %w", err)
	}
	s := &Scripted{rules: r, tmpl: map[string]*template.Template{}}
	funcs := template.FuncMap{
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
		"hasPrefix": strings.HasPrefix,
		"contains":  strings.Contains,
	}
	for i := range s.rules.Rules {
		rule := &s.rules.Rules[i]
		re, err := regexp.Compile(rule.Match)
		if err != nil {
			return nil, fmt.Errorf("rules[%d] (%s).match: %w", i, rule.Name, err)
		}
		rule.re = re
		if len(rule.Steps) == 0 {
			return nil, fmt.Errorf("rules[%d] (%s).steps: at least one step required", i, rule.Name)
		}
		for j, st := range rule.Steps {
			if (st.Text == "") == (len(st.ToolCalls) == 0) {
				return nil, fmt.Errorf("rules[%d] (%s).steps[%d]: exactly one of text or tool_calls", i, rule.Name, j)
			}
			texts := map[string]string{fmt.Sprintf("%d/%d/text", i, j): st.Text}
			for k, c := range st.ToolCalls {
				if c.Name == "" {
					return nil, fmt.Errorf("rules[%d] (%s).steps[%d].tool_calls[%d].name: required", i, rule.Name, j, k)
				}
				texts[fmt.Sprintf("%d/%d/%d", i, j, k)] = c.ArgumentsTemplate
			}
			for key, text := range texts {
				if text == "" {
					continue
				}
				t, err := template.New(key).Funcs(funcs).Option("missingkey=zero").Parse(text)
				if err != nil {
					return nil, fmt.Errorf("rules[%d] (%s).steps[%d]: %w", i, rule.Name, j, err)
				}
				s.tmpl[key] = t
			}
		}
	}
	return s, nil
}

// ProviderName is the gen_ai.provider.name metrics carry for the scripted
// model: "parley.scripted".
func (s *Scripted) ProviderName() string { return "parley.scripted" }

// Complete answers from the first matching rule.
func (s *Scripted) Complete(_ context.Context, req Request) (Response, error) {
	userIdx := -1
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == RoleUser {
			userIdx = i
			break
		}
	}
	if userIdx < 0 {
		return Response{}, errors.New("scripted model: no user message")
	}
	data := TemplateData{User: req.Messages[userIdx].Text, References: req.Messages[userIdx].References}
	step := 0
	for _, m := range req.Messages[userIdx+1:] {
		switch m.Role {
		case RoleAssistant:
			if len(m.ToolCalls) > 0 {
				step++
			}
		case RoleTool:
			rd := ResultData{Name: m.ToolName, Text: m.Text}
			if m.Result != nil {
				rd.IsError = m.Result.IsError
				rd.Structured = m.Result.StructuredContent
			}
			data.Results = append(data.Results, rd)
			data.Last = rd
		}
	}
	for i, rule := range s.rules.Rules {
		data.Match = rule.re.FindStringSubmatch(data.User)
		if data.Match == nil {
			continue
		}
		j := min(step, len(rule.Steps)-1)
		st := rule.Steps[j]
		if len(st.ToolCalls) == 0 || step >= len(rule.Steps) {
			if st.Text == "" { // steps ran out on a tool-call step: say what happened
				return Response{Text: data.Last.Text}, nil
			}
			text, err := s.render(fmt.Sprintf("%d/%d/text", i, j), data)
			return Response{Text: text, SuggestedReplies: st.SuggestedReplies}, err
		}
		var calls []schema.ToolCall
		for k, c := range st.ToolCalls {
			args := c.Arguments
			if c.ArgumentsTemplate != "" {
				out, err := s.render(fmt.Sprintf("%d/%d/%d", i, j, k), data)
				if err != nil {
					return Response{}, err
				}
				args = json.RawMessage(out)
			}
			if len(args) == 0 {
				args = json.RawMessage(`{}`)
			}
			if !json.Valid(args) {
				return Response{}, fmt.Errorf("scripted model: rule %s step %d call %s: arguments are not JSON: %s", rule.Name, j, c.Name, args)
			}
			calls = append(calls, schema.ToolCall{ID: fmt.Sprintf("call_%d_%d", step, k), Name: c.Name, Arguments: args})
		}
		return Response{ToolCalls: calls}, nil
	}
	return Response{Text: s.rules.Fallback}, nil
}

func (s *Scripted) render(key string, data TemplateData) (string, error) {
	t := s.tmpl[key]
	if t == nil {
		return "", nil
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("scripted model: %w", err)
	}
	return b.String(), nil
}
