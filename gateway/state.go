package gateway

import (
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Thread states reported by GET /v1/threads/{thread}.
const (
	StateIdle    = "idle"
	StateRunning = "running"
	StatePaused  = "paused"
)

// MaxStateEvents bounds how many of a thread's stored events GET
// /v1/threads/{thread} reads to derive its state (the newest ones are
// read; "truncated" says older ones were skipped).
const MaxStateEvents = 10000

// ThreadState is the body of GET /v1/threads/{thread}: derived from the
// thread's events only.
type ThreadState struct {
	Thread string `json:"thread"`
	Owner  string `json:"owner"`
	// State is idle, running (a turn was requested and has not ended) or
	// paused (questions wait for answers).
	State string `json:"state"`
	// Pending are the questions still open: MCP elicitation/create params
	// with _meta["drupal.org/ai.elicitation_id"].
	Pending []schema.ElicitRequestParams `json:"pending"`
	// LastEventID is the stream sequence of the newest event read: pass
	// it as Last-Event-ID to GET .../events to continue from there.
	LastEventID uint64 `json:"lastEventId"`
	// Truncated says only the newest MaxStateEvents events were read.
	Truncated bool `json:"truncated,omitempty"`
}

// fold derives state and pending questions from events in stream order.
type fold struct {
	queued    map[string]bool // turn.requested event IDs not yet ended
	pending   []schema.ElicitRequestParams
	answered  map[string]string // responded event ID -> elicitation ID
	held      map[string]schema.ElicitRequestParams
	turnReq   map[string]string // turn ID -> turn.requested event ID
	paused    bool
	lastSeq   uint64
	truncated bool
}

func newFold() *fold {
	return &fold{queued: map[string]bool{}, answered: map[string]string{}, held: map[string]schema.ElicitRequestParams{},
		turnReq: map[string]string{}}
}

func elicitationID(p schema.ElicitRequestParams) string {
	id, _ := p.Meta[schema.MetaElicitationID].(string)
	return id
}

func (f *fold) removePending(ids ...string) {
	drop := map[string]bool{}
	for _, id := range ids {
		drop[id] = true
	}
	kept := f.pending[:0]
	for _, p := range f.pending {
		if !drop[elicitationID(p)] {
			kept = append(kept, p)
		}
	}
	f.pending = kept
}

func (f *fold) add(seq uint64, e *event.Event) {
	f.lastSeq = seq
	switch e.Type() {
	case events.TypeTurnRequested:
		f.queued[e.ID()] = true
	case events.TypeTurnRejected:
		if d, err := events.Data[events.TurnRejected](e); err == nil {
			delete(f.queued, d.RequestEventID)
		}
	case events.TypeElicitationRequested:
		if p, err := events.Data[schema.ElicitRequestParams](e); err == nil {
			f.pending = append(f.pending, p)
		}
	case events.TypeTurnPaused:
		f.paused = true
		if d, err := events.Data[events.TurnPaused](e); err == nil {
			f.turnReq[d.TurnID] = d.RequestEventID
		}
	case events.TypeElicitationResponded:
		d, err := events.Data[events.ElicitationResponded](e)
		if err != nil {
			return
		}
		for _, p := range f.pending {
			if elicitationID(p) == d.ElicitationID {
				f.answered[e.ID()] = d.ElicitationID
				f.held[d.ElicitationID] = p
				f.removePending(d.ElicitationID)
				break
			}
		}
	case events.TypeElicitationRejected:
		d, err := events.Data[events.ElicitationRejected](e)
		if err != nil {
			return
		}
		if id, ok := f.answered[d.RespondedEventID]; ok && d.Reason == events.RejectInvalidContent {
			f.pending = append(f.pending, f.held[id])
		}
		delete(f.answered, d.RespondedEventID)
	case events.TypeElicitationExpired:
		if d, err := events.Data[events.ElicitationExpired](e); err == nil {
			delete(f.queued, f.turnReq[d.TurnID])
		}
		f.paused = false
		f.pending = f.pending[:0]
	case events.TypeElicitationCancelled:
		if d, err := events.Data[events.ElicitationCancelled](e); err == nil {
			f.removePending(d.ElicitationIDs...)
			if len(f.pending) == 0 {
				// Every question withdrawn: the paused turn is over.
				delete(f.queued, f.turnReq[d.TurnID])
				f.paused = false
			}
		}
	case events.TypeTurnCompleted, events.TypeTurnFailed:
		var req string
		if d, err := events.Data[events.TurnCompleted](e); err == nil {
			req = d.RequestEventID
		}
		delete(f.queued, req)
		f.paused = false
		f.pending = f.pending[:0]
		f.answered = map[string]string{}
		f.held = map[string]schema.ElicitRequestParams{}
	}
}

func (f *fold) state() string {
	switch {
	case f.paused && len(f.pending) > 0:
		return StatePaused
	case f.paused || len(f.queued) > 0:
		return StateRunning
	default:
		return StateIdle
	}
}
