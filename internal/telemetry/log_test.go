package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("worker", "agent")
	ctx, span := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "op")
	log.InfoContext(ctx, "hello")
	span.End()
	want := `"trace_id":"` + span.SpanContext().TraceID().String() + `"`
	if !strings.Contains(buf.String(), want) || !strings.Contains(buf.String(), `"worker":"agent"`) {
		t.Fatalf("log = %s, want %s and the worker", buf.String(), want)
	}
	buf.Reset()
	log.Info("no span")
	if strings.Contains(buf.String(), "trace_id") {
		t.Fatalf("trace_id without a span: %s", buf.String())
	}
}
