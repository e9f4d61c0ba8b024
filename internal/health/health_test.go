package health_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/internal/metrics"
)

func get(t *testing.T, h http.Handler, path string) (int, health.Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	var r health.Report
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("%s: %v: %s", path, err, rec.Body.String())
	}
	return rec.Code, r
}

func failing(r health.Report) string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c.Name+": "+c.Detail)
		}
	}
	return strings.Join(out, "; ")
}

// Readiness walks through its checks: no connection, start-up not done, a
// stream missing, a consumer missing; liveness fails only on a connection
// closed for good.
func TestReadiness(t *testing.T) {
	srv := bustest.NewServer(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HEALTH_T", Subjects: []string{"health.t.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	s := health.New(time.Minute, "worker")
	h := s.Handler()

	if code, r := get(t, h, "/readyz"); code != 503 || !strings.Contains(failing(r), "waiting for NATS") {
		t.Errorf("no connection: %d %s", code, failing(r))
	}
	if code, r := get(t, h, "/livez"); code != 200 || r.Status != "live" {
		t.Errorf("livez without a connection: %d %+v", code, r)
	}
	s.AddConn(nc)
	if code, r := get(t, h, "/readyz"); code != 503 || !strings.Contains(failing(r), "start-up worker") {
		t.Errorf("not started: %d %s", code, failing(r))
	}
	health.Started(health.With(ctx, s), "worker", nc, true)
	if code, r := get(t, h, "/readyz"); code != 503 || !strings.Contains(failing(r), "consumers not started yet") {
		t.Errorf("started, no consumer yet: %d %s", code, failing(r))
	}
	w := metrics.WatchConsumer(ctx, nc, "HEALTH_T", "d")
	defer w.Stop()
	if code, r := get(t, h, "/readyz"); code != 503 || !strings.Contains(failing(r), "consumer HEALTH_T/d: not checked yet") {
		t.Errorf("consumer being created: %d %s", code, failing(r))
	}
	health.RequireStream(js, "HEALTH_T")

	health.RequireStream(js, "HEALTH_MISSING")
	s.CacheFor = 0
	if code, r := get(t, h, "/readyz"); code != 503 || !strings.Contains(failing(r), "stream HEALTH_MISSING: missing") {
		t.Errorf("missing stream: %d %s", code, failing(r))
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HEALTH_MISSING", Subjects: []string{"health.m.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}

	prevPoll := metrics.SetConsumerPollInterval(20 * time.Millisecond)
	t.Cleanup(func() { metrics.SetConsumerPollInterval(prevPoll) })
	cons, err := js.CreateConsumer(ctx, "HEALTH_T", jetstream.ConsumerConfig{Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	w.Consuming(cons)
	time.Sleep(100 * time.Millisecond)
	if code, r := get(t, h, "/readyz"); code != 200 || r.Status != "ready" {
		t.Errorf("consumer present: %d %s", code, failing(r))
	}
	other := metrics.WatchConsumer(ctx, nil, "ELSEWHERE", "x")
	defer other.Stop()
	if code, r := get(t, h, "/readyz"); code != 200 {
		t.Errorf("a consumer of another connection counted: %d %s", code, failing(r))
	}
	if err := js.DeleteConsumer(ctx, "HEALTH_T", "d"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if code, r := get(t, h, "/readyz"); code != 503 || !strings.Contains(failing(r), "consumer HEALTH_T/d: info") {
		t.Errorf("consumer deleted: %d %s", code, failing(r))
	}

	nc.Close()
	if code, r := get(t, h, "/livez"); code != 503 || !strings.Contains(failing(r), "closed") {
		t.Errorf("livez with a closed connection: %d %s", code, failing(r))
	}
}

// The stream list is read on a connection whose worker uses streams: in
// `parley dev` the gate's connection comes first and its principal may not
// list streams (here: its server has none of them), and readiness must
// not fail for that.
func TestReadinessListsStreamsOnAWorkersConnection(t *testing.T) {
	ctx := context.Background()
	gateSrv := bustest.NewServer(t) // a server where HEALTH_L does not exist
	gate := gateSrv.Connect(t)
	srv := bustest.NewServer(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HEALTH_L", Subjects: []string{"health.l.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	health.RequireStream(js, "HEALTH_L")
	s := health.New(time.Minute, "gate", "worker")
	s.CacheFor = 0
	s.AddConn(gate)
	s.AddConn(nc)
	health.Started(health.With(ctx, s), "gate", gate, false)
	health.Started(health.With(ctx, s), "worker", nc, false)
	if code, r := get(t, s.Handler(), "/readyz"); code != 200 {
		t.Errorf("streams listed on the gate's connection: %d %s", code, failing(r))
	}
}
