package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// Crash and race attacks on the paused-turn state machine:
// each test names the guarantee it attacks and the bad moment it dies at.

// workQueue is PARLEY_INPUT as awaitPredecessors reads it: a work queue,
// so it holds the turn.requested messages of thread t that no processor
// acknowledged yet (handled or not). The subject filter is not checked:
// the tests use one thread.
type workQueue struct {
	mu      sync.Mutex
	pending []uint64
}

func (q *workQueue) add(seqs ...uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, seqs...)
	slices.Sort(q.pending)
}

// ack removes seq (its handler returned nil).
func (q *workQueue) ack(seq uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = slices.DeleteFunc(q.pending, func(s uint64) bool { return s == seq })
}

// GetMsg returns the first message at or after seq (jetstream's
// subject-filtered get).
func (q *workQueue) GetMsg(_ context.Context, seq uint64, _ ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, s := range q.pending {
		if s >= seq {
			return &jetstream.RawStreamMsg{Sequence: s}, nil
		}
	}
	return nil, jetstream.ErrMsgNotFound
}

func (q *workQueue) GetLastMsgForSubject(context.Context, string) (*jetstream.RawStreamMsg, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		return nil, jetstream.ErrMsgNotFound
	}
	return &jetstream.RawStreamMsg{Sequence: q.pending[len(q.pending)-1]}, nil
}

// withWorkQueue makes the harness's processor read PARLEY_INPUT from a
// workQueue, with a short OrderWait.
func withWorkQueue(h *harness) *workQueue {
	q := &workQueue{}
	h.p.input = q
	h.p.opts.OrderWait = 100 * time.Millisecond
	return q
}

// deliver hands the turn.requested id with text at stream sequence seq to
// the processor and returns the handler's verdict (nil: acked).
func (h *harness) deliver(id string, seq uint64, text string) error {
	h.t.Helper()
	e, err := events.NewWithID(id, "/test", events.TypeTurnRequested, "t", events.TurnRequested{
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: text}})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatTurnRequested),
		StreamSeq: seq, NumDelivered: 1})
}

// FIFO: three messages sent back to back to an idle thread, m2, m3 and an
// invalid m4 (no text). The processor that received m2 dies before
// recording it (its redelivery comes after AckWait); m4 is rejected at
// once. m3 must still wait for m2: m4's rejection records its sequence
// as dealt with, but m2, before it, is not.
func TestCrashFIFOAcrossRejectedMessage(t *testing.T) {
	h := newHarness(t)
	q := withWorkQueue(h)
	q.add(2, 3, 4)
	// m4 is handled first, then m3 (m2's processor died holding m2), and
	// m2's redelivery last; a message released to be retried later
	// (RetryLater: it waits for an earlier one) comes back in the next
	// round.
	todo := []struct {
		id   string
		seq  uint64
		text string
	}{{"m4", 4, " "}, {"m3", 3, "third"}, {"m2", 2, "second"}}
	for round := 0; len(todo) > 0; round++ {
		if round == 5 {
			t.Fatalf("messages %v never acked", todo)
		}
		var again = todo[:0:0]
		for _, m := range todo {
			if err := h.deliver(m.id, m.seq, m.text); err != nil {
				again = append(again, m)
				continue
			}
			q.ack(m.seq)
		}
		todo = again
	}
	rejected := map[string]bool{}
	for _, e := range h.pub.of(events.TypeTurnRejected) {
		d, _ := events.Data[events.TurnRejected](e)
		rejected[d.RequestEventID] = true
	}
	if len(rejected) != 1 || !rejected["m4"] {
		t.Errorf("turn.rejected for %v, want only the empty m4", rejected)
	}
	if got, want := h.runsStarted(), []string{turnOf("m2")}; !slices.Equal(got, want) {
		t.Fatalf("runs started %v, want only m2's %s (m3 queues behind it): m3 overtook m2", got, want)
	}
	if got := queueIDs(h.stored()); !slices.Equal(got, []string{"m3"}) {
		t.Errorf("queue %v, want [m3]", got)
	}
}

// indexOf returns the position in h.pub.sent of the first event of type
// typ with turn ID turn (the turnid extension, or run.requested's data),
// or -1.
func (h *harness) indexOf(typ events.Type, turn string) int {
	h.pub.mu.Lock()
	defer h.pub.mu.Unlock()
	for i, e := range h.pub.sent {
		if events.TypeOf(e) != typ {
			continue
		}
		if v, _ := e.Extensions()[events.ExtTurnID].(string); v == turn {
			return i
		}
	}
	return -1
}

// A turn ends before the next turn of its thread starts: m2 queued behind
// m1's paused turn; the pause expires, and the processor handling the
// expiry marker dies (or fails to publish) after the thread write. The
// queued m2 must not start before m1's end (elicitation.expired) is
// announced: else m2's turn runs, and may complete, while m1's end comes
// only with the marker's redelivery (after AckWait), after it — the
// thread's turns end out of order.
func TestCrashExpiryAnnouncedBeforeNextTurnStarts(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.inStream(2)
	h.pause("m1", "p1", 10, "q1")
	if err := h.message("m2", 2); err != nil { // queued behind the pause
		t.Fatal(err)
	}
	key := h.paused().Record
	h.pauses.expire(key)
	h.pub.fail = func(e *event.Event) bool { return events.TypeOf(e) == events.TypeElicitationExpired }
	if err := h.p.onExpired(h.ctx, key); err == nil {
		t.Fatal("the announcement failed, yet the marker was acked")
	}
	h.pub.fail = nil
	if i := h.indexOf(events.TypeRunRequested, turnOf("m2")); i >= 0 {
		t.Errorf("m2's turn started (run.requested) before m1's expiry was announced")
	}
	if err := h.p.onExpired(h.ctx, key); err != nil { // the marker's redelivery
		t.Fatal(err)
	}
	x, r := h.indexOf(events.TypeElicitationExpired, turnOf("m1")), h.indexOf(events.TypeRunRequested, turnOf("m2"))
	if x < 0 || r < 0 || r < x {
		t.Fatalf("elicitation.expired of m1 at %d, run.requested of m2 at %d; want both, the expiry first", x, r)
	}
}

// stallAfterCreate is a pause store whose Create, once, runs then after
// storing the record: what happens while the processor that stored it is
// stalled before its thread write.
type stallAfterCreate struct {
	pauseStore
	then func(key string)
}

func (s *stallAfterCreate) Create(ctx context.Context, key string, rec *pauseRecord, until time.Time) error {
	if err := s.pauseStore.Create(ctx, key, rec, until); err != nil {
		return err
	}
	if f := s.then; f != nil {
		s.then = nil
		f(key)
	}
	return nil
}

// No lost turn: the processor recording a pause stores the pause record,
// then stalls (GC, SIGSTOP, a slow KV write) past the record's TTL but
// less than AckWait, so the run.paused is not redelivered. The record's
// expiry marker is handled meanwhile by another replica, while the thread
// still runs: it changes nothing. Then the stalled processor writes the
// thread paused on that record. Nothing will expire it any more (its
// marker is gone), no answer can be taken (its record is gone): unless
// the pause is ended, the turn never ends.
func TestCrashPauseRecordedAfterItsRecordExpired(t *testing.T) {
	h := newHarness(t)
	h.p.opts.PauseTTL = time.Second // the record lives 2 s: expiresAt + a grace of PauseTTL
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.p.pauses.store = &stallAfterCreate{pauseStore: h.pauses, then: func(key string) {
		time.Sleep(2100 * time.Millisecond) // the stall, past the record's TTL
		h.pauses.expire(key)
		if err := h.p.onExpired(h.ctx, key); err != nil { // the marker, on another replica
			t.Error(err)
		}
	}}
	h.pause("m1", "p1", 10, "q1")
	th := h.stored()
	x := h.indexOf(events.TypeElicitationExpired, turnOf("m1"))
	if th.State == ThreadPaused || x < 0 {
		t.Fatalf("thread %s on turn %s, elicitation.expired at %d; want m1's pause ended (expired) and announced",
			th.State, th.TurnID, x)
	}
	// Another message runs.
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	// (The marker handled on the running thread republished m1's
	// run.requested, same ID: one stored.)
	if got := slices.Compact(h.runsStarted()); len(got) != 2 || got[1] != turnOf("m2") {
		t.Errorf("runs started %v, want m2's after m1's", got)
	}
}

// A turn never ends twice: m1's turn paused, was answered and completed.
// Its pause record is one this version cannot read (written by a newer
// version before a rollback, say). A late copy of the answer (a double
// click delivered after the turn completed) must not fail the completed
// turn: only a turn waiting on the record fails closed.
func TestCrashIncompatibleRecordOfSettledPause(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	h.answer("a1", "q1")
	h.run(events.TypeRunCompleted, "c1", 11, events.RunCompleted{RunID: turnOf("m1"), TurnID: turnOf("m1"),
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	key := h.paused().Record
	h.pauses.mu.Lock()
	h.pauses.recs[key] = []byte(`{"format":3,"thread":"t"}`)
	h.pauses.mu.Unlock()
	h.p.pauses.cache.Drop(key)
	if err := h.answerErr("a1-again", "q1"); err != nil {
		t.Fatal(err)
	}
	if f := h.pub.of(events.TypeTurnFailed); len(f) != 0 {
		d, _ := events.Data[events.TurnFailed](f[0])
		t.Fatalf("turn.failed %+v after turn.completed of the same turn", d)
	}
	if r := rejectedFor(h, "a1-again"); r == "" {
		t.Errorf("the late answer was not rejected")
	}
	if th := h.stored(); th.State != ThreadIdle {
		t.Errorf("thread %s, want idle", th.State)
	}
}

// redeliver hands the turn.requested id at seq to the processor again, as
// the server redelivers it (its first handler died before acking).
func (h *harness) redeliver(id string, seq uint64) error {
	h.t.Helper()
	e, err := events.NewWithID(id, "/test", events.TypeTurnRequested, "t", events.TurnRequested{
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: "message " + id}})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatTurnRequested),
		StreamSeq: seq, NumDelivered: 2})
}

// No duplicate turn, and an accepted message is never also rejected: the
// processor that started m1's turn dies before acking m1. Before m1's
// redelivery (AckWait later) the thread records more than maxHandled
// other event IDs: a burst of messages (queued, then refused
// thread_busy), and, in the second case, m1's turn completing first. The
// redelivered m1 must be recognised as handled, not queued again (its
// turn would run twice) nor refused (it runs).
func TestCrashMessageRedeliveredAfterManyEvents(t *testing.T) {
	for _, completed := range []bool{false, true} {
		t.Run(fmt.Sprint("completed=", completed), func(t *testing.T) {
			h := newHarness(t)
			if err := h.message("m1", 1); err != nil {
				t.Fatal(err)
			}
			seq := uint64(1)
			if completed {
				h.run(events.TypeRunCompleted, "c1", 10, events.RunCompleted{RunID: turnOf("m1"), TurnID: turnOf("m1"),
					Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
				seq++
				if err := h.message(fmt.Sprint("m", seq), seq); err != nil { // runs now
					t.Fatal(err)
				}
			}
			for range maxHandled {
				seq++
				if err := h.message(fmt.Sprint("m", seq), seq); err != nil {
					t.Fatal(err)
				}
			}
			before := h.stored()
			if err := h.redeliver("m1", 1); err != nil {
				t.Fatal(err)
			}
			if r := turnRejectedFor(h, "m1"); r != "" {
				t.Errorf("m1, whose turn runs (or ran), was also rejected %s", r)
			}
			after := h.stored()
			if slices.Contains(queueIDs(after), "m1") || after.TurnID != before.TurnID {
				t.Errorf("after m1's redelivery: active turn %s, queue %v; want m1 not taken again", after.TurnID, queueIDs(after))
			}
		})
	}
}

// ttlPauses is a pause store that keeps each record's TTL (until) and
// expires, on passTime, every record whose TTL ends before a moment
// ahead of the clock: time passing without the test sleeping for it.
type ttlPauses struct {
	*memPauses
	mu    sync.Mutex
	until map[string]time.Time
}

func withTTLPauses(h *harness) *ttlPauses {
	s := &ttlPauses{memPauses: h.pauses, until: map[string]time.Time{}}
	h.p.pauses.store = s
	return s
}

func (s *ttlPauses) Create(ctx context.Context, key string, rec *pauseRecord, until time.Time) error {
	if err := s.memPauses.Create(ctx, key, rec, until); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.until[key]; !ok {
		s.until[key] = until
	}
	return nil
}

func (s *ttlPauses) Extend(ctx context.Context, key string, until time.Time) error {
	if err := s.memPauses.Extend(ctx, key, until); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.until[key] = until
	return nil
}

// passTime expires the records whose TTL ends within d from now.
func (s *ttlPauses) passTime(h *harness, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, until := range s.until {
		if until.Before(time.Now().Add(d)) {
			s.memPauses.expire(key)
			h.p.pauses.cache.Drop(key)
			delete(s.until, key)
		}
	}
}

// A turn ends once, and one turn of a thread runs at a time: the winning
// answer resumes m1's turn and run.resumed is published; its processor
// dies before acking the answer. With a short --pause-ttl the pause
// record's grace was the TTL itself, shorter than AckWait, so the
// answer's redelivery (AckWait later) found the record gone: the resume
// happened (the agent runs the turn), yet the redelivery failed the turn
// (unknown_or_expired) and started the queued m2 beside it; m1's
// run.completed was then stale and dropped, and its effects belonged to a
// turn announced as failed.
func TestCrashResumePublishedThenRecordExpired(t *testing.T) {
	h := newHarness(t)
	h.p.opts.PauseTTL = time.Second
	store := withTTLPauses(h)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.inStream(2)
	h.pause("m1", "p1", 10, "q1")
	if err := h.message("m2", 2); err != nil { // queued behind the pause
		t.Fatal(err)
	}
	h.answer("a1", "q1") // resumed, run.resumed published; the ack is lost with the process
	if n := len(h.pub.of(events.TypeRunResumed)); n != 1 {
		t.Fatalf("%d run.resumed, want 1", n)
	}
	store.passTime(h, bus.DefaultAckWait+time.Second) // the redelivery comes AckWait later
	h.p.threads.Forget("t")
	if err := h.answerErr("a1", "q1"); err != nil { // the redelivery
		t.Fatal(err)
	}
	if f := h.pub.of(events.TypeTurnFailed); len(f) != 0 {
		d, _ := events.Data[events.TurnFailed](f[0])
		t.Errorf("turn.failed %+v for a turn whose resume was published", d)
	}
	if got := h.runsStarted(); slices.Contains(got, turnOf("m2")) {
		t.Errorf("m2's turn started while m1's resumed run goes on")
	}
}

// On a real server: a pause record extended for a resume outlives its
// first TTL, unchanged, and still expires (a rewrite never drops the TTL),
// with a per-key TTL and with a message schedule.
func TestCrashPauseRecordExtended(t *testing.T) {
	for _, schedules := range []bool{false, true} {
		t.Run(fmt.Sprintf("schedules=%v", schedules), func(t *testing.T) {
			testPauseRecordExtended(t, schedules)
		})
	}
}

func testPauseRecordExtended(t *testing.T, schedules bool) {
	_, js := bustest.NewServer(t).JetStream(t)
	b, err := openPauses(t.Context(), js, jetstream.MemoryStorage, 1, schedules)
	if err != nil {
		t.Fatal(err)
	}
	if b.Scheduled() != schedules {
		t.Fatalf("Scheduled() = %v on a 2.15 server, want %v", b.Scheduled(), schedules)
	}
	rec := &pauseRecord{Format: pauseFormat, Thread: "t", TurnID: "turn", RunID: "turn", RunSeq: 3,
		ExpiresAt: time.Now().Add(time.Second), Snapshot: []byte(`{"step":1}`)}
	key := newPauseRecords(b, false).key("t", 3)
	if err := b.Create(t.Context(), key, rec, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	before, err := b.Load(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Extend(t.Context(), key, time.Now().Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // past the first TTL (1 s, whole seconds)
	after, err := b.Load(t.Context(), key)
	if err != nil {
		t.Fatalf("the extended record is gone after its first TTL: %v", err)
	}
	if string(after) != string(before) {
		t.Errorf("the extension changed the record: %s, was %s", after, before)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := b.Load(t.Context(), key); errors.Is(err, kvstate.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the extended record never expired")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := b.Extend(t.Context(), key, time.Now().Add(3*time.Second)); !errors.Is(err, kvstate.ErrNotFound) {
		t.Errorf("extending an expired record: %v, want ErrNotFound", err)
	}
}

// No lost turn, whatever was dead-lettered: m2 and m3 are in the stream;
// m2's handling is stuck (its processor keeps dying), m3 waits for it and
// is dead-lettered in the end (turn.failed dead_lettered). m3's dead
// letter must not record the thread's messages as dealt with past m2,
// still unrecorded: m2's redelivery must then start its turn, not be
// taken for a redelivery of a message the thread recorded already.
func TestCrashDeadLetteredMessageDoesNotSkipEarlierOne(t *testing.T) {
	h := newHarness(t)
	q := withWorkQueue(h)
	q.add(2, 3)
	e3, err := events.NewWithID("m3", "/test", events.TypeTurnRequested, "t", events.TurnRequested{
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: "third"}})
	if err != nil {
		t.Fatal(err)
	}
	d3 := &bus.Delivery{Event: e3, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatTurnRequested),
		StreamSeq: 3, NumDelivered: bus.MaxServerDeliver}
	if err := h.p.compensate(h.ctx, d3, errors.New("waited too long for m2")); err != nil {
		t.Fatal(err)
	}
	q.ack(3) // terminated
	if err := h.redeliver("m2", 2); err != nil {
		t.Fatal(err)
	}
	q.ack(2)
	if got := h.runsStarted(); !slices.Equal(got, []string{turnOf("m2")}) {
		t.Fatalf("runs started %v, want m2's: m2 was dropped as already recorded", got)
	}
}

// flakyThreads fails the next Load once with a transient error (a KV read
// that timed out).
type flakyThreads struct {
	kvstate.Records
	fail bool
}

func (f *flakyThreads) Get(ctx context.Context, id string) (json.RawMessage, uint64, error) {
	if f.fail {
		f.fail = false
		return nil, 0, errors.New("reading parley_threads/t: context deadline exceeded")
	}
	return f.Records.Get(ctx, id)
}

// FIFO: m3 arrives while m2, before it, is still unrecorded; the read of
// the thread with which m3 checks its predecessors fails (a KV timeout).
// m3 must not be taken unchecked: it is retried, and queues behind m2.
func TestCrashFIFOWhenPredecessorCheckFails(t *testing.T) {
	h := newHarness(t)
	q := withWorkQueue(h)
	flaky := &flakyThreads{Records: h.threads}
	h.p.threads = h.p.threadStore(flaky, false)
	q.add(2, 3)
	flaky.fail = true
	if err := h.deliver("m3", 3, "third"); err == nil {
		q.ack(3)
	}
	if err := h.deliver("m2", 2, "second"); err != nil {
		t.Fatal(err)
	}
	q.ack(2)
	if got := h.runsStarted(); !slices.Equal(got, []string{turnOf("m2")}) {
		t.Fatalf("runs started %v, want m2's: m3 overtook m2", got)
	}
}

// Every consumed answer is echoed once, whatever the thread did since:
// the processor that consumes a1 (one of two questions of m1's pause)
// dies before publishing its echo. Before a1's redelivery another
// replica takes a2, which resumes the turn; the turn completes and the
// next message's turn pauses, replacing a1's question in the thread. The
// redelivered a1 must be echoed (its acceptance), once, and neither
// rejected nor consumed again; a stranger's answer under a1's ID is not
// echoed.
func TestCrashAnswerEchoedAfterThreadPausedAgain(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1", "q2")
	h.pub.fail = func(e *event.Event) bool {
		return events.TypeOf(e) == events.TypeElicitationResponded && e.ID() == "a1"
	}
	if err := h.answerErr("a1", "q1"); err == nil { // consumed; the echo is lost with the process
		t.Fatal("answer a1 handled although its echo failed")
	}
	h.pub.fail = nil
	h.p.threads.Forget("t") // another replica
	h.answer("a2", "q2")
	if n := len(h.pub.of(events.TypeRunResumed)); n != 1 {
		t.Fatalf("%d run.resumed, want 1", n)
	}
	h.run(events.TypeRunCompleted, "c1", 11, events.RunCompleted{RunID: turnOf("m1"), TurnID: turnOf("m1"),
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	h.pause("m2", "p2", 12, "q3")
	if th := h.stored(); th.State != ThreadPaused || th.Paused.Find("q1") != nil {
		t.Fatalf("thread %s, paused on %v; want paused on m2's question only", th.State, th.Paused.PendingIDs())
	}
	// A stranger replays a1's ID first: nothing to echo for it.
	stranger, err := events.NewWithID("a1", "/test", events.TypeElicitationResponded, "t", events.ElicitationResponded{
		ElicitationID: "q1", Action: schema.ActionDecline})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: stranger, NumDelivered: 1, StreamSeq: 101,
		Subject: events.InputSubject("mallory", "t", events.ChatElicitationResponded)}); err != nil {
		t.Fatal(err)
	}
	if err := h.answerErr("a1", "q1"); err != nil { // the redelivery
		t.Fatalf("redelivery of a1: %v", err)
	}
	var echoes int
	for _, e := range h.pub.of(events.TypeElicitationResponded) {
		if e.ID() != "a1" {
			continue
		}
		echoes++
		if p, _ := e.Extensions()[events.ExtPrincipal].(string); p != events.PrincipalIntegrator {
			t.Errorf("a1 echoed with principal %q, want %q", p, events.PrincipalIntegrator)
		}
		if d, _ := events.Data[events.ElicitationResponded](e); d.Action != schema.ActionAccept {
			t.Errorf("a1 echoed as %s, want the accept that was consumed", d.Action)
		}
	}
	if echoes != 1 {
		t.Errorf("a1 echoed %d times, want once", echoes)
	}
	if r := h.pub.of(events.TypeElicitationRejected); len(r) != 0 {
		d, _ := events.Data[events.ElicitationRejected](r[0])
		t.Errorf("rejected %+v", d)
	}
	if n := len(h.pub.of(events.TypeRunResumed)); n != 1 {
		t.Errorf("%d run.resumed after the redelivery, want still 1", n)
	}
	if th := h.stored(); th.State != ThreadPaused || len(th.Paused.PendingIDs()) != 1 {
		t.Errorf("thread %s, pending %v; want still paused on q3", th.State, th.Paused.PendingIDs())
	}
}

// Every accepted message is echoed once: the processor that queues m2
// behind m1's turn dies before publishing m2's echo. m2's turn runs and
// completes, and before m2's redelivery the thread records more than
// maxHandled other event IDs, so m2's ID ages out of the record. The
// redelivery must echo m2 (its acceptance), and not run it again.
func TestCrashMessageEchoedAfterItsIDAgedOut(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pub.fail = func(e *event.Event) bool {
		return events.TypeOf(e) == events.TypeTurnRequested && e.ID() == "m2"
	}
	if err := h.message("m2", 2); err == nil { // queued; the echo is lost with the process
		t.Fatal("message m2 handled although its echo failed")
	}
	h.pub.fail = nil
	h.p.threads.Forget("t")
	h.run(events.TypeRunCompleted, "c1", 10, events.RunCompleted{RunID: turnOf("m1"), TurnID: turnOf("m1"),
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	h.run(events.TypeRunCompleted, "c2", 11, events.RunCompleted{RunID: turnOf("m2"), TurnID: turnOf("m2"),
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "done"}})
	for seq := uint64(3); seq < 3+maxHandled; seq++ {
		if err := h.message(fmt.Sprint("m", seq), seq); err != nil {
			t.Fatal(err)
		}
	}
	if th := h.stored(); th.Seen("m2") {
		t.Fatal("m2's ID is still among the thread's recent IDs; the test needs more events")
	}
	if err := h.redeliver("m2", 2); err != nil {
		t.Fatal(err)
	}
	var echoes int
	for _, e := range h.pub.of(events.TypeTurnRequested) {
		if e.ID() == "m2" {
			echoes++
		}
	}
	if echoes != 1 {
		t.Errorf("m2 echoed %d times, want once", echoes)
	}
	if r := turnRejectedFor(h, "m2"); r != "" {
		t.Errorf("m2, whose turn ran, was rejected %s", r)
	}
	if n := slices.Index(h.runsStarted(), turnOf("m2")); n < 0 || slices.Index(h.runsStarted()[n+1:], turnOf("m2")) >= 0 {
		t.Errorf("runs started %v, want m2's once", h.runsStarted())
	}
}
