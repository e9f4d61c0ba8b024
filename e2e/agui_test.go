package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/gateway"
	"github.com/parley-dev/parley/internal/testskip"
)

// aguiScript returns the path of gateway/testdata/agui/run.mjs, which
// drives the gateway with the real AG-UI client installed there (`npm ci
// --prefix gateway/testdata/agui`, done by .ci/run). Missing node or the
// packages, it skips the test (fails it under CI=true).
func aguiScript(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "gateway", "testdata", "agui"))
	if err != nil {
		t.Fatal(err)
	}
	_, statErr := os.Stat(filepath.Join(dir, "node_modules", "@ag-ui", "client", "package.json"))
	_, nodeErr := exec.LookPath("node")
	if statErr != nil || nodeErr != nil {
		testskip.Skip(t, testskip.AGUIPackages, fmt.Sprintf("AG-UI test needs node and @ag-ui/client (stat: %v, node: %v)", statErr, nodeErr))
	}
	return filepath.Join(dir, "run.mjs")
}

// aguiSummary is the last line run.mjs prints.
type aguiSummary struct {
	Scenario string            `json:"scenario"`
	OK       bool              `json:"ok"`
	Error    string            `json:"error"`
	Text     string            `json:"text"`
	Result   string            `json:"result"`
	Errors   []json.RawMessage `json:"errors"`
	Messages []string          `json:"messages"`
}

// runAGUI runs scenario of run.mjs against the gateway at base on thread
// as alice; paused, when not nil, is called with the script's line that
// says the first run ended with its interrupt, and returns the base URL
// to resume through.
func runAGUI(t *testing.T, scenario, base, thread string, paused func() string) aguiSummary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", aguiScript(t), scenario, base, aliceToken, thread)
	// The client's warnings fail the script: none may be suppressed.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SUPPRESS_TRANSFORMATION_WARNINGS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var last string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		last = line
		if strings.Contains(line, `"paused":true`) && paused != nil {
			if _, err := io.WriteString(stdin, paused()+"\n"); err != nil {
				t.Errorf("writing to the script: %v", err)
			}
		}
	}
	err = cmd.Wait()
	var sum aguiSummary
	if jerr := json.Unmarshal([]byte(last), &sum); jerr != nil || err != nil || !sum.OK {
		t.Fatalf("node run.mjs %s: %v\nlast line: %s\nstderr:\n%s", scenario, err, last, stderr.String())
	}
	t.Logf("node run.mjs %s: %s", scenario, last)
	return sum
}

// The AG-UI client deletes the 10 draft articles through a tool_approval
// interrupt it approves: the gated call runs once, and the client sees
// the result and the final text.
func TestAGUIApprove(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	sum := runAGUI(t, "approve", x.srv.URL, "ag1", nil)
	if !strings.Contains(sum.Text, "Deleted 10") {
		t.Errorf("final text = %q, want the deletion", sum.Text)
	}
	if n := s.drafts(); n != 0 {
		t.Errorf("drafts = %d, want 0", n)
	}
}

// approveWithEdits: the client resumes the confirmation with editedArgs;
// an edit that does not fit the tool's input schema re-raises the
// interrupt naming editedArgs.ids and deletes nothing, and the valid edit
// deletes exactly article-2 of the ten drafts.
func TestAGUIApproveWithEdits(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	sum := runAGUI(t, "edit", x.srv.URL, "agedit", nil)
	if got := s.deletedIDs(); !slices.Equal(got, []string{"article-2"}) {
		t.Fatalf("deleted %v, want exactly the edit [article-2]", got)
	}
	if n := s.drafts(); n != 9 {
		t.Errorf("drafts = %d, want 9", n)
	}
	if !strings.Contains(sum.Text, `to {"ids":["article-2"]}`) {
		t.Errorf("final text = %q, want the edit named", sum.Text)
	}
}

// A decline with a reason: nothing is deleted, the model reads the
// reason, the gated call is closed as not run.
func TestAGUIDecline(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	sum := runAGUI(t, "decline", x.srv.URL, "ag2", nil)
	if !strings.Contains(sum.Text, "not before the audit") {
		t.Errorf("final text = %q, want the reason", sum.Text)
	}
	if n := s.drafts(); n != 10 {
		t.Errorf("drafts = %d, want 10", n)
	}
}

// The event form: an input_required interrupt with the form's schema; an
// invalid date re-raises it with the field's error; a valid answer
// creates the event.
func TestAGUIForm(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	sum := runAGUI(t, "form", x.srv.URL, "ag3", nil)
	if !strings.Contains(sum.Text, "Launch party") {
		t.Errorf("final text = %q, want the event", sum.Text)
	}
}

// Every worker restarts between the interrupt and the resume, and the
// resume goes through another gateway replica: the turn resumes from its
// pause record and the client sees RUN_FINISHED with the result.
func TestAGUIResumeAfterRestart(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	sum := runAGUI(t, "restart", x.srv.URL, "ag4", func() string {
		x.stop()
		s.restartWorkers()
		return s.startGateway(nil).srv.URL
	})
	if !strings.Contains(sum.Text, "Deleted 10") {
		t.Errorf("final text = %q, want the deletion", sum.Text)
	}
	if n := s.drafts(); n != 0 {
		t.Errorf("drafts = %d, want 0", n)
	}
}

// postAGUI posts a RunAgentInput to the gateway as alice and returns the
// run's AG-UI events (the response ends with the run).
func postAGUI(t *testing.T, x *gw, body string) []map[string]any {
	t.Helper()
	req, err := http.NewRequest("POST", x.srv.URL+"/v1/ag-ui", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Content-Type", "application/json")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /v1/ag-ui: %d %s", resp.StatusCode, b)
	}
	var out []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// interruptIDs returns the interrupt IDs of a run's RUN_FINISHED.
func interruptIDs(t *testing.T, evs []map[string]any) []string {
	t.Helper()
	last := evs[len(evs)-1]
	out, _ := last["outcome"].(map[string]any)
	if last["type"] != "RUN_FINISHED" || out["type"] != "interrupt" {
		t.Fatalf("last event %v, want RUN_FINISHED with an interrupt", last)
	}
	var ids []string
	for _, in := range out["interrupts"].([]any) {
		ids = append(ids, in.(map[string]any)["id"].(string))
	}
	return ids
}

// A run retried with the same message (a lost response, a reload) starts
// no second turn: it replays the turn's events and ends with the same
// interrupt.
func TestAGUIRetriedRunStartsNoSecondTurn(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	body := func(run string) string {
		return `{"threadId":"ag5","runId":"` + run + `","messages":[{"id":"m1","role":"user","content":"` + deleteDrafts + `"}],"tools":[],"context":[],"state":{},"forwardedProps":{}}`
	}
	first := interruptIDs(t, postAGUI(t, x, body("r1")))
	second := postAGUI(t, x, body("r2"))
	if got := interruptIDs(t, second); len(got) != 1 || got[0] != first[0] {
		t.Fatalf("retried run's interrupts %v, want %v", got, first)
	}
	if second[0]["runId"] != "r2" {
		t.Fatalf("retried run started %v", second[0])
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(s.rec.matching("ag5", events.TypeTurnPaused)); n != 1 {
		t.Fatalf("%d turns paused, want 1", n)
	}
	if n := len(s.rec.matching("ag5", events.TypeTurnRequested)); n != 1 {
		t.Fatalf("%d messages accepted, want 1", n)
	}
	// Bob cannot resume alice's thread: 404, and nothing is answered.
	req, _ := http.NewRequest("POST", x.srv.URL+"/v1/ag-ui", strings.NewReader(
		`{"threadId":"ag5","runId":"r3","messages":[],"resume":[{"interruptId":"`+first[0]+`","status":"resolved","payload":{"approved":true}}]}`))
	req.Header.Set("Authorization", "Bearer "+bobToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob's resume: %d, want 404", resp.StatusCode)
	}
	if n := len(s.rec.matching("ag5", events.TypeElicitationResponded)); n != 0 || s.drafts() != 10 {
		t.Fatalf("answers %d, drafts %d after bob's resume", n, s.drafts())
	}
}

// postAGUIStatus posts a RunAgentInput as alice and returns the status
// and the body (a problem, when not 200).
func postAGUIStatus(t *testing.T, x *gw, body string) (int, string) {
	t.Helper()
	resp, b := x.do("POST", "/v1/ag-ui", aliceToken, json.RawMessage(body))
	return resp.StatusCode, string(b)
}

// The person types instead of answering: a resume that cancels the
// interrupt may carry a new user message, which then runs; a resume that
// resolves one may not (400, nothing answered). Cancelling an interrupt
// that is no longer pending is a no-op run.
func TestAGUICancelWithNewMessage(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(nil)
	m1 := `{"id":"m1","role":"user","content":"` + deleteDrafts + `"}`
	m2 := `{"id":"m2","role":"user","content":"list everything"}`
	id := interruptIDs(t, postAGUI(t, x, `{"threadId":"ag6","runId":"r1","messages":[`+m1+`]}`))[0]

	code, body := postAGUIStatus(t, x, `{"threadId":"ag6","runId":"r2","messages":[`+m1+`,`+m2+`],"resume":[{"interruptId":"`+id+`","status":"resolved","payload":{"approved":true}}]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, `"path":"messages[1]"`) {
		t.Fatalf("resolve with a new message: %d %s", code, body)
	}
	if n := len(s.rec.matching("ag6", events.TypeElicitationResponded)); n != 0 {
		t.Fatalf("%d answers accepted after a refused run", n)
	}

	evs := postAGUI(t, x, `{"threadId":"ag6","runId":"r3","messages":[`+m1+`,`+m2+`],"resume":[{"interruptId":"`+id+`","status":"cancelled"}]}`)
	last := evs[len(evs)-1]
	if last["type"] != "RUN_FINISHED" || last["outcome"] != nil {
		t.Fatalf("cancel and list: last event %v", last)
	}
	var text strings.Builder
	for _, e := range evs {
		if e["type"] == "TEXT_MESSAGE_CONTENT" {
			text.WriteString(e["delta"].(string))
		}
	}
	if !strings.Contains(text.String(), "article") {
		t.Fatalf("the new message's answer = %q", text.String())
	}
	if n := s.drafts(); n != 10 {
		t.Fatalf("drafts = %d, want 10", n)
	}

	evs = postAGUI(t, x, `{"threadId":"ag6","runId":"r4","messages":[],"resume":[{"interruptId":"`+id+`","status":"cancelled"}]}`)
	if len(evs) != 2 || evs[1]["type"] != "RUN_FINISHED" {
		t.Fatalf("cancelling a settled interrupt: %v", evs)
	}
	code, body = postAGUIStatus(t, x, `{"threadId":"ag6","runId":"r5","messages":[],"resume":[{"interruptId":"`+id+`","status":"resolved","payload":{"approved":true}}]}`)
	if code != http.StatusGone || !strings.Contains(body, "unknown_or_expired") {
		t.Fatalf("resolving a settled interrupt: %d %s", code, body)
	}
}

// A streaming model through the AG-UI client: the deltas are one text
// message, progress is activity, and the final message is not sent twice.
func TestAGUIStreamedText(t *testing.T) {
	s, _ := startOpenAIAllProgress(t, reply("text.sse"))
	x := s.startGateway(nil)
	sum := runAGUI(t, "stream", x.srv.URL, "ag7", nil)
	if want := "Hello! I can list, publish or delete your content."; sum.Text != want {
		t.Errorf("streamed text = %q, want %q", sum.Text, want)
	}
}

// A message sent again after the streams' duplicate window (here cut
// to a second) is taken by the processor for a redelivery of one it
// handled: it starts nothing, and the run ends with RUN_ERROR
// already_handled instead of waiting for a turn that ended long ago.
func TestAGUIMessageHandledBefore(t *testing.T) {
	s := start(t, options{})
	x := s.startGateway(&gateway.Options{Heartbeat: 200 * time.Millisecond})
	// The input's window, and the chat stream's, which would drop the
	// processor's echo of the redelivery.
	js := s.bus.JetStream()
	for _, name := range []string{events.StreamInput, events.StreamChat} {
		st, err := js.Stream(s.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.Duplicates = time.Second
		if _, err := js.UpdateStream(s.ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	body := `{"threadId":"ag8","runId":"r1","messages":[{"id":"m1","role":"user","content":"list everything"}]}`
	evs := postAGUI(t, x, body)
	if last := evs[len(evs)-1]; last["type"] != "RUN_FINISHED" {
		t.Fatalf("first run ended with %v", last)
	}
	time.Sleep(1500 * time.Millisecond)
	evs = postAGUI(t, x, strings.Replace(body, `"r1"`, `"r2"`, 1))
	if last := evs[len(evs)-1]; last["type"] != "RUN_ERROR" || last["code"] != "already_handled" {
		t.Fatalf("the message sent again ended with %v", last)
	}
	if n := len(s.rec.matching("ag8", events.TypeTurnCompleted)); n != 1 {
		t.Fatalf("%d turns completed, want 1", n)
	}
}
