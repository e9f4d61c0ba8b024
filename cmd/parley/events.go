package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

type eventsCmd struct {
	Thread string `name:"thread" short:"t" help:"Only this thread."`
	JSON   bool   `name:"json" help:"One CloudEvent per line in the CloudEvents JSON format."`
	Follow bool   `name:"follow" short:"f" help:"Keep printing new events."`
}

func (c *eventsCmd) Run(e *env) error {
	cl, done, err := integrator(e)
	if err != nil {
		return err
	}
	defer done()
	last, err := cl.Pending(e.ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch, err := cl.Watch(ctx, client.WatchOptions{Thread: c.Thread, FromStart: true})
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	idle := time.NewTimer(time.Second)
	for {
		if !c.Follow && last == 0 {
			return nil
		}
		select {
		case it, ok := <-ch:
			if !ok {
				return nil
			}
			printItem(e.stdout, it, c.JSON)
			if !c.Follow && it.Seq >= last {
				return nil
			}
			idle.Reset(time.Second)
		case <-idle.C:
			if !c.Follow {
				return nil // fewer events on this thread than in the stream
			}
		case <-e.ctx.Done():
			return nil
		}
	}
}

// printItem writes one event: a JSON line, or a readable line.
func printItem(w io.Writer, it client.Item, asJSON bool) {
	if it.Err != nil {
		fmt.Fprintf(w, "# %s: not a valid CloudEvent: %v\n", it.Subject, it.Err)
		return
	}
	if asJSON {
		b, err := json.Marshal(it.Event)
		if err != nil {
			fmt.Fprintf(w, "# %s: %v\n", it.Subject, err)
			return
		}
		fmt.Fprintln(w, string(b))
		return
	}
	fmt.Fprintln(w, describe(it.Event))
}

// describe renders an event as one or more readable lines.
func describe(ev *event.Event) string {
	thread := ev.Subject()
	short := strings.TrimPrefix(ev.Type(), "dev.parley.")
	head := fmt.Sprintf("[%s] %-22s", thread, short)
	switch ev.Type() {
	case events.TypeTurnRequested:
		d, _ := events.Data[events.TurnRequested](ev)
		return fmt.Sprintf("%s user: %s", head, d.Message.Text)
	case events.TypeTurnCompleted:
		d, _ := events.Data[events.TurnCompleted](ev)
		return fmt.Sprintf("%s assistant: %s%s", head, d.Message.Text, blocks(d.Message.Content))
	case events.TypeTurnPaused:
		d, _ := events.Data[events.TurnPaused](ev)
		return fmt.Sprintf("%s assistant: %s", head, indent(d.Message.Text))
	case events.TypeElicitationRequested:
		d, _ := events.Data[schema.ElicitRequestParams](ev)
		id, _ := d.Meta[schema.MetaElicitationID].(string)
		kind := "form"
		if d.IsToolConfirmation() {
			kind = "confirmation"
		}
		props := d.RequestedSchema.PropertyNames()
		return fmt.Sprintf("%s %s %s %q fields=%v", head, kind, id, d.Message, props)
	case events.TypeElicitationResponded:
		d, _ := events.Data[events.ElicitationResponded](ev)
		content := ""
		if len(d.Content) > 0 {
			b, _ := json.Marshal(d.Content)
			content = " " + string(b)
		}
		by := ""
		if d.AnsweredBy != "" {
			by = " by " + d.AnsweredBy
		}
		return fmt.Sprintf("%s %s %s%s%s", head, d.ElicitationID, d.Action, content, by)
	case events.TypeElicitationRejected:
		d, _ := events.Data[events.ElicitationRejected](ev)
		var errs []string
		for _, v := range d.Errors {
			errs = append(errs, v.String())
		}
		return fmt.Sprintf("%s %s %s: %s %s", head, d.ElicitationID, d.Reason, d.Detail, strings.Join(errs, "; "))
	case events.TypeTurnFailed:
		d, _ := events.Data[events.TurnFailed](ev)
		return fmt.Sprintf("%s %s: %s", head, d.Reason, d.Detail)
	}
	return fmt.Sprintf("%s %s", head, string(ev.Data()))
}

func blocks(cs schema.ContentList) string {
	var b strings.Builder
	for _, c := range cs {
		switch c := c.(type) {
		case *schema.ResourceLink:
			fmt.Fprintf(&b, "\n    [%s] %s <%s>", c.ContentType(), c.Name, c.URI)
		case *schema.TextContent:
			fmt.Fprintf(&b, "\n    [text] %s", c.Text)
		default:
			fmt.Fprintf(&b, "\n    [%s]", c.ContentType())
		}
	}
	return b.String()
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n    ") }
