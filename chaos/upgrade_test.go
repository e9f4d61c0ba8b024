//go:build unix

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// buildOldParley builds ./cmd/parley as of rev (git archive of the
// repository, so no worktree or checkout is touched) into dir. It skips the
// test when git or the revision is not available (a shallow clone).
func buildOldParley(t *testing.T, rev, dir string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	full, err := exec.Command("git", "-C", root, "rev-parse", "--verify", rev+"^{commit}").Output()
	if err != nil {
		t.Skipf("git rev-parse %s: %v (no git, or a shallow clone; set PARLEY_UPGRADE_FROM)", rev, err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", strings.TrimSpace(string(full)))
	untar := exec.Command("tar", "-x", "-C", src)
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	archive.Stderr = &stderr
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, stderr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar: %v", err)
	}
	bin := filepath.Join(dir, "parley-old")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/parley")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building parley at %s: %v\n%s", rev, err, out)
	}
	t.Logf("previous version: %s (%s)", rev, strings.TrimSpace(string(full))[:12])
	return bin
}

// startRoles starts one process of every worker role from bin and returns
// a function that stops them with SIGTERM (a rolling upgrade's clean stop).
func startRoles(t *testing.T, bin, url, logDir, tag string) (stop func()) {
	t.Helper()
	var ws []*worker
	for _, role := range []string{"gate", "toolexec", "agent", "processor"} {
		w := &worker{role: role, bin: bin, env: os.Environ(),
			args: []string{"--nats", url, "--log-format", "json", "--storage", "file"},
			log:  filepath.Join(logDir, tag+"-"+role+".log")}
		if err := w.startOnce(); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	return func() {
		for _, w := range ws {
			w.shutdown()
		}
	}
}

// TestUpgradeResumesPausedTurn is the upgrade test: a turn paused by
// the previous version's workers (PARLEY_UPGRADE_FROM, default HEAD~1: the
// commit before this one) is answered after every worker was replaced by
// this version's, and completes with the answer recorded. It fails when a
// release cannot read the paused records, thread records or internal
// events the previous one left (docs/OPERATIONS.md, Upgrades).
func TestUpgradeResumesPausedTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds two versions of parley")
	}
	from := os.Getenv("PARLEY_UPGRADE_FROM")
	if from == "" {
		from = "HEAD~1"
	}
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	newBin, serverBin := bins.parley, bins.server
	tmp := t.TempDir()
	oldBin := buildOldParley(t, from, tmp)
	logDir := filepath.Join(tmp, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv := &natsServer{bin: serverBin, dir: filepath.Join(tmp, "js"), log: filepath.Join(logDir, "nats.log"), port: freePort(t)}
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.stop)
	defer func() {
		if t.Failed() {
			for _, f := range []string{"old-processor", "old-agent", "new-processor", "new-agent"} {
				b, _ := os.ReadFile(filepath.Join(logDir, f+".log"))
				t.Logf("--- %s.log (tail)\n%s", f, tail(string(b), 3000))
			}
		}
	}()

	// Pause with the previous version.
	stopOld := startRoles(t, oldBin, srv.url(), logDir, "old")
	if err := waitRolesReady(srv.url(), 90*time.Second); err != nil {
		stopOld()
		t.Fatalf("previous version: %v", err)
	}
	const thread = "upgrade-1"
	out, err := exec.Command(oldBin, "send", "--nats", srv.url(), "--thread", thread, "--wait", "60s",
		"delete the 2 draft articles").CombinedOutput()
	if err != nil {
		stopOld()
		t.Fatalf("previous version: parley send: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`--elicitation (\S+) accept`).FindSubmatch(out)
	if m == nil {
		stopOld()
		t.Fatalf("previous version did not pause the turn:\n%s", out)
	}
	elicitation := string(m[1])
	stopOld()

	// Answer with this version.
	stopNew := startRoles(t, newBin, srv.url(), logDir, "new")
	defer stopNew()
	out, err = exec.Command(newBin, "answer", "--nats", srv.url(), "--thread", thread, "--elicitation", elicitation,
		"--wait", "60s", "accept").CombinedOutput()
	if err != nil {
		t.Fatalf("this version: parley answer: %v\n%s", err, out)
	}
	completed := waitTurnCompleted(t, srv.url(), thread, 60*time.Second)
	var answered bool
	for _, d := range completed.Decisions {
		answered = answered || (d.ElicitationID == elicitation && d.Action == schema.ActionAccept)
	}
	if !answered {
		t.Errorf("turn.completed decisions %+v record no accepted answer to %s", completed.Decisions, elicitation)
	}
}

// waitRolesReady waits until the workers of some version are ready to run
// a confirmed tool call, judged only by what every version leaves on the
// bus: durable consumers named processor, agent and toolexec (on whichever
// streams that version uses), the tool delete_entities registered in
// parley_tools, and the gate answering $SRV.PING.
func waitRolesReady(url string, within time.Duration) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var missing []string
	for ctx.Err() == nil {
		missing = missing[:0]
		durables := map[string]bool{}
		streams := js.StreamNames(ctx)
		for name := range streams.Name() {
			st, err := js.Stream(ctx, name)
			if err != nil {
				continue
			}
			cs := st.ConsumerNames(ctx)
			for c := range cs.Name() {
				durables[c] = true
			}
		}
		for _, d := range []string{"processor", "agent", "toolexec"} {
			if !durables[d] {
				missing = append(missing, "consumer "+d)
			}
		}
		if kv, err := js.KeyValue(ctx, "parley_tools"); err != nil {
			missing = append(missing, "bucket parley_tools")
		} else if _, err := kv.Get(ctx, "delete_entities"); err != nil {
			missing = append(missing, "tool delete_entities")
		}
		if _, err := nc.Request("$SRV.PING.parley-gate", nil, 500*time.Millisecond); err != nil {
			missing = append(missing, "gate")
		}
		if len(missing) == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("workers not ready within %s: %v missing", within, missing)
}

// errUndecodable wraps the error of a chat event that does not decode.
var errUndecodable = errors.New("undecodable chat event")

// threadEvents follows thread's events in PARLEY_CHAT from the start, for
// up to within: next returns each in stream order (decoded, or an
// errUndecodable error with the event nil), and context.DeadlineExceeded
// once within has passed. The connection closes at the test's end.
func threadEvents(t *testing.T, url, thread string, within time.Duration) (next func() (*event.Event, error)) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	cons, err := js.OrderedConsumer(ctx, events.StreamChat, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.ChatThreadSubjects(thread)}})
	if err != nil {
		t.Fatal(err)
	}
	return func() (*event.Event, error) {
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			return nil, err
		}
		e, err := events.Decode(events.Header(msg.Headers()), msg.Data())
		if err != nil {
			return nil, fmt.Errorf("%w on %s: %w", errUndecodable, msg.Subject(), err)
		}
		return e, nil
	}
}

// waitTurnCompleted reads the thread's chat events until turn.completed
// (or turn.failed, which fails the test).
func waitTurnCompleted(t *testing.T, url, thread string, within time.Duration) events.TurnCompleted {
	t.Helper()
	next := threadEvents(t, url, thread, within)
	var seen []string
	for {
		e, err := next()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("no turn.completed within %s; thread events: %v", within, seen)
			}
			t.Fatal(err)
		}
		seen = append(seen, e.Type())
		switch events.TypeOf(e) {
		case events.TypeTurnCompleted:
			d, err := events.Data[events.TurnCompleted](e)
			if err != nil {
				t.Fatal(err)
			}
			return d
		case events.TypeTurnFailed, events.TypeElicitationRejected:
			t.Fatalf("%s after the upgrade: %s", e.Type(), e.Data())
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("…%s", s[len(s)-n:])
}
