package e2e

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/parley-dev/parley/internal/metrics"
	"github.com/parley-dev/parley/schema"
)

// scrape is one Prometheus text exposition: sample lines by metric name.
type scrape map[string][]string

func scrapeURL(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s = %d %s", url, resp.StatusCode, b)
	}
	out := scrape{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		out[name] = append(out[name], line)
	}
	return out
}

// sum adds the values of name's samples whose labels contain every one of
// labels (`key="value"`).
func (s scrape) sum(name string, labels ...string) float64 {
	var total float64
sample:
	for _, line := range s[name] {
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue sample
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			total += v
		}
	}
	return total
}

// The Prometheus endpoint, scraped during a paused-and-resumed turn, shows
// the turn started, paused, the policy's confirm decision, the accepted
// answer, the tool call, the model calls and the turn completed — each
// counted once, though the workers publish through JetStream with retries
// and redeliveries.
func TestMetricsDuringPausedTurn(t *testing.T) {
	prevPoll := metrics.SetConsumerPollInterval(200 * time.Millisecond)
	t.Cleanup(func() { metrics.SetConsumerPollInterval(prevPoll) })
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	if err := metrics.Use(mp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = metrics.Use(noop.NewMeterProvider()); _ = mp.Shutdown(t.Context()) })
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	url := srv.URL + "/metrics"

	s := start(t, options{})
	before := scrapeURL(t, url)
	if _, err := s.client.Send(s.ctx, "mx", "", deleteDrafts, ""); err != nil {
		t.Fatal(err)
	}
	id, _ := s.question("mx", 1)

	paused := scrapeURL(t, url)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"parley_turns_started_total", nil, 1},
		{"parley_turns_paused_total", nil, 1},
		{"parley_elicitations_requested_total", nil, 1},
		{"parley_policy_decisions_total", []string{`parley_policy_decision="confirm"`, `parley_policy_name="gate"`}, 1},
		{"parley_turns_completed_total", nil, 0},
		{"parley_elicitations_answered_total", nil, 0},
	} {
		if got := paused.sum(c.name, c.labels...) - before.sum(c.name, c.labels...); got != c.want {
			t.Errorf("paused: %s%v moved by %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	if _, err := s.client.Answer(s.ctx, "mx", id, schema.ElicitResult{Action: schema.ActionAccept}, ""); err != nil {
		t.Fatal(err)
	}
	s.completed("mx", 1)
	var done scrape
	// The tool-executor and the processor record just after publishing:
	// wait for the last counter rather than race it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		done = scrapeURL(t, url)
		if done.sum("parley_turns_completed_total") > before.sum("parley_turns_completed_total") || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"parley_turns_started_total", nil, 1},
		{"parley_turns_paused_total", nil, 1},
		{"parley_turns_completed_total", nil, 1},
		{"parley_turns_failed_total", nil, 0},
		{"parley_elicitations_answered_total", []string{`parley_elicitation_action="accept"`}, 1},
		{"parley_elicitations_rejected_total", nil, 0},
		{"parley_tool_call_duration_seconds_count", []string{`gen_ai_tool_name="delete_entities"`, `parley_tool_outcome="ok"`}, 1},
	} {
		if got := done.sum(c.name, c.labels...) - before.sum(c.name, c.labels...); got != c.want {
			t.Errorf("completed: %s%v moved by %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"gen_ai_client_operation_duration_seconds_count", []string{`gen_ai_operation_name="chat"`}},
		{"messaging_process_duration_seconds_count", []string{`messaging_system="nats"`, `cloudevents_event_type="dev.parley.turn.requested"`, `parley_outcome="ack"`}},
		{"messaging_process_duration_seconds_count", []string{`cloudevents_event_type="dev.parley.elicitation.responded"`}},
	} {
		if got := done.sum(c.name, c.labels...) - before.sum(c.name, c.labels...); got < 1 {
			t.Errorf("completed: %s%v moved by %v, want at least 1", c.name, c.labels, got)
		}
	}
	// The consumer gauges come from polled consumer info.
	deadline = time.Now().Add(5 * time.Second)
	for len(scrapeURL(t, url)["parley_jetstream_consumer_pending"]) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no parley_jetstream_consumer_pending samples")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(done["parley_jetstream_consumer_ack_pending"]) == 0 {
		t.Errorf("no parley_jetstream_consumer_ack_pending samples")
	}
}
