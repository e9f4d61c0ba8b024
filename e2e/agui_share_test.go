package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
)

// Alice's thread is shared with bob; her run pauses on a confirmation.
// Bob's client resumes it holding the thread's conversation (alice's
// message last): that message is the paused turn's own, not a new one of
// bob's, so bob's answer is taken (he declines: nothing is deleted), and
// his cancel does not send alice's words again as his message; a run of
// his with the conversation ends with her interrupt and sends nothing.
func TestAGUISharedUserResumesWithTheConversation(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	for _, thread := range []string{"sh1", "sh2"} {
		if resp, b := x.do("PUT", "/v1/threads/"+thread+"/shares/bob", aliceToken, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("share %s: %d %s", thread, resp.StatusCode, b)
		}
	}
	m1 := `{"id":"m1","role":"user","content":"` + deleteDrafts + `"}`
	id := interruptIDs(t, postAGUI(t, x, `{"threadId":"sh1","runId":"r1","messages":[`+m1+`]}`))[0]
	code, body := postAs(t, x, bobToken, `{"threadId":"sh1","runId":"r2","messages":[`+m1+`],"resume":[{"interruptId":"`+id+`","status":"resolved","payload":{"approved":false}}]}`)
	if code != http.StatusOK {
		t.Fatalf("bob's resume: %d %s", code, body)
	}
	s.rec.await(t, 15*time.Second, "sh1", events.TypeTurnCompleted, 1)
	if n := s.drafts(); n != 10 {
		t.Fatalf("drafts = %d after bob declined", n)
	}

	id = interruptIDs(t, postAGUI(t, x, `{"threadId":"sh2","runId":"r1","messages":[`+m1+`]}`))[0]
	// Bob's client loads the paused thread: the run ends with alice's
	// interrupt, and sends nothing.
	code, body = postAs(t, x, bobToken, `{"threadId":"sh2","runId":"r3","messages":[`+m1+`]}`)
	if code != http.StatusOK || !strings.Contains(body, `"id":"`+id+`"`) {
		t.Fatalf("bob's run with the conversation: %d %s", code, body)
	}
	code, body = postAs(t, x, bobToken, `{"threadId":"sh2","runId":"r2","messages":[`+m1+`],"resume":[{"interruptId":"`+id+`","status":"cancelled"}]}`)
	if code != http.StatusOK {
		t.Fatalf("bob's cancel: %d %s", code, body)
	}
	if n := len(s.rec.matching("sh2", events.TypeTurnRequested)); n != 1 {
		t.Fatalf("%d messages on the thread after bob's cancel, want alice's one", n)
	}
}

func postAs(t *testing.T, x *gw, token, body string) (int, string) {
	t.Helper()
	resp, b := x.doRaw("POST", "/v1/ag-ui", token, body)
	return resp.StatusCode, string(b)
}
