package gateway

import (
	"time"

	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/schema"
)

// Thread states reported by GET /v1/threads/{thread}: the statuses of
// threadstate.Fold.
const (
	StateIdle    = string(threadstate.Idle)
	StateRunning = string(threadstate.Running)
	StatePaused  = string(threadstate.Paused)
	// StateFailed: nothing runs and the thread's last turn failed
	// (turn.failed); a new message starts a turn as on an idle thread.
	StateFailed = string(threadstate.Failed)
)

// MaxStateEvents bounds how many of a thread's stored events GET
// /v1/threads/{thread} reads to derive its state (the newest ones are
// read; "truncated" says older ones were skipped).
const MaxStateEvents = 10000

// ThreadState is the body of GET /v1/threads/{thread}: the processor's
// record of the thread's state and open questions, with what else the
// thread's events say (threadstate.Fold).
type ThreadState struct {
	Thread string `json:"thread"`
	Owner  string `json:"owner"`
	// State is idle, running (a turn was requested and has not ended),
	// paused (questions wait for answers) or failed (the last turn
	// failed; nothing runs).
	State string `json:"state"`
	// Pending are the questions still open: MCP elicitation/create params
	// with _meta["drupal.org/ai.elicitation_id"].
	Pending []schema.ElicitRequestParams `json:"pending"`
	// LastEventID is the stream sequence of the newest event read: pass
	// it as Last-Event-ID to GET .../events to continue from there.
	LastEventID uint64 `json:"lastEventId"`
	// Truncated says only the newest MaxStateEvents events were read.
	Truncated bool `json:"truncated,omitempty"`
	// Source says where State and Pending come from: "record" (the
	// processor's record of the thread, the source of truth of what is
	// pending, asked over events.ThreadStateSubject) or "events" (a fold
	// of the thread's events, when no processor answered).
	Source string `json:"source"`
}

// Sources of ThreadState.State and Pending.
const (
	SourceRecord = "record"
	SourceEvents = "events"
)

// stateWait bounds how long GET /v1/threads/{thread} waits for the
// processor's record of the thread.
const stateWait = 3 * time.Second

// stateOf fills st from a fold of the thread's events.
func stateOf(st *ThreadState, f *threadstate.Fold, truncated bool) {
	st.State, st.LastEventID, st.Truncated = string(f.Status()), f.LastSeq, truncated
	st.Pending = append(st.Pending[:0], f.PendingParams()...)
}
