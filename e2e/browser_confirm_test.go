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

// Edit on a confirmation: the arguments' fields come from the tool's
// input schema (the ids as a list of rows). Enter in them sends nothing;
// an invalid edit (no ids left) shows the processor's rule on the ids
// field and the card stays open; "Allow with changes" then deletes
// exactly the two drafts kept, and the card says it was allowed with
// changes.
func TestBrowserConfirmEdit(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	card := `li.question:not(.settled)`
	say(t, ctx, "delete the 10 draft articles")
	run(t, ctx, "the confirmation offers Edit", chromedp.WaitVisible(card+` button[data-action=edit]`))
	var thread string
	run(t, ctx, "the thread", chromedp.Evaluate(`state.thread`, &thread))

	run(t, ctx, "opening the edit", chromedp.Click(card+` button[data-action=edit]`),
		chromedp.WaitVisible(card+` .edit-panel [data-field="arguments.ids"] .arg-row input`))
	var rows int
	run(t, ctx, "counting the ids", chromedp.Evaluate(`document.querySelectorAll("li.question .edit-panel .arg-row").length`, &rows))
	if rows != 10 {
		t.Fatalf("the ids field has %d rows, want the 10 drafts", rows)
	}
	// Remove every row: ids would be empty.
	for range rows {
		run(t, ctx, "removing a row", chromedp.Click(card+` .arg-row button[data-action=remove-item]`))
	}
	run(t, ctx, "allowing the empty edit", chromedp.Click(card+` button[data-action=accept-edited]`),
		chromedp.Poll(`(document.querySelector('li.question [data-field="arguments.ids"] .error')||{}).textContent.length > 0`, nil, chromedp.WithPollingTimeout(20*time.Second)))
	var rule string
	run(t, ctx, "the ids error", chromedp.Text(card+` [data-field="arguments.ids"] .error`, &rule))
	if !strings.Contains(strings.ToLower(rule), "min") {
		t.Errorf("ids error %q, want the schema's minItems rule", rule)
	}

	for _, id := range []string{"article-2", "article-4"} {
		run(t, ctx, "adding "+id, chromedp.Click(card+` button[data-action=add-item]`),
			chromedp.SendKeys(card+` .arg-row:last-of-type input`, id),
			chromedp.SendKeys(card+` .arg-row:last-of-type input`, kb.Enter))
	}
	// Enter sent nothing: only the refused edit reached the processor.
	if got := s.rec.matching(thread, events.TypeElicitationResponded); len(got) != 0 {
		t.Fatalf("%d answers accepted before Allow with changes was clicked:\n%s", len(got), s.rec.dump(thread))
	}
	screenshot(t, ctx, screenshotDir(t), "confirm-edit.png")
	run(t, ctx, "allowing with changes", chromedp.Click(card+` button[data-action=accept-edited]`))
	s.rec.await(t, 20*time.Second, thread, events.TypeTurnCompleted, 1)
	if got := s.deletedIDs(); strings.Join(got, ",") != "article-2,article-4" {
		t.Fatalf("deleted %v, want exactly the edit [article-2 article-4]", got)
	}
	run(t, ctx, "the card says it was edited", chromedp.Poll(
		`[...document.querySelectorAll("li.question.settled .state")].some(n => n.textContent.startsWith("Allowed with changes by you"))`,
		nil, chromedp.WithPollingTimeout(10*time.Second)))
	waitText(t, ctx, "changed the arguments")
	// The folded card shows the arguments that ran, not only the model's
	// (which it showed first), also to a page that reads the thread anew.
	folded := `(() => { const n = document.querySelector("li.question.settled.collapsed > .edited-args"); return !!n && n.offsetParent !== null && n.textContent.includes('["article-2","article-4"]'); })()`
	run(t, ctx, "the folded card shows the edit", chromedp.Poll(folded, nil, chromedp.WithPollingTimeout(10*time.Second)))
	run(t, ctx, "reloading", chromedp.Reload())
	run(t, ctx, "the folded card shows the edit after a reload", chromedp.Poll(folded, nil, chromedp.WithPollingTimeout(20*time.Second)))
}
