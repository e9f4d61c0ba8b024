package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/internal/testskip"
)

// aisdkScript returns the path of gateway/testdata/aisdk/chat.mjs when node
// and the pinned `ai` package are installed (npm ci --prefix
// gateway/testdata/aisdk); else it skips (fails under CI=true).
func aisdkScript(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "gateway", "testdata", "aisdk"))
	if err != nil {
		t.Fatal(err)
	}
	_, statErr := os.Stat(filepath.Join(dir, "node_modules", "ai", "package.json"))
	_, nodeErr := exec.LookPath("node")
	if statErr != nil || nodeErr != nil {
		testskip.Skip(t, testskip.AISDK, fmt.Sprintf("AI SDK test needs node and the ai package (stat: %v, node: %v)", statErr, nodeErr))
	}
	return filepath.Join(dir, "chat.mjs")
}

// aisdkReport is chat.mjs's JSON report.
type aisdkReport struct {
	Error             string            `json:"error"`
	Chunks            []string          `json:"chunks"`
	Headers           []string          `json:"headers"`
	Text              string            `json:"text"`
	ToolState         string            `json:"toolState"`
	ApprovalID        string            `json:"approvalId"`
	ResumeWhilePaused string            `json:"resumeWhilePaused"`
	StreamErrors      []string          `json:"streamErrors"`
	Paused            json.RawMessage   `json:"paused"`
	Final             json.RawMessage   `json:"final"`
	Extra             map[string]string `json:"-"`
}

// runAISDK runs chat.mjs scenario on thread against x as alice; onLine is
// called for each line before the report (with the script's stdin).
func runAISDK(t *testing.T, x *gw, scenario, thread string, onLine func(line string, stdin io.Writer)) aisdkReport {
	t.Helper()
	script := aisdkScript(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, scenario, thread)
	cmd.Env = append(os.Environ(), "PARLEY_URL="+x.srv.URL, "PARLEY_TOKEN="+aliceToken)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var last string
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		last = sc.Text()
		if onLine != nil {
			onLine(last, stdin)
		}
	}
	err = cmd.Wait()
	var rep aisdkReport
	if jerr := json.Unmarshal([]byte(last), &rep); jerr != nil {
		t.Fatalf("chat.mjs %s: %v; output %q; stderr %s", scenario, err, last, stderr.String())
	}
	if err != nil || rep.Error != "" {
		t.Fatalf("chat.mjs %s: %v: %s\nstderr: %s", scenario, err, rep.Error, stderr.String())
	}
	for _, h := range rep.Headers {
		if h != "v1" {
			t.Errorf("x-vercel-ai-ui-message-stream = %q, want v1", h)
		}
	}
	return rep
}

func hasChunk(rep aisdkReport, typ string) bool { return slices.Contains(rep.Chunks, typ) }

// TestAISDKApprove plays "delete the 10 draft articles" through the AI
// SDK's own DefaultChatTransport and readUIMessageStream: the stream ends
// at a tool-approval-request, the approval (the tool part in state
// approval-responded) runs the call, and the final text says so.
func TestAISDKApprove(t *testing.T) {
	aisdkScript(t)
	s := start(t, options{})
	x := s.startGateway(nil)
	before := s.drafts()
	if before == 0 {
		t.Fatal("the site has no drafts to delete")
	}
	rep := runAISDK(t, x, "approve", "ai1", nil)
	for _, want := range []string{"start", "start-step", "tool-input-available", "tool-approval-request", "tool-output-available", "text-start", "text-delta", "text-end", "finish-step", "finish", "[DONE]"} {
		if !hasChunk(rep, want) {
			t.Errorf("no %s chunk in %v", want, rep.Chunks)
		}
	}
	if rep.ResumeWhilePaused != "none" {
		t.Errorf("reconnectToStream while paused = %s, want none (204: the paused stream finished)", rep.ResumeWhilePaused)
	}
	if rep.ToolState != "output-available" {
		t.Errorf("approved tool part state = %q, want output-available", rep.ToolState)
	}
	if !strings.Contains(rep.Text, "Deleted") {
		t.Errorf("final text = %q, want the deletion", rep.Text)
	}
	if n := s.drafts(); n != 0 {
		t.Errorf("%d drafts left, want 0", n)
	}
	if len(rep.StreamErrors) > 0 {
		t.Errorf("stream errors: %v", rep.StreamErrors)
	}
}

// TestAISDKDecline declines with a reason: the call is denied
// (output-denied), nothing is deleted, and the model reads the reason.
func TestAISDKDecline(t *testing.T) {
	aisdkScript(t)
	s := start(t, options{})
	x := s.startGateway(nil)
	before := s.drafts()
	rep := runAISDK(t, x, "decline", "ai2", nil)
	if rep.ToolState != "output-denied" {
		t.Errorf("declined tool part state = %q, want output-denied", rep.ToolState)
	}
	if !strings.Contains(rep.Text, "deleted nothing") || !strings.Contains(rep.Text, "not yet") {
		t.Errorf("final text = %q, want nothing deleted with the reason", rep.Text)
	}
	if n := s.drafts(); n != before {
		t.Errorf("%d drafts, want %d", n, before)
	}
}

// TestAISDKForm answers the event form through a data-parley-form-response
// part and gets the event created.
func TestAISDKForm(t *testing.T) {
	aisdkScript(t)
	s := start(t, options{})
	x := s.startGateway(nil)
	rep := runAISDK(t, x, "form", "ai3", nil)
	if !hasChunk(rep, "data-parley-form") {
		t.Errorf("no data-parley-form chunk in %v", rep.Chunks)
	}
	if !strings.Contains(rep.Text, "Launch party") {
		t.Errorf("final text = %q, want the created event", rep.Text)
	}
}

// TestAISDKRestartBetweenApprovalAndAnswer restarts every worker while
// the approval waits: the approval still resumes the turn and the client
// sees it finish.
func TestAISDKRestartBetweenApprovalAndAnswer(t *testing.T) {
	aisdkScript(t)
	s := start(t, options{})
	x := s.startGateway(nil)
	restarted := false
	rep := runAISDK(t, x, "approve-wait", "ai4", func(line string, stdin io.Writer) {
		if line == "PAUSED" {
			s.restartWorkers()
			restarted = true
			fmt.Fprintln(stdin, "go")
		}
	})
	if !restarted {
		t.Fatal("the script never paused")
	}
	if rep.ToolState != "output-available" || !strings.Contains(rep.Text, "Deleted") || !hasChunk(rep, "finish") {
		t.Errorf("after the restart: tool %q, text %q, chunks %v", rep.ToolState, rep.Text, rep.Chunks)
	}
	if n := s.drafts(); n != 0 {
		t.Errorf("%d drafts left, want 0", n)
	}
}
