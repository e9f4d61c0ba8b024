package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// oneDraftRules delete one draft article per message.
const oneDraftRules = `{"rules": [
 {"name": "delete-one", "match": "(?i)delete one draft",
  "steps": [
   {"tool_calls": [{"name": "list_entities", "arguments": {"type": "article", "status": "draft"}}]},
   {"tool_calls": [{"name": "delete_entities", "arguments_template": "{\"ids\": [{{json (index .Last.Structured.ids 0)}}]}"}]},
   {"text": "deleted: {{.Last.Text}}"}]}],
 "fallback": "?"}`

// In parley chat, "t" on a confirmation allows the tool for the thread:
// the next delete runs without a question; /approvals lists it, /revoke
// revokes it, and the question comes back. `parley approvals list` and
// `revoke` show and revoke it too. An empty line never approves.
func TestChatStandingApproval(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(rules, []byte(oneDraftRules), 0o600); err != nil {
		t.Fatal(err)
	}
	url, ctx := startDevWith(t, agentFlags{PreExecuteTimeout: 2 * time.Second, Rules: rules})
	h := startChat(t, url, ctx, "chat-standing")
	h.typeLine("delete one draft")
	h.waitFor("Allow? [y/n/c, or t: allow delete_entities for this thread without asking")
	h.typeLine("") // Enter alone approves nothing
	h.waitFor("please answer y (allow once), t (allow for this thread), n (decline) or c (cancel)")
	h.typeLine("t")
	h.waitFor("→ accepted")
	h.waitFor("assistant: deleted: Deleted 1 entity")
	h.waitFor("you> ")

	h.typeLine("delete one draft")
	h.waitFor("assistant: deleted: Deleted 1 entity")
	h.waitFor("you> ")
	if n := strings.Count(h.out.String(), "Allow?"); n != 2 { // the prompt, and its repeat after the empty line
		t.Fatalf("asked %d times, want only the first delete asked:\n%s", n, h.out.String())
	}
	h.typeLine("/approvals")
	h.waitFor("allowed  delete_entities  (agent default, granted by ")

	out := approvalsCLI(t, url, "list", "--thread", "chat-standing")
	if !strings.Contains(out, "allowed  delete_entities") {
		t.Fatalf("parley approvals list printed %q", out)
	}
	if code, _, errOut := runCLI(t, url, "approvals", "revoke", "delete_entities", "--thread", "chat-standing", "--principal", "mallory"); code != 1 ||
		!strings.Contains(errOut, "only its owner may revoke") {
		t.Fatalf("a stranger's revoke = %d %q, want exit 1, only the owner", code, errOut)
	}
	if code, _, errOut := runCLI(t, url, "approvals", "revoke", "--thread", "chat-standing"); code != 2 ||
		!strings.Contains(errOut, "a tool, or --all, is required") {
		t.Fatalf("a revoke naming nothing = %d %q, want exit 2", code, errOut)
	}
	h.typeLine("/revoke delete_entities")
	h.waitFor("revoked  delete_entities")
	if out := approvalsCLI(t, url, "list", "--thread", "chat-standing"); !strings.Contains(out, "no standing approvals") {
		t.Fatalf("after the revoke, parley approvals list printed %q", out)
	}
	h.typeLine("delete one draft")
	h.waitFor("Allow? [y/n/c, or t: allow delete_entities for this thread without asking")
	h.typeLine("c")
	h.waitFor("→ cancelled")
	h.quit()
}

// approvalsCLI runs parley approvals with args against url and returns
// its output; it fails the test on a non-zero exit.
func approvalsCLI(t *testing.T, url string, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(t, url, append([]string{"approvals"}, args...)...)
	if code != 0 {
		t.Fatalf("parley approvals %v = %d: %s%s", args, code, out, errOut)
	}
	return out
}
