package events

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/goccy/go-yaml"

	"github.com/parley-dev/parley/internal/testskip"
)

// asyncAPIFile is the generated AsyncAPI document, from the repository root.
const asyncAPIFile = "docs/asyncapi.yaml"

// paramDescriptions describes each subject parameter of the catalogue.
var paramDescriptions = map[string]string{
	"principal": "The publisher's NATS principal: the server lets each integrator publish only under its own (1-128 of A-Z a-z 0-9 _ -).",
	"thread":    "The thread ID (also the CloudEvents subject): 1-128 of A-Z a-z 0-9 _ -.",
	"tool":      "The tool's name: 1-128 of A-Z a-z 0-9 _ -.",
	"agent":     "The agent's name: 1-128 of A-Z a-z 0-9 _ -.",
	"run":       "The agent run's ID.",
	"stream":    "The stream of the message that could not be handled.",
	"consumer":  "The durable consumer that could not handle it.",
}

// messageID turns a CloudEvents type into an AsyncAPI component name:
// dev.parley.agent.run.requested -> agentRunRequested.
func messageID(t Type) string {
	var b strings.Builder
	up := false
	for _, r := range strings.TrimPrefix(string(t), "dev.parley.") {
		if r == '.' || r == '_' {
			up = true
			continue
		}
		if up {
			r = unicode.ToUpper(r)
			up = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

type ms = yaml.MapSlice

func kv(k string, v any) yaml.MapItem { return yaml.MapItem{Key: k, Value: v} }

func ref(path string) ms { return ms{kv("$ref", path)} }

// channelID names a route's channel: the message's ID, suffixed by the
// route index when a type travels on more than one subject.
func channelID(e Entry, i int) string {
	if i == 0 {
		return messageID(e.Type)
	}
	return fmt.Sprintf("%s%d", messageID(e.Type), i+1)
}

// ceHeaders is the NATS header schema of a message of type typ: the
// CloudEvents binary-mode attributes (docs/events.md).
func ceHeaders(e Entry) ms {
	str := func(desc string) ms { return ms{kv("type", "string"), kv("description", desc)} }
	return ms{
		kv("type", "object"),
		kv("required", []string{"ce-specversion", "ce-id", "ce-source", "ce-type"}),
		kv("properties", ms{
			kv("ce-specversion", ms{kv("const", "1.0")}),
			kv("ce-id", str("Event ID (UUIDv7, or UUIDv5 for events derived from others); also Nats-Msg-Id.")),
			kv("ce-source", str("URI-reference of the producer, /parley/<worker> for parley's own events.")),
			kv("ce-type", ms{kv("const", e.Type)}),
			kv("ce-subject", str("The thread ID.")),
			kv("ce-time", ms{kv("type", "string"), kv("format", "date-time")}),
			kv("ce-datacontenttype", ms{kv("const", DataContentTypeJSON)}),
			kv("ce-dataschema", ms{kv("const", e.DataSchema())}),
			kv("ce-turnid", str("The turn's ID (extension turnid), where it applies.")),
			kv("ce-runid", str("The agent run's ID (extension runid), where it applies.")),
			kv("traceparent", str("W3C trace context of the hop.")),
			kv("tracestate", str("W3C trace state of the hop.")),
			kv("Nats-Msg-Id", str("The event ID: JetStream drops a copy inside the stream's duplicate window.")),
		}),
	}
}

// generateAsyncAPI renders docs/asyncapi.yaml from the catalogue: one
// channel per route (its subject as the address), one message per type
// whose payload is the type's JSON Schema file, and one send or receive
// operation per publishing or consuming role.
func generateAsyncAPI(t *testing.T) []byte {
	t.Helper()
	entries := Catalog()
	var channels, operations, messages ms
	for _, e := range entries {
		mid := messageID(e.Type)
		tag := ms{kv("name", string(e.Visibility))}
		messages = append(messages, kv(mid, ms{
			kv("name", e.Type),
			kv("title", e.Type),
			kv("summary", e.Summary),
			kv("contentType", DataContentTypeJSON),
			kv("headers", ceHeaders(e)),
			kv("payload", ref("../"+e.SchemaFile())),
			kv("tags", []ms{tag}),
		}))
		for i, r := range e.Routes {
			cid := channelID(e, i)
			ch := ms{}
			if r.Subject == "" {
				ch = append(ch, kv("address", nil))
				desc := fmt.Sprintf("The requester's inbox: the reply to %s.", strings.Join(requestsOf(entries, e.Type), ", "))
				if e.Type == TypePreExecuteDecided {
					desc = "The requester's inbox, <reply subject>.<policy> (_INBOX_agent.pre_execute.<unique>.<policy>): the reply to " +
						strings.Join(requestsOf(entries, e.Type), ", ") + ", on which only the policy's principal may publish; the agent reads the policy from this subject."
				}
				ch = append(ch, kv("description", desc))
			} else {
				ch = append(ch, kv("address", r.Subject))
				desc := "Core NATS request-reply (not stored)."
				if r.Stream != "" {
					desc = "Stored in the JetStream stream " + r.Stream + "."
				}
				ch = append(ch, kv("description", desc))
			}
			ch = append(ch, kv("messages", ms{kv(mid, ref("#/components/messages/"+mid))}))
			if params := r.Params(); len(params) > 0 {
				var ps ms
				for _, p := range params {
					d, ok := paramDescriptions[p]
					if !ok {
						t.Errorf("%s: parameter %q has no description in paramDescriptions", e.Type, p)
					}
					ps = append(ps, kv(p, ms{kv("description", d)}))
				}
				ch = append(ch, kv("parameters", ps))
			}
			ch = append(ch, kv("tags", []ms{tag}))
			channels = append(channels, kv(cid, ch))

			add := func(action string, roles []Role) {
				for _, role := range roles {
					op := ms{
						kv("action", action),
						kv("channel", ref("#/channels/"+cid)),
						kv("summary", fmt.Sprintf("%s %ss %s.", role, action, e.Type)),
						kv("messages", []ms{ref("#/channels/" + cid + "/messages/" + mid)}),
						kv("tags", []ms{tag, {kv("name", string(role))}}),
					}
					if e.Reply != "" {
						rid := channelID(mustLookup(t, e.Reply), 0)
						op = append(op, kv("reply", ms{
							kv("channel", ref("#/channels/"+rid)),
							kv("messages", []ms{ref("#/channels/" + rid + "/messages/" + messageID(e.Reply))}),
						}))
					}
					operations = append(operations, kv(fmt.Sprintf("%s%s%s", role, capitalize(action), capitalize(cid)), op))
				}
			}
			if r.Subject == "" {
				continue // a reply: sent and received as part of its request's operations
			}
			add("send", r.Publishers)
			add("receive", r.Consumers)
		}
	}
	doc := ms{
		kv("asyncapi", "3.0.0"),
		kv("info", ms{
			kv("title", "parley events"),
			kv("version", "1.0.0"),
			kv("description", "The CloudEvents parley's workers, policy services and integrators exchange over NATS "+
				"(binary content mode: attributes as ce-* headers, JSON data as the body). "+
				"Generated from events.Catalog and the JSON Schemas in schema/ by "+
				"`go test ./events -run TestAsyncAPI -update`; do not edit by hand. docs/events.md explains each event. "+
				"Operations are written from each role's side: the role sends or receives the message."),
		}),
		kv("defaultContentType", DataContentTypeJSON),
		kv("servers", ms{kv("nats", ms{
			kv("host", "127.0.0.1:4222"),
			kv("protocol", "nats"),
			kv("description", "A NATS server with JetStream (parley dev listens here; set --nats elsewhere)."),
		})}),
		kv("channels", channels),
		kv("operations", operations),
		kv("components", ms{kv("messages", messages)}),
	}
	b, err := yaml.MarshalWithOptions(doc, yaml.IndentSequence(true), yaml.UseLiteralStyleIfMultiline(true))
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("# Generated by `go test ./events -run TestAsyncAPI -update` from events/catalog.go\n# and schema/*.json. Do not edit by hand.\n"), b...)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func mustLookup(t *testing.T, typ Type) Entry {
	t.Helper()
	e, ok := Lookup(typ)
	if !ok {
		t.Fatalf("%s is not in the catalogue", typ)
	}
	return e
}

// requestsOf lists the types whose reply is typ.
func requestsOf(entries []Entry, typ Type) []string {
	var out []string
	for _, e := range entries {
		if e.Reply == typ {
			out = append(out, string(e.Type))
		}
	}
	return out
}

// TestAsyncAPI checks that docs/asyncapi.yaml is what the catalogue and the
// schema files generate; -update rewrites it.
func TestAsyncAPI(t *testing.T) {
	got := generateAsyncAPI(t)
	checkGenerated(t, asyncAPIFile, got)

	// Every type and subject of the catalogue is in it.
	for _, e := range Catalog() {
		if !bytes.Contains(got, []byte("name: "+e.Type+"\n")) {
			t.Errorf("%s: no message named for it", e.Type)
		}
		for _, r := range e.Routes {
			if r.Subject != "" && !bytes.Contains(got, []byte("address: "+r.Subject+"\n")) {
				t.Errorf("%s: no channel with address %s", e.Type, r.Subject)
			}
		}
	}
}

// asyncAPIValidator is the directory with the pinned @asyncapi/parser
// (package.json, package-lock.json; `npm ci` installs it).
const asyncAPIValidator = "testdata/asyncapi"

// TestAsyncAPIValidates parses docs/asyncapi.yaml with the AsyncAPI
// Initiative's own parser (@asyncapi/parser, pinned in
// testdata/asyncapi/package-lock.json), which checks it against the
// AsyncAPI 3.0 schema, resolves every $ref (the payload schemas in
// schema/) and reports rule violations; any error fails the test. It skips
// when node or the installed parser is missing, unless CI is set.
func TestAsyncAPIValidates(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testskip.Skip(t, testskip.AsyncAPI, "node is not installed")
	}
	if _, err := os.Stat(filepath.Join(asyncAPIValidator, "node_modules", "@asyncapi", "parser")); err != nil {
		testskip.Skip(t, testskip.AsyncAPI, fmt.Sprintf("@asyncapi/parser is not installed: %v", err))
	}
	doc, err := filepath.Abs(filepath.Join(repoRoot, asyncAPIFile))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "validate.mjs", doc)
	cmd.Dir = asyncAPIValidator
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("@asyncapi/parser rejects %s: %v\n%s", asyncAPIFile, err, out)
	}
	// The parser reports what it read; check it saw the whole catalogue.
	var summary struct{ channels, operations, messages int }
	if _, err := fmt.Sscanf(lastLine(out), "ok: %d channels, %d operations, %d messages",
		&summary.channels, &summary.operations, &summary.messages); err != nil {
		t.Fatalf("unexpected validator output: %v\n%s", err, out)
	}
	wantChannels, wantMessages, wantOps := 0, len(Catalog()), 0
	for _, e := range Catalog() {
		wantChannels += len(e.Routes)
		for _, r := range e.Routes {
			if r.Subject != "" {
				wantOps += len(r.Publishers) + len(r.Consumers)
			}
		}
	}
	if summary.channels != wantChannels || summary.messages != wantMessages || summary.operations != wantOps {
		t.Errorf("parser read %+v; the catalogue has %d channels, %d operations, %d messages\n%s",
			summary, wantChannels, wantOps, wantMessages, out)
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// TestEventsDocListsCatalog checks that docs/events.md lists every type and
// subject of the catalogue: its generated section (between the
// "catalogue:begin" and "catalogue:end" markers) is the table the catalogue
// renders; -update rewrites that section and nothing else.
func TestEventsDocListsCatalog(t *testing.T) {
	const begin, end = "<!-- catalogue:begin (generated by go test ./events -run TestEventsDocListsCatalog -update) -->\n", "<!-- catalogue:end -->\n"
	var b strings.Builder
	b.WriteString(begin)
	b.WriteString("| type | subject | stream | visibility | published by | consumed by | data (JSON Schema) |\n|---|---|---|---|---|---|---|\n")
	for _, e := range Catalog() {
		for _, r := range e.Routes {
			subject, stream := "`"+r.Subject+"`", "`"+r.Stream+"`"
			if r.Subject == "" {
				subject = "the request's reply inbox"
			}
			if r.Stream == "" {
				stream = "core NATS (request-reply)"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | [`%s`](../%s) |\n", e.Type, subject, stream, e.Visibility,
				joinRoles(r.Publishers), joinRoles(r.Consumers), e.Payload, e.SchemaFile())
		}
	}
	b.WriteString(end)
	section := b.String()

	path := filepath.Join(repoRoot, "docs", "events.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if *update {
		if i < 0 || j < i {
			text = strings.TrimRight(text, "\n") + "\n\n## Catalogue\n\nEvery event type, where it travels and who sends and reads it, from `events.Catalog`. " +
				"Each event's `dataschema` URI, `https://parley.dev/schema/<type>.json`, is the file `schema/<type>.json` of this repository, also served by `parley gateway` at `GET /schema/<type>.json`; " +
				"[asyncapi.yaml](asyncapi.yaml) is the same contract as an AsyncAPI 3.0 document.\n\n" + section
		} else {
			text = text[:i] + section + text[j+len(end):]
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if i < 0 || j < i {
		t.Fatalf("docs/events.md has no generated catalogue section; run go test ./events -run %s -update", t.Name())
	}
	if text[i:j+len(end)] != section {
		t.Errorf("docs/events.md's catalogue section is stale; run go test ./events -run %s -update", t.Name())
	}

	// The other way round: every type and subject the prose names is in
	// the catalogue, so a new event documented there needs an entry.
	prose := text[:i] + text[j+len(end):]
	for _, m := range docType.FindAllString(prose, -1) {
		if _, ok := Lookup(Type(m)); !ok && !strings.HasSuffix(m, ".json") {
			t.Errorf("docs/events.md names type %s, which is not in the catalogue", m)
		}
	}
	var filters []string
	for _, e := range Catalog() {
		for _, r := range e.Routes {
			if r.Subject != "" {
				filters = append(filters, r.Filter())
			}
		}
	}
	for _, m := range docSubject.FindAllString(docType.ReplaceAllString(prose, ""), -1) {
		if slices.Contains(docSpanAttributes, m) {
			continue
		}
		f := docParam.ReplaceAllString(m, "*")
		if !slices.ContainsFunc(filters, func(r string) bool { return subjectMatches(f, r) || subjectMatches(r, f) }) {
			t.Errorf("docs/events.md names subject %s, which no catalogue route matches", m)
		}
	}
}

var (
	// docSpanAttributes are OpenTelemetry attribute names the prose
	// mentions that look like subjects.
	docSpanAttributes = []string{"parley.tool.name", "parley.tool.call_id"}
	docType           = regexp.MustCompile(`dev\.parley\.[a-z_.]*[a-z_]`)
	docSubject        = regexp.MustCompile(`\bparley\.(?:chat|agent|tool|dlq|in)\.[A-Za-z0-9_.<>{}*-]*[A-Za-z0-9_>}*-]`)
	docParam          = regexp.MustCompile(`<[a-z]+>|\{[a-z]+\}`)
)

func joinRoles(rs []Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

// TestMain names the tests that skipped for want of node or the AsyncAPI
// parser (internal/testskip).
func TestMain(m *testing.M) { os.Exit(testskip.Run(m)) }
