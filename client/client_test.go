package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsserver"
	"github.com/parley-dev/parley/schema"
)

// restartable is an embedded server that can be stopped and started again
// on the same port and store, as a NATS restart in production.
type restartable struct {
	t    *testing.T
	dir  string
	addr string
	mu   sync.Mutex
	srv  *server.Server
}

func newRestartable(t *testing.T) *restartable {
	t.Helper()
	r := &restartable{t: t, dir: t.TempDir(), addr: "127.0.0.1:0"}
	r.start()
	_, port, _ := net.SplitHostPort(r.srv.Addr().String())
	r.addr = net.JoinHostPort("127.0.0.1", port)
	t.Cleanup(r.stop)
	return r
}

func (r *restartable) start() {
	r.t.Helper()
	srv, err := natsserver.Start(natsserver.Options{Listen: r.addr, DataDir: r.dir})
	if err != nil {
		r.t.Fatal(err)
	}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
}

func (r *restartable) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv != nil {
		r.srv.Shutdown()
		r.srv.WaitForShutdown()
		r.srv = nil
	}
}

func (r *restartable) url() string { return "nats://" + r.addr }

// newClient connects (reconnecting forever) and ensures parley's streams.
func newClient(t *testing.T, url string, retry RetryPolicy) *Client {
	t.Helper()
	nc, err := Connect(url, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	return NewWithOptions(b, &Options{Retry: retry})
}

// publishChat stores a turn.completed on thread in PARLEY_CHAT, as the
// processor does (retrying like the client), for the tests of Watch.
func publishChat(t *testing.T, cl *Client, thread, text string) (*event.Event, error) {
	t.Helper()
	e, err := events.New(events.SourceProcessor, events.TypeTurnCompleted, thread, events.TurnCompleted{TurnID: "turn-" + text,
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: text}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Publish(t.Context(), cl.Bus(), events.ChatSubject(thread, events.ChatTurnCompleted), e, cl.retry)
	return e, err
}

// storedWithID counts the messages of PARLEY_INPUT on subject whose
// Nats-Msg-Id is id (a work queue: read by sequence, not by a consumer).
func storedWithID(t *testing.T, cl *Client, subject, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var stream jetstream.Stream
	var err error
	for { // right after an election the API may answer 503 for a moment
		if stream, err = cl.Bus().JetStream().Stream(ctx, events.StreamInput); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	n := 0
	for seq := uint64(1); ; seq++ {
		m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return n
		}
		if err != nil {
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			seq--
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if m.Header.Get(jetstream.MsgIDHeader) == id {
			n++
		}
		seq = m.Sequence
	}
}

// A publish made while the server is down is retried with the same event
// (Nats-Msg-Id) until the server is back: it succeeds within the budget
// and the stream holds the event once. A publish of the same event again
// is acknowledged as a duplicate and stores nothing.
func TestPublishRidesOutServerRestart(t *testing.T) {
	r := newRestartable(t)
	var retries sync.Map
	cl := newClient(t, r.url(), RetryPolicy{Budget: 20 * time.Second, AttemptTimeout: 500 * time.Millisecond,
		OnRetry: func(n int, err error) { retries.Store(n, err) }})
	e, err := cl.TurnRequest("restart", "", "hello", "tester")
	if err != nil {
		t.Fatal(err)
	}
	r.stop()
	done := make(chan error, 1)
	go func() {
		_, err := cl.Publish(t.Context(), e)
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	r.start()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Publish across a restart: %v", err)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("Publish did not return")
	}
	if _, ok := retries.Load(1); !ok {
		t.Error("OnRetry was never called: the server was down for the first try")
	}
	ack, err := cl.Publish(t.Context(), e)
	if err != nil || !ack.Duplicate {
		t.Errorf("second Publish of the same event = %+v, %v; want a duplicate ack", ack, err)
	}
	subject := events.InputSubject(events.PrincipalIntegrator, "restart", events.ChatTurnRequested)
	if n := storedWithID(t, cl, subject, e.ID()); n != 1 {
		t.Errorf("stored %d copies of %s, want 1", n, e.ID())
	}
}

// When the budget runs out the error says so (ErrNotConfirmed, the event
// ID, the tries), instead of "context deadline exceeded".
func TestPublishBudgetRunsOut(t *testing.T) {
	r := newRestartable(t)
	cl := newClient(t, r.url(), RetryPolicy{Budget: 1500 * time.Millisecond, AttemptTimeout: 300 * time.Millisecond})
	e, err := cl.TurnRequest("down", "", "hello", "tester")
	if err != nil {
		t.Fatal(err)
	}
	r.stop()
	start := time.Now()
	_, err = cl.Publish(t.Context(), e)
	var ue *UnconfirmedError
	if !errors.Is(err, ErrNotConfirmed) || !errors.As(err, &ue) || ue.EventID != e.ID() || ue.Attempts < 2 {
		t.Fatalf("Publish with the server down = %v; want an UnconfirmedError naming %s after several tries", err, e.ID())
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Publish took %s, budget 1.5s", el)
	}
	if msg := err.Error(); strings.Contains(msg, "context deadline exceeded") {
		t.Errorf("error text leaks the context error: %q", msg)
	}
}

// A publish to a subject whose stream appears later (workers starting
// while the CLI sends; JetStream answers "no responders", as during a
// stream leader election) is retried with the same event until the
// stream exists: one event stored, no duplicate. With no stream at all,
// the budget runs out with ErrNoStream.
func TestPublishWaitsForStream(t *testing.T) {
	r := newRestartable(t)
	nc, err := Connect(r.url(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sawNoStream bool
	cl := NewWithOptions(b, &Options{Retry: RetryPolicy{Budget: 20 * time.Second, AttemptTimeout: 500 * time.Millisecond,
		OnRetry: func(_ int, err error) { sawNoStream = sawNoStream || errors.Is(err, ErrNoStream) }}})
	e, err := cl.TurnRequest("later", "", "hello", "tester")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(time.Second)
		_ = b.EnsureStreams(context.Background())
	}()
	if _, err := cl.Publish(t.Context(), e); err != nil {
		t.Fatalf("Publish before the stream exists: %v", err)
	}
	if !sawNoStream {
		t.Error("OnRetry never said that no stream stores the subject")
	}
	if n := storedWithID(t, cl, events.InputSubject(events.PrincipalIntegrator, "later", events.ChatTurnRequested), e.ID()); n != 1 {
		t.Errorf("stored %d copies, want 1", n)
	}

	r2 := newRestartable(t)
	nc2, err := Connect(r2.url(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	b2, err := bus.New(nc2, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl2 := NewWithOptions(b2, &Options{Retry: RetryPolicy{Budget: time.Second}})
	if _, err := cl2.Send(t.Context(), "nostream", "", "hello", "tester"); !errors.Is(err, ErrNoStream) {
		t.Errorf("Send with no stream = %v; want ErrNoStream", err)
	}
}

// consumers returns the names of PARLEY_CHAT's consumers.
func consumers(t *testing.T, cl *Client) []string {
	t.Helper()
	s, err := cl.Bus().JetStream().Stream(t.Context(), events.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range s.ConsumerNames(t.Context()).Name() {
		names = append(names, n)
	}
	return names
}

// A Watch that ends deletes its consumer before closing its channel: no
// consumer is left on the server (each call used to leave one for 5
// minutes).
func TestWatchLeavesNoConsumer(t *testing.T) {
	r := newRestartable(t)
	cl := newClient(t, r.url(), RetryPolicy{})
	for i := range 3 {
		ctx, cancel := context.WithCancel(t.Context())
		items, err := cl.Watch(ctx, WatchOptions{Thread: "w" + strconv.Itoa(i), FromStart: true})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(consumers(t, cl)); n != 1 {
			t.Fatalf("while watching: %d consumers, want 1", n)
		}
		cancel()
		for range items {
		}
	}
	if names := consumers(t, cl); len(names) != 0 {
		t.Errorf("after the watches ended: consumers %v, want none", names)
	}
}

// A Watch resumes through a server restart: it reports the disconnection
// and the reconnection, and delivers an event published after the
// restart, once.
func TestWatchResumesThroughRestart(t *testing.T) {
	r := newRestartable(t)
	cl := newClient(t, r.url(), RetryPolicy{Budget: 20 * time.Second})
	var mu sync.Mutex
	var statuses []WatchStatus
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	items, err := cl.Watch(ctx, WatchOptions{Thread: "resume", OnStatus: func(s WatchStatus) {
		mu.Lock()
		statuses = append(statuses, s)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	before, err := publishChat(t, cl, "resume", "before")
	if err != nil {
		t.Fatal(err)
	}
	expect := func(id string) {
		t.Helper()
		for {
			select {
			case it := <-items:
				if it.Event != nil && it.Event.ID() == id {
					return
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("event %s not delivered", id)
			}
		}
	}
	expect(before.ID())
	r.stop()
	time.Sleep(500 * time.Millisecond)
	r.start()
	after, err := publishChat(t, cl, "resume", "after")
	if err != nil {
		t.Fatal(err)
	}
	expect(after.ID())
	select {
	case it := <-items:
		t.Errorf("unexpected extra event %v after the restart", it.Event)
	case <-time.After(300 * time.Millisecond):
	}
	mu.Lock()
	defer mu.Unlock()
	got := fmt.Sprint(statuses)
	if len(statuses) < 2 || statuses[0] != WatchDisconnected {
		t.Errorf("statuses %s; want disconnected, then reconnected", got)
	}
}

func TestWatchConsumers(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"abc_3", "[abc_3 abc_2 abc_1]"},
		{"abc_1", "[abc_1]"},
		{"a_b_12", "[a_b_12 a_b_11 a_b_10 a_b_9 a_b_8 a_b_7 a_b_6 a_b_5]"},
		{"plain", "[plain]"},
	} {
		if got := fmt.Sprint(watchConsumers(tt.in)); got != tt.want {
			t.Errorf("watchConsumers(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// countingHandler counts the log records whose message is msg.
type countingHandler struct {
	msg string
	n   *atomic.Int32
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// A publish retries in one loop: every resend the bus makes is one the
// caller's OnRetry hears of (a CLI says "not confirmed yet" for each), and
// the tries the error counts are the bus's; no loop of the client's own
// wraps the bus's.
func TestPublishRetriesInOneLoop(t *testing.T) {
	r := newRestartable(t)
	nc, err := Connect(r.url(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var resent atomic.Int32
	b, err := bus.New(nc, &bus.Options{Logger: slog.New(countingHandler{msg: "publish not acknowledged; retrying", n: &resent})})
	if err != nil {
		t.Fatal(err)
	}
	var heard atomic.Int32
	cl := NewWithOptions(b, &Options{Retry: RetryPolicy{Budget: 1500 * time.Millisecond,
		OnRetry: func(int, error) { heard.Add(1) }}})
	e, err := cl.TurnRequest("nostream", "", "hello", "tester")
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Publish(t.Context(), e)
	if !errors.Is(err, ErrNoStream) {
		t.Fatalf("Publish with no stream = %v; want ErrNoStream", err)
	}
	if resent.Load() == 0 || heard.Load() != resent.Load() {
		t.Errorf("the bus resent %d times, OnRetry heard of %d: want every resend heard, in one loop", resent.Load(), heard.Load())
	}
}
