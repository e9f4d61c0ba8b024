package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/parley-dev/parley/events"
)

func TestThreadTitle(t *testing.T) {
	long := "Please delete the ten draft articles about the launch party, but keep the one about the venue and the catering"
	for _, tc := range []struct{ text, want string }{
		{"delete the 10 draft articles", "delete the 10 draft articles"},
		{"  create\nan   event\t", "create an event"},
		{"", ""},
		{long, "Please delete the ten draft articles about the launch party, but keep the one…"},
		{strings.Repeat("x", 100), strings.Repeat("x", 79) + "…"},
		{strings.Repeat("é", 80), strings.Repeat("é", 80)},
		// The 80th character is a space: the first 79 are whole words.
		{strings.Repeat("a", 79) + " more", strings.Repeat("a", 79) + "…"},
	} {
		got := threadTitle(tc.text)
		if got != tc.want {
			t.Errorf("threadTitle(%q) = %q, want %q", tc.text, got, tc.want)
		}
		if n := utf8.RuneCountInString(got); n > MaxTitle {
			t.Errorf("threadTitle(%q) has %d characters, more than %d", tc.text, n, MaxTitle)
		}
	}
}

// GET /v1/threads names each thread by its first message, for its owner
// and for a user it is shared with; a later message does not change it.
func TestThreadListTitles(t *testing.T) {
	g := shareGateways(t, 1)[0]
	h := g.Handler()
	first := "Delete the ten draft articles about the launch party, but keep the one about the venue please"
	if w := request(t, h, "POST", "/v1/threads/tt/messages", ownerTok, `{"text":`+quote(first)+`}`, nil); w.Code != http.StatusAccepted {
		t.Fatalf("first message = %d %s", w.Code, w.Body)
	}
	echoInput(t, g, "tt", events.ChatTurnRequested)
	if w := request(t, h, "POST", "/v1/threads/tt/messages", ownerTok, `{"text":"and now something else"}`, nil); w.Code != http.StatusAccepted {
		t.Fatalf("second message = %d %s", w.Code, w.Body)
	}
	if w := request(t, h, "PUT", "/v1/threads/tt/shares/other", ownerTok, "", nil); w.Code != http.StatusOK {
		t.Fatalf("share = %d %s", w.Code, w.Body)
	}
	want := "Delete the ten draft articles about the launch party, but keep the one about…"
	for _, tok := range []string{ownerTok, otherTok} {
		w := request(t, h, "GET", "/v1/threads", tok, "", nil)
		var list struct {
			Threads []ThreadSummary `json:"threads"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || len(list.Threads) != 1 {
			t.Fatalf("GET /v1/threads = %d %s (%v), want one thread", w.Code, w.Body, err)
		}
		if got := list.Threads[0].Title; got != want {
			t.Errorf("title = %q, want %q", got, want)
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A request whose token is not accepted is told so, and where a token
// comes from (the web chat shows it on its login card).
func TestUnauthenticatedSaysWhereTokensComeFrom(t *testing.T) {
	src := "parley dev prints the token when it starts and keeps it in /data/gateway-token"
	h := newTestGateway(t, &Options{TokenSource: src}).Handler()
	for _, tc := range []struct{ name, token, want string }{
		{"stale token", "dev-stale-token-0123456789", "token not accepted"},
		{"no token", "", "Bearer token is required"},
	} {
		w := request(t, h, "GET", "/v1/threads", tc.token, "", nil)
		var p Problem
		_ = json.Unmarshal(w.Body.Bytes(), &p)
		if w.Code != http.StatusUnauthorized || !strings.Contains(p.Detail, tc.want) || !strings.Contains(p.Detail, src) {
			t.Errorf("%s: %d %q, want 401 saying %q and %q", tc.name, w.Code, p.Detail, tc.want, src)
		}
	}
}
