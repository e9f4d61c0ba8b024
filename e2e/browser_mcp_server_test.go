package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A question an MCP server asked (_meta["dev.parley/mcp_server"], set by
// parley) is labelled in the web chat with the server's name; a server
// that is not trusted and secret-looking fields get a warning; parley's
// own questions get no label.
func TestBrowserServerQuestionLabelled(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	form := `{type: "object", properties: {user: {type: "string"}, site_password: {type: "string"}}}`
	run(t, ctx, "rendering",
		chromedp.Evaluate(`
			renderQuestion({message: "Sign in again", requestedSchema: `+form+`, _meta: {"drupal.org/ai.elicitation_id": "srv-1",
				"dev.parley/mcp_server": {name: "evil", trusted: false, secretFields: ["site_password"]}}});
			renderQuestion({message: "Which one?", requestedSchema: `+form+`, _meta: {"drupal.org/ai.elicitation_id": "srv-2",
				"dev.parley/mcp_server": {name: "ok", trusted: true}}});
			renderQuestion({message: "Title?", requestedSchema: {type: "object", properties: {title: {type: "string"}}},
				_meta: {"drupal.org/ai.elicitation_id": "own-1"}});
			renderQuestion({mode: "url", message: "Sign in", url: "https://auth.example.com/", elicitationId: "e",
				_meta: {"drupal.org/ai.elicitation_id": "srv-3", "dev.parley/mcp_server": {name: "evil", trusted: false}}}); 1`, nil),
		chromedp.WaitVisible(`li.question[data-elicitation=srv-3] button[data-action=accept]`, chromedp.ByQuery))
	texts := map[string]string{}
	for _, id := range []string{"srv-1", "srv-2", "own-1", "srv-3"} {
		var txt string
		run(t, ctx, "reading "+id, chromedp.Poll(`(() => { const n = document.querySelector("li.question[data-elicitation=`+id+`] .asked-by"); return n ? n.textContent : "-"; })()`,
			&txt, chromedp.WithPollingTimeout(5*time.Second)))
		texts[id] = txt
	}
	for id, want := range map[string][]string{
		"srv-1": {"Asked by MCP server evil", "cannot vouch for this server", "looks like a secret (site_password)"},
		"srv-2": {"Asked by MCP server ok"},
		"srv-3": {"Asked by MCP server evil", "cannot vouch for this server"},
	} {
		for _, w := range want {
			if !strings.Contains(texts[id], w) {
				t.Errorf("%s: label %q lacks %q", id, texts[id], w)
			}
		}
	}
	if strings.Contains(texts["srv-2"], "vouch") || strings.Contains(texts["srv-2"], "secret") {
		t.Errorf("trusted server warned: %q", texts["srv-2"])
	}
	if texts["own-1"] != "-" {
		t.Errorf("parley's own question labelled: %q", texts["own-1"])
	}
	var allow int
	run(t, ctx, "buttons", chromedp.Evaluate(`document.querySelectorAll("li.question[data-elicitation=srv-1] button[data-action=accept]")[0].textContent === "Submit" ? 0 : 1`, &allow))
	if allow != 0 {
		t.Error("a server's form is offered as an Allow confirmation")
	}
}
