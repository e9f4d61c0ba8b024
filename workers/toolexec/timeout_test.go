package toolexec

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// blockingTool never returns on its own, and ignores its context.
type blockingTool struct {
	name    string
	ann     *schema.ToolAnnotations
	release chan struct{}
}

func (b *blockingTool) Definition() schema.Tool {
	return schema.Tool{Name: b.name, InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: b.ann}
}

func (b *blockingTool) Call(context.Context, builtin.Request) (builtin.Result, error) {
	<-b.release
	return builtin.Result{Call: &schema.CallToolResult{Content: schema.ContentList{schema.Text("too late")}}}, nil
}

// A tool that hangs (even one ignoring its context) is abandoned after
// CallTimeout: the handler returns, and the model gets an isError result
// saying so: for a tool that is not safe to re-run, that the outcome is
// unknown; for a read-only one, that it was stopped.
func TestHungToolTimesOut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	write := &blockingTool{name: "write", release: release}
	read := &blockingTool{name: "read", release: release, ann: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true)}}
	f := newFixture(t, Options{CallTimeout: 200 * time.Millisecond,
		Sources: []Source{&fakeSource{name: "srv", tools: []builtin.Tool{write, read}}}})
	for i, c := range []struct{ tool, want string }{
		{"srv__write", "Outcome unknown: srv__write was started but did not finish within 200ms"},
		{"srv__read", "srv__read did not finish within 200ms and was stopped"},
	} {
		in := events.ToolCallRequested{RunID: "run-1", Thread: "thread-1", Call: schema.ToolCall{ID: fmt.Sprint("call-", i), Name: c.tool}}
		// The agent's decision record, without which a tool that is not
		// read-only is not run at all.
		recordDecision(t, f.x.decisions, in, c.tool, in.Call.Arguments)
		d := func() *bus.Delivery {
			d := delivery(t, c.tool)
			d.Event, _ = events.New(events.SourceAgent, events.TypeToolCallRequested, "thread-1", in)
			return d
		}
		start := time.Now()
		if err := f.x.Handle(t.Context(), d()); err != nil {
			t.Fatalf("%s: Handle = %v, want nil (an error result, not a retry)", c.tool, err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%s: Handle took %v, want about the 200ms timeout", c.tool, took)
		}
		r := f.result(t)
		if !r.Result.IsError || !strings.Contains(text(r), c.want) {
			t.Errorf("%s: result %q (isError %v), want isError containing %q", c.tool, text(r), r.Result.IsError, c.want)
		}
		// A redelivery reuses the recorded result: a hung tool is never re-run.
		if err := f.x.Handle(t.Context(), d()); err != nil {
			t.Fatal(err)
		}
		if r := f.result(t); !strings.Contains(text(r), c.want) {
			t.Errorf("%s: redelivery result %q, want the recorded timeout", c.tool, text(r))
		}
	}
}
