package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/parley-dev/parley/gateway"
)

// In the web chat, "@" and a few letters offer the site's entities (the
// entity lookup); arrows and Enter choose one — Enter never sends while
// the list is open — and it becomes a chip in the composer and "@About
// us" in the text. The message goes with the reference: the chip shows on
// the sent message, and the answer uses what only the resolved page says.
func TestBrowserReferenceChip(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(&gateway.Options{VerdictWait: time.Second})
	ctx := browser(t, s, x)
	dir := screenshotDir(t)

	var options string
	run(t, ctx, "typing @abo",
		chromedp.SendKeys("#composer-text", "summarise @abo", chromedp.ByID),
		chromedp.WaitVisible("#mention-list li", chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("#mention-list li")].map(n => n.dataset.entityId + "=" + n.textContent).join("|")`, &options))
	if !strings.Contains(options, "page-1=About us") || !strings.Contains(options, "page-3=About the team") {
		t.Fatalf("mention options %q; want the About pages", options)
	}
	screenshot(t, ctx, dir, "reference-mention.png")

	// The About pages are offered in the lookup's order; move to "About
	// us" and choose it with Enter.
	var at int
	run(t, ctx, "finding About us", chromedp.Evaluate(`[...document.querySelectorAll("#mention-list li")].findIndex(n => n.dataset.entityId === "page-1")`, &at))
	keys := strings.Repeat(kb.ArrowDown, at) + kb.Enter
	var chip, value string
	var sent int
	run(t, ctx, "choosing About us",
		chromedp.SendKeys("#composer-text", keys, chromedp.ByID),
		chromedp.WaitVisible(`#composer-refs .ref-chip[data-entity-id="page-1"]`, chromedp.ByQuery),
		chromedp.Text(`#composer-refs .ref-chip`, &chip, chromedp.ByQuery),
		chromedp.Value("#composer-text", &value, chromedp.ByID),
		chromedp.Evaluate(`document.querySelectorAll("#messages li.msg.user").length`, &sent))
	if !strings.Contains(chip, "@About us") || value != "summarise @About us " || sent != 0 {
		t.Fatalf("chip %q, text %q, %d messages sent; want the chip, @About us in the text, nothing sent by Enter", chip, value, sent)
	}
	screenshot(t, ctx, dir, "reference-chip.png")

	run(t, ctx, "sending", chromedp.Click("#send", chromedp.ByID))
	waitText(t, ctx, "The about us page of the demo site.")
	var onMessage, composerChips string
	run(t, ctx, "the sent message",
		chromedp.Text(`#messages li.msg.user .ref-chip[data-entity-id="page-1"]`, &onMessage, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#composer-refs .ref-chip").length + ""`, &composerChips))
	if !strings.Contains(onMessage, "@About us") || composerChips != "0" {
		t.Errorf("chip on the sent message %q, chips left in the composer %s", onMessage, composerChips)
	}
	screenshot(t, ctx, dir, "reference-sent.png")
	var errs string
	run(t, ctx, "page errors", chromedp.Evaluate(`JSON.stringify(window.__errs)`, &errs))
	if errs != "[]" {
		t.Errorf("page errors: %s", errs)
	}
}
