package agent

import (
	"context"
	"sync"
	"time"
)

// DefaultProgressDelay is how long a phase of a turn (a model call, a
// policy check, a tool call running, the wait for a step's other tool
// calls, a model retry's wait) must last before the agent publishes its
// progress notification (Options.ProgressDelay). A phase that ends sooner
// (the next phase begins, or the run completes, fails or pauses) publishes
// nothing: a person does not see a status line that lasts less than this,
// and instant phases cost no JetStream messages. A phase that lasts longer
// shows at DefaultProgressDelay after it began. 200 ms.
const DefaultProgressDelay = 200 * time.Millisecond

// pendingProgress holds, per run, the progress of the phase the run is in
// on this replica, until it has lasted Options.ProgressDelay. At most one
// entry per run in flight on this replica; an entry leaves when it is
// published, replaced by the run's next phase, or ended with the run.
type pendingProgress struct {
	mu sync.Mutex
	m  map[string]*time.Timer
}

// announce publishes publish once the phase it announces has lasted delay,
// unless the run's next phase or end comes first (replace or end). The
// earlier phase of the run, if still pending, ended before delay: its
// progress is dropped. A negative delay publishes at once.
func (p *pendingProgress) announce(ctx context.Context, runID string, delay time.Duration, publish func(context.Context)) {
	p.mu.Lock()
	if t := p.m[runID]; t != nil {
		t.Stop()
		delete(p.m, runID)
	}
	if delay < 0 {
		p.mu.Unlock()
		publish(ctx)
		return
	}
	if p.m == nil {
		p.m = map[string]*time.Timer{}
	}
	// The handler that began the phase may have returned when the phase
	// has lasted delay (a tool call runs on the tool-executor).
	pctx := context.WithoutCancel(ctx)
	var t *time.Timer
	t = time.AfterFunc(delay, func() {
		// publish (an asynchronous publish: it only queues the message
		// on the connection) runs under the lock, so a run's end, which
		// ends its pending progress before publishing the run's own
		// event, waits until the progress is queued: the progress is
		// stored before that event, never after the turn ended.
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.m[runID] != t {
			return
		}
		delete(p.m, runID)
		publish(pctx)
	})
	p.m[runID] = t
	p.mu.Unlock()
}

// end drops the pending progress of runID: the run completed, failed or
// paused (its own event says so) before the phase lasted the delay. A
// progress being published as end is called is queued on the connection
// before end returns.
func (p *pendingProgress) end(runID string) {
	p.mu.Lock()
	if t := p.m[runID]; t != nil {
		t.Stop()
		delete(p.m, runID)
	}
	p.mu.Unlock()
}

// size is the number of pending progress notifications (tests).
func (p *pendingProgress) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
