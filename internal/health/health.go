// Package health serves a worker's liveness and readiness over HTTP, in
// the shape Kubernetes probes expect: GET /livez and GET /readyz answer
// 200 when the check passes and 503 when it does not, with a JSON body
// listing every check ({"status":"ready","checks":[{"name":...,"ok":true}]}).
//
// Live: the process serves HTTP and none of its NATS connections is closed
// for good (a closed connection never reconnects: restart the process).
//
// Ready: every NATS connection is connected; every role the process runs
// finished its start-up (streams, buckets and consumers created); every
// stream and bucket its workers use exists (JetStream stream names, read
// at most once per CacheFor); every consumer it consumes answers its info
// and is not stalled (it has pending or unacknowledged messages and its
// delivered and ack-floor sequences have not moved for StallAfter), from
// metrics.Consumers.
//
// Of parley's packages it imports only internal/metrics; it must not import
// bus, kvstate, a worker or a composition root (internal/layers checks the
// direction of imports).
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/internal/metrics"
)

var (
	requiredMu sync.Mutex
	required   = map[*nats.Conn]map[string]bool{}
)

// RequireStream records that the worker on js's connection uses the
// JetStream stream name (a bucket's stream is KV_<bucket>), so readiness
// checks that it still exists. bus.EnsureStream and kvstate.OpenBucket
// call it. The record is dropped when the connection closes.
func RequireStream(js jetstream.JetStream, name string) {
	nc := js.Conn()
	if nc == nil {
		return
	}
	requiredMu.Lock()
	defer requiredMu.Unlock()
	if required[nc] == nil {
		required[nc] = map[string]bool{}
	}
	required[nc][name] = true
	for c := range required {
		if c.IsClosed() {
			delete(required, c) // bounded by the open connections
		}
	}
}

// requiredStreams lists the streams the workers on conns use.
func requiredStreams(conns []*nats.Conn) []string {
	requiredMu.Lock()
	defer requiredMu.Unlock()
	set := map[string]bool{}
	for _, nc := range conns {
		for s := range required[nc] {
			set[s] = true
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// DefaultStallAfter is State.StallAfter's default.
const DefaultStallAfter = 5 * time.Minute

// State is the health of one process. Its zero value is not usable; use New.
type State struct {
	// StallAfter is how long a consumer with work may go without
	// progress before the process is not ready.
	StallAfter time.Duration
	// CacheFor bounds how often the stream list is read from JetStream.
	CacheFor time.Duration

	mu      sync.Mutex
	conns   []*nats.Conn
	roles   map[string]*role
	streams []string // last stream list
	listed  time.Time
	listErr error
}

// New returns a State expecting roles to start (Started).
func New(stallAfter time.Duration, roles ...string) *State {
	if stallAfter <= 0 {
		stallAfter = DefaultStallAfter
	}
	s := &State{StallAfter: stallAfter, CacheFor: 5 * time.Second, roles: map[string]*role{}}
	for _, r := range roles {
		s.roles[r] = &role{}
	}
	return s
}

// role is the start-up state of one worker role.
type role struct {
	started  bool
	conn     *nats.Conn // the role's connection
	consumes bool       // the role runs at least one consumer on conn
}

// AddConn adds a NATS connection whose state counts (one per worker role).
func (s *State) AddConn(nc *nats.Conn) {
	s.mu.Lock()
	s.conns = append(s.conns, nc)
	s.mu.Unlock()
}

// Started records that role finished its start-up on nc and is about to
// run; when consumes, the role is not ready until a consumer of it is
// registered on nc (metrics.WatchConsumer, at the start of Consume).
func (s *State) Started(name string, nc *nats.Conn, consumes bool) {
	s.mu.Lock()
	s.roles[name] = &role{started: true, conn: nc, consumes: consumes}
	s.mu.Unlock()
}

type ctxKey struct{}

// With returns ctx carrying s, for Started calls deep in a command.
func With(ctx context.Context, s *State) context.Context { return context.WithValue(ctx, ctxKey{}, s) }

// Started records on ctx's State (if any) that role finished its start-up
// (see State.Started).
func Started(ctx context.Context, role string, nc *nats.Conn, consumes bool) {
	if s, ok := ctx.Value(ctxKey{}).(*State); ok && s != nil {
		s.Started(role, nc, consumes)
	}
}

// AddConn adds nc to ctx's State (if any), like State.AddConn.
func AddConn(ctx context.Context, nc *nats.Conn) {
	if s, ok := ctx.Value(ctxKey{}).(*State); ok && s != nil {
		s.AddConn(nc)
	}
}

// Check is one line of a probe's answer.
type Check struct {
	// Name says what was checked ("nats connection parley-agent",
	// "stream PARLEY_CHAT", "consumer PARLEY_CHAT/processor").
	Name string `json:"name"`
	// OK is whether the check passed.
	OK bool `json:"ok"`
	// Detail says why a check failed.
	Detail string `json:"detail,omitempty"`
}

// Report is a probe's answer.
type Report struct {
	// Status is "live", "ready", "not live" or "not ready".
	Status string `json:"status"`
	// Checks lists every check, passed or not.
	Checks []Check `json:"checks"`
}

func (r Report) ok() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// Live checks liveness: no NATS connection closed for good.
func (s *State) Live() Report {
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	r := Report{Status: "live"}
	for _, nc := range conns {
		c := Check{Name: "nats connection " + nc.Opts.Name, OK: !nc.IsClosed()}
		if !c.OK {
			c.Detail = "closed: it will not reconnect"
		}
		r.Checks = append(r.Checks, c)
	}
	if !r.ok() {
		r.Status = "not live"
	}
	return r
}

// Ready checks readiness (see the package documentation).
func (s *State) Ready(ctx context.Context) Report {
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	roles := make([]string, 0, len(s.roles))
	started := map[string]role{}
	for name, r := range s.roles {
		roles = append(roles, name)
		started[name] = *r
	}
	s.mu.Unlock()
	mine := map[*nats.Conn]bool{}
	for _, nc := range conns {
		mine[nc] = true
	}
	var consumers []metrics.ConsumerState
	watching := map[*nats.Conn]bool{}
	for _, cs := range metrics.Consumers() {
		if mine[cs.Conn] {
			consumers = append(consumers, cs)
			watching[cs.Conn] = true
		}
	}
	sort.Strings(roles)
	r := Report{Status: "ready"}
	if len(conns) == 0 {
		r.Checks = append(r.Checks, Check{Name: "nats", Detail: "not connected yet (waiting for NATS)"})
	}
	connected := len(conns) > 0
	for _, nc := range conns {
		c := Check{Name: "nats connection " + nc.Opts.Name, OK: nc.IsConnected()}
		if !c.OK {
			c.Detail = "status " + nc.Status().String()
			connected = false
		}
		r.Checks = append(r.Checks, c)
	}
	for _, name := range roles {
		ro := started[name]
		c := Check{Name: "start-up " + name, OK: ro.started}
		switch {
		case !ro.started:
			c.Detail = "streams, buckets and consumers not ready yet"
		case ro.consumes && !watching[ro.conn]:
			c.OK, c.Detail = false, "consumers not started yet"
		}
		r.Checks = append(r.Checks, c)
	}
	if connected {
		r.Checks = append(r.Checks, s.streamChecks(ctx, conns)...)
	}
	now := time.Now()
	for _, cs := range consumers {
		c := Check{Name: "consumer " + cs.Stream + "/" + cs.Durable, OK: true}
		switch {
		case !cs.Polled:
			c.OK, c.Detail = false, "not checked yet"
		case cs.Err != nil:
			c.OK, c.Detail = false, "info: "+cs.Err.Error()
		case cs.Stalled(now, s.StallAfter):
			c.OK, c.Detail = false, fmt.Sprintf("stalled: %d pending, %d unacknowledged, no progress for %v",
				cs.Pending, cs.AckPending, now.Sub(cs.LastProgress).Round(time.Second))
		}
		r.Checks = append(r.Checks, c)
	}
	if !r.ok() {
		r.Status = "not ready"
	}
	return r
}

// streamChecks checks that every required stream exists, from a stream
// list read at most once per CacheFor.
func (s *State) streamChecks(ctx context.Context, conns []*nats.Conn) []Check {
	want := requiredStreams(conns)
	if len(want) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listed.IsZero() || time.Since(s.listed) >= s.CacheFor || s.listErr != nil {
		s.streams, s.listErr = listStreams(ctx, listingConn(conns))
		s.listed = time.Now()
	}
	if s.listErr != nil {
		return []Check{{Name: "streams", Detail: "listing streams: " + s.listErr.Error()}}
	}
	var out []Check
	for _, name := range want {
		c := Check{Name: "stream " + name, OK: slices.Contains(s.streams, name)}
		if !c.OK {
			c.Detail = "missing"
		}
		out = append(out, c)
	}
	return out
}

// listingConn picks the connection to list streams on: one whose worker
// uses streams (its principal may list them; a policy service's, such as
// the gate's beside the workers in `parley dev`, may not).
func listingConn(conns []*nats.Conn) *nats.Conn {
	for _, nc := range conns {
		if len(requiredStreams([]*nats.Conn{nc})) > 0 {
			return nc
		}
	}
	return conns[0]
}

func listStreams(ctx context.Context, nc *nats.Conn) ([]string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	l := js.StreamNames(ctx)
	var names []string
	for n := range l.Name() {
		names = append(names, n)
	}
	return names, l.Err()
}

// Handler serves GET /livez and GET /readyz.
func (s *State) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) { write(w, s.Live()) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { write(w, s.Ready(r.Context())) })
	return mux
}

func write(w http.ResponseWriter, r Report) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !r.ok() {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(r)
}
