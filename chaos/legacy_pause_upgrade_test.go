//go:build unix

package chaos

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
)

// legacyFrom is the last commit whose processor stored the whole paused
// turn in parley_paused under the thread ID (the release before the
// paused turn moved into the thread record).
const legacyFrom = "2005973^"

// Never two accepted answers for one question, across a rolling upgrade
// from the release before the paused turn moved into the thread record:
// an old processor pauses a turn (its legacy pause record); a new one
// adopts the record, takes the first answer and resumes the turn, which
// completes; then a second answer to the same question (a late double
// click, a second person) reaches an old replica still running. The new
// release never writes the legacy record, so the old replica reads the
// question as open and accepts the second answer as well.
func TestLegacyPauseAnsweredOnBothVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds two versions of parley")
	}
	t.Skip("finding: an old processor accepts a second answer to a legacy pause a new processor adopted and resumed (docs/OPERATIONS.md, Upgrades)")
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	from := os.Getenv("PARLEY_LEGACY_FROM")
	if from == "" {
		from = legacyFrom
	}
	tmp := t.TempDir()
	oldBin := buildOldParley(t, from, tmp)
	logDir := filepath.Join(tmp, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv := &natsServer{bin: bins.server, dir: filepath.Join(tmp, "js"), log: filepath.Join(logDir, "nats.log"), port: freePort(t)}
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.stop)
	one := func(bin, role, tag string) *worker {
		w := &worker{role: role, bin: bin, env: os.Environ(),
			args: []string{"--nats", srv.url(), "--log-format", "json", "--storage", "file"},
			log:  filepath.Join(logDir, tag+"-"+role+".log")}
		if err := w.startOnce(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.shutdown)
		return w
	}
	for _, role := range []string{"gate", "toolexec", "agent"} {
		one(oldBin, role, "old")
	}
	oldProc := one(oldBin, "processor", "old")
	if err := waitRolesReady(srv.url(), 90*time.Second); err != nil {
		t.Fatal(err)
	}
	const thread = "legacy-1"
	out, err := exec.Command(oldBin, "send", "--nats", srv.url(), "--thread", thread, "--wait", "60s",
		"delete the 2 draft articles").CombinedOutput()
	if err != nil {
		t.Fatalf("old: parley send: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`--elicitation (\S+) accept`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("the old version did not pause the turn:\n%s", out)
	}
	elicitation := string(m[1])

	// A new processor takes the first answer (the old one is stopped
	// meanwhile, so the new one handles it).
	oldProc.shutdown()
	newProc := one(bins.parley, "processor", "new")
	time.Sleep(2 * time.Second) // its consumers are the shared durables
	out, err = exec.Command(bins.parley, "answer", "--nats", srv.url(), "--thread", thread, "--elicitation", elicitation,
		"--wait", "60s", "accept").CombinedOutput()
	if err != nil {
		t.Fatalf("new: parley answer: %v\n%s", err, out)
	}
	waitTurnCompleted(t, srv.url(), thread, 60*time.Second)

	// The second answer reaches an old replica.
	newProc.shutdown()
	one(oldBin, "processor", "old2")
	time.Sleep(2 * time.Second)
	_, _ = exec.Command(bins.parley, "answer", "--nats", srv.url(), "--thread", thread, "--elicitation", elicitation,
		"--wait", "30s", "decline").CombinedOutput()
	accepted, rejected := answerVerdicts(t, srv.url(), thread, elicitation, 30*time.Second)
	if accepted != 1 || rejected != 1 {
		t.Fatalf("question %s: %d answers accepted, %d rejected; want 1 and 1", elicitation, accepted, rejected)
	}
}

// answerVerdicts counts the accepted (echoed elicitation.responded) and
// rejected answers to elicitation on thread, waiting until there are two.
func answerVerdicts(t *testing.T, url, thread, elicitation string, within time.Duration) (accepted, rejected int) {
	t.Helper()
	next := threadEvents(t, url, thread, within)
	for accepted+rejected < 2 {
		e, err := next()
		if errors.Is(err, context.DeadlineExceeded) {
			return accepted, rejected
		}
		if errors.Is(err, errUndecodable) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(e.Data()), elicitation) {
			continue
		}
		switch events.TypeOf(e) {
		case events.TypeElicitationResponded:
			accepted++
		case events.TypeElicitationRejected:
			rejected++
		}
	}
	return accepted, rejected
}
