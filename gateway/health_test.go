package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/internal/health"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/internal/natsserver"
)

// healthReport GETs path (no token) and decodes the report.
func healthReport(t *testing.T, h http.Handler, path string) (int, health.Report) {
	t.Helper()
	w := request(t, h, "GET", path, "", "", nil)
	var r health.Report
	if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil {
		t.Fatalf("GET %s = %d %s: %v", path, w.Code, w.Body, err)
	}
	return w.Code, r
}

func hasCheck(r health.Report, name string, ok bool) bool {
	for _, c := range r.Checks {
		if c.Name == name && c.OK == ok {
			return true
		}
	}
	return false
}

// GET /livez and /readyz answer without a token, on the gateway's server
// with its own NATS principal (the shipped authorization: no permission
// violation), and readiness follows the connection and the gateway's bucket.
func TestHealth(t *testing.T) {
	dir := t.TempDir()
	if _, err := natsauth.Init(filepath.Join(dir, "auth"), natsauth.Roles()); err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "js"),
		AuthConfig: filepath.Join(dir, "auth", natsauth.AuthFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	creds := natsauth.Credentials{NKeyFile: filepath.Join(dir, "auth", natsauth.SeedFile(natsauth.Gateway)), Principal: natsauth.Gateway}
	opts, err := creds.Options()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var violations []string
	opts = append(opts, nats.Name("parley-gateway"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				mu.Lock()
				violations = append(violations, err.Error())
				mu.Unlock()
			}
		}))
	nc, err := nats.Connect(srv.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The gateway waits for the workers to create parley's streams: it
	// may not create them itself.
	type made struct {
		g   *Gateway
		err error
	}
	started := make(chan made, 1)
	go func() {
		g, err := New(t.Context(), b, StaticTokens{devTok: "dev"}, nil)
		started <- made{g, err}
	}()
	select {
	case m := <-started:
		t.Fatalf("gateway.New returned before the streams existed: %v", m.err)
	case <-time.After(500 * time.Millisecond):
	}
	pcreds := natsauth.Credentials{NKeyFile: filepath.Join(dir, "auth", natsauth.SeedFile(natsauth.Processor)), Principal: natsauth.Processor}
	popts, err := pcreds.Options()
	if err != nil {
		t.Fatal(err)
	}
	pnc, err := nats.Connect(srv.ClientURL(), popts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pnc.Close)
	pb, err := bus.New(pnc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pb.EnsureStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	var g *Gateway
	select {
	case m := <-started:
		if m.err != nil {
			t.Fatalf("gateway.New: %v", m.err)
		}
		g = m.g
	case <-time.After(20 * time.Second):
		t.Fatal("gateway.New still waiting 20 s after the streams were created")
	}
	h := g.Handler()
	if code, r := healthReport(t, h, "/livez"); code != 200 || r.Status != "live" {
		t.Fatalf("livez = %d %+v, want 200 live", code, r)
	}
	code, r := healthReport(t, h, "/readyz")
	if code != 200 || r.Status != "ready" || !hasCheck(r, "nats connection parley-gateway", true) ||
		!hasCheck(r, "start-up gateway", true) || !hasCheck(r, "stream KV_"+BucketThreads, true) {
		t.Fatalf("readyz = %d %+v, want 200 ready with the connection, the start-up and the bucket", code, r)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(violations) > 0 {
		t.Errorf("permission violations: %q", violations)
	}
	mu.Unlock()

	// The bucket deleted (an operator's mistake): not ready, naming it.
	g.Health().CacheFor = 0
	if err := srvAdminDeleteBucket(t, srv.ClientURL(), dir); err != nil {
		t.Fatal(err)
	}
	if code, r := healthReport(t, h, "/readyz"); code != 503 || !hasCheck(r, "stream KV_"+BucketThreads, false) {
		t.Fatalf("readyz without the bucket = %d %+v, want 503 naming it", code, r)
	}

	// NATS gone: not ready, still live (the connection reconnects).
	srv.Shutdown()
	srv.WaitForShutdown()
	deadline := time.Now().Add(5 * time.Second)
	for nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if code, r := healthReport(t, h, "/readyz"); code != 503 || !hasCheck(r, "nats connection parley-gateway", false) {
		t.Fatalf("readyz without NATS = %d %+v, want 503 naming the connection", code, r)
	}
	if code, _ := healthReport(t, h, "/livez"); code != 200 {
		t.Fatalf("livez while reconnecting = %d, want 200", code)
	}
	nc.Close()
	if code, r := healthReport(t, h, "/livez"); code != 503 || r.Status != "not live" {
		t.Fatalf("livez on a closed connection = %d %+v, want 503 not live", code, r)
	}
}

// srvAdminDeleteBucket deletes BucketThreads as the admin principal.
func srvAdminDeleteBucket(t *testing.T, url, dir string) error {
	t.Helper()
	nc, err := natsauth.Connect(url, "test-admin", natsauth.Credentials{
		NKeyFile: filepath.Join(dir, "auth", natsauth.SeedFile(natsauth.Admin)), Principal: natsauth.Admin}, nil)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	err = js.DeleteKeyValue(t.Context(), BucketThreads)
	if err != nil && !strings.Contains(err.Error(), "not found") {
		return err
	}
	return nil
}
