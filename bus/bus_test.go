package bus

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
)

// env is one embedded server with parley's streams and a Client on it.
type env struct {
	srv *bustest.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	c   *Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := bustest.NewServer(t)
	nc, js := srv.JetStream(t)
	c, err := New(nc, &Options{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := c.EnsureStreams(t.Context()); err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
	return &env{srv: srv, nc: nc, js: js, c: c}
}

// waitFor polls cond every 10ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func runRequested(t *testing.T, run string) *event.Event {
	t.Helper()
	e, err := events.New(events.SourceProcessor, events.TypeRunRequested, "thread-1",
		events.RunRequested{RunID: run, TurnID: "turn-1", Thread: "thread-1", Agent: "default"})
	if err != nil {
		t.Fatalf("events.New: %v", err)
	}
	return e
}

// consume runs c.Consume in the background; stop cancels it and returns
// Consume's result, failing the test if it does not return within 5s.
func (e *env) consume(t *testing.T, spec ConsumerSpec, h Handler) (stop func() error, done <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ch := make(chan struct{})
	var err error
	go func() {
		defer close(ch)
		err = e.c.Consume(ctx, spec, h)
	}()
	stopped := false
	stop = func() error {
		cancel()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("Consume did not return within 5s of cancel")
		}
		stopped = true
		return err
	}
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-ch
		}
	})
	return stop, ch
}

func agentSpec() ConsumerSpec {
	return ConsumerSpec{
		Stream: events.StreamAgent, Durable: "agent",
		FilterSubjects: []string{events.SubjectRunRequested},
		AckWait:        time.Second, MaxDeliver: 3,
		Backoff: []time.Duration{100 * time.Millisecond, 300 * time.Millisecond},
	}
}

func (e *env) streamMsg(t *testing.T, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	t.Helper()
	s, err := e.js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatalf("Stream %s: %v", stream, err)
	}
	return s.GetMsg(t.Context(), seq)
}

// consumerInfo returns the durable's info, or a zero one if it does not
// exist yet.
func (e *env) consumerInfo(t *testing.T, stream, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	cons, err := e.js.Consumer(t.Context(), stream, durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return &jetstream.ConsumerInfo{}
	}
	if err != nil {
		t.Fatalf("Consumer %s: %v", durable, err)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info
}

// deadLetter waits for the dead-letter event on parley.dlq.<stream>.<consumer>
// and returns it with its decoded data.
func (e *env) deadLetter(t *testing.T, stream, consumer string) (*event.Event, events.DeadLetter) {
	t.Helper()
	s, err := e.js.Stream(t.Context(), events.StreamDeadLetter)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	var raw *jetstream.RawStreamMsg
	waitFor(t, 3*time.Second, "the dead-letter event", func() bool {
		raw, err = s.GetLastMsgForSubject(t.Context(), events.DeadLetterSubject(stream, consumer))
		return err == nil
	})
	ev, err := events.Decode(events.Header(raw.Header), raw.Data)
	if err != nil {
		t.Fatalf("decoding dead-letter event: %v", err)
	}
	if events.TypeOf(ev) != events.TypeDeadLettered {
		t.Errorf("dead-letter event type = %q, want %q", ev.Type(), events.TypeDeadLettered)
	}
	dl, err := events.Data[events.DeadLetter](ev)
	if err != nil {
		t.Fatalf("dead-letter data: %v", err)
	}
	return ev, dl
}

func TestPublishSetsMsgIDAndDeduplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := runRequested(t, "r1")
	ack, err := e.c.Publish(t.Context(), events.SubjectRunRequested, ev)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if ack.Duplicate || ack.Stream != events.StreamAgent {
		t.Errorf("first PubAck = %+v, want stream %s, not duplicate", ack, events.StreamAgent)
	}
	raw, err := e.streamMsg(t, events.StreamAgent, ack.Sequence)
	if err != nil {
		t.Fatalf("GetMsg: %v", err)
	}
	if got := raw.Header.Get(jetstream.MsgIDHeader); got != ev.ID() {
		t.Errorf("Nats-Msg-Id = %q, want event id %q", got, ev.ID())
	}
	if got := raw.Header.Get("ce-id"); got != ev.ID() {
		t.Errorf("ce-id = %q, want %q", got, ev.ID())
	}

	ack2, err := e.c.Publish(t.Context(), events.SubjectRunRequested, ev)
	if err != nil {
		t.Fatalf("second Publish: %v", err)
	}
	if !ack2.Duplicate || ack2.Sequence != ack.Sequence {
		t.Errorf("second PubAck = %+v, want Duplicate of sequence %d", ack2, ack.Sequence)
	}
	s, _ := e.js.Stream(t.Context(), events.StreamAgent)
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("stream holds %d messages, want 1", info.State.Msgs)
	}

	// Another event (other id) is not a duplicate.
	ack3, err := e.c.Publish(t.Context(), events.SubjectRunRequested, runRequested(t, "r2"))
	if err != nil || ack3.Duplicate {
		t.Errorf("Publish(other event) = %+v, %v, want a new message", ack3, err)
	}
}

func TestPublishRejectsInvalidEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := event.New()
	ev.SetType("t")
	if _, err := e.c.Publish(t.Context(), events.SubjectRunRequested, &ev); err == nil {
		t.Fatal("Publish(event without id and source) succeeded")
	}
}

var (
	tracingOnce sync.Once
	recorder    *tracetest.SpanRecorder
	testTP      *sdktrace.TracerProvider
)

// setupTracing installs (once per process) a tracer provider recording
// spans and the W3C trace-context propagator as the OTel globals.
func setupTracing() (*tracetest.SpanRecorder, trace.Tracer) {
	tracingOnce.Do(func() {
		recorder = tracetest.NewSpanRecorder()
		testTP = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
		otel.SetTracerProvider(testTP)
		otel.SetTextMapPropagator(propagation.TraceContext{})
	})
	return recorder, testTP.Tracer("bus_test")
}

func endedSpans(rec *tracetest.SpanRecorder, tid trace.TraceID) map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == tid {
			out[s.Name()] = s
		}
	}
	return out
}

func TestTraceContextPropagatesThroughPublishAndConsume(t *testing.T) {
	t.Parallel()
	rec, tracer := setupTracing()
	e := newEnv(t)
	ctx, root := tracer.Start(t.Context(), "root")
	tid := root.SpanContext().TraceID()
	ack, err := e.c.Publish(ctx, events.SubjectRunRequested, runRequested(t, "r1"))
	root.End()
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}

	raw, err := e.streamMsg(t, events.StreamAgent, ack.Sequence)
	if err != nil {
		t.Fatalf("GetMsg: %v", err)
	}
	tp, ok := raw.Header["traceparent"]
	if !ok || len(tp) != 1 {
		t.Fatalf("headers %v: want exactly one lowercase traceparent", raw.Header)
	}
	for name := range raw.Header {
		if strings.EqualFold(name, "traceparent") && name != "traceparent" {
			t.Errorf("header %q: traceparent must be written lowercase", name)
		}
	}
	if !strings.Contains(tp[0], tid.String()) {
		t.Errorf("traceparent = %q, want trace id %s", tp[0], tid)
	}

	got := make(chan trace.SpanContext, 1)
	stop, _ := e.consume(t, agentSpec(), func(ctx context.Context, d *Delivery) error {
		got <- trace.SpanContextFromContext(ctx)
		return nil
	})
	var sc trace.SpanContext
	select {
	case sc = <-got:
	case <-time.After(3 * time.Second):
		t.Fatal("handler not called")
	}
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if sc.TraceID() != tid {
		t.Errorf("handler ctx trace id = %s, want %s", sc.TraceID(), tid)
	}

	spans := endedSpans(rec, tid)
	send, ok := spans["send "+events.SubjectRunRequested]
	if !ok {
		t.Fatalf("no send span in trace; spans: %v", spans)
	}
	process, ok := spans["process "+events.SubjectRunRequested]
	if !ok {
		t.Fatalf("no process span in trace; spans: %v", spans)
	}
	if process.Parent().SpanID() != send.SpanContext().SpanID() {
		t.Errorf("process span parent = %s, want the send span %s", process.Parent().SpanID(), send.SpanContext().SpanID())
	}
	if process.SpanKind() != trace.SpanKindConsumer || send.SpanKind() != trace.SpanKindProducer {
		t.Errorf("span kinds = send %v, process %v, want producer and consumer", send.SpanKind(), process.SpanKind())
	}
	if sc.SpanID() != process.SpanContext().SpanID() {
		t.Errorf("handler ctx span = %s, want the process span %s", sc.SpanID(), process.SpanContext().SpanID())
	}
	// Recording spans carry the messaging attributes (set after start,
	// only when the span records).
	for span, want := range map[sdktrace.ReadOnlySpan]map[string]string{
		send: {"messaging.system": "nats", "messaging.operation.type": "send",
			"messaging.destination.name": events.SubjectRunRequested, "cloudevents.event_type": string(events.TypeRunRequested)},
		process: {"messaging.system": "nats", "messaging.operation.type": "process",
			"messaging.consumer.group.name": agentSpec().Durable, "cloudevents.event_type": string(events.TypeRunRequested)},
	} {
		got := map[string]string{}
		for _, kv := range span.Attributes() {
			got[string(kv.Key)] = kv.Value.Emit()
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("span %s: %s = %q, want %q", span.Name(), k, got[k], v)
			}
		}
	}
}

func TestHeaderCarrierKeepsCase(t *testing.T) {
	h := nats.Header{}
	c := HeaderCarrier(h)
	c.Set("traceparent", "v1")
	c.Set("tracestate", "k=v")
	if got := h["traceparent"]; len(got) != 1 || got[0] != "v1" {
		t.Errorf(`h["traceparent"] = %q, want [v1]`, got)
	}
	if _, ok := h["Traceparent"]; ok {
		t.Error("carrier canonicalised the header name")
	}
	if c.Get("traceparent") != "v1" || c.Get("Traceparent") != "" {
		t.Errorf("Get is not case-sensitive: %q %q", c.Get("traceparent"), c.Get("Traceparent"))
	}
	if keys := c.Keys(); len(keys) != 2 {
		t.Errorf("Keys = %v, want 2 keys", keys)
	}
	// extract with no header leaves ctx alone.
	ctx := context.Background()
	if got := extract(ctx, nil); got != ctx {
		t.Error("extract(nil header) returned another context")
	}
}

func TestConsumeAcksOnNil(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := runRequested(t, "r1")
	ack, err := e.c.Publish(t.Context(), events.SubjectRunRequested, ev)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	deliveries := make(chan *Delivery, 10)
	stop, _ := e.consume(t, agentSpec(), func(_ context.Context, d *Delivery) error {
		deliveries <- d
		return nil
	})
	var d *Delivery
	select {
	case d = <-deliveries:
	case <-time.After(3 * time.Second):
		t.Fatal("handler not called")
	}
	if d.Event == nil || d.Event.ID() != ev.ID() || d.Subject != events.SubjectRunRequested ||
		d.NumDelivered != 1 || d.StreamSeq != ack.Sequence || d.Msg == nil {
		t.Errorf("Delivery = %+v, want event %s on %s, delivery 1, seq %d", d, ev.ID(), events.SubjectRunRequested, ack.Sequence)
	}
	waitFor(t, 2*time.Second, "the ack", func() bool {
		info := e.consumerInfo(t, events.StreamAgent, "agent")
		return info.NumAckPending == 0 && info.AckFloor.Stream == ack.Sequence
	})
	// Work queue: the acked message is gone.
	if _, err := e.streamMsg(t, events.StreamAgent, ack.Sequence); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("GetMsg(acked) error = %v, want ErrMsgNotFound", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if n := len(deliveries); n != 0 {
		t.Errorf("%d extra deliveries after the ack", n)
	}
}

type deadLettered struct {
	d      *Delivery
	reason error
}

func TestConsumeRetriesWithBackoffThenDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := runRequested(t, "r1")
	ack, err := e.c.Publish(t.Context(), events.SubjectRunRequested, ev)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	type call struct {
		n  uint64
		at time.Time
	}
	var mu sync.Mutex
	var calls []call
	dls := make(chan deadLettered, 10)
	spec := agentSpec()
	spec.OnDeadLetter = func(_ context.Context, d *Delivery, reason error) { dls <- deadLettered{d, reason} }
	stop, _ := e.consume(t, spec, func(_ context.Context, d *Delivery) error {
		mu.Lock()
		calls = append(calls, call{d.NumDelivered, time.Now()})
		mu.Unlock()
		return errors.New("model unavailable")
	})
	var got deadLettered
	select {
	case got = <-dls:
	case <-time.After(3 * time.Second):
		t.Fatal("OnDeadLetter not called")
	}
	if got.reason == nil || got.reason.Error() != "model unavailable" {
		t.Errorf("OnDeadLetter reason = %v, want model unavailable", got.reason)
	}
	if got.d.Event == nil || got.d.Event.ID() != ev.ID() || got.d.NumDelivered != 3 {
		t.Errorf("OnDeadLetter delivery = %+v, want event %s at delivery 3", got.d, ev.ID())
	}

	mu.Lock()
	if len(calls) != 3 {
		t.Fatalf("handler called %d times, want 3 (MaxDeliver)", len(calls))
	}
	for i, c := range calls {
		if c.n != uint64(i+1) {
			t.Errorf("call %d NumDelivered = %d, want %d", i, c.n, i+1)
		}
	}
	const slack = 20 * time.Millisecond
	if gap := calls[1].at.Sub(calls[0].at); gap < spec.Backoff[0]-slack || gap > time.Second {
		t.Errorf("first retry after %v, want about %v", gap, spec.Backoff[0])
	}
	if gap := calls[2].at.Sub(calls[1].at); gap < spec.Backoff[1]-slack || gap > time.Second {
		t.Errorf("second retry after %v, want about %v", gap, spec.Backoff[1])
	}
	mu.Unlock()

	dlEv, dl := e.deadLetter(t, events.StreamAgent, "agent")
	if dlEv.Subject() != "thread-1" {
		t.Errorf("dead-letter event subject = %q, want the thread", dlEv.Subject())
	}
	if dl.Reason != "model unavailable" || dl.Stream != events.StreamAgent || dl.Consumer != "agent" ||
		dl.Subject != events.SubjectRunRequested || dl.StreamSeq != ack.Sequence || dl.NumDelivered != 3 {
		t.Errorf("DeadLetter = %+v", dl)
	}
	h, body, _ := events.Encode(ev)
	if got := dl.Headers["ce-id"]; len(got) != 1 || got[0] != h["ce-id"][0] {
		t.Errorf("DeadLetter headers %v lack the original ce-id %s", dl.Headers, ev.ID())
	}
	if got := dl.Headers[jetstream.MsgIDHeader]; len(got) != 1 || got[0] != ev.ID() {
		t.Errorf("DeadLetter headers %v lack Nats-Msg-Id", dl.Headers)
	}
	if string(dl.Body) != string(body) {
		t.Errorf("DeadLetter body = %s, want %s", dl.Body, body)
	}
	orig, err := events.Decode(events.Header(dl.Headers), dl.Body)
	if err != nil || orig.ID() != ev.ID() {
		t.Errorf("original event from the dead letter = %v, %v", orig, err)
	}

	// Terminated: no further delivery, and gone from the work queue.
	waitFor(t, 2*time.Second, "the message to leave the work queue", func() bool {
		_, err := e.streamMsg(t, events.StreamAgent, ack.Sequence)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 3 {
		t.Errorf("handler called %d times after dead-lettering, want 3", len(calls))
	}
	if len(dls) != 0 {
		t.Errorf("OnDeadLetter called %d more times", len(dls))
	}
}

func TestConsumePermanentDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := runRequested(t, "r1")
	if _, err := e.c.Publish(t.Context(), events.SubjectRunRequested, ev); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	var mu sync.Mutex
	calls := 0
	dls := make(chan deadLettered, 10)
	spec := agentSpec()
	spec.MaxDeliver = 5
	spec.OnDeadLetter = func(_ context.Context, d *Delivery, reason error) { dls <- deadLettered{d, reason} }
	cause := errors.New("unknown agent")
	stop, _ := e.consume(t, spec, func(context.Context, *Delivery) error {
		mu.Lock()
		calls++
		mu.Unlock()
		return Permanent(cause)
	})
	var got deadLettered
	select {
	case got = <-dls:
	case <-time.After(3 * time.Second):
		t.Fatal("OnDeadLetter not called")
	}
	if !IsPermanent(got.reason) || !errors.Is(got.reason, cause) {
		t.Errorf("OnDeadLetter reason = %v, want Permanent(%v)", got.reason, cause)
	}
	if got.d.NumDelivered != 1 {
		t.Errorf("dead-lettered at delivery %d, want 1", got.d.NumDelivered)
	}
	_, dl := e.deadLetter(t, events.StreamAgent, "agent")
	if dl.NumDelivered != 1 || dl.Reason != "unknown agent" {
		t.Errorf("DeadLetter = %+v, want delivery 1, reason unknown agent", dl)
	}
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("handler called %d times, want 1", calls)
	}
}

func TestPermanent(t *testing.T) {
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	cause := errors.New("x")
	if err := Permanent(cause); !IsPermanent(err) || !errors.Is(err, cause) || err.Error() != "x" {
		t.Errorf("Permanent(x) = %v", err)
	}
	if IsPermanent(cause) {
		t.Error("IsPermanent(plain error) = true")
	}
	if wrapped := errors.Join(errors.New("ctx"), Permanent(cause)); !IsPermanent(wrapped) {
		t.Error("IsPermanent(wrapped Permanent) = false")
	}
}

func TestConsumeUndecodableIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ack, err := e.js.Publish(t.Context(), events.SubjectRunRequested, []byte("not a cloudevent"))
	if err != nil {
		t.Fatalf("raw Publish: %v", err)
	}
	dls := make(chan deadLettered, 10)
	spec := agentSpec()
	spec.OnDeadLetter = func(_ context.Context, d *Delivery, reason error) { dls <- deadLettered{d, reason} }
	called := make(chan struct{}, 10)
	stop, _ := e.consume(t, spec, func(context.Context, *Delivery) error {
		called <- struct{}{}
		return nil
	})
	var got deadLettered
	select {
	case got = <-dls:
	case <-time.After(3 * time.Second):
		t.Fatal("OnDeadLetter not called")
	}
	if got.d.Event != nil {
		t.Errorf("Delivery.Event = %v, want nil for an undecodable message", got.d.Event)
	}
	if got.d.NumDelivered != 1 || got.d.StreamSeq != ack.Sequence {
		t.Errorf("Delivery = %+v, want delivery 1 of seq %d", got.d, ack.Sequence)
	}
	if msg := got.reason.Error(); !strings.Contains(msg, "undecodable") || !strings.Contains(msg, "ce-specversion") {
		t.Errorf("reason = %q, want it to say undecodable and name ce-specversion", msg)
	}
	dlEv, dl := e.deadLetter(t, events.StreamAgent, "agent")
	if string(dl.Body) != "not a cloudevent" || dl.NumDelivered != 1 || dl.StreamSeq != ack.Sequence {
		t.Errorf("DeadLetter = %+v", dl)
	}
	if dlEv.Subject() != "" {
		t.Errorf("dead-letter subject = %q, want none (no thread known)", dlEv.Subject())
	}
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if len(called) != 0 {
		t.Error("handler was called for an undecodable message")
	}
}

func TestConsumeConcurrencyBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n, limit = 12, 3
	for i := range n {
		if _, err := e.c.Publish(t.Context(), events.SubjectRunRequested, runRequested(t, string(rune('a'+i)))); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	var mu sync.Mutex
	inFlight, maxInFlight, handled := 0, 0, 0
	spec := agentSpec()
	spec.Concurrency = limit
	stop, _ := e.consume(t, spec, func(context.Context, *Delivery) error {
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		mu.Unlock()
		time.Sleep(100 * time.Millisecond) // the work
		mu.Lock()
		inFlight--
		handled++
		mu.Unlock()
		return nil
	})
	waitFor(t, 5*time.Second, "all messages handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled == n
	})
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxInFlight != limit {
		t.Errorf("max handlers in flight = %d, want %d (Concurrency)", maxInFlight, limit)
	}
}

// TestConsumeShutdown cancels Consume while a handler runs and a second
// message waits in the client's buffer: Consume waits for the running
// handler (whose message is then acked), starts no new one, and the
// waiting message is redelivered to the next consumer.
func TestConsumeShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first, second := runRequested(t, "first"), runRequested(t, "second")
	ackA, err := e.c.Publish(t.Context(), events.SubjectRunRequested, first)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	started := make(chan struct{})
	release := make(chan struct{})
	var mu sync.Mutex
	var handled []string
	spec := agentSpec()
	spec.Concurrency = 1
	stop, done := e.consume(t, spec, func(_ context.Context, d *Delivery) error {
		mu.Lock()
		handled = append(handled, d.Event.ID())
		mu.Unlock()
		if d.Event.ID() == first.ID() {
			close(started)
			<-release
		}
		return nil
	})
	select {
	case <-started:
	case <-time.After(3 * time.Second):
		t.Fatal("first handler not started")
	}
	ackB, err := e.c.Publish(t.Context(), events.SubjectRunRequested, second)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	waitFor(t, 2*time.Second, "the second message to be delivered to the client", func() bool {
		return e.consumerInfo(t, events.StreamAgent, "agent").NumAckPending == 2
	})

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case <-done:
		t.Fatal("Consume returned while a handler was running")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Consume: %v", err)
	}

	mu.Lock()
	if len(handled) != 1 || handled[0] != first.ID() {
		t.Errorf("handled %v, want only the first event (no new handler after shutdown)", handled)
	}
	mu.Unlock()
	// The ack is asynchronous: it reaches the server shortly after.
	waitFor(t, time.Second, "the in-flight message to be acked", func() bool {
		_, err := e.streamMsg(t, events.StreamAgent, ackA.Sequence)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
	if _, err := e.streamMsg(t, events.StreamAgent, ackB.Sequence); err != nil {
		t.Errorf("waiting message after shutdown: GetMsg error = %v, want it still stored", err)
	}

	// The next consumer gets the waiting message.
	got := make(chan string, 10)
	stop2, _ := e.consume(t, spec, func(_ context.Context, d *Delivery) error {
		got <- d.Event.ID()
		return nil
	})
	select {
	case id := <-got:
		if id != second.ID() {
			t.Errorf("next consumer got %s, want the second event %s", id, second.ID())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("waiting message not redelivered")
	}
	if err := stop2(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
}

func TestConsumeHeartbeatsLongHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.c.Publish(t.Context(), events.SubjectRunRequested, runRequested(t, "slow")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	var mu sync.Mutex
	calls := 0
	spec := agentSpec()
	spec.AckWait = 300 * time.Millisecond
	spec.Concurrency = 2
	stop, _ := e.consume(t, spec, func(context.Context, *Delivery) error {
		mu.Lock()
		calls++
		mu.Unlock()
		time.Sleep(1200 * time.Millisecond) // 4x AckWait
		return nil
	})
	waitFor(t, 3*time.Second, "the handler to finish", func() bool {
		info := e.consumerInfo(t, events.StreamAgent, "agent")
		return info.AckFloor.Stream == 1
	})
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("handler called %d times, want 1 (InProgress must prevent redelivery)", calls)
	}
}

func TestConsumeMissingStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	err := e.c.Consume(t.Context(), ConsumerSpec{Stream: "NOPE", Durable: "x"}, func(context.Context, *Delivery) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "NOPE") {
		t.Errorf("Consume(missing stream) = %v, want an error naming the stream", err)
	}
}

func preExecEvent(t *testing.T) *event.Event {
	t.Helper()
	e, err := events.New(events.SourceAgent, events.TypePreExecuteRequested, "thread-1",
		events.PreExecuteRequest{Agent: "default", Thread: "thread-1", RunID: "r1"})
	if err != nil {
		t.Fatalf("events.New: %v", err)
	}
	return e
}

func TestRequestServeRoundTrip(t *testing.T) {
	t.Parallel()
	_, tracer := setupTracing()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	traces := make(chan trace.TraceID, 10)
	ep := Endpoint{Service: "parley-gate", Version: "1.0.0", Name: "pre_execute", Subject: "parley.tool.pre_execute.>"}
	go func() {
		served <- e.c.Serve(ctx, ep, func(ctx context.Context, req *event.Event) (*event.Event, error) {
			traces <- trace.SpanContextFromContext(ctx).TraceID()
			if strings.HasSuffix(req.Type(), "requested") && req.Subject() == "broken" {
				return nil, errors.New("policy store down")
			}
			return events.NewWithID(events.DerivedID("decided", req.ID()), events.SourceGate,
				events.TypePreExecuteDecided, req.Subject(), events.Decision{Decision: events.DecisionAllow, Reason: req.ID()})
		})
	}()

	subject := events.PreExecuteSubject("default", "search")
	req := preExecEvent(t)
	var reply *event.Event
	waitFor(t, 3*time.Second, "the service to answer", func() bool {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		var err error
		reply, err = e.c.Request(rctx, subject, req)
		if err != nil && !IsNoResponders(err) {
			t.Fatalf("Request: %v", err)
		}
		return err == nil
	})
	if events.TypeOf(reply) != events.TypePreExecuteDecided || reply.ID() != events.DerivedID("decided", req.ID()) ||
		reply.Subject() != "thread-1" {
		t.Errorf("reply = %v", reply)
	}
	d, err := events.Data[events.Decision](reply)
	if err != nil || d.Decision != events.DecisionAllow || d.Reason != req.ID() {
		t.Errorf("reply data = %+v, %v", d, err)
	}

	// The server handler runs in the caller's trace.
	for len(traces) > 0 {
		<-traces
	}
	tctx, root := tracer.Start(ctx, "root")
	rctx, rcancel := context.WithTimeout(tctx, 2*time.Second)
	if _, err := e.c.Request(rctx, subject, req); err != nil {
		t.Fatalf("Request: %v", err)
	}
	rcancel()
	root.End()
	if got := <-traces; got != root.SpanContext().TraceID() {
		t.Errorf("server handler trace id = %s, want the caller's %s", got, root.SpanContext().TraceID())
	}

	// A handler error comes back as a ServiceError 500.
	broken := preExecEvent(t)
	broken.SetSubject("broken")
	rctx, rcancel = context.WithTimeout(ctx, 2*time.Second)
	_, err = e.c.Request(rctx, subject, broken)
	rcancel()
	var se *ServiceError
	if !errors.As(err, &se) || se.Code != "500" || !strings.Contains(se.Description, "policy store down") {
		t.Errorf("Request(handler fails) error = %v, want ServiceError 500 with the handler's error", err)
	}

	// An undecodable request gets a micro error 400 naming the attribute.
	msg, err := e.nc.RequestMsg(&nats.Msg{Subject: subject, Data: []byte("{}"), Header: nats.Header{"ce-specversion": {"1.0"}}}, 2*time.Second)
	if err != nil {
		t.Fatalf("raw request: %v", err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "400" {
		t.Errorf("Nats-Service-Error-Code = %q, want 400", code)
	}
	if desc := msg.Header.Get("Nats-Service-Error"); !strings.Contains(desc, "ce-id") {
		t.Errorf("Nats-Service-Error = %q, want it to name ce-id", desc)
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil after cancel", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	rctx, rcancel = context.WithTimeout(t.Context(), 2*time.Second)
	defer rcancel()
	if _, err := e.c.Request(rctx, subject, req); !IsNoResponders(err) {
		t.Errorf("Request after Serve stopped = %v, want no responders", err)
	}
}

func TestRequestNoResponders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := e.c.Request(ctx, events.PreExecuteSubject("default", "nobody"), preExecEvent(t))
	if !IsNoResponders(err) || !errors.Is(err, ErrNoResponders) {
		t.Fatalf("Request(no listener) error = %v, want no responders", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("no-responders took %v; it should fail fast, not time out", time.Since(start))
	}
	if IsNoResponders(context.DeadlineExceeded) {
		t.Error("IsNoResponders(DeadlineExceeded) = true")
	}
}

func TestServeRejectsBadEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	err := e.c.Serve(t.Context(), Endpoint{Service: "bad name!", Version: "1.0.0", Name: "x", Subject: "x"},
		func(context.Context, *event.Event) (*event.Event, error) { return nil, nil })
	if err == nil {
		t.Error("Serve(invalid service name) = nil, want error")
	}
}

func TestTemplateOf(t *testing.T) {
	tests := map[string]string{
		"parley.chat.t-1.turn.requested": "parley.chat.{thread}.turn.requested",
		"parley.agent.run.requested":     "parley.agent.run.requested",
		"parley.chat.":                   "parley.chat.",
	}
	for in, want := range tests {
		if got := templateOf(in); got != want {
			t.Errorf("templateOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// RetryLater does not count as a failure: a handler that is not ready yet
// is asked again past MaxDeliver, and the message is handled, not
// dead-lettered.
func TestConsumeRetryLaterIsNotAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.c.Publish(t.Context(), events.SubjectRunRequested, runRequested(t, "r1")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	var mu sync.Mutex
	calls := 0
	handled := make(chan struct{})
	spec := agentSpec()
	spec.MaxDeliver = 2
	spec.OnDeadLetter = func(context.Context, *Delivery, error) { t.Error("dead-lettered a message that was only waiting") }
	stop, _ := e.consume(t, spec, func(context.Context, *Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls < 5 {
			return RetryLater(errors.New("an earlier message is not handled yet"), 20*time.Millisecond)
		}
		close(handled)
		return nil
	})
	select {
	case <-handled:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting message was not handled")
	}
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if info := e.consumerInfo(t, events.StreamAgent, "agent"); info.Config.MaxDeliver != MaxServerDeliver {
		t.Errorf("server MaxDeliver = %d, want %d", info.Config.MaxDeliver, MaxServerDeliver)
	}
}

// With OnUndecodable, an undecodable message goes to the worker (which
// refuses it with its own verdict) and is acked, not dead-lettered; an
// error from it is retried like a handler's.
func TestConsumeUndecodableToWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ack, err := e.js.PublishMsg(t.Context(), &nats.Msg{Subject: events.SubjectRunRequested,
		Header: nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"req%zz"}, "ce-source": {"/t"}, "ce-type": {"x"}},
		Data:   []byte("{}")})
	if err != nil {
		t.Fatalf("raw Publish: %v", err)
	}
	type call struct {
		d   *Delivery
		err error
	}
	calls := make(chan call, 10)
	spec := agentSpec()
	spec.OnDeadLetter = func(context.Context, *Delivery, error) { t.Error("dead-lettered") }
	spec.OnUndecodable = func(_ context.Context, d *Delivery, err error) error {
		calls <- call{d, err}
		if d.NumDelivered == 1 {
			return errors.New("not yet") // retried
		}
		return nil
	}
	stop, _ := e.consume(t, spec, func(context.Context, *Delivery) error {
		t.Error("handler called for an undecodable message")
		return nil
	})
	for n := 1; n <= 2; n++ {
		select {
		case c := <-calls:
			var ae *events.AttributeError
			if c.d.Event != nil || c.d.StreamSeq != ack.Sequence || c.d.NumDelivered != uint64(n) ||
				!errors.As(c.err, &ae) || ae.Header != "ce-id" {
				t.Fatalf("call %d: Delivery %+v, err %v; want seq %d, no event, an AttributeError naming ce-id", n, c.d, c.err, ack.Sequence)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("OnUndecodable call %d missing", n)
		}
	}
	waitFor(t, 3*time.Second, "the message acked", func() bool {
		return e.consumerInfo(t, events.StreamAgent, "agent").NumAckPending == 0
	})
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
}

// A duplicate PubAck is checked against what is stored. A
// message planted under the Nats-Msg-Id of another thread's derived event
// (another subject, type and thread) does not make Publish report the
// event stored: the error names both messages. A re-publish of the same
// event, even with a reworded body, is a plain duplicate.
func TestPublishDuplicateCheckedAgainstStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	real, err := events.NewWithID(events.DerivedID("turn.completed", "victim-turn"), events.SourceProcessor,
		events.TypeTurnCompleted, "victim", events.TurnCompleted{TurnID: "victim-turn"})
	if err != nil {
		t.Fatal(err)
	}
	planted := &nats.Msg{Subject: events.ChatSubject("attacker", events.ChatProgress), Data: []byte(`{}`),
		Header: nats.Header{"ce-type": {string(events.TypeProgress)}, "ce-subject": {"attacker"}, "ce-source": {"/evil"}}}
	if _, err := e.js.PublishMsg(t.Context(), planted, jetstream.WithMsgID(real.ID())); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.Publish(t.Context(), events.ChatSubject("victim", events.ChatTurnCompleted), real)
	var mm *DuplicateMismatchError
	if !errors.Is(err, ErrDuplicateMismatch) || !errors.As(err, &mm) {
		t.Fatalf("Publish over a planted duplicate = %v, want ErrDuplicateMismatch", err)
	}
	if !strings.Contains(mm.Published, "parley.chat.victim.turn.completed") || !strings.Contains(mm.Stored, "parley.chat.attacker.progress") {
		t.Errorf("mismatch = %+v, want both subjects named", mm)
	}

	// The same event again, its body reworded (a re-derived detail): a
	// duplicate, no error.
	same, _ := events.NewWithID(events.DerivedID("turn.failed", "t2"), events.SourceProcessor, events.TypeTurnFailed, "t2",
		events.TurnFailed{TurnID: "t2", Reason: "x", Detail: "after 1 attempt"})
	if _, err := e.c.Publish(t.Context(), events.ChatSubject("t2", events.ChatTurnFailed), same); err != nil {
		t.Fatal(err)
	}
	again, _ := events.NewWithID(same.ID(), events.SourceProcessor, events.TypeTurnFailed, "t2",
		events.TurnFailed{TurnID: "t2", Reason: "x", Detail: "after 2 attempts"})
	if ack, err := e.c.Publish(t.Context(), events.ChatSubject("t2", events.ChatTurnFailed), again); err != nil || !ack.Duplicate {
		t.Fatalf("re-publish of the same event = %+v, %v; want a duplicate ack", ack, err)
	}
}

// Every stream is bounded, work queues discard new
// messages (the publisher sees the error) and the histories their oldest.
func TestEveryStreamBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	want := map[string]jetstream.DiscardPolicy{
		events.StreamChat: jetstream.DiscardOld, events.StreamDeadLetter: jetstream.DiscardOld,
		events.StreamInput: jetstream.DiscardNew, events.StreamAgent: jetstream.DiscardNew,
		events.StreamRuns: jetstream.DiscardNew, events.StreamTools: jetstream.DiscardNew,
	}
	n := 0
	for name := range e.js.StreamNames(t.Context()).Name() {
		if strings.HasPrefix(name, "KV_") || strings.HasPrefix(name, "OBJ_") {
			continue
		}
		n++
		s, err := e.js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		if d, ok := want[name]; !ok || cfg.MaxBytes <= 0 || cfg.Discard != d {
			t.Errorf("stream %s: max_bytes %d, discard %v; want bounded, discard %v", name, cfg.MaxBytes, cfg.Discard, want[name])
		}
	}
	if n != len(want) {
		t.Errorf("%d streams, want %d", n, len(want))
	}
	// A full work queue refuses the publish; nothing is dropped.
	small, err := New(e.nc, &Options{Storage: jetstream.MemoryStorage, StreamMaxBytes: 4 << 20, PublishRetry: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := small.EnsureStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 300<<10)
	var perr error
	for i := range 10 {
		ev, _ := events.New(events.SourceAgent, events.TypeToolCallRequested, "t", map[string]any{"pad": big, "i": i})
		if _, perr = small.Publish(t.Context(), events.ToolCallSubject("x"), ev); perr != nil {
			break
		}
	}
	if perr == nil {
		t.Fatal("10 × 300 KiB into a 1 MiB work queue: no error")
	}
	t.Logf("full work queue: %v", perr)
}

// One thread's events on one subject (a flood of messages, refusals,
// deltas) evict that subject's oldest, not another thread's history:
// PARLEY_CHAT keeps at most ChatMaxMsgsPerSubject per subject.
func TestChatKeepsAtMostMaxMsgsPerSubject(t *testing.T) {
	e := newEnv(t)
	other := events.ChatSubject("victim", events.ChatElicitationRequested)
	if _, err := e.js.Publish(t.Context(), other, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	flood := events.ChatSubject("flood", events.ChatTurnRejected)
	refused := events.RefusedSubject("mallory", "victim", events.ChatElicitationRejected)
	for i := range ChatMaxMsgsPerSubject + 50 {
		for _, subj := range []string{flood, refused} {
			if _, err := e.js.PublishAsync(subj, []byte(strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishes not acknowledged")
	}
	st, err := e.js.Stream(t.Context(), events.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{flood, refused} {
		if got := info.State.Subjects[subj]; got != ChatMaxMsgsPerSubject {
			t.Errorf("%s holds %d events, want %d", subj, got, ChatMaxMsgsPerSubject)
		}
	}
	if got := info.State.Subjects[other]; got != 1 {
		t.Errorf("the other thread's %s holds %d events, want 1", other, got)
	}
}

// One principal's flood of one thread waits in PARLEY_INPUT at most
// InputMaxMsgsPerSubject deep: the next publish is refused (the stream is
// full for that subject), while another thread's input is still taken.
func TestInputBoundsOneThreadsBacklog(t *testing.T) {
	e := newEnv(t)
	flood := events.InputSubject("integrator", "flood", events.ChatTurnRequested)
	var refused error
	for i := range InputMaxMsgsPerSubject + 5 {
		if _, err := e.js.Publish(t.Context(), flood, []byte(strconv.Itoa(i))); err != nil {
			refused = err
			if i != InputMaxMsgsPerSubject {
				t.Fatalf("publish %d refused: %v; want the first refused at %d", i, err, InputMaxMsgsPerSubject)
			}
			break
		}
	}
	if refused == nil || !isStreamFull(refused) {
		t.Fatalf("the flood past %d: %v; want refused as a full stream", InputMaxMsgsPerSubject, refused)
	}
	if _, err := e.js.Publish(t.Context(), events.InputSubject("integrator", "other", events.ChatTurnRequested), []byte("x")); err != nil {
		t.Fatalf("another thread's input during the flood: %v", err)
	}
}

// A handler that waits for a later message (as a thread's message waits
// for an earlier one handled elsewhere) gives its place back with Yield:
// with Concurrency 1 the later message still runs, and the waiting
// handler goes on once it took a place again. Without Yield the one
// place stays taken and the later message never starts.
func TestConsumeYieldLetsOtherMessagesRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"waiter", "other"} {
		if _, err := e.c.Publish(t.Context(), events.SubjectRunRequested, runRequested(t, id)); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	otherDone := make(chan struct{})
	var mu sync.Mutex
	var order []string
	spec := agentSpec()
	spec.Concurrency = 1
	spec.AckWait = 10 * time.Second
	stop, _ := e.consume(t, spec, func(ctx context.Context, d *Delivery) error {
		var in events.RunRequested
		if err := json.Unmarshal(d.Event.Data(), &in); err != nil {
			return Permanent(err)
		}
		if in.RunID == "waiter" {
			reclaim := Yield(ctx)
			select {
			case <-otherDone:
			case <-time.After(5 * time.Second):
			}
			if err := reclaim(ctx); err != nil {
				return err
			}
		} else {
			close(otherDone)
		}
		mu.Lock()
		order = append(order, in.RunID)
		mu.Unlock()
		return nil
	})
	waitFor(t, 10*time.Second, "both messages handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 2
	})
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if want := []string{"other", "waiter"}; !slices.Equal(order, want) {
		t.Errorf("handled %v, want %v (the waiter gave its place to the other)", order, want)
	}
}
