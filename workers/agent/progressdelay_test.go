package agent

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
)

// settledNow is a publish that is settled at once.
func settledNow(f func()) func(context.Context) <-chan struct{} {
	return func(context.Context) <-chan struct{} {
		f()
		c := make(chan struct{})
		close(c)
		return c
	}
}

// A run's end waits for a progress notification its timer is publishing:
// the run's own event (published after end) is then queued after the
// progress, so the progress is never stored after the turn ended.
func TestPendingProgressEndWaitsForAPublishUnderWay(t *testing.T) {
	var p pendingProgress
	started, release := make(chan struct{}), make(chan struct{})
	p.announce(context.Background(), "r1", 0, time.Millisecond, settledNow(func() {
		close(started)
		<-release
	}))
	<-started
	ended := make(chan struct{})
	go func() {
		p.end("r1", runOver)
		close(ended)
	}()
	select {
	case <-ended:
		t.Fatal("end returned while the progress was being published")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("end did not return after the publish")
	}
	if n := p.size(); n != 0 {
		t.Errorf("%d pending after the end", n)
	}
}

// A progress ended before its delay is never published.
func TestPendingProgressEndedBeforeDelay(t *testing.T) {
	var p pendingProgress
	published := make(chan struct{}, 1)
	p.announce(context.Background(), "r1", 0, 50*time.Millisecond, settledNow(func() { published <- struct{}{} }))
	p.end("r1", runOver)
	select {
	case <-published:
		t.Fatal("published after end")
	case <-time.After(150 * time.Millisecond):
	}
}

// A run's end waits until its progress already sent is stored (the
// publish settled), not only sent: JetStream stores PARLEY_CHAT's
// progress and PARLEY_RUNS' run outcome independently.
func TestPendingProgressEndWaitsUntilStored(t *testing.T) {
	var p pendingProgress
	stored := make(chan struct{})
	p.announce(context.Background(), "r1", 0, -1, func(context.Context) <-chan struct{} { return stored })
	ended := make(chan struct{})
	go func() {
		p.end("r1", runOver)
		close(ended)
	}()
	select {
	case <-ended:
		t.Fatal("end returned before the progress was stored")
	case <-time.After(50 * time.Millisecond):
	}
	close(stored)
	<-ended
}

// A phase announced after its run's end on this replica (a handler that
// began it before the end, a redelivery repeating the last step) is
// never published; after a pause, the run's next part (resumed, on any
// replica) announces as usual, its paused part does not.
func TestPendingProgressLateAnnounceDropped(t *testing.T) {
	var p pendingProgress
	var published []string
	publish := func(name string) func(context.Context) <-chan struct{} {
		return settledNow(func() { published = append(published, name) })
	}
	p.end("done", runOver)
	p.announce(context.Background(), "done", 3, -1, publish("after the end"))
	p.end("paused", 0)
	p.announce(context.Background(), "paused", 0, -1, publish("paused part"))
	p.announce(context.Background(), "paused", 1, -1, publish("resumed part"))
	if len(published) != 1 || published[0] != "resumed part" {
		t.Errorf("published %q, want only the resumed part's", published)
	}
}

// Phases announced and ended concurrently, each end racing its phase's
// delay (ends just under and just over it), with publishes that are
// stored a moment after they are sent: in the order things are stored,
// no progress of a run ever follows the run's end. Run with -race.
func TestPendingProgressNeverStoredAfterEnd(t *testing.T) {
	var p pendingProgress
	var (
		mu     sync.Mutex
		stream []string // what is stored, in order: "p:<run>" or "end:<run>"
	)
	store := func(s string) {
		mu.Lock()
		stream = append(stream, s)
		mu.Unlock()
	}
	const delay = 2 * time.Millisecond
	var wg sync.WaitGroup
	for i := range 200 {
		run := "r" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		wg.Go(func() {
			for phase := range 3 {
				p.announce(context.Background(), run, 0, delay, func(context.Context) <-chan struct{} {
					stored := make(chan struct{})
					go func() { // stored a moment after it is sent
						time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
						store("p:" + run)
						close(stored)
					}()
					return stored
				})
				time.Sleep(delay - time.Millisecond + time.Duration(rand.IntN(2000))*time.Microsecond)
				if phase == 2 {
					break
				}
			}
			p.end(run, runOver)
			store("end:" + run)
			// A late phase of the ended run (a handler that began it
			// before the end).
			p.announce(context.Background(), run, 0, 0, settledNow(func() { store("p:" + run) }))
		})
	}
	wg.Wait()
	time.Sleep(20 * delay)
	mu.Lock()
	defer mu.Unlock()
	ended := map[string]bool{}
	progress := 0
	for _, s := range stream {
		switch s[:2] {
		case "en":
			ended[s[4:]] = true
		case "p:":
			progress++
			if ended[s[2:]] {
				t.Fatalf("progress of %s stored after its end", s[2:])
			}
		}
	}
	if progress == 0 {
		t.Fatal("no progress was published at all: the test exercised nothing")
	}
	t.Logf("%d progress stored, none after its run's end", progress)
}

// A phase's progress is built only when it is published: a phase that
// ends before the delay (the next phase replaces it) costs a timer, not
// an event with its JSON, derived ID and headers.
func TestDroppedProgressIsNotBuilt(t *testing.T) {
	a := &Agent{opts: Options{ProgressDelay: time.Hour}, log: slog.New(slog.DiscardHandler)}
	run := &Run{RunID: "run-1", TurnID: "turn-1", Thread: "t1", Step: 1}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		a.progress(ctx, run, events.PhaseTool, 1, "Running the tool…", "Running bench_read")
	})
	a.pending.mu.Lock()
	for _, tm := range a.pending.m {
		tm.Stop()
	}
	a.pending.mu.Unlock()
	if allocs > 10 {
		t.Errorf("announcing a progress allocates %.0f objects, want at most 10 (the event is built only when published)", allocs)
	}
}
