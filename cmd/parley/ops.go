package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/internal/metrics"
)

// opsFlags choose where a worker serves its metrics and health endpoints
// (every worker command and dev embed them).
type opsFlags struct {
	MetricsListen string        `name:"metrics-listen" env:"PARLEY_METRICS_LISTEN" placeholder:"ADDR" help:"Serve Prometheus metrics at http://ADDR/metrics (e.g. :9464; empty: not served). OTLP export of metrics follows the standard OTEL_EXPORTER_OTLP_* variables."`
	HealthListen  string        `name:"health-listen" env:"PARLEY_HEALTH_LISTEN" placeholder:"ADDR" help:"Serve GET /livez and GET /readyz on ADDR (e.g. :8081; empty: not served). May equal --metrics-listen."`
	StallAfter    time.Duration `name:"stall-after" env:"PARLEY_STALL_AFTER" default:"5m" help:"/readyz fails when a consumer has pending messages and made no progress for this long (at least 10s)."`
}

func (o opsFlags) check() error {
	if o.StallAfter < 10*time.Second {
		return fmt.Errorf("--stall-after must be at least 10s, got %v", o.StallAfter)
	}
	for _, a := range []struct{ flag, addr string }{{"--metrics-listen", o.MetricsListen}, {"--health-listen", o.HealthListen}} {
		if a.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("%s: %q is not host:port (e.g. :9464): %v", a.flag, a.addr, err)
		}
	}
	return nil
}

// startOps sets up metrics for service (OTLP from OTEL_*, Prometheus when
// --metrics-listen is set) and serves /metrics, /livez and /readyz on the
// flags' addresses (one server when they are equal). The returned State
// expects roles to start. A listen error is returned at once (exit 1);
// stop shuts the servers down and flushes metrics.
func startOps(ctx context.Context, service string, o opsFlags, roles []string, log *slog.Logger) (hs *health.State, stop func(), err error) {
	hs = health.New(o.StallAfter, roles...)
	promHandler, shutdown, err := metrics.Setup(ctx, service, metrics.Exporters{Prometheus: o.MetricsListen != ""})
	if err != nil {
		log.Warn("metrics export disabled", "error", err)
	}
	muxes := map[string]*http.ServeMux{}
	mux := func(addr string) *http.ServeMux {
		if muxes[addr] == nil {
			muxes[addr] = http.NewServeMux()
		}
		return muxes[addr]
	}
	if o.MetricsListen != "" && promHandler != nil {
		mux(o.MetricsListen).Handle("GET /metrics", promHandler)
	}
	if o.HealthListen != "" {
		h := hs.Handler()
		mux(o.HealthListen).Handle("GET /livez", h)
		mux(o.HealthListen).Handle("GET /readyz", h)
	}
	var servers []*http.Server
	stop = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range servers {
			_ = s.Shutdown(sctx)
		}
		_ = shutdown(sctx)
	}
	for addr, m := range muxes {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("serving metrics and health: %w", err)
		}
		s := &http.Server{Handler: m, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, s)
		go func() {
			if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics and health server stopped", "addr", addr, "error", err)
			}
		}()
		log.Info("serving metrics and health", "addr", l.Addr().String(),
			"metrics", addr == o.MetricsListen, "health", addr == o.HealthListen)
	}
	return hs, stop, nil
}
