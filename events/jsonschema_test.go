package events

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/parley-dev/parley/schema"
)

// update rewrites the generated files (schema/*.json, docs/asyncapi.yaml,
// the catalogue section of docs/events.md) instead of comparing them.
var update = flag.Bool("update", false, "rewrite the generated contract files from the catalogue")

// repoRoot is the repository root, relative to this package.
const repoRoot = ".."

// jsonSchemaDraft is the dialect of the generated schemas: draft-07, the
// base of AsyncAPI 3.0's Schema Object, so docs/asyncapi.yaml can point at
// the files as they are.
const jsonSchemaDraft = "http://json-schema.org/draft-07/schema#"

// contentBlockSchema is an MCP content block (MCP 2025-06-18 schema,
// ContentBlock): one of the five block structs with its "type".
func contentBlockSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	s := &jsonschema.Schema{
		Description: "An MCP content block (MCP 2025-06-18 ContentBlock), told apart by type.",
		Type:        "object",
		Required:    []string{"type"},
	}
	for _, v := range []struct {
		typ string
		rt  reflect.Type
	}{
		{"text", reflect.TypeFor[schema.TextContent]()},
		{"image", reflect.TypeFor[schema.ImageContent]()},
		{"audio", reflect.TypeFor[schema.AudioContent]()},
		{"resource_link", reflect.TypeFor[schema.ResourceLink]()},
		{"resource", reflect.TypeFor[schema.EmbeddedResource]()},
	} {
		b, err := jsonschema.ForType(v.rt, forOptions(nil))
		if err != nil {
			t.Fatalf("schema of %s: %v", v.rt, err)
		}
		b.Properties["type"] = &jsonschema.Schema{Const: jsonschema.Ptr[any](v.typ)}
		b.Required = append([]string{"type"}, b.Required...)
		s.OneOf = append(s.OneOf, b)
	}
	return s
}

// blocksRef points at the content-block definition of a schema file.
const blocksRef = "#/definitions/contentBlock"

// forOptions are the type overrides for Go types whose JSON is not what
// reflection sees: custom marshalers, raw JSON, byte slices, interfaces.
// With blocks set, content blocks are a $ref to blocksRef (nil while
// building the blocks themselves, which contain none).
func forOptions(blocks *jsonschema.Schema) *jsonschema.ForOptions {
	anyJSON := &jsonschema.Schema{Description: "Any JSON value."}
	ts := map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): anyJSON,
		reflect.TypeFor[[]byte](): {Types: []string{"null", "string"}, ContentEncoding: "base64",
			Description: "Bytes, base64 (standard alphabet, padded), as Go encodes a []byte."},
		reflect.TypeFor[time.Time](): {Type: "string", Format: "date-time"},
		reflect.TypeFor[schema.ProgressToken](): {Types: []string{"string", "integer"},
			Description: "MCP ProgressToken: a string or an integer."},
		reflect.TypeFor[schema.ElicitAction](): {Type: "string",
			Enum: []any{string(schema.ActionAccept), string(schema.ActionDecline), string(schema.ActionCancel)}},
		reflect.TypeFor[schema.Role](): {Type: "string", Enum: []any{string(schema.RoleUser), string(schema.RoleAssistant)}},
		reflect.TypeFor[schema.Meta](): {Type: "object",
			Description: "MCP _meta: keys are reverse-DNS prefixed names (e.g. drupal.org/ai.elicitation_id)."},
	}
	if blocks != nil {
		ref := &jsonschema.Schema{Ref: blocksRef}
		ts[reflect.TypeFor[schema.Content]()] = ref
		ts[reflect.TypeFor[schema.ContentList]()] = &jsonschema.Schema{Types: []string{"null", "array"}, Items: ref}
	}
	return &jsonschema.ForOptions{TypeSchemas: ts}
}

// openObjects drops reflection's "additionalProperties": false from every
// object: parley may add optional members to a type without renaming it,
// and readers ignore members they do not know (docs/events.md).
func openObjects(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if ap := s.AdditionalProperties; ap != nil && ap.Not != nil && reflect.ValueOf(*ap.Not).IsZero() {
		s.AdditionalProperties = nil
	} else if ap != nil && s.Type == "object" {
		// A Go map: nil encodes as null.
		s.Type, s.Types = "", []string{"null", "object"}
	}
	openObjects(s.AdditionalProperties)
	openObjects(s.Items)
	for _, p := range s.Properties {
		openObjects(p)
	}
	for _, o := range s.OneOf {
		openObjects(o)
	}
}

// generateSchema returns the JSON Schema file of e: the payload type's
// schema with the dataschema URI as $id.
func generateSchema(t *testing.T, e Entry) []byte {
	t.Helper()
	blocks := contentBlockSchema(t)
	s, err := jsonschema.ForType(e.Payload, forOptions(blocks))
	if err != nil {
		t.Fatalf("%s: %v", e.Type, err)
	}
	body, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(body, []byte(blocksRef)) {
		s.Definitions = map[string]*jsonschema.Schema{"contentBlock": blocks}
	}
	openObjects(s)
	for _, d := range s.Definitions {
		openObjects(d)
		for _, o := range d.OneOf {
			openObjects(o)
		}
	}
	// The identifying keywords first, for a person reading the file.
	var out bytes.Buffer
	out.WriteString("{\n")
	for _, kv := range [][2]string{
		{"$schema", jsonSchemaDraft},
		{"$id", e.DataSchema()},
		{"title", string(e.Type)},
		{"description", fmt.Sprintf("Data of the CloudEvent %s (%s event; Go type %s). %s",
			e.Type, e.Visibility, e.Payload, e.Summary)},
	} {
		v, _ := json.Marshal(kv[1])
		fmt.Fprintf(&out, "  %q: %s,\n", kv[0], v)
	}
	rest, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out.Write(bytes.TrimPrefix(rest, []byte("{\n")))
	return append(out.Bytes(), '\n')
}

// checkGenerated compares a generated file with the repository's, or
// writes it with -update.
func checkGenerated(t *testing.T, rel string, want []byte) {
	t.Helper()
	path := filepath.Join(repoRoot, filepath.FromSlash(rel))
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it: go test ./events -run %s -update)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: regenerate it with go test ./events -run %s -update, and review the diff", rel, strings.SplitN(t.Name(), "/", 2)[0])
	}
}

// TestJSONSchemas checks that schema/<type>.json is the JSON Schema of each
// catalogue entry's payload type, and that no other schema/dev.parley.*.json
// file is left over. -update rewrites them.
func TestJSONSchemas(t *testing.T) {
	want := map[string]bool{}
	for _, e := range Catalog() {
		want[filepath.Base(e.SchemaFile())] = true
		t.Run(string(e.Type), func(t *testing.T) { checkGenerated(t, e.SchemaFile(), generateSchema(t, e)) })
	}
	files, _ := filepath.Glob(filepath.Join(repoRoot, "schema", "dev.parley.*.json"))
	for _, f := range files {
		if !want[filepath.Base(f)] {
			if *update {
				_ = os.Remove(f)
				continue
			}
			t.Errorf("%s is no catalogue type's schema; remove it", f)
		}
	}
}

// compileSchemas compiles every schema file with a validator independent of
// the generator (santhosh-tekuri/jsonschema, draft-07 as the files say).
func compileSchemas(t *testing.T) map[Type]*sjs.Schema {
	t.Helper()
	c := sjs.NewCompiler()
	c.AssertFormat()
	out := map[Type]*sjs.Schema{}
	for _, e := range Catalog() {
		f, err := os.Open(filepath.Join(repoRoot, e.SchemaFile()))
		if err != nil {
			t.Fatalf("%s: dataschema %s: %v", e.Type, e.DataSchema(), err)
		}
		doc, err := sjs.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", e.SchemaFile(), err)
		}
		if err := c.AddResource(e.DataSchema(), doc); err != nil {
			t.Fatal(err)
		}
		if out[e.Type], err = c.Compile(e.DataSchema()); err != nil {
			t.Fatalf("%s: %v", e.SchemaFile(), err)
		}
	}
	return out
}

// payloadSamples are realistic payloads of every catalogue type, with the
// custom JSON shapes (content blocks, forms, progress tokens, raw JSON,
// bytes, nil maps and slices).
func payloadSamples(t *testing.T) map[Type][]any {
	t.Helper()
	confirm := *schema.NewConfirmationRequest(&schema.Tool{Name: "delete_entities", InputSchema: json.RawMessage(`{"type":"object"}`)},
		schema.ToolCall{ID: "call_0_0", Name: "delete_entities", Arguments: json.RawMessage(`{"ids":["1"]}`)})
	confirm.Meta["drupal.org/ai.elicitation_id"] = "e1"
	msg := schema.ChatMessage{Role: schema.RoleAssistant, Text: "Done.", Content: schema.ContentList{
		schema.Text("Done."),
		&schema.ResourceLink{URI: "https://example.com/node/1", Name: "node/1"},
		&schema.ImageContent{Data: "iVBORw0KGgo=", MIMEType: "image/png"},
	}, Meta: schema.Meta{"dev.parley/usage": map[string]any{"inputTokens": 3, "outputTokens": 4}}}
	total := 4.0
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	approval := Approval{ID: "a1", Thread: "th", Agent: "default", Tool: "delete_entities", Scope: StandingScopeThread,
		GrantedBy: Identity{Principal: "gateway", OnBehalfOf: "ann"}, GrantedAt: at, ExpiresAt: at.Add(time.Hour),
		ElicitationID: "e1", Destructive: true, Uses: 2}
	user := schema.ChatMessage{Role: schema.RoleUser, Text: "delete node 1",
		Content: schema.ContentList{&schema.EmbeddedResource{Resource: schema.ResourceContents{URI: "file:///a.txt", Text: jsonschema.Ptr("a")}}}}
	call := schema.ToolCall{ID: "call_0_0", Name: "delete_entities", Arguments: json.RawMessage(`{"ids":["1"]}`)}
	answer := schema.ElicitResult{Action: schema.ActionDecline, Content: map[string]any{"instructions": "not now"}}
	violations := []schema.Violation{{Path: "message.text", Rule: "required"}}
	return map[Type][]any{
		TypeTurnPaused: {TurnPaused{TurnID: "t1", RequestEventID: "ev1", ElicitationIDs: []string{"e1"},
			Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "Delete 1 entity?", Meta: schema.Meta{"drupal.org/ai.elicitation_id": "e1"}}}},
		TypeElicitationRejected:  {ElicitationRejected{ElicitationID: "e1", RespondedEventID: "ev2", Reason: RejectInvalidContent, Errors: violations}},
		TypeElicitationExpired:   {ElicitationExpired{TurnID: "t1", ElicitationIDs: []string{"e1", "e2"}}},
		TypeElicitationCancelled: {ElicitationCancelled{TurnID: "t1", ElicitationIDs: []string{"e1"}, Reason: "a new user message started a new turn"}},
		TypeTurnFailed:           {TurnFailed{TurnID: "t1", Reason: "model_unavailable", Detail: "HTTP 503 after 3 attempts"}, TurnFailed{Reason: "dead_lettered", Detail: "x"}},
		TypeTurnRejected:         {TurnRejected{RequestEventID: "ev1", Reason: RejectInvalidEvent, Errors: violations}},
		TypeMessageDelta: {MessageDelta{TurnID: "t1", RunID: "r1", Step: 1, Generation: "g", Attempt: 1, Seq: 0,
			Chunk: schema.ChatMessage{Role: schema.RoleAssistant, Text: "Do"}}},
		TypeRunRequested: {RunRequested{RunID: "r1", TurnID: "t1", Thread: "th", Agent: "default", Messages: []schema.ChatMessage{user, msg}}},
		TypeRunResumed: {RunResumed{RunID: "r1", TurnID: "t1", Thread: "th", Agent: "default", Snapshot: json.RawMessage(`{"step":1}`),
			Answers: []Answer{{ElicitationID: "e1", Result: answer, AnsweredBy: Identity{Principal: "integrator", OnBehalfOf: "ann"}, AnsweredAt: at}}}},
		TypeRunCompleted: {RunCompleted{RunID: "r1", TurnID: "t1", Message: msg}},
		TypeRunFailed:    {RunFailed{RunID: "r1", TurnID: "t1", Reason: "max_steps", Detail: "16 model calls"}},
		TypeToolCallRequested: {ToolCallRequested{RunID: "r1", Thread: "th", Agent: "default", Call: call, Round: 1,
			InputResponses: map[string]schema.ElicitResult{"q1": answer}, RequestState: "s"}},
		TypePreExecuteRequested: {PreExecuteRequest{Agent: "default", Thread: "th", RunID: "r1", Call: call,
			Tool: schema.Tool{Name: "delete_entities", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &schema.ToolAnnotations{}}}},
		TypePreExecuteDecided: {PolicyDecision{Decision: DecisionAllow, Policy: "gate", ConfigVersion: "v1"}, PolicyDecision{Decision: DecisionConfirm, Policy: "gate", Reason: "deletes are confirmed"}},
		TypeTurnRequested:     {TurnRequested{Agent: "default", Message: schema.ChatMessage{Role: schema.RoleUser, Text: "hi"}, User: "ann"}},
		TypeElicitationResponded: {ElicitationResponded{ElicitationID: "e1", Action: schema.ActionAccept,
			Content: map[string]any{"instructions": "go", "n": 2, "tags": []string{"a"}}}},
		TypeElicitationRequested:    {confirm},
		TypeLookupEntitiesRequested: {LookupEntitiesRequest{Query: "abo", TargetType: "node", Bundles: []string{"page"}, Limit: 5}},
		TypeLookupEntitiesAnswered: {LookupEntitiesReply{Entities: []LookupEntity{{ID: "7", Label: "About us", EntityType: "node",
			Bundle: "page", Status: "published", URI: "https://example.com/node/7"}}, Truncated: true}},
		TypeResolveReferencesRequested: {ResolveReferencesRequest{User: Identity{Principal: "gateway", OnBehalfOf: "ann"},
			References: []schema.Entity{{EntityType: "page", ID: "page-1", Label: "About us"}}}},
		TypeResolveReferencesAnswered: {ResolveReferencesReply{Results: []ReferenceResult{{Available: true,
			Entity: schema.Entity{EntityType: "page", ID: "page-1", Label: "About us"}, URI: "https://example.com/node/page-1",
			Summary: "About us: the about us page"}, {}}}},
		TypeThreadStateRequested: {ThreadStateRequest{}, ThreadStateRequest{OnBehalfOf: "ann"}},
		TypeApprovalGranted:      {ApprovalGranted{Approval: approval}},
		TypeApprovalUsed:         {ApprovalUsed{Approval: approval, RunID: "r1", CallID: "call_1_0"}},
		TypeApprovalRevoked:      {ApprovalRevoked{Approval: approval, RevokedBy: Identity{Principal: "gateway", OnBehalfOf: "ann"}}},
		TypeApprovalsRequested:   {ApprovalsRequest{}, ApprovalsRequest{OnBehalfOf: "ann", Revoke: "delete_entities"}},
		TypeApprovalsAnswered: {ApprovalsReply{Thread: "th", Approvals: []Approval{approval}},
			ApprovalsReply{Thread: "th", Approvals: []Approval{}, Revoked: []Approval{approval}}, ApprovalsReply{Thread: "th", Forbidden: true}},
		TypeApprovalUseRequested: {ApprovalUseRequest{RunID: "r1", CallID: "call_1_0", Round: 0}},
		TypeApprovalUseAnswered:  {ApprovalUseReply{}, ApprovalUseReply{Approval: &approval}},
		TypeThreadStateAnswered: {ThreadStateReply{Thread: "th", State: "paused", TurnID: "t1", Pending: []schema.ElicitRequestParams{confirm},
			ExpiresAt: &at, Queued: 1}, ThreadStateReply{Thread: "th", Forbidden: true}},
		TypeTurnCompleted: {TurnCompleted{TurnID: "t1", Message: msg, Decisions: []DecisionRecord{{CallID: "call_0_0",
			Tool: "delete_entities", Decision: DecisionConfirm, ElicitationID: "e1", Action: schema.ActionAccept, AnsweredBy: Identity{Principal: "gateway", OnBehalfOf: "ann"}, AnsweredAt: at},
			{CallID: "call_1_0", Tool: "delete_entities", Decision: DecisionConfirm, StandingApproval: &StandingUse{ApprovalID: approval.ID,
				GrantedBy: approval.GrantedBy, GrantedAt: at, ExpiresAt: at.Add(time.Hour)}}}}},
		TypeProgress: {
			schema.Progress{ProgressToken: schema.StringToken("t1"), Progress: 1, Message: "Thinking…"},
			schema.Progress{ProgressToken: schema.IntToken(7), Progress: 2, Total: &total},
		},
		TypeRunPaused: {RunPaused{RunID: "r1", TurnID: "t1", Agent: "default", Snapshot: json.RawMessage(`{"step":1}`),
			Elicitations: []PendingElicitation{{ID: "e1", Kind: KindToolConfirmation, CallID: "call_0_0", Tool: "delete_entities",
				Request: confirm, Decision: &Decision{Decision: DecisionConfirm, Policy: "gate"}}}}},
		TypeToolResultReady: {ToolResult{RunID: "r1", CallID: "call_0_0", Result: &schema.CallToolResult{
			Content: msg.Content, StructuredContent: map[string]any{"total": 1}}}},
		TypeDeadLettered: {DeadLetter{Reason: "x", Stream: StreamChat, Consumer: "processor", Subject: "parley.chat.t.turn.requested",
			Headers: map[string][]string{"ce-id": {"1"}}, Body: []byte{0, 1, 2, 255}},
			DeadLetter{Reason: "no headers, no body", Stream: StreamTools, Consumer: "toolexec", Subject: "parley.tool.call.x"}},
	}
}

// TestJSONSchemasAcceptPayloads validates the JSON parley writes for every
// catalogue type (realistic samples of each) against the schema
// files, so a schema that forbids what the code sends fails here.
func TestJSONSchemasAcceptPayloads(t *testing.T) {
	compiled := compileSchemas(t)
	samples := payloadSamples(t)
	for _, e := range Catalog() {
		vals := samples[e.Type]
		if len(vals) == 0 {
			t.Errorf("%s: no sample payload; add one to payloadSamples", e.Type)
		}
		for i, v := range vals {
			if reflect.TypeOf(v) != e.Payload {
				t.Errorf("%s sample %d is a %T, the catalogue's payload is %s", e.Type, i, v, e.Payload)
			}
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%s sample %d: %v", e.Type, i, err)
			}
			doc, err := sjs.UnmarshalJSON(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if err := compiled[e.Type].Validate(doc); err != nil {
				t.Errorf("%s sample %d %s does not fit %s:\n%v", e.Type, i, b, e.SchemaFile(), err)
			}
		}
	}
}

// TestJSONSchemasRejectWrongShapes checks that the schemas are not vacuous:
// data of the wrong shape fails them.
func TestJSONSchemasRejectWrongShapes(t *testing.T) {
	compiled := compileSchemas(t)
	for _, tc := range []struct {
		typ  Type
		data string
	}{
		{TypeTurnRequested, `{"agent":"a"}`},                                                   // message required
		{TypeTurnRequested, `{"message":{"role":"robot","text":"x"}}`},                         // role enum
		{TypeTurnRequested, `{"message":{"role":"user","text":"x","content":[{"type":"x"}]}}`}, // block type
		{TypeTurnRequested, `{"message":{"role":"user","text":"x","content":[{"type":"text"}]}}`},
		{TypeElicitationResponded, `{"elicitationId":"e1","action":"maybe"}`},
		{TypeTurnCompleted, `{"turnId":"t","message":{"role":"assistant","text":"x"},"decisions":[{"callId":"c","tool":"t","decision":"allow","answeredAt":"yesterday"}]}`},
		{TypeProgress, `{"progressToken":1.5,"progress":1}`},
		{TypeDeadLettered, `{"reason":"r","stream":"s","consumer":"c","subject":"x","streamSeq":-1,"numDelivered":1,"headers":{},"body":""}`},
	} {
		doc, err := sjs.UnmarshalJSON(strings.NewReader(tc.data))
		if err != nil {
			t.Fatal(err)
		}
		if err := compiled[tc.typ].Validate(doc); err == nil {
			t.Errorf("%s accepted %s", tc.typ, tc.data)
		}
	}
}

// TestDataSchemaResolves checks that the dataschema URI New puts on every
// catalogue type's event is the entry's, and names a schema file present in
// the repository (the gateway and any static host serve schema/ at
// https://parley.dev/schema/).
func TestDataSchemaResolves(t *testing.T) {
	for _, e := range Catalog() {
		ev, err := New(SourceCLI, e.Type, "t1", reflect.New(e.Payload).Elem().Interface())
		if err != nil {
			t.Fatalf("%s: %v", e.Type, err)
		}
		uri := ev.DataSchema()
		if uri != e.DataSchema() {
			t.Errorf("%s: New sets dataschema %q, the catalogue says %q", e.Type, uri, e.DataSchema())
		}
		rel, ok := strings.CutPrefix(uri, DataSchemaBase)
		if !ok {
			t.Errorf("%s: dataschema %q is not under %s", e.Type, uri, DataSchemaBase)
			continue
		}
		if _, err := os.Stat(filepath.Join(repoRoot, "schema", rel)); err != nil {
			t.Errorf("%s: dataschema %s is dangling: %v", e.Type, uri, err)
		}
	}
}
