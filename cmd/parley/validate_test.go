package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	form := write("form.json", `{"message":"m","requestedSchema":{"type":"object","properties":{"age":{"type":"integer","minimum":0},"email":{"type":"string","format":"email"}},"required":["age"]}}`)
	multi := write("multi.json", `{"message":"m","requestedSchema":{"type":"object","properties":{"m":{"type":"array","items":{"type":"string","enum":["x"]}}}}}`)
	good := write("good.json", `{"action":"accept","content":{"age":3}}`)
	bad := write("bad.json", `{"action":"accept","content":{"age":"3","email":"nope","x":1}}`)
	notJSON := write("notjson.json", `{"message":`)
	tool := write("tool.json", `{"name":"get_weather","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`)
	badTool := write("badtool.json", `{"name":"get weather","inputSchema":{"type":"string"}}`)

	tests := []struct {
		name       string
		args       []string
		stdin      string
		code       int
		stdout     string // exact
		stderrPart string
	}{
		{"no args", nil, "", 2, "", "expected one of"},
		{"unknown kind", []string{"frobnicate"}, "", 2, "", `unexpected argument frobnicate`},
		{"help", []string{"help"}, "", 0, "", ""},
		{"request valid", []string{"elicitation-request", form}, "", 0, "", ""},
		{"request stdin", []string{"elicitation-request", "-"}, `{"message":"m","requestedSchema":{"type":"object","properties":{}}}`, 0, "", ""},
		{"request default stdin", []string{"elicitation-request"}, `{"message":"","requestedSchema":{"type":"object","properties":{"a":{"type":"object"}}}}`, 1,
			"message: required\nrequestedSchema.properties.a.type: nested objects are not allowed\n", ""},
		{"request 06-18 multi", []string{"elicitation-request", multi}, "", 1,
			"requestedSchema.properties.m.type: \"array\" is not allowed in MCP 2025-06-18 (multi-select needs 2025-11-25)\n", ""},
		{"request 11-25 multi", []string{"elicitation-request", "--revision", "2025-11-25", multi}, "", 0, "", ""},
		{"flag after file", []string{"elicitation-request", multi, "--revision=2025-11-25"}, "", 0, "", ""},
		{"bad revision", []string{"elicitation-request", "--revision", "2024-01-01", form}, "", 2, "", "unsupported revision"},
		{"unknown flag", []string{"elicitation-request", "--nope", form}, "", 2, "", "unknown flag --nope"},
		{"missing file", []string{"elicitation-request", filepath.Join(dir, "missing.json")}, "", 2, "", "reading input"},
		{"two files", []string{"elicitation-request", form, form}, "", 2, "", "unexpected argument"},
		{"not JSON", []string{"elicitation-request", notJSON}, "", 1, "", ""},
		{"result valid", []string{"elicitation-result", "--request", form, good}, "", 0, "", ""},
		{"result stdin", []string{"elicitation-result", "--request", form}, `{"action":"cancel"}`, 0, "", ""},
		{"result invalid", []string{"elicitation-result", "--request", form, bad}, "", 1,
			"age: must be an integer\nemail: must be an email address\nx: not a property of the requested schema\n", ""},
		{"result no request", []string{"elicitation-result", good}, "", 2, "", "missing flags: --request=FILE"},
		{"result bad request", []string{"elicitation-result", "--request", multi, good}, "", 1,
			"request.requestedSchema.properties.m.type: \"array\" is not allowed in MCP 2025-06-18 (multi-select needs 2025-11-25)\n", ""},
		{"result action type", []string{"elicitation-result", "--request", form}, `{"action":1}`, 1, "action: must be a string\n", ""},
		{"meta-key valid", []string{"meta-key", "drupal.org/ai.citations", "com.example/x"}, "", 0, "", ""},
		{"meta-key invalid", []string{"meta-key", "drupal.org/ai/citations", "mcp.dev/x", "ok"}, "", 1,
			"drupal.org/ai/citations: name \"ai/citations\" must not contain \"/\" (the first \"/\" ends the prefix)\nmcp.dev/x: prefix \"mcp.dev/\" is reserved for MCP\n", ""},
		{"meta-key none", []string{"meta-key"}, "", 2, "", "expected \"<key> ...\""},
		{"content block", []string{"content"}, `{"type":"text","text":"hi"}`, 0, "", ""},
		{"content array", []string{"content", "-"}, `[{"type":"text","text":"hi"},{"type":"image","data":"???"}]`, 1,
			"[1].data: must be base64\n[1].mimeType: required\n", ""},
		{"content unknown", []string{"content"}, `{"type":"video"}`, 1, "type: unknown content block type \"video\"\n", ""},
		{"content not JSON", []string{"content"}, `{`, 1, "", ""},
		{"tool valid", []string{"tool", tool}, "", 0, "", ""},
		{"tool invalid", []string{"tool", badTool}, "", 1,
			"name: must be 1 to 128 characters of A-Z a-z 0-9 _ - .\ninputSchema.type: must be \"object\"\n", ""},
		{"tool wrong type", []string{"tool"}, `{"name":"a","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":"yes"}}`, 1, "annotations.readOnlyHint: must be a boolean\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"validate"}, tt.args...), strings.NewReader(tt.stdin), &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit code = %d, want %d (stdout %q, stderr %q)", code, tt.code, stdout.String(), stderr.String())
			}
			if tt.stdout != "" && stdout.String() != tt.stdout {
				t.Errorf("stdout =\n%s\nwant\n%s", stdout.String(), tt.stdout)
			}
			if tt.code == 0 && stdout.Len() != 0 && tt.name != "help" {
				t.Errorf("stdout on success = %q", stdout.String())
			}
			if tt.code == 1 && (stdout.Len() == 0 || !strings.HasSuffix(stdout.String(), "\n")) {
				t.Errorf("invalid input printed no violation lines: %q", stdout.String())
			}
			if !strings.Contains(stderr.String(), tt.stderrPart) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tt.stderrPart)
			}
		})
	}
}
