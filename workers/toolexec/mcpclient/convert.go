package mcpclient

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/parley-dev/parley/schema"
)

// This file is the one boundary between the MCP Go SDK's types and
// parley's schema types. parley keeps its own types (schema) because they
// are stricter than the SDK's where the wire contract needs it: priority 0
// and absent annotations stay distinct, every content block is checked on
// decode, and base64 data stays as sent. Every conversion goes through the
// MCP wire JSON, so the two type systems agree exactly where the wire
// format does; what the SDK cannot represent is lost before parley sees
// it: an annotation priority of 0 (the SDK's Priority is a float64 with
// omitempty) and absent versus false readOnlyHint/idempotentHint (both mean
// false in MCP).

// toolFromSDK converts a tool definition received from a server. The error
// names the field and rule that failed (schema.ValidateTool).
func toolFromSDK(t *mcp.Tool) (schema.Tool, error) {
	var out schema.Tool
	if err := convert(t, &out); err != nil {
		return schema.Tool{}, err
	}
	if err := schema.ValidateTool(&out); err != nil {
		return schema.Tool{}, err
	}
	return out, nil
}

// resultFromSDK converts a server's tool result. A result parley cannot
// represent (a block of an unknown type, a structuredContent that is not a
// JSON object) is an error naming the field.
func resultFromSDK(r *mcp.CallToolResult) (*schema.CallToolResult, error) {
	var out schema.CallToolResult
	if err := convert(r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// resultToSDK converts a parley result to the SDK's type (for servers and
// tests).
func resultToSDK(r *schema.CallToolResult) (*mcp.CallToolResult, error) {
	var out mcp.CallToolResult
	if err := convert(r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// elicitFromSDK converts the params of a server's elicitation/create.
// An explicit "mode": "form" is dropped: it means the same as no mode (MCP
// 2025-11-25), and parley's forms may be rendered by 2025-06-18 clients,
// which know no mode field.
func elicitFromSDK(p *mcp.ElicitParams) (schema.ElicitRequestParams, error) {
	var out schema.ElicitRequestParams
	err := convert(p, &out)
	if out.Mode == "form" {
		out.Mode = ""
	}
	return out, err
}

// elicitResultToSDK converts a person's answer for the server.
func elicitResultToSDK(r schema.ElicitResult) (*mcp.ElicitResult, error) {
	var out mcp.ElicitResult
	err := convert(r, &out)
	return &out, err
}

// convert re-decodes the wire JSON of in into out.
func convert(in, out any) error {
	data, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding %T: %w", in, err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding %T: %w", out, err)
	}
	return nil
}
