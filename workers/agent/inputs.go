package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/parley-dev/parley/schema"
)

// MaxFormBytes bounds one form (the params of an `elicitation/create`
// request) that a tool or a policy service asks the agent to put to a
// person, JSON-encoded. A larger form is refused: the call becomes a tool
// error for the model, never a question (docs/events.md, "Limits").
const MaxFormBytes = 64 << 10

// MaxArgumentsBytes bounds the arguments of one tool call, as the model
// wrote them. Larger arguments are refused before policy, like arguments
// that do not fit the inputSchema: a tool error for the model, no
// decision.
const MaxArgumentsBytes = 64 << 10

// argumentsTooLarge returns the tool error for arguments over
// MaxArgumentsBytes, or nil.
func argumentsTooLarge(tool *schema.Tool, args json.RawMessage) *schema.CallToolResult {
	if len(args) <= MaxArgumentsBytes {
		return nil
	}
	return schema.ErrorResult(fmt.Sprintf("%s was not run, so nothing changed: its arguments are %d bytes, more than the limit of %d.",
		tool.DisplayName(), len(args), MaxArgumentsBytes))
}

// checkForm validates a form a tool or a policy service wants asked, for
// the MCP revision rev the clients render (ElicitRequestParams.Validate)
// and against MaxFormBytes. The error names the rule broken.
func checkForm(p *schema.ElicitRequestParams, rev schema.Revision) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("the form cannot be encoded: %w", err)
	}
	if len(b) > MaxFormBytes {
		return fmt.Errorf("the form is %d bytes, more than the limit of %d", len(b), MaxFormBytes)
	}
	return p.Validate(rev)
}

// downgradeForms returns ir with every form downgraded for the MCP
// revision rev the clients render (schema.RequestedSchema.ForRevision: a
// string, number or enum default, a 2025-11-25 prefill hint, is dropped
// for a 2025-06-18 client rather than the form refused). ir is not
// modified. Call checkInputRequired on the result.
func downgradeForms(ir *schema.InputRequiredResult, rev schema.Revision) *schema.InputRequiredResult {
	out := *ir
	out.InputRequests = make(map[string]schema.InputRequest, len(ir.InputRequests))
	for k, req := range ir.InputRequests {
		if req.Method == schema.MethodElicitationCreate {
			req.Params = req.Params.ForRevision(rev)
		}
		out.InputRequests[k] = req
	}
	return &out
}

// checkInputRequired validates every form of a tool's input-required
// result (see checkForm), naming the request key.
func checkInputRequired(ir *schema.InputRequiredResult, rev schema.Revision) error {
	if len(ir.InputRequests) == 0 {
		return fmt.Errorf("the result asks for input but carries no input requests")
	}
	total := 0
	for k, req := range ir.InputRequests {
		if req.Method != schema.MethodElicitationCreate {
			return fmt.Errorf("inputRequests.%s.method: must be %q", k, schema.MethodElicitationCreate)
		}
		if err := checkForm(&req.Params, rev); err != nil {
			return fmt.Errorf("inputRequests.%s: %w", k, err)
		}
		b, _ := json.Marshal(req.Params)
		total += len(b)
	}
	if total > MaxFormBytes {
		return fmt.Errorf("the forms are %d bytes together, more than the limit of %d", total, MaxFormBytes)
	}
	return nil
}

// refuseForm settles c with a tool error for the model, logging why the
// form from who (a tool or a policy service) was not asked.
func (a *Agent) refuseForm(ctx context.Context, run *Run, c *CallState, who string, err error) {
	a.log.ErrorContext(ctx, "refused an invalid form; the call becomes a tool error", "from", who,
		"tool", c.Call.Name, "run_id", run.RunID, "call_id", c.Call.ID, "error", err)
	c.Status, c.Awaiting, c.InputKeys = callDone, nil, nil
	c.Result = schema.ErrorResult(fmt.Sprintf(
		"%s was not run: %s asked a question that cannot be shown to the user (%v).", c.Call.Name, who, err))
}

// argumentsResult is the tool error for a call whose arguments do not fit
// the tool's inputSchema: it is refused before any policy or person is
// asked, so it is no decision. The text is written to be read by a person
// (the model often quotes it) and still names each field for the model.
func argumentsResult(tool *schema.Tool, err error) *schema.CallToolResult {
	var parts []string
	for _, v := range schema.Violations(err) {
		field := strings.TrimPrefix(strings.TrimPrefix(v.Path, "arguments"), ".")
		rule := v.Rule
		kw, msg, ok := strings.Cut(rule, ": ")
		if ok && !strings.Contains(kw, " ") {
			if kw == "schema" { // restates additionalProperties
				continue
			}
			rule = msg
		}
		rule = strings.TrimPrefix(rule, "Value ")
		rule = strings.ReplaceAll(rule, "at least 1 items", "at least 1 item")
		rule = strings.ReplaceAll(rule, "at most 1 items", "at most 1 item")
		if rule != "" {
			rule = strings.ToLower(rule[:1]) + rule[1:]
		}
		if field == "" {
			parts = append(parts, rule)
		} else {
			parts = append(parts, field+" "+rule)
		}
	}
	if len(parts) == 0 {
		parts = append(parts, err.Error())
	}
	return schema.ErrorResult(fmt.Sprintf("%s was not run, so nothing changed: the request for it was not valid (%s).",
		tool.DisplayName(), strings.Join(parts, "; ")))
}

// decided reports whether c was decided by a policy service (or found none
// answering): only such calls are recorded as decisions. A call refused
// before policy (unknown tool, invalid arguments, an unreadable definition)
// has no decision; the model hears why from its tool error.
func (c *CallState) decided() bool { return c.Policy != nil }
