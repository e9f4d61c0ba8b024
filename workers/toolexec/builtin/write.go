package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// detailsKey is the InputRequests key of create_event's form.
const detailsKey = "details"

// maxTitle is the longest title create_event accepts, in characters.
const maxTitle = 200

type createEvent struct{ s *Site }

// createEventSchema is the input schema of create_event.
const createEventSchema = `{
  "type": "object",
  "properties": {
    "title": {"type": "string", "minLength": 1, "maxLength": 200, "description": "The event's title."},
    "date": {"type": "string", "format": "date", "description": "The event's day, YYYY-MM-DD."}
  },
  "additionalProperties": false
}`

func (createEvent) Definition() schema.Tool {
	return definition(ToolCreateEvent, "Create an event",
		"Create a new event on the site, as a draft, with a title and a date (YYYY-MM-DD). "+
			"If either is missing, the user is asked for both. Each call creates one new event.",
		createEventSchema, writeAnnotations(false, false))
}

// detailsRequest asks the user for the event's title and date, title
// first. A title or a date the call already gave (title, date: trimmed,
// "" when not given) is prefilled as the property's default (MCP
// 2025-11-25; the agent drops it for a 2025-06-18 client) and named in the
// message, so the person confirms it rather than types it again. A value
// the form itself would refuse (an over-long title, a date not
// YYYY-MM-DD) is not prefilled.
func detailsRequest(title, date string) *schema.InputRequiredResult {
	titleProp := &schema.PropertySchema{Type: "string", Title: "Title", MinLength: new(1), MaxLength: new(maxTitle)}
	dateProp := &schema.PropertySchema{Type: "string", Format: "date", Title: "Date"}
	if title == "" || utf8.RuneCountInString(title) > maxTitle {
		title = ""
	} else {
		titleProp.Default, _ = json.Marshal(title)
	}
	if !schema.CheckFormat(schema.FormatDate, date) {
		date = ""
	} else {
		dateProp.Default, _ = json.Marshal(date)
	}
	msg := "Please give a title and a date for the new event."
	switch {
	case title != "":
		msg = fmt.Sprintf("Please give a date for the new event %q (its title is filled in; you can change it).", title)
	case date != "":
		msg = fmt.Sprintf("Please give a title for the new event on %s (its date is filled in; you can change it).", date)
	}
	return &schema.InputRequiredResult{
		ResultType: schema.ResultTypeInputRequired,
		InputRequests: map[string]schema.InputRequest{
			detailsKey: {
				Method: "elicitation/create",
				Params: schema.ElicitRequestParams{
					Message: msg,
					RequestedSchema: schema.RequestedSchema{
						Type:       "object",
						Properties: map[string]*schema.PropertySchema{"title": titleProp, "date": dateProp},
						Required:   []string{"title", "date"},
					},
				},
			},
		},
		RequestState: encodeState(requestState{Tool: ToolCreateEvent}),
	}
}

func (t createEvent) Call(ctx context.Context, req Request) (Result, error) {
	var title, date string
	if r := decodeArgs(req.Arguments,
		arg{"title", &title, "a string"},
		arg{"date", &date, "a string"},
	); r != nil {
		return *r, nil
	}
	where := "invalid arguments"
	if req.RequestState != "" || len(req.InputResponses) > 0 {
		_, content, r := accepted(req, ToolCreateEvent, detailsKey, "No event created")
		if r != nil {
			return *r, nil
		}
		where = "invalid input response"
		var okT, okD bool
		title, okT = content["title"].(string)
		date, okD = content["date"].(string)
		switch {
		case !okT:
			return errorResult("%s: title: required, a string", where), nil
		case !okD:
			return errorResult("%s: date: required, a string YYYY-MM-DD", where), nil
		}
	} else if strings.TrimSpace(title) == "" || strings.TrimSpace(date) == "" {
		return Result{InputRequired: detailsRequest(strings.TrimSpace(title), strings.TrimSpace(date))}, nil
	}
	title, date = strings.TrimSpace(title), strings.TrimSpace(date)
	switch {
	case title == "":
		return errorResult("%s: title: must not be empty", where), nil
	case utf8.RuneCountInString(title) > maxTitle:
		return errorResult("%s: title: at most %d characters", where, maxTitle), nil
	case !schema.CheckFormat(schema.FormatDate, date):
		return errorResult("%s: date: %q is not a date in the form YYYY-MM-DD", where, date), nil
	}

	plan := func(context.Context) (*ledgerRecord, *Result, error) {
		e := Entity{
			ID:      eventID(callSeed(req)),
			Type:    TypeEvent,
			Title:   title,
			Status:  StatusDraft,
			Date:    date,
			Created: t.s.now(),
		}
		return &ledgerRecord{IDs: []string{e.ID}, Event: &e, Result: t.s.entityResult("Created event ", e)}, nil, nil
	}
	apply := func(ctx context.Context, rec *ledgerRecord) error {
		if rec.Event == nil {
			return errors.New("ledger record has no event")
		}
		// Only if the key never held a value, so an event created and
		// deleted since is not brought back.
		_, err := t.s.entities.CreateNew(ctx, entityKey(rec.Event.ID), rec.Event)
		if errors.Is(err, kvstate.ErrConflict) {
			return nil
		}
		return err
	}
	return t.s.once(ctx, ToolCreateEvent, req, plan, apply)
}

// idsSchema is the input schema of publish_entities and delete_entities.
const idsSchema = `{
  "type": "object",
  "properties": {
    "ids": {
      "type": "array",
      "items": {"type": "string", "minLength": 1},
      "minItems": 1,
      "maxItems": 100,
      "description": "Entity IDs, e.g. [\"article-2\", \"page-5\"]."
    }
  },
  "required": ["ids"],
  "additionalProperties": false
}`

// decodeIDs decodes {"ids": [...]}.
func decodeIDs(raw json.RawMessage) ([]string, *Result) {
	var ids []string
	if r := decodeArgs(raw, arg{"ids", &ids, "an array of entity ID strings"}); r != nil {
		return nil, r
	}
	return cleanIDs(ids)
}

// split returns the IDs of live entities (with the entities) and the unknown IDs.
func (s *Site) split(ctx context.Context, ids []string) (found []Entity, unknown []string, err error) {
	for _, id := range ids {
		e, err := s.Entity(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			unknown = append(unknown, id)
		case err != nil:
			return nil, nil, err
		default:
			found = append(found, e)
		}
	}
	return found, unknown, nil
}

func idsOf(es []Entity) []string {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return ids
}

// onIDs runs a call of tool (publish_entities, delete_entities) on the
// entity IDs of req's arguments, once (Site.once): result words the result
// from the live entities among them (at least one) and the unknown IDs;
// when none is live the call is noneFound(verb). apply changes one entity
// and is called for each ID the ledger records, on the first run and on
// every replay.
func (s *Site) onIDs(ctx context.Context, tool, verb string, req Request,
	result func(found []Entity, unknown []string) *schema.CallToolResult,
	apply func(ctx context.Context, id string) error) (Result, error) {
	ids, bad := decodeIDs(req.Arguments)
	if bad != nil {
		return *bad, nil
	}
	plan := func(ctx context.Context) (*ledgerRecord, *Result, error) {
		found, unknown, err := s.split(ctx, ids)
		if err != nil {
			return nil, nil, err
		}
		if len(found) == 0 {
			return nil, noneFound(verb, unknown), nil
		}
		return &ledgerRecord{IDs: idsOf(found), Result: result(found, unknown)}, nil, nil
	}
	return s.once(ctx, tool, req, plan, func(ctx context.Context, rec *ledgerRecord) error {
		for _, id := range rec.IDs {
			if err := apply(ctx, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// noneFound is the result of publish_entities or delete_entities when no
// ID names an entity: an error result with the unknown IDs, under the
// structured key verb ("published" or "deleted") as an empty list.
func noneFound(verb string, unknown []string) *Result {
	r := callResult(&schema.CallToolResult{
		Content:           schema.ContentList{schema.Text("No entities " + verb + ": no entity has the ID " + strings.Join(unknown, ", ") + ".")},
		StructuredContent: map[string]any{verb: []string{}, "unknown": unknown},
		IsError:           true,
	})
	return &r
}

type publishEntities struct{ s *Site }

func (publishEntities) Definition() schema.Tool {
	return definition(ToolPublishEntities, "Publish site entities",
		"Publish site entities (articles, pages, events) by ID: set their status to published, "+
			"making them visible to site visitors. Entities already published stay published.",
		idsSchema, writeAnnotations(false, true))
}

func (t publishEntities) Call(ctx context.Context, req Request) (Result, error) {
	result := func(found []Entity, unknown []string) *schema.CallToolResult {
		done := idsOf(found)
		text := fmt.Sprintf("Published %s: %s.", plural(len(found), "entity", "entities"), strings.Join(done, ", "))
		sc := map[string]any{"published": done}
		if len(unknown) > 0 {
			text += " Unknown IDs, not published: " + strings.Join(unknown, ", ") + "."
			sc["unknown"] = unknown
		}
		content := schema.ContentList{schema.Text(text)}
		for _, e := range found {
			e.Status = StatusPublished
			content = append(content, t.s.link(e))
		}
		return &schema.CallToolResult{Content: content, StructuredContent: sc}
	}
	return t.s.onIDs(ctx, ToolPublishEntities, "published", req, result, func(ctx context.Context, id string) error {
		return t.s.setStatus(ctx, id, StatusPublished)
	})
}

// setStatus sets an entity's status with revision-checked updates, retrying
// on conflicts. A deleted entity is left alone.
func (s *Site) setStatus(ctx context.Context, id, status string) error {
	if !validID.MatchString(id) {
		return nil
	}
	_, _, err := s.entities.Mutate(ctx, entityKey(id), func(e *Entity) error {
		if e.Status == status {
			return kvstate.ErrNoChange
		}
		e.Status = status
		return nil
	})
	if errors.Is(err, kvstate.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("updating entity %s: %w", id, err)
	}
	return nil
}

type deleteEntities struct{ s *Site }

func (deleteEntities) Definition() schema.Tool {
	return definition(ToolDeleteEntities, "Delete site entities",
		"Delete site entities (articles, pages, events) by ID. This cannot be undone.",
		idsSchema, writeAnnotations(true, true))
}

func (t deleteEntities) Call(ctx context.Context, req Request) (Result, error) {
	result := func(found []Entity, unknown []string) *schema.CallToolResult {
		var text strings.Builder
		fmt.Fprintf(&text, "Deleted %s:", plural(len(found), "entity", "entities"))
		for _, e := range found {
			fmt.Fprintf(&text, "\n- %s", summary(e))
		}
		sc := map[string]any{"deleted": idsOf(found)}
		if len(unknown) > 0 {
			fmt.Fprintf(&text, "\nUnknown IDs, not deleted: %s.", strings.Join(unknown, ", "))
			sc["unknown"] = unknown
		}
		return &schema.CallToolResult{Content: schema.ContentList{schema.Text(text.String())}, StructuredContent: sc}
	}
	return t.s.onIDs(ctx, ToolDeleteEntities, "deleted", req, result, func(ctx context.Context, id string) error {
		_, _, err := t.s.get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return nil // already deleted: no second delete marker
		}
		if err != nil {
			return err
		}
		if err := t.s.kv.Delete(ctx, entityKey(id)); err != nil {
			return fmt.Errorf("deleting entity %s: %w", id, err)
		}
		return nil
	})
}
