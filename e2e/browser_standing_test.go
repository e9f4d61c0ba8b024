package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/parley-dev/parley/events"
)

// In the web chat: the confirmation offers "Also allow delete_entities in
// this thread without asking again" as a checkbox; checking it and
// clicking Allow grants the approval, the header shows "allowed:
// delete_entities · revoke", the next delete runs without a card, and
// revoke brings the question back.
func TestBrowserStandingApproval(t *testing.T) {
	s := start(t, options{rules: standingRules})
	x := s.startGateway(nil)
	ctx := browser(t, s, x)
	card := `li.question:not(.settled)`
	say(t, ctx, "delete one draft")
	run(t, ctx, "the confirmation", chromedp.WaitVisible(card+` input[data-standing=thread]`))
	var thread string
	run(t, ctx, "the thread", chromedp.Evaluate(`state.thread`, &thread))
	run(t, ctx, "checking allow for this thread, then Allow",
		chromedp.Click(card+` input[data-standing=thread]`),
		chromedp.Click(card+` button[data-action=accept]`))
	s.rec.await(t, 20*time.Second, thread, events.TypeApprovalGranted, 1)
	s.rec.await(t, 20*time.Second, thread, events.TypeTurnCompleted, 1)
	run(t, ctx, "the approvals line", chromedp.Poll(
		`(() => { const l = document.getElementById("approvals"); return !l.hidden && l.textContent.includes("allowed: delete_entities") && !!l.querySelector("button[data-revoke=delete_entities]"); })()`,
		nil, chromedp.WithPollingTimeout(20*time.Second)))
	screenshot(t, ctx, screenshotDir(t), "standing-approval.png")

	drafts := s.drafts()
	run(t, ctx, "waiting for the composer", chromedp.Poll(`!document.getElementById("working")`, nil, chromedp.WithPollingTimeout(20*time.Second)))
	say(t, ctx, "delete one draft")
	s.rec.await(t, 20*time.Second, thread, events.TypeTurnCompleted, 2)
	if n := s.questions(thread); n != 1 {
		t.Fatalf("%d questions asked, want only the first: the second delete asked", n)
	}
	if got := s.drafts(); got != drafts-1 {
		t.Fatalf("drafts %d, want %d", got, drafts-1)
	}
	run(t, ctx, "the note that it ran without asking", chromedp.Poll(
		`[...document.querySelectorAll("#messages li.approval-used")].some(n => n.textContent.includes("delete_entities ran without asking"))`,
		nil, chromedp.WithPollingTimeout(20*time.Second)))

	run(t, ctx, "revoking", chromedp.Click(`#approvals button[data-revoke=delete_entities]`))
	s.rec.await(t, 20*time.Second, thread, events.TypeApprovalRevoked, 1)
	run(t, ctx, "the approvals line hides", chromedp.Poll(`document.getElementById("approvals").hidden`, nil, chromedp.WithPollingTimeout(20*time.Second)))
	say(t, ctx, "delete one draft")
	run(t, ctx, "the question is back", chromedp.WaitVisible(card+` button[data-action=accept]`))
	if n := s.questions(thread); n != 2 {
		t.Fatalf("%d questions, want the question back after the revoke", n)
	}
	var errs string
	run(t, ctx, "page errors", chromedp.Evaluate(`JSON.stringify(window.__errs)`, &errs))
	if errs != "[]" && !strings.Contains(errs, "AbortError") {
		t.Fatalf("page errors: %s", errs)
	}
}
