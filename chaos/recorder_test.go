//go:build unix

package chaos

import (
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// seen is one chat event as the recorder read it.
type seen struct {
	seq    uint64
	at     time.Time
	event  *event.Event
	turnID string
}

// recorder reads PARLEY_CHAT from the start in one goroutine and indexes
// what the checks and the drivers ask about.
type recorder struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every event

	seqs       map[uint64]bool
	all        []*seen
	byID       map[string][]uint64                     // CloudEvent id → stream sequences
	ends       map[string][]*seen                      // turn ID → turn.completed / turn.failed
	threadEnds map[string][]string                     // thread → turn IDs in the order they ended
	paused     map[string][]events.TurnPaused          // turn ID → turn.paused
	elicReq    map[string][]*seen                      // elicitation ID → elicitation.requested
	rejected   map[string][]events.ElicitationRejected // responded event ID → rejections
	cancelled  map[string][]events.ElicitationCancelled
	turnRej    map[string][]events.TurnRejected // turn.requested event ID → turn.rejected
	undecoded  int
}

func newRecorder(items <-chan client.Item) *recorder {
	r := &recorder{
		changed: make(chan struct{}), seqs: map[uint64]bool{}, byID: map[string][]uint64{},
		ends: map[string][]*seen{}, threadEnds: map[string][]string{}, paused: map[string][]events.TurnPaused{},
		elicReq: map[string][]*seen{}, rejected: map[string][]events.ElicitationRejected{},
		cancelled: map[string][]events.ElicitationCancelled{}, turnRej: map[string][]events.TurnRejected{},
	}
	go func() {
		for it := range items {
			r.add(it)
		}
	}()
	return r
}

func (r *recorder) add(it client.Item) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if it.Seq != 0 && r.seqs[it.Seq] {
		return // a consumer replay of a stored message, not a second message
	}
	r.seqs[it.Seq] = true
	if it.Event == nil {
		r.undecoded++
		return
	}
	e := it.Event
	s := &seen{seq: it.Seq, at: time.Now(), event: e}
	if v, ok := e.Extensions()[events.ExtTurnID]; ok {
		s.turnID, _ = v.(string)
	}
	r.all = append(r.all, s)
	r.byID[e.ID()] = append(r.byID[e.ID()], it.Seq)
	switch events.TypeOf(e) {
	case events.TypeTurnCompleted, events.TypeTurnFailed:
		id := s.turnID
		if id == "" {
			if d, err := events.Data[events.TurnFailed](e); err == nil {
				id = d.TurnID
			}
		}
		if id != "" {
			s.turnID = id
			if len(r.ends[id]) == 0 {
				r.threadEnds[e.Subject()] = append(r.threadEnds[e.Subject()], id)
			}
			r.ends[id] = append(r.ends[id], s)
		}
	case events.TypeTurnPaused:
		if d, err := events.Data[events.TurnPaused](e); err == nil {
			r.paused[d.TurnID] = append(r.paused[d.TurnID], d)
		}
	case events.TypeElicitationRequested:
		if p, err := events.Data[schema.ElicitRequestParams](e); err == nil {
			if id, _ := p.Meta[schema.MetaElicitationID].(string); id != "" {
				r.elicReq[id] = append(r.elicReq[id], s)
			}
		}
	case events.TypeElicitationRejected:
		if d, err := events.Data[events.ElicitationRejected](e); err == nil {
			r.rejected[d.RespondedEventID] = append(r.rejected[d.RespondedEventID], d)
		}
	case events.TypeElicitationCancelled:
		if d, err := events.Data[events.ElicitationCancelled](e); err == nil {
			r.cancelled[d.TurnID] = append(r.cancelled[d.TurnID], d)
		}
	case events.TypeTurnRejected:
		if d, err := events.Data[events.TurnRejected](e); err == nil {
			r.turnRej[d.RequestEventID] = append(r.turnRej[d.RequestEventID], d)
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// wait blocks until pred (called with the lock held) is true or the
// deadline passes; it reports whether pred became true.
func (r *recorder) wait(deadline time.Time, pred func() bool) bool {
	for {
		r.mu.Lock()
		ok := pred()
		ch := r.changed
		r.mu.Unlock()
		if ok {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		t := time.NewTimer(min(left, time.Second))
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// ended reports (lock held) whether turnID has a turn end.
func (r *recorder) ended(turnID string) bool { return len(r.ends[turnID]) > 0 }

// dumpThread lists a thread's events in stream order.
func (r *recorder) dumpThread(thread string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, s := range r.all {
		if s.event.Subject() != thread {
			continue
		}
		data := string(s.event.Data())
		if len(data) > 300 {
			data = data[:300] + "…"
		}
		b.WriteString("    seq " + itoa(s.seq) + " " + s.at.Format("15:04:05.000") + " " +
			strings.TrimPrefix(s.event.Type(), "dev.parley.") + " turn=" + short(s.turnID) + " " + data + "\n")
	}
	return b.String()
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
