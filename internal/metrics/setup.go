package metrics

import (
	"context"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// Exporters says where metrics go.
type Exporters struct {
	// Prometheus, when true, makes Setup return a handler serving the
	// Prometheus text format (mounted at /metrics by the caller), with the
	// Go runtime and process collectors beside parley's instruments.
	Prometheus bool
}

// OTLPConfigured reports whether the standard OTEL_* variables ask for an
// OTLP metrics exporter: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT set, and OTEL_METRICS_EXPORTER not
// "none" (nor another exporter than "otlp").
func OTLPConfigured() bool {
	if e := strings.TrimSpace(os.Getenv("OTEL_METRICS_EXPORTER")); e != "" && e != "otlp" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
}

// Setup installs a meter provider for service (the resource's service.name
// unless OTEL_SERVICE_NAME says otherwise) with an OTLP/HTTP periodic
// exporter when OTLPConfigured (OTEL_EXPORTER_OTLP_* endpoint, headers and
// protocol, OTEL_METRIC_EXPORT_INTERVAL apply, as the SDK reads them) and a
// Prometheus exporter when exp.Prometheus. With neither, it installs
// nothing and metrics stay no-ops. It also sets the global meter provider.
// handler is nil without Prometheus; shutdown flushes and is never nil.
func Setup(ctx context.Context, service string, exp Exporters) (handler http.Handler, shutdown func(context.Context) error, err error) {
	shutdown = func(context.Context) error { return nil }
	var opts []sdkmetric.Option
	if OTLPConfigured() {
		e, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, shutdown, err
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(e)))
	}
	if exp.Prometheus {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		pe, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			return nil, shutdown, err
		}
		opts = append(opts, sdkmetric.WithReader(pe))
		handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if len(opts) == 0 {
		return nil, shutdown, nil
	}
	res, rerr := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
	if rerr != nil || os.Getenv("OTEL_SERVICE_NAME") != "" {
		res = resource.Default()
	}
	mp := sdkmetric.NewMeterProvider(append(opts, sdkmetric.WithResource(res))...)
	otel.SetMeterProvider(mp)
	if err := Use(mp); err != nil {
		return handler, mp.Shutdown, err
	}
	return handler, mp.Shutdown, nil
}
