package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/metrics"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// Options configures an Agent.
type Options struct {
	// Logger. Optional. Default: discard.
	Logger *slog.Logger
	// PreExecuteTimeout bounds one pre-execute request. Optional. Default: 2s.
	PreExecuteTimeout time.Duration
	// PreExecuteSettle is how long the agent keeps listening after every
	// expected policy answered (unless one vetoed, or the tool is
	// read-only by its registered definition), within
	// PreExecuteTimeout: a second reply for a policy (a replica in another
	// queue group, a stray subscriber with that policy's credentials)
	// that arrives in it still counts, the strictest answer of each policy
	// winning. Optional. Default: DefaultPreExecuteSettle.
	PreExecuteSettle time.Duration
	// ProgressDelay is how long a phase of a turn must last before its
	// progress notification is published; a phase that ends sooner
	// publishes none (DefaultProgressDelay). Optional. Default:
	// DefaultProgressDelay; negative: every phase's progress at once.
	ProgressDelay time.Duration
	// ModelTimeout bounds one model call, its retries included. A call
	// still running after it ends the run with run.failed (and the turn
	// with turn.failed) reason ReasonModelTimeout. Optional. Default:
	// DefaultModelTimeout.
	ModelTimeout time.Duration
	// MaxSteps bounds model calls per run. Optional. Default: 16.
	MaxSteps int
	// Concurrency is the number of events handled at once. Optional. Default: 8.
	Concurrency int
	// RunTTL bounds how long run checkpoints are kept. Optional. Default: 48h.
	RunTTL time.Duration
	// FormRevision is the MCP revision the clients render forms in: every
	// form from a tool, and every confirmation, is validated for it before
	// it is asked; a tool form's string, number or enum default (a
	// 2025-11-25 prefill) is dropped for 2025-06-18 rather than the form
	// refused (schema.RequestedSchema.ForRevision). Optional. Default:
	// schema.DefaultRevision (2025-06-18).
	FormRevision schema.Revision
	// Policies names the policy services every pre-execute request waits
	// for (each a subject token, at most events.MaxPolicyReplies): the
	// agent gathers replies until each of them answered or
	// PreExecuteTimeout passed; one that did not answer vetoes a tool that
	// is not read-only (policy_timeout). Optional. Default:
	// DefaultPolicies ("gate").
	Policies []string
	// NoRunCache turns off the agent's memory of the run records it wrote
	// (runCache): every tool result then reads its run's record. Optional.
	// Default: false (remembered; correct with any number of replicas).
	NoRunCache bool
}

// DefaultPreExecuteSettle is Options.PreExecuteSettle's default: 100 ms,
// added to every call of a tool that is not read-only that no policy
// vetoed (a read-only call does not wait).
const DefaultPreExecuteSettle = 100 * time.Millisecond

// DefaultModelTimeout is Options.ModelTimeout's default: 10 minutes, room
// for a provider's own attempts (model/openai: 4 attempts of up to 2
// minutes each, and its waits between them).
const DefaultModelTimeout = 10 * time.Minute

// ReasonModelTimeout is the run.failed (and turn.failed) reason of a run
// whose model call did not finish within Options.ModelTimeout.
const ReasonModelTimeout = "model_timeout"

// handlerTimeout bounds one event's handling: one model call, the
// pre-execute requests of a step's calls (each asked up to three times),
// and a minute for the KV writes and publishes.
func (a *Agent) handlerTimeout() time.Duration {
	return a.opts.ModelTimeout + time.Duration(maxCallsPerStep)*(3*a.opts.PreExecuteTimeout+time.Second) + time.Minute
}

// maxCallsPerStep is the number of tool calls of one model step the
// handler deadline allows pre-execute requests for; a step with more
// calls still runs, its later requests sharing the same deadline.
const maxCallsPerStep = 16

// Agent is the agent worker.
type Agent struct {
	bus *bus.Client
	// router routes Handle's events (newRouter), built on first use.
	routerOnce sync.Once
	router     *bus.Router
	runs       *kvstate.Bucket[Run]
	// runCache remembers the run records this process wrote (nil: off).
	runCache *runCache
	tools    *kvstate.ToolRegistry
	// decisions holds the decision record of every dispatched call that a
	// policy allowed or a person confirmed (parley_decisions).
	decisions *kvstate.Decisions
	results   jetstream.ObjectStore // tool results too large for a run record
	// pending holds progress until its phase has lasted ProgressDelay.
	pending  pendingProgress
	provider model.Provider
	opts     Options
	log      *slog.Logger
}

// New opens the agent's buckets (idempotently). provider is required. It
// fails when opts.Policies names an invalid policy or too many.
func New(ctx context.Context, b *bus.Client, provider model.Provider, opts *Options) (*Agent, error) {
	if b == nil || provider == nil {
		panic("agent.New: nil bus or provider")
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.PreExecuteTimeout <= 0 {
		o.PreExecuteTimeout = 2 * time.Second
	}
	if o.PreExecuteSettle <= 0 {
		o.PreExecuteSettle = DefaultPreExecuteSettle
	}
	if o.ModelTimeout <= 0 {
		o.ModelTimeout = DefaultModelTimeout
	}
	if o.ProgressDelay == 0 {
		o.ProgressDelay = DefaultProgressDelay
	}
	if o.MaxSteps <= 0 {
		o.MaxSteps = 16
	}
	if o.RunTTL <= 0 {
		o.RunTTL = 48 * time.Hour
	}
	if o.FormRevision == "" {
		o.FormRevision = schema.DefaultRevision
	}
	if len(o.Policies) == 0 {
		o.Policies = DefaultPolicies
	}
	if len(o.Policies) > events.MaxPolicyReplies {
		return nil, fmt.Errorf("policies: %d listed, at most %d", len(o.Policies), events.MaxPolicyReplies)
	}
	for _, p := range o.Policies {
		if err := events.ValidToken("policies", p); err != nil {
			return nil, err
		}
	}
	o.Policies = slices.Clone(o.Policies)
	js := b.JetStream()
	runs, err := kvstate.OpenBucket[Run](ctx, js, kvstate.BucketRuns, kvstate.BucketOptions{Storage: b.Storage(), Replicas: b.Replicas(), TTL: o.RunTTL})
	if err != nil {
		return nil, err
	}
	tools, err := kvstate.OpenTools(ctx, js, b.Storage(), b.Replicas())
	if err != nil {
		return nil, err
	}
	tools.SetLogger(o.Logger)
	results, err := openResults(ctx, js, b.Storage(), b.Replicas(), o.RunTTL)
	if err != nil {
		return nil, err
	}
	decisions, err := kvstate.OpenDecisions(ctx, js, b.Storage(), b.Replicas())
	if err != nil {
		return nil, err
	}
	cache := newRunCache(!o.NoRunCache, func() uint64 { return b.Conn().Stats().Reconnects })
	return &Agent{bus: b, runs: runs, runCache: cache, tools: tools, decisions: decisions, results: results,
		provider: provider, opts: o, log: o.Logger}, nil
}

// Run consumes agent work until ctx is cancelled, then drains and returns nil.
func (a *Agent) Run(ctx context.Context) error {
	return a.bus.Consume(ctx, bus.ConsumerSpec{
		Stream: events.StreamAgent, Durable: "agent", Concurrency: a.opts.Concurrency,
		Compensate: a.onDeadLetter, HandlerTimeout: a.handlerTimeout(),
	}, a.Handle)
}

// Handle handles one event of the agent's work queue: run.requested,
// run.resumed and tool.result.ready; any other type is dead-lettered (see
// bus.Router).
func (a *Agent) Handle(ctx context.Context, d *bus.Delivery) error {
	a.routerOnce.Do(func() { a.router = a.newRouter() })
	return a.router.Handle(ctx, d)
}

// newRouter routes the agent's work queue by event type.
func (a *Agent) newRouter() *bus.Router {
	r := bus.NewRouter()
	bus.On(r, events.KindRunRequested, func(ctx context.Context, _ *bus.Delivery, in events.RunRequested) error {
		return a.onRequested(ctx, in)
	})
	bus.On(r, events.KindRunResumed, func(ctx context.Context, d *bus.Delivery, in events.RunResumed) error {
		return a.onResumed(ctx, d.Event, in)
	})
	bus.On(r, events.KindToolResultReady, func(ctx context.Context, d *bus.Delivery, in events.ToolResult) error {
		return a.onToolResult(ctx, d.NumDelivered == 1, in)
	})
	return r
}

// onDeadLetter fails the run, so the thread is not left waiting. A failed
// publish is returned: the bus retries it with backoff (see
// bus.ConsumerSpec.Compensate).
func (a *Agent) onDeadLetter(ctx context.Context, d *bus.Delivery, reason error) error {
	if d.Event == nil {
		return nil
	}
	var ids struct {
		RunID  string `json:"runId"`
		TurnID string `json:"turnId"`
	}
	if json.Unmarshal(d.Event.Data(), &ids) != nil || ids.RunID == "" {
		return nil
	}
	run, _, err := a.runs.Get(ctx, ids.RunID)
	if err != nil {
		run = Run{RunID: ids.RunID, TurnID: ids.TurnID, Thread: d.Event.Subject()}
	}
	return a.publishFailed(ctx, &run, "dead_lettered", "the agent could not handle "+d.Event.Type()+": "+reason.Error())
}

// onRequested starts the run in memory, without reading or writing its
// record first: the record is created by the first checkpoint advance
// needs (before a tool call is dispatched). If that create finds a record,
// this is a redelivery of a run that went on: the in-memory start is
// dropped (nothing was dispatched from it) and the run continues from its
// checkpoint.
func (a *Agent) onRequested(ctx context.Context, in events.RunRequested) error {
	if in.RunID == "" || in.Thread == "" {
		return bus.Permanent(errors.New("runId and thread: required"))
	}
	run := Run{Format: RunFormat, RunID: in.RunID, TurnID: in.TurnID, Thread: in.Thread, Agent: in.Agent,
		Messages: fromChat(in.Messages)}
	a.fit(ctx, &run)
	err := a.advance(ctx, &run, 0, true)
	if !errors.Is(err, kvstate.ErrConflict) {
		return err
	}
	cur, rev, err := a.runs.Get(ctx, in.RunID)
	if err != nil {
		return err
	}
	if err := a.redispatch(ctx, &cur); err != nil {
		return err
	}
	return a.advance(ctx, &cur, rev, false)
}

// onToolResult applies a tool result to its run and drives the run on;
// first is whether this is the message's first delivery. The run record
// is read from the bucket, except on the first attempt of a first
// delivery when this agent wrote the record moments ago: then it is the
// copy runCache remembers (see runCache for why that is safe). A
// remembered record is only trusted to apply the result to: what it says
// otherwise (the call not dispatched, in another round, or unknown) may
// just mean it is behind, so the record is read; and a write from it that
// conflicts is retried on a read.
func (a *Agent) onToolResult(ctx context.Context, first bool, in events.ToolResult) error {
	for attempt := 0; ; attempt++ {
		var (
			run Run
			rev uint64
			err error
		)
		remembered := false
		if attempt == 0 && first {
			run, rev, remembered = a.runCache.fresh(in.RunID)
		}
		if !remembered {
			run, rev, err = a.runs.Get(ctx, in.RunID)
		}
		if errors.Is(err, kvstate.ErrNotFound) {
			return bus.Permanent(fmt.Errorf("tool result for unknown run %s", in.RunID))
		}
		if err != nil {
			return err
		}
		c := run.call(in.CallID)
		if c == nil || c.Status != callDispatched || c.Round != in.Round {
			if remembered {
				continue // memory may be behind the record: read it
			}
			// Already applied (a redelivery). Drive the run on from its
			// checkpoint all the same: the agent that applied it may have
			// died before taking the next step, and nothing else would.
			return a.advance(ctx, &run, rev, false)
		}
		switch {
		case in.InputRequired != nil:
			ir := downgradeForms(in.InputRequired, a.opts.FormRevision)
			if err := checkInputRequired(ir, a.opts.FormRevision); err != nil {
				a.refuseForm(ctx, &run, c, "the tool", err)
				break
			}
			a.awaitInput(&run, c, ir)
		case in.Result != nil:
			r, err := a.admitResult(ctx, &run, c, in.Result)
			if err != nil {
				return err
			}
			c.Status, c.Result = callDone, r
			run.addEffect(c)
		default:
			c.Status, c.Result = callDone, schema.ErrorResult("the tool returned no result")
			run.addEffect(c)
		}
		a.toolProgress(ctx, &run, toolFinished, c)
		// The result is written with the run's next checkpoint (advance):
		// at once when other results are still awaited, else after the
		// next model step. A conflict there means another delivery
		// changed the run meanwhile, or the remembered record was behind
		// (nothing was dispatched from this one): read it again.
		err = a.advance(ctx, &run, rev, true)
		if errors.Is(err, kvstate.ErrConflict) && attempt < 20 {
			continue
		}
		return err
	}
}

// awaitInput turns an input-required result into pending elicitations.
func (a *Agent) awaitInput(run *Run, c *CallState, ir *schema.InputRequiredResult) {
	c.Status = callAwaiting
	c.RequestState = ir.RequestState
	c.InputKeys = map[string]string{}
	c.Awaiting = nil
	keys := make([]string, 0, len(ir.InputRequests))
	for k := range ir.InputRequests {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		req := ir.InputRequests[k]
		id := events.DerivedID("elicitation", run.RunID, c.Call.ID, fmt.Sprint(c.Round), k)
		params := req.Params
		params.Meta = cloneMeta(params.Meta)
		// A tool's form is input to the tool, never a confirmation: only
		// the agent words those (below, in decide), so a tool's
		// _meta["drupal.org/ai.tool_call"] would draw one in its name.
		delete(params.Meta, schema.MetaToolCall)
		params.Meta[schema.MetaElicitationID] = id
		c.InputKeys[id] = k
		c.Awaiting = append(c.Awaiting, events.PendingElicitation{
			ID: id, Kind: events.KindForm, CallID: c.Call.ID, Tool: c.Call.Name, Request: params,
		})
	}
}

func (a *Agent) onResumed(ctx context.Context, e *event.Event, in events.RunResumed) error {
	if snap, err := decodeSnapshot(in.Snapshot); err == nil && !snap.Checkpointed {
		// Paused before its first checkpoint: there is no record to read,
		// unless this is a redelivery and the resumed run wrote one (the
		// create below then conflicts, and the record decides).
		err := a.resume(ctx, e, in, snap, 0)
		if !errors.Is(err, kvstate.ErrConflict) {
			return err
		}
	}
	run, rev, err := a.runs.Get(ctx, in.RunID)
	switch {
	case err == nil && run.resumed(e.ID()):
		// Redelivery: continue from the checkpoint.
		if err := a.redispatch(ctx, &run); err != nil {
			return err
		}
		return a.advance(ctx, &run, rev, false)
	case errors.Is(err, kvstate.ErrNotFound):
		rev = 0 // the first checkpoint creates the record
	case err != nil:
		return err
	}
	snap, serr := decodeSnapshot(in.Snapshot)
	if serr != nil {
		r := Run{RunID: in.RunID, TurnID: in.TurnID, Thread: in.Thread, Agent: in.Agent}
		return a.publishFailed(ctx, &r, events.RejectStateIncompatible,
			"the paused run cannot be resumed by this version of the agent: "+serr.Error())
	}
	return a.resume(ctx, e, in, snap, rev)
}

// resume applies the answers of in to the paused run snap and drives it
// on; rev is the revision of the run's record (0: none). The resume is
// written with the next checkpoint (before a call is dispatched); a
// conflict there (kvstate.ErrConflict) fails this delivery, and its
// redelivery finds the resume applied.
func (a *Agent) resume(ctx context.Context, e *event.Event, in events.RunResumed, snap *Run, rev uint64) error {
	answers := map[string]events.Answer{}
	for _, ans := range in.Answers {
		answers[ans.ElicitationID] = ans
	}
	for _, c := range snap.Calls {
		if c.Status != callAwaiting {
			continue
		}
		a.applyAnswers(snap, c, answers)
		if snap.Final != nil {
			break
		}
	}
	if snap.Final != nil {
		// A cancel ended the iteration: say what else was not run.
		var notRun []string
		for _, c := range snap.Calls {
			if c.Status != callDone {
				notRun = append(notRun, c.Call.Name)
			}
		}
		if len(notRun) > 0 {
			snap.Final.Text += " Not run either: " + strings.Join(notRun, ", ") + "."
		}
	}
	snap.Resumes = append(snap.Resumes, e.ID())
	a.fit(ctx, snap)
	return a.advance(ctx, snap, rev, true)
}

// applyAnswers settles a call from the user's answers (design section 4).
func (a *Agent) applyAnswers(run *Run, c *CallState, answers map[string]events.Answer) {
	var got []events.Answer
	for _, p := range c.Awaiting {
		ans, ok := answers[p.ID]
		if !ok {
			// Not answered (should not happen: the processor resumes only
			// when all are settled). Treat as cancel, never as a decline.
			ans = events.Answer{ElicitationID: p.ID, Result: schema.ElicitResult{Action: schema.ActionCancel}}
		}
		got = append(got, ans)
	}
	kind := c.Awaiting[0].Kind
	if kind == events.KindToolConfirmation {
		c.Answer = &got[0] // a person's decision; form answers are not decisions
	}
	for _, ans := range got {
		if ans.Result.Action == schema.ActionCancel {
			if kind == events.KindToolConfirmation {
				c.Answer = &ans
			}
			run.Final = &schema.ChatMessage{Role: schema.RoleAssistant,
				Text: fmt.Sprintf("Stopped: %s was cancelled, so I did not continue.", c.Call.Name)}
			c.Status, c.Result = callDone, schema.ErrorResult("User cancelled "+c.Call.Name)
			return
		}
	}
	if kind == events.KindToolConfirmation {
		ans := got[0]
		instr, _ := ans.Result.Content[schema.InstructionsProperty].(string)
		if ans.Result.Action == schema.ActionAccept {
			c.Status, c.Instructions = callNew, instr
			if len(ans.Arguments) > 0 && !schema.SameArguments(ans.Arguments, c.Call.Arguments) {
				// Accepted with changed arguments (checked by the
				// processor against the confirmation's input schema):
				// what runs is exactly what the person confirmed, and
				// the policies decide on it again before it runs
				// (decide, decideEdited).
				if c.Edit == nil {
					c.Edit = &CallEdit{OriginalArguments: c.Call.Arguments}
				}
				c.Edit.By = ans.AnsweredBy
				c.Call.Arguments = ans.Arguments
				c.Decision = nil
				return
			}
			c.Decision = &events.Decision{Decision: events.DecisionAllow, Reason: "confirmed by " + who(ans),
				Policy: c.Decision.Policy, ConfigVersion: c.Decision.ConfigVersion}
			return
		}
		c.Status = callDone
		c.Result = &schema.CallToolResult{Content: schema.ContentList{schema.Text(declinedText(c.Call.Name, instr))}}
		return
	}
	responses := map[string]schema.ElicitResult{}
	for _, ans := range got {
		if ans.Result.Action != schema.ActionAccept {
			c.Status = callDone
			c.Result = schema.ErrorResult(fmt.Sprintf("User declined to provide the input %s asked for.", c.Call.Name))
			return
		}
		responses[c.InputKeys[ans.ElicitationID]] = ans.Result
	}
	c.Status = callNew
	c.Round++
	c.Decision = &events.Decision{Decision: events.DecisionAllow, Reason: "input provided by " + who(got[0])}
	c.InputResponses = responses
}

// decideEdited is the decision on c given the policies' combined
// decision d. For a call a person edited while accepting its
// confirmation, a confirm is satisfied by that acceptance (nobody is
// asked to confirm their own edit) unless a confirming policy set
// Reconfirm; every other decision stands (a veto stops the edited call).
func decideEdited(c *CallState, d *events.Decision) *events.Decision {
	if c.Edit == nil || d.Decision != events.DecisionConfirm || c.Answer == nil || c.Answer.Result.Action != schema.ActionAccept {
		return d
	}
	for _, p := range d.Policies {
		if p.Decision == events.DecisionConfirm && p.Reconfirm {
			return d
		}
	}
	return &events.Decision{Decision: events.DecisionAllow,
		Reason: "confirmed by " + who(*c.Answer) + " with the arguments they changed",
		Policy: d.Policy, ConfigVersion: d.ConfigVersion}
}

// editKey tells apart the pre-execute request and the confirmation of an
// edited call from those of the call as the model wrote it (and of
// another edit): the edited arguments' digest, or nothing when c is not
// edited.
func editKey(c *CallState) []string {
	if c.Edit == nil {
		return nil
	}
	sum, _ := schema.ArgumentsSHA256(c.Call.Arguments)
	return []string{"edited", sum}
}

// who names the answerer of a for a decision's reason.
func who(a events.Answer) string {
	if !a.AnsweredBy.IsZero() {
		return a.AnsweredBy.String()
	}
	return "the user"
}

// advance drives the run as far as it can go without waiting. rev is the
// revision of the run's record (0: there is none yet), dirty whether run
// holds changes the record lacks.
//
// The record is written only where a crash would otherwise lose or repeat
// something: before tool calls are dispatched (a result arriving at once,
// on another replica, must find its call marked dispatched; a redelivery
// must not dispatch calls of a model step redone differently) and when the
// run stops to wait for results. A model step, a policy decision or a
// fold of results is written with the next such checkpoint, not on its
// own: a crash before it only repeats that work. A run that ends (answer
// or failure) or pauses is not written at all: the outcome event carries
// it (run.paused its snapshot), a redelivery repeats the last step and its
// outcome has the same derived event ID (dropped as a duplicate), and the
// processor applies one outcome per turn. A create that finds a record,
// or an update that lost a race, is returned as kvstate.ErrConflict.
//
// save is the only writer of run records (revision-checked), and every
// record it writes shows a call dispatched: runCache's safety argument
// rests on both. Each record written is remembered (runCache.put) for the
// first delivery of its results; a failed write forgets the run, and so
// does its end, pause or failure (publishCompleted, publishFailed,
// publishPaused).
func (a *Agent) advance(ctx context.Context, run *Run, rev uint64, dirty bool) (err error) {
	defer func() {
		if errors.Is(err, errRunTooLarge) { // fit failed the run
			err = a.publishFailed(ctx, run, run.Failed.Reason, run.Failed.Detail)
		}
	}()
	// save writes the run when dirty; dispatching says whether the write
	// dispatches calls (they are published after it). Only such a write
	// starts runCache's trust window for the step's results; a write that
	// records a result of a step dispatched earlier keeps the window of
	// the remembered write it was based on, or is not remembered.
	save := func(dispatching bool) error {
		if !dirty {
			return nil
		}
		tooLarge := a.fit(ctx, run)
		run.Checkpointed = true
		var nrev uint64
		var err error
		st, remember := a.runCache.stamp(), true
		if !dispatching {
			st, remember = a.runCache.carried(run.RunID, rev)
		}
		if rev == 0 {
			nrev, err = a.runs.Create(ctx, run.RunID, *run, 0)
		} else {
			nrev, err = a.runs.Update(ctx, run.RunID, *run, rev, 0)
		}
		if err != nil {
			a.runCache.drop(run.RunID) // the bucket may hold anything now
			return fmt.Errorf("checkpointing run %s: %w", run.RunID, err)
		}
		if remember {
			a.runCache.put(run.RunID, run, nrev, st)
		} else {
			a.runCache.drop(run.RunID)
		}
		rev, dirty = nrev, false
		if tooLarge {
			return errRunTooLarge
		}
		return nil
	}
	for {
		if run.Failed != nil {
			return a.publishFailed(ctx, run, run.Failed.Reason, run.Failed.Detail)
		}
		if run.Final != nil {
			return a.publishCompleted(ctx, run)
		}
		if len(run.Calls) == 0 {
			if run.Step >= a.opts.MaxSteps {
				run.Failed = &events.RunFailed{Reason: "max_steps", Detail: fmt.Sprintf("the agent stopped after %d model calls", run.Step)}
				continue
			}
			if err := a.modelStep(ctx, run); err != nil {
				return err
			}
			dirty = true
			continue
		}
		var toSend []*CallState
		for _, c := range run.Calls {
			if c.Status == callNew {
				if err := a.decide(ctx, run, c); err != nil {
					return err
				}
				dirty = true
				if c.Status == callDispatched {
					toSend = append(toSend, c)
				}
			}
		}
		if run.count(callDispatched) > 0 {
			// Checkpoint before dispatching, and before waiting.
			if err := save(len(toSend) > 0); err != nil {
				return err
			}
			for _, c := range toSend {
				// The phase is announced before the call is sent: its
				// result (and the run's end) may come, on another
				// handler, before the publish returns here, and must
				// find the phase to end.
				a.toolProgress(ctx, run, toolStarted, c)
				if err := a.dispatch(ctx, run, c); err != nil {
					return err
				}
			}
			return nil // wait for tool results
		}
		if run.count(callAwaiting) > 0 {
			if a.fit(ctx, run) {
				return errRunTooLarge
			}
			return a.publishPaused(ctx, run)
		}
		// Every call has exactly one result: feed them to the model.
		for _, c := range run.Calls {
			if c.decided() {
				run.Decisions = append(run.Decisions, c.record())
			}
			text := modelText(c.Result)
			if n := c.editNote(); n != "" {
				text = n + "\n" + text
			}
			if c.Instructions != "" {
				text += "\nUser instructions: " + c.Instructions
			}
			run.Messages = append(run.Messages, model.Message{Role: model.RoleTool, ToolCallID: c.modelCallID(),
				ToolName: c.Call.Name, Text: text, Result: c.Result})
		}
		run.Calls = nil
		dirty = true
	}
}

// declinedText is the tool result of a declined confirmation: the
// person's instructions after a colon, or a full stop when they gave none
// (or they were dropped), never a colon followed by nothing.
func declinedText(tool, instructions string) string {
	if instructions = strings.TrimSpace(instructions); instructions == "" {
		return fmt.Sprintf("User declined execution of %s.", tool)
	}
	return fmt.Sprintf("User declined execution of %s: %s", tool, instructions)
}

// unknownTool is the error result of a call to a tool the deployment does
// not have (or a name that cannot be one), phrased like the other refusals.
func unknownTool(name string) *schema.CallToolResult {
	return schema.ErrorResult(fmt.Sprintf("There is no tool named %q here, so nothing was run. Use one of the tools listed.", name))
}

// decide asks the policy services about c and settles its status:
// dispatched (to be sent once checkpointed), done (with a result) or
// awaiting (a confirmation).
func (a *Agent) decide(ctx context.Context, run *Run, c *CallState) error {
	if err := events.ValidToken("tool", c.Call.Name); err != nil {
		c.Status, c.Result = callDone, unknownTool(c.Call.Name)
		return nil
	}
	tool, err := a.tools.Lookup(ctx, c.Call.Name)
	if errors.Is(err, kvstate.ErrNotFound) {
		if c.Answer != nil {
			// A person confirmed a tool this deployment no longer has:
			// fail closed rather than run something else.
			run.Failed = &events.RunFailed{RunID: run.RunID, TurnID: run.TurnID, Reason: events.RejectStateIncompatible,
				Detail: fmt.Sprintf("the confirmed tool %s is no longer registered; nothing was run", c.Call.Name)}
			c.Status, c.Result = callDone, schema.ErrorResult("Tool "+c.Call.Name+" is no longer available")
			return nil
		}
		c.Status, c.Result = callDone, unknownTool(c.Call.Name)
		return nil
	}
	if errors.Is(err, kvstate.ErrIncompatible) {
		// One unreadable definition must not stop the run (logged by the
		// registry): the model hears that this tool cannot be used.
		c.Status, c.Result = callDone, schema.ErrorResult(fmt.Sprintf(
			"Tool %s cannot be used right now: its registered definition is unreadable, so it was not run.", c.Call.Name))
		return nil
	}
	if err != nil {
		return err
	}
	if c.Decision == nil {
		// A call that cannot run is refused before any policy or person is
		// asked about it; the model sees why.
		if r := argumentsTooLarge(tool, c.Call.Arguments); r != nil {
			c.Status, c.Result = callDone, r
			return nil
		}
		if err := tool.ValidateArguments(c.Call.Arguments); err != nil {
			c.Status, c.Result = callDone, argumentsResult(tool, err)
			return nil
		}
		a.toolProgress(ctx, run, toolPolicy, c)
		d, err := a.preExecute(ctx, run, c, tool)
		if err != nil {
			return err
		}
		metrics.PolicyDecision(ctx, d.Decision, d.Policy)
		c.Decision, c.Policy = decideEdited(c, d), d
	}
	switch c.Decision.Decision {
	case events.DecisionAllow:
		// The decision record goes in before the checkpoint marks the
		// call dispatched, so every dispatched call that needs one has
		// its record. A read-only tool needs none (the tool-executor runs
		// it without looking, and refuses it for want of a record if its
		// own definition is not read-only): one KV write less per call.
		c.Status = callDispatched
		if tool.Annotations.ReadOnly() {
			return nil
		}
		return a.recordDecision(ctx, run, c, tool.Annotations)
	case events.DecisionVeto:
		c.Status = callDone
		c.Result = &schema.CallToolResult{Content: schema.ContentList{schema.Text(
			fmt.Sprintf("Execution of %s was denied: %s", c.Call.Name, c.Decision.Reason))}}
	case events.DecisionConfirm:
		if a.runStanding(ctx, run, c) {
			return a.recordDecision(ctx, run, c, tool.Annotations)
		}
		// The agent words every confirmation, from the registered
		// definition and the exact call it will dispatch: a policy only
		// decides (its reply has no text, see readReply).
		req := schema.NewConfirmationRequest(tool, c.Call)
		if err := checkForm(req, a.opts.FormRevision); err != nil {
			a.refuseForm(ctx, run, c, "its confirmation form", err)
			return nil
		}
		id := events.DerivedID(append([]string{"elicitation", run.RunID, c.Call.ID, fmt.Sprint(c.Round), "confirm"}, editKey(c)...)...)
		params := *req
		params.Meta = cloneMeta(params.Meta)
		params.Meta[schema.MetaElicitationID] = id
		c.Status = callAwaiting
		c.Awaiting = []events.PendingElicitation{{ID: id, Kind: events.KindToolConfirmation, CallID: c.Call.ID,
			Tool: c.Call.Name, Request: params, Decision: c.Decision}}
	case events.DecisionUnavailable:
		if tool.Annotations.ReadOnly() {
			a.log.WarnContext(ctx, "no policy service answered; running read-only tool", "tool", c.Call.Name, "run_id", run.RunID)
			c.Status = callDispatched
			return nil
		}
		a.log.ErrorContext(ctx, "no policy service answered; tool not run (fail closed)", "tool", c.Call.Name, "run_id", run.RunID, "reason", c.Decision.Reason)
		c.Status = callDone
		c.Result = schema.ErrorResult(fmt.Sprintf("Execution of %s failed: no policy service answered the pre-execute request (policy_unavailable), so the tool was not run.", c.Call.Name))
	default:
		c.Status = callDone
		c.Result = schema.ErrorResult(fmt.Sprintf("Execution of %s failed: the policy service answered %q, which the agent does not understand.", c.Call.Name, c.Decision.Decision))
	}
	return nil
}

func (a *Agent) dispatch(ctx context.Context, run *Run, c *CallState) error {
	in := events.ToolCallRequested{RunID: run.RunID, TurnID: run.TurnID, Thread: run.Thread, Agent: run.Agent, Call: c.Call, Round: c.Round,
		InputResponses: c.InputResponses, RequestState: c.RequestState}
	e, err := events.KindToolCallRequested.New(events.SourceAgent,
		events.DerivedID("tool.call", run.RunID, c.Call.ID, fmt.Sprint(c.Round)), run.Thread, in)
	if err != nil {
		return err
	}
	e.SetExtension(events.ExtRunID, run.RunID)
	e.SetExtension(events.ExtTurnID, run.TurnID)
	_, err = bus.PublishTo(ctx, a.bus, events.StreamTools, e, c.Call.Name)
	return err
}

// redispatch publishes again every call marked dispatched: after a crash
// between checkpoint and publish, a redelivered event sends them (the
// tool-executor and JetStream drop copies).
func (a *Agent) redispatch(ctx context.Context, run *Run) error {
	for _, c := range run.Calls {
		if c.Status == callDispatched {
			if err := a.dispatch(ctx, run, c); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *Agent) publishPaused(ctx context.Context, run *Run) error {
	a.pending.end(run.RunID, len(run.Resumes)) // its own event ends the phase
	a.runCache.drop(run.RunID)                 // remembered no longer (runCache)
	var pend []events.PendingElicitation
	for _, c := range run.Calls {
		if c.Status == callAwaiting {
			pend = append(pend, c.Awaiting...)
		}
	}
	snap, err := json.Marshal(run)
	if err != nil {
		return err
	}
	effects, omitted := run.outcomeEffects()
	e, err := events.KindRunPaused.New(events.SourceAgent,
		events.DerivedID("run.paused", run.RunID, fmt.Sprint(run.Step), pend[0].ID), run.Thread,
		events.RunPaused{RunID: run.RunID, TurnID: run.TurnID, Agent: run.Agent, Elicitations: pend, Snapshot: snap,
			Effects: effects, EffectsOmitted: omitted})
	if err != nil {
		return err
	}
	e.SetExtension(events.ExtRunID, run.RunID)
	e.SetExtension(events.ExtTurnID, run.TurnID)
	if _, err = bus.PublishTo(ctx, a.bus, events.StreamRuns, e); err != nil {
		return err
	}
	// No "waiting" progress: turn.paused, which the processor publishes
	// for this pause, says the turn waits (docs/events.md).
	return nil
}

func (a *Agent) publishCompleted(ctx context.Context, run *Run) error {
	a.pending.end(run.RunID, runOver) // its own event ends the phase
	a.runCache.drop(run.RunID)        // remembered no longer (runCache)
	decisions := append([]events.DecisionRecord(nil), run.Decisions...)
	for _, c := range run.Calls { // calls settled by a cancel, never fed to the model
		if c.decided() {
			decisions = append(decisions, c.record())
		}
	}
	effects, omitted := run.outcomeEffects()
	e, err := events.KindRunCompleted.New(events.SourceAgent, events.DerivedID("run.completed", run.RunID),
		run.Thread, events.RunCompleted{RunID: run.RunID, TurnID: run.TurnID, Message: *run.Final, Decisions: decisions,
			Effects: effects, EffectsOmitted: omitted})
	if err != nil {
		return err
	}
	e.SetExtension(events.ExtRunID, run.RunID)
	e.SetExtension(events.ExtTurnID, run.TurnID)
	_, err = bus.PublishTo(ctx, a.bus, events.StreamRuns, e)
	return err
}

func (a *Agent) publishFailed(ctx context.Context, run *Run, reason, detail string) error {
	a.pending.end(run.RunID, runOver) // its own event ends the phase
	a.runCache.drop(run.RunID)        // remembered no longer (runCache)
	// What ran goes with the failure: the thread keeps it in its
	// history and turn.failed names it.
	effects, omitted := run.outcomeEffects()
	e, err := events.KindRunFailed.New(events.SourceAgent, events.DerivedID("run.failed", run.RunID),
		run.Thread, events.RunFailed{RunID: run.RunID, TurnID: run.TurnID, Reason: reason, Detail: detail,
			Effects: effects, EffectsOmitted: omitted})
	if err != nil {
		return err
	}
	e.SetExtension(events.ExtRunID, run.RunID)
	if run.TurnID != "" {
		e.SetExtension(events.ExtTurnID, run.TurnID)
	}
	_, err = bus.PublishTo(ctx, a.bus, events.StreamRuns, e)
	return err
}

// userBlocks collects the content blocks of this turn's tool results that
// are meant for the end user (design section 5): blocks annotated with
// audience "user", and resource links without an audience (an entity the
// answer refers to). Other blocks only feed the model.
func userBlocks(msgs []model.Message) schema.ContentList {
	start := 0
	for i, m := range msgs {
		if m.Role == model.RoleUser {
			start = i
		}
	}
	var out schema.ContentList
	for _, m := range msgs[start:] {
		if m.Role != model.RoleTool || m.Result == nil {
			continue
		}
		for _, c := range m.Result.Content {
			if forUser(c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// forUser is schema.ShownToUser: the blocks of a tool result the end user
// sees.
func forUser(c schema.Content) bool { return schema.ShownToUser(c) }

func cloneMeta(m schema.Meta) schema.Meta {
	out := make(schema.Meta, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}
