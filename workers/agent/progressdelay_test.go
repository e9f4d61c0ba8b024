package agent

import (
	"context"
	"testing"
	"time"
)

// A run's end waits for a progress notification its timer is publishing:
// the run's own event (published after end) is then queued after the
// progress, so the progress is never stored after the turn ended.
func TestPendingProgressEndWaitsForAPublishUnderWay(t *testing.T) {
	var p pendingProgress
	started, release := make(chan struct{}), make(chan struct{})
	p.announce(context.Background(), "r1", time.Millisecond, func(context.Context) {
		close(started)
		<-release
	})
	<-started
	ended := make(chan struct{})
	go func() {
		p.end("r1")
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
	p.announce(context.Background(), "r1", 50*time.Millisecond, func(context.Context) { published <- struct{}{} })
	p.end("r1")
	select {
	case <-published:
		t.Fatal("published after end")
	case <-time.After(150 * time.Millisecond):
	}
}
