// Package natsserver runs an embedded nats-server with JetStream, for
// `parley dev`, `parley demo` and `parley bench`.
package natsserver

import (
	"errors"
	"fmt"
	"net"
	"os"
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

// Start starts the server and waits until it accepts clients (10s). An
// address that cannot be listened on (in use, not local, no permission)
// fails at once: "listen: 127.0.0.1:4222: address already in use".
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
	if port > 0 {
		// nats-server only logs a listen failure and never becomes ready;
		// try the address first so a busy port fails fast and clearly.
		if err := probe(o.Listen); err != nil {
			return nil, err
		}
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

// probe listens on addr and closes the listener at once.
func probe(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		var se *os.SyscallError
		if errors.As(err, &se) {
			return fmt.Errorf("listen: %s: %w", addr, se.Err)
		}
		return fmt.Errorf("listen: %s: %w", addr, err)
	}
	return l.Close()
}
