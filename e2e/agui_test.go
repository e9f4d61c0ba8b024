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
	"strings"
	"testing"
	"time"

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
