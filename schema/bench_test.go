package schema

import (
	"encoding/json"
	"testing"
)

// benchForm is a typical form elicitation: the questions a tool asks
// before creating an event.
func benchForm() RequestedSchema {
	one, hundred, three, eighty := 1, 100, 3, 80.0
	return RequestedSchema{
		Type: "object",
		Properties: map[string]*PropertySchema{
			"title":     {Type: "string", Title: "Title", MinLength: &three, MaxLength: &hundred},
			"date":      {Type: "string", Title: "Date", Format: "date"},
			"contact":   {Type: "string", Title: "Contact e-mail", Format: "email"},
			"attendees": {Type: "integer", Title: "Attendees", Minimum: ptr(float64(one)), Maximum: &eighty},
			"category":  {Type: "string", Title: "Category", Enum: []string{"talk", "workshop", "meetup"}, EnumNames: []string{"Talk", "Workshop", "Meetup"}},
			"public":    {Type: "boolean", Title: "Public"},
		},
		Required: []string{"title", "date"},
	}
}

func BenchmarkNewElicitRequest(b *testing.B) {
	rs := benchForm()
	opts := &ElicitOptions{Widgets: map[string]Widget{"date": {Name: "date-picker"}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewElicitRequest("A title and a date for the event?", rs, opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkElicitResultValidate(b *testing.B) {
	form, err := NewElicitRequest("A title and a date for the event?", benchForm(), nil)
	if err != nil {
		b.Fatal(err)
	}
	confirm := NewConfirmationRequest(&Tool{Name: "delete_entities", Title: "Delete entities"},
		ToolCall{ID: "call_1_0", Name: "delete_entities", Arguments: []byte(`{"ids":["a1"]}`)})
	for _, bc := range []struct {
		name string
		req  *ElicitRequestParams
		res  ElicitResult
	}{
		{"form", form, ElicitResult{Action: ActionAccept, Content: map[string]any{
			"title": "Go meetup", "date": "2026-12-03", "contact": "ann@example.org", "attendees": float64(40),
			"category": "meetup", "public": true}}},
		{"confirmation", confirm, ElicitResult{Action: ActionDecline, Content: map[string]any{"instructions": "only the drafts"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.res.Validate(bc.req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkValidateArguments(b *testing.B) {
	tool := Tool{Name: "delete_entities", InputSchema: json.RawMessage(`{"type":"object","properties":{"ids":{"type":"array","items":{"type":"string"}},"force":{"type":"boolean"}},"required":["ids"]}`)}
	args := json.RawMessage(`{"ids":["a1","a2"],"force":false}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := tool.ValidateArguments(args); err != nil {
			b.Fatal(err)
		}
	}
}
