package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/parley-dev/parley/schema"
)

// One trace spans a turn across workers and across its pause: the agent's
// handling of the resume, and the tool call after it, belong to the trace
// the user's message started, not to the answer's.
func TestOneTraceAcrossThePause(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })

	s := start(t, options{})
	ctx, send := tp.Tracer("test").Start(s.ctx, "user sends")
	if _, err := s.client.Send(ctx, "tr", "", deleteDrafts, ""); err != nil {
		t.Fatal(err)
	}
	send.End()
	turnTrace := send.SpanContext().TraceID()
	id, _ := s.question("tr", 1)

	ctx, answer := tp.Tracer("test").Start(s.ctx, "user answers")
	if _, err := s.client.Answer(ctx, "tr", id, schema.ElicitResult{Action: schema.ActionAccept}, ""); err != nil {
		t.Fatal(err)
	}
	answer.End()
	s.completed("tr", 1)

	// The tool-executor's span ends after its handler acked, which may be
	// after the turn completed: wait for it (bounded) before checking.
	eventually(t, 5*time.Second, "the tool-executor's span", func() bool {
		return slices.ContainsFunc(spans.Ended(), func(sp sdktrace.ReadOnlySpan) bool {
			return strings.HasPrefix(sp.Name(), "process parley.tool.call.delete_entities")
		})
	})
	var resumed, toolAfter bool
	for _, sp := range spans.Ended() {
		name := sp.Name()
		switch {
		case name == "process parley.agent.run.resumed":
			resumed = true
			if sp.SpanContext().TraceID() != turnTrace {
				t.Errorf("the resume was handled in trace %s, want the turn's %s", sp.SpanContext().TraceID(), turnTrace)
			}
		case strings.HasPrefix(name, "process parley.tool.call.delete_entities"):
			toolAfter = true
			if sp.SpanContext().TraceID() != turnTrace {
				t.Errorf("the confirmed tool ran in trace %s, want the turn's %s", sp.SpanContext().TraceID(), turnTrace)
			}
		}
	}
	if !resumed || !toolAfter {
		t.Fatalf("spans missing (resume %v, tool %v); have %d spans", resumed, toolAfter, len(spans.Ended()))
	}
}
