package agent

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/parley-dev/parley/bus"
)

// runCacheWindow is how long after writing a run record an agent may
// apply a tool result's first delivery to its memory of that write
// instead of reading the record: half the duplicate window of the stream
// tool results are stored on (PARLEY_AGENT, bus.DuplicateWindow).
const runCacheWindow = bus.DuplicateWindow / 2

// maxCachedRuns and maxCachedRunBytes bound the run cache. At either
// bound the oldest entry is evicted: that run's next result costs one KV
// read, as it would without the cache.
const (
	maxCachedRuns     = 4096
	maxCachedRunBytes = 64 << 20
)

// runCache remembers the run records THIS agent process wrote (advance's
// save): the bytes written, the revision the write returned, and the
// local monotonic time just before the write. onToolResult's first
// attempt applies a result to a remembered record instead of reading it
// back (one KV read less per tool call), and only when
// fresh says so. A nil *runCache remembers nothing (Options.NoRunCache).
//
// Why a remembered record may stand in for the bucket (the safety
// argument; onToolResult relies on all of it):
//
//  1. The delivery is the message's first (bus.Delivery.NumDelivered ==
//     1): no handler, on any replica, got this tool.result message before.
//  2. The write that dispatched the calls the record still shows
//     dispatched was sent less than window (runCacheWindow) ago, by a
//     connection that has not reconnected since (epoch). A
//     tool.result's Nats-Msg-Id is derived from its run, call and round,
//     so JetStream stores a second copy of the same result only a whole
//     duplicate window after the first; the first was stored after that
//     write (tool.call is published after the checkpoint). So within the
//     window the delivered message is the only copy there is, and with (1)
//     nobody has applied this result. A later write of the same step,
//     which records another call's result and dispatches nothing, keeps
//     the stamp of the remembered write it was based on (carried), or is
//     not remembered: stamped itself, it would let a second copy stored
//     a duplicate window after the first (a tool executor that published
//     again after a crash) be applied again from memory, and the step
//     another replica already took be taken a second time. (A server that restarts forgets the
//     IDs of acked work-queue messages, and could store a copy again
//     sooner: the agent's connection then reconnects, which ends the
//     trust in everything remembered before. Not covered: a cluster whose
//     stream replicas all restart while this agent stays connected to a
//     server that did not; a copy stored again there within the window
//     could be applied to a remembered record that is behind.)
//  3. Every write of a run record is advance's save (Bucket.Create and
//     Update have no other caller), revision-checked; a run that ends or
//     pauses is not written, and every record written shows at least one
//     call dispatched. So a record newer than the remembered one can only
//     come from applying another result of the same step (this one is
//     unapplied, and the step cannot end without it). The remembered
//     record then still shows that other call dispatched, so applying this
//     result to it leaves a call dispatched, and the handler writes before
//     anything else happens: revision-checked against the remembered
//     revision, the write fails with kvstate.ErrConflict, and the next
//     attempt reads the bucket. A remembered record that does not show
//     the result's call dispatched (in this round) proves nothing either
//     way (it may be behind): the handler reads the bucket.
//
// Entries are dropped when a save fails (conflict or error: the bucket
// may hold anything) and when the run ends, pauses or fails
// (publishCompleted, publishFailed, publishPaused); entries older than
// window are swept at least once a window. Several handlers use the
// cache at once: a mutex guards it, and every caller gets its own copy
// (decoded from the bytes written).
type runCache struct {
	mu    sync.Mutex
	m     map[string]cachedRun
	bytes int
	swept time.Time
	// window is runCacheWindow (tests set it).
	window time.Duration
	// now is the local clock (time.Now: monotonic; tests set it).
	now func() time.Time
	// epoch counts the connection's reconnects (nil: no connection).
	epoch func() uint64
}

type cachedRun struct {
	data  []byte
	rev   uint64
	at    time.Time
	epoch uint64
}

// newRunCache returns a cache, or nil (caching off) when !on. epoch
// counts the reconnects of the connection the records are written on.
func newRunCache(on bool, epoch func() uint64) *runCache {
	if !on {
		return nil
	}
	return &runCache{m: make(map[string]cachedRun), window: runCacheWindow, now: time.Now, epoch: epoch}
}

// stamp is taken just before a write is sent: the write's time and
// connection epoch for put.
type stamp struct {
	at    time.Time
	epoch uint64
}

func (c *runCache) stamp() stamp {
	if c == nil {
		return stamp{}
	}
	s := stamp{at: c.now()}
	if c.epoch != nil {
		s.epoch = c.epoch()
	}
	return s
}

// carried returns the stamp of the record remembered under id at
// revision base, for a write based on it that dispatches nothing (it
// records a result of calls that write dispatched): the calls still
// dispatched were published after that stamp, not after the new write,
// so the new write is remembered with it (rule 2). ok is false when no
// record is remembered at base: the write is then not remembered.
func (c *runCache) carried(id string, base uint64) (s stamp, ok bool) {
	if c == nil {
		return stamp{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.m[id]
	if !found || e.rev != base {
		return stamp{}, false
	}
	return stamp{at: e.at, epoch: e.epoch}, true
}

// put remembers run, written under id at revision rev by a write sent at
// s, unless a later revision is remembered already.
func (c *runCache) put(id string, run *Run, rev uint64, s stamp) {
	if c == nil {
		return
	}
	data, err := json.Marshal(run)
	if err != nil {
		c.drop(id)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.m[id]
	if ok && old.rev > rev {
		return
	}
	c.removeLocked(id)
	now := c.now()
	if now.Sub(c.swept) >= c.window || len(c.m) >= maxCachedRuns || c.bytes+len(data) > maxCachedRunBytes {
		for k, e := range c.m {
			if now.Sub(e.at) >= c.window {
				c.removeLocked(k)
			}
		}
		c.swept = now
	}
	for len(c.m) > 0 && (len(c.m) >= maxCachedRuns || c.bytes+len(data) > maxCachedRunBytes) {
		c.removeLocked(c.oldestLocked())
	}
	c.m[id] = cachedRun{data: data, rev: rev, at: s.at, epoch: s.epoch}
	c.bytes += len(data)
}

// fresh returns a copy of the record this agent wrote under id and its
// revision, when it was written less than window ago on the current
// connection (rule 2 of runCache); ok is false otherwise.
func (c *runCache) fresh(id string) (run Run, rev uint64, ok bool) {
	if c == nil {
		return Run{}, 0, false
	}
	epoch := uint64(0)
	if c.epoch != nil {
		epoch = c.epoch()
	}
	c.mu.Lock()
	e, found := c.m[id]
	if found && (c.now().Sub(e.at) >= c.window || e.epoch != epoch) {
		c.removeLocked(id)
		found = false
	}
	c.mu.Unlock()
	if !found {
		return Run{}, 0, false
	}
	if json.Unmarshal(e.data, &run) != nil {
		c.drop(id)
		return Run{}, 0, false
	}
	return run, e.rev, true
}

// drop forgets id.
func (c *runCache) drop(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.removeLocked(id)
	c.mu.Unlock()
}

// len returns the number of records remembered.
func (c *runCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

func (c *runCache) removeLocked(id string) {
	if e, ok := c.m[id]; ok {
		c.bytes -= len(e.data)
		delete(c.m, id)
	}
}

func (c *runCache) oldestLocked() string {
	var (
		oldest string
		at     time.Time
		seen   bool
	)
	for k, e := range c.m {
		if !seen || e.at.Before(at) {
			oldest, at, seen = k, e.at, true
		}
	}
	return oldest
}
