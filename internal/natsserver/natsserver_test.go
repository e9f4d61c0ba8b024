package natsserver

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStartBusyPortFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	start := time.Now()
	s, err := Start(Options{Listen: addr, DataDir: t.TempDir()})
	if err == nil {
		s.Shutdown()
		t.Fatalf("Start on busy %s: no error", addr)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Start on a busy port took %v; want it to fail fast", d)
	}
	want := "listen: " + addr + ": address already in use"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error = %q; want it to contain %q", err, want)
	}
}

func TestStartRandomPort(t *testing.T) {
	s, err := Start(Options{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	if s.ClientURL() == "" {
		t.Error("no client URL")
	}
}

func TestStartBadAddress(t *testing.T) {
	for _, addr := range []string{"nope", "127.0.0.1:http"} {
		if s, err := Start(Options{Listen: addr, DataDir: t.TempDir()}); err == nil {
			s.Shutdown()
			t.Errorf("Start(%q): no error", addr)
		}
	}
}

// Without authentication the server listens only on loopback addresses.
func TestStartRefusesNonLoopbackWithoutAuth(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		s, err := Start(Options{Listen: addr, DataDir: t.TempDir()})
		if err == nil {
			s.Shutdown()
			t.Errorf("Start(%q) without auth: no error", addr)
		} else if !strings.Contains(err.Error(), "refusing to serve NATS there without authentication") {
			t.Errorf("Start(%q): %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		s, err := Start(Options{Listen: addr, DataDir: t.TempDir()})
		if err != nil {
			t.Errorf("Start(%q): %v", addr, err)
			continue
		}
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// An auth configuration without users is refused, not served open.
func TestStartAuthConfigWithoutUsers(t *testing.T) {
	f := filepath.Join(t.TempDir(), "auth.conf")
	if err := os.WriteFile(f, []byte("authorization { }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Start(Options{Listen: "127.0.0.1:0", DataDir: t.TempDir(), AuthConfig: f}); err == nil {
		s.Shutdown()
		t.Fatal("no error")
	}
}
