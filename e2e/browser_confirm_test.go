package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// enterInEveryField types into every visible field of the open
// confirmation card and presses Enter in each.
func enterInEveryField(t *testing.T, ctx context.Context, card string) int {
	t.Helper()
	var n int
	run(t, ctx, "counting fields", chromedp.Evaluate(`(() => {
		const c = document.querySelector(`+"`"+card+"`"+`);
		const fs = [...c.querySelectorAll("input, textarea, select")].filter(f => f.offsetParent !== null && !f.disabled);
		fs.forEach((f, i) => f.setAttribute("data-enter-test", String(i)));
		return fs.length; })()`, &n))
	for i := range n {
		sel := card + ` [data-enter-test="` + strconv.Itoa(i) + `"]`
		run(t, ctx, "typing into a field and pressing Enter",
			chromedp.Focus(sel),
			chromedp.SendKeys(sel, "No! Keep them"),
			chromedp.SendKeys(sel, kb.Enter))
	}
	return n
}

// Enter in any field of a confirmation never allows the call: the only
// answer that reaches the processor is the decline clicked afterwards,
// with the instructions typed, and nothing is deleted.
func TestBrowserConfirmEnterNeverAllows(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	card := `li.question:not(.settled)`
	say(t, ctx, "delete the 10 draft articles")
	run(t, ctx, "the confirmation", chromedp.WaitVisible(card+` button[data-action=decline]`))
	var thread string
	run(t, ctx, "the thread", chromedp.Evaluate(`state.thread`, &thread))

	fields := enterInEveryField(t, ctx, card)
	// The decline panel (instructions are asked after Decline): Enter in
	// its fields sends nothing either.
	var panel bool
	run(t, ctx, "a decline panel?", chromedp.Evaluate(`!!document.querySelector("li.question:not(.settled) button[data-action=send-decline]")`, &panel))
	if panel {
		run(t, ctx, "opening the decline panel", chromedp.Click(card+` button[data-action=decline]`),
			chromedp.WaitVisible(card+` button[data-action=send-decline]`))
		fields += enterInEveryField(t, ctx, card)
	}
	if fields == 0 {
		t.Fatal("the confirmation has no field to type into")
	}
	screenshot(t, ctx, screenshotDir(t), "confirm-enter.png")
	// A click in the page (a card Enter answered has its buttons disabled:
	// the click then does nothing, and the answers below show what ran).
	button := "decline"
	if panel {
		button = "send-decline"
	}
	run(t, ctx, "declining", chromedp.Evaluate(`document.querySelector("li.question button[data-action=`+button+`]").click()`, nil))
	s.rec.await(t, 20*time.Second, thread, events.TypeTurnCompleted, 1)
	if n := s.drafts(); n != 10 {
		t.Fatalf("drafts = %d after Enter in the confirmation's fields, want 10 (Enter allowed the delete)", n)
	}
	answers := s.rec.matching(thread, events.TypeElicitationResponded)
	if len(answers) != 1 {
		t.Fatalf("%d answers reached the thread, want exactly the decline:\n%s", len(answers), s.rec.dump(thread))
	}
	d, err := events.Data[events.ElicitationResponded](answers[0])
	if err != nil {
		t.Fatal(err)
	}
	if instr, _ := d.Content[schema.InstructionsProperty].(string); d.Action != schema.ActionDecline || !strings.Contains(instr, "No! Keep them") {
		t.Fatalf("the answer was %s with %v, want the decline with the typed instructions", d.Action, d.Content)
	}
	waitText(t, ctx, "deleted nothing")
}
