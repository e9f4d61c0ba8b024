package builtin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/parley-dev/parley/schema"
)

// choiceKey is the InputRequests key of get_entity's "which one?" question.
const choiceKey = "choice"

// Page sizes of list_entities: a call returns at most limit entities
// (default DefaultListLimit, at most MaxListLimit), so its result stays
// small however large the site grows; structuredContent.nextCursor
// continues the list.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
)

type listEntities struct{ s *Site }

// listEntitiesSchema is the input schema of list_entities.
const listEntitiesSchema = `{
  "type": "object",
  "properties": {
    "type": {"type": "string", "enum": ["article", "page", "event"], "description": "Only entities of this type."},
    "status": {"type": "string", "enum": ["draft", "published"], "description": "Only entities with this status."},
    "title_prefix": {"type": "string", "description": "Only entities whose title starts with this text (case-insensitive)."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50, "description": "At most this many entities in this page (default 50)."},
    "cursor": {"type": "string", "minLength": 1, "description": "The nextCursor of the previous page, to continue the list after it."}
  },
  "additionalProperties": false
}`

func (listEntities) Definition() schema.Tool {
	return definition(ToolListEntities, "List site entities",
		"List the site's entities (articles, pages, events), optionally filtered by type, "+
			"status and title prefix, in pages ordered by ID: at most limit entities per call (default 50, "+
			"at most 200). When more match, the result's nextCursor continues the list: call again with the "+
			"same filters and that cursor. Read-only: changes nothing.",
		listEntitiesSchema, readOnlyAnnotations())
}

func (t listEntities) Call(ctx context.Context, req Request) (Result, error) {
	var typ, status, prefix, cursor string
	limit := DefaultListLimit
	if r := decodeArgs(req.Arguments,
		arg{"type", &typ, "a string"},
		arg{"status", &status, "a string"},
		arg{"title_prefix", &prefix, "a string"},
		arg{"limit", &limit, "an integer"},
		arg{"cursor", &cursor, "a string"},
	); r != nil {
		return *r, nil
	}
	if limit < 1 || limit > MaxListLimit {
		return argError("limit", fmt.Sprintf("must be between 1 and %d", MaxListLimit)), nil
	}
	if typ != "" && !slices.Contains([]string{TypeArticle, TypePage, TypeEvent}, typ) {
		return argError("type", `must be "article", "page" or "event"`), nil
	}
	if status != "" && status != StatusDraft && status != StatusPublished {
		return argError("status", `must be "draft" or "published"`), nil
	}
	all, err := t.s.Entities(ctx)
	if err != nil {
		return Result{}, err
	}
	var found []Entity // this page
	total, before, next := 0, 0, ""
	for _, e := range all { // sorted by ID: the cursor is the last ID of the previous page
		if (typ == "" || e.Type == typ) && (status == "" || e.Status == status) && hasPrefixFold(e.Title, prefix) {
			total++
			switch {
			case cursor != "" && e.ID <= cursor:
				before++
			case len(found) < limit:
				found = append(found, e)
			}
		}
	}
	if before+len(found) < total {
		next = found[len(found)-1].ID
	}
	ids := make([]string, 0, len(found))
	rows := make([]any, 0, len(found))
	var text strings.Builder
	switch {
	case total == 0:
		text.WriteString("No entities match.")
	case len(found) == 0:
		fmt.Fprintf(&text, "No more entities after cursor %q (%s match in all).", cursor, plural(total, "entity", "entities"))
	case len(found) == total:
		fmt.Fprintf(&text, "Found %s:", plural(len(found), "entity", "entities"))
	default:
		fmt.Fprintf(&text, "Found %s; showing %d to %d:", plural(total, "entity", "entities"), before+1, before+len(found))
	}
	content := schema.ContentList{nil} // text block first, filled in below
	for _, e := range found {
		ids = append(ids, e.ID)
		rows = append(rows, map[string]any{"id": e.ID, "title": e.Title, "type": e.Type, "status": e.Status})
		fmt.Fprintf(&text, "\n- %s", summary(e))
		content = append(content, t.s.link(e))
	}
	structured := map[string]any{"ids": ids, "count": len(found), "total": total, "entities": rows}
	if next != "" {
		fmt.Fprintf(&text, "\n%d more: call list_entities again with the same filters and cursor %q.", total-before-len(found), next)
		structured["nextCursor"] = next
	}
	content[0] = schema.Text(text.String())
	r, err := normalize(&schema.CallToolResult{
		Content:           content,
		StructuredContent: structured,
	})
	if err != nil {
		return Result{}, err
	}
	return callResult(r), nil
}

func hasPrefixFold(s, prefix string) bool {
	return strings.HasPrefix(strings.ToLower(s), strings.ToLower(prefix))
}

type getEntity struct{ s *Site }

// getEntitySchema is the input schema of get_entity.
const getEntitySchema = `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "description": "Entity ID, e.g. \"article-3\" or \"page-1\"."},
    "title": {"type": "string", "description": "The title, or its beginning (case-insensitive)."}
  },
  "additionalProperties": false
}`

func (getEntity) Definition() schema.Tool {
	return definition(ToolGetEntity, "Get a site entity",
		"Get one site entity (article, page or event) by ID, or by title: the title given matches "+
			"the start of entity titles, case-insensitively; if several match, the user is asked which one. "+
			"Give id or title. Read-only: changes nothing.",
		getEntitySchema, readOnlyAnnotations())
}

func (t getEntity) Call(ctx context.Context, req Request) (Result, error) {
	if req.RequestState != "" || len(req.InputResponses) > 0 {
		return t.chosen(ctx, req)
	}
	var id, title string
	if r := decodeArgs(req.Arguments,
		arg{"id", &id, "a string"},
		arg{"title", &title, "a string"},
	); r != nil {
		return *r, nil
	}
	id, title = strings.TrimSpace(id), strings.TrimSpace(title)
	switch {
	case id != "":
		return t.byID(ctx, id, "")
	case title == "":
		return argError("id, title", "give an entity ID or a title"), nil
	}

	all, err := t.s.Entities(ctx)
	if err != nil {
		return Result{}, err
	}
	var candidates, exact []Entity
	for _, e := range all {
		if hasPrefixFold(e.Title, title) {
			candidates = append(candidates, e)
			if strings.EqualFold(e.Title, title) {
				exact = append(exact, e)
			}
		}
	}
	if len(exact) == 1 {
		candidates = exact // an exact title is not ambiguous
	}
	switch len(candidates) {
	case 0:
		return errorResult("No entity has a title starting with %q.", title), nil
	case 1:
		return t.result(candidates[0])
	}
	return Result{InputRequired: choiceRequest(title, candidates)}, nil
}

// choiceRequest asks the user which of the candidates they meant.
func choiceRequest(title string, candidates []Entity) *schema.InputRequiredResult {
	label, noun := "Entity", "entity"
	if !slices.ContainsFunc(candidates, func(e Entity) bool { return e.Type != candidates[0].Type }) {
		noun = candidates[0].Type
		label = capitalize(noun)
	}
	ids := make([]string, len(candidates))
	names := make([]string, len(candidates))
	for i, e := range candidates {
		ids[i], names[i] = e.ID, e.Title
	}
	return &schema.InputRequiredResult{
		ResultType: schema.ResultTypeInputRequired,
		InputRequests: map[string]schema.InputRequest{
			choiceKey: {
				Method: "elicitation/create",
				Params: schema.ElicitRequestParams{
					Message: fmt.Sprintf("Several %ss have a title starting with %q. Which %s did you mean?",
						noun, title, noun),
					RequestedSchema: schema.RequestedSchema{
						Type: "object",
						Properties: map[string]*schema.PropertySchema{
							"id": {Type: "string", Title: label, Enum: ids, EnumNames: names},
						},
						Required: []string{"id"},
					},
				},
			},
		},
		RequestState: encodeState(requestState{Tool: ToolGetEntity, Title: title, IDs: ids}),
	}
}

// chosen handles the retry that answers choiceRequest.
func (t getEntity) chosen(ctx context.Context, req Request) (Result, error) {
	st, content, r := accepted(req, ToolGetEntity, choiceKey, "No entity chosen")
	if r != nil {
		return *r, nil
	}
	id, _ := content["id"].(string)
	if id == "" {
		return errorResult("invalid input response: id: required, one of %s", strings.Join(st.IDs, ", ")), nil
	}
	if !slices.Contains(st.IDs, id) {
		return errorResult("invalid input response: id: %q is not one of the offered entities (%s)",
			id, strings.Join(st.IDs, ", ")), nil
	}
	return t.byID(ctx, id, "chosen ")
}

func (t getEntity) byID(ctx context.Context, id, what string) (Result, error) {
	e, err := t.s.Entity(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return errorResult("No %sentity with ID %q exists.", what, id), nil
	}
	if err != nil {
		return Result{}, err
	}
	return t.result(e)
}

func (t getEntity) result(e Entity) (Result, error) {
	r, err := normalize(t.s.entityResult("", e))
	if err != nil {
		return Result{}, err
	}
	return callResult(r), nil
}
