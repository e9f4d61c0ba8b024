package processor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// StateService is the NATS micro service name of the thread-state
// endpoint (ServeState).
const StateService = "parley-processor"

// ServeState answers thread-state requests (events.SubjectThreadStateAll)
// until ctx is cancelled: where a thread stands and which of its questions
// are open, from the thread's record — what an answer is checked
// against — never from its events, which PARLEY_CHAT's limits may have
// dropped. Replicas share the queue group "processor-state".
func (p *Processor) ServeState(ctx context.Context) error {
	return p.bus.Serve(ctx, bus.Endpoint{
		Service: StateService, Version: "0.1.0", Name: "thread-state", Subject: events.SubjectThreadStateAll,
		QueueGroup: "processor-state", Description: "parley processor: where a thread stands and its open questions",
	}, p.answerState)
}

// answerState answers a thread-state request that arrived on
// parley.state.<principal>.<thread> (bus.RequestSubject).
func (p *Processor) answerState(ctx context.Context, req *event.Event) (*event.Event, error) {
	principal, thread, ok := events.ParseThreadStateSubject(bus.RequestSubject(ctx))
	if !ok {
		return nil, fmt.Errorf("subject %q: must be parley.state.<principal>.<thread> with tokens of A-Z a-z 0-9 _ -", bus.RequestSubject(ctx))
	}
	in, err := events.Data[events.ThreadStateRequest](req)
	if err != nil {
		return nil, err
	}
	reply, err := p.threadState(ctx, principal, thread, req, in)
	if err != nil {
		return nil, err
	}
	return events.KindThreadStateAnswered.New(events.SourceProcessor, events.DerivedID("thread.state", req.ID()), thread, reply)
}

// threadState is thread's state as principal (speaking for in.OnBehalfOf,
// when trusted to) may see it: Forbidden unless it is a party of the
// thread (mayUse) or the thread has no owner.
func (p *Processor) threadState(ctx context.Context, principal, thread string, req *event.Event, in events.ThreadStateRequest) (events.ThreadStateReply, error) {
	out := events.ThreadStateReply{Thread: thread}
	who, err := p.identify(principal, req, in.OnBehalfOf, "data.onBehalfOf")
	if err != nil {
		out.Forbidden = true
		return out, nil
	}
	t, _, err := p.threads.Get(ctx, thread)
	switch {
	case errors.Is(err, kvstate.ErrIncompatible):
		return out, fmt.Errorf("thread %s: its record cannot be read by this version: %w", thread, err)
	case err != nil:
		return out, fmt.Errorf("reading thread %s: %w", thread, err)
	}
	if mayUse(t, who) != nil {
		out.Forbidden = true
		return out, nil
	}
	out.State, out.Queued = t.State, len(t.Queue)
	if t.State != ThreadIdle {
		out.TurnID = t.TurnID
	}
	pt := t.Paused
	if t.State != ThreadPaused || pt == nil || pt.TurnID != t.TurnID || !time.Now().Before(pt.ExpiresAt) {
		return out, nil
	}
	exp := pt.ExpiresAt
	out.ExpiresAt = &exp
	for _, el := range pt.Elicitations {
		if el.Status != StatusPending {
			continue
		}
		q := el.Request
		// As elicitation.requested asked it: the ID in _meta.
		q.Meta = maps.Clone(q.Meta)
		if q.Meta == nil {
			q.Meta = schema.Meta{}
		}
		q.Meta[schema.MetaElicitationID] = el.ID
		out.Pending = append(out.Pending, q)
	}
	return out, nil
}
