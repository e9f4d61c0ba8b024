package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// SessionOptions configures Follow.
type SessionOptions struct {
	// Agent names the agent of the messages Ask sends ("" = the
	// processor's default). A subject token.
	Agent string
	// OnStatus, if set, is called when the session's watch loses or
	// regains the server (from a goroutine of the watch; it must not
	// block).
	OnStatus func(WatchStatus)
}

// SessionItem is one event of a Session's thread, folded: the Change it
// made (with the decoded payload), or Err for a stored message that is not
// a valid CloudEvent.
type SessionItem struct {
	threadstate.Change
	// Subject is the NATS subject the event was stored under.
	Subject string
	// Err is set when the stored message is not a valid CloudEvent (the
	// Change is then empty).
	Err error
	// Mine is set when the event is one this session published (the
	// processor's echo of its message or answer), or the outcome of one
	// (Change.About names it).
	Mine bool
}

// maxMine bounds how many IDs of its own events a Session remembers:
// past it the oldest is forgotten (an echo of it then reads as another
// client's).
const maxMine = 4096

// ErrNotPending is matched by the error of Session.Answer and Respond when
// the elicitation is not an open question of the thread.
var ErrNotPending = errors.New("not a pending question")

// Session follows one thread as an integrator sees it: it folds the
// thread's events (threadstate.Fold) into its state and pending
// questions, sends messages (Ask) and answers (Answer, Respond, validated
// against the question before publishing), and delivers every event,
// folded, on Items for a UI to render.
//
// Follow replays the thread's stored events first (the time this takes
// grows with the thread; the fold's memory does not, see threadstate's
// bounds), then follows new ones through one ordered consumer (see
// Watch), until ctx ends. The methods are safe for concurrent use.
type Session struct {
	c      *Client
	thread string
	agent  string
	items  chan SessionItem

	mu   sync.Mutex
	fold threadstate.Fold
	mine []string
}

// Follow starts a Session on thread: it returns once the stored events are
// folded and the processor's record of the open questions adopted
// (Client.ThreadState; State and Pending then say where the thread
// stands), and
// delivers the events stored after that on Items until ctx ends (Items
// is then closed, after the watch's consumer was deleted). Errors: an
// invalid thread or agent token; those of Watch.
func (c *Client) Follow(ctx context.Context, thread string, opts *SessionOptions) (*Session, error) {
	if opts == nil {
		opts = &SessionOptions{}
	}
	if opts.Agent != "" {
		if err := events.ValidToken("agent", opts.Agent); err != nil {
			return nil, err
		}
	}
	var backlog uint64
	in, err := c.Watch(ctx, WatchOptions{Thread: thread, FromStart: true, Backlog: &backlog, OnStatus: opts.OnStatus})
	if err != nil {
		return nil, err
	}
	s := &Session{c: c, thread: thread, agent: opts.Agent, items: make(chan SessionItem)}
	for read := uint64(0); read < backlog; read++ {
		it, ok := <-in
		if !ok {
			break // ctx ended
		}
		if it.Event != nil {
			s.fold.Apply(it.Seq, it.Event)
		}
	}
	if err := ctx.Err(); err != nil {
		for range in {
		}
		return nil, err
	}
	// What is pending is the processor's record's to say: a question
	// whose events the stream's limits dropped is still open there. When
	// no processor answers, the fold stands.
	if st, err := c.ThreadState(ctx, thread, ""); err == nil && st.State == threadPaused && len(st.Pending) > 0 {
		s.fold.AdoptPaused(st.TurnID, st.Pending)
	}
	go s.run(ctx, in)
	return s, nil
}

// run folds and delivers the live events.
func (s *Session) run(ctx context.Context, in <-chan Item) {
	defer close(s.items)
	for it := range in {
		si := SessionItem{Subject: it.Subject, Err: it.Err}
		if it.Event != nil {
			s.mu.Lock()
			si.Change = s.fold.Apply(it.Seq, it.Event)
			si.Mine = (slices.Contains(s.mine, it.Event.ID()) || (si.About != "" && slices.Contains(s.mine, si.About))) &&
				!foreign(it.Event, s.c.principal)
			s.mu.Unlock()
		}
		select {
		case s.items <- si:
		case <-ctx.Done():
			for range in { // until the watch deleted its consumer
			}
			return
		}
	}
}

// Thread returns the session's thread.
func (s *Session) Thread() string { return s.thread }

// Client returns the client the session publishes with.
func (s *Session) Client() *Client { return s.c }

// Items delivers the thread's new events, folded, in stream order. The
// session's state already includes an item when it is delivered (and at
// most the one item waiting to be delivered after it).
func (s *Session) Items() <-chan SessionItem { return s.items }

// Status returns where the thread stands.
func (s *Session) Status() threadstate.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fold.Status()
}

// TurnID returns the turn running, paused or ended last.
func (s *Session) TurnID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fold.TurnID
}

// Progress returns the running turn's last progress (nil: none).
func (s *Session) Progress() *schema.Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fold.Progress
}

// Pending returns the open questions, in the order they were asked.
func (s *Session) Pending() []threadstate.Question {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fold.Pending()
}

// Question returns the open question with elicitation ID id.
func (s *Session) Question(id string) (threadstate.Question, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fold.Question(id)
}

// Settlement returns how the question id was settled (the last time).
func (s *Session) Settlement(id string) (threadstate.Settled, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fold.Settlement(id)
}

// Mine reports whether the event ID id is one this session published (or
// tried to).
func (s *Session) Mine(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.mine, id)
}

// remember marks an event ID as this session's own.
func (s *Session) remember(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.mine, id) {
		return
	}
	if len(s.mine) >= maxMine {
		s.mine = slices.Delete(s.mine, 0, 1)
	}
	s.mine = append(s.mine, id)
}

// Message builds (without publishing) the turn.requested of a user
// message on the session's thread, for the session's agent, naming no end
// user (the processor records the publishing principal).
func (s *Session) Message(text string) (*event.Event, error) {
	return s.c.TurnRequest(s.thread, s.agent, text, "")
}

// Ask publishes a user message on the thread (see Send) and returns its
// event.
func (s *Session) Ask(ctx context.Context, text string) (*event.Event, *jetstream.PubAck, error) {
	e, err := s.Message(text)
	if err != nil {
		return nil, nil, err
	}
	ack, err := s.Send(ctx, e)
	return e, ack, err
}

// Send publishes a turn.requested built by Message (again, after an
// unconfirmed try: same ID, so JetStream drops a copy that got through),
// per the client's RetryPolicy. Once confirmed, the session counts its
// turn as running (threadstate.Fold.Expect) before the processor echoes
// it. Errors: those of Client.Publish.
func (s *Session) Send(ctx context.Context, e *event.Event) (*jetstream.PubAck, error) {
	if e.Subject() != s.thread || events.Type(e.Type()) != events.TypeTurnRequested {
		return nil, fmt.Errorf("session of %s: Send publishes this thread's turn.requested, not %s of %s", s.thread, e.Type(), e.Subject())
	}
	s.remember(e.ID())
	ack, err := s.c.Publish(ctx, e)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if accepted, ahead := s.fold.Position(e.ID()); !accepted || ahead >= 0 {
		s.fold.Expect(e.ID()) // not ended yet
	}
	s.mu.Unlock()
	return ack, nil
}

// response validates res against the open question id and builds its
// elicitation.responded.
func (s *Session) response(id string, res schema.ElicitResult) (*event.Event, error) {
	q, ok := s.Question(id)
	if !ok {
		why := "unknown on this thread"
		if st, settled := s.Settlement(id); settled {
			why = "already " + string(st.How)
		}
		return nil, fmt.Errorf("elicitation %s: %w (%s)", id, ErrNotPending, why)
	}
	if err := res.Validate(&q.Params); err != nil {
		return nil, fmt.Errorf("answer to %s: %w", id, err)
	}
	return s.c.Response(s.thread, id, res, "")
}

// Respond answers the open question id with res: it validates res against
// the question's requestedSchema (and the action rules of MCP, a
// confirmation's instructions) before publishing, then publishes it per
// the client's RetryPolicy. The processor's verdict arrives on Items: the
// echo of the answer (Mine, settling the question) or elicitation.rejected
// about it. Errors: ErrNotPending (answered, expired, withdrawn or
// unknown); a *schema.ValidationError naming each field and rule; those of
// Client.Publish.
func (s *Session) Respond(ctx context.Context, id string, res schema.ElicitResult) (*event.Event, error) {
	e, err := s.response(id, res)
	if err != nil {
		return nil, err
	}
	s.remember(e.ID())
	if _, err := s.c.Publish(ctx, e); err != nil {
		return e, err
	}
	return e, nil
}

// Answer is Respond that waits up to wait for the processor's verdict
// (Client.Deliver: accepted, with the questions still pending, or
// rejected). Errors: those of Respond before publishing; those of
// Deliver.
func (s *Session) Answer(ctx context.Context, id string, res schema.ElicitResult, wait time.Duration) (*Verdict, error) {
	e, err := s.response(id, res)
	if err != nil {
		return nil, err
	}
	s.remember(e.ID())
	return s.c.Deliver(ctx, e, wait)
}
