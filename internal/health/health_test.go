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

	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/internal/metrics"
	"github.com/parley-dev/parley/workers/bus/bustest"
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
	health.Started(health.With(ctx, s), "worker")
	health.RequireStream("HEALTH_T")
	if code, r := get(t, h, "/readyz"); code != 200 || r.Status != "ready" {
		t.Errorf("started: %d %s", code, failing(r))
	}

	health.RequireStream("HEALTH_MISSING")
	s.CacheFor = 0
	if code, r := get(t, h, "/readyz"); code != 503 || !strings.Contains(failing(r), "stream HEALTH_MISSING: missing") {
		t.Errorf("missing stream: %d %s", code, failing(r))
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HEALTH_MISSING", Subjects: []string{"health.m.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}

	metrics.ConsumerPollInterval = 20 * time.Millisecond
	cons, err := js.CreateConsumer(ctx, "HEALTH_T", jetstream.ConsumerConfig{Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	stop := metrics.WatchConsumer(ctx, "HEALTH_T", "d", cons)
	defer stop()
	time.Sleep(100 * time.Millisecond)
	if code, r := get(t, h, "/readyz"); code != 200 {
		t.Errorf("consumer present: %d %s", code, failing(r))
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
