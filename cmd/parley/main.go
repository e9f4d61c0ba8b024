// Command parley runs parley's workers and talks to them over NATS.
//
//	parley demo                      three seed scenarios on an embedded server
//	parley dev                       embedded NATS + JetStream and every worker
//	parley processor|agent|toolexec|gate --nats URL   one worker
//	parley send|answer|events|chat   what an integrator does
//	parley approvals list|revoke     a thread's standing approvals
//	parley validate ...              check MCP shapes
//
// Flags can also be set with PARLEY_* environment variables (see --help).
//
// It is a composition root: it may import any of parley's packages, and
// nothing imports it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/internal/telemetry"
	"github.com/parley-dev/parley/internal/version"
	"github.com/parley-dev/parley/schema"
)

// Globals are flags every command takes.
type Globals struct {
	NATS      string `name:"nats" env:"PARLEY_NATS" default:"nats://127.0.0.1:4222" help:"NATS server URL (dev and demo start their own server and refuse it)."`
	LogLevel  string `name:"log-level" env:"PARLEY_LOG_LEVEL" default:"info" enum:"debug,info,warn,error" help:"Log level (${enum})."`
	LogFormat string `name:"log-format" env:"PARLEY_LOG_FORMAT" default:"auto" enum:"auto,json,text" help:"Log format (${enum}; auto: text on a terminal, JSON otherwise)."`
	natsAuthFlags
}

// logger builds the slog logger the flags ask for, writing to w: text
// when asked for, or with "auto" when w is a terminal; JSON otherwise.
func (g *Globals) logger(w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(g.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if g.LogFormat == "text" || (g.LogFormat == "auto" && isTerminal(w)) {
		return slog.New(telemetry.LogHandler(slog.NewTextHandler(w, opts)))
	}
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, opts)))
}

type cli struct {
	Globals

	Version kong.VersionFlag `name:"version" help:"Print parley's version (module version, commit when the build recorded it, Go version, platform) and exit."`

	Demo      demoCmd      `cmd:"" help:"Run the three seed scenarios end to end on an embedded NATS server (exit 0 when all end as expected, 1 otherwise)."`
	Dev       devCmd       `cmd:"" help:"Run an embedded NATS server with JetStream, every worker and the gateway with its web chat (data in --data-dir)."`
	Processor workerCmd    `cmd:"" help:"Run the processor worker (turns, pauses, resumes)."`
	Agent     agentCmd     `cmd:"" help:"Run the agent worker (the model and tool loop)."`
	Toolexec  toolexecCmd  `cmd:"" help:"Run the tool-executor worker (built-in tools and the tools of MCP servers, --mcp-config)."`
	Gate      gateCmd      `cmd:"" help:"Run the gate: the default pre-execute policy service."`
	Send      sendCmd      `cmd:"" help:"Send a user message to a thread (publishes turn.requested)."`
	Answer    answerCmd    `cmd:"" help:"Answer an elicitation (publishes elicitation.responded)."`
	Events    eventsCmd    `cmd:"" help:"Print the stored chat events of one thread (--thread) or of all, then exit; --follow keeps printing new ones."`
	Chat      chatCmd      `cmd:"" help:"Chat in the terminal: messages, forms and confirmations."`
	Approvals approvalsCmd `cmd:"" help:"List or revoke a thread's standing approvals (tools a person allowed for the thread)."`
	Validate  validateCmd  `cmd:"" help:"Validate MCP shapes: elicitation-request, elicitation-result, meta-key, content, tool."`
	Gateway   gatewayCmd   `cmd:"" help:"Serve the HTTP + server-sent events API and the web chat."`
	Bench     benchCmd     `cmd:"" help:"Measure turns/s and pause-to-resume latency next to the raw NATS floor, in the same run."`
	Auth      authCmd      `cmd:"" help:"Generate NATS credentials and the server's authorization for parley's principals."`
}

// exitError carries a process exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run parses args and runs the command; it returns the exit status: 0 ok,
// 1 failure, 2 usage error.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		// A bare `parley` shows every command, not a cut-off list.
		args = []string{"--help"}
	}
	if args[0] == "help" {
		// `parley help [command...]` is `parley [command...] --help`.
		args = append(append([]string(nil), args[1:]...), "--help")
	}
	if len(args) == 2 && args[0] == "validate" && args[1] == "help" {
		args = []string{"validate", "--help"}
	}
	var c cli
	parser, err := kong.New(&c, kong.Name("parley"),
		kong.Description("parley runs AI chat turns as workers that exchange CloudEvents over NATS JetStream, with MCP elicitation for human-in-the-loop pauses."),
		kong.UsageOnError(), kong.Writers(stdout, stderr),
		kong.Vars{"version": version.Get().String(), "form_revision": string(schema.DefaultRevision)},
		kong.Exit(func(code int) { panic(&exitError{code: code}) }))
	if err != nil {
		fmt.Fprintln(stderr, "parley:", err)
		return 2
	}
	code := 0
	func() {
		defer func() {
			if r := recover(); r != nil {
				if ee, ok := r.(*exitError); ok {
					code = ee.code
					return
				}
				panic(r)
			}
		}()
		kctx, err := parser.Parse(args)
		if err != nil {
			fmt.Fprintln(stderr, "parley:", err)
			code = 2
			return
		}
		if cmd := kctx.Command(); (cmd == "dev" || cmd == "demo") && natsFlagGiven(kctx) {
			fmt.Fprintf(stderr, "parley %s: --nats does not apply: %s starts its own NATS server%s\n", cmd, cmd,
				map[string]string{"dev": " (choose its address with --listen)", "demo": ""}[cmd])
			code = 2
			return
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		env := &env{Globals: &c.Globals, ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
		if err := kctx.Run(env); err != nil {
			var ee *exitError
			if errors.As(err, &ee) {
				if ee.err != nil && !(ctx.Err() != nil && errors.Is(ee.err, context.Canceled)) {
					fmt.Fprintln(stderr, "parley:", strings.TrimSpace(humanize(ee.err)))
				}
				code = ee.code
				return
			}
			if ctx.Err() != nil {
				// Interrupted (Ctrl-C, SIGTERM): no "context canceled".
				code = exitInterrupted
				return
			}
			fmt.Fprintln(stderr, "parley:", humanize(err))
			code = 1
		}
	}()
	return code
}

// natsFlagGiven reports whether --nats was given on the command line.
func natsFlagGiven(kctx *kong.Context) bool {
	for _, p := range kctx.Path {
		if p.Flag != nil && p.Flag.Name == "nats" {
			return true
		}
	}
	return false
}

// humanize returns err's message with the text of a context or NATS error
// in its chain ("context deadline exceeded", "nats: no responders
// available for request") replaced by words for a person.
func humanize(err error) string {
	msg := natsauth.Redact(err.Error())
	for _, inner := range []error{context.DeadlineExceeded, context.Canceled, nats.ErrTimeout, nats.ErrNoResponders,
		jetstream.ErrNoStreamResponse, nats.ErrNoServers, nats.ErrConnectionClosed, nats.ErrDisconnected} {
		if errors.Is(err, inner) && strings.Contains(msg, inner.Error()) {
			return strings.Replace(msg, inner.Error(), client.Explain(inner), 1)
		}
	}
	return msg
}

// env is what every command's Run receives.
type env struct {
	*Globals
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}
