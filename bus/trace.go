package bus

import (
	"context"
	"reflect"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// HeaderCarrier adapts a nats.Header to OpenTelemetry's TextMapCarrier
// without canonicalising names: "traceparent" stays lowercase, as other
// languages' clients expect (propagation.HeaderCarrier would write
// "Traceparent", which nats.Header.Get does not find).
type HeaderCarrier nats.Header

// Get returns the first value of key (case-sensitive).
func (c HeaderCarrier) Get(key string) string {
	if vs := c[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Set replaces key's values with value.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	ks := make([]string, 0, len(c))
	for k := range c {
		ks = append(ks, k)
	}
	return ks
}

const instrumentationName = "github.com/parley-dev/parley/bus"

// tracer returns the bus's tracer from the global tracer provider,
// looked up again only when the provider was replaced
// (otel.SetTracerProvider), not on every message.
func tracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if !reflect.TypeOf(tp).Comparable() {
		return tp.Tracer(instrumentationName)
	}
	if c := cachedTracer.Load(); c != nil && c.tp == tp {
		return c.t
	}
	t := tp.Tracer(instrumentationName)
	cachedTracer.Store(&providerTracer{tp: tp, t: t})
	return t
}

// providerTracer is a tracer and the provider it came from.
type providerTracer struct {
	tp trace.TracerProvider
	t  trace.Tracer
}

var cachedTracer atomic.Pointer[providerTracer]

func propagator() propagation.TextMapPropagator { return otel.GetTextMapPropagator() }

// Messaging semantic-convention attribute keys (OpenTelemetry semconv
// messaging spans; "nats" is a custom messaging.system value).
var (
	attrSystem      = attribute.Key("messaging.system").String("nats")
	keyOperation    = attribute.Key("messaging.operation.name")
	keyOpType       = attribute.Key("messaging.operation.type")
	keyDestination  = attribute.Key("messaging.destination.name")
	keyMessageID    = attribute.Key("messaging.message.id")
	keyConversation = attribute.Key("messaging.message.conversation_id")
	keyConsumer     = attribute.Key("messaging.consumer.group.name")
	keyCEType       = attribute.Key("cloudevents.event_type")
	keyCEID         = attribute.Key("cloudevents.event_id")

	attrSend        = keyOperation.String("send")
	attrSendType    = keyOpType.String("send")
	attrProcess     = keyOperation.String("process")
	attrProcessType = keyOpType.String("process")
)

// Span attributes are set once a span is started, and only when it
// records (sampled in, or recording for a processor): a span the sampler
// dropped, or the no-op tracer of a process without a tracer provider,
// costs no attribute values. A sampler therefore decides on the span's
// name and kind (and its parent), not on these attributes.

// inject writes ctx's trace context into h.
func inject(ctx context.Context, h nats.Header) {
	propagator().Inject(ctx, HeaderCarrier(h))
}

// extract reads a trace context from h into ctx.
func extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator().Extract(ctx, HeaderCarrier(h))
}

// TraceParent returns ctx's span context as a W3C traceparent string ("" if
// ctx carries no valid span), for storing a turn's starting trace (e.g. in
// a paused turn or the CloudEvents distributed-tracing extension).
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceParent returns ctx with a span that continues the trace of the
// stored traceparent tp and links to ctx's own span, so work resumed later
// (an answer after a pause) joins the turn's trace. It returns ctx
// unchanged when tp is empty or invalid. end must be called.
func WithTraceParent(ctx context.Context, tp, name string) (_ context.Context, end func()) {
	if tp == "" {
		return ctx, func() {}
	}
	parent := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	psc := trace.SpanContextFromContext(parent)
	if !psc.IsValid() {
		return ctx, func() {}
	}
	link := trace.LinkFromContext(ctx)
	nctx, span := tracer().Start(trace.ContextWithRemoteSpanContext(ctx, psc), name, trace.WithLinks(link),
		trace.WithSpanKind(trace.SpanKindInternal))
	return nctx, func() { span.End() }
}
