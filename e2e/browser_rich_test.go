package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/parley-dev/parley/model/openai"
	"github.com/parley-dev/parley/model/openai/openaitest"
)

// widgetForm asks for a node with the entity_autocomplete widget hint, a
// field whose hint names a widget the page does not know, and an
// autocomplete whose lookup the gateway refuses (a bad target_type): the
// last two must stay plain fields.
const widgetForm = `{
  "message": "Which page?",
  "requestedSchema": {"type": "object", "required": ["node"], "properties": {
    "node": {"type": "string", "title": "Page"},
    "shade": {"type": "string", "title": "Shade"},
    "other": {"type": "string", "title": "Other"}
  }},
  "_meta": {"drupal.org/ai.elicitation_id": "widgets-1", "drupal.org/ai.widgets": {
    "node": {"widget": "entity_autocomplete", "target_type": "node", "bundles": ["page"]},
    "shade": {"widget": "color_wheel"},
    "other": {"widget": "entity_autocomplete", "target_type": "Not A Type"}
  }}
}`

// A real provider's answer streams into the page and is replaced by the
// final message (no duplicate text); the model's citations show as [n]
// links after the spans they support and as a source list; a suggested
// reply is a button that sends it; the entity_autocomplete widget offers
// the site's entities from the lookup endpoint and degrades to the plain
// field.
func TestBrowserStreamingCitationsWidgets(t *testing.T) {
	srv := openaitest.New(t, openaitest.Reply{File: sse + "text_cited.sse"}, openaitest.Reply{File: sse + "text.sse"})
	agents, err := openai.ParseAgents([]byte(`{"agents":{"default":{"suggestReplies":true}}}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := openai.New(openai.Config{BaseURL: srv.URL(), Model: "gpt-4o-search-preview", APIKey: "sk-test",
		Timeout: 5 * time.Second, MaxRetries: 1, MaxRetryDelay: time.Second, Agents: agents}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, options{provider: p})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	dir := screenshotDir(t)

	// Record every draft the page shows while the answer streams.
	// (Added nodes, not a query: the draft may be shown and replaced
	// within one read of the event stream.)
	run(t, ctx, "watching drafts", chromedp.Evaluate(`window.__drafts = [];
		new MutationObserver((recs) => { for (const r of recs) for (const n of r.addedNodes)
			if (n.classList && n.classList.contains("draft")) __drafts.push(n); })
			.observe(document.getElementById("messages"), { childList: true });
		window.__draftTexts = () => __drafts.map(n => n.textContent); 1`, nil))
	say(t, ctx, "What is new in Drupal 11?")
	waitText(t, ctx, "Its release notes list the changes.")
	run(t, ctx, "the final message", chromedp.Poll(`!document.querySelector("li.msg.draft")`, nil, chromedp.WithPollingTimeout(10*time.Second)))
	var res struct {
		Drafts    []string `json:"drafts"`
		Copies    int      `json:"copies"`
		Markers   []string `json:"markers"`
		Sources   []string `json:"sources"`
		Text      string   `json:"text"`
		Replies   []string `json:"replies"`
		JSLinks   int      `json:"jsLinks"`
		Sentinels bool     `json:"sentinels"`
	}
	run(t, ctx, "inspecting the answer", chromedp.Evaluate(`(() => {
		const as = [...document.querySelectorAll("#messages li.msg.assistant")];
		const a = as[as.length - 1];
		return {
			drafts: __draftTexts(),
			copies: as.filter(n => n.textContent.includes("Drupal 11 — released")).length,
			markers: [...a.querySelectorAll("sup.cite a")].map(x => x.textContent + " " + x.href),
			sources: [...a.querySelectorAll("ol.citations a")].map(x => x.textContent + " " + x.href),
			text: a.querySelector(".md").textContent,
			replies: [...a.querySelectorAll(".suggestions button")].map(b => b.textContent),
			jsLinks: [...a.querySelectorAll("a")].filter(x => !/^https?:/.test(x.href)).length,
			sentinels: /[\uE000-\uE0FF]/.test(a.textContent),
		}; })()`, &res))
	if len(res.Drafts) == 0 || !strings.Contains(strings.Join(res.Drafts, " "), "Drupal 11") {
		t.Errorf("no streamed draft was shown: %q", res.Drafts)
	}
	if res.Copies != 1 {
		t.Errorf("the answer shows %d times, want once (the draft folded into the final message)", res.Copies)
	}
	wantMarkers := []string{
		"[1] https://www.drupal.org/blog/drupal-11-0-0",
		"[1] https://www.drupal.org/blog/drupal-11-0-0",
		"[2] https://www.drupal.org/project/drupal/releases/11.0.0",
	}
	if strings.Join(res.Markers, "|") != strings.Join(wantMarkers, "|") {
		t.Errorf("citation markers = %q, want %q", res.Markers, wantMarkers)
	}
	if len(res.Sources) != 3 || !strings.HasPrefix(res.Sources[0], "Drupal 11 released https://www.drupal.org/") {
		t.Errorf("sources = %q, want the three cited pages", res.Sources)
	}
	if want := "Drupal 11 — released in August 2024.[1] Its release notes list the changes.[1][2]"; res.Text != want {
		t.Errorf("text = %q, want %q", res.Text, want)
	}
	if strings.Join(res.Replies, "|") != "what changed?|upgrade guide" || res.JSLinks != 0 || res.Sentinels {
		t.Errorf("replies %q, non-http links %d, marker characters left %v", res.Replies, res.JSLinks, res.Sentinels)
	}
	screenshot(t, ctx, dir, "streamed-citations.png")

	// A suggested reply is sent as the user's next message.
	run(t, ctx, "clicking a suggestion", chromedp.Click(`li.msg.assistant .suggestions button:nth-of-type(2)`))
	run(t, ctx, "the reply sent", chromedp.Poll(`[...document.querySelectorAll("#messages li.msg.user")].some(n => n.textContent === "upgrade guide")`,
		nil, chromedp.WithPollingTimeout(10*time.Second)))
	waitText(t, ctx, "Hello! I can list, publish or delete your content.")
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model requests = %d, want 2", len(reqs))
	}
	msgs, _ := json.Marshal(reqs[1]["messages"])
	if !strings.Contains(string(msgs), `"content":"upgrade guide"`) {
		t.Errorf("the second model request does not carry the suggestion: %s", msgs)
	}

	// Hostile citations and suggestions are text: a javascript: source is
	// no link, HTML in a title or a reply is shown literally, and anchors
	// outside the text, or a marker character in it, mark nothing: one
	// marker, [1] after "Plain", not a link.
	var hostile struct {
		XSS     any  `json:"xss"`
		Imgs    int  `json:"imgs"`
		JSLinks int  `json:"jsLinks"`
		Marks   int  `json:"marks"`
		Literal bool `json:"literal"`
	}
	run(t, ctx, "hostile citations", chromedp.Evaluate(`(() => {
		const li = renderMessage({role: "assistant", text: "Plain  text",
			_meta: {"drupal.org/ai.citations": [
				{url: "javascript:window.__xss=1", title: "<img src=x onerror=window.__xss=2>", anchors: [{start: 0, end: 5}]},
				{url: "https://ok.example/", anchors: [{start: 0, end: 999}]}],
			"drupal.org/ai.suggested_replies": ["<img src=x onerror=window.__xss=3>"]}}, "assistant");
		addItem(li);
		return { xss: window.__xss === undefined ? null : window.__xss, imgs: li.querySelectorAll("img").length,
			jsLinks: [...li.querySelectorAll("a")].filter(a => !/^https?:/.test(a.href)).length,
			marks: li.querySelectorAll("sup.cite").length + 10 * li.querySelectorAll("sup.cite a").length,
			literal: li.textContent.includes("<img src=x onerror=window.__xss=2>") && li.querySelector(".suggestions button").textContent.startsWith("<img") };
	})()`, &hostile))
	if hostile.XSS != nil || hostile.Imgs != 0 || hostile.JSLinks != 0 || hostile.Marks != 1 || !hostile.Literal {
		t.Errorf("hostile citations rendered unsafely: %+v", hostile)
	}

	// The entity autocomplete widget.
	card := `li.question[data-elicitation=widgets-1] `
	run(t, ctx, "rendering the widget form",
		chromedp.Evaluate(`window.__bodies = []; { const f = window.fetch; window.fetch = (u, o) => { if (o && o.method === "POST") __bodies.push(o.body); return f(u, o); }; } renderQuestion(`+widgetForm+`); 1`, nil),
		chromedp.WaitVisible(card+`form`),
		chromedp.SendKeys(card+`[name=node]`, "About"),
		chromedp.Poll(`document.querySelectorAll("li.question[data-elicitation=widgets-1] datalist option").length === 3`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.SendKeys(card+`[name=other]`, "x"),
		chromedp.Poll(`document.querySelector("li.question[data-elicitation=widgets-1] [name=other]").dataset.widget === "degraded"`, nil, chromedp.WithPollingTimeout(10*time.Second)))
	var w struct {
		Options []string `json:"options"`
		Role    string   `json:"list"`
		Shade   bool     `json:"shade"`
		Other   bool     `json:"other"`
	}
	run(t, ctx, "inspecting the widget", chromedp.Evaluate(`(() => { const c = document.querySelector("li.question[data-elicitation=widgets-1]"); return {
		options: [...c.querySelectorAll("datalist option")].map(o => o.value + "=" + o.label),
		list: c.querySelector("[name=node]").getAttribute("list") || "",
		shade: c.querySelector("[name=shade]").hasAttribute("list") || c.querySelector("[data-field=shade]").dataset.widget !== undefined,
		other: c.querySelector("[name=other]").hasAttribute("list"),
	}; })()`, &w))
	if strings.Join(w.Options, "|") != "page-3=About the team (page, published)|page-5=About this site (page, published)|page-1=About us (page, published)" || w.Role == "" {
		t.Errorf("autocomplete options %q (list %q), want the three About pages", w.Options, w.Role)
	}
	if w.Shade || w.Other {
		t.Errorf("unknown widget plain: %v, refused lookup plain: %v; want both plain fields", !w.Shade, !w.Other)
	}
	screenshot(t, ctx, dir, "entity-autocomplete.png")
	run(t, ctx, "choosing", chromedp.SetValue(card+`[name=node]`, "page-3"), chromedp.Click(card+`button[data-action=accept]`),
		chromedp.Poll(`__bodies.length === 1`, nil, chromedp.WithPollingTimeout(5*time.Second)))
	var body string
	run(t, ctx, "request body", chromedp.Evaluate(`__bodies[0]`, &body))
	if !strings.Contains(body, `"node":"page-3"`) || !strings.Contains(body, `"other":"x"`) {
		t.Errorf("sent %s, want the chosen entity ID as a plain string", body)
	}
}
