package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A URL-mode elicitation in the web chat: the host and the full URL are
// shown as text (no link, nothing opened or fetched; the server's message
// too, so a Markdown link cannot dress evil.example up as another host),
// and consent sends only the action.
func TestBrowserURLElicitation(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	const target = "https://auth.example.com/authorize?client=parley&state=abc"
	card := `li.question[data-elicitation=url-1] `
	run(t, ctx, "rendering",
		chromedp.Evaluate(`window.__bodies = []; window.__fetched = []; window.__opened = [];
			{ const f = window.fetch; window.fetch = (u, o) => { __fetched.push(String(u)); if (o && o.method === "POST") __bodies.push(o.body); return f(u, o); }; }
			window.open = (u) => { __opened.push(String(u)); return null; };
			renderQuestion({mode: "url", message: "Sign in to Example at [https://login.example.com/](https://evil.example/)", url: "`+target+`", elicitationId: "el-1",
				_meta: {"drupal.org/ai.elicitation_id": "url-1"}}); 1`, nil),
		chromedp.WaitVisible(card+`button[data-action=accept]`))
	var text string
	var links, forms int
	run(t, ctx, "reading the card",
		chromedp.Evaluate(`document.querySelector("li.question[data-elicitation=url-1]").textContent`, &text),
		chromedp.Evaluate(`document.querySelectorAll("li.question[data-elicitation=url-1] a, li.question[data-elicitation=url-1] iframe, li.question[data-elicitation=url-1] img").length`, &links),
		chromedp.Evaluate(`document.querySelectorAll("li.question[data-elicitation=url-1] input, li.question[data-elicitation=url-1] select").length`, &forms))
	for _, w := range []string{"Sign in to Example at [https://login.example.com/](https://evil.example/)", "auth.example.com", target, "does not open it"} {
		if !strings.Contains(text, w) {
			t.Errorf("card lacks %q: %s", w, text)
		}
	}
	if links != 0 || forms != 0 {
		t.Fatalf("card has %d links/frames/images and %d form fields, want none", links, forms)
	}
	run(t, ctx, "consent",
		chromedp.Click(card+`button[data-action=accept]`),
		chromedp.Poll(`__bodies.length === 1`, nil, chromedp.WithPollingTimeout(5*time.Second)))
	var body, fetched, opened string
	run(t, ctx, "request",
		chromedp.Evaluate(`__bodies[0]`, &body),
		chromedp.Evaluate(`JSON.stringify(__fetched)`, &fetched),
		chromedp.Evaluate(`JSON.stringify(__opened)`, &opened))
	if body != `{"action":"accept"}` {
		t.Fatalf("sent %s, want only the action", body)
	}
	if strings.Contains(fetched, "auth.example.com") || opened != "[]" {
		t.Fatalf("the page fetched %s / opened %s", fetched, opened)
	}
}
