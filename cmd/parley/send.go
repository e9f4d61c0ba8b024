package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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

// Validate checks the arguments (kong calls it after parsing; an error is
// a usage error, exit status 2).
func (c *sendCmd) Validate() error {
	if err := events.ValidToken("thread", c.Thread); err != nil {
		return err
	}
	if c.AgentN != "" {
		if err := events.ValidToken("agent", c.AgentN); err != nil {
			return err
		}
	}
	if strings.TrimSpace(strings.Join(c.Text, " ")) == "" {
		return errors.New("message text: required")
	}
	return nil
}

func (c *sendCmd) Run(e *env) error {
	cl, done, err := integrator(e)
	if err != nil {
		return err
	}
	defer done()
	ev, err := cl.Send(e.ctx, c.Thread, c.AgentN, strings.Join(c.Text, " "), c.User)
	if err != nil {
		return fmt.Errorf("publishing turn.requested: %w", err)
	}
	fmt.Fprintln(e.stdout, ev.ID())
	return nil
}

type answerCmd struct {
	Thread      string `name:"thread" short:"t" required:"" help:"Thread ID."`
	Elicitation string `name:"elicitation" short:"e" required:"" help:"Elicitation ID (from elicitation.requested)."`
	Content     string `name:"content" help:"Form content as a JSON object (accept; or {\"instructions\": ...} with a confirmation's decline); @FILE reads it from a file, - from standard input."`
	By          string `name:"by" help:"Who answers (recorded on the decision; default: $USER)."`
	Action      string `arg:"" enum:"accept,decline,cancel" help:"accept, decline or cancel."`
}

// Validate checks the arguments (kong calls it after parsing).
func (c *answerCmd) Validate() error {
	if err := events.ValidToken("thread", c.Thread); err != nil {
		return err
	}
	if strings.TrimSpace(c.Elicitation) == "" {
		return errors.New("--elicitation: required")
	}
	return nil
}

func (c *answerCmd) Run(e *env) error {
	res := schema.ElicitResult{Action: schema.ElicitAction(c.Action)}
	if c.Content != "" {
		content, err := readContent(c.Content, e.stdin)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--content: %w", err)}
		}
		res.Content = content
	}
	by := c.By
	if by == "" {
		by = os.Getenv("USER")
	}
	cl, done, err := integrator(e)
	if err != nil {
		return err
	}
	defer done()
	ev, err := cl.Answer(e.ctx, c.Thread, c.Elicitation, res, by)
	if err != nil {
		return fmt.Errorf("publishing elicitation.responded: %w", err)
	}
	fmt.Fprintln(e.stdout, ev.ID())
	return nil
}

// readContent decodes --content: a JSON object given inline, in @FILE, or
// on standard input (-).
func readContent(arg string, stdin io.Reader) (map[string]any, error) {
	var raw []byte
	switch {
	case arg == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		raw = b
	case strings.HasPrefix(arg, "@"):
		b, err := os.ReadFile(arg[1:])
		if err != nil {
			return nil, err
		}
		raw = b
	default:
		raw = []byte(arg)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("must be a JSON object: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("must be one JSON object (found more after it)")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must be a JSON object, not %s", jsonKind(v))
	}
	return obj, nil
}

// jsonKind names the JSON type of a decoded value.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
