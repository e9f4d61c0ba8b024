package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// In-memory fakes of the processor's dependencies (deps.go): the handlers'
// logic tested without NATS, beside the e2e tests on a real server.

type memRecord struct {
	data []byte
	rev  uint64
}

type memThreads struct {
	mu   sync.Mutex
	recs map[string]memRecord
	rev  uint64
	// loads counts Load calls (reads of the bucket).
	loads int
}

func (m *memThreads) load(id string) (*Thread, uint64) {
	r, ok := m.recs[id]
	if !ok {
		return &Thread{Format: ThreadFormat, ID: id, State: ThreadIdle}, 0
	}
	var t Thread
	if err := json.Unmarshal(r.data, &t); err != nil {
		panic(err)
	}
	return &t, r.rev
}

func (m *memThreads) Load(_ context.Context, id string) (*Thread, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads++
	t, rev := m.load(id)
	return t, rev, nil
}

// Save follows threadBucket.Save: revision-checked (0: must not exist).
func (m *memThreads) Save(_ context.Context, t *Thread, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, cur := m.load(t.ID); cur != rev {
		return 0, kvstate.ErrConflict
	}
	t.Format = ThreadFormat
	data, _ := json.Marshal(t)
	m.rev++
	m.recs[t.ID] = memRecord{data, m.rev}
	return m.rev, nil
}

func (m *memThreads) Reset(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, id)
	return nil
}

// memPaused follows kvstate.PausedStore's rules for Save (tested there on
// a real server) and its TTL rule (no write past ExpiresAt).
type memPaused struct {
	mu   sync.Mutex
	recs map[string]memRecord
	rev  uint64
	// loads and saves count Load and Save calls.
	loads, saves int
}

func (m *memPaused) load(thread string) (*kvstate.PausedTurn, uint64, error) {
	r, ok := m.recs[thread]
	if !ok {
		return nil, 0, kvstate.ErrNotFound
	}
	var p kvstate.PausedTurn
	if err := json.Unmarshal(r.data, &p); err != nil {
		panic(err)
	}
	if time.Now().After(p.ExpiresAt) {
		return nil, 0, kvstate.ErrNotFound
	}
	return &p, r.rev, nil
}

func (m *memPaused) put(p *kvstate.PausedTurn) (uint64, error) {
	if !time.Now().Before(p.ExpiresAt) {
		return 0, kvstate.ErrExpired
	}
	data, _ := json.Marshal(p)
	m.rev++
	m.recs[p.Thread] = memRecord{data, m.rev}
	return m.rev, nil
}

func (m *memPaused) Load(_ context.Context, thread string) (*kvstate.PausedTurn, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads++
	return m.load(thread)
}

func (m *memPaused) Save(_ context.Context, p *kvstate.PausedTurn) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saves++
	p.Format = kvstate.PausedFormat
	if old, rev, err := m.load(p.Thread); err == nil {
		switch {
		case old.TurnID == p.TurnID && old.RunID == p.RunID &&
			slices.EqualFunc(old.Elicitations, p.Elicitations, func(a, b kvstate.Elicitation) bool { return a.ID == b.ID }):
			return rev, nil
		case p.RunSeq != 0 && p.RunSeq <= old.RunSeq:
			return 0, kvstate.ErrStale
		case old.TurnID == p.TurnID && !old.Settled():
			return 0, kvstate.ErrConflict
		}
	}
	return m.put(p)
}

// Update follows kvstate.PausedStore.Update: revision-checked, and no
// write past ExpiresAt.
func (m *memPaused) Update(_ context.Context, p *kvstate.PausedTurn, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.recs[p.Thread]; !ok || r.rev != rev {
		return 0, kvstate.ErrConflict
	}
	p.Format = kvstate.PausedFormat
	return m.put(p)
}

func (m *memPaused) Delete(_ context.Context, thread string, rev uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[thread]
	switch {
	case !ok:
		return kvstate.ErrNotFound
	case r.rev != rev:
		return kvstate.ErrConflict
	}
	delete(m.recs, thread)
	return nil
}

func (m *memPaused) Mutate(_ context.Context, thread string, fn func(p *kvstate.PausedTurn) error) (*kvstate.PausedTurn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, _, err := m.load(thread)
	if err != nil {
		return nil, err
	}
	if err := fn(p); err != nil {
		if errors.Is(err, kvstate.ErrNoChange) {
			return p, nil
		}
		return nil, err
	}
	if _, err := m.put(p); err != nil {
		return nil, err
	}
	return p, nil
}

func (m *memPaused) ConsumeExpired(ctx context.Context, _ string, _ func(context.Context, string) error) error {
	<-ctx.Done()
	return nil
}

// memPub records what was published; fail, if set, fails matching publishes.
type memPub struct {
	mu   sync.Mutex
	sent []*event.Event
	fail func(e *event.Event) bool
}

func (m *memPub) Publish(_ context.Context, subject string, e *event.Event) (*jetstream.PubAck, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil && m.fail(e) {
		return nil, fmt.Errorf("publishing %s on %s: connection lost", e.Type(), subject)
	}
	m.sent = append(m.sent, e)
	return &jetstream.PubAck{}, nil
}

// of returns the events of type typ published so far.
func (m *memPub) of(typ events.Type) []*event.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*event.Event
	for _, e := range m.sent {
		if events.TypeOf(e) == typ {
			out = append(out, e)
		}
	}
	return out
}

// memChat answers the PARLEY_INPUT reads of the processor: the last
// turn.requested sequence per subject.
type memChat struct {
	mu   sync.Mutex
	last map[string]uint64
}

func (m *memChat) GetMsg(context.Context, uint64, ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	return nil, jetstream.ErrMsgNotFound
}

func (m *memChat) GetLastMsgForSubject(_ context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seq, ok := m.last[subject]
	if !ok {
		return nil, jetstream.ErrMsgNotFound
	}
	return &jetstream.RawStreamMsg{Subject: subject, Sequence: seq}, nil
}

// harness is a Processor on fakes and a thread "t" to drive it on.
type harness struct {
	t      *testing.T
	p      *Processor
	pub    *memPub
	chat   *memChat
	paused *memPaused
	// threads is the stored thread records (p.threads caches them).
	threads *memThreads
	ctx     context.Context
}

func newHarness(t *testing.T) *harness {
	pub := &memPub{}
	chat := &memChat{last: map[string]uint64{}}
	paused := &memPaused{recs: map[string]memRecord{}}
	mem := &memThreads{recs: map[string]memRecord{}}
	p := &Processor{pub: pub, threads: newThreads(mem, true), paused: newPausedCache(paused, true), input: chat,
		opts: Options{PauseTTL: time.Hour, DefaultAgent: "default", OrderWait: time.Second},
		log:  slog.New(slog.DiscardHandler)}
	return &harness{t: t, p: p, pub: pub, chat: chat, paused: paused, threads: mem, ctx: t.Context()}
}

// inStream records that a turn.requested of thread t is in PARLEY_INPUT at seq.
func (h *harness) inStream(seq uint64) {
	h.chat.mu.Lock()
	defer h.chat.mu.Unlock()
	subject := events.InputThreadSubjects("t", events.ChatTurnRequested)
	h.chat.last[subject] = max(h.chat.last[subject], seq)
}

// message handles the user message id at stream sequence seq.
func (h *harness) message(id string, seq uint64) error {
	h.t.Helper()
	h.inStream(seq)
	e, err := events.NewWithID(id, "/test", events.TypeTurnRequested, "t", events.TurnRequested{
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: "message " + id}})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatTurnRequested),
		StreamSeq: seq, NumDelivered: 1})
}

// run handles a run outcome (data) of type typ with event id at runs
// stream sequence seq.
func (h *harness) run(typ events.Type, id string, seq uint64, data any) {
	h.t.Helper()
	e, err := events.NewWithID(id, events.SourceAgent, typ, "t", data)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.p.HandleRun(h.ctx, &bus.Delivery{Event: e, Subject: "parley.agent.run.x", StreamSeq: seq, NumDelivered: 1}); err != nil {
		h.t.Fatalf("HandleRun(%s %s): %v", typ, id, err)
	}
}

func confirmation(id string) events.PendingElicitation {
	req := schema.NewConfirmationRequest(&schema.Tool{Name: "create_event"}, schema.ToolCall{ID: "call-" + id, Name: "create_event"})
	return events.PendingElicitation{ID: id, Kind: events.KindToolConfirmation, Tool: "create_event", Request: *req}
}

func (h *harness) pause(msgID, id string, seq uint64, questions ...string) {
	h.t.Helper()
	turn := events.DerivedID("turn", msgID)
	in := events.RunPaused{RunID: turn, TurnID: turn, Agent: "default", Snapshot: json.RawMessage(`{}`)}
	for _, q := range questions {
		in.Elicitations = append(in.Elicitations, confirmation(q))
	}
	h.run(events.TypeRunPaused, id, seq, in)
}

func (h *harness) answer(id, question string) {
	h.t.Helper()
	e, err := events.NewWithID(id, "/test", events.TypeElicitationResponded, "t", events.ElicitationResponded{
		ElicitationID: question, Action: schema.ActionAccept})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatElicitationResponded),
		StreamSeq: 100, NumDelivered: 1}); err != nil {
		h.t.Fatalf("answer %s: %v", id, err)
	}
}

// runsStarted lists the turns run.requested was published for, in order.
func (h *harness) runsStarted() []string {
	var turns []string
	for _, e := range h.pub.of(events.TypeRunRequested) {
		d, _ := events.Data[events.RunRequested](e)
		turns = append(turns, d.TurnID)
	}
	return turns
}

// Issue 8 item 1 at the handler: the first run.paused of a turn handled
// again after the turn paused a second time and completed changes nothing
// and announces nothing; the thread's next turn pauses normally.
func TestHandlerLatePauseIgnored(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	turn := events.DerivedID("turn", "m1")
	h.pause("m1", "p1", 10, "q1")
	h.answer("a1", "q1")
	h.pause("m1", "p2", 12, "q2")
	h.answer("a2", "q2")
	h.run(events.TypeRunCompleted, "c1", 14, events.RunCompleted{RunID: turn, TurnID: turn,
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	before := len(h.pub.sent)

	h.pause("m1", "p1", 10, "q1") // the late copy
	if n := len(h.pub.sent); n != before {
		t.Fatalf("the late pause published %d events: %v", n-before, h.pub.sent[before:])
	}
	rec, _, err := h.paused.Load(h.ctx, "t")
	if err != nil || rec.Find("q2") == nil || !rec.Settled() {
		t.Fatalf("paused record after the late pause = %+v, %v; want the settled second pause", rec, err)
	}
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	h.pause("m2", "p3", 16, "q3")
	if got := h.pub.of(events.TypeElicitationRequested); len(got) != 3 {
		t.Fatalf("%d questions asked, want 3 (q1, q2, q3)", len(got))
	}
}

// Issue 8 items 2 and 4 at the handler: m2 is in the stream before m1's
// turn pauses (handled after the pause, it still queues); m3, sent after
// the pause, supersedes it, and m2 runs before m3.
func TestHandlerQueueAndSupersedeInStreamOrder(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.inStream(2) // m2 is published, not handled yet
	h.pause("m1", "p1", 10, "q1")
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	if n := len(h.pub.of(events.TypeElicitationCancelled)); n != 0 {
		t.Fatal("m2, sent before the pause, superseded it")
	}
	if err := h.message("m3", 3); err != nil {
		t.Fatal(err)
	}
	c := h.pub.of(events.TypeElicitationCancelled)
	if len(c) != 1 {
		t.Fatalf("%d elicitation.cancelled, want 1", len(c))
	}
	if d, _ := events.Data[events.ElicitationCancelled](c[0]); !slices.Equal(d.ElicitationIDs, []string{"q1"}) {
		t.Errorf("cancelled %v, want [q1]", d.ElicitationIDs)
	}
	want := []string{events.DerivedID("turn", "m1"), events.DerivedID("turn", "m2")}
	if got := h.runsStarted(); !slices.Equal(got, want) {
		t.Fatalf("runs started %v, want m1's then m2's (m3 waits)", got)
	}
	m2 := events.DerivedID("turn", "m2")
	h.run(events.TypeRunCompleted, "c2", 11, events.RunCompleted{RunID: m2, TurnID: m2,
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "ok"}})
	if got := h.runsStarted(); len(got) != 3 || got[2] != events.DerivedID("turn", "m3") {
		t.Fatalf("runs started %v, want m3's last", got)
	}
}

// Issue 8 item 3 at the handler: the superseding message fails at each
// point between storing the withdrawal and announcing it; its redelivery
// announces elicitation.cancelled.
func TestHandlerSupersedeAnnouncedOnRedelivery(t *testing.T) {
	for _, failAt := range []string{"withdrawn, thread not recorded", "recorded, not announced"} {
		t.Run(failAt, func(t *testing.T) {
			h := newHarness(t)
			if err := h.message("m1", 1); err != nil {
				t.Fatal(err)
			}
			h.pause("m1", "p1", 10, "q1")
			if failAt == "withdrawn, thread not recorded" {
				// What a process that died after the paused record's
				// write left behind.
				if _, err := h.paused.Mutate(h.ctx, "t", func(p *kvstate.PausedTurn) error {
					p.Elicitations[0].Status = kvstate.StatusCancelled
					p.WithdrawnBy, p.Withdrawn = "m2", []string{"q1"}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			} else {
				h.pub.fail = func(e *event.Event) bool { return events.TypeOf(e) == events.TypeElicitationCancelled }
				if err := h.message("m2", 2); err == nil {
					t.Fatal("the announcement failed, yet the message was acked")
				}
				h.pub.fail = nil
			}
			if err := h.message("m2", 2); err != nil { // the redelivery
				t.Fatal(err)
			}
			c := h.pub.of(events.TypeElicitationCancelled)
			if len(c) != 1 {
				t.Fatalf("%d elicitation.cancelled after the redelivery, want 1", len(c))
			}
			if d, _ := events.Data[events.ElicitationCancelled](c[0]); !slices.Equal(d.ElicitationIDs, []string{"q1"}) ||
				d.TurnID != events.DerivedID("turn", "m1") {
				t.Errorf("cancelled %+v, want q1 of m1's turn", d)
			}
			if got := h.runsStarted(); len(got) != 2 || got[1] != events.DerivedID("turn", "m2") {
				t.Errorf("runs started %v, want m2's after m1's", got)
			}
		})
	}
}

// Issue 8 item 6 at the handler: after one of two questions is answered,
// the expiry names only the other.
func TestHandlerExpiryListsOnlyPending(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1", "q2")
	h.answer("a1", "q1")
	h.paused.mu.Lock()
	delete(h.paused.recs, "t") // the TTL passed
	h.paused.mu.Unlock()
	if err := h.p.onExpired(h.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	x := h.pub.of(events.TypeElicitationExpired)
	if len(x) != 1 {
		t.Fatalf("%d elicitation.expired, want 1", len(x))
	}
	if d, _ := events.Data[events.ElicitationExpired](x[0]); !slices.Equal(d.ElicitationIDs, []string{"q2"}) {
		t.Errorf("expired %v, want only [q2]", d.ElicitationIDs)
	}
}
