package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
)

// approvalsCmd lists and revokes a thread's standing approvals (the tools
// a person allowed for the thread: events.Approval), by request-reply with
// the processor that keeps them.
type approvalsCmd struct {
	List   approvalsListCmd   `cmd:"" help:"List a thread's standing approvals (tools allowed for the thread without asking)."`
	Revoke approvalsRevokeCmd `cmd:"" help:"Revoke a thread's standing approvals of one tool (or --all); only the thread's owner may."`
}

// approvalsFlags are the flags list and revoke share.
type approvalsFlags struct {
	Thread string `name:"thread" short:"t" required:"" help:"Thread ID."`
	User   string `name:"user" help:"The end user you act for (onBehalfOf). Honoured only if the processor trusts your principal to speak for users (--trusted-principals). Default: none (your principal)."`
	JSON   bool   `name:"json" help:"Print the processor's answer as JSON."`
	principalFlag
}

func (f *approvalsFlags) check() error {
	if err := events.ValidToken("--thread", f.Thread); err != nil {
		return err
	}
	return f.principalFlag.check()
}

type approvalsListCmd struct {
	approvalsFlags
}

// Validate checks the arguments (kong calls it after parsing).
func (c *approvalsListCmd) Validate() error { return c.check() }

func (c *approvalsListCmd) Run(e *env) error {
	return askApprovals(e.withSafeOutput(), &c.approvalsFlags, "")
}

type approvalsRevokeCmd struct {
	Tool string `arg:"" optional:"" help:"The tool whose approvals to revoke."`
	All  bool   `name:"all" help:"Revoke every approval of the thread."`
	approvalsFlags
}

// Validate checks the arguments (kong calls it after parsing).
func (c *approvalsRevokeCmd) Validate() error {
	switch {
	case c.All && c.Tool != "":
		return errors.New("revoke: give a tool or --all, not both")
	case !c.All && c.Tool == "":
		return errors.New("revoke: a tool, or --all, is required")
	case c.Tool != "":
		if err := events.ValidToken("tool", c.Tool); err != nil {
			return err
		}
	}
	return c.check()
}

func (c *approvalsRevokeCmd) Run(e *env) error {
	tool := c.Tool
	if c.All {
		tool = "*"
	}
	return askApprovals(e.withSafeOutput(), &c.approvalsFlags, tool)
}

// askApprovals asks the processor for the thread's approvals (revoking
// revoke's first, when set) and prints them. Exit 1 when the caller is not
// a party of the thread (not its owner, for a revoke) or no processor
// answered.
func askApprovals(e *env, f *approvalsFlags, revoke string) error {
	cl, done, err := integratorAs(e, f.Principal)
	if err != nil {
		return connectExit(err)
	}
	defer done()
	out, err := cl.Approvals(e.ctx, f.Thread, f.User, revoke)
	switch {
	case errors.Is(err, client.ErrNotAParty) && revoke != "":
		return &exitError{code: exitRefused, err: fmt.Errorf("thread %s: only its owner may revoke its standing approvals", f.Thread)}
	case errors.Is(err, client.ErrNotAParty):
		return &exitError{code: exitRefused, err: fmt.Errorf("thread %s: you are not a party of it", f.Thread)}
	case err != nil:
		return &exitError{code: exitRefused, err: fmt.Errorf("asking the processor about %s's standing approvals: %w", f.Thread, err)}
	}
	if f.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printApprovals(e.stdout, out, time.Now())
	return nil
}

// printApprovals writes one line per approval (and per revoked one).
func printApprovals(w io.Writer, r *events.ApprovalsReply, now time.Time) {
	for _, a := range r.Revoked {
		fmt.Fprintf(w, "revoked  %s  (agent %s, granted by %s)\n", a.Tool, a.Agent, a.GrantedBy)
	}
	if len(r.Approvals) == 0 {
		fmt.Fprintf(w, "thread %s: no standing approvals\n", r.Thread)
		return
	}
	for _, a := range r.Approvals {
		fmt.Fprintf(w, "allowed  %s  (agent %s, granted by %s, %d uses, expires in %s)\n",
			a.Tool, a.Agent, a.GrantedBy, a.Uses, a.ExpiresAt.Sub(now).Round(time.Second))
	}
}
