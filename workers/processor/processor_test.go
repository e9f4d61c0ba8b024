package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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

// memThreads is a kvstate.Records of thread records in memory, with the
// bucket's revision checks.
type memThreads struct {
	mu   sync.Mutex
	recs map[string]memRecord
	rev  uint64
	// loads counts Get calls (reads of the bucket).
	loads int
}

var _ kvstate.Records = (*memThreads)(nil)

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

// save stores t as it is (no stamps) if the record is still at rev.
func (m *memThreads) save(t *Thread, rev uint64) error {
	data, _ := json.Marshal(t)
	_, err := m.Update(context.Background(), t.ID, data, rev, 0)
	return err
}

func (m *memThreads) Get(_ context.Context, id string) (json.RawMessage, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads++
	r, ok := m.recs[id]
	if !ok {
		return nil, 0, kvstate.ErrNotFound
	}
	return r.data, r.rev, nil
}

// write stores data under id if its revision is rev (0: absent).
func (m *memThreads) write(id string, data []byte, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.recs[id]; cur.rev != rev || (rev == 0 && ok) {
		return 0, kvstate.ErrConflict
	}
	m.rev++
	m.recs[id] = memRecord{data, m.rev}
	return m.rev, nil
}

func (m *memThreads) Create(_ context.Context, id string, v json.RawMessage, _ time.Duration) (uint64, error) {
	return m.write(id, v, 0)
}

func (m *memThreads) CreateNew(_ context.Context, id string, v json.RawMessage) (uint64, error) {
	return m.write(id, v, 0)
}

func (m *memThreads) Update(_ context.Context, id string, v json.RawMessage, rev uint64, _ time.Duration) (uint64, error) {
	return m.write(id, v, rev)
}

func (m *memThreads) CreateUntil(_ context.Context, id string, v json.RawMessage, _ time.Time) (uint64, error) {
	return m.write(id, v, 0)
}

func (m *memThreads) UpdateUntil(_ context.Context, id string, v json.RawMessage, rev uint64, _ time.Time) (uint64, error) {
	return m.write(id, v, rev)
}

func (m *memThreads) Put(_ context.Context, id string, v json.RawMessage) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rev++
	m.recs[id] = memRecord{v, m.rev}
	return m.rev, nil
}

func (m *memThreads) Delete(_ context.Context, id string, rev uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.recs[id]; rev != 0 && (!ok || cur.rev != rev) {
		return kvstate.ErrConflict
	}
	delete(m.recs, id)
	return nil
}

// memPauses follows pauseBucket: a record is written once per key (a
// second Create keeps the first), and is gone (kvstate.ErrNotFound) once
// expire is called (its TTL passed).
type memPauses struct {
	mu   sync.Mutex
	recs map[string][]byte
	// loads and creates count Load and Create calls.
	loads, creates int
}

func (m *memPauses) Create(_ context.Context, key string, rec *pauseRecord, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.creates++
	if !time.Now().Before(until) {
		return kvstate.ErrExpired
	}
	switch data, ok := m.recs[key]; {
	case !ok:
		m.recs[key], _ = json.Marshal(rec)
	case data == nil:
		return kvstate.ErrExpired // a key is written once
	default:
		keepStoredExpiry(key, data, rec)
	}
	return nil
}

func (m *memPauses) Load(_ context.Context, key string) (json.RawMessage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads++
	data, ok := m.recs[key]
	if !ok || data == nil {
		return nil, kvstate.ErrNotFound
	}
	return data, nil
}

// Extend keeps a live record (the fake has no TTLs: see expire).
func (m *memPauses) Extend(_ context.Context, key string, _ time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if data, ok := m.recs[key]; !ok || data == nil {
		return kvstate.ErrNotFound
	}
	return nil
}

// expire removes the record under key (its TTL passed), leaving the
// key's expiry marker.
func (m *memPauses) expire(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[key] = nil
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
	pauses *memPauses
	// threads is the stored thread records (p.threads caches them).
	threads *memThreads
	ctx     context.Context
}

func newHarness(t *testing.T) *harness {
	pub := &memPub{}
	chat := &memChat{last: map[string]uint64{}}
	pauses := &memPauses{recs: map[string][]byte{}}
	mem := &memThreads{recs: map[string]memRecord{}}
	p := newProcessor(Options{PauseTTL: time.Hour, DefaultAgent: "default", OrderWait: time.Second,
		Logger: slog.New(slog.DiscardHandler)}, nil, pub, mem, pauses, chat)
	return &harness{t: t, p: p, pub: pub, chat: chat, pauses: pauses, threads: mem, ctx: t.Context()}
}

// legacy turns thread t's paused turn into what the old format
// stored: the thread paused without it, and the paused turn a record of
// its own under the thread ID (legacyPauseFormat), which change may edit.
// The processor's caches forget both.
func (h *harness) legacy(change func(l *legacyPause)) {
	h.t.Helper()
	h.threads.mu.Lock()
	defer h.threads.mu.Unlock()
	th, _ := h.threads.load("t")
	pt := th.Paused
	l := &legacyPause{pauseRecord: pauseRecord{Format: legacyPauseFormat, Thread: "t", TurnID: pt.TurnID, RunID: pt.RunID,
		RunSeq: pt.RunSeq, ExpiresAt: pt.ExpiresAt, Snapshot: json.RawMessage(`{"legacy":true}`)},
		Elicitations: pt.Elicitations, CreatedAt: pt.CreatedAt, Agent: pt.Agent, TraceParent: pt.TraceParent}
	if change != nil {
		change(l)
	}
	data, err := json.Marshal(l)
	if err != nil {
		h.t.Fatal(err)
	}
	h.pauses.mu.Lock()
	h.pauses.recs["t"] = data
	delete(h.pauses.recs, pt.Record)
	h.pauses.mu.Unlock()
	th.Paused, th.LegacyPending = nil, pt.PendingIDs()
	data, _ = json.Marshal(th)
	h.threads.rev++
	h.threads.recs["t"] = memRecord{data, h.threads.rev}
	h.p.threads.Forget("t")
	h.p.pauses.cache.Drop(pt.Record)
}

// paused returns thread t's paused turn as stored (nil if none).
func (h *harness) paused() *PausedTurn {
	h.threads.mu.Lock()
	defer h.threads.mu.Unlock()
	th, _ := h.threads.load("t")
	return th.Paused
}

// stored returns thread t as stored.
func (h *harness) stored() *Thread {
	h.threads.mu.Lock()
	defer h.threads.mu.Unlock()
	th, _ := h.threads.load("t")
	return th
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

// At the handler: the first run.paused of a turn handled
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
	if rec := h.paused(); rec == nil || rec.Find("q2") == nil || !rec.Settled() {
		t.Fatalf("paused turn after the late pause = %+v; want the settled second pause", rec)
	}
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	h.pause("m2", "p3", 16, "q3")
	if got := h.pub.of(events.TypeElicitationRequested); len(got) != 3 {
		t.Fatalf("%d questions asked, want 3 (q1, q2, q3)", len(got))
	}
}

// At the handler: m2 is in the stream before m1's
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

// At the handler: the superseding message fails between
// storing the withdrawal and announcing it (or an old-format processor, which
// stored the withdrawal in a record of its own, died after that write);
// its redelivery announces elicitation.cancelled.
func TestHandlerSupersedeAnnouncedOnRedelivery(t *testing.T) {
	for _, failAt := range []string{"withdrawn in the old format, thread not recorded", "recorded, not announced"} {
		t.Run(failAt, func(t *testing.T) {
			h := newHarness(t)
			if err := h.message("m1", 1); err != nil {
				t.Fatal(err)
			}
			h.pause("m1", "p1", 10, "q1")
			if failAt == "withdrawn in the old format, thread not recorded" {
				// What an old-format processor that died after its paused
				// record's write left behind.
				h.legacy(func(l *legacyPause) {
					l.Elicitations[0].Status = StatusCancelled
					l.WithdrawnBy, l.Withdrawn = "m2", []string{"q1"}
				})
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

// At the handler: after one of two questions is answered,
// the expiry names only the other.
func TestHandlerExpiryListsOnlyPending(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1", "q2")
	h.answer("a1", "q1")
	key := h.paused().Record
	h.pauses.expire(key) // the TTL passed
	if err := h.p.onExpired(h.ctx, key); err != nil {
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

// A turn paused in the old format (its paused turn a record of its own
// under the thread ID) is adopted: its answer resumes it with that
// record's snapshot, and the thread then holds the paused turn; another
// legacy pause ends with its record's expiry.
func TestLegacyPauseAdopted(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	h.legacy(nil)
	if h.stored().Paused != nil {
		t.Fatal("legacy: the thread still holds its paused turn")
	}
	h.answer("a1", "q1")
	r := h.pub.of(events.TypeRunResumed)
	if len(r) != 1 {
		t.Fatalf("%d run.resumed, want 1 (rejected %q)", len(r), rejectedFor(h, "a1"))
	}
	if d, _ := events.Data[events.RunResumed](r[0]); string(d.Snapshot) != `{"legacy":true}` || len(d.Answers) != 1 {
		t.Errorf("resumed with %s, %d answers; want the legacy record's snapshot and the answer", d.Snapshot, len(d.Answers))
	}
	if th := h.stored(); th.State != ThreadRunning || th.Paused == nil || th.Paused.Record != "t" || !th.Paused.Resumed {
		t.Errorf("thread after the answer: %s, paused %+v; want running, the adopted turn resumed", th.State, th.Paused)
	}

	turn := events.DerivedID("turn", "m1")
	h.run(events.TypeRunCompleted, "c1", 11, events.RunCompleted{RunID: turn, TurnID: turn,
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	h.pause("m2", "p2", 12, "q2")
	h.legacy(nil)
	if err := h.p.onExpired(h.ctx, pauseKey("t", 12)); err != nil {
		t.Fatal(err)
	}
	if h.stored().State != ThreadPaused {
		t.Fatal("the expiry of a record the thread is not paused on ended the pause")
	}
	h.pauses.expire("t")
	h.p.threads.Forget("t") // a replica that did not adopt it before the expiry
	if err := h.p.onExpired(h.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	x := h.pub.of(events.TypeElicitationExpired)
	if th := h.stored(); th.State != ThreadIdle || len(x) != 1 {
		t.Fatalf("after the legacy record's expiry: %s, %d elicitation.expired; want idle, 1", th.State, len(x))
	}
	if d, _ := events.Data[events.ElicitationExpired](x[0]); !slices.Equal(d.ElicitationIDs, []string{"q2"}) {
		t.Errorf("expired %v, want [q2]", d.ElicitationIDs)
	}
}

// A pause whose questions (with room for their answers) would not fit the
// thread record is not recorded: the turn fails run_too_large, the
// thread goes on, and nothing is asked.
func TestPauseTooLargeFailsTheTurn(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	var qs []string
	for i := range MaxPausedBytes/events.MaxAnswerBytes + 1 {
		qs = append(qs, fmt.Sprint("q", i))
	}
	h.pause("m1", "p1", 10, qs...)
	f := h.pub.of(events.TypeTurnFailed)
	if len(f) != 1 {
		t.Fatalf("%d turn.failed, want 1", len(f))
	}
	if d, _ := events.Data[events.TurnFailed](f[0]); d.Reason != reasonRunTooLarge || !strings.Contains(d.Detail, "over the limit") {
		t.Errorf("turn.failed %+v, want run_too_large naming the limit", d)
	}
	if n := len(h.pub.of(events.TypeElicitationRequested)); n != 0 || h.stored().State != ThreadIdle || h.stored().Paused != nil {
		t.Errorf("%d questions asked, thread %s; want none asked, idle", n, h.stored().State)
	}
}

// The winning answer's handler dies after the thread recorded it and
// before run.resumed was published; the answer is redelivered after the
// pause's expiresAt. While the pause record lives (its grace) the
// redelivery resumes the turn; once it is gone too the turn cannot resume
// and fails, and the thread goes on, instead of staying running.
func TestWinnerRedeliveredAfterExpiry(t *testing.T) {
	for _, recordGone := range []bool{false, true} {
		t.Run(fmt.Sprint("recordGone=", recordGone), func(t *testing.T) {
			h := newHarness(t)
			if err := h.message("m1", 1); err != nil {
				t.Fatal(err)
			}
			h.inStream(2)
			h.pause("m1", "p1", 10, "q1")
			if err := h.message("m2", 2); err != nil { // queued behind the pause
				t.Fatal(err)
			}
			h.pub.fail = func(e *event.Event) bool { return events.TypeOf(e) == events.TypeRunResumed }
			if err := h.answerErr("a1", "q1"); err == nil {
				t.Fatal("run.resumed was not published, yet the answer was acked")
			}
			h.pub.fail = nil
			// Time passes: the pause's expiresAt, and maybe its record's TTL.
			func() {
				h.threads.mu.Lock()
				defer h.threads.mu.Unlock()
				th, _ := h.threads.load("t")
				th.Paused.ExpiresAt = time.Now().Add(-time.Second)
				data, _ := json.Marshal(th)
				h.threads.rev++
				h.threads.recs["t"] = memRecord{data, h.threads.rev}
			}()
			key := h.paused().Record
			h.p.threads.Forget("t")
			h.p.pauses.cache.Drop(key)
			if recordGone {
				h.pauses.expire(key)
			}
			if err := h.answerErr("a1", "q1"); err != nil {
				t.Fatal(err)
			}
			resumed, failed := h.pub.of(events.TypeRunResumed), h.pub.of(events.TypeTurnFailed)
			if rejectedFor(h, "a1") != "" {
				t.Fatalf("the winning answer's redelivery was rejected %q", rejectedFor(h, "a1"))
			}
			if !recordGone {
				if len(resumed) != 1 || len(failed) != 0 {
					t.Fatalf("%d run.resumed, %d turn.failed; want the resume", len(resumed), len(failed))
				}
				return
			}
			if len(resumed) != 0 || len(failed) != 1 {
				t.Fatalf("%d run.resumed, %d turn.failed; want the turn failed", len(resumed), len(failed))
			}
			if d, _ := events.Data[events.TurnFailed](failed[0]); d.Reason != events.RejectUnknownOrExpired || d.TurnID != turnOf("m1") {
				t.Errorf("turn.failed %+v, want m1's turn, unknown_or_expired", d)
			}
			if got := h.runsStarted(); len(got) != 2 || got[1] != turnOf("m2") {
				t.Errorf("runs started %v, want the queued m2's next", got)
			}
		})
	}
}

// answerErr handles the accept of question by answer id and returns the
// handler's error.
func (h *harness) answerErr(id, question string) error {
	h.t.Helper()
	e, err := events.NewWithID(id, "/test", events.TypeElicitationResponded, "t", events.ElicitationResponded{
		ElicitationID: question, Action: schema.ActionAccept})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatElicitationResponded),
		StreamSeq: 100, NumDelivered: 1})
}
