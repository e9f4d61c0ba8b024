package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/bus"
)

// integrator opens a client on e.NATS.
func integrator(e *env) (*client.Client, func(), error) {
	nc, err := client.Connect(e.NATS, "parley-cli")
	if err != nil {
		return nil, nil, err
	}
	b, err := bus.New(nc, nil)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return client.New(b, events.SourceCLI), func() { _ = nc.Drain() }, nil
}

type sendCmd struct {
	Thread string   `name:"thread" short:"t" required:"" help:"Thread ID (A-Z a-z 0-9 _ -)."`
	AgentN string   `name:"agent" short:"a" help:"Agent to answer (default: the processor's default agent)."`
	User   string   `name:"user" help:"Who is sending (recorded)."`
	Text   []string `arg:"" help:"The message."`
}

func (c *sendCmd) Run(e *env) error {
	cl, done, err := integrator(e)
	if err != nil {
		return err
	}
	defer done()
	ev, err := cl.Send(e.ctx, c.Thread, c.AgentN, strings.Join(c.Text, " "), c.User)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	fmt.Fprintln(e.stdout, ev.ID())
	return nil
}

type answerCmd struct {
	Thread      string `name:"thread" short:"t" required:"" help:"Thread ID."`
	Elicitation string `name:"elicitation" short:"e" required:"" help:"Elicitation ID (from elicitation.requested)."`
	Content     string `name:"content" help:"Form content as a JSON object (accept; or {\"instructions\": ...} with a confirmation's decline)."`
	By          string `name:"by" help:"Who answers (recorded on the decision)."`
	Action      string `arg:"" enum:"accept,decline,cancel" help:"accept, decline or cancel."`
}

func (c *answerCmd) Run(e *env) error {
	res := schema.ElicitResult{Action: schema.ElicitAction(c.Action)}
	if c.Content != "" {
		if err := json.Unmarshal([]byte(c.Content), &res.Content); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--content: must be a JSON object: %w", err)}
		}
	}
	cl, done, err := integrator(e)
	if err != nil {
		return err
	}
	defer done()
	ev, err := cl.Answer(e.ctx, c.Thread, c.Elicitation, res, c.By)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	fmt.Fprintln(e.stdout, ev.ID())
	return nil
}
