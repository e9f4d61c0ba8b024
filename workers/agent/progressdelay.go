package agent

import (
	"context"
	"math"
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

// endedMemory is how long pendingProgress remembers a run that ended on
// this replica, refusing its late phases (a handler that began a phase
// before the end and announces it after).
const endedMemory = 10 * time.Minute

// pendingProgress holds, per run, the progress of the phase the run is in
// on this replica, until it has lasted Options.ProgressDelay. At most one
// entry per run in flight on this replica; an entry leaves when it is
// published, replaced by the run's next phase, or ended with the run.
//
// The order it guarantees on this replica: no progress of a run is
// stored after the run's end event (run.completed, run.failed,
// run.paused; the turn's end follows it). end runs before that event is
// published: under the lock it drops the pending phase and marks the
// run's part ended (a completed or failed run wholly, a paused one up to
// its pause), so a phase of that part announced later on this replica
// (by a handler that began it before the end, or a redelivery repeating
// the run's last step) is dropped;
// then it waits until every progress of the run already sent is settled
// (acknowledged by JetStream, refused, or past progressTimeout), so
// PARLEY_CHAT stored it before the end event is even sent.
type pendingProgress struct {
	mu sync.Mutex
	m  map[string]*time.Timer
	// sent are the progress publishes of each run not known settled
	// (each channel is closed once its publish is).
	sent map[string][]<-chan struct{}
	// ended are the runs whose end (or pause) this replica published,
	// for endedMemory, in order of their end (endedOrder).
	ended      map[string]endMark
	endedOrder []string
}

// endMark is what pendingProgress remembers of a run's end: when, and
// the part of the run it ended (the number of resumes before it;
// runOver for a completed or failed run). A phase of that part or an
// earlier one is late; a later part (the run resumed after the pause,
// on any replica) announces as usual.
type endMark struct {
	at   time.Time
	part int
}

// runOver is the part a completed or failed run ended: no later part
// exists.
const runOver = math.MaxInt

// announce publishes publish once the phase it announces has lasted delay,
// unless the run's next phase or end comes first (replace or end). The
// earlier phase of the run, if still pending, ended before delay: its
// progress is dropped. A negative delay publishes at once. part is the
// part of the run the phase belongs to (its number of resumes): a phase
// of a part whose end this replica published announces nothing.
// publish returns a channel closed once its publish is settled.
func (p *pendingProgress) announce(ctx context.Context, runID string, part int, delay time.Duration, publish func(context.Context) <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.ended[runID]; ok && part <= m.part {
		return // a late phase of a part that ended: its end is published
	}
	if t := p.m[runID]; t != nil {
		t.Stop()
		delete(p.m, runID)
	}
	if delay < 0 {
		p.track(runID, publish(ctx))
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
		// on the connection) runs under the lock, so a run's end either
		// dropped this phase first or finds its publish tracked, and
		// waits for it.
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.m[runID] != t {
			return
		}
		delete(p.m, runID)
		p.track(runID, publish(pctx))
	})
	p.m[runID] = t
}

// track records a publish of runID's progress until it is settled; p.mu
// is held.
func (p *pendingProgress) track(runID string, settled <-chan struct{}) {
	if p.sent == nil {
		p.sent = map[string][]<-chan struct{}{}
	}
	live := p.sent[runID][:0]
	for _, c := range p.sent[runID] {
		select {
		case <-c:
		default:
			live = append(live, c)
		}
	}
	p.sent[runID] = append(live, settled)
}

// end is called before the run's end event (completed, failed or paused)
// is published, part being the part of the run it ends (its number of
// resumes; runOver when the run completed or failed): it drops the
// pending progress of runID, refuses that part's late phases on this
// replica, and returns once every progress of the run already sent is
// settled, so each is stored before the end event, or not at all.
func (p *pendingProgress) end(runID string, part int) {
	p.mu.Lock()
	if t := p.m[runID]; t != nil {
		t.Stop()
		delete(p.m, runID)
	}
	sent := p.sent[runID]
	delete(p.sent, runID)
	now := time.Now()
	if p.ended == nil {
		p.ended = map[string]endMark{}
	}
	for len(p.endedOrder) > 0 {
		oldest := p.endedOrder[0]
		if m, ok := p.ended[oldest]; ok {
			if now.Sub(m.at) < endedMemory {
				break
			}
			delete(p.ended, oldest)
		}
		p.endedOrder = p.endedOrder[1:]
	}
	if _, ok := p.ended[runID]; !ok {
		p.endedOrder = append(p.endedOrder, runID)
	}
	p.ended[runID] = endMark{at: now, part: max(part, p.ended[runID].part)}
	p.mu.Unlock()
	for _, c := range sent {
		<-c // each settles within progressTimeout (bus.PublishAsync)
	}
}

// size is the number of pending progress notifications (tests).
func (p *pendingProgress) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
