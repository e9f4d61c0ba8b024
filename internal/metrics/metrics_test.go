package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
)

// promScrape installs a provider with a Prometheus exporter and returns a
// function that scrapes it as text.
func promScrape(t *testing.T) func() string {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	if err := Use(mp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Use(noop.NewMeterProvider()) })
	return func() string {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
}

func mustEvent(t *testing.T, typ events.Type, data any) *event.Event {
	t.Helper()
	e, err := events.New("/test", typ, "th", data)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

type fakeInfo struct {
	info *jetstream.ConsumerInfo
	err  error
}

func (f *fakeInfo) Info(context.Context) (*jetstream.ConsumerInfo, error) { return f.info, f.err }

// recordAll records every instrument once.
func recordAll(t *testing.T) (stop func()) {
	t.Helper()
	ctx := context.Background()
	for _, typ := range []events.Type{events.TypeRunRequested, events.TypeTurnCompleted, events.TypeTurnPaused,
		events.TypeElicitationRequested, events.TypeElicitationExpired, events.TypeElicitationCancelled} {
		Published(ctx, mustEvent(t, typ, map[string]string{}), false)
	}
	Published(ctx, mustEvent(t, events.TypeTurnFailed, events.TurnFailed{Reason: "agent_failed"}), false)
	Published(ctx, mustEvent(t, events.TypeTurnRejected, events.TurnRejected{Reason: "invalid_event"}), false)
	Published(ctx, mustEvent(t, events.TypeElicitationRejected, events.ElicitationRejected{Reason: "invalid_content"}), false)
	Answered(ctx, "accept")
	PolicyDecision(ctx, "confirm", "parley-gate")
	ToolCall(ctx, "delete_entities", 30*time.Millisecond, nil, false, false)
	s, err := model.LoadScripted("")
	if err != nil {
		t.Fatal(err)
	}
	ModelCall(ctx, s, time.Now(), model.Response{Model: "m", Usage: &model.Usage{InputTokens: 10, OutputTokens: 3}}, nil)
	Processed(ctx, "processor-chat", string(events.TypeTurnRequested), OutcomeAck, 2, time.Millisecond)
	DeadLettered(ctx, "processor-chat")
	prev := SetConsumerPollInterval(10 * time.Millisecond)
	t.Cleanup(func() { SetConsumerPollInterval(prev) })
	w := WatchConsumer(ctx, nil, "PARLEY_CHAT", "processor-chat")
	w.Consuming(&fakeInfo{info: &jetstream.ConsumerInfo{NumPending: 4, NumAckPending: 2}})
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cs := Consumers(); len(cs) == 1 && cs[0].Polled {
			break
		}
	}
	return w.Stop
}

func TestPrometheusNames(t *testing.T) {
	scrape := promScrape(t)
	defer recordAll(t)()
	out := scrape()
	for _, want := range []string{
		`parley_turns_started_total{`,
		`parley_turns_failed_total{error_type="agent_failed"`,
		`parley_turns_rejected_total{error_type="invalid_event"`,
		`parley_elicitations_rejected_total{error_type="invalid_content"`,
		`parley_elicitations_answered_total{otel_scope_name="github.com/parley-dev/parley",otel_scope_schema_url="",otel_scope_version="",parley_elicitation_action="accept"}`,
		`parley_policy_decisions_total{`,
		`parley_tool_call_duration_seconds_bucket{gen_ai_tool_name="delete_entities"`,
		`gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="chat",gen_ai_provider_name="parley.scripted",gen_ai_response_model="m"`,
		`gen_ai_client_token_usage_sum{gen_ai_operation_name="chat",gen_ai_provider_name="parley.scripted",gen_ai_response_model="m",gen_ai_token_type="input"`,
		`messaging_process_duration_seconds_count{cloudevents_event_type="dev.parley.turn.requested",messaging_consumer_group_name="processor-chat",messaging_operation_name="process",messaging_system="nats"`,
		`parley_messaging_redeliveries_total{`,
		`parley_messaging_dead_letters_total{`,
		`parley_jetstream_consumer_pending{messaging_consumer_group_name="processor-chat",messaging_destination_name="PARLEY_CHAT",messaging_system="nats"`,
		`parley_jetstream_consumer_ack_pending{`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

// Every metric the Grafana dashboard queries is one the code exports.
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	scrape := promScrape(t)
	defer recordAll(t)()
	have := map[string]bool{}
	for _, line := range strings.Split(scrape(), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		have[line[:strings.IndexAny(line, "{ ")]] = true
	}
	b, err := os.ReadFile("../../deploy/grafana/parley-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	name := regexp.MustCompile(`\b(?:parley|gen_ai|messaging)_[a-z0-9_]+\b`)
	// Label names share the prefixes: drop grouping clauses and selectors
	// first, so what is left are metric names.
	labels := regexp.MustCompile(`\b(?:by|without)\s*\([^)]*\)|\{[^}]*\}`)
	var queried []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(labels.ReplaceAllString(tg.Expr, ""), -1) {
				queried = append(queried, m)
				if !have[m] {
					t.Errorf("panel %q queries %s, which the code does not export", p.Title, m)
				}
			}
		}
	}
	if len(queried) < 15 {
		t.Errorf("found only %d metric references in the dashboard: %v", len(queried), queried)
	}
	for _, must := range []string{"parley_turns_started_total", "parley_elicitations_answered_total", "parley_policy_decisions_total",
		"gen_ai_client_token_usage_sum", "parley_jetstream_consumer_pending", "parley_messaging_dead_letters_total"} {
		if !slices.Contains(queried, must) {
			t.Errorf("dashboard does not show %s", must)
		}
	}
}

// A publish JetStream reports as a duplicate (a redelivered handler
// publishing the same event ID) is not counted; a reason that is not a
// stable code is recorded as _OTHER.
func TestPublishedCountsFirstStoreOnly(t *testing.T) {
	scrape := promScrape(t)
	ctx := context.Background()
	done := mustEvent(t, events.TypeTurnCompleted, map[string]string{})
	Published(ctx, done, false)
	Published(ctx, done, true)
	Published(ctx, mustEvent(t, events.TypeTurnFailed, events.TurnFailed{Reason: "Drop table; 1=1"}), false)
	Published(ctx, mustEvent(t, events.TypeTurnRequested, map[string]string{}), false)
	out := scrape()
	if !regexp.MustCompile(`(?m)^parley_turns_completed_total\{[^}]*\} 1$`).MatchString(out) {
		t.Errorf("turns completed not 1:\n%s", out)
	}
	if !strings.Contains(out, `error_type="_OTHER"`) || strings.Contains(out, "Drop") {
		t.Errorf("free-text reason not bounded:\n%s", out)
	}
	if strings.Contains(out, "turn.requested") {
		t.Errorf("turn.requested counted:\n%s", out)
	}
}

// TestEventTypeLabelsEveryCatalogueType: every type of the catalogue (and
// only those) is recorded by name, so a new type needs no second list here.
func TestEventTypeLabelsEveryCatalogueType(t *testing.T) {
	for _, e := range events.Catalog() {
		if got := EventType(string(e.Type)); got != string(e.Type) {
			t.Errorf("EventType(%s) = %s", e.Type, got)
		}
	}
}

func TestEventTypeBounded(t *testing.T) {
	if got := EventType(string(events.TypeRunPaused)); got != string(events.TypeRunPaused) {
		t.Errorf("EventType(%s) = %s", events.TypeRunPaused, got)
	}
	if got := EventType("com.example.whatever"); got != "_OTHER" {
		t.Errorf("EventType(foreign) = %s, want _OTHER", got)
	}
	for in, want := range map[string]string{"agent_failed": "agent_failed", "": "_OTHER", "A B": "_OTHER", strings.Repeat("a", 65): "_OTHER"} {
		if got := bounded(in); got != want {
			t.Errorf("bounded(%q) = %q, want %q", in, got, want)
		}
	}
}

// A consumer with work whose sequences do not move is stalled after the
// window; one that moves, or has nothing to do, is not; a failed info is
// an error, not a stall.
func TestConsumerStall(t *testing.T) {
	prev := SetConsumerPollInterval(10 * time.Millisecond)
	t.Cleanup(func() { SetConsumerPollInterval(prev) })
	stuck := &fakeInfo{info: &jetstream.ConsumerInfo{NumPending: 5, Delivered: jetstream.SequenceInfo{Stream: 7}, AckFloor: jetstream.SequenceInfo{Stream: 7}}}
	idle := &fakeInfo{info: &jetstream.ConsumerInfo{}}
	gone := &fakeInfo{err: errors.New("consumer not found")}
	ctx := context.Background()
	for name, c := range map[string]ConsumerInfoer{"stuck": stuck, "idle": idle, "gone": gone} {
		w := WatchConsumer(ctx, nil, "S", name)
		w.Consuming(c)
		defer w.Stop()
	}
	time.Sleep(300 * time.Millisecond)
	now := time.Now()
	got := map[string]ConsumerState{}
	for _, c := range Consumers() {
		got[c.Durable] = c
	}
	if !got["stuck"].Stalled(now, 200*time.Millisecond) {
		t.Errorf("stuck consumer not stalled: %+v", got["stuck"])
	}
	if got["stuck"].Stalled(now, time.Minute) {
		t.Errorf("stuck consumer stalled before the window")
	}
	if got["idle"].Stalled(now, 200*time.Millisecond) {
		t.Errorf("idle consumer stalled: %+v", got["idle"])
	}
	if got["gone"].Err == nil || got["gone"].Stalled(now, 0) {
		t.Errorf("missing consumer: %+v, want an error and no stall", got["gone"])
	}
	if got["stuck"].Pending != 5 {
		t.Errorf("pending = %d, want 5", got["stuck"].Pending)
	}
}

// BenchmarkHandledMessage measures what one handled message costs in
// metrics with the SDK and the Prometheus exporter installed: its
// messaging.process.duration record and the publish counter of its output.
func BenchmarkHandledMessage(b *testing.B) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		b.Fatal(err)
	}
	if err := Use(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = Use(noop.NewMeterProvider()) })
	e, err := events.New("/test", events.TypeTurnFailed, "th", events.TurnFailed{Reason: "agent_failed"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		Processed(ctx, "processor-runs", string(events.TypeRunFailed), OutcomeAck, 1, time.Millisecond)
		Published(ctx, e, false)
	}
}

// Recording a handler run builds its attribute set once per consumer,
// event type and outcome, not on every message.
func TestProcessedReusesAttributeSets(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	if err := Use(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Use(noop.NewMeterProvider()) })
	ctx := context.Background()
	Processed(ctx, "agent", string(events.TypeRunRequested), OutcomeAck, 1, time.Millisecond)
	allocs := testing.AllocsPerRun(200, func() {
		Processed(ctx, "agent", string(events.TypeRunRequested), OutcomeAck, 1, time.Millisecond)
	})
	if allocs > 1 {
		t.Errorf("Processed allocates %.0f objects per message, want at most 1", allocs)
	}
}
