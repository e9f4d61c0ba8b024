package events

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// typeConstants reads every constant of type Type declared in the package's
// non-test files, so a type added without a catalogue entry is caught.
func typeConstants(t *testing.T) map[Type]string {
	t.Helper()
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	out := map[Type]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Type" {
					continue
				}
				for i, name := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: %s is not a string literal", f, name.Name)
					}
					out[Type(strings.Trim(lit.Value, `"`))] = name.Name
				}
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d Type constants: %v", len(out), out)
	}
	return out
}

// TestCatalogComplete checks that the catalogue has exactly one entry per
// Type constant of the package, and that every entry is filled in.
func TestCatalogComplete(t *testing.T) {
	consts := typeConstants(t)
	seen := map[Type]bool{}
	for _, e := range Catalog() {
		if seen[e.Type] {
			t.Errorf("%s: listed twice", e.Type)
		}
		seen[e.Type] = true
		if _, ok := consts[e.Type]; !ok {
			t.Errorf("%s: in the catalogue but no Type constant declares it", e.Type)
		}
		if e.Summary == "" || e.Payload == nil || len(e.Routes) == 0 {
			t.Errorf("%s: summary, payload and routes are required: %+v", e.Type, e)
		}
		if e.Visibility != Public && e.Visibility != Internal {
			t.Errorf("%s: visibility %q", e.Type, e.Visibility)
		}
		if e.Reply != "" {
			if _, ok := Lookup(e.Reply); !ok {
				t.Errorf("%s: reply type %s is not in the catalogue", e.Type, e.Reply)
			}
		}
		if got, ok := Lookup(e.Type); !ok || got.Type != e.Type {
			t.Errorf("Lookup(%s) = %v, %v", e.Type, got.Type, ok)
		}
		for _, r := range e.Routes {
			if len(r.Publishers) == 0 || len(r.Consumers) == 0 {
				t.Errorf("%s %s: publishers and consumers are required", e.Type, r.Subject)
			}
			if e.Visibility == Public && r.Stream != StreamChat && r.Stream != StreamInput {
				t.Errorf("%s: public, but stored in %q", e.Type, r.Stream)
			}
		}
	}
	for v, name := range consts {
		if !seen[v] {
			t.Errorf("%s (%s) has no catalogue entry in catalog.go", name, v)
		}
	}
	if _, ok := Lookup("dev.parley.nope"); ok {
		t.Error("Lookup found an undefined type")
	}
}

// streamSubjects are the subjects each stream holds (bus
// EnsureStreams).
var streamSubjects = map[string][]string{
	StreamChat:       {SubjectChatAll, SubjectRefusedAll},
	StreamInput:      {SubjectInputAll},
	StreamAgent:      {SubjectRunRequested, SubjectRunResumed, SubjectToolResAll},
	StreamRuns:       {SubjectRunCompleted, SubjectRunPaused, SubjectRunFailed},
	StreamTools:      {SubjectToolCallAll},
	StreamDeadLetter: {SubjectDeadLetters},
}

// subjectMatches reports whether the NATS filter f matches every subject
// the filter s matches (s's wildcards are tokens of any value).
func subjectMatches(f, s string) bool {
	ft, st := strings.Split(f, "."), strings.Split(s, ".")
	for i, tok := range ft {
		if tok == ">" {
			return len(st) > i
		}
		if i >= len(st) || (tok != "*" && tok != st[i]) || (tok != "*" && st[i] == "*") {
			return false
		}
	}
	return len(ft) == len(st)
}

// TestCatalogRoutes checks every route against the code that builds and
// stores its subjects: the builder functions give the same subject for the
// same parameters, and the route's stream holds the subject.
func TestCatalogRoutes(t *testing.T) {
	builders := map[Type]func(p []string) string{
		TypeToolCallRequested:    func(p []string) string { return ToolCallSubject(p[0]) },
		TypeToolResultReady:      func(p []string) string { return ToolResultSubject(p[0]) },
		TypePreExecuteRequested:  func(p []string) string { return PreExecuteSubject(p[0], p[1]) },
		TypeDeadLettered:         func(p []string) string { return DeadLetterSubject(p[0], p[1]) },
		TypeThreadStateRequested: func(p []string) string { return ThreadStateSubject(p[0], p[1]) },
		TypeApprovalsRequested:   func(p []string) string { return ApprovalsSubject(p[0], p[1]) },
		TypeApprovalUseRequested: func(p []string) string { return ApprovalUseSubject(p[0], p[1], p[2]) },
	}
	chatSuffix := map[Type]string{
		TypeTurnRequested: ChatTurnRequested, TypeTurnPaused: ChatTurnPaused, TypeTurnCompleted: ChatTurnCompleted,
		TypeTurnFailed: ChatTurnFailed, TypeTurnRejected: ChatTurnRejected,
		TypeElicitationRequested: ChatElicitationRequested, TypeElicitationResponded: ChatElicitationResponded,
		TypeElicitationRejected: ChatElicitationRejected, TypeElicitationExpired: ChatElicitationExpired,
		TypeElicitationCancelled: ChatElicitationCancelled, TypeProgress: ChatProgress, TypeMessageDelta: ChatMessageDelta,
		TypeApprovalGranted: ChatApprovalGranted, TypeApprovalUsed: ChatApprovalUsed, TypeApprovalRevoked: ChatApprovalRevoked,
	}
	for _, e := range Catalog() {
		for _, r := range e.Routes {
			where := string(e.Type) + " " + r.Subject
			if r.Subject == "" {
				if e.Type != TypePreExecuteDecided && e.Type != TypeLookupEntitiesAnswered && e.Type != TypeResolveReferencesAnswered &&
					e.Type != TypeThreadStateAnswered && e.Type != TypeApprovalsAnswered && e.Type != TypeApprovalUseAnswered {
					t.Errorf("%s: no subject (only a reply travels on the requester's inbox)", where)
				}
				continue
			}
			params := r.Params()
			values := make([]string, len(params))
			for i := range params {
				values[i] = "v" + string(rune('0'+i))
			}
			got, err := r.SubjectFor(values...)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var want string
			switch {
			case strings.HasPrefix(r.Subject, refusedPattern):
				want = RefusedSubject(values[0], values[1], chatSuffix[e.Type])
				if p, th, suffix, ok := ParseRefusedSubject(got); !ok || p != values[0] || th != values[1] || suffix != chatSuffix[e.Type] {
					t.Errorf("%s: ParseRefusedSubject(%s) = %s, %s, %s, %v", where, got, p, th, suffix, ok)
				}
			case r.Stream == StreamInput:
				want = InputSubject(values[0], values[1], chatSuffix[e.Type])
				if p, th, suffix, err := ParseInputSubject(got); err != nil || p != values[0] || th != values[1] || suffix != chatSuffix[e.Type] {
					t.Errorf("%s: ParseInputSubject(%s) = %s, %s, %s, %v", where, got, p, th, suffix, err)
				}
			case chatSuffix[e.Type] != "":
				want = ChatSubject(values[0], chatSuffix[e.Type])
				if th, suffix, ok := ParseChatSubject(got); !ok || th != values[0] || suffix != chatSuffix[e.Type] {
					t.Errorf("%s: ParseChatSubject(%s) = %s, %s, %v", where, got, th, suffix, ok)
				}
			case builders[e.Type] != nil:
				want = builders[e.Type](values)
			default:
				want = r.Subject // a fixed subject
				if len(params) != 0 {
					t.Errorf("%s: has parameters but no builder to check", where)
				}
			}
			if got != want {
				t.Errorf("%s: SubjectFor(%v) = %s, the builder gives %s", where, values, got, want)
			}
			if r.Stream == "" {
				if e.Reply == "" {
					t.Errorf("%s: no stream, and not a request-reply", where)
				}
				continue
			}
			subs, ok := streamSubjects[r.Stream]
			if !ok {
				t.Errorf("%s: unknown stream %s", where, r.Stream)
			}
			if !slices.ContainsFunc(subs, func(f string) bool { return subjectMatches(f, r.Filter()) }) {
				t.Errorf("%s: stream %s (subjects %v) does not hold %s", where, r.Stream, subs, r.Filter())
			}
			for other, osubs := range streamSubjects {
				if other != r.Stream && slices.ContainsFunc(osubs, func(f string) bool { return subjectMatches(f, r.Filter()) }) {
					t.Errorf("%s: also held by stream %s", where, other)
				}
			}
		}
	}
}

func TestRouteSubjectFor(t *testing.T) {
	r := Route{Subject: "parley.tool.pre_execute.{agent}.{tool}"}
	if got, want := r.Params(), []string{"agent", "tool"}; !slices.Equal(got, want) {
		t.Errorf("Params() = %v, want %v", got, want)
	}
	if got := r.Filter(); got != "parley.tool.pre_execute.*.*" {
		t.Errorf("Filter() = %s", got)
	}
	if got, err := r.SubjectFor("a", "b"); err != nil || got != "parley.tool.pre_execute.a.b" {
		t.Errorf("SubjectFor(a, b) = %s, %v", got, err)
	}
	if _, err := r.SubjectFor("a"); err == nil || !strings.Contains(err.Error(), "1 values for parameters [agent tool]") {
		t.Errorf("SubjectFor(a): %v", err)
	}
	if _, err := r.SubjectFor("a", "b.c"); err == nil || !strings.HasPrefix(err.Error(), "tool: ") {
		t.Errorf("SubjectFor(a, b.c): %v, want an error naming tool", err)
	}
	for _, tc := range []struct {
		f, s string
		want bool
	}{
		{"parley.chat.>", "parley.chat.*.turn.requested", true},
		{"parley.tool.call.>", "parley.tool.call.*", true},
		{"parley.agent.run.requested", "parley.agent.run.requested", true},
		{"parley.agent.run.requested", "parley.agent.run.*", false},
		{"parley.chat.>", "parley.chat", false},
		{"parley.dlq.>", "parley.chat.*.progress", false},
	} {
		if got := subjectMatches(tc.f, tc.s); got != tc.want {
			t.Errorf("subjectMatches(%s, %s) = %v", tc.f, tc.s, got)
		}
	}
}
