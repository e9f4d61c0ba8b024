package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/parley-dev/parley/schema"
)

var regexpKey = regexp.MustCompile(`^[-_=a-zA-Z0-9]+(\.[-_=a-zA-Z0-9]+)*$`)

func args(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestDefinitions(t *testing.T) {
	s, _ := newSite(t)
	want := map[string]struct{ readOnly, destructive, idempotent bool }{
		ToolListEntities:    {true, true, false}, // destructive/idempotent absent: only readOnly matters
		ToolGetEntity:       {true, true, false},
		ToolCreateEvent:     {false, false, false},
		ToolPublishEntities: {false, false, true},
		ToolDeleteEntities:  {false, true, true},
	}
	var names []string
	for _, tool := range s.Tools() {
		d := tool.Definition()
		names = append(names, d.Name)
		w, ok := want[d.Name]
		if !ok {
			t.Errorf("unexpected tool %s", d.Name)
			continue
		}
		a := d.Annotations
		if a.ReadOnly() != w.readOnly || a.OpenWorld() || a.ReadOnlyHint == nil || a.OpenWorldHint == nil {
			t.Errorf("%s: readOnly %v openWorld %v, want %v false (both explicit)", d.Name, a.ReadOnly(), a.OpenWorld(), w.readOnly)
		}
		if !w.readOnly && (a.Destructive() != w.destructive || a.Idempotent() != w.idempotent ||
			a.DestructiveHint == nil || a.IdempotentHint == nil) {
			t.Errorf("%s: destructive %v idempotent %v, want %v %v (explicit)", d.Name, a.Destructive(), a.Idempotent(), w.destructive, w.idempotent)
		}
		if d.Description == "" || d.Title == "" {
			t.Errorf("%s: missing title or description", d.Name)
		}
		var sch struct {
			Type                 string         `json:"type"`
			Properties           map[string]any `json:"properties"`
			AdditionalProperties *bool          `json:"additionalProperties"`
		}
		if err := json.Unmarshal(d.InputSchema, &sch); err != nil {
			t.Errorf("%s: inputSchema: %v", d.Name, err)
		}
		if sch.Type != "object" || len(sch.Properties) == 0 || sch.AdditionalProperties == nil || *sch.AdditionalProperties {
			t.Errorf("%s: inputSchema %s, want an object schema with properties and additionalProperties false", d.Name, d.InputSchema)
		}
	}
	if len(names) != len(want) {
		t.Errorf("Tools() = %v, want %d tools", names, len(want))
	}
	// Arguments can be checked against the input schemas before anyone is
	// asked to confirm: an empty ID list and an over-long title are invalid.
	for _, name := range []string{ToolDeleteEntities, ToolPublishEntities} {
		tool, _ := s.Tool(name)
		var sch struct {
			Properties struct {
				IDs struct {
					MinItems *int `json:"minItems"`
				} `json:"ids"`
			} `json:"properties"`
			Required []string `json:"required"`
		}
		if err := json.Unmarshal(tool.Definition().InputSchema, &sch); err != nil {
			t.Fatalf("%s: inputSchema: %v", name, err)
		}
		if m := sch.Properties.IDs.MinItems; m == nil || *m != 1 || !slices.Contains(sch.Required, "ids") {
			t.Errorf("%s: inputSchema %s, want ids required with minItems 1", name, tool.Definition().InputSchema)
		}
	}
	{
		tool, _ := s.Tool(ToolCreateEvent)
		var sch struct {
			Properties struct {
				Title struct {
					MinLength *int `json:"minLength"`
					MaxLength *int `json:"maxLength"`
				} `json:"title"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(tool.Definition().InputSchema, &sch); err != nil {
			t.Fatalf("create_event: inputSchema: %v", err)
		}
		if p := sch.Properties.Title; p.MinLength == nil || *p.MinLength != 1 || p.MaxLength == nil || *p.MaxLength != maxTitle {
			t.Errorf("create_event: inputSchema %s, want title minLength 1, maxLength %d", tool.Definition().InputSchema, maxTitle)
		}
	}
	if d, _ := s.Tool(ToolDeleteEntities); !strings.Contains(d.Definition().Description, "cannot be undone") {
		t.Errorf("delete_entities description %q does not warn", d.Definition().Description)
	}
}

func TestListEntities(t *testing.T) {
	s, _ := newSite(t)
	tests := []struct {
		args  any
		count int
	}{
		{nil, 30},
		{map[string]any{}, 30},
		{map[string]any{"type": "article", "status": "draft"}, 10},
		{map[string]any{"type": "article", "status": "published"}, 5},
		{map[string]any{"type": "page", "title_prefix": "about"}, 3},
		{map[string]any{"title_prefix": "ABOUT THE"}, 1},
		{map[string]any{"type": "event"}, 7},
		{map[string]any{"title_prefix": "zzz"}, 0},
	}
	for _, tt := range tests {
		t.Run(dump(tt.args), func(t *testing.T) {
			var raw json.RawMessage
			if tt.args != nil {
				raw = args(tt.args)
			}
			r := callOK(t, s, ToolListEntities, Request{CallID: "c1", Arguments: raw})
			if got := r.StructuredContent["count"]; got != float64(tt.count) {
				t.Errorf("count = %v, want %d", got, tt.count)
			}
			ids, _ := r.StructuredContent["ids"].([]any)
			ents, _ := r.StructuredContent["entities"].([]any)
			ls := links(r)
			if len(ids) != tt.count || len(ents) != tt.count || len(ls) != tt.count {
				t.Errorf("len(ids, entities, links) = %d, %d, %d, want %d", len(ids), len(ents), len(ls), tt.count)
			}
			for i, l := range ls {
				m, _ := l.Meta[schema.MetaEntity].(map[string]any)
				if m["id"] != ids[i] || l.URI != "https://site.example/node/"+fmt.Sprint(ids[i]) || l.MIMEType != "text/html" || l.Name == "" {
					t.Errorf("link %d = %s, want entity %v", i, dump(l), ids[i])
				}
			}
			if text(r) == "" {
				t.Error("no text block")
			}
		})
	}
}

func TestGetEntityByTitleAsksWhichOne(t *testing.T) {
	s, _ := newSite(t)
	req := Request{CallID: "get-1", Arguments: args(map[string]string{"title": "About"})}
	r := call(t, s, ToolGetEntity, req)
	if r.InputRequired == nil {
		t.Fatalf("get_entity(About) = %s, want input required", dump(r))
	}
	ir := r.InputRequired
	if ir.ResultType != schema.ResultTypeInputRequired || ir.RequestState == "" || len(ir.InputRequests) != 1 {
		t.Fatalf("input required = %s", dump(ir))
	}
	q := ir.InputRequests["choice"]
	if q.Method != "elicitation/create" || !strings.Contains(q.Params.Message, "About") {
		t.Errorf("request = %s, want elicitation/create naming the title", dump(q))
	}
	if err := q.Params.Validate(schema.DefaultRevision); err != nil {
		t.Errorf("elicitation does not validate: %v", err)
	}
	rs := q.Params.RequestedSchema
	p := rs.Properties["id"]
	wantIDs := []string{"page-1", "page-3", "page-5"}
	wantNames := []string{"About us", "About the team", "About this site"}
	if p == nil || p.Type != "string" || p.Title != "Page" || !slices.Equal(rs.Required, []string{"id"}) {
		t.Fatalf("requestedSchema = %s", dump(rs))
	}
	if diff := cmp.Diff(wantIDs, p.Enum); diff != "" {
		t.Errorf("enum (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantNames, p.EnumNames); diff != "" {
		t.Errorf("enumNames (-want +got):\n%s", diff)
	}

	retry := func(ans schema.ElicitResult) Result {
		req := req
		req.Round = 1
		req.RequestState = ir.RequestState
		req.InputResponses = map[string]schema.ElicitResult{"choice": ans}
		return call(t, s, ToolGetEntity, req)
	}

	t.Run("accept", func(t *testing.T) {
		r := retry(schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"id": "page-3"}})
		if r.Call == nil || r.Call.IsError {
			t.Fatalf("retry = %s, want the entity", dump(r))
		}
		ls := links(r.Call)
		if len(ls) != 1 {
			t.Fatalf("links = %s, want 1", dump(ls))
		}
		want := map[string]any{"entity_type": "page", "id": "page-3", "bundle": "page", "status": "published", "title": "About the team"}
		if diff := cmp.Diff(want, ls[0].Meta[schema.MetaEntity]); diff != "" {
			t.Errorf("_meta entity (-want +got):\n%s", diff)
		}
		if ls[0].Name != "About the team" || ls[0].URI != "https://site.example/node/page-3" {
			t.Errorf("link = %s", dump(ls[0]))
		}
	})
	t.Run("not a candidate", func(t *testing.T) {
		r := retry(schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"id": "page-2"}})
		if r.Call == nil || !r.Call.IsError {
			t.Fatalf("retry with page-2 = %s, want isError", dump(r))
		}
	})
	for _, a := range []schema.ElicitAction{schema.ActionDecline, schema.ActionCancel} {
		t.Run(string(a), func(t *testing.T) {
			r := retry(schema.ElicitResult{Action: a})
			if r.Call == nil || !r.Call.IsError || !strings.Contains(text(r.Call), "No entity chosen") {
				t.Fatalf("retry %s = %s, want isError no entity chosen", a, dump(r))
			}
		})
	}
	t.Run("tampered state", func(t *testing.T) {
		req := req
		req.RequestState = "not-base64!"
		req.InputResponses = map[string]schema.ElicitResult{"choice": {Action: schema.ActionAccept, Content: map[string]any{"id": "page-1"}}}
		if r := call(t, s, ToolGetEntity, req); !r.Call.IsError {
			t.Fatalf("retry with bad state = %s, want isError", dump(r))
		}
	})
}

func TestGetEntity(t *testing.T) {
	s, _ := newSite(t)
	tests := []struct {
		args   any
		wantID string // "" = isError
	}{
		{map[string]string{"title": "About us"}, "page-1"},
		{map[string]string{"title": "about THIS"}, "page-5"},
		{map[string]string{"id": "article-4"}, "article-4"},
		{map[string]string{"id": "article-99"}, ""},
		{map[string]string{"title": "No such title"}, ""},
	}
	for _, tt := range tests {
		t.Run(dump(tt.args), func(t *testing.T) {
			r := call(t, s, ToolGetEntity, Request{CallID: "g", Arguments: args(tt.args)})
			if r.Call == nil {
				t.Fatalf("got %s, want a call result", dump(r))
			}
			if tt.wantID == "" {
				if !r.Call.IsError {
					t.Errorf("got %s, want isError", dump(r))
				}
				return
			}
			ls := links(r.Call)
			if r.Call.IsError || len(ls) != 1 || ls[0].Meta[schema.MetaEntity].(map[string]any)["id"] != tt.wantID {
				t.Errorf("got %s, want entity %s", dump(r), tt.wantID)
			}
		})
	}
}

// TestCreateEventPrefill: a title or a date the call gave is prefilled in
// the form that asks for both (title before date), and the message names
// it; a value the form would refuse is not prefilled.
func TestCreateEventPrefill(t *testing.T) {
	s, _ := newSite(t)
	for _, tt := range []struct {
		name                string
		args                map[string]string
		wantTitle, wantDate string // JSON defaults, "" for none
		wantMessage         string
	}{
		{"title", map[string]string{"title": " Launch party "}, `"Launch party"`, "", `Please give a date for the new event "Launch party" (its title is filled in; you can change it).`},
		{"date", map[string]string{"date": "2026-06-01"}, "", `"2026-06-01"`, "Please give a title for the new event on 2026-06-01 (its date is filled in; you can change it)."},
		{"none", map[string]string{}, "", "", "Please give a title and a date for the new event."},
		{"blank title", map[string]string{"title": "  "}, "", "", "Please give a title and a date for the new event."},
		{"long title", map[string]string{"title": strings.Repeat("x", maxTitle+1)}, "", "", "Please give a title and a date for the new event."},
		{"impossible date", map[string]string{"date": "2026-02-30"}, "", "", "Please give a title and a date for the new event."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := call(t, s, ToolCreateEvent, Request{CallID: "prefill-" + tt.name, Arguments: args(tt.args)})
			if r.InputRequired == nil {
				t.Fatalf("create_event(%v) = %s, want input required", tt.args, dump(r))
			}
			q := r.InputRequired.InputRequests["details"]
			if err := q.Params.Validate(schema.Rev20251125); err != nil {
				t.Errorf("form does not validate for 2025-11-25: %v", err)
			}
			rs := q.Params.RequestedSchema
			if got := rs.PropertyNames(); !slices.Equal(got, []string{"title", "date"}) {
				t.Errorf("fields in order %v, want title before date", got)
			}
			if got := string(rs.Properties["title"].Default); got != tt.wantTitle {
				t.Errorf("title default = %s, want %s", got, tt.wantTitle)
			}
			if got := string(rs.Properties["date"].Default); got != tt.wantDate {
				t.Errorf("date default = %s, want %s", got, tt.wantDate)
			}
			if q.Params.Message != tt.wantMessage {
				t.Errorf("message = %q, want %q", q.Params.Message, tt.wantMessage)
			}
		})
	}
}

func TestCreateEvent(t *testing.T) {
	s, _ := newSite(t)
	req := Request{CallID: "call_create/1 é", Arguments: args(map[string]string{"title": "Launch"})}
	r := call(t, s, ToolCreateEvent, req)
	if r.InputRequired == nil {
		t.Fatalf("create_event without date = %s, want input required", dump(r))
	}
	q, ok := r.InputRequired.InputRequests["details"]
	if !ok || q.Method != "elicitation/create" {
		t.Fatalf("input requests = %s", dump(r.InputRequired))
	}
	if err := q.Params.Validate(schema.Rev20251125); err != nil {
		t.Errorf("form does not validate: %v", err)
	}
	if down := q.Params.ForRevision(schema.Rev20250618); down.Validate(schema.Rev20250618) != nil {
		t.Errorf("form downgraded for 2025-06-18 does not validate: %v", down.Validate(schema.Rev20250618))
	}
	rs := q.Params.RequestedSchema
	if !slices.Equal(rs.Required, []string{"title", "date"}) ||
		rs.Properties["title"].Type != "string" || rs.Properties["title"].Title != "Title" ||
		rs.Properties["title"].MinLength == nil || *rs.Properties["title"].MinLength != 1 ||
		rs.Properties["title"].MaxLength == nil || *rs.Properties["title"].MaxLength != maxTitle ||
		rs.Properties["date"].Type != "string" || rs.Properties["date"].Format != "date" ||
		rs.Properties["date"].Title != "Date" || string(rs.Properties["title"].Default) != `"Launch"` {
		t.Errorf("form = %s", dump(rs))
	}

	// The form says what the tool enforces: an over-long title is refused
	// by the form (invalid_content, the question stays open), not by the
	// tool after the answer is consumed.
	for _, tt := range []struct {
		title string
		ok    bool
	}{{strings.Repeat("é", maxTitle), true}, {strings.Repeat("x", maxTitle+1), false}, {"", false}} {
		ans := schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"title": tt.title, "date": "2026-06-01"}}
		if err := ans.Validate(&q.Params); (err == nil) != tt.ok {
			t.Errorf("form answer with a %d-character title: Validate = %v, want ok %v", len([]rune(tt.title)), err, tt.ok)
		}
	}

	retry := req
	retry.Round = 1
	retry.RequestState = r.InputRequired.RequestState
	retry.InputResponses = map[string]schema.ElicitResult{"details": {
		Action: schema.ActionAccept, Content: map[string]any{"title": "Launch party", "date": "2026-06-01"},
	}}
	first := callOK(t, s, ToolCreateEvent, retry)
	ls := links(first)
	if len(ls) != 1 {
		t.Fatalf("result = %s, want one link", dump(first))
	}
	id := ls[0].Meta[schema.MetaEntity].(map[string]any)["id"].(string)
	e, err := s.Entity(t.Context(), id)
	if err != nil {
		t.Fatalf("Entity(%s): %v", id, err)
	}
	if e.Title != "Launch party" || e.Date != "2026-06-01" || e.Type != TypeEvent || e.Status != StatusDraft {
		t.Errorf("created %+v", e)
	}

	// Re-execution after a crash: same result, still one event, one ledger entry.
	for range 3 {
		again := callOK(t, s, ToolCreateEvent, retry)
		if diff := cmp.Diff(first, again); diff != "" {
			t.Errorf("re-execution result differs (-first +again):\n%s", diff)
		}
	}
	events := callOK(t, s, ToolListEntities, Request{Arguments: args(map[string]string{"type": "event"})})
	if got := events.StructuredContent["count"]; got != float64(8) {
		t.Errorf("events after create and re-executions = %v, want 8", got)
	}
	assertLedger(t, s, map[string][]string{req.CallID: {id}})

	// Deleted since: a late re-execution does not bring it back.
	callOK(t, s, ToolDeleteEntities, Request{CallID: "del-ev", Arguments: args(map[string]any{"ids": []string{id}})})
	callOK(t, s, ToolCreateEvent, retry)
	if _, err := s.Entity(t.Context(), id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Entity(%s) after delete + re-execution: err = %v, want ErrNotFound", id, err)
	}

	// Complete arguments create at once; another call creates another event.
	direct := callOK(t, s, ToolCreateEvent, Request{CallID: "c2", Arguments: args(map[string]string{"title": "Direct", "date": "2026-02-03"})})
	if id2 := links(direct)[0].Meta[schema.MetaEntity].(map[string]any)["id"]; id2 == id {
		t.Errorf("second call reused event ID %s", id)
	}

	// The same call ID in another run is another call.
	other := retry
	other.RunID = "run-2"
	o := callOK(t, s, ToolCreateEvent, other)
	if links(o)[0].Meta[schema.MetaEntity].(map[string]any)["id"] == id {
		t.Error("RunID does not scope the event ID")
	}

	tests := []struct {
		name string
		ans  schema.ElicitResult
		want string
	}{
		{"decline", schema.ElicitResult{Action: schema.ActionDecline}, "No event created"},
		{"cancel", schema.ElicitResult{Action: schema.ActionCancel}, "No event created"},
		{"bad date", schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"title": "X", "date": "2026-02-30"}}, "date"},
		{"bad date format", schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"title": "X", "date": "1 June"}}, "date"},
		{"empty title", schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"title": " ", "date": "2026-02-03"}}, "title"},
		{"title not string", schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"title": 5, "date": "2026-02-03"}}, "title"},
		{"no date", schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{"title": "X"}}, "date"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := retry
			req.CallID = "fail-" + tt.name
			req.InputResponses = map[string]schema.ElicitResult{"details": tt.ans}
			r := call(t, s, ToolCreateEvent, req)
			if r.Call == nil || !r.Call.IsError || !strings.Contains(text(r.Call), tt.want) {
				t.Errorf("got %s, want isError mentioning %q", dump(r), tt.want)
			}
		})
	}
}

// draftIDs lists the draft articles through list_entities.
func draftIDs(t *testing.T, s *Site) []string {
	t.Helper()
	r := callOK(t, s, ToolListEntities, Request{Arguments: args(map[string]string{"type": "article", "status": "draft"})})
	var ids []string
	for _, id := range r.StructuredContent["ids"].([]any) {
		ids = append(ids, id.(string))
	}
	return ids
}

func assertLedger(t *testing.T, s *Site, want map[string][]string) {
	t.Helper()
	l, err := s.Ledger(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, e := range l {
		if _, dup := got[e.CallID]; dup {
			t.Errorf("ledger has CallID %s twice", e.CallID)
		}
		got[e.CallID] = e.IDs
		if e.At.IsZero() || e.Tool == "" {
			t.Errorf("ledger entry %+v: missing at or tool", e)
		}
	}
	for k, ids := range want {
		if diff := cmp.Diff(ids, got[k]); diff != "" {
			t.Errorf("ledger %s ids (-want +got):\n%s", k, diff)
		}
	}
	if len(got) != len(want) {
		t.Errorf("ledger = %v, want %d entries", got, len(want))
	}
}

func TestDeleteDraftsExactlyOnce(t *testing.T) {
	s, _ := newSite(t)
	drafts := draftIDs(t, s)
	if len(drafts) != 10 {
		t.Fatalf("drafts = %v, want 10", drafts)
	}
	req := Request{CallID: "call_del", Arguments: args(map[string]any{"ids": drafts})}

	// Several executors run the same call at once (a redelivery racing the
	// original): one effect, one ledger entry, identical results.
	const n = 5
	results := make([]Result, n)
	errs := make([]error, n)
	tool, _ := s.Tool(ToolDeleteEntities)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = tool.Call(t.Context(), req) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("execution %d: %v", i, errs[i])
		}
		if diff := cmp.Diff(results[0], results[i]); diff != "" {
			t.Errorf("execution %d result differs (-0 +%d):\n%s", i, i, diff)
		}
	}
	first := results[0].Call
	if first == nil || first.IsError || !strings.HasPrefix(text(first), "Deleted 10 entities") {
		t.Fatalf("delete = %s, want Deleted 10 entities", dump(results[0]))
	}
	if diff := cmp.Diff(map[string]any{"deleted": toAny(drafts)}, first.StructuredContent); diff != "" {
		t.Errorf("structuredContent (-want +got):\n%s", diff)
	}
	all, _ := s.Entities(t.Context())
	if len(all) != 20 {
		t.Errorf("%d entities left, want 20", len(all))
	}
	if got := draftIDs(t, s); len(got) != 0 {
		t.Errorf("drafts left: %v", got)
	}

	// A later re-execution: same result, no second effect.
	again := callOK(t, s, ToolDeleteEntities, req)
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("re-execution result differs (-first +again):\n%s", diff)
	}
	assertLedger(t, s, map[string][]string{"call_del": drafts})

	// The same call ID with other arguments is refused, not replayed.
	bad := callOrFail(t, s, ToolDeleteEntities, Request{CallID: "call_del", Arguments: args(map[string]any{"ids": []string{"page-8"}})})
	if !bad.IsError {
		t.Errorf("reused call ID = %s, want isError", dump(bad))
	}
	if _, err := s.Entity(t.Context(), "page-8"); err != nil {
		t.Errorf("page-8 touched by refused call: %v", err)
	}

	// Unknown IDs: reported; all unknown is an error and records nothing.
	r := callOK(t, s, ToolDeleteEntities, Request{CallID: "d2", Arguments: args(map[string]any{"ids": []string{"page-8", "article-2", "nope"}})})
	if !strings.HasPrefix(text(r), "Deleted 1 entity") || !slices.Equal(r.StructuredContent["unknown"].([]any), []any{"article-2", "nope"}) {
		t.Errorf("partial delete = %s", dump(r))
	}
	none := callOrFail(t, s, ToolDeleteEntities, Request{CallID: "d3", Arguments: args(map[string]any{"ids": []string{"article-2"}})})
	if !none.IsError {
		t.Errorf("delete of deleted = %s, want isError", dump(none))
	}
	assertLedger(t, s, map[string][]string{"call_del": drafts, "d2": {"page-8"}})
}

func callOrFail(t *testing.T, s *Site, name string, req Request) *schema.CallToolResult {
	t.Helper()
	r := call(t, s, name, req)
	if r.Call == nil {
		t.Fatalf("%s = %s, want a call result", name, dump(r))
	}
	return r.Call
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func TestPublishEntities(t *testing.T) {
	s, _ := newSite(t)
	drafts := draftIDs(t, s)
	// Concurrent publishes of overlapping sets by different calls, plus a
	// re-execution of each: all end published, one ledger entry per call.
	var wg sync.WaitGroup
	tool, _ := s.Tool(ToolPublishEntities)
	calls := map[string][]string{"p1": drafts[:6], "p2": drafts[4:], "p3": drafts}
	for id, ids := range calls {
		for range 2 {
			wg.Go(func() {
				r, err := tool.Call(context.WithoutCancel(t.Context()), Request{CallID: id, Arguments: args(map[string]any{"ids": ids})})
				if err != nil || r.Call == nil || r.Call.IsError {
					t.Errorf("publish %s = %s, %v", id, dump(r), err)
					return
				}
				if want := fmt.Sprintf("Published %d entities", len(ids)); !strings.HasPrefix(text(r.Call), want) {
					t.Errorf("publish %s text %q, want prefix %q", id, text(r.Call), want)
				}
			})
		}
	}
	wg.Wait()
	if got := draftIDs(t, s); len(got) != 0 {
		t.Errorf("drafts left after publish: %v", got)
	}
	assertLedger(t, s, calls)
	for _, id := range drafts {
		e, err := s.Entity(t.Context(), id)
		if err != nil || e.Status != StatusPublished || e.Title == "" {
			t.Errorf("Entity(%s) = %+v, %v", id, e, err)
		}
	}
	r := callOK(t, s, ToolPublishEntities, Request{CallID: "p4", Arguments: args(map[string]any{"ids": []string{"article-1", "article-1", "zzz"}})})
	if diff := cmp.Diff(map[string]any{"published": []any{"article-1"}, "unknown": []any{"zzz"}}, r.StructuredContent); diff != "" {
		t.Errorf("structuredContent (-want +got):\n%s", diff)
	}
}

func TestBadArguments(t *testing.T) {
	s, _ := newSite(t)
	tests := []struct {
		tool, args, field string
	}{
		{ToolListEntities, `[]`, "JSON object"},
		{ToolListEntities, `{"type": "blog"}`, "type"},
		{ToolListEntities, `{"status": 1}`, "status"},
		{ToolListEntities, `{"color": "red"}`, "color"},
		{ToolGetEntity, `{}`, "id"},
		{ToolGetEntity, `{"id": 5}`, "id"},
		{ToolGetEntity, `{"title": ["About"]}`, "title"},
		{ToolGetEntity, `{"id": "x",`, "JSON object"},
		{ToolCreateEvent, `{"date": 20260101}`, "date"},
		{ToolCreateEvent, `{"title": "X", "date": "2026-13-01"}`, "date"},
		{ToolCreateEvent, `{"title": "X", "date": "2026-01-01", "where": "here"}`, "where"},
		{ToolPublishEntities, `{}`, "ids"},
		{ToolPublishEntities, `{"ids": "article-1"}`, "ids"},
		{ToolPublishEntities, `{"ids": []}`, "ids"},
		{ToolDeleteEntities, `{"ids": [1, 2]}`, "ids"},
		{ToolDeleteEntities, `{"ids": ["article-1", ""]}`, "ids[1]"},
		{ToolDeleteEntities, `{"id": "article-1"}`, "id"},
		{ToolDeleteEntities, `"article-1"`, "JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.tool+" "+tt.args, func(t *testing.T) {
			r := call(t, s, tt.tool, Request{CallID: "bad", Arguments: json.RawMessage(tt.args)})
			if r.Call == nil || !r.Call.IsError || !strings.Contains(text(r.Call), tt.field) {
				t.Errorf("got %s, want isError naming %q", dump(r), tt.field)
			}
		})
	}
	if l, _ := s.Ledger(t.Context()); len(l) != 0 {
		t.Errorf("bad calls recorded effects: %v", l)
	}
	if all, _ := s.Entities(t.Context()); len(all) != 30 {
		t.Errorf("bad calls changed entities: %d left", len(all))
	}
	// No call ID: a mutating tool refuses rather than risk a double effect.
	if r := call(t, s, ToolDeleteEntities, Request{Arguments: args(map[string]any{"ids": []string{"page-1"}})}); !r.Call.IsError {
		t.Errorf("delete without call ID = %s, want isError", dump(r))
	}
}

// A crash between recording the ledger and applying the effect: the next
// execution applies it, once.
func TestCrashBeforeApply(t *testing.T) {
	s, _ := newSite(t)
	req := Request{CallID: "crashy", Arguments: args(map[string]any{"ids": []string{"article-2"}})}
	plan := func(context.Context) (*ledgerRecord, *Result, error) {
		return &ledgerRecord{IDs: []string{"article-2"}, Result: schema.ErrorResult("never mind")}, nil, nil
	}
	crash := errors.New("crash")
	_, err := s.once(t.Context(), ToolDeleteEntities, req, plan, func(context.Context, *ledgerRecord) error { return crash })
	if !errors.Is(err, crash) {
		t.Fatalf("first execution err = %v, want crash", err)
	}
	if _, err := s.Entity(t.Context(), "article-2"); err != nil {
		t.Fatalf("article-2 gone before apply: %v", err)
	}
	applied := 0
	for range 2 {
		r, err := s.once(t.Context(), ToolDeleteEntities, req, plan, func(ctx context.Context, rec *ledgerRecord) error {
			applied++
			return s.kv.Delete(ctx, entityKey(rec.IDs[0]))
		})
		if err != nil || text(r.Call) != "never mind" {
			t.Fatalf("re-execution = %s, %v", dump(r), err)
		}
	}
	if applied != 1 {
		t.Errorf("effect applied %d times after the crash, want 1", applied)
	}
	if _, err := s.Entity(t.Context(), "article-2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("article-2 after re-execution: %v, want ErrNotFound", err)
	}
}
