package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/internal/natsauth"
)

// natsAuthFlags are the credential and TLS flags every connecting command
// takes (part of Globals).
type natsAuthFlags struct {
	NATSCreds     string `name:"nats-creds" env:"PARLEY_NATS_CREDS" placeholder:"FILE" help:"NATS credentials file (.creds: user JWT and nkey seed)."`
	NATSNKey      string `name:"nats-nkey" env:"PARLEY_NATS_NKEY" placeholder:"FILE" help:"NATS nkey seed file (<principal>.nk, as written by 'parley auth init' and 'parley dev')."`
	TLSCA         string `name:"tls-ca" env:"PARLEY_TLS_CA" placeholder:"FILE" help:"PEM file of the certificate authorities that sign the NATS server's certificate."`
	TLSCert       string `name:"tls-cert" env:"PARLEY_TLS_CERT" placeholder:"FILE" help:"PEM client certificate for NATS mutual TLS (with --tls-key)."`
	TLSKey        string `name:"tls-key" env:"PARLEY_TLS_KEY" placeholder:"FILE" help:"PEM private key of --tls-cert."`
	NATSPrincipal string `name:"nats-principal" env:"PARLEY_NATS_PRINCIPAL" help:"Principal the credentials belong to; sets the reply inbox _INBOX_<principal>. Default: the name of a <principal>.nk or <principal>.creds file, else the command's role (integrator for send, answer, events and chat)."`
}

// credentials returns the flags' credentials for a command whose role is
// role (the default principal).
func (f natsAuthFlags) credentials(role string) natsauth.Credentials {
	c := natsauth.Credentials{CredsFile: f.NATSCreds, NKeyFile: f.NATSNKey,
		TLSCA: f.TLSCA, TLSCert: f.TLSCert, TLSKey: f.TLSKey, Principal: f.NATSPrincipal}
	if c.Principal == "" {
		c.Principal = principalOfFile(c.NKeyFile, ".nk")
	}
	if c.Principal == "" {
		c.Principal = principalOfFile(c.CredsFile, ".creds")
	}
	if c.Principal == "" {
		c.Principal = role
	}
	return c
}

// principalOfFile is the principal a credentials file is named after
// (/x/acme.nk: acme), or "" when its name is not <principal><ext>.
func principalOfFile(path, ext string) string {
	name, ok := strings.CutSuffix(filepath.Base(path), ext)
	if !ok || natsauth.CheckName(name) != nil {
		return ""
	}
	return name
}

// devDataDir is where `parley dev` keeps its data when run from this
// directory: $PARLEY_DATA_DIR, else .parley (dev's --data-dir default).
func devDataDir() string {
	if d := os.Getenv("PARLEY_DATA_DIR"); d != "" {
		return d
	}
	return ".parley"
}

// devAuthDir is the credentials directory of a `parley dev` data dir.
func devAuthDir(dataDir string) string { return filepath.Join(dataDir, "auth") }

// integratorCredentials are the credentials of send, answer, events and
// chat: the flags' when they name a creds or nkey file, else the
// integrator seed `parley dev` wrote in its data dir (when there is one).
func (f natsAuthFlags) integratorCredentials() natsauth.Credentials {
	c := f.credentials(natsauth.Integrator)
	if c.Authenticated() {
		return c
	}
	c.NKeyFile = devSeed(natsauth.Integrator)
	return c
}

// devSeed is principal's nkey seed in parley dev's data dir
// (<data-dir>/auth/<principal>.nk), or "" when there is none.
func devSeed(principal string) string {
	seed := filepath.Join(devAuthDir(devDataDir()), natsauth.SeedFile(principal))
	if _, err := os.Stat(seed); err != nil {
		return ""
	}
	return seed
}

// credentialsAs returns the credentials to publish as principal (""
// means the integrator: integratorCredentials): the flags' when they name
// a credentials file, else parley dev's <data-dir>/auth/<principal>.nk
// when it exists. Credentials whose file is named after another
// principal (integrator.nk with --principal gateway), with no
// --nats-principal to say otherwise, are a usage error: the server lets
// a principal publish only under its own name and read replies only on
// its own inbox, so every publish and request would be refused. A
// credentials file named otherwise is taken to be principal's (its
// inbox prefix follows).
func (f natsAuthFlags) credentialsAs(principal string) (natsauth.Credentials, error) {
	if principal == "" {
		return f.integratorCredentials(), nil
	}
	c := f.credentials(principal)
	if !c.Authenticated() {
		c.NKeyFile = devSeed(principal)
		return c, nil
	}
	if f.NATSPrincipal != "" {
		return c, nil
	}
	file, owner := c.NKeyFile, principalOfFile(c.NKeyFile, ".nk")
	if owner == "" {
		file, owner = c.CredsFile, principalOfFile(c.CredsFile, ".creds")
	}
	if owner != "" && owner != principal {
		return c, fmt.Errorf("--principal %s: the credentials %s are %s's, and the NATS server lets a principal publish "+
			"only under its own name (parley.in.<principal>.…): pass %s's credentials (--nats-nkey <dir>/%s), "+
			"or leave --principal out to send as %s", principal, file, owner, principal, natsauth.SeedFile(principal), owner)
	}
	c.Principal = principal
	return c, nil
}

// connectAs connects to the flags' server as principal-named
// credentials (see natsauth.Connect); name is the connection name.
func (e *env) connectAs(name string, c natsauth.Credentials) (*nats.Conn, error) {
	return natsauth.Connect(e.NATS, name, c, e.logger(e.stderr))
}
