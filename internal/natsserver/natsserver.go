// Package natsserver runs an embedded nats-server with JetStream, for
// `parley dev`, `parley demo` and `parley bench`.
package natsserver

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configures the embedded server.
type Options struct {
	// Listen is the client address host:port. Port 0 or -1 picks a free
	// port. Required.
	Listen string
	// DataDir is the JetStream store directory. Required.
	DataDir string
	// Logs turns on the server's own logging (to stderr).
	Logs bool
}

// Start starts the server and waits until it accepts clients (10s).
func Start(o Options) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %q is not host:port: %w", o.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("listen: port %q is not a number", portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s, err := server.NewServer(&server.Options{
		ServerName: "parley-dev", Host: host, Port: port,
		JetStream: true, StoreDir: o.DataDir,
		NoLog: !o.Logs, NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("configuring nats-server: %w", err)
	}
	if o.Logs {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("nats-server did not start on %s within 10s", o.Listen)
	}
	return s, nil
}
