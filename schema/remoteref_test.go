package schema

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A tool schema's "$ref" to a URL (an MCP server's definition is not
// trusted) is never fetched: validating arguments, checking an edit
// against a confirmation's schema or registering the tool refuses it
// naming the schema, instead of sending a request where the server says
// and validating against whatever that URL answers. A reference inside
// the schema still resolves, and a dangling one is refused rather than
// accepting any value.
func TestSchemaRemoteRefNotFetched(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{}`)) // permissive: anything goes
	}))
	defer srv.Close()
	remote := json.RawMessage(`{"type":"object","properties":{"ids":{"$ref":"` + srv.URL + `/ids.json"}}}`)
	tool := &Tool{Name: "delete_entities", InputSchema: remote}

	err := tool.ValidateArguments(json.RawMessage(`{"ids":"all"}`))
	if err == nil || Violations(err)[0].Path != "inputSchema" {
		t.Errorf("ValidateArguments with a remote $ref: %v, want refused naming inputSchema", err)
	}
	req := NewConfirmationRequest(tool, ToolCall{ID: "c1", Name: "delete_entities", Arguments: json.RawMessage(`{"ids":["a"]}`)})
	if _, err := CheckEdit(req, json.RawMessage(`{"ids":"all"}`)); err == nil {
		t.Errorf("CheckEdit against a remote $ref accepted the edit")
	}
	if err := checkToolSchema(remote); err == nil || !strings.Contains(err.Error(), "$ref") {
		t.Errorf("registering a tool with a remote $ref: %v, want refused naming the $ref", err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the remote schema was fetched %d times, want never", n)
	}

	local := &Tool{Name: "t", InputSchema: json.RawMessage(
		`{"type":"object","$defs":{"id":{"type":"string","minLength":1}},"properties":{"ids":{"type":"array","items":{"$ref":"#/$defs/id"}}}}`)}
	if err := local.ValidateArguments(json.RawMessage(`{"ids":["a"]}`)); err != nil {
		t.Errorf("local $ref, valid arguments: %v", err)
	}
	if err := local.ValidateArguments(json.RawMessage(`{"ids":[""]}`)); err == nil {
		t.Errorf("local $ref, invalid arguments: accepted")
	}
	dangling := &Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","properties":{"ids":{"$ref":"#/$defs/missing"}}}`)}
	if err := dangling.ValidateArguments(json.RawMessage(`{"ids":"anything"}`)); err == nil {
		t.Errorf("dangling $ref: accepted any value")
	}
}

// checkToolSchema checks raw as a tool's inputSchema at registration.
func checkToolSchema(raw json.RawMessage) error {
	var vs violations
	checkObjectSchema(&vs, "inputSchema", raw)
	return vs.err()
}
