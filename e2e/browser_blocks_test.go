package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/parley-dev/parley/events"
)

// A 1x1 PNG and a few bytes labelled audio/mpeg (the page only needs a
// data: URL it accepts).
const (
	pngBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
	svgBase64 = "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIG9ubG9hZD0id2luZG93Ll9feHNzPTIwIj48L3N2Zz4=" // <svg ... onload="window.__xss=20">
)

// hostileCompleted is an assistant message as a model or tool might make
// it: hostile Markdown, javascript: links, an SVG image, HTML in an
// embedded resource, a javascript: entity link, hostile citations and
// suggested replies — next to one of each content block kind.
const hostileCompleted = `{
  "turnId": "turn-hostile",
  "message": {
    "role": "assistant",
    "text": "Model says <img src=x onerror=\"window.__xss=11\"> and [click](javascript:window.__xss=12) and [docs](https://example.com/docs) **<svg onload=\"window.__xss=13\">**\n\n` + "```" + `\n<script>window.__xss=14</script>\n` + "```" + `",
    "content": [
      {"type": "image", "mimeType": "image/png", "data": "` + pngBase64 + `"},
      {"type": "image", "mimeType": "image/svg+xml", "data": "` + svgBase64 + `"},
      {"type": "audio", "mimeType": "audio/mpeg", "data": "SUQzBAAAAAAAAA=="},
      {"type": "resource_link", "uri": "https://example.com/node/7", "name": "node/7", "title": "Team page",
       "_meta": {"drupal.org/ai.entity": {"entity_type": "node", "bundle": "page", "id": "7", "status": "published"}}},
      {"type": "resource_link", "uri": "javascript:window.__xss=15", "name": "<b onmouseover=\"window.__xss=16\">evil</b>"},
      {"type": "resource", "resource": {"uri": "https://example.com/raw", "mimeType": "text/html", "text": "<script>window.__xss=17</script><iframe src=\"javascript:window.__xss=18\"></iframe>"}}
    ],
    "_meta": {
      "drupal.org/ai.citations": [{"url": "javascript:window.__xss=19", "title": "bad source", "anchors": [{"start": 0, "end": 10}]}],
      "drupal.org/ai.suggested_replies": ["<img src=x onerror=\"window.__xss=21\">"]
    }
  }
}`

// unrenderable asks with a property the MCP elicitation schema does not
// allow (an object): the page shows no form, only the restatement and a
// way to decline.
const unrenderable = `{
  "message": "Where should it go?",
  "requestedSchema": {"type": "object", "required": ["where"], "properties": {"where": {"type": "object", "title": "Where"}}},
  "_meta": {"drupal.org/ai.elicitation_id": "odd-1"}
}`

// Every content block kind renders (image and audio from allowed data:
// URLs, resource_link as an entity card, an embedded resource as text),
// progress shows in the status line, a form that cannot be rendered
// shows the note instead of fields — and nothing a model or tool wrote
// runs or becomes markup, arriving through the gateway's event stream.
func TestBrowserBlocksAndHostileOutput(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	say(t, ctx, "list everything")
	var thread string
	run(t, ctx, "thread", chromedp.Evaluate(`state.thread`, &thread))
	s.completed(thread, 1)
	publish := func(suffix string, typ events.Type, data string) {
		t.Helper()
		e, err := events.New("/parley/test", typ, thread, json.RawMessage(data))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.bus.Publish(s.ctx, events.ChatSubject(thread, suffix), e); err != nil {
			t.Fatal(err)
		}
	}
	publish(events.ChatProgress, events.TypeProgress, `{"progressToken": "p1", "progress": 1, "total": 4, "message": "Reading <b>pages</b>"}`)
	run(t, ctx, "progress", chromedp.Poll(`document.getElementById("status").textContent === "Reading <b>pages</b>"`, nil,
		chromedp.WithPollingTimeout(10*time.Second)))
	publish(events.ChatTurnCompleted, events.TypeTurnCompleted, hostileCompleted)
	waitText(t, ctx, "Model says")
	publish(events.ChatElicitationRequested, events.TypeElicitationRequested, unrenderable)
	run(t, ctx, "the unrenderable question", chromedp.WaitVisible(`li.question[data-elicitation=odd-1] .note`))

	var res struct {
		XSS        any      `json:"xss"`
		Imgs       []string `json:"imgs"`
		Audio      int      `json:"audio"`
		Bad        []string `json:"bad"`
		Hrefs      []string `json:"hrefs"`
		Cards      []string `json:"cards"`
		Pre        []string `json:"pre"`
		Literal    bool     `json:"literal"`
		Suggestion string   `json:"suggestion"`
		OddFields  int      `json:"oddFields"`
		OddButtons []string `json:"oddButtons"`
	}
	run(t, ctx, "inspecting", chromedp.Evaluate(`(() => { const m = document.getElementById("messages");
		const all = [...m.querySelectorAll("*")];
		const odd = document.querySelector("li.question[data-elicitation=odd-1]");
		return {
			xss: window.__xss === undefined ? null : window.__xss,
			imgs: [...m.querySelectorAll("img")].map(i => i.src.slice(0, 22)),
			audio: m.querySelectorAll("audio").length,
			bad: all.filter(n => ["SCRIPT", "IFRAME", "OBJECT", "EMBED"].includes(n.tagName) || n.namespaceURI !== "http://www.w3.org/1999/xhtml" ||
				[...n.attributes].some(a => /^on/i.test(a.name))).map(n => n.outerHTML.slice(0, 80)),
			hrefs: [...m.querySelectorAll("a")].map(a => a.getAttribute("href")),
			cards: [...m.querySelectorAll("li.msg.assistant .entity")].map(c => c.textContent),
			pre: [...m.querySelectorAll("li.msg.assistant pre")].map(p => p.textContent),
			literal: m.textContent.includes('<img src=x onerror="window.__xss=11">'),
			suggestion: [...m.querySelectorAll(".suggestions button")].map(b => b.textContent).join("|"),
			oddFields: odd.querySelectorAll("[data-field]").length,
			oddButtons: [...odd.querySelectorAll("button")].map(b => b.dataset.action),
		}; })()`, &res))
	if res.XSS != nil || len(res.Bad) != 0 {
		t.Fatalf("hostile output ran or became markup: xss=%v elements=%q", res.XSS, res.Bad)
	}
	if len(res.Imgs) != 1 || res.Imgs[0] != "data:image/png;base64," || res.Audio != 1 {
		t.Errorf("images %q and %d audio, want the PNG only (no SVG) and the audio", res.Imgs, res.Audio)
	}
	for _, h := range res.Hrefs {
		if !strings.HasPrefix(h, "https://") && !strings.HasPrefix(h, "http://") {
			t.Errorf("a link to %q: only http(s) links may be made", h)
		}
	}
	if !strings.Contains(strings.Join(res.Hrefs, " "), "https://example.com/node/7") || !strings.Contains(strings.Join(res.Hrefs, " "), "https://example.com/docs") {
		t.Errorf("links %q, want the entity card's and the Markdown link's", res.Hrefs)
	}
	joined := strings.Join(res.Cards, " | ")
	if !strings.Contains(joined, "node · page") || !strings.Contains(joined, "Team page") || !strings.Contains(joined, "published") ||
		!strings.Contains(joined, `<b onmouseover="window.__xss=16">evil</b>`) || !strings.Contains(joined, "resource") {
		t.Errorf("entity cards %q, want the node card, the hostile name as text and the embedded resource", res.Cards)
	}
	pre := strings.Join(res.Pre, " | ")
	if !strings.Contains(pre, "<script>window.__xss=14</script>") || !strings.Contains(pre, "<iframe src=") {
		t.Errorf("code and resource text %q, want the hostile HTML shown as text", res.Pre)
	}
	if !res.Literal || !strings.HasSuffix(res.Suggestion, `|<img src=x onerror="window.__xss=21">`) {
		t.Errorf("literal text %v, suggested reply %q: want both shown as text", res.Literal, res.Suggestion)
	}
	if res.OddFields != 0 || strings.Join(res.OddButtons, ",") != "decline,cancel" {
		t.Errorf("unrenderable question: %d fields, buttons %v; want none and decline,cancel", res.OddFields, res.OddButtons)
	}
	screenshot(t, ctx, screenshotDir(t), "blocks.png")
	// Declining it is sent (the processor never asked it: unknown).
	run(t, ctx, "decline the unrenderable question", chromedp.Click(`li.question[data-elicitation=odd-1] button[data-action=decline]`),
		chromedp.Poll(`document.querySelector("li.question[data-elicitation=odd-1] .state").textContent === "This question expired."`, nil,
			chromedp.WithPollingTimeout(10*time.Second)))
}
