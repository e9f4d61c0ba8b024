package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// accessWatch follows the changes of the thread records in BucketThreads
// (one KV watch per gateway, updates only) and hands each new record to
// the event streams open on that thread, so a revoked share ends them at
// once on every replica. The streams also check again every
// Options.AccessRecheck, in case the watch is down.
type accessWatch struct {
	mu   sync.Mutex
	subs map[string]map[chan ThreadOwner]struct{}
}

func newAccessWatch() *accessWatch {
	return &accessWatch{subs: map[string]map[chan ThreadOwner]struct{}{}}
}

// subscribe returns a channel that receives thread's record when it
// changes (only the newest is kept when the reader lags; a deleted record
// arrives as the zero ThreadOwner, which has no members) and a function
// that ends the subscription. The table holds one entry per open stream.
func (a *accessWatch) subscribe(thread string) (<-chan ThreadOwner, func()) {
	ch := make(chan ThreadOwner, 1)
	a.mu.Lock()
	if a.subs[thread] == nil {
		a.subs[thread] = map[chan ThreadOwner]struct{}{}
	}
	a.subs[thread][ch] = struct{}{}
	a.mu.Unlock()
	return ch, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.subs[thread], ch)
		if len(a.subs[thread]) == 0 {
			delete(a.subs, thread)
		}
	}
}

func (a *accessWatch) notify(thread string, t ThreadOwner) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ch := range a.subs[thread] {
		select {
		case ch <- t:
		default: // the reader lags: replace the record it has not read
			select {
			case <-ch:
			default:
			}
			ch <- t
		}
	}
}

// run watches the records until ctx ends. A watch that cannot start is
// logged; the streams' periodic checks still apply.
func (g *Gateway) watchAccess(ctx context.Context) {
	w, err := g.owners.kv.Watch(ctx, "t.>", jetstream.UpdatesOnly())
	if err != nil {
		g.log.WarnContext(ctx, "not watching thread shares; revoked shares end open event streams within the access recheck only",
			"error", err, "recheck", g.opts.AccessRecheck)
		return
	}
	go func() {
		<-ctx.Done()
		_ = w.Stop()
	}()
	for e := range w.Updates() {
		if e == nil {
			continue
		}
		var t ThreadOwner
		if e.Operation() == jetstream.KeyValuePut {
			if err := json.Unmarshal(e.Value(), &t); err != nil {
				continue // unreadable: the periodic check decides
			}
		}
		g.access.notify(strings.TrimPrefix(e.Key(), "t."), t)
	}
}
