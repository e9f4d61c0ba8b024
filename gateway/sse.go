package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// sseWriteTimeout bounds each write to an event stream: a client that
// reads nothing for this long is disconnected.
const sseWriteTimeout = 30 * time.Second

// pendingStreamWait bounds how long a request for the event stream of the
// user's own pending claim waits for the processor's verdict; without one
// it is answered 404 like an unknown thread.
const pendingStreamWait = 20 * time.Second

// lastEventID reads the resume point: the Last-Event-ID header (what
// EventSource sends on reconnect) or the lastEventId query parameter,
// a stream sequence: decimal digits only, at most 2^64-1. ok is false
// when the value is present and anything else (a sign, spaces, a
// fraction, an overflow).
func lastEventID(r *http.Request) (uint64, bool) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("lastEventId")
	}
	if v == "" {
		return 0, true
	}
	if strings.TrimLeft(v, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return n, err == nil
}

// chatEnd returns PARLEY_CHAT's last stream sequence (0 when empty).
func (g *Gateway) chatEnd(ctx context.Context) (uint64, error) {
	ctx, cancel := bus.WithRequestTimeout(ctx)
	defer cancel()
	stream, err := g.bus.JetStream().Stream(ctx, events.StreamChat)
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", events.StreamChat, err)
	}
	return stream.CachedInfo().State.LastSeq, nil
}

// streamEvents serves the thread's stored events as server-sent events:
// "id: <stream sequence>", "data: <the CloudEvent in the CloudEvents JSON
// format>", from after Last-Event-ID (or from the start), then live,
// with a comment line every Heartbeat. It ends when the client goes, the
// gateway shuts down, a write blocks for sseWriteTimeout, or the user may
// no longer read the thread (a revoked share: at once through the watch
// of the records, else at the next AccessRecheck; a reconnect gets 404).
// It also ends, before writing it, at the first event showing that the
// processor's ownership the claim was confirmed under ended (epoch.go),
// and starts no earlier than the claim's first event (firstShown).
func (g *Gateway) streamEvents(w http.ResponseWriter, r *http.Request, user string) {
	thread, ok := threadParam(w, r)
	if !ok {
		return
	}
	after, ok := lastEventID(r)
	if !ok {
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest,
			Detail: "Last-Event-ID must be a stream sequence (an unsigned integer)",
			Errors: []schema.Violation{{Path: "Last-Event-ID", Rule: "must be an unsigned integer"}}})
		return
	}
	// Counted before the ownership check: a wait for a verdict holds a
	// consumer like a stream does.
	if !g.openStream(user) {
		w.Header().Set("Retry-After", "5")
		writeProblem(w, Problem{Status: http.StatusTooManyRequests, Reason: ReasonRateLimited,
			Detail: "too many open event streams for this user"})
		return
	}
	defer g.closeStream(user)
	// A claim still pending (the first message just sent) waits for the
	// processor's verdict before anything is streamed (verify.go).
	// Watch the thread's record from before access is checked: a revoke
	// written between the check and the loop below still ends the stream
	// (the channel keeps the latest record), not only the next recheck.
	changed, unsubscribe := g.access.subscribe(thread)
	defer unsubscribe()
	rec, err := g.owners.access(r.Context(), thread, user, pendingStreamWait)
	if !g.owned(w, r, err) {
		return
	}
	ctx := r.Context()
	// Only the events of the processor's ownership the claim was
	// confirmed under (epoch.go).
	epoch := g.owners.reader(thread, rec)
	if after > 0 {
		// A resume point past the stream's end (from a stream that was
		// recreated, or a typo) resumes from the end: read from there,
		// no event would arrive until the stream passed the point.
		end, err := g.chatEnd(ctx)
		if err != nil {
			g.unavailable(w, r, err)
			return
		}
		if after > end {
			g.log.InfoContext(ctx, "Last-Event-ID past the end of the stream; resuming from the end", "thread", thread,
				"last_event_id", after, "stream_end", end)
			after = end
		}
	}
	items, stop, err := g.follow(ctx, []string{events.ChatThreadSubjects(thread)}, max(after+1, firstShown(rec)))
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	defer stop()

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	flush := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
		if bw.Flush() != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// Tell EventSource to reconnect quickly (after a gateway restart).
	bw.WriteString("retry: 1000\n\n")
	if !flush() {
		return
	}
	beat := time.NewTicker(g.opts.Heartbeat)
	defer beat.Stop()
	recheck := time.NewTicker(g.opts.AccessRecheck)
	defer recheck.Stop()
	for {
		select {
		case it, ok := <-items:
			if !ok {
				return
			}
			if err := epoch.shows(ctx, it.seq, it.time, it.ev); err != nil {
				g.log.InfoContext(ctx, "event stream ended: the thread's owner changed at the processor", "thread", thread, "user", user, "error", err)
				flush()
				return
			}
			bw.WriteString("id: " + strconv.FormatUint(it.seq, 10) + "\n")
			if it.ev == nil {
				// Not a CloudEvent: keep the position, say so.
				bw.WriteString("event: invalid\ndata: {}\n\n")
			} else {
				data, err := json.Marshal(it.ev)
				if err != nil {
					data = []byte("{}")
				}
				bw.WriteString("data: ")
				bw.Write(data)
				bw.WriteString("\n\n")
			}
			// Write what is buffered in one flush when more is waiting.
			if len(items) == 0 && !flush() {
				return
			}
		case <-beat.C:
			bw.WriteString(": heartbeat\n\n")
			if !flush() {
				return
			}
		case t := <-changed:
			if !t.allows(user) {
				g.log.InfoContext(ctx, "event stream ended: access revoked", "thread", thread, "user", user)
				flush()
				return
			}
		case <-recheck.C:
			if err := g.owners.check(ctx, thread, user); errors.Is(err, errNotOwner) {
				g.log.InfoContext(ctx, "event stream ended: access revoked", "thread", thread, "user", user)
				flush()
				return
			}
			// Another error (NATS unreachable): keep serving; the next
			// check decides.
		case <-g.closing:
			flush()
			return
		case <-ctx.Done():
			return
		}
	}
}

func (g *Gateway) openStream(user string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.streams[user] >= g.opts.MaxStreamsPerUser {
		return false
	}
	g.streams[user]++
	return true
}

func (g *Gateway) closeStream(user string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.streams[user]--; g.streams[user] <= 0 {
		delete(g.streams, user)
	}
}
