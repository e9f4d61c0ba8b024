package processor

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// The thread record and its store on a real server (moved here from
// kvstate with the record).

func openThreadBucket(t *testing.T) *kvstate.Bucket[json.RawMessage] {
	t.Helper()
	_, js := bustest.NewServer(t).JetStream(t)
	b, err := openThreads(t.Context(), js, jetstream.MemoryStorage, 1, 0)
	if err != nil {
		t.Fatalf("openThreads: %v", err)
	}
	return b
}

// openThreadsNATS is the thread store on a real server, cached.
func openThreadsNATS(t *testing.T) *kvstate.Store[Thread] {
	return (&Processor{}).threadStore(openThreadBucket(t), true)
}

func userMsg(text string) schema.ChatMessage {
	return schema.ChatMessage{Role: schema.RoleUser, Text: text}
}

func TestThreadStoreReadWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := openThreadBucket(t)
	s := (&Processor{}).threadStore(b, true)
	th, rev, err := s.Get(ctx, "t1")
	if err != nil || rev != 0 || th.ID != "t1" || th.State != ThreadIdle || th.Format != ThreadFormat {
		t.Fatalf("Get(missing) = %+v @%d, %v, want a new idle thread @0", th, rev, err)
	}
	th.State = ThreadRunning
	rev1, err := s.Create(ctx, "t1", th)
	if err != nil {
		t.Fatalf("Create(new): %v", err)
	}
	if th.UpdatedAt.IsZero() {
		t.Error("Create did not set UpdatedAt")
	}
	if _, err := s.Create(ctx, "t1", th); !errors.Is(err, kvstate.ErrConflict) {
		t.Errorf("Create(over existing) error = %v, want ErrConflict", err)
	}
	got, rev, err := s.Get(ctx, "t1")
	if err != nil || rev != rev1 || got.State != ThreadRunning {
		t.Errorf("Get = %+v @%d, %v, want running @%d", got, rev, err, rev1)
	}

	bad, _ := json.Marshal(Thread{Format: ThreadFormat + 1, ID: "t2"})
	if _, err := b.Put(ctx, "t2", bad); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if _, _, err := s.Get(ctx, "t2"); !errors.Is(err, kvstate.ErrIncompatible) {
		t.Errorf("Get(other format) error = %v, want kvstate.ErrIncompatible", err)
	}
	if _, _, err := s.Mutate(ctx, "t2", func(*Thread) error { return nil }); !errors.Is(err, kvstate.ErrIncompatible) {
		t.Errorf("Mutate(other format) error = %v, want kvstate.ErrIncompatible", err)
	}
	if _, err := s.Put(ctx, "t2", newThread("t2")); err != nil {
		t.Fatalf("Put(new thread): %v", err)
	}
	if th, _, err := s.Get(ctx, "t2"); err != nil || th.State != ThreadIdle {
		t.Errorf("Get after the reset = %+v, %v, want idle", th, err)
	}
}

func TestThreadsMutateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openThreadsNATS(t)
	const n = 20
	var calls atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, _, err := s.Mutate(ctx, "t1", func(th *Thread) error {
				calls.Add(1)
				th.Append(userMsg(fmt.Sprintf("m%02d", i)))
				th.MarkHandled(fmt.Sprintf("ev%02d", i))
				return nil
			})
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Mutate: %v", err)
		}
	}
	th, _, err := s.Get(ctx, "t1")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	var texts []string
	for _, m := range th.History {
		texts = append(texts, m.Text)
	}
	slices.Sort(texts)
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("m%02d", i))
	}
	if !slices.Equal(texts, want) {
		t.Errorf("history after %d concurrent appends = %v, want %v", n, texts, want)
	}
	for i := range n {
		if !th.Seen(fmt.Sprintf("ev%02d", i)) {
			t.Errorf("Seen(ev%02d) = false", i)
		}
	}
	t.Logf("%d mutate calls for %d updates (retries on conflict)", calls.Load(), n)
}

func TestThreadsMutateNoChangeAndErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openThreadsNATS(t)
	th, _, err := s.Mutate(ctx, "t1", func(th *Thread) error {
		th.State = ThreadPaused
		th.Paused = &PausedTurn{Record: "t1.1"}
		return nil
	})
	if err != nil || th.State != ThreadPaused {
		t.Fatalf("Mutate = %+v, %v", th, err)
	}
	_, rev, _ := s.Get(ctx, "t1")

	got, _, err := s.Mutate(ctx, "t1", func(th *Thread) error {
		th.State = ThreadIdle // discarded
		return kvstate.ErrNoChange
	})
	if err != nil || got == nil {
		t.Fatalf("Mutate(kvstate.ErrNoChange) = %v, %v, want the thread and nil", got, err)
	}
	after, rev2, _ := s.Get(ctx, "t1")
	if rev2 != rev || after.State != ThreadPaused {
		t.Errorf("Mutate(kvstate.ErrNoChange) wrote: %s @%d, want %s @%d", after.State, rev2, ThreadPaused, rev)
	}

	boom := errors.New("boom")
	if _, _, err := s.Mutate(ctx, "t1", func(th *Thread) error {
		th.State = ThreadIdle
		return fmt.Errorf("applying: %w", boom)
	}); !errors.Is(err, boom) {
		t.Errorf("Mutate(fn error) = %v, want boom", err)
	}
	if _, rev3, _ := s.Get(ctx, "t1"); rev3 != rev {
		t.Errorf("Mutate(fn error) wrote revision %d (was %d)", rev3, rev)
	}
}

func TestThreadAppendBoundsHistory(t *testing.T) {
	var th Thread
	for i := range MaxHistory - 1 {
		th.Append(userMsg(fmt.Sprint(i)))
	}
	if len(th.History) != MaxHistory-1 {
		t.Fatalf("len(History) = %d, want %d", len(th.History), MaxHistory-1)
	}
	th.Append(userMsg("a"), userMsg("b"), userMsg("c"))
	if len(th.History) != MaxHistory {
		t.Fatalf("len(History) = %d, want MaxHistory %d", len(th.History), MaxHistory)
	}
	if th.History[0].Text != "2" || th.History[MaxHistory-1].Text != "c" {
		t.Errorf("History = %s .. %s, want the newest %d (2 .. c)", th.History[0].Text, th.History[MaxHistory-1].Text, MaxHistory)
	}
	for i := range 3 * MaxHistory {
		th.Append(userMsg(fmt.Sprint("x", i)))
	}
	if len(th.History) != MaxHistory || th.History[MaxHistory-1].Text != fmt.Sprint("x", 3*MaxHistory-1) {
		t.Errorf("after many appends len = %d, last = %s", len(th.History), th.History[len(th.History)-1].Text)
	}
}

func TestThreadMarkHandledBounded(t *testing.T) {
	var th Thread
	for i := range maxHandled + 10 {
		th.MarkHandled(fmt.Sprint(i))
	}
	if len(th.Handled) != maxHandled {
		t.Errorf("len(Handled) = %d, want %d", len(th.Handled), maxHandled)
	}
	if th.Seen("0") || !th.Seen(fmt.Sprint(maxHandled+9)) || !th.Seen("10") {
		t.Errorf("Seen: oldest should be forgotten, newest kept: %v", th.Handled)
	}
}

// TestPausedStoreReplacesOtherTurn: a pending record of a turn the thread
// moved past (its caller checked the new pause is the active turn's) does
// not block the new pause: the thread would otherwise refuse every
// question until the old record's TTL.
// MutateFrom applies fn to the thread the caller loaded when its revision is
// still current, and reloads (fn sees the other writer's change) when it
// is not.
func TestThreadsMutateFrom(t *testing.T) {
	s := openThreadsNATS(t)
	ctx := t.Context()
	if _, _, err := s.Mutate(ctx, "th", func(th *Thread) error { th.State = ThreadRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	th, rev, err := s.Get(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	got, _, err := s.MutateFrom(ctx, th.ID, th, rev, false, func(th *Thread) error { calls++; th.TurnID = "t1"; return nil })
	if err != nil || calls != 1 || got.TurnID != "t1" {
		t.Fatalf("MutateFrom at the current revision: %v, %d calls, turn %q; want nil, 1, t1", err, calls, got.TurnID)
	}
	stale := *th
	if _, _, err := s.Mutate(ctx, "th", func(th *Thread) error { th.StartedBy = "other"; return nil }); err != nil {
		t.Fatal(err)
	}
	calls = 0
	got, _, err = s.MutateFrom(ctx, stale.ID, &stale, rev, false, func(th *Thread) error { calls++; th.TurnID = "t2"; return nil })
	if err != nil || calls != 2 || got.TurnID != "t2" || got.StartedBy != "other" {
		t.Fatalf("MutateFrom at a stale revision: %v, %d calls, %+v; want a reload keeping the other write", err, calls, got)
	}
}

// Content blocks count against MaxHistoryBytes, so a history of messages
// with large blocks stays bounded.
func TestHistoryBoundCountsContent(t *testing.T) {
	var th Thread
	big := &schema.ImageContent{MIMEType: "image/png", Data: strings.Repeat("A", 100<<10)}
	for range 5 {
		th.Append(schema.ChatMessage{Role: schema.RoleUser, Text: "look", Content: schema.ContentList{big}})
	}
	size := 0
	for _, m := range th.History {
		size += historySize(m)
	}
	if size > MaxHistoryBytes || len(th.History) == 5 {
		t.Errorf("history of %d messages is %d bytes, want at most %d", len(th.History), size, MaxHistoryBytes)
	}
	if len(th.History[len(th.History)-1].Content) != 1 {
		t.Error("the newest message lost its content")
	}
}

// A thread's first message records its PARLEY_INPUT sequence: a new
// thread's record counts in PARLEY_INPUT sequences from its first write,
// so a later message of the thread sees the first one recorded and does
// not wait for it.
func TestFirstMessageRecordsItsSequence(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	if th := h.stored(); th.LastTurnSeq != 1 || !th.InputSeqs {
		t.Fatalf("thread after its first message: LastTurnSeq %d, InputSeqs %v; want 1, true", th.LastTurnSeq, th.InputSeqs)
	}
}
