package bustest

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is n embedded nats-servers with JetStream clustered over routes
// on loopback (cluster name "bustest", servers "n1".."nN"), each storing
// under its own test temporary directory.
type Cluster struct {
	// Servers are the cluster's nodes, in name order.
	Servers []*server.Server
}

// NewCluster starts an n-node cluster (n ≥ 1; 3 for replicas 3) and stops
// it when the test ends. It fails the test unless every node accepts
// clients within 10 seconds and the cluster has a JetStream meta leader
// within 30 seconds.
func NewCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range n {
		ports[i] = freePort(tb)
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
	}
	c := &Cluster{}
	for i := range n {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   filepath.Join(tb.TempDir(), fmt.Sprintf("n%d", i+1)),
			Cluster:    server.ClusterOpts{Name: "bustest", Host: "127.0.0.1", Port: ports[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
			NoLog:      true,
			NoSigs:     true,
		})
		if err != nil {
			tb.Fatalf("starting nats-server n%d: %v", i+1, err)
		}
		go s.Start()
		c.Servers = append(c.Servers, s)
		tb.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
	}
	for i, s := range c.Servers {
		if !s.ReadyForConnections(10 * time.Second) {
			tb.Fatalf("nats-server n%d not ready after 10s", i+1)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.MetaLeader() == nil {
		if time.Now().After(deadline) {
			tb.Fatal("cluster has no JetStream meta leader after 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

// MetaLeader returns the node that is the JetStream meta leader, or nil.
func (c *Cluster) MetaLeader() *server.Server {
	for _, s := range c.Servers {
		if s.Running() && s.JetStreamIsLeader() {
			return s
		}
	}
	return nil
}

// URLs returns every node's client URL, comma-separated (nats.Connect's
// server list).
func (c *Cluster) URLs() string {
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

// Connect opens a client connection to the cluster, closed when the test
// ends.
func (c *Cluster) Connect(tb testing.TB) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(c.URLs(), nats.Name(tb.Name()), nats.MaxReconnects(-1))
	if err != nil {
		tb.Fatalf("connecting to the cluster: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// JetStream opens a connection to the cluster and returns its JetStream
// context.
func (c *Cluster) JetStream(tb testing.TB) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc := c.Connect(tb)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
