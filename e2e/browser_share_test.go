package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/gateway"
)

// Alice shares a new thread with bob from the page (before its first
// message, so the message carries the share), asks for the delete; bob,
// signed in on the same page, sees the thread as shared with him by alice
// and allows the confirmation: the decision names bob. Alice then removes
// the share from the page and bob gets 404.
func TestBrowserSharing(t *testing.T) {
	s := start(t, options{})
	// Each sign-in reloads the page, which fetches again: a burst above
	// the default per-user rate.
	x := s.startGateway(&gateway.Options{RatePerSecond: 50, RateBurst: 200})
	ctx := browser(t, s, x)
	var thread string
	run(t, ctx, "share with bob",
		chromedp.Click("#sharing summary", chromedp.ByQuery),
		chromedp.WaitVisible("#share-user", chromedp.ByID),
		chromedp.SendKeys("#share-user", "bob", chromedp.ByID),
		chromedp.Click("#share-add", chromedp.ByID),
		chromedp.Poll(`[...document.querySelectorAll("#share-list li span")].map(n => n.textContent).join() === "bob"`, nil,
			chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Evaluate(`state.thread`, &thread))
	var info string
	run(t, ctx, "share info", chromedp.Text("#share-info", &info, chromedp.ByID))
	if info != "Shared with 1 user." {
		t.Errorf("share info = %q", info)
	}
	screenshot(t, ctx, screenshotDir(t), "sharing.png")
	say(t, ctx, deleteDrafts)
	run(t, ctx, "the confirmation", chromedp.WaitVisible(`li.question:not(.settled) button[data-action=accept]`))

	// Bob signs in on the same page and opens the thread.
	run(t, ctx, "bob signs in", chromedp.Evaluate(fmt.Sprintf(`sessionStorage.setItem("parley-token", %q); location.hash = "thread=%s"; 1`, bobToken, thread), nil), chromedp.Reload())
	run(t, ctx, "bob's view",
		chromedp.WaitVisible(`li.question:not(.settled) button[data-action=accept]`),
		chromedp.Poll(`document.getElementById("share-info").textContent === "Shared with you by alice."`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Poll(`[...document.querySelectorAll("#threads button")].some(b => b.dataset.thread === `+fmt.Sprintf("%q", thread)+`)`, nil, chromedp.WithPollingTimeout(10*time.Second)))
	var formHidden bool
	run(t, ctx, "no share form for bob", chromedp.Evaluate(`document.getElementById("share-form").hidden`, &formHidden))
	if !formHidden {
		t.Error("bob, who is only shared the thread, is offered the share form")
	}
	run(t, ctx, "bob allows", chromedp.Click(`li.question:not(.settled) button[data-action=accept]`))
	waitText(t, ctx, "Deleted 10")
	tc, err := events.Data[events.TurnCompleted](s.rec.await(t, 10*time.Second, thread, events.TypeTurnCompleted, 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(tc.Decisions) == 0 || tc.Decisions[len(tc.Decisions)-1].AnsweredBy != (events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}) {
		t.Fatalf("decisions %s, want bob's", mustJSON(tc.Decisions))
	}

	// Alice removes the share from the page.
	run(t, ctx, "alice signs in", chromedp.Evaluate(fmt.Sprintf(`sessionStorage.setItem("parley-token", %q); location.hash = "thread=%s"; 1`, aliceToken, thread), nil), chromedp.Reload())
	run(t, ctx, "remove bob",
		chromedp.WaitVisible("#composer-text", chromedp.ByID),
		chromedp.Click("#sharing summary", chromedp.ByQuery),
		chromedp.WaitVisible(`#share-list button[aria-label="Stop sharing with bob"]`),
		chromedp.Click(`#share-list button[aria-label="Stop sharing with bob"]`),
		chromedp.Poll(`document.querySelectorAll("#share-list li").length === 0 && document.getElementById("share-info").textContent === "Only you."`, nil,
			chromedp.WithPollingTimeout(10*time.Second)))
	if resp, body := x.do("GET", "/v1/threads/"+thread, bobToken, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob after the revoke = %d %s, want 404", resp.StatusCode, body)
	}
	// Bob's page, following the thread when the share is revoked, says so.
	run(t, ctx, "bob again", chromedp.Evaluate(fmt.Sprintf(`sessionStorage.setItem("parley-token", %q); location.hash = "thread=%s"; 1`, bobToken, thread), nil), chromedp.Reload(),
		chromedp.WaitVisible("#composer-text", chromedp.ByID))
	if resp, body := x.do("PUT", "/v1/threads/"+thread+"/shares/bob", aliceToken, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("share again = %d %s", resp.StatusCode, body)
	}
	run(t, ctx, "bob reads the thread again", chromedp.Evaluate(`openThread(state.thread); 1`, nil),
		chromedp.Poll(`[...document.querySelectorAll("li.msg.assistant")].some(n => n.textContent.includes("Deleted 10"))`, nil, chromedp.WithPollingTimeout(10*time.Second)))
	if resp, body := x.do("DELETE", "/v1/threads/"+thread+"/shares/bob", aliceToken, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke again = %d %s", resp.StatusCode, body)
	}
	run(t, ctx, "bob is told", chromedp.Poll(`[...document.querySelectorAll("li.msg.error")].some(n => n.textContent.includes("no longer see this thread"))`, nil,
		chromedp.WithPollingTimeout(15*time.Second)))
	// Only the owner may share: bob's attempt is refused with the reason.
	if resp, body := x.do("PUT", "/v1/threads/"+thread+"/shares/carol", bobToken, nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "not_found") {
		t.Fatalf("bob sharing after the revoke = %d %s, want 404", resp.StatusCode, body)
	}
}
