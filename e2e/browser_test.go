package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/parley-dev/parley/gateway"

	"github.com/parley-dev/parley/internal/testskip"
)

// chromiumPath finds Debian's chromium (or PARLEY_CHROMIUM). Outside CI a
// missing browser skips the browser tests with one loud line; under
// CI=true it fails them.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PARLEY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testskip.Skip(t, testskip.Chromium, "chromium, chromium-browser and google-chrome are not on PATH (.ci/run installs chromium)")
	return ""
}

// screenshotDir is where the browser tests keep their screenshots:
// $PARLEY_SCREENSHOTS when set, else a test temp dir.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("PARLEY_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// browser starts a headless chromium on the gateway's web chat, signed in
// as alice.
func browser(t *testing.T, s *system, x *gw) context.Context {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1100, 900), chromedp.Flag("headless", true))
	actx, cancel := chromedp.NewExecAllocator(s.ctx, opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel3)
	if err := chromedp.Run(ctx,
		chromedp.Navigate(x.srv.URL+"/#token="+aliceToken),
		chromedp.WaitVisible("#composer-text", chromedp.ByID),
		chromedp.Evaluate(`window.__errs = []; window.addEventListener("error", e => __errs.push(String(e.message))); window.addEventListener("unhandledrejection", e => __errs.push(String(e.reason && e.reason.stack || e.reason))); 1`, nil),
	); err != nil {
		t.Fatalf("opening the web chat: %v", err)
	}
	return ctx
}

func run(t *testing.T, ctx context.Context, step string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		var html, dbg string
		_ = chromedp.Run(ctx, chromedp.OuterHTML("#messages", &html, chromedp.ByID))
		_ = chromedp.Run(ctx, chromedp.Evaluate(`JSON.stringify([[...document.querySelectorAll("input")].map(i => [i.name, i.type, i.value]), window.__errs])`, &dbg))
		html += "\ninputs: " + dbg
		t.Fatalf("%s: %v\n#messages: %s", step, err, html)
	}
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	var buf []byte
	run(t, ctx, "screenshot "+name, chromedp.FullScreenshot(&buf, 100))
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// say types a message into the composer and sends it with the button.
func say(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	run(t, ctx, "sending "+text,
		chromedp.SendKeys("#composer-text", text, chromedp.ByID),
		chromedp.Click("#send", chromedp.ByID))
}

// waitText waits until an assistant message contains text.
func waitText(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	js := fmt.Sprintf(`[...document.querySelectorAll("#messages li.msg.assistant")].some(n => n.textContent.includes(%q))`, text)
	run(t, ctx, "waiting for "+text, chromedp.Poll(js, nil, chromedp.WithPollingTimeout(20*time.Second)))
}

// The three demo conversations, by clicking and typing.
func TestBrowserDemoConversations(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(&gateway.Options{VerdictWait: time.Second})
	ctx := browser(t, s, x)
	dir := screenshotDir(t)

	// 1. "show me the About page": two pages match; the tool asks which
	// (an enum with enumNames) and the answer opens it.
	say(t, ctx, "show me the About page")
	q := `li.question:not(.settled) select`
	var options string
	run(t, ctx, "the About question", chromedp.WaitVisible(q),
		chromedp.Evaluate(`[...document.querySelector("li.question:not(.settled) select").options].map(o => o.value + "=" + o.textContent).join("|")`, &options))
	if !strings.Contains(options, "About") {
		t.Fatalf("options = %q, want the About pages by title (enumNames)", options)
	}
	var first string
	run(t, ctx, "choosing", chromedp.Evaluate(`document.querySelector("li.question:not(.settled) select").options[1].value`, &first))
	screenshot(t, ctx, dir, "about-question.png")
	run(t, ctx, "answering", chromedp.SetValue(q, first), chromedp.Click(`li.question:not(.settled) button[data-action=accept]`))
	waitText(t, ctx, "Here it is")
	// The page comes back as a resource_link: an entity card from
	// _meta["drupal.org/ai.entity"] with an http(s) link.
	var cardText, href string
	run(t, ctx, "the entity card",
		chromedp.Text(`li.msg.assistant .entity`, &cardText),
		chromedp.Evaluate(`document.querySelector("li.msg.assistant .entity a").href`, &href))
	if !strings.Contains(cardText, "page") || !strings.Contains(cardText, "About") || !strings.HasPrefix(href, "http") {
		t.Fatalf("entity card %q linking %q, want the About page card", cardText, href)
	}

	// 2. The event form: an empty title is caught in the page; an invalid
	// date (a client whose checks were bypassed) comes back from the server
	// as a field error next to the date; then a valid answer.
	run(t, ctx, "new thread", chromedp.Click("#new-thread", chromedp.ByID))
	say(t, ctx, "create an event for the launch party")
	form := `li.question:not(.settled) `
	run(t, ctx, "the event form", chromedp.WaitVisible(form+`input[type=date]`))
	run(t, ctx, "submit empty", chromedp.Click(form+`button[data-action=accept]`))
	var errText string
	run(t, ctx, "client-side error", chromedp.Text(form+`[data-field=title] .error`, &errText))
	if !strings.Contains(errText, "required") {
		t.Fatalf("title error = %q, want required", errText)
	}
	run(t, ctx, "invalid date",
		chromedp.SendKeys(form+`[data-field=title] input`, "Launch party"),
		chromedp.Evaluate(`(() => { const d = document.querySelector("li.question:not(.settled) input[type=date]"); d.type = "text"; d.value = "next friday"; })()`, nil),
		chromedp.Click(form+`button[data-action=accept]`),
		// The empty submit above marked the date "required" in the page;
		// wait for the server's rule to replace it.
		chromedp.Poll(`(() => { const e = document.querySelector("li.question [data-field=date] .error"); return e && e.textContent !== "" && e.textContent !== "required"; })()`,
			nil, chromedp.WithPollingTimeout(10*time.Second)))
	run(t, ctx, "date error", chromedp.Text(`li.question [data-field=date] .error`, &errText))
	if !strings.Contains(errText, "date") {
		t.Fatalf("date field error = %q, want the server's date rule", errText)
	}
	screenshot(t, ctx, dir, "event-form-invalid-date.png")
	run(t, ctx, "valid date",
		chromedp.Evaluate(`(() => { const d = document.querySelector("li.question:not(.settled) [data-field=date] input"); d.type = "date"; d.value = "2026-12-12"; })()`, nil),
		chromedp.Click(form+`button[data-action=accept]`))
	waitText(t, ctx, "Launch party")

	// 3. The delete confirmation: declined with instructions, then accepted.
	run(t, ctx, "new thread", chromedp.Click("#new-thread", chromedp.ByID))
	say(t, ctx, "delete the 10 draft articles")
	run(t, ctx, "the confirmation", chromedp.WaitVisible(form+`button[data-action=decline]`))
	var title, args string
	run(t, ctx, "confirmation text",
		chromedp.Text(`li.question:not(.settled) h3`, &title),
		chromedp.Text(`li.question:not(.settled) dl.args`, &args))
	if !strings.HasPrefix(title, "Delete 10 ") || !strings.Contains(args, "article-") {
		t.Fatalf("confirmation shows title %q args %q", title, args)
	}
	// Once the pause is announced, a question shown as a card is not also
	// restated in prose (a newcomer saw each confirmation twice).
	run(t, ctx, "the pause announced", chromedp.Poll(`document.getElementById("status").textContent === "Waiting for your answer"`,
		nil, chromedp.WithPollingTimeout(10*time.Second)))
	var restated int
	run(t, ctx, "no restatement", chromedp.Evaluate(`document.querySelectorAll("li.msg.restated").length`, &restated))
	if restated != 0 {
		t.Fatalf("%d restated messages beside a confirmation card, want 0", restated)
	}
	screenshot(t, ctx, dir, "delete-confirmation.png")
	run(t, ctx, "decline with instructions",
		chromedp.Click(form+`button[data-action=decline]`),
		chromedp.WaitVisible(form+`[data-field=instructions] input`),
		chromedp.SendKeys(form+`[data-field=instructions] input`, "keep them for now"),
		chromedp.Click(form+`button[data-action=send-decline]`))
	waitText(t, ctx, "deleted nothing")
	if s.drafts() != 10 {
		t.Fatalf("drafts = %d after a decline, want 10", s.drafts())
	}
	say(t, ctx, "delete the 10 draft articles")
	run(t, ctx, "the second confirmation", chromedp.WaitVisible(form+`button[data-action=accept]`),
		chromedp.Click(form+`button[data-action=accept]`))
	waitText(t, ctx, "Deleted 10")
	screenshot(t, ctx, dir, "webchat.png")
	if s.drafts() != 0 {
		t.Fatalf("drafts = %d after the accept, want 0", s.drafts())
	}
}

// Hostile Markdown, javascript: links and SVG in user and model text are
// shown as text, never run.
func TestBrowserXSS(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	hostile := `show me the <img src=x onerror="window.__xss=1"><svg onload="window.__xss=2"></svg>[click](javascript:window.__xss=3) **<script>window.__xss=4</script>** page`
	say(t, ctx, hostile)
	waitText(t, ctx, "could not open that page")
	var res struct {
		XSS     any  `json:"xss"`
		Imgs    int  `json:"imgs"`
		SVGs    int  `json:"svgs"`
		Scripts int  `json:"scripts"`
		JSLinks int  `json:"jsLinks"`
		Literal bool `json:"literal"`
	}
	run(t, ctx, "inspecting", chromedp.Evaluate(`(() => { const m = document.getElementById("messages"); return {
		xss: window.__xss === undefined ? null : window.__xss,
		imgs: m.querySelectorAll("img").length, svgs: m.querySelectorAll("svg").length,
		scripts: m.querySelectorAll("script").length,
		jsLinks: [...m.querySelectorAll("a")].filter(a => !/^https?:/.test(a.href)).length,
		literal: m.textContent.includes("<svg onload=") }; })()`, &res))
	if res.XSS != nil || res.Imgs != 0 || res.SVGs != 0 || res.Scripts != 0 || res.JSLinks != 0 || !res.Literal {
		t.Fatalf("hostile text rendered unsafely: %+v", res)
	}
	screenshot(t, ctx, screenshotDir(t), "xss.png")
}

// allKinds is an elicitation with every field kind the web chat renders:
// MCP 2025-06-18 primitives and the 2025-11-25 titled and multi-select
// enums with defaults.
const allKinds = `{
  "message": "Every kind of field",
  "requestedSchema": {"type": "object", "required": ["name", "email", "count", "tags"], "properties": {
    "name": {"type": "string", "title": "Name", "minLength": 2, "maxLength": 10},
    "email": {"type": "string", "title": "Email", "format": "email"},
    "site": {"type": "string", "title": "Site", "format": "uri"},
    "day": {"type": "string", "title": "Day", "format": "date"},
    "at": {"type": "string", "title": "At", "format": "date-time"},
    "count": {"type": "integer", "title": "Count", "minimum": 1, "maximum": 5},
    "ratio": {"type": "number", "title": "Ratio", "minimum": 0, "maximum": 1},
    "agree": {"type": "boolean", "title": "Agree", "default": true},
    "color": {"type": "string", "title": "Color", "enum": ["r", "g"], "enumNames": ["Red", "Green"]},
    "size": {"type": "string", "title": "Size", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}], "default": "l"},
    "tags": {"type": "array", "title": "Tags", "minItems": 1, "maxItems": 2,
      "items": {"anyOf": [{"const": "a", "title": "Alpha"}, {"const": "b", "title": "Beta"}, {"const": "c", "title": "Gamma"}]}}
  }},
  "_meta": {"drupal.org/ai.elicitation_id": "kinds-1"}
}`

// Every field kind renders with its native input, a label, and the
// client-side checks that mirror the server's; a valid form sends the
// typed content.
func TestBrowserFormFieldKinds(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	card := `li.question[data-elicitation=kinds-1] `
	var kinds string
	run(t, ctx, "rendering",
		chromedp.Evaluate(`window.__bodies = []; { const f = window.fetch; window.fetch = (u, o) => { if (o && o.method === "POST") __bodies.push(o.body); return f(u, o); }; } renderQuestion(`+allKinds+`); 1`, nil),
		chromedp.WaitVisible(card+`form`),
		chromedp.Evaluate(`JSON.stringify([...document.querySelectorAll("li.question [data-field]")].map(f => {
			const i = f.querySelector("[name]");
			const labelled = i.getAttribute("aria-labelledby") ? !!document.getElementById(i.getAttribute("aria-labelledby")) : !!document.querySelector("label[for='" + i.id + "']");
			return [f.dataset.field, i.tagName.toLowerCase(), i.type || i.getAttribute("role"), labelled,
				i.tagName === "SELECT" ? [...i.options].map(o => o.textContent + (o.selected ? "*" : "")).join(",") : (i.checked ? "checked" : ""),
				[i.getAttribute("min"), i.getAttribute("max"), i.getAttribute("step"), i.getAttribute("minlength"), i.getAttribute("maxlength")].join("/"),
				f.querySelectorAll("input[type=checkbox]").length];
		}))`, &kinds))
	var got [][]any
	if err := json.Unmarshal([]byte(kinds), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"name":  `["name","input","text",true,"","///2/10",0]`,
		"email": `["email","input","email",true,"","////",0]`,
		"site":  `["site","input","url",true,"","////",0]`,
		"day":   `["day","input","date",true,"","////",0]`,
		"at":    `["at","input","datetime-local",true,"","////",0]`,
		"count": `["count","input","number",true,"","1/5/1//",0]`,
		"ratio": `["ratio","input","number",true,"","0/1/any//",0]`,
		"agree": `["agree","input","checkbox",true,"checked","////",1]`,
		"color": `["color","select","select-one",true,"— choose —*,Red,Green","////",0]`,
		"size":  `["size","select","select-one",true,"— choose —,Small,Large*","////",0]`,
		"tags":  `["tags","div","group",true,"","////",3]`,
	}
	if len(got) != len(want) {
		t.Fatalf("rendered %d fields, want %d: %s", len(got), len(want), kinds)
	}
	for _, f := range got {
		b, _ := json.Marshal(f)
		if w := want[f[0].(string)]; string(b) != w {
			t.Errorf("field %s rendered as %s, want %s", f[0], b, w)
		}
	}
	// Invalid values: each field's rule is shown next to it, focus goes to
	// the first, and nothing is sent.
	run(t, ctx, "invalid values",
		chromedp.SendKeys(card+`[name=name]`, "x"),
		chromedp.SendKeys(card+`[name=email]`, "not-an-email"),
		chromedp.SendKeys(card+`[name=count]`, "9"),
		chromedp.Click(card+`[data-field=tags] label:nth-of-type(1) input`),
		chromedp.Click(card+`[data-field=tags] label:nth-of-type(2) input`),
		chromedp.Click(card+`[data-field=tags] label:nth-of-type(3) input`),
		chromedp.Click(card+`button[data-action=accept]`))
	var errs, focused string
	var sent int
	run(t, ctx, "reading errors",
		chromedp.Evaluate(`JSON.stringify(Object.fromEntries([...document.querySelectorAll("li.question [data-field]")].map(f => [f.dataset.field, f.querySelector(".error").textContent]).filter(e => e[1])))`, &errs),
		chromedp.Evaluate(`document.activeElement.name || ""`, &focused),
		chromedp.Evaluate(`__bodies.length`, &sent))
	for _, field := range []string{"name", "email", "count", "tags"} {
		if !strings.Contains(errs, `"`+field+`"`) {
			t.Errorf("no error next to %s: %s", field, errs)
		}
	}
	if strings.Contains(errs, `"ratio"`) || strings.Contains(errs, `"site"`) {
		t.Errorf("errors on optional empty fields: %s", errs)
	}
	if focused != "name" || sent != 0 {
		t.Fatalf("focus on %q and %d requests sent, want focus on name and none sent", focused, sent)
	}
	// Valid values: the content is sent with JSON types.
	run(t, ctx, "valid values",
		chromedp.SendKeys(card+`[name=name]`, "yz"),
		chromedp.SetValue(card+`[name=email]`, "a@example.com"),
		chromedp.SetValue(card+`[name=count]`, "3"),
		chromedp.Click(card+`[data-field=tags] label:nth-of-type(3) input`),
		chromedp.SetValue(card+`[name=color]`, "g"),
		chromedp.Click(card+`button[data-action=accept]`),
		chromedp.Poll(`__bodies.length === 1`, nil, chromedp.WithPollingTimeout(5*time.Second)))
	var body string
	run(t, ctx, "request body", chromedp.Evaluate(`__bodies[0]`, &body))
	var req struct {
		Action  string         `json:"action"`
		Content map[string]any `json:"content"`
	}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	wantContent := map[string]any{"name": "xyz", "email": "a@example.com", "count": 3.0, "agree": true,
		"color": "g", "size": "l", "tags": []any{"a", "b"}}
	if req.Action != "accept" || fmt.Sprint(req.Content) != fmt.Sprint(wantContent) {
		t.Fatalf("sent %s, want accept with %v", body, wantContent)
	}
}

// A question withdrawn by a new message, and one that expires, are shown
// as such and can no longer be answered.
func TestBrowserWithdrawnAndExpired(t *testing.T) {
	s := start(t, options{pauseTTL: 4 * time.Second})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	settled := func(want string) {
		t.Helper()
		js := fmt.Sprintf(`[...document.querySelectorAll("li.question.settled .state")].some(n => n.textContent.startsWith(%q))`, want)
		run(t, ctx, "waiting for "+want, chromedp.Poll(js, nil, chromedp.WithPollingTimeout(20*time.Second)))
	}
	say(t, ctx, "delete the 10 draft articles")
	run(t, ctx, "the confirmation", chromedp.WaitVisible(`li.question:not(.settled) button[data-action=accept]`))
	say(t, ctx, "list everything")
	settled("Withdrawn")
	run(t, ctx, "new thread", chromedp.Click("#new-thread", chromedp.ByID))
	say(t, ctx, "delete the 10 draft articles")
	run(t, ctx, "the confirmation", chromedp.WaitVisible(`li.question:not(.settled) button[data-action=accept]`))
	settled("Expired")
	var disabled bool
	run(t, ctx, "buttons disabled", chromedp.Evaluate(`document.querySelector("li.question.settled button[data-action=accept]").disabled`, &disabled))
	if !disabled {
		t.Fatal("an expired question can still be answered")
	}
	if s.drafts() != 10 {
		t.Fatalf("drafts = %d, want 10", s.drafts())
	}
}
