package main

import (
	"fmt"
	"path/filepath"

	"github.com/parley-dev/parley/internal/natsauth"
)

type authCmd struct {
	Init authInitCmd `cmd:"" help:"Write one nkey seed per principal and the nats-server authorization block (auth.conf) granting each its permissions."`
}

type authInitCmd struct {
	Out         string   `name:"out" required:"" placeholder:"DIR" help:"Directory to write <principal>.nk (0600) and auth.conf into (created 0700). Existing seeds are kept; auth.conf is rewritten."`
	Integrators []string `name:"integrator" placeholder:"NAME" help:"A further integrator principal (repeat): it may publish only under parley.in.<NAME>.>."`
	Policies    []string `name:"policy" placeholder:"NAME" help:"A further policy service principal (repeat), e.g. policy-pii: it may answer pre-execute requests."`
}

func (c *authInitCmd) Run(e *env) error {
	ps, err := natsauth.Set(c.Integrators, c.Policies)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	users, err := natsauth.Init(c.Out, ps)
	if err != nil {
		return err
	}
	abs, _ := filepath.Abs(c.Out)
	fmt.Fprintf(e.stdout, "Wrote %s:\n", abs)
	for _, u := range users {
		fmt.Fprintf(e.stdout, "  %-22s %s  (%s)\n", natsauth.SeedFile(u.Name), u.PublicKey, u.Description)
	}
	fmt.Fprintf(e.stdout, "  %-22s the authorization block: put `include %s` in the nats-server configuration\n", natsauth.AuthFile, natsauth.AuthFile)
	fmt.Fprintln(e.stdout, "Give each role only its own seed: parley <role> --nats-nkey <role>.nk (or PARLEY_NATS_NKEY). docs/SECURITY.md has the details.")
	return nil
}
