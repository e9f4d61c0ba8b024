package schema

import (
	"encoding/json"
	"strings"
	"testing"
)

// URL-mode elicitation (MCP 2025-11-25, ElicitRequestURLParams): accepted
// from 2025-11-25 with a safe absolute URL and an elicitationId, never with
// a form; it encodes without requestedSchema.
func TestElicitURLModeValidate(t *testing.T) {
	const ok = `{"mode":"url","message":"Sign in to Example","url":"https://auth.example.com/authorize?state=x","elicitationId":"el-1"}`
	tests := []struct {
		name string
		rev  Revision
		in   string
		want string
	}{
		{"valid", Rev20251125, ok, ""},
		{"2026-07-28 without elicitationId", Rev20260728, `{"mode":"url","message":"m","url":"https://a.example/"}`, ""},
		{"not in 2025-06-18", Rev20250618, ok, "mode: not defined by MCP 2025-06-18 (opt in to 2025-11-25)"},
		{"no url", Rev20251125, `{"mode":"url","message":"m","elicitationId":"e"}`, "url: required for a url-mode elicitation"},
		{"relative url", Rev20251125, `{"mode":"url","message":"m","url":"/login","elicitationId":"e"}`, "url: must be an absolute http or https URL with a host"},
		{"javascript url", Rev20251125, `{"mode":"url","message":"m","url":"javascript:alert(1)","elicitationId":"e"}`, "url: must be an absolute http or https URL with a host"},
		{"user info", Rev20251125, `{"mode":"url","message":"m","url":"https://bank.example@evil.example/","elicitationId":"e"}`, "url: must not carry user info (credentials) before the host"},
		{"too long", Rev20251125, `{"mode":"url","message":"m","url":"https://a.example/` + strings.Repeat("x", MaxElicitURLBytes) + `","elicitationId":"e"}`, "url: longer than 8192 bytes"},
		{"no elicitationId", Rev20251125, `{"mode":"url","message":"m","url":"https://a.example/"}`, "elicitationId: required for a url-mode elicitation"},
		{"with a form", Rev20251125, `{"mode":"url","message":"m","url":"https://a.example/","elicitationId":"e","requestedSchema":{"type":"object","properties":{}}}`, "requestedSchema: not allowed for a url-mode elicitation"},
		{"no message", Rev20251125, `{"mode":"url","url":"https://a.example/","elicitationId":"e"}`, "message: required"},
		{"url on a form", Rev20251125, `{"message":"m","url":"https://a.example/","requestedSchema":{"type":"object","properties":{}}}`, `url: only allowed with mode "url"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p ElicitRequestParams
			if err := json.Unmarshal([]byte(tt.in), &p); err != nil {
				t.Fatal(err)
			}
			got := ""
			if err := p.Validate(tt.rev); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate(%s)\n got: %s\nwant: %s", tt.rev, got, tt.want)
			}
		})
	}

	var p ElicitRequestParams
	if err := json.Unmarshal([]byte(ok), &p); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(&p); string(b) != ok {
		t.Errorf("round trip:\n got %s\nwant %s", b, ok)
	}
	if !p.IsURLMode() || p.URLHost() != "auth.example.com" {
		t.Errorf("IsURLMode %v, URLHost %q", p.IsURLMode(), p.URLHost())
	}
}

// The answer to a URL-mode elicitation is only the action: content is
// refused with every action (accept means consent to open the URL).
func TestElicitURLModeResult(t *testing.T) {
	req := &ElicitRequestParams{Mode: ModeURL, Message: "m", URL: "https://a.example/", ElicitationID: "e"}
	for _, a := range []ElicitAction{ActionAccept, ActionDecline, ActionCancel} {
		if err := (&ElicitResult{Action: a}).Validate(req); err != nil {
			t.Errorf("%s without content: %v", a, err)
		}
		err := (&ElicitResult{Action: a, Content: map[string]any{"code": "123"}}).Validate(req)
		if err == nil || err.Error() != "content: not allowed for a url-mode elicitation (the answer is only the action)" {
			t.Errorf("%s with content: %v", a, err)
		}
	}
	if err := (&ElicitResult{Action: "open"}).Validate(req); err == nil || !strings.Contains(err.Error(), "action:") {
		t.Errorf("unknown action: %v", err)
	}
}
