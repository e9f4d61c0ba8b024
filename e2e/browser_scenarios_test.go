package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/parley-dev/parley/gateway"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/gate"
)

// supportVetoesPublishing is the default gating plus an agent "support"
// whose publish_entities calls are vetoed with a reason.
const supportVetoesPublishing = `{"agents": {
  "*": {"require_tool_confirmation": true, "tools": {"create_event": "never"}},
  "support": {"require_tool_confirmation": true, "tools": {"publish_entities": "deny"},
              "deny_reasons": {"publish_entities": "publishing is not allowed here"}}}}`

// poll waits until the JavaScript expression is true.
func poll(t *testing.T, ctx context.Context, step, js string) {
	t.Helper()
	run(t, ctx, step, chromedp.Poll(js, nil, chromedp.WithPollingTimeout(20*time.Second)))
}

// The three scenarios a newcomer plays in the web chat: the drafts'
// delete (the card says what will happen, declined with instructions,
// then allowed), an event whose date is missing and then impossible, and a
// call the policy vetoes for the agent picked in the composer.
func TestBrowserScenarios(t *testing.T) {
	cfg, err := gate.ParseConfig([]byte(supportVetoesPublishing))
	if err != nil {
		t.Fatal(err)
	}
	// Forms in 2025-11-25, as `parley dev` asks them: the web chat renders
	// it, prefilled defaults included.
	s := start(t, options{gate: cfg, formRevision: schema.Rev20251125})
	x := s.startGateway(&gateway.Options{VerdictWait: time.Second})
	ctx := browser(t, s, x)
	dir := screenshotDir(t)
	card := `li.question:not(.settled)`

	// The empty page suggests the three things to try.
	var tries []string
	run(t, ctx, "the empty page", chromedp.WaitVisible(`li.empty-hint button`),
		chromedp.Evaluate(`[...document.querySelectorAll("li.empty-hint button")].map(b => b.textContent)`, &tries))
	if len(tries) != 3 || tries[0] != "Publish the draft articles" {
		t.Fatalf("the empty page suggests %q, want the three scenarios", tries)
	}
	screenshot(t, ctx, dir, "scenario-empty.png")

	// 3 (first, while there are drafts to publish). A vetoed call: the
	// agent picked in the composer, support, may not publish. The veto is
	// a notice of its own, not an assistant message repeating the denial.
	run(t, ctx, "picking the agent", chromedp.SendKeys("#agent", "support", chromedp.ByID))
	say(t, ctx, "publish the draft articles")
	poll(t, ctx, "the veto notice", `document.querySelector("#messages li.notice.veto") !== null`)
	var veto string
	var denials int
	run(t, ctx, "the veto", chromedp.Text(`#messages li.notice.veto`, &veto),
		chromedp.Evaluate(`[...document.querySelectorAll("#messages li.msg.assistant")].filter(n => n.textContent.includes("was denied")).length`, &denials))
	if !strings.HasPrefix(veto, "Blocked by policy gate: publishing is not allowed here") || denials != 0 {
		t.Fatalf("veto shown as %q with %d assistant messages repeating the denial; want the notice alone", veto, denials)
	}
	if n := s.drafts(); n != 10 {
		t.Fatalf("drafts = %d after a vetoed publish, want 10", n)
	}
	screenshot(t, ctx, dir, "scenario-veto.png")
	run(t, ctx, "back to the default agent", chromedp.Evaluate(`document.getElementById("agent").value = ""`, nil),
		chromedp.Click("#new-thread", chromedp.ByID))

	// 1. Delete the drafts. The list first shows them as entity cards.
	say(t, ctx, "list everything")
	poll(t, ctx, "the draft cards", `document.querySelectorAll("#messages .entity[data-entity-id^=article] a").length >= 10`)
	say(t, ctx, "delete the draft articles")
	run(t, ctx, "the confirmation", chromedp.WaitVisible(card+` button[data-action=decline]`))
	// The card says what will happen in words, with the entities' titles
	// (looked up on the site), the raw JSON only behind a disclosure.
	poll(t, ctx, "the title in words", `document.querySelector("li.question:not(.settled) h3").textContent === "Delete 10 draft articles?"`)
	title := draftTitle(t, s)
	poll(t, ctx, "the entities' titles", fmt.Sprintf(`document.querySelector("li.question:not(.settled) dl.args").textContent.includes(%q)`, title))
	var look struct {
		RawOpen     bool   `json:"rawOpen"`
		RawJSON     bool   `json:"rawJSON"`
		AllowClass  string `json:"allowClass"`
		AllowBG     string `json:"allowBG"`
		DeclineBG   string `json:"declineBG"`
		CancelBG    string `json:"cancelBG"`
		Focused     string `json:"focused"`
		Restatement int    `json:"restatement"`
	}
	run(t, ctx, "the card's look", chromedp.Evaluate(`(() => {
		const c = document.querySelector("li.question:not(.settled)");
		const bg = (a) => getComputedStyle(c.querySelector("button[data-action=" + a + "]")).backgroundColor;
		return { rawOpen: c.querySelector("details.raw").open, rawJSON: c.querySelector("details.raw pre").textContent.includes('"ids"'),
			allowClass: c.querySelector("button[data-action=accept]").className,
			allowBG: bg("accept"), declineBG: bg("decline"), cancelBG: bg("cancel"),
			focused: document.activeElement && document.activeElement.dataset ? (document.activeElement.dataset.action || document.activeElement.id) : "",
			restatement: document.querySelectorAll("li.msg.restated").length };
	})()`, &look))
	if look.RawOpen || !look.RawJSON {
		t.Errorf("raw arguments: open %v, holds the JSON %v; want closed, with the JSON", look.RawOpen, look.RawJSON)
	}
	if look.AllowClass != "danger" || look.AllowBG == look.DeclineBG || look.AllowBG == look.CancelBG {
		t.Errorf("Allow of a destructive call: class %q, background %s (Decline %s, Cancel %s); want the danger style, distinct", look.AllowClass, look.AllowBG, look.DeclineBG, look.CancelBG)
	}
	if look.Focused == "accept" {
		t.Error("Allow has the focus when the confirmation appears")
	}
	screenshot(t, ctx, dir, "scenario-delete-confirmation.png")

	// Declined with instructions: asked after Decline.
	run(t, ctx, "decline with instructions",
		chromedp.Click(card+` button[data-action=decline]`),
		chromedp.WaitVisible(card+` [data-field=instructions] input`),
		chromedp.SendKeys(card+` [data-field=instructions] input`, "keep them for now"),
		chromedp.Click(card+` button[data-action=send-decline]`))
	waitText(t, ctx, "deleted nothing")
	if s.drafts() != 10 {
		t.Fatalf("drafts = %d after a decline, want 10", s.drafts())
	}
	oneLine := regexp.MustCompile(`^Declined by you, \d\d:\d\d · Understood, I deleted nothing`)
	var line string
	run(t, ctx, "the declined card's line", chromedp.Poll(`document.querySelector("li.question.settled .outcome") !== null`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text(`li.question.settled .state`, &line))
	if !oneLine.MatchString(line) {
		t.Fatalf("declined card says %q, want %s", line, oneLine)
	}

	// Allowed: the card collapses to one line, the reply is in view from
	// its start, and the deleted drafts are no longer live links.
	say(t, ctx, "delete the draft articles")
	run(t, ctx, "the second confirmation", chromedp.WaitVisible(card+` button[data-action=accept]`),
		chromedp.Click(card+` button[data-action=accept]`))
	waitText(t, ctx, "Deleted 10")
	if s.drafts() != 0 {
		t.Fatalf("drafts = %d after the allow, want 0", s.drafts())
	}
	allowed := regexp.MustCompile(`^Allowed by you, \d\d:\d\d · Deleted 10 entities$`)
	poll(t, ctx, "the allowed card's line", `[...document.querySelectorAll("li.question.settled .state")].some(n => n.textContent.startsWith("Allowed") && n.querySelector(".outcome"))`)
	var lines []string
	run(t, ctx, "the cards' lines", chromedp.Evaluate(`[...document.querySelectorAll("li.question.settled .state")].map(n => n.textContent)`, &lines))
	if len(lines) != 2 || !allowed.MatchString(lines[1]) {
		t.Fatalf("answered cards say %q, want the second %s", lines, allowed)
	}
	var view struct {
		ReplyTop  float64 `json:"replyTop"`
		ListTop   float64 `json:"listTop"`
		ListBot   float64 `json:"listBottom"`
		CardTall  float64 `json:"cardTall"`
		LiveDraft int     `json:"liveDraft"`
		Deleted   int     `json:"deleted"`
	}
	poll(t, ctx, "the deleted drafts", `document.querySelectorAll("#messages .entity.deleted").length >= 10`)
	run(t, ctx, "the reply in view", chromedp.Evaluate(`(() => {
		const m = document.getElementById("messages").getBoundingClientRect();
		const replies = [...document.querySelectorAll("#messages li.msg.assistant")];
		const r = replies[replies.length - 1].getBoundingClientRect();
		const cards = [...document.querySelectorAll("li.question.settled")];
		return { replyTop: r.top, listTop: m.top, listBottom: m.bottom,
			cardTall: cards[cards.length - 1].getBoundingClientRect().height,
			liveDraft: [...document.querySelectorAll("#messages .entity")].filter(e => e.querySelector("a") && /draft/.test(e.textContent) && /^article/.test(e.dataset.entityId)).length,
			deleted: document.querySelectorAll("#messages .entity.deleted").length };
	})()`, &view))
	if view.ReplyTop < view.ListTop-1 || view.ReplyTop > view.ListBot {
		t.Errorf("the reply starts at %.0f, outside the visible list %.0f..%.0f", view.ReplyTop, view.ListTop, view.ListBot)
	}
	if view.CardTall > 60 {
		t.Errorf("the answered card is %.0f px tall, want one line", view.CardTall)
	}
	if view.LiveDraft != 0 {
		t.Errorf("%d deleted drafts are still shown as live draft links (%d marked deleted)", view.LiveDraft, view.Deleted)
	}
	screenshot(t, ctx, dir, "scenario-delete-allowed.png")

	// 2. Create an event: the title the message gave is prefilled; the
	// date is missing, then impossible, then given. The fields keep the
	// form's order (title before date).
	run(t, ctx, "new thread", chromedp.Click("#new-thread", chromedp.ByID))
	say(t, ctx, "create an event called Launch party")
	run(t, ctx, "the event form", chromedp.WaitVisible(card+` input[type=date]`))
	var order []string
	run(t, ctx, "field order", chromedp.Evaluate(`[...document.querySelectorAll("li.question:not(.settled) [data-field]")].map(f => f.dataset.field)`, &order))
	if strings.Join(order, ",") != "title,date" {
		t.Errorf("fields in order %q, want title,date", order)
	}
	var prefilled, dateValue, formText string
	run(t, ctx, "the prefilled title",
		chromedp.Value(card+` [data-field=title] input`, &prefilled),
		chromedp.Value(card+` [data-field=date] input`, &dateValue),
		chromedp.Text(card, &formText))
	if prefilled != "Launch party" || dateValue != "" {
		t.Fatalf("form opens with title %q and date %q, want the title Launch party prefilled and no date", prefilled, dateValue)
	}
	if !strings.Contains(formText, `"Launch party"`) {
		t.Errorf("the form says %q, want it to name the title it knows", formText)
	}
	screenshot(t, ctx, dir, "scenario-event-prefilled.png")
	dateErr := card + ` [data-field=date] .error`
	run(t, ctx, "the date missing",
		chromedp.Click(card+` button[data-action=accept]`))
	var errText string
	run(t, ctx, "missing date error", chromedp.Text(dateErr, &errText))
	if errText != "required" {
		t.Fatalf("date error with no date = %q, want required", errText)
	}
	// An impossible day typed into the date field.
	run(t, ctx, "an impossible date",
		chromedp.Click(card+` [data-field=date] input`),
		chromedp.SendKeys(card+` [data-field=date] input`, "02302026"),
		chromedp.Click(card+` button[data-action=accept]`))
	run(t, ctx, "impossible date error", chromedp.Text(dateErr, &errText))
	if errText != "not a valid date (YYYY-MM-DD)" {
		t.Fatalf("date error for 02/30/2026 = %q, want not a valid date (YYYY-MM-DD)", errText)
	}
	screenshot(t, ctx, dir, "scenario-event-invalid-date.png")
	// Words where a date goes (a browser without a date input).
	run(t, ctx, "words for a date",
		chromedp.Evaluate(`(() => { const d = document.querySelector("li.question:not(.settled) [data-field=date] input"); d.type = "text"; d.value = "next friday"; })()`, nil),
		chromedp.Click(card+` button[data-action=accept]`),
		chromedp.Text(dateErr, &errText))
	if errText != "not a valid date (YYYY-MM-DD)" {
		t.Fatalf("date error for next friday = %q, want not a valid date (YYYY-MM-DD)", errText)
	}
	run(t, ctx, "a valid date",
		chromedp.Evaluate(`(() => { const d = document.querySelector("li.question:not(.settled) [data-field=date] input"); d.type = "date"; d.value = "2026-12-12"; })()`, nil),
		chromedp.Click(card+` button[data-action=accept]`))
	waitText(t, ctx, "Launch party")

}

// draftTitle returns the title of one of the site's draft articles.
func draftTitle(t *testing.T, s *system) string {
	t.Helper()
	ents, err := s.site.Entities(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type == "article" && e.Status == "draft" {
			return e.Title
		}
	}
	t.Fatal("no draft article on the site")
	return ""
}

// heldModel answers only once release is closed: a model that is slow for
// as long as the test needs.
type heldModel struct {
	model.Provider
	release chan struct{}
}

func (h *heldModel) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
		return model.Response{}, ctx.Err()
	}
	return h.Provider.Complete(ctx, req)
}

// While a slow model works, the thread shows a working indicator; it goes
// when the reply arrives.
func TestBrowserWorkingIndicator(t *testing.T) {
	scripted, err := model.LoadScripted("")
	if err != nil {
		t.Fatal(err)
	}
	held := &heldModel{Provider: scripted, release: make(chan struct{})}
	s := start(t, options{provider: held})
	var once sync.Once
	release := func() { once.Do(func() { close(held.release) }) }
	t.Cleanup(release) // before the workers stop
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	say(t, ctx, "list everything")
	poll(t, ctx, "the working indicator", `(() => { const w = document.getElementById("working"); return !!w && w.offsetParent !== null && w.textContent.trim() !== ""; })()`)
	var replies int
	run(t, ctx, "no reply yet", chromedp.Evaluate(`document.querySelectorAll("#messages li.msg.assistant").length`, &replies))
	if replies != 0 {
		t.Fatalf("%d replies while the model is held", replies)
	}
	screenshot(t, ctx, screenshotDir(t), "working.png")
	release()
	waitText(t, ctx, "article")
	poll(t, ctx, "the indicator gone", `document.getElementById("working") === null`)
}

// At phone width (390 px) nothing scrolls sideways and every button of a
// confirmation can be reached; Allow works there.
func TestBrowserPhoneWidth(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	run(t, ctx, "phone width", chromedp.EmulateViewport(390, 844))
	say(t, ctx, "delete the draft articles")
	card := `li.question:not(.settled)`
	run(t, ctx, "the confirmation", chromedp.WaitVisible(card+` button[data-action=accept]`))
	var res struct {
		Doc     []int      `json:"doc"`
		List    []int      `json:"list"`
		Width   int        `json:"width"`
		Buttons [][]string `json:"buttons"`
	}
	check := `(() => {
		const out = { doc: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
			list: [document.getElementById("messages").scrollWidth, document.getElementById("messages").clientWidth],
			width: innerWidth, buttons: [] };
		for (const b of document.querySelectorAll("li.question:not(.settled) .actions button:not([hidden]), #send")) {
			b.scrollIntoView({ block: "nearest" });
			const r = b.getBoundingClientRect();
			const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
			if (r.left < 0 || r.right > innerWidth || r.top < 0 || r.bottom > innerHeight || !(hit === b || b.contains(hit)))
				out.buttons.push([b.dataset.action || b.id, [r.left, r.right, r.top, r.bottom].map(Math.round).join(",")]);
		}
		return out; })()`
	measure := func(when string) {
		t.Helper()
		run(t, ctx, "measuring", chromedp.Evaluate(check, &res))
		if res.Width != 390 || res.Doc[0] > res.Doc[1] || res.List[0] > res.List[1] {
			t.Fatalf("%s at %d px: page scrollWidth %d > clientWidth %d, or messages %d > %d", when, res.Width, res.Doc[0], res.Doc[1], res.List[0], res.List[1])
		}
		if len(res.Buttons) != 0 {
			t.Fatalf("%s: buttons out of reach at 390 px: %v", when, res.Buttons)
		}
	}
	measure("the card as it appears")
	// Again once the entities' titles are in (longer lines).
	poll(t, ctx, "the titles", `document.querySelector("li.question:not(.settled) h3").textContent === "Delete 10 draft articles?"`)
	measure("the card with the titles")
	screenshot(t, ctx, screenshotDir(t), "phone-confirmation.png")
	run(t, ctx, "allowing", chromedp.Click(card+` button[data-action=accept]`))
	waitText(t, ctx, "Deleted 10")
	if s.drafts() != 0 {
		t.Fatalf("drafts = %d after Allow at phone width", s.drafts())
	}
}

// A wrong or stale token is refused on the login card with where a good
// one comes from; threads are listed by their title when the gateway
// gives one (else by ID).
func TestBrowserLoginAndThreadTitles(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	say(t, ctx, "list everything")
	waitText(t, ctx, "article")
	// The titles as the gateway lists them (GET /v1/threads items with
	// "title": the first message's text).
	var label, header string
	run(t, ctx, "a titled thread list",
		chromedp.Evaluate(`loadThreads(), 1`, nil),
		chromedp.Poll(`document.querySelector("#threads button[aria-current=true]")?.textContent === "list everything"`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		// Read in one evaluation: the list is re-rendered as it reloads.
		chromedp.Evaluate(`document.querySelector("#threads button[aria-current=true]")?.textContent ?? ""`, &label),
		chromedp.Evaluate(`document.querySelector("#thread-title")?.textContent ?? ""`, &header))
	if label != "list everything" || header != "list everything" {
		t.Fatalf("thread listed as %q, headed %q; want its title", label, header)
	}
	var msg string
	run(t, ctx, "a stale token",
		chromedp.Navigate(x.srv.URL+"/?stale#token=stale-token-0123456789"),
		chromedp.WaitVisible(`#login-error`, chromedp.ByID),
		chromedp.Text(`#login-form`, &msg, chromedp.ByID))
	if !strings.Contains(msg, "Token not accepted") || !strings.Contains(msg, ".parley/gateway-token") {
		t.Fatalf("login card says %q, want token not accepted and where the token is", msg)
	}
	screenshot(t, ctx, screenshotDir(t), "login-refused.png")
}
