//go:build unix

package chaos

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsauth"
)

// The MCP scenario's agent rules: "count <key>" calls the counter
// server's non-idempotent tool, "recount <key>" its idempotent one; the
// answer is the tool's result text.
const mcpRulesJSON = `{
  "rules": [
    {"name": "count", "match": "^count (\\S+)$",
     "steps": [{"tool_calls": [{"name": "ctr__count", "arguments_template": "{\"key\": {{json (index .Match 1)}}}"}]},
               {"text": "{{.Last.Text}}"}]},
    {"name": "recount", "match": "^recount (\\S+)$",
     "steps": [{"tool_calls": [{"name": "ctr__recount", "arguments_template": "{\"key\": {{json (index .Match 1)}}}"}]},
               {"text": "{{.Last.Text}}"}]}
  ],
  "fallback": "count or recount"
}`

// mcpCallDuration is how long one counter call takes after its effect:
// the window in which the test kills the tool-executor running it.
const mcpCallDuration = "3s"

// TestChaosMCPToolexecKilledMidCall: an MCP tool (a stdio server started
// by the tool-executor from its --mcp-config) is interrupted by SIGKILLing
// the tool-executor replica running it, right after the tool's effect and
// before its result. Two replicas run, each restarted after a kill. Then:
//
//   - every turn completes (none lost, none failed);
//   - the non-idempotent tool never runs twice for one call: a call whose
//     executor was killed mid-call is answered "Outcome unknown" (its
//     effect happened once), never re-run;
//   - the idempotent tool (idempotentHint from a trusted server) is re-run
//     by the other replica and its turn gets the real result;
//   - a "counted" answer always has its effect in the ledger;
//   - no worker broke its NATS permissions.
//
// An interrupted call is settled once the claim of the dead executor is
// stale: redelivery after AckWait (15 s), then ClaimLease (30 s) after the
// claim's last refresh, so the scenario takes about 45 s.
func TestChaosMCPToolexecKilledMidCall(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: skipped with -short")
	}
	if bins.err != nil {
		t.Fatalf("building binaries: %v", bins.err)
	}
	tmp := t.TempDir()
	logDir := filepath.Join(tmp, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	counter := filepath.Join(tmp, "mcpcounter")
	build := exec.Command("go", "build", "-o", counter, "./chaos/testdata/mcpcounter")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building mcpcounter: %v\n%s", err, out)
	}
	ledger := filepath.Join(tmp, "ledger")
	mcpConfig := filepath.Join(tmp, "mcp.json")
	cfg := fmt.Sprintf(`{"servers":{"ctr":{"command":%q,"args":[%q,%q],"trusted":true}}}`, counter, ledger, mcpCallDuration)
	rulesFile, gateFile := filepath.Join(tmp, "rules.json"), filepath.Join(tmp, "gate.json")
	for f, data := range map[string]string{mcpConfig: cfg, rulesFile: mcpRulesJSON,
		gateFile: `{"agents":{"*":{"require_tool_confirmation":false}}}`} {
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	authDir := filepath.Join(tmp, "auth")
	if _, err := natsauth.Init(authDir, natsauth.Roles()); err != nil {
		t.Fatal(err)
	}
	creds := func(p string) natsauth.Credentials {
		return natsauth.Credentials{NKeyFile: filepath.Join(authDir, natsauth.SeedFile(p)), Principal: p}
	}
	adminOpts, err := creds(natsauth.Admin).Options()
	if err != nil {
		t.Fatal(err)
	}
	srv := &natsServer{bin: bins.server, dir: filepath.Join(tmp, "js"), log: filepath.Join(logDir, "nats-server.log"), port: freePort(t),
		extra: []string{"-c", filepath.Join(authDir, natsauth.AuthFile)}, connOpts: adminOpts}
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.stop)

	seed := uint64(time.Now().UnixNano())
	rnd := &lockedRand{r: rand.New(rand.NewPCG(seed, seed))}
	common := []string{"--nats", srv.url(), "--log-format", "json", "--storage", "file"}
	roleArgs := map[string][]string{
		"processor": nil,
		"agent":     {"--rules", rulesFile},
		"toolexec":  {"--mcp-config", mcpConfig},
		"gate":      {"--gate-config", gateFile},
	}
	env := append(os.Environ(), "PARLEY_LOG_LEVEL=info")
	var workers []*worker
	var toolexecs []*worker
	superCtx, stopSupervisors := context.WithCancel(context.Background())
	var supervisors sync.WaitGroup
	for _, role := range []string{"gate", "toolexec", "agent", "processor"} {
		n := 1
		if role == "toolexec" {
			n = 2
		}
		for i := range n {
			w := &worker{role: role, n: i, bin: bins.parley, env: env, rnd: rnd,
				args: append(append(slices.Clone(common), roleArgs[role]...), "--nats-nkey", creds(role).NKeyFile),
				log:  filepath.Join(logDir, fmt.Sprintf("%s-%d.log", role, i))}
			workers = append(workers, w)
			if role == "toolexec" {
				toolexecs = append(toolexecs, w)
			}
			supervisors.Go(func() { w.supervise(superCtx) })
		}
	}
	t.Cleanup(func() {
		stopSupervisors()
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Go(w.shutdown)
		}
		wg.Wait()
		supervisors.Wait()
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, w := range workers {
			b, _ := os.ReadFile(w.log)
			t.Logf("--- %s (%s), last lines:\n%s", w.name(), w.log, lastLines(string(b), 40))
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nc, err := natsauth.Connect(srv.url(), "parley-chaos-mcp-test", creds(natsauth.Admin), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	cl := client.New(b, "/parley/chaos-mcp")
	items, err := cl.Watch(ctx, client.WatchOptions{FromStart: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(items)

	// Ready: both MCP tools registered (every toolexec replica connected
	// to its server), the gate answering.
	deadline := time.Now().Add(60 * time.Second)
	for _, w := range toolexecs {
		for !strings.Contains(readFile(w.log), "mcp server connected") {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not connect to the MCP server; log %s", w.name(), w.log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for {
		kv, err := b.JetStream().KeyValue(ctx, "parley_tools")
		if err == nil {
			_, err1 := kv.Get(ctx, "ctr__count")
			_, err2 := kv.Get(ctx, "ctr__recount")
			if err1 == nil && err2 == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("MCP tools not registered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		if _, err := nc.Request("$SRV.PING.parley-gate", nil, 200*time.Millisecond); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("gate does not answer: %v", err)
		}
	}

	// The workload: one turn per thread. The calls of k0 and i0 are
	// interrupted: the replica whose server wrote their effect is killed.
	type mcpTurn struct {
		tool, key, turnID string
	}
	var turns []*mcpTurn
	for i := range 6 {
		turns = append(turns, &mcpTurn{tool: "count", key: fmt.Sprintf("k%d", i)})
	}
	for i := range 2 {
		turns = append(turns, &mcpTurn{tool: "recount", key: fmt.Sprintf("i%d", i)})
	}
	killFor := map[string]bool{"count k0": true, "recount i0": true}
	killed := map[string]int{} // "tool key" → pid killed
	for _, tr := range turns {
		e, err := cl.Send(ctx, "mcp-"+tr.key, "", tr.tool+" "+tr.key, "")
		if err != nil {
			t.Fatal(err)
		}
		tr.turnID = events.DerivedID("turn", e.ID())
	}
	allEnded := func() bool {
		for _, tr := range turns {
			if !rec.ended(tr.turnID) {
				return false
			}
		}
		return true
	}
	// Watch the ledger: kill the replica running a marked call as soon as
	// its effect is written (the server then waits mcpCallDuration before
	// answering, so the result is never recorded by that replica).
	for !allEnded() && len(killed) < len(killFor) {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("marked calls never ran; ledger:\n%s", readFile(ledger))
		}
		for _, l := range ledgerLines(ledger) {
			id := l.tool + " " + l.key
			if !killFor[id] || killed[id] != 0 {
				continue
			}
			for _, w := range toolexecs {
				if w.pid() == l.ppid {
					if pid, ok := w.kill(); ok {
						t.Logf("killed %s (pid %d) in the middle of %s", w.name(), pid, id)
					}
				}
			}
			killed[id] = l.ppid
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !rec.wait(time.Now().Add(120*time.Second), allEnded) {
		for _, tr := range turns {
			if !rec.ended(tr.turnID) {
				t.Errorf("turn %q never ended:\n%s", tr.tool+" "+tr.key, rec.dumpThread("mcp-"+tr.key))
			}
		}
		t.FailNow()
	}

	// The checks.
	effects := map[string]int{}
	for _, l := range ledgerLines(ledger) {
		effects[l.tool+" "+l.key]++
	}
	unknown := 0
	for _, tr := range turns {
		id := tr.tool + " " + tr.key
		rec.mu.Lock()
		end := rec.ends[tr.turnID][0].event
		rec.mu.Unlock()
		if events.TypeOf(end) != events.TypeTurnCompleted {
			t.Errorf("%s: turn ended with %s: %s", id, end.Type(), end.Data())
			continue
		}
		done, err := events.Data[events.TurnCompleted](end)
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		text := done.Message.Text
		outcomeUnknown := strings.Contains(text, "Outcome unknown")
		if outcomeUnknown {
			unknown++
		}
		switch {
		case tr.tool == "count" && effects[id] > 1:
			t.Errorf("%s: the non-idempotent tool ran %d times for one call", id, effects[id])
		case text == "counted "+tr.key && effects[id] == 0:
			t.Errorf("%s: answered %q but the tool never ran", id, text)
		case text != "counted "+tr.key && !outcomeUnknown:
			t.Errorf("%s: unexpected answer %q", id, text)
		case tr.tool == "recount" && outcomeUnknown:
			t.Errorf("%s: an idempotent tool's interrupted call was not re-run: %q", id, text)
		case killFor[id] && tr.tool == "count" && (!outcomeUnknown || effects[id] != 1):
			t.Errorf("%s: interrupted mid-call: answer %q with %d effects, want Outcome unknown with 1", id, text, effects[id])
		case killFor[id] && tr.tool == "recount" && effects[id] < 2:
			t.Errorf("%s: interrupted mid-call but re-run %d times, want at least 2 effects", id, effects[id])
		}
	}
	t.Logf("effects %v; %d outcome-unknown answers; kills %v", effects, unknown, killed)

	// Every role stayed within its NATS permissions.
	logs, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
	for _, f := range logs {
		for line := range strings.Lines(readFile(f)) {
			if l := strings.ToLower(line); strings.Contains(l, "permissions violation") ||
				strings.Contains(l, "publish violation") || strings.Contains(l, "subscription violation") {
				t.Errorf("%s: %s", filepath.Base(f), strings.TrimSpace(line))
				break
			}
		}
	}
}

// pid returns the pid of the slot's current process (0 when none).
func (w *worker) pid() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil || w.cmd.Process == nil {
		return 0
	}
	return w.cmd.Process.Pid
}

type ledgerLine struct {
	tool, key string
	ppid      int
}

// ledgerLines reads the counter server's ledger ("<tool> <key> <ppid>").
func ledgerLines(path string) []ledgerLine {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []ledgerLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			continue
		}
		ppid, _ := strconv.Atoi(fs[2])
		out = append(out, ledgerLine{tool: fs[0], key: fs[1], ppid: ppid})
	}
	return out
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
