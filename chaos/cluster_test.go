//go:build unix

package chaos

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
)

var flagClusterTurns = flag.Int("cluster.turns", 0,
	"turns TestCluster sends (0: $PARLEY_CLUSTER_TURNS, else 60; 5 per thread)")

// clusterTurns is the cluster test's workload size: the flag, else
// PARLEY_CLUSTER_TURNS, else 60 (a minute or two on 2 shared cores).
func clusterTurns(t *testing.T) int {
	if *flagClusterTurns > 0 {
		return *flagClusterTurns
	}
	if v := os.Getenv("PARLEY_CLUSTER_TURNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("PARLEY_CLUSTER_TURNS=%q: want a positive number", v)
		}
		return n
	}
	return 60
}

// clusterNode is one nats-server process of a 3-node cluster on loopback.
type clusterNode struct {
	*natsServer
	name    string
	monPort int
}

// kill SIGKILLs the node and waits for it to exit.
func (n *clusterNode) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// jsz reads the node's JetStream monitoring page (/jsz).
func (n *clusterNode) jsz() (*server.JSInfo, error) {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", n.monPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var info server.JSInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return nil, err
	}
	return &info, nil
}

// startCluster starts three clustered nats-servers (names n1..n3, cluster
// "parley", JetStream file storage) at once and waits until each answers
// JetStream requests (which needs an elected meta leader).
func startCluster(t *testing.T, dir, logDir string) []*clusterNode {
	t.Helper()
	clusterPorts := []int{freePort(t), freePort(t), freePort(t)}
	var routes []string
	for _, p := range clusterPorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var nodes []*clusterNode
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		n := &clusterNode{name: name, monPort: freePort(t), natsServer: &natsServer{
			bin: bins.server, dir: filepath.Join(dir, name), log: filepath.Join(logDir, "nats-"+name+".log"), port: freePort(t)}}
		n.extra = []string{"--name", name, "--cluster_name", "parley",
			"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", clusterPorts[i]), "--routes", strings.Join(routes, ","),
			"-m", strconv.Itoa(n.monPort)}
		nodes = append(nodes, n)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.start() })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range nodes {
			n.stop()
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %s: %v", nodes[i].name, err)
		}
	}
	return nodes
}

func clusterURLs(nodes []*clusterNode) string {
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.url())
	}
	return strings.Join(urls, ",")
}

// metaLeader is the meta leader's name as a running node other than
// except reports it ("" if none answers or none is elected).
func metaLeader(nodes []*clusterNode, except string) string {
	for _, n := range nodes {
		if n.name == except {
			continue
		}
		if info, err := n.jsz(); err == nil && info.Meta != nil && info.Meta.Leader != "" && info.Meta.Leader != except {
			return info.Meta.Leader
		}
	}
	return ""
}

func streamLeader(ctx context.Context, js jetstream.JetStream, stream string) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil || s.CachedInfo().Cluster == nil {
		return ""
	}
	return s.CachedInfo().Cluster.Leader
}

// leaderLoss is what one killed leader cost.
type leaderLoss struct {
	what, node   string
	at           time.Time
	elected      time.Duration // until another node reported the new leader
	nextEvent    time.Duration // until the next chat event was stored and read
	longestGap   time.Duration // longest gap between chat events in the 30 s after the kill
	restartAfter time.Duration
}

// TestCluster runs parley on a 3-node NATS cluster: every role
// twice, started at the same moment with --replicas 3 and all three URLs;
// turns with pauses and answers; the meta leader and then the PARLEY_CHAT
// leader SIGKILLed mid-run (each restarted 5 s later). It checks what
// TestChaos checks (every turn ends, no duplicate event, no double effect,
// FIFO) and that no worker exited at any time, in particular that all
// eight are running 30 s after their simultaneous start without a restart;
// it prints the stall per leader loss (not asserted: timing on a shared
// machine).
//
//	go test ./chaos -run TestCluster -v -count=1
//	PARLEY_CLUSTER_TURNS=300 go test ./chaos -run TestCluster -v -count=1 -timeout 30m
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test: skipped with -short")
	}
	c, tmp, cancel := newChaosRun(t, "(-chaos.seed %d reproduces the workload)")
	begin := time.Now()
	logDir := c.logDir
	ctx := c.ctx

	nodes := startCluster(t, filepath.Join(tmp, "js"), logDir)
	c.srv = nodes[0].natsServer
	urls := clusterURLs(nodes)
	t.Cleanup(func() {
		if t.Failed() {
			c.printLogs()
			for _, n := range nodes[1:] {
				t.Logf("  %s", n.log)
			}
		}
	})
	t.Logf("cluster up in %v: %s", time.Since(begin).Round(time.Millisecond), urls)

	// Every role twice, all eight started at the same moment.
	gateFile, rulesFile := filepath.Join(tmp, "gate.json"), filepath.Join(tmp, "rules.json")
	if err := os.WriteFile(gateFile, []byte(gateConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rulesFile, []byte(rulesJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PARLEY_PAUSE_TTL="+pauseTTL, "PARLEY_LOG_LEVEL=info")
	common := []string{"--nats", urls, "--log-format", "json", "--storage", "file", "--replicas", "3"}
	roleArgs := map[string][]string{
		"processor": {"--pause-ttl", pauseTTL},
		"agent":     {"--rules", rulesFile},
		"toolexec":  nil,
		"gate":      {"--gate-config", gateFile},
	}
	for _, role := range []string{"gate", "toolexec", "agent", "processor"} {
		for n := range 2 {
			c.workers = append(c.workers, &worker{role: role, n: n, bin: bins.parley, env: env, rnd: c.rnd,
				args: append(slices.Clone(common), roleArgs[role]...),
				log:  filepath.Join(logDir, fmt.Sprintf("%s-%d.log", role, n))})
		}
	}
	superCtx, stopSupervisors := context.WithCancel(context.Background())
	var supervisors sync.WaitGroup
	startGate := make(chan struct{})
	for _, w := range c.workers {
		supervisors.Go(func() { <-startGate; w.supervise(superCtx) })
	}
	workersStarted := time.Now()
	close(startGate)
	t.Cleanup(func() {
		stopSupervisors()
		var wg sync.WaitGroup
		for _, w := range c.workers {
			wg.Go(w.shutdown)
		}
		wg.Wait()
		supervisors.Wait()
	})
	// 30 s after the simultaneous start every worker must still run its
	// first process.
	var at30 sync.WaitGroup
	var at30Problems []string
	at30.Go(func() {
		sleepCtx(ctx, time.Until(workersStarted.Add(30*time.Second)))
		for _, w := range c.workers {
			w.mu.Lock()
			running := w.exited != nil
			if running {
				select {
				case <-w.exited:
					running = false
				default:
				}
			}
			if !running || w.starts != 1 || len(w.crashes) > 0 {
				at30Problems = append(at30Problems, fmt.Sprintf("%s: running %v, %d starts, exits %v", w.name(), running, w.starts, w.crashes))
			}
			w.mu.Unlock()
		}
	})

	// The test's own connection, like an integrator's.
	nc, err := client.Connect(urls, "parley-cluster-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if c.bus, err = bus.New(nc, &bus.Options{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if err := c.bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	items, err := client.New(c.bus, "/parley/cluster").Watch(ctx, client.WatchOptions{FromStart: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	c.rec = newRecorder(items)
	c.waitReady()
	t.Logf("8 workers ready %v after their simultaneous start", time.Since(workersStarted).Round(time.Millisecond))

	// Load (threads starting over 35 s), with the meta leader killed at
	// 8 s and the PARLEY_CHAT leader at 22 s, each node restarted 5 s after
	// its kill.
	plan := c.planWorkload(clusterTurns(t))
	loadStart := time.Now()
	var losses []*leaderLoss
	var killer sync.WaitGroup
	killer.Go(func() {
		js := c.bus.JetStream()
		for _, k := range []struct {
			after time.Duration
			what  string
		}{{8 * time.Second, "meta leader"}, {22 * time.Second, "PARLEY_CHAT leader"}} {
			sleepCtx(ctx, time.Until(loadStart.Add(k.after)))
			if ctx.Err() != nil {
				return
			}
			var leader string
			if k.what == "meta leader" {
				leader = metaLeader(nodes, "")
			} else {
				leader = streamLeader(ctx, js, events.StreamChat)
			}
			var node *clusterNode
			for _, n := range nodes {
				if n.name == leader {
					node = n
				}
			}
			if node == nil {
				t.Errorf("no %s found to kill (%q)", k.what, leader)
				continue
			}
			loss := &leaderLoss{what: k.what, node: node.name, at: time.Now()}
			node.kill()
			c.note("SIGKILL nats-server %s (%s)", node.name, k.what)
			for loss.elected == 0 && time.Since(loss.at) < 60*time.Second {
				var now string
				if k.what == "meta leader" {
					now = metaLeader(nodes, node.name)
				} else if l := streamLeader(ctx, js, events.StreamChat); l != node.name {
					now = l
				}
				if now != "" {
					loss.elected = time.Since(loss.at)
					c.note("%s: %s elected after %v", k.what, now, loss.elected.Round(time.Millisecond))
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			sleepCtx(ctx, time.Until(loss.at.Add(5*time.Second)))
			if err := node.start(); err != nil {
				t.Errorf("restarting %s: %v", node.name, err)
				return
			}
			loss.restartAfter = time.Since(loss.at)
			c.note("nats-server %s back", node.name)
			c.mu.Lock()
			c.natsRestarts++
			c.mu.Unlock()
			losses = append(losses, loss)
		}
	})
	var drivers sync.WaitGroup
	for i, bursts := range plan {
		delay := time.Duration(float64(35*time.Second) * float64(i) / float64(max(len(plan), 1)))
		drivers.Go(func() {
			sleepCtx(ctx, delay)
			c.drive(bursts)
		})
	}
	drivers.Wait()
	killer.Wait()
	at30.Wait()
	c.mu.Lock()
	last := c.lastSend
	c.mu.Unlock()
	c.rec.wait(last.Add(*flagWait), func() bool {
		for _, tr := range c.turns {
			if !c.rec.ended(tr.turnID) {
				return false
			}
		}
		return true
	})
	c.rec.wait(maxTime(last.Add(*flagWait), time.Now().Add(45*time.Second)), c.answersSettled)
	loadTime := time.Since(loadStart)

	// The stall per leader loss, from the events the recorder read.
	c.rec.mu.Lock()
	for _, l := range losses {
		prev := l.at
		for _, s := range c.rec.all {
			if s.at.Before(l.at) {
				continue
			}
			if l.nextEvent == 0 {
				l.nextEvent = s.at.Sub(l.at)
			}
			if s.at.After(l.at.Add(30 * time.Second)) {
				break
			}
			l.longestGap = max(l.longestGap, s.at.Sub(prev))
			prev = s.at
		}
	}
	c.rec.mu.Unlock()
	var b strings.Builder
	b.WriteString("\n| leader lost | node | new leader reported after | next chat event after | longest gap in chat events (30 s after) | node back after |\n|---|---|---|---|---|---|\n")
	for _, l := range losses {
		fmt.Fprintf(&b, "| %s | %s | %v | %v | %v | %v |\n", l.what, l.node, l.elected.Round(time.Millisecond),
			l.nextEvent.Round(time.Millisecond), l.longestGap.Round(time.Millisecond), l.restartAfter.Round(time.Millisecond))
	}
	t.Log(b.String())

	// Every stream and bucket is replicated 3 ways (checked before
	// c.check, which opens the demo site's bucket with default options).
	js := c.bus.JetStream()
	names := js.StreamNames(context.Background())
	n := 0
	for name := range names.Name() {
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Errorf("stream %s: %v", name, err)
			continue
		}
		n++
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s has %d replicas, want 3", name, r)
		}
	}
	t.Logf("%d streams and buckets, all checked for replicas 3", n)

	bad := c.check(loadTime)
	for i, thread := range bad {
		if i == 8 {
			break
		}
		t.Logf("events of thread %s:\n%s%s", thread, c.rec.dumpThread(thread), diagnose(c.bus.JetStream(), thread))
	}
	// No worker exited: not at start-up (30 s mark), not at any time.
	if len(at30Problems) > 0 {
		t.Errorf("workers not all running 30 s after their simultaneous start without a restart:\n  %s", strings.Join(at30Problems, "\n  "))
	} else {
		t.Logf("all 8 workers were running their first process 30 s after their simultaneous start")
	}
	for _, w := range c.workers {
		w.mu.Lock()
		if w.starts != 1 || len(w.crashes) > 0 {
			t.Errorf("%s exited during the run: %d starts, exits %v (log %s)", w.name(), w.starts, w.crashes, w.log)
		}
		w.mu.Unlock()
	}
	if len(losses) != 2 {
		t.Errorf("%d leader losses happened, want 2 (meta leader, PARLEY_CHAT leader)", len(losses))
	}
	if t.Failed() {
		c.dumpStacks()
	}
}
