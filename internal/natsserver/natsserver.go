// Package natsserver runs an embedded nats-server with JetStream, for
// `parley dev`, `parley demo` and `parley bench`.
//
// It imports no other parley package.
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
	// AuthConfig is a nats-server configuration file with the
	// authorization block clients must pass (natsauth.Render, as written
	// by natsauth.Init). Empty: no authentication, which Start allows only
	// on a loopback address.
	AuthConfig string
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
	if o.AuthConfig == "" && !isLoopback(host) {
		return nil, fmt.Errorf("listen: %s is not a loopback address: refusing to serve NATS there without authentication", o.Listen)
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
	opts := &server.Options{}
	if o.AuthConfig != "" {
		// The same file a standalone nats-server includes: parsed by the
		// server's own configuration reader, not a copy of it.
		if opts, err = server.ProcessConfigFile(o.AuthConfig); err != nil {
			return nil, fmt.Errorf("auth configuration: %w", err)
		}
		if len(opts.Nkeys) == 0 && len(opts.Users) == 0 {
			return nil, fmt.Errorf("auth configuration %s: no users", o.AuthConfig)
		}
	}
	opts.ServerName, opts.Host, opts.Port = "parley-dev", host, port
	opts.JetStream, opts.StoreDir = true, o.DataDir
	opts.NoLog, opts.NoSigs = !o.Logs, true
	s, err := server.NewServer(opts)
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

// isLoopback reports whether host (an IP or a name) only reaches this
// machine: a loopback IP or "localhost".
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
