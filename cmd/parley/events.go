package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

type eventsCmd struct {
	Thread string `name:"thread" short:"t" help:"Only this thread."`
	JSON   bool   `name:"json" help:"One CloudEvent per line in the CloudEvents JSON format."`
	Follow bool   `name:"follow" short:"f" help:"Keep printing new events."`
}

// Validate checks the arguments (kong calls it after parsing).
func (c *eventsCmd) Validate() error {
	if c.Thread != "" {
		return events.ValidToken("--thread", c.Thread)
	}
	return nil
}

func (c *eventsCmd) Run(e *env) error {
	e = e.withSafeOutput()
	cl, done, err := integrator(e)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithCancel(e.ctx)
	notes := &lockedWriter{w: terminalSafe(e.stderr)}
	var backlog uint64
	ch, err := cl.Watch(ctx, client.WatchOptions{Thread: c.Thread, FromStart: true, Backlog: &backlog, Refusals: true,
		OnStatus: func(s client.WatchStatus) { fmt.Fprintf(notes, "parley events: %s\n", s) }})
	if err != nil {
		cancel()
		return err
	}
	defer func() {
		// Stop the consumer and wait until it is deleted from the server.
		cancel()
		for range ch {
		}
	}()
	var read uint64
	for c.Follow || read < backlog {
		select {
		case it, ok := <-ch:
			if !ok {
				return nil
			}
			read++
			printItem(e.stdout, notes, it, c.JSON)
		case <-e.ctx.Done():
			return nil
		}
	}
	return nil
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// printItem writes one event to w: a JSON line, or readable lines. Items
// that are not valid CloudEvents are noted on notes (stderr), so that w
// holds nothing but events (JSON lines with asJSON).
func printItem(w, notes io.Writer, it client.Item, asJSON bool) {
	if it.Err != nil {
		fmt.Fprintf(notes, "# %s: not a valid CloudEvent: %v\n", it.Subject, it.Err)
		return
	}
	if asJSON {
		b, err := json.Marshal(it.Event)
		if err != nil {
			fmt.Fprintf(notes, "# %s: %v\n", it.Subject, err)
			return
		}
		fmt.Fprintln(w, string(b))
		return
	}
	fmt.Fprintln(w, describe(it.Event))
}

// describe renders an event alone as one or more readable lines (no
// trailing spaces): the one renderer, in log mode.
func describe(ev *event.Event) string {
	return render(threadstate.Decode(ev), renderLog, false)
}

// detailAndErrors renders ": detail | errors: a; b" (the parts present).
func detailAndErrors(detail string, errs []schema.Violation) string {
	var parts []string
	if detail != "" {
		parts = append(parts, indent(detail))
	}
	if len(errs) > 0 {
		var es []string
		for _, v := range errs {
			es = append(es, v.String())
		}
		parts = append(parts, "errors: "+strings.Join(es, "; "))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, " | ")
}

// fields renders a form's properties, required ones first, with the values
// (and titles) of enum properties:
// ` fields: id: page-1 "About us" | page-3 "About the team"; note`.
func fields(rs *schema.RequestedSchema) string {
	names := rs.PropertyNames()
	if len(names) == 0 {
		return ""
	}
	var out []string
	for _, name := range names {
		opts := choices(rs.Properties[name])
		if len(opts) == 0 {
			out = append(out, name)
			continue
		}
		var vs []string
		for _, o := range opts {
			if o.label == "" || o.label == o.value {
				vs = append(vs, o.value)
			} else {
				vs = append(vs, fmt.Sprintf("%s %q", o.value, o.label))
			}
		}
		out = append(out, name+": "+strings.Join(vs, " | "))
	}
	return " fields: " + strings.Join(out, "; ")
}

// decisions renders a completed turn's decision records, one per line.
func decisions(ds []events.DecisionRecord) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "\n    [decision] %s %s", d.Tool, d.Decision)
		if d.Policy != "" {
			fmt.Fprintf(&b, " by policy %s", d.Policy)
		}
		if d.Action != "" {
			fmt.Fprintf(&b, "; %s", d.Action)
			if !d.AnsweredBy.IsZero() {
				fmt.Fprintf(&b, " by %s", d.AnsweredBy)
			}
		}
		if d.Reason != "" {
			fmt.Fprintf(&b, ": %s", d.Reason)
		}
	}
	return b.String()
}

// trimLines removes trailing spaces and tabs from every line.
func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(lines, "\n")
}

// blocks renders a user message's content blocks, one per line.
func blocks(cs schema.ContentList) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString("\n    ")
		b.WriteString(renderBlock(c))
	}
	return b.String()
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n    ") }
