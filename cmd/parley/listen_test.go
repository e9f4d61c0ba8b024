package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/internal/natsserver"
)

// busyAddr returns a loopback address another listener holds for the
// test's duration.
func busyAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// runDev runs parley dev with the given NATS and gateway addresses until
// it returns (a start-up failure) or the test's deadline.
func runDev(t *testing.T, listen, gatewayListen string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := &syncBuffer{}
	e := &env{Globals: &Globals{LogLevel: "warn", LogFormat: "text"}, ctx: ctx, stdout: out, stderr: out}
	c := &devCmd{DataDir: t.TempDir(), Listen: listen, Gateway: gatewayListen,
		storeFlags:     storeFlags{Storage: "file", Replicas: 1, StartupTimeout: 30 * time.Second, PublishRetry: time.Second},
		processorFlags: processorFlags{PauseTTL: time.Minute, Concurrency: 2},
		agentFlags:     agentFlags{PreExecuteTimeout: 2 * time.Second}}
	return c.Run(e)
}

// A port in use stops parley dev with the flag that picks another:
// --listen for NATS, --gateway-listen for the web chat.
func TestDevBusyPortNamesTheFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every worker")
	}
	busy := busyAddr(t)
	err := runDev(t, busy, "off")
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), "pass --listen with a free port") {
		t.Errorf("dev on a busy NATS port: %v; want it to say to pass --listen", err)
	}
	err = runDev(t, "127.0.0.1:0", busy)
	if err == nil || !strings.Contains(err.Error(), "pass --gateway-listen with a free port") {
		t.Errorf("dev on a busy gateway port: %v; want it to say to pass --gateway-listen", err)
	}
}

// parley gateway on a port in use says to pass --listen.
func TestGatewayBusyPortNamesTheFlag(t *testing.T) {
	url, tokens := gatewayPrereqs(t)
	nc, err := natsauth.Connect(url, "test", natsauth.Credentials{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, url, "gateway", "--token-file", tokens, "--listen", busyAddr(t), "--startup-timeout", "10s")
	if code != 1 || !strings.Contains(errOut, "address already in use") || !strings.Contains(errOut, "pass --listen with a free port") {
		t.Errorf("gateway on a busy port: exit %d, %q; want 1 saying to pass --listen", code, errOut)
	}
}

// parley gateway gives up waiting for parley's streams after
// --startup-timeout, as the flag says, not after the bus's default.
func TestGatewayStartupTimeout(t *testing.T) {
	url, tokens := gatewayPrereqs(t)
	start := time.Now()
	code, _, errOut := runCLI(t, url, "gateway", "--token-file", tokens, "--listen", "127.0.0.1:0", "--startup-timeout", "2s", "--log-level", "error")
	if code != 1 || !strings.Contains(errOut, "PARLEY_CHAT") {
		t.Errorf("gateway without streams: exit %d, %q; want 1 naming the missing stream", code, errOut)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("gateway with --startup-timeout 2s gave up after %v", d)
	}
}

// gatewayPrereqs starts a NATS server without authentication and writes
// a token file; it returns the server's URL and the file.
func gatewayPrereqs(t *testing.T) (url, tokens string) {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	tokens = filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("alice-token-0123456789 alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL(), tokens
}
