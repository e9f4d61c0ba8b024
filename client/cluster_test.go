package client

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// cluster is three embedded nats-servers with JetStream clustered on
// loopback; a node can be stopped and started again on its store.
type cluster struct {
	t       *testing.T
	opts    map[string]*server.Options
	servers map[string]*server.Server
	urls    string
}

func (c *cluster) start(name string) {
	c.t.Helper()
	o := *c.opts[name]
	s, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		c.t.Fatalf("node %s did not start", name)
	}
	c.servers[name] = s
}

func (c *cluster) stop(name string) {
	if s := c.servers[name]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.servers[name] = nil
	}
}

// startCluster starts three embedded nats-servers with JetStream clustered
// on loopback.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	var routes, urls []string
	ports := make([][2]int, 3)
	for i := range ports {
		ports[i] = [2]int{freePort(t), freePort(t)}
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[i][1]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i][0]))
	}
	c := &cluster{t: t, opts: map[string]*server.Options{}, servers: map[string]*server.Server{}, urls: strings.Join(urls, ",")}
	for i, p := range ports {
		name := fmt.Sprintf("n%d", i+1)
		c.opts[name] = &server.Options{
			ServerName: name, Host: "127.0.0.1", Port: p[0], JetStream: true, StoreDir: t.TempDir(),
			NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "parley-test", Host: "127.0.0.1", Port: p[1]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		}
	}
	// Start all three at once: a node waits for its routes.
	errs := make(chan error, 3)
	for name := range c.opts {
		o := *c.opts[name]
		s, err := server.NewServer(&o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		c.servers[name] = s
		go func() {
			if !s.ReadyForConnections(10 * time.Second) {
				errs <- fmt.Errorf("node %s did not start", name)
				return
			}
			errs <- nil
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for name := range c.servers {
			c.stop(name)
		}
	})
	return c
}

// A publish made while PARLEY_INPUT has no leader (its leader and a second
// node are stopped, so no quorum can elect one; JetStream answers "no
// responders" or nothing) succeeds once a node returns and a leader is
// elected, within the budget, and the stream holds the event once (issue
// 15, item 2). A single publish (no retry) fails here: the outage is longer
// than its 5 s wait.
func TestPublishRidesOutLeaderElection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := startCluster(t)
	nc, err := Connect(c.urls, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, &bus.Options{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err = b.EnsureStreams(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("creating the streams on the cluster: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	var retried error
	cl := NewWithOptions(b, &Options{Retry: RetryPolicy{Budget: 30 * time.Second, AttemptTimeout: time.Second,
		OnRetry: func(_ int, err error) { retried = err }}})
	s, err := b.JetStream().Stream(t.Context(), events.StreamInput)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("stream info: %+v, %v", info, err)
	}
	leader := info.Cluster.Leader
	e, err := cl.TurnRequest("election", "", "hello", "tester")
	if err != nil {
		t.Fatal(err)
	}
	other := "n1"
	if other == leader {
		other = "n2"
	}
	c.stop(leader)
	c.stop(other)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := cl.Publish(context.Background(), e)
		done <- err
	}()
	// Longer than a single JetStream publish waits (5 s by default).
	time.Sleep(6 * time.Second)
	c.start(other)
	if err := <-done; err != nil {
		t.Fatalf("Publish while %s had no leader (%s and %s stopped, %s restarted after 6 s): %v", events.StreamInput, leader, other, other, err)
	}
	t.Logf("published after %s (nodes %s and %s stopped, %s back after 6 s); last failed try: %v",
		time.Since(start).Round(time.Millisecond), leader, other, other, retried)
	if retried == nil {
		t.Error("no try failed: the stream was expected to have no leader for 6 s")
	}
	if n := storedWithID(t, cl, events.InputSubject(events.PrincipalIntegrator, "election", events.ChatTurnRequested), e.ID()); n != 1 {
		t.Errorf("stored %d copies, want 1", n)
	}
}
