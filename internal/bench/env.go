package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/internal/natsserver"
)

// benchEnv is the server the bench runs against and the connections it
// opened.
type benchEnv struct {
	url        string
	natsOpts   []nats.Option  // credentials and TLS of an external server
	srv        *server.Server // nil for an external server
	dir        string
	serverDesc string
	// runID prefixes every thread ID of this run, so runs against a shared
	// server do not meet.
	runID string

	mu    sync.Mutex
	conns []*nats.Conn
}

func startEnv(ctx context.Context, opts *Options) (*benchEnv, error) {
	var buf [4]byte
	_, _ = rand.Read(buf[:])
	e := &benchEnv{url: opts.NATSURL, natsOpts: opts.NATSOptions, runID: "b" + hex.EncodeToString(buf[:])}
	if e.url == "" {
		dir, err := os.MkdirTemp("", "parley-bench-*")
		if err != nil {
			return nil, err
		}
		srv, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0", DataDir: dir})
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		e.srv, e.dir, e.url = srv, dir, srv.ClientURL()
		e.serverDesc = "embedded nats-server " + server.VERSION
		return e, nil
	}
	nc, err := e.connect("probe")
	if err != nil {
		return nil, err
	}
	e.serverDesc = "nats-server " + nc.ConnectedServerVersion() + " at " + nc.ConnectedUrlRedacted()
	return e, nil
}

// own reports whether the bench started the server (and may purge its
// state).
func (e *benchEnv) own() bool { return e.srv != nil }

// connect opens a connection named parley-bench-<name>, closed by close.
func (e *benchEnv) connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(e.url, append([]nats.Option{nats.Name("parley-bench-" + name), nats.MaxReconnects(-1),
		nats.SyncQueueLen(natsauth.SyncQueueLen)}, e.natsOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", natsauth.Redact(e.url), err)
	}
	e.mu.Lock()
	e.conns = append(e.conns, nc)
	e.mu.Unlock()
	return nc, nil
}

func (e *benchEnv) close() {
	e.mu.Lock()
	for _, nc := range e.conns {
		nc.Close()
	}
	e.conns = nil
	e.mu.Unlock()
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		os.RemoveAll(e.dir)
	}
}

// note is an event a driver waits for: its suffix (turn.completed,
// elicitation.requested...), the elicitation ID when there is one, and
// when it was received.
type note struct {
	suffix        string
	elicitationID string
	at            time.Time
}

// dispatcher reads a chat stream through one ordered consumer and hands
// each event to the goroutine waiting on its thread.
type dispatcher struct {
	mu      sync.Mutex
	waiters map[string]chan note
	cc      jetstream.ConsumeContext
}

// newDispatcher reads stream (filtered) from now on. Subjects are
// <prefix>.chat.<thread>.<suffix>, or refusal subjects
// (events.RefusedSubject).
func newDispatcher(ctx context.Context, js jetstream.JetStream, stream string, filters []string) (*dispatcher, error) {
	d := &dispatcher{waiters: map[string]chan note{}}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", stream, err)
	}
	d.cc, err = cons.Consume(func(m jetstream.Msg) {
		at := time.Now()
		subject := m.Subject()
		if _, thread, suffix, ok := events.ParseRefusedSubject(subject); ok {
			// A refusal stored under its sender's principal: as if on
			// the thread's own subject.
			subject = events.ChatSubject(thread, suffix)
		}
		parts := strings.SplitN(subject, ".", 4)
		if len(parts) < 4 {
			return
		}
		thread, suffix := parts[2], parts[3]
		d.mu.Lock()
		ch := d.waiters[thread]
		d.mu.Unlock()
		if ch == nil {
			return
		}
		n := note{suffix: suffix, at: at}
		if strings.HasPrefix(suffix, "elicitation.requested") {
			var p struct {
				Meta struct {
					ID string `json:"drupal.org/ai.elicitation_id"`
				} `json:"_meta"`
			}
			_ = json.Unmarshal(m.Data(), &p)
			n.elicitationID = p.Meta.ID
		}
		select {
		case ch <- n:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", stream, err)
	}
	return d, nil
}

// expect registers interest in thread's events; call the returned func
// when done.
func (d *dispatcher) expect(thread string) (<-chan note, func()) {
	ch := make(chan note, 8)
	d.mu.Lock()
	d.waiters[thread] = ch
	d.mu.Unlock()
	return ch, func() {
		d.mu.Lock()
		delete(d.waiters, thread)
		d.mu.Unlock()
	}
}

func (d *dispatcher) stop() {
	if d != nil && d.cc != nil {
		d.cc.Stop()
	}
}

// failure suffixes end a wait with an error.
var failures = []string{"turn.failed", "turn.rejected", "elicitation.rejected", "elicitation.expired", "elicitation.cancelled"}

// await returns the first note with suffix want; a failure event or the
// timeout is an error.
func await(ctx context.Context, ch <-chan note, want string, timeout time.Duration) (note, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case n := <-ch:
			if n.suffix == want {
				return n, nil
			}
			for _, f := range failures {
				if n.suffix == f {
					return n, fmt.Errorf("got %s while waiting for %s", n.suffix, want)
				}
			}
		case <-t.C:
			return note{}, fmt.Errorf("%w: %s", errTimeout, want)
		case <-ctx.Done():
			return note{}, ctx.Err()
		}
	}
}
