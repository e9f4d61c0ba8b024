package main

import (
	"bytes"
	"strings"
	"testing"
)

// send without credentials to a server that requires them is refused
// (exit 1, not 3: nothing was sent and trying again will not help), and
// says where the credentials are (a newcomer ran it outside the
// repository and got "Authorization Violation", exit 3, no hint).
func TestSendWithoutCredentialsSaysWhere(t *testing.T) {
	url := startDevCmd(t, t.TempDir())
	t.Setenv("PARLEY_DATA_DIR", t.TempDir()) // no auth/ inside
	var stdout, stderr bytes.Buffer
	code := run([]string{"send", "--nats", url, "-t", "t1", "--publish-timeout", "2s", "hi"}, strings.NewReader(""), &stdout, &stderr)
	if code != exitRefused {
		t.Errorf("exit %d, want %d; stderr %q", code, exitRefused, stderr.String())
	}
	for _, want := range []string{"nothing was sent", "--nats-nkey", "PARLEY_DATA_DIR"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not say %q", stderr.String(), want)
		}
	}
}

// A worker refused by the server says whose credentials to pass and
// where they are, and does not wait for NATS (a newcomer got a bare
// "Authorization Violation").
func TestWorkerWithoutCredentialsSaysWhich(t *testing.T) {
	url := startDevCmd(t, t.TempDir())
	var stdout, stderr bytes.Buffer
	code := run([]string{"agent", "--nats", url, "--startup-timeout", "30s"}, strings.NewReader(""), &stdout, &stderr)
	if code == 0 {
		t.Fatalf("exit 0 without credentials")
	}
	for _, want := range []string{"Authorization Violation", "agent principal", "--nats-nkey", "agent.nk"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not say %q", stderr.String(), want)
		}
	}
}
