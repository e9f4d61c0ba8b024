package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/metrics"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// Bounds of streamed text: a message.delta is published when this much
// text is buffered or deltaInterval has passed since the last one, so a
// token-by-token stream does not become one event per token.
const (
	deltaMaxBytes = 256
	deltaInterval = 100 * time.Millisecond
	// progressTimeout bounds the wait for a progress event's ack.
	progressTimeout = 2 * time.Second
)

func tracer() trace.Tracer { return otel.Tracer("github.com/parley-dev/parley/workers/agent") }

// callID is parley's identity of the index-th tool call of the run's
// model call step (from 1): "call_<step-1>_<index>", unique within the run
// and independent of the ID the model gave it (models may reuse an ID
// across steps). Everything it keys is scoped by the run ID too: derived
// event and elicitation IDs, result keys and the tool-executor's ledger.
func callID(step, index int) string {
	return fmt.Sprintf("call_%d_%d", step-1, index)
}

// modelCallID is the ID to use for c in messages sent to the model.
func (c *CallState) modelCallID() string {
	if c.ModelCallID != "" {
		return c.ModelCallID
	}
	return c.Call.ID
}

// modelStep asks the model for the next step: an answer (run.Final) or
// tool calls (run.Calls). A model error that ends the turn sets run.Failed.
func (a *Agent) modelStep(ctx context.Context, run *Run) error {
	tools, err := a.tools.List(ctx)
	if err != nil {
		return err
	}
	step := run.Step + 1
	if run.modelAnnounced {
		// The last tool call's "finished" progress said so already.
		run.modelAnnounced = false
	} else {
		a.progress(ctx, run, events.PhaseModel, 0, "Thinking…", "The model is working on step "+fmt.Sprint(step)+".")
	}
	ctx, span := tracer().Start(ctx, "chat", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.GenAIOperationNameChat, attribute.String("parley.agent", run.Agent),
			attribute.String("parley.run_id", run.RunID), attribute.Int("parley.step", step)))
	defer span.End()
	ds := &deltaStream{a: a, ctx: ctx, run: run, step: step, generation: uuid.NewString()}
	retries := 0
	start := time.Now()
	mctx, cancel := context.WithTimeout(ctx, a.opts.ModelTimeout)
	defer cancel()
	resp, err := a.complete(mctx, model.Request{Agent: run.Agent, Messages: a.modelMessages(ctx, run), Tools: tools,
		OnDelta: ds.add,
		OnRetry: func(attempt int, wait time.Duration, err error) {
			retries++
			a.log.WarnContext(ctx, "model call failed; retrying", "run_id", run.RunID, "attempt", attempt, "wait", wait, "error", err)
			a.progress(ctx, run, events.PhaseRetry, retries, "Model busy, retrying…",
				fmt.Sprintf("The model did not answer (%v); trying again in %v.", err, wait.Round(time.Millisecond)))
		}})
	ds.flush()
	metrics.ModelCall(ctx, a.provider, start, resp, err)
	if mctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
		err = fmt.Errorf("no answer within %v", a.opts.ModelTimeout)
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(semconv.ErrorTypeKey.String(ReasonModelTimeout))
		a.log.WarnContext(ctx, "model call timed out; the run fails", "run_id", run.RunID, "timeout", a.opts.ModelTimeout)
		run.Failed = &events.RunFailed{RunID: run.RunID, TurnID: run.TurnID, Reason: ReasonModelTimeout,
			Detail: fmt.Sprintf("the model did not answer within %v (agent --model-call-timeout)", a.opts.ModelTimeout)}
		return nil
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		if me := model.AsError(err); me != nil {
			span.SetAttributes(semconv.ErrorTypeKey.String(me.Reason))
			run.Failed = &events.RunFailed{RunID: run.RunID, TurnID: run.TurnID, Reason: me.Reason, Detail: "the model call failed: " + me.Error()}
			return nil
		}
		return fmt.Errorf("model call: %w", err)
	}
	run.Step = step
	if resp.Model != "" {
		span.SetAttributes(semconv.GenAIResponseModel(resp.Model))
	}
	if u := resp.Usage; u != nil {
		span.SetAttributes(semconv.GenAIUsageInputTokens(int(u.InputTokens)), semconv.GenAIUsageOutputTokens(int(u.OutputTokens)))
		run.Usage = append(run.Usage, events.CallUsage{Step: step, Model: resp.Model, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens})
	}
	if resp.ToolCallsError != "" {
		// The model asked for tool calls that could not be read: none
		// runs (one of them may be two calls merged, or cut short).
		a.log.ErrorContext(ctx, "the model's tool calls could not be read; none is run and the model is told why",
			"run_id", run.RunID, "step", step, "calls", len(resp.ToolCalls), "error", resp.ToolCallsError)
		span.AddEvent("unreadable tool calls", trace.WithAttributes(attribute.String("parley.error", resp.ToolCallsError)))
		if len(resp.ToolCalls) == 0 {
			run.Failed = &events.RunFailed{RunID: run.RunID, TurnID: run.TurnID, Reason: model.ReasonRejected,
				Detail: "the model's tool calls could not be read: " + resp.ToolCallsError}
			return nil
		}
	}
	if len(resp.ToolCalls) == 0 {
		run.Messages = append(run.Messages, model.Message{Role: model.RoleAssistant, Text: resp.Text})
		final := schema.ChatMessage{Role: schema.RoleAssistant, Text: resp.Text}
		if len(resp.Chunks) > 0 {
			// The answer is the fold of what was streamed, each chunk's
			// _meta kept (seed 001 streaming rule).
			if final, err = schema.FoldChunks(resp.Chunks...); err != nil {
				run.Failed = &events.RunFailed{RunID: run.RunID, TurnID: run.TurnID, Reason: model.ReasonRejected,
					Detail: "the model's streamed answer cannot be folded: " + err.Error()}
				return nil
			}
			final.Role = schema.RoleAssistant
		}
		text, blocks := boundUserBlocks(final.Text, append(referenceLinks(run.Messages), userBlocks(run.Messages)...))
		final.Text = text
		final.Content = append(final.Content, resp.Content...)
		final.Content = append(final.Content, blocks...)
		enrichFinal(&final, run.Messages, resp.SuggestedReplies)
		if len(run.Usage) > 0 {
			u := events.Usage{Calls: run.Usage}
			for _, c := range run.Usage {
				u.InputTokens += c.InputTokens
				u.OutputTokens += c.OutputTokens
			}
			final.Meta = cloneMeta(final.Meta)
			final.Meta[events.MetaUsage] = u
			span.SetAttributes(attribute.Int64("parley.turn.usage.input_tokens", u.InputTokens),
				attribute.Int64("parley.turn.usage.output_tokens", u.OutputTokens))
		}
		run.Final = &final
		return nil
	}
	// The model's message keeps the model's IDs (it reads them back); a
	// missing or repeated ID within the step is replaced by parley's, so
	// every tool result still pairs with exactly one call.
	msgCalls := make([]schema.ToolCall, len(resp.ToolCalls))
	seen := map[string]bool{}
	for i, tc := range resp.ToolCalls {
		id := callID(step, i)
		modelID := tc.ID
		if modelID == "" || seen[modelID] {
			modelID = id
		}
		seen[modelID] = true
		msgCalls[i] = tc
		msgCalls[i].ID = modelID
		tc.ID = id
		c := &CallState{Call: tc, ModelCallID: modelID, Status: callNew}
		if resp.ToolCallsError != "" {
			c.Status, c.Result = callDone, unreadableCalls(tc.Name, resp.ToolCallsError)
		}
		run.Calls = append(run.Calls, c)
	}
	run.Messages = append(run.Messages, model.Message{Role: model.RoleAssistant, Text: resp.Text, ToolCalls: msgCalls})
	return nil
}

// unreadableCalls is the tool error of a call of a model step whose tool
// calls could not be read (model.Response.ToolCallsError): no call of the
// step ran, and the model is asked to send them again.
func unreadableCalls(name, why string) *schema.CallToolResult {
	return schema.ErrorResult(fmt.Sprintf("%s was not run, so nothing changed: the tool calls of your last answer could not be read (%s). "+
		"None of them was run. Send the tool calls again, each with its own id, name and JSON arguments.", name, why))
}

// complete calls the provider under ctx, returning when ctx ends even if
// the provider does not (a provider that ignores its context cannot hold
// the handler past Options.ModelTimeout; its late answer is dropped).
func (a *Agent) complete(ctx context.Context, req model.Request) (model.Response, error) {
	type outcome struct {
		resp model.Response
		err  error
	}
	// Callbacks stop once complete has returned: a late delta from an
	// abandoned call must not race the caller's flush.
	var mu sync.Mutex
	closed := false
	if f := req.OnDelta; f != nil {
		req.OnDelta = func(d model.Delta) {
			mu.Lock()
			defer mu.Unlock()
			if !closed {
				f(d)
			}
		}
	}
	if f := req.OnRetry; f != nil {
		req.OnRetry = func(attempt int, wait time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			if !closed {
				f(attempt, wait, err)
			}
		}
	}
	done := make(chan outcome, 1)
	go func() {
		resp, err := a.provider.Complete(ctx, req)
		done <- outcome{resp, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		o.err = ctx.Err()
	}
	mu.Lock()
	closed = true
	mu.Unlock()
	return o.resp, o.err
}

// deltaStream publishes streamed text as message.delta events, coalescing
// small pieces (deltaMaxBytes, deltaInterval).
type deltaStream struct {
	a    *Agent
	ctx  context.Context
	run  *Run
	step int
	// generation is random per execution of the model call: a step redone
	// after a crash streams under a new one (its text may differ), and
	// every delta's event ID is unique, so nothing needs deduplication.
	generation string
	attempt    int
	seq        int
	buf        string
	last       time.Time
}

func (d *deltaStream) add(delta model.Delta) {
	if delta.Attempt != d.attempt {
		d.flush()
		d.attempt, d.seq = delta.Attempt, 0
	}
	d.buf += delta.Text
	if len(d.buf) >= deltaMaxBytes || time.Since(d.last) >= deltaInterval {
		d.flush()
	}
}

func (d *deltaStream) flush() {
	if d.buf == "" {
		return
	}
	text := d.buf
	d.buf, d.last = "", time.Now()
	run := d.run
	e, err := events.KindMessageDelta.New(events.SourceAgent,
		events.DerivedID("message.delta", d.generation, fmt.Sprint(d.attempt), fmt.Sprint(d.seq)), run.Thread,
		events.MessageDelta{TurnID: run.TurnID, RunID: run.RunID, Step: d.step, Generation: d.generation, Attempt: d.attempt, Seq: d.seq,
			Chunk: schema.ChatMessage{Role: schema.RoleAssistant, Text: text}})
	d.seq++
	if err == nil {
		e.SetExtension(events.ExtRunID, run.RunID)
		e.SetExtension(events.ExtTurnID, run.TurnID)
		var subject string
		if subject, err = events.SubjectOf(e, events.StreamChat, run.Thread); err == nil {
			err = d.a.bus.PublishCore(d.ctx, subject, e)
		}
	}
	if err != nil {
		d.a.log.WarnContext(d.ctx, "message.delta not published", "run_id", run.RunID, "error", err)
	}
}

// progress publishes an MCP-shaped progress notification for the turn
// (token: the turn ID) on parley.chat.<thread>.progress, with a short
// status line in _meta["drupal.org/ai.status_item"] and the phase in
// _meta["dev.parley/phase"]. Progress is an ordinal that increases through
// the turn: it is computed from the run's position (step, resumes, phase,
// n), so it is the same on whichever agent replica publishes it, and so is
// the event ID: the copy a redelivered event republishes is dropped by the
// stream's duplicate window. Failure to publish (bounded by
// progressTimeout) is logged, never fatal: progress is advisory. It is
// published without waiting for its acknowledgement (bus.PublishAsync;
// a delayed one bus.PublishFenced, stored only while its turn's end is
// not, since another replica may have ended the run), so it does not
// hold up the turn; the run's end on this replica waits for it, so it is
// stored before the run's end event (pendingProgress.end). It is
// published only once its phase has lasted Options.ProgressDelay
// (DefaultProgressDelay): the run's next progress, or its end, drops it
// before that (pendingProgress).
func (a *Agent) progress(ctx context.Context, run *Run, phase string, n int, status, message string) {
	if run.TurnID == "" || run.Thread == "" {
		return
	}
	order := 0
	switch phase {
	case events.PhaseRetry:
		order = 1
	case events.PhaseTool:
		order = 2
	case events.PhaseWaiting:
		order = 3
	}
	step := run.Step
	if phase == events.PhaseModel || phase == events.PhaseRetry {
		step++ // the call being made
	}
	value := float64((((step*16+min(len(run.Resumes), 15))*4+order)*1024 + min(n, 1023)))
	runID, turnID, thread := run.RunID, run.TurnID, run.Thread
	// The event is built only when it is published: most phases end
	// before the delay, and their progress is dropped unbuilt.
	a.pending.announce(ctx, runID, len(run.Resumes), a.opts.ProgressDelay, func(ctx context.Context) <-chan struct{} {
		onErr := func(err error) {
			a.log.WarnContext(ctx, "progress not published", "run_id", runID, "error", err)
		}
		e, subject, err := progressEvent(runID, turnID, thread, phase, value, status, message)
		if err != nil {
			onErr(err)
			settled := make(chan struct{})
			close(settled)
			return settled
		}
		if a.opts.ProgressDelay < 0 {
			// Published by the handler of the phase itself, before
			// anything the phase sends: nothing of the run can
			// have ended it yet.
			return a.bus.PublishAsync(ctx, subject, e, progressTimeout, onErr)
		}
		// A delayed phase may have been ended by another replica
		// (the tool's result handled there, and the run's end): its
		// progress is stored only while no end of its turn is (a
		// read of the thread's last turn.completed and turn.failed),
		// and not after one stored since (fenced on the thread's
		// turn events).
		return a.bus.PublishFenced(ctx, events.StreamChat, subject, e, events.ChatSubject(thread, "turn.>"),
			[]string{events.ChatSubject(thread, events.ChatTurnCompleted), events.ChatSubject(thread, events.ChatTurnFailed)},
			func(last *jetstream.RawStreamMsg) bool { return turnEnded(last, turnID) }, progressTimeout, onErr)
	})
}

// progressEvent is the progress event of a run's phase, and its subject.
func progressEvent(runID, turnID, thread, phase string, value float64, status, message string) (*event.Event, string, error) {
	p := schema.Progress{ProgressToken: schema.StringToken(turnID), Progress: value, Message: message}
	p.Meta.SetStatusItem(status)
	p.Meta = cloneMeta(p.Meta)
	p.Meta[events.MetaPhase] = phase
	e, err := events.KindProgress.New(events.SourceAgent, events.DerivedID("progress", runID, fmt.Sprint(value)), thread, p)
	if err != nil {
		return nil, "", err
	}
	subject, err := events.SubjectOf(e, events.StreamChat, thread)
	if err != nil {
		return nil, "", err
	}
	e.SetExtension(events.ExtRunID, runID)
	e.SetExtension(events.ExtTurnID, turnID)
	return e, subject, nil
}

// Kinds of tool progress (see toolProgress).
const (
	toolPolicy = iota
	toolStarted
	toolFinished
)

// toolProgress reports a tool call's step: asking the policy services,
// started, or finished.
func (a *Agent) toolProgress(ctx context.Context, run *Run, kind int, c *CallState) {
	idx := 0
	for i, x := range run.Calls {
		if x == c {
			idx = i
		}
	}
	name := c.Call.Name
	switch kind {
	case toolPolicy:
		a.progress(ctx, run, events.PhaseTool, min(idx, 255), "Checking "+name,
			"Asking the policy services whether "+name+" may run.")
	case toolStarted:
		a.progress(ctx, run, events.PhaseTool, 256+min(idx, 255), "Running "+name, name+" started.")
	case toolFinished:
		settled := run.count(callDone) + run.count(callAwaiting)
		msg := fmt.Sprintf("%s finished (%d of %d tool calls of this step settled).", name, settled, len(run.Calls))
		if run.count(callDone) == len(run.Calls) && run.Failed == nil {
			// Every result is in: the model step follows at once, and
			// this one progress says so instead of a second "Thinking…"
			// (one JetStream message less per step with tool calls).
			msg = fmt.Sprintf("%s finished (%d of %d tool calls of this step settled); the model is working on step %d.",
				name, settled, len(run.Calls), run.Step+1)
			run.modelAnnounced = true
		}
		a.progress(ctx, run, events.PhaseTool, 512+min(settled, 511), name+" finished", msg)
	}
}

// Bounds of what the final message gathers from the turn's tool results.
const (
	// maxCitations bounds _meta["drupal.org/ai.citations"]; later ones are
	// left out.
	maxCitations = 20
	// maxStructuredBytes bounds the structuredContent copied to
	// _meta["drupal.org/ai.structured_content"]; a larger one stays only in
	// the tool result (the model saw it whole).
	maxStructuredBytes = 16 << 10
)

// enrichFinal adds to the final message what the turn's tool results
// (those after the latest user message) offer the user:
//
//   - the sources they cited (their result _meta["drupal.org/ai.citations"])
//     after any citations of the streamed chunks, each URL once, at most
//     maxCitations;
//   - the structuredContent of the latest result that has one, whole, at
//     _meta["drupal.org/ai.structured_content"] (when at most
//     maxStructuredBytes of JSON);
//   - the model's suggested replies at _meta["drupal.org/ai.suggested_replies"]
//     (at most schema.MaxSuggestedReplies).
//
// A tool's citations lose their anchors (they point into the tool's text).
func enrichFinal(final *schema.ChatMessage, msgs []model.Message, suggested []string) {
	start := 0
	for i, m := range msgs {
		if m.Role == model.RoleUser {
			start = i
		}
	}
	cites, _ := final.Meta.Citations()
	seen := map[string]bool{}
	for _, c := range cites {
		seen[c.URL] = true
	}
	var structured map[string]any
	for _, m := range msgs[start:] {
		if m.Role != model.RoleTool || m.Result == nil {
			continue
		}
		if m.Result.StructuredContent != nil {
			structured = m.Result.StructuredContent
		}
		cs, err := m.Result.Meta.Citations()
		if err != nil {
			continue
		}
		for _, c := range cs {
			// A tool's anchors point into the tool's text, not the answer.
			c.Anchors = nil
			if !seen[c.URL] && len(cites) < maxCitations && c.Validate() == nil {
				seen[c.URL] = true
				cites = append(cites, c)
			}
		}
	}
	if len(cites) > 0 {
		final.Meta.SetCitations(cites)
	}
	if structured != nil {
		if b, err := json.Marshal(structured); err == nil && len(b) <= maxStructuredBytes {
			final.Meta = cloneMeta(final.Meta)
			final.Meta[schema.MetaStructuredContent] = structured
		}
	}
	var rs []string
	for _, r := range suggested {
		// Blank and over-long replies are left out, and those past the
		// schema's bound.
		if strings.TrimSpace(r) != "" && len(r) <= schema.MaxSuggestedReplyBytes && len(rs) < schema.MaxSuggestedReplies {
			rs = append(rs, r)
		}
	}
	if len(rs) > 0 {
		final.Meta.SetSuggestedReplies(rs)
	}
}

// turnEnded reports whether end, the thread's last turn.completed or
// turn.failed, ends turnID.
func turnEnded(end *jetstream.RawStreamMsg, turnID string) bool {
	e, err := events.Decode(events.Header(end.Header), end.Data)
	if err != nil {
		return true // an end of some turn it cannot read: the safe side
	}
	t, _ := e.Extensions()[events.ExtTurnID].(string)
	return t == turnID
}
