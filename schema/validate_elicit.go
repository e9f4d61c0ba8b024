package schema

import (
	"fmt"
	"time"
)

// Validate checks the request against the elicitation rules of revision rev
// (the flat-primitive restriction of MCP 2025-06-18 by default). The error is
// a *ValidationError naming each property and the rule it breaks.
func (p *ElicitRequestParams) Validate(rev Revision) error {
	var vs []Violation
	if p.Message == "" {
		vs = append(vs, Violation{"message", "required"})
	}
	if p.RequestedSchema.Type != "object" {
		vs = append(vs, Violation{"requestedSchema.type", `must be "object"`})
	}
	for name, ps := range p.RequestedSchema.Properties {
		switch ps.Type {
		case "string", "number", "integer", "boolean":
		default:
			vs = append(vs, Violation{name, fmt.Sprintf("type %q is not a primitive", ps.Type)})
		}
	}
	if len(vs) > 0 {
		return &ValidationError{Violations: vs}
	}
	return nil
}

// Validate checks the result against the request it answers: the action,
// content only where allowed, and on accept the content against the
// requested schema. The error is a *ValidationError with one "property: rule"
// per violation.
func (r *ElicitResult) Validate(req *ElicitRequestParams) error {
	var vs []Violation
	switch r.Action {
	case ActionAccept:
	case ActionDecline:
		if len(r.Content) > 0 && !req.IsToolConfirmation() {
			vs = append(vs, Violation{"content", "only allowed with accept"})
		}
	case ActionCancel:
		if len(r.Content) > 0 {
			vs = append(vs, Violation{"content", "only allowed with accept"})
		}
	default:
		vs = append(vs, Violation{"action", `must be "accept", "decline" or "cancel"`})
	}
	if r.Action == ActionAccept {
		for _, name := range req.RequestedSchema.Required {
			if _, ok := r.Content[name]; !ok {
				vs = append(vs, Violation{name, "required"})
			}
		}
		for name, v := range r.Content {
			ps, ok := req.RequestedSchema.Properties[name]
			if !ok {
				vs = append(vs, Violation{name, "not a property of the requested schema"})
				continue
			}
			if ps.Type == "string" {
				s, ok := v.(string)
				if !ok {
					vs = append(vs, Violation{name, "must be a string"})
					continue
				}
				if len(ps.Enum) > 0 && !contains(ps.Enum, s) {
					vs = append(vs, Violation{name, "must be one of the enum values"})
				}
				if ps.Format == "date" {
					if _, err := time.Parse(time.DateOnly, s); err != nil {
						vs = append(vs, Violation{name, "must be a date (YYYY-MM-DD)"})
					}
				}
			}
		}
	}
	if len(vs) > 0 {
		return &ValidationError{Violations: vs}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
