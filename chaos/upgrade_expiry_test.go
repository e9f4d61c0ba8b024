//go:build unix

package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
)

// TestUpgradeSideBySideExpiry runs the release before pause records
// expired by message schedule (PARLEY_UPGRADE_FROM, default ade19fc)
// beside this one, as a rolling upgrade does: pauses made by an old
// processor (records with a per-key TTL), by a new one alone (scheduled
// records), and by both while an old processor started last (so
// processor-expiry's filter is the old one, "$KV.parley_paused.>") all
// expire, and each is announced once.
func TestUpgradeSideBySideExpiry(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds two versions of parley")
	}
	from := os.Getenv("PARLEY_UPGRADE_FROM")
	if from == "" {
		from = "ade19fc"
	}
	if bins.err != nil {
		t.Fatal(bins.err)
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
	url := srv.url()
	start := func(bin, role, tag string, extra ...string) *worker {
		w := &worker{role: role, bin: bin, env: os.Environ(),
			args: append([]string{"--nats", url, "--log-format", "json", "--storage", "file"}, extra...),
			log:  filepath.Join(logDir, tag+".log")}
		if err := w.startOnce(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.shutdown)
		return w
	}
	defer func() {
		if t.Failed() {
			for _, f := range []string{"old-processor-1", "new-processor-2", "old-processor-3"} {
				b, _ := os.ReadFile(filepath.Join(logDir, f+".log"))
				t.Logf("--- %s.log (tail)\n%s", f, tail(string(b), 3000))
			}
		}
	}()
	ttl := []string{"--pause-ttl", "3s"}
	for _, role := range []string{"gate", "toolexec", "agent"} {
		start(oldBin, role, "old-"+role)
	}
	p1 := start(oldBin, "processor", "old-processor-1", ttl...)
	if err := waitRolesReady(url, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	expired := watchExpired(t, url)
	send := func(threads ...string) {
		var wg sync.WaitGroup
		for _, th := range threads {
			wg.Go(func() {
				out, err := exec.Command(oldBin, "send", "--nats", url, "--thread", th, "--wait", "60s",
					"delete the 2 draft articles").CombinedOutput()
				if err != nil || !strings.Contains(string(out), "--elicitation") {
					t.Errorf("send on %s: %v\n%s", th, err, out)
				}
			})
		}
		wg.Wait()
	}
	send("old-1", "old-2")
	start(bins.parley, "processor", "new-processor-2", ttl...)
	waitConsumer(t, url, "processor-timers")
	p1.shutdown()
	send("new-1", "new-2")
	start(oldBin, "processor", "old-processor-3", ttl...)
	time.Sleep(2 * time.Second) // its processor-expiry filter is set
	send("mixed-1", "mixed-2", "mixed-3", "mixed-4")

	threads := []string{"old-1", "old-2", "new-1", "new-2", "mixed-1", "mixed-2", "mixed-3", "mixed-4"}
	deadline := time.Now().Add(45 * time.Second)
	for {
		missing := 0
		for _, th := range threads {
			if expired(th) == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, th := range threads {
				t.Logf("%s: %d elicitation.expired", th, expired(th))
			}
			t.Fatalf("%d of %d pauses not announced expired within 45 s", missing, len(threads))
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // a second announcement would come now
	for _, th := range threads {
		if n := expired(th); n != 1 {
			t.Errorf("%s: %d elicitation.expired, want 1", th, n)
		}
	}
	// Both shapes of record were written (the test covers what it says).
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(t.Context(), "KV_parley_paused")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context(), jetstream.WithSubjectFilter("$KV.parley_paused.>"))
	if err != nil {
		t.Fatal(err)
	}
	var scheduled, ttlShaped []string
	for subj := range info.State.Subjects {
		key := strings.TrimPrefix(subj, "$KV.parley_paused.")
		switch {
		case strings.HasSuffix(key, ".pause.expired"):
			scheduled = append(scheduled, key)
		case strings.Count(key, ".") == 1:
			ttlShaped = append(ttlShaped, key)
		}
	}
	t.Logf("scheduled expiries %v; TTL markers %v", scheduled, ttlShaped)
	if len(scheduled) < 2 || len(ttlShaped) < 2 {
		t.Errorf("scheduled expiries %v, TTL records' markers %v: want both shapes (at least 2 each)", scheduled, ttlShaped)
	}
}

// watchExpired counts elicitation.expired per thread in PARLEY_CHAT from
// now to the test's end.
func watchExpired(t *testing.T, url string) func(thread string) int {
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
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cons, err := js.OrderedConsumer(ctx, events.StreamChat, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"parley.chat.*.elicitation.expired"}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	counts := map[string]int{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		mu.Lock()
		counts[strings.Split(m.Subject(), ".")[2]]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return func(thread string) int {
		mu.Lock()
		defer mu.Unlock()
		return counts[thread]
	}
}

// waitConsumer waits until the durable consumer name exists on
// KV_parley_paused.
func waitConsumer(t *testing.T, url, name string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := js.Consumer(t.Context(), "KV_parley_paused", name); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no consumer %s on KV_parley_paused within 60 s", name)
		}
	}
}
