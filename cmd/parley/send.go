package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/schema"
)

// integrator opens a client on e.NATS with the integrator credentials
// (the flags', else those of `parley dev`'s data dir; its publishes retry
// per client.RetryPolicy's defaults).
func integrator(e *env) (*client.Client, func(), error) { return integratorAs(e, "") }

// integratorAs is integrator publishing as principal (--principal; ""
// means the credentials' principal), with natsAuthFlags.credentialsAs:
// credentials named after another principal are a usage error (exit 2)
// before anything is sent.
func integratorAs(e *env, principal string) (*client.Client, func(), error) {
	creds, err := e.credentialsAs(principal)
	if err != nil {
		return nil, nil, &exitError{code: exitUsage, err: err}
	}
	who := creds.Principal
	nc, err := e.connectAs("parley-cli", creds)
	if errors.Is(err, nats.ErrAuthorization) {
		// Not transient: nothing was sent, and trying again will not help.
		hint := "pass " + who + "'s credentials with --nats-nkey or --nats-creds"
		if !creds.Authenticated() {
			hint = "no credentials were found: run from the directory that holds parley dev's data dir (" +
				devDataDir() + "), set PARLEY_DATA_DIR, or pass --nats-nkey <data-dir>/auth/" + natsauth.SeedFile(who)
		}
		return nil, nil, &exitError{code: exitRefused, err: fmt.Errorf("%w (nothing was sent)\n%s", err, hint)}
	}
	if err != nil {
		return nil, nil, err
	}
	b, err := bus.New(nc, nil)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return client.NewWithOptions(b, &client.Options{Source: events.SourceCLI, Principal: creds.Principal}), func() { _ = nc.Drain() }, nil
}

// connectExit is the exit of send and answer when they could not
// connect: an *exitError as integratorAs made it (a refused credential:
// exitRefused), else exitUnconfirmed (no server reachable yet; nothing
// was sent, so the same command may simply be run again).
func connectExit(err error) error {
	var xe *exitError
	if errors.As(err, &xe) {
		return err
	}
	return &exitError{code: exitUnconfirmed, err: err}
}

// Exit statuses of send and answer (documented in exitCodesHelp).
const (
	exitOK          = 0
	exitRefused     = 1
	exitUnconfirmed = 3
	exitNoVerdict   = 4
	exitInterrupted = 130
)

// exitCodesHelp is the exit-status part of the help of send and answer.
const exitCodesHelp = `Exit status:
  0    done: send: the turn completed, or paused with questions (printed, with their IDs);
       answer: the processor took the answer; with --no-wait: JetStream stored the event
  1    refused: turn.rejected, turn.failed or elicitation.rejected (printed), credentials
       refused by the server (nothing sent), or another error
  2    usage error
  3    not confirmed: NATS or the stream did not acknowledge within --publish-timeout; the
       event may or may not be stored: run the same command with --id <ID> to resend it safely;
       or no NATS server was reachable (nothing sent): run the same command again
  4    stored, but no verdict within --wait (the thread's state is printed)
  130  interrupted (Ctrl-C)`

// principalFlag names the NATS principal an integrator command publishes
// as (send, answer, chat): its input subjects are parley.in.<principal>.>.
type principalFlag struct {
	Principal string `name:"principal" env:"PARLEY_PRINCIPAL" help:"The NATS principal (user) your credentials authenticate: events go to parley.in.<principal>.<thread>.… (the server lets a principal publish only under its own name). Default: the credentials' principal (--nats-principal, or the name of a <principal>.nk or .creds file), else integrator."`
}

// check validates the principal token (empty: the credentials').
func (f principalFlag) check() error {
	if f.Principal == "" {
		return nil
	}
	return events.ValidToken("--principal", f.Principal)
}

// deliveryFlags are the flags send and answer share.
type deliveryFlags struct {
	NoWait         bool          `name:"no-wait" help:"Return once JetStream stored the event (print its ID); do not wait for the processor's verdict."`
	Wait           time.Duration `name:"wait" default:"2m" help:"How long to wait for the processor's verdict."`
	PublishTimeout time.Duration `name:"publish-timeout" default:"30s" help:"How long to retry the publish (same event ID, so no duplicate) through a reconnect or a JetStream leader election."`
	ID             string        `name:"id" help:"Event ID to publish under (default: a new UUID). Resending with the ID of an unconfirmed try is safe: JetStream drops a copy within its 2-minute duplicate window."`
	JSON           bool          `name:"json" help:"Print the verdict's events as CloudEvents JSON, one per line."`
}

func (f *deliveryFlags) check() error {
	if f.Wait <= 0 {
		return errors.New("--wait must be positive")
	}
	if f.PublishTimeout <= 0 {
		return errors.New("--publish-timeout must be positive")
	}
	if f.ID != "" && strings.TrimSpace(f.ID) != f.ID {
		return errors.New("--id: must not start or end with spaces")
	}
	return nil
}

type sendCmd struct {
	Thread string   `name:"thread" short:"t" required:"" help:"Thread ID (A-Z a-z 0-9 _ -)."`
	AgentN string   `name:"agent" short:"a" help:"Agent to answer (default: the processor's default agent)."`
	User   string   `name:"user" help:"The end user you send for (onBehalfOf). Honoured only if the processor trusts your principal to speak for users (--trusted-principals); otherwise the message is rejected forbidden. Default: none (recorded as your principal)."`
	Refs   []string `name:"ref" help:"A site entity the message refers to, as <entity_type>:<id> (page:page-1); repeatable, at most 8. Sent as a resource_link block with _meta[\"drupal.org/ai.entity\"]; parley resolves it as you before the model sees it, and refuses the message (reference_unavailable) if it does not exist or you may not see it."`
	Text   []string `arg:"" help:"The message."`
	deliveryFlags
	principalFlag

	refs []schema.Entity // Refs, parsed by Validate
}

// Help is the long help of send (kong's HelpProvider).
func (c *sendCmd) Help() string {
	return "Publishes turn.requested, then waits for the processor's verdict on it and prints it.\n\n" + exitCodesHelp
}

// Validate checks the arguments (kong calls it after parsing; an error is
// a usage error, exit status 2).
func (c *sendCmd) Validate() error {
	if err := events.ValidToken("--thread", c.Thread); err != nil {
		return err
	}
	if c.AgentN != "" {
		if err := events.ValidToken("--agent", c.AgentN); err != nil {
			return err
		}
	}
	if strings.TrimSpace(strings.Join(c.Text, " ")) == "" {
		return errors.New("message text: required")
	}
	if len(c.Refs) > events.MaxReferences {
		return fmt.Errorf("--ref: at most %d references, got %d", events.MaxReferences, len(c.Refs))
	}
	c.refs = nil
	for _, r := range c.Refs {
		e, err := events.ParseReference(r)
		if err != nil {
			return fmt.Errorf("--ref: %w", err)
		}
		c.refs = append(c.refs, e)
	}
	if err := c.principalFlag.check(); err != nil {
		return err
	}
	return c.deliveryFlags.check()
}

func (c *sendCmd) Run(e *env) error {
	e = e.withSafeOutput()
	cl, done, err := integratorAs(e, c.Principal)
	if err != nil {
		return connectExit(err)
	}
	defer done()
	ev, err := cl.TurnRequest(c.Thread, c.AgentN, strings.Join(c.Text, " "), c.User)
	if err == nil && len(c.refs) > 0 {
		err = withReferences(ev, c.refs)
	}
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if c.ID != "" {
		ev.SetID(c.ID)
	}
	return deliver(e, cl, ev, &c.deliveryFlags)
}

// withReferences adds a context reference block (events.ReferenceLink) per
// entity to the message of the turn.requested ev.
func withReferences(ev *event.Event, refs []schema.Entity) error {
	in, err := events.Data[events.TurnRequested](ev)
	if err != nil {
		return err
	}
	for _, r := range refs {
		in.Message.Content = append(in.Message.Content, events.ReferenceLink(r, ""))
	}
	return ev.SetData(event.ApplicationJSON, in)
}

type answerCmd struct {
	Thread      string `name:"thread" short:"t" required:"" help:"Thread ID."`
	Elicitation string `name:"elicitation" short:"e" required:"" help:"Elicitation ID (from elicitation.requested)."`
	Content     string `name:"content" help:"Form content as a JSON object (accept; or {\"instructions\": ...} with a confirmation's decline); @FILE reads it from a file, - from standard input."`
	Arguments   string `name:"arguments" help:"Accept a tool confirmation with changed arguments: the complete arguments to run instead of the model's, as a JSON object (e.g. '{\"ids\":[\"article-2\"]}'); @FILE reads them from a file, - from standard input. Only with accept. The processor checks them against the tool's input schema; an invalid edit is rejected naming the field (exit status 1) and the question stays open."`
	By          string `name:"by" help:"The end user you answer for (onBehalfOf, recorded on the decision). Honoured only if the processor trusts your principal to speak for users (--trusted-principals); otherwise the answer is rejected forbidden. Default: none (recorded as your principal)."`
	Action      string `arg:"" enum:"accept,decline,cancel" help:"accept, decline or cancel."`
	// ForThread: see events.StandingChoice.
	ForThread bool `name:"for-thread" help:"With accept of a tool confirmation that offers it: also allow later calls of the tool, by the same agent, in this thread without asking (a standing approval; docs/POLICY.md)."`
	deliveryFlags
	principalFlag
}

// Help is the long help of answer (kong's HelpProvider).
func (c *answerCmd) Help() string {
	return "Publishes elicitation.responded, then waits until the processor takes the answer or rejects it (elicitation.rejected, with its errors) and prints which.\n\n" + exitCodesHelp
}

// Validate checks the arguments (kong calls it after parsing).
func (c *answerCmd) Validate() error {
	if err := events.ValidToken("--thread", c.Thread); err != nil {
		return err
	}
	if strings.TrimSpace(c.Elicitation) == "" {
		return errors.New("--elicitation: required")
	}
	if c.Arguments != "" && c.Action != string(schema.ActionAccept) {
		return fmt.Errorf("--arguments: only with accept (a %s runs nothing, so it changes no arguments)", c.Action)
	}
	if c.ForThread && c.Action != string(schema.ActionAccept) {
		return errors.New("--for-thread: only with accept")
	}
	if err := c.principalFlag.check(); err != nil {
		return err
	}
	return c.deliveryFlags.check()
}

func (c *answerCmd) Run(e *env) error {
	e = e.withSafeOutput()
	res := schema.ElicitResult{Action: schema.ElicitAction(c.Action)}
	if c.Content != "" {
		content, err := readContent(c.Content, e.stdin)
		if err != nil {
			return &exitError{code: exitUsage, err: fmt.Errorf("--content: %w", err)}
		}
		res.Content = content
	}
	if c.Arguments != "" {
		args, err := readContent(c.Arguments, e.stdin)
		if err != nil {
			return &exitError{code: exitUsage, err: fmt.Errorf("--arguments: %w", err)}
		}
		raw, err := json.Marshal(args)
		if err != nil {
			return &exitError{code: exitUsage, err: fmt.Errorf("--arguments: %w", err)}
		}
		res.Meta = schema.Meta{schema.MetaArguments: json.RawMessage(raw)}
	}
	if c.ForThread {
		if res.Meta == nil {
			res.Meta = schema.Meta{}
		}
		res.Meta[events.MetaStanding] = events.StandingChoice{Scope: events.StandingScopeThread}
	}
	by := c.By
	cl, done, err := integratorAs(e, c.Principal)
	if err != nil {
		return connectExit(err)
	}
	defer done()
	ev, err := cl.Response(c.Thread, c.Elicitation, res, by)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if c.ID != "" {
		ev.SetID(c.ID)
	}
	return deliver(e, cl, ev, &c.deliveryFlags)
}

// deliver publishes ev (retrying per --publish-timeout) and, unless
// --no-wait, waits for the processor's verdict, prints it and returns the
// exit status it maps to (see exitCodesHelp).
func deliver(e *env, cl *client.Client, ev *event.Event, f *deliveryFlags) error {
	what := "message"
	if events.TypeOf(ev) == events.TypeElicitationResponded {
		what = "answer"
	}
	// Say once that a publish is being retried, and why.
	cl = cl.WithRetry(client.RetryPolicy{Budget: f.PublishTimeout, OnRetry: func(attempt int, err error) {
		if attempt == 1 {
			fmt.Fprintf(e.stderr, "parley: %s %s not confirmed yet (%s); retrying with the same ID for up to %s\n",
				what, ev.ID(), client.Explain(err), f.PublishTimeout)
		}
	}})
	if f.NoWait {
		ack, err := cl.Publish(e.ctx, ev)
		if err != nil {
			return deliveryError(e, ev, err)
		}
		if ack.Duplicate {
			fmt.Fprintf(e.stderr, "parley: %s %s was already stored (a resend); JetStream dropped this copy\n", what, ev.ID())
		}
		fmt.Fprintln(e.stdout, ev.ID())
		return nil
	}
	v, err := cl.Deliver(e.ctx, ev, f.Wait)
	if err != nil {
		return deliveryError(e, ev, err)
	}
	if v.Ack != nil && v.Ack.Duplicate {
		fmt.Fprintf(e.stderr, "parley: %s %s was already stored (a resend); its verdict:\n", what, ev.ID())
	}
	printVerdict(e.stdout, ev, v, f.JSON)
	if v.Outcome.Refusal() {
		return &exitError{code: exitRefused}
	}
	return nil
}

// deliveryError maps an error of Publish or Deliver to an exit status and
// an honest message.
func deliveryError(e *env, ev *event.Event, err error) error {
	var nv *client.NoVerdictError
	switch {
	case e.ctx.Err() != nil:
		return &exitError{code: exitInterrupted}
	case errors.Is(err, client.ErrNotConfirmed):
		return &exitError{code: exitUnconfirmed, err: fmt.Errorf("%w\nThe event may or may not be stored; resend it safely with the same command and --id %s", err, ev.ID())}
	case errors.As(err, &nv):
		return &exitError{code: exitNoVerdict, err: fmt.Errorf("%w\nFollow it with: parley events --thread %s --follow", err, ev.Subject())}
	case errors.Is(err, client.ErrNoStream):
		return &exitError{code: exitUnconfirmed, err: err}
	}
	return err
}

// printVerdict prints what the processor decided: the deciding event (and
// a paused turn's questions, with how to answer them), readable or as
// CloudEvents JSON lines.
func printVerdict(w io.Writer, ev *event.Event, v *client.Verdict, asJSON bool) {
	if asJSON {
		for _, q := range v.Questions {
			printItem(w, io.Discard, client.Item{Event: q}, true)
		}
		if v.Event != nil {
			printItem(w, io.Discard, client.Item{Event: v.Event}, true)
			return
		}
		b, _ := json.Marshal(map[string]any{"outcome": v.Outcome, "respondedEventId": ev.ID(), "pending": v.Pending})
		fmt.Fprintln(w, string(b))
		return
	}
	switch v.Outcome {
	case client.OutcomeAccepted:
		if len(v.Pending) == 0 {
			fmt.Fprintf(w, "accepted: answer %s taken; the turn resumes\n", ev.ID())
		} else {
			fmt.Fprintf(w, "accepted: answer %s taken; the turn still waits for %s\n", ev.ID(), strings.Join(v.Pending, ", "))
		}
		return
	case client.OutcomePaused:
		fmt.Fprintf(w, "paused: the turn asks %d question(s)\n", len(v.Questions))
		for _, q := range v.Questions {
			fmt.Fprintln(w, describe(q))
			if call := confirmedCall(q); call != "" {
				fmt.Fprintln(w, call)
			}
		}
		for _, q := range v.Questions {
			fmt.Fprintf(w, "answer with: parley answer --thread %s --elicitation %s accept|decline|cancel %s\n", ev.Subject(), elicitationIDOf(q), answerFlags(q))
		}
		return
	}
	fmt.Fprintf(w, "%s: %s\n", v.Outcome, describe(v.Event))
}

// confirmedCall renders the tool call a confirmation asks about — the
// call that runs on accept — as `  tool: <name> arguments: <JSON>`, so
// the person answering with `parley answer` sees what they allow (and
// what --arguments would change). "" for a form or an unreadable event.
func confirmedCall(q *event.Event) string {
	p, err := events.Data[schema.ElicitRequestParams](q)
	if err != nil {
		return ""
	}
	tc, err := p.Meta.ToolCall()
	if err != nil || tc == nil {
		return ""
	}
	args := compactJSON(tc.Arguments)
	if args == "" || args == "null" {
		args = "{}" // a call without arguments
	}
	return fmt.Sprintf("  tool: %s arguments: %s", tc.Name, args)
}

// answerFlags is the flags part of the `answer with:` hint for question
// q: `--arguments` only for a confirmation that carries the tool's input
// schema (any other refuses an edit), the confirmation's one field
// `instructions` named for --content.
func answerFlags(q *event.Event) string {
	p, err := events.Data[schema.ElicitRequestParams](q)
	if err != nil || !p.IsToolConfirmation() {
		return "[--content JSON]"
	}
	flags := `[--content '{"instructions":"…"}']`
	if _, ok := p.InputSchemaOf(); ok {
		flags += " [--arguments JSON]"
	}
	return flags
}

// elicitationIDOf returns the elicitation ID of an elicitation.requested.
func elicitationIDOf(q *event.Event) string {
	p, err := events.Data[schema.ElicitRequestParams](q)
	if err != nil {
		return ""
	}
	id, _ := p.Meta[schema.MetaElicitationID].(string)
	return id
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
