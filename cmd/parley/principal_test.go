package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parley-dev/parley/internal/natsauth"
)

// --principal picks the credentials to send as: parley dev's
// <data-dir>/auth/<principal>.nk when no credentials are passed, and
// credentials named after another principal are a usage error naming
// both, before anything connects (they used to be taken for the named
// principal's: the server refused the reply inbox, and send waited 30 s
// for "no answer from the NATS server in time").
func TestCredentialsForPrincipal(t *testing.T) {
	dir := t.TempDir()
	auth := devAuthDir(dir)
	if err := os.MkdirAll(auth, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"integrator", "gateway"} {
		if err := os.WriteFile(filepath.Join(auth, p+".nk"), []byte("seed"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PARLEY_DATA_DIR", dir)

	var none natsAuthFlags
	c, err := none.credentialsAs("gateway")
	if err != nil || c.NKeyFile != filepath.Join(auth, "gateway.nk") || c.Principal != "gateway" {
		t.Errorf("--principal gateway with dev's data dir: %+v, %v; want gateway.nk as gateway", c, err)
	}
	if c, err := none.credentialsAs(""); err != nil || c.Principal != natsauth.Integrator {
		t.Errorf("no --principal: %+v, %v; want the integrator", c, err)
	}

	mismatched := natsAuthFlags{NATSNKey: filepath.Join(auth, "integrator.nk")}
	_, err = mismatched.credentialsAs("gateway")
	if err == nil || !strings.Contains(err.Error(), "--principal gateway") || !strings.Contains(err.Error(), "integrator's") {
		t.Errorf("--principal gateway with integrator.nk: %v, want a usage error naming both", err)
	}
	// --nats-principal says whose they are: taken as given.
	said := natsAuthFlags{NATSNKey: filepath.Join(auth, "integrator.nk"), NATSPrincipal: "gateway"}
	if c, err := said.credentialsAs("gateway"); err != nil || c.Principal != "gateway" {
		t.Errorf("--nats-principal gateway: %+v, %v", c, err)
	}
	// A file not named after a principal is taken to be --principal's.
	other := filepath.Join(dir, "key.seed")
	if err := os.WriteFile(other, []byte("seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := (natsAuthFlags{NATSNKey: other}).credentialsAs("acme"); err != nil || c.Principal != "acme" {
		t.Errorf("--principal acme with key.seed: %+v, %v; want acme", c, err)
	}
}

// A gate whose policy name is not its principal's refuses to start under
// authorization (NATS would refuse its every answer); without
// credentials any name goes. parley dev writes a principal for every
// expected policy and the gate's name, but the gate's own.
func TestGatePolicyNameIsItsPrincipal(t *testing.T) {
	gateSeed := natsauth.Credentials{NKeyFile: "/auth/gate.nk", Principal: "gate"}
	if err := checkPolicyPrincipal("gate", gateSeed); err != nil {
		t.Errorf("gate as gate: %v", err)
	}
	if err := checkPolicyPrincipal("compliance", gateSeed); err == nil || !strings.Contains(err.Error(), "compliance.nk") {
		t.Errorf("gate's seed as compliance: %v, want an error naming compliance.nk", err)
	}
	if err := checkPolicyPrincipal("compliance", natsauth.Credentials{Principal: "gate"}); err != nil {
		t.Errorf("no credentials: %v", err)
	}
	if got := devPolicies([]string{"gate", "compliance", "compliance"}, "audit"); !slices.Equal(got, []string{"compliance", "audit"}) {
		t.Errorf("devPolicies = %v, want [compliance audit]", got)
	}
}
