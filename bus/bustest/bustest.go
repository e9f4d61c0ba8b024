// Package bustest runs an embedded NATS server with JetStream for tests, as
// net/http/httptest does for HTTP. Import it only from _test.go files.
//
// It imports no other parley package.
package bustest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is an embedded nats-server with JetStream on a random loopback
// port, storing under a test temporary directory.
type Server struct {
	*server.Server
	// StoreDir is the JetStream store directory (file storage).
	StoreDir string
}

// NewServer starts a server and stops it when the test ends. It fails the
// test if the server does not become ready within 10 seconds.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	return NewServerWithUsers(tb)
}

// NewServerWithUsers is NewServer with users (user name and password,
// and each one's permissions), which then are the only clients it
// accepts; with none it accepts anyone.
func NewServerWithUsers(tb testing.TB, users ...*server.User) *Server {
	tb.Helper()
	dir := tb.TempDir()
	s, err := server.NewServer(&server.Options{
		ServerName: "bustest",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
		Users:      users,
	})
	if err != nil {
		tb.Fatalf("starting nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats-server not ready after 10s")
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return &Server{Server: s, StoreDir: dir}
}

// Connect opens a client connection closed when the test ends.
func (s *Server) Connect(tb testing.TB) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Name(tb.Name()))
	if err != nil {
		tb.Fatalf("connecting to nats-server: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// JetStream opens a connection and returns its JetStream context.
func (s *Server) JetStream(tb testing.TB) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc := s.Connect(tb)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("jetstream: %v", err)
	}
	return nc, js
}
