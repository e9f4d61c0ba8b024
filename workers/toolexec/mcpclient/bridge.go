package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nuid"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// Bridging a server's elicitation/create (MCP 2025-06-18 and 2025-11-25)
// to the person, over the bus, without touching the processor or agent:
//
//  1. tools/call runs in its own goroutine. When the server asks during the
//     call, Call returns parley's InputRequiredResult with the server's
//     question under the key BridgeKey and a requestState naming the
//     waiting call ("mcp-elicit:<handle>"). The agent pauses the run; the
//     processor publishes elicitation.requested (same ID rules, TTL and
//     answer checks as any question).
//  2. The server's request stays open (bounded by Options.ElicitTimeout,
//     not by the call timeout, which is suspended while the person
//     decides).
//  3. The retry of the call (next round) carries the checked answer: Call
//     hands it to the waiting request and waits again, for the result or
//     the next question.
//
// The waiting call lives in this process. A retry that reaches another
// tool-executor replica is retried later (up to UnknownHandleGrace), then
// answered "outcome unknown": the replica holding the MCP session died
// while the person was deciding, and parley never re-runs a call that may
// have had effects.

// BridgeKey is the inputRequests key of a bridged server elicitation.
const BridgeKey = "elicitation"

// bridgePrefix starts the requestState of a bridged elicitation.
const bridgePrefix = "mcp-elicit:"

// UnknownHandleGrace is how long a retry naming a waiting call held by
// another process is retried before it is answered "outcome unknown".
const UnknownHandleGrace = 30 * time.Second

// MaxPending bounds calls waiting for a person at once per server; a
// server's elicitation beyond it is declined.
const MaxPending = 1000

// pendingCall is a tools/call running in the background.
type pendingCall struct {
	handle    string
	questions chan *elicitQ    // from the server's elicitation/create
	done      chan callOutcome // buffered 1: the call's outcome
	cancel    context.CancelFunc
	ctx       context.Context // the call's (toolexec.WatchThread)
	current   *elicitQ        // the question put to the person, while waiting (guarded by Server.pmu)
	waiting   atomic.Bool     // a question is with the person
	stopWatch func()          // ends the thread watch (see watch)
	// ended names the event that ended the call's turn (turn.completed,
	// turn.failed, elicitation.expired or elicitation.cancelled); set
	// before the call is cancelled.
	ended atomic.Pointer[string]
	// note is added to the call's result: what parley declined on the
	// person's behalf (see refuses).
	note atomic.Pointer[string]
	// progressMu orders the call's progress before its result: a progress
	// notification is published (and stored) under it while returned is
	// false, and the call's outcome is handed on only once returned is
	// set under it, so no progress of the call is stored after its result
	// (and the run's end, which follows the result).
	progressMu sync.Mutex
	returned   bool
}

// guard makes a server's question one parley may show: it drops the
// _meta keys reserved for parley (schema.IsReservedMetaKey: a server's
// _meta["drupal.org/ai.tool_call"] would draw parley's own confirmation),
// logging them, and marks the question with the server's name and trust,
// and the fields that look like they ask for a secret
// (schema.MetaMCPServer, schema.SecretFields), which it returns.
func (s *Server) guard(p *schema.ElicitRequestParams) []string {
	meta, dropped := p.Meta.WithoutReserved()
	if len(dropped) > 0 {
		s.log.Warn("mcp server question carried _meta keys reserved for parley; dropped", "keys", dropped)
	}
	meta = meta.Clone()
	secrets := schema.SecretFields(p)
	meta.SetMCPServer(schema.MCPServerMeta{Name: s.name, Trusted: s.cfg.Trusted, SecretFields: secrets})
	p.Meta = meta
	return secrets
}

// refuses reports whether a form asking for secrets (guard) is declined
// without asking the person: when the server is not trusted. MCP
// 2025-11-25 says "Servers MUST NOT use form mode elicitation to request
// sensitive information such as passwords, API keys, access tokens, or
// payment credentials"; a server that does anyway and that the deployment
// does not vouch for is not given the chance. A trusted server's question
// is asked, with a warning on those fields.
func (s *Server) refuses(secrets []string) bool { return !s.cfg.Trusted && len(secrets) > 0 }

// secretsRefused is the note added to the result of a call whose server
// had its request for secrets declined, so the model can tell the person.
func secretsRefused(server string, fields []string) string {
	return fmt.Sprintf("[parley declined, without asking the user, a form in which MCP server %s asked for what looks like a secret (%s): "+
		"MCP forbids asking for passwords, keys, tokens or payment details in a form, and server %s is not trusted.]",
		server, strings.Join(fields, ", "), server)
}

// report publishes a progress notification of the call with publish,
// unless the call returned.
func (pc *pendingCall) report(publish func()) {
	pc.progressMu.Lock()
	defer pc.progressMu.Unlock()
	if !pc.returned {
		publish()
	}
}

// markReturned ends the call's progress: a notification being published
// is stored first, later ones are dropped.
func (pc *pendingCall) markReturned() {
	pc.progressMu.Lock()
	pc.returned = true
	pc.progressMu.Unlock()
}

type elicitQ struct {
	params schema.ElicitRequestParams
	answer chan schema.ElicitResult // buffered 1
}

type callOutcome struct {
	res *mcp.CallToolResult
	err error
}

// Call runs tools/call on the server, bounded by the server's callTimeout
// (not counting time spent waiting for the person). A JSON-RPC error
// response (the server refused the call) and a result that is not valid
// MCP or does not match the tool's outputSchema become isError results
// naming the problem; a lost connection or timeout is an error (the
// outcome is unknown, see toolexec). A server's elicitation during the
// call is returned as an input-required result (see above).
func (t *tool) Call(ctx context.Context, req builtin.Request) (builtin.Result, error) {
	s := t.s
	if h, ok := strings.CutPrefix(req.RequestState, bridgePrefix); ok {
		return t.resume(ctx, h, req)
	}
	if req.RequestState == urlRequiredState {
		// The retry after a URLElicitationRequiredError: the server ran
		// nothing, so the call is sent again, fresh, once the person
		// consented to every URL.
		for k, a := range req.InputResponses {
			if a.Action != schema.ActionAccept {
				return builtin.Result{Call: schema.ErrorResult(fmt.Sprintf("%s__%s was not run: server %s needs the user to visit a URL first, "+
					"and the user answered %s (inputResponses.%s).", s.name, t.name, s.name, a.Action, k))}, nil
			}
		}
		req.RequestState, req.InputResponses = "", nil
	}
	cs := s.current()
	if cs == nil {
		return builtin.Result{}, errNotConnected{s.name}
	}
	args := req.Arguments
	if len(strings.TrimSpace(string(args))) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	params := &mcp.CallToolParams{Name: t.name, Arguments: args, RequestState: req.RequestState}
	if len(req.InputResponses) > 0 {
		if err := convert(req.InputResponses, &params.InputResponses); err != nil {
			return builtin.Result{}, fmt.Errorf("inputResponses: %w", err)
		}
	}
	// The call outlives this delivery when the server asks the person, so
	// it gets its own context (with ctx's values: the call, progress).
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopAfter := context.AfterFunc(s.ctx, cancel) // Close ends it too
	pc := &pendingCall{handle: nuid.Next(), questions: make(chan *elicitQ), done: make(chan callOutcome, 1), cancel: cancel, ctx: callCtx}
	// Each running call gets a session-unique integer token, mapped back
	// to the call for progress and elicitation.
	tok := s.nextToken.Add(1)
	params.SetProgressToken(tok)
	call, _ := toolexec.CallFrom(ctx)
	// For as long as the call runs, the end of its turn cancels it.
	t.watch(pc, call.RunID, call.TurnID)
	s.calls.Store(tok, running{ctx: callCtx, call: call, pc: pc})
	go func() {
		res, err := cs.CallTool(callCtx, params)
		s.calls.Delete(tok)
		pc.markReturned() // before the outcome is handed on
		pc.stopWatch()
		pc.done <- callOutcome{res, err}
		stopAfter()
		cancel()
	}()
	return t.await(ctx, pc)
}

// await waits for the call's outcome or the server's next question.
func (t *tool) await(ctx context.Context, pc *pendingCall) (builtin.Result, error) {
	s := t.s
	timeout := s.cfg.callTimeout()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case o := <-pc.done:
		if why := pc.ended.Load(); why != nil && o.err != nil {
			return builtin.Result{Call: turnEnded(s.name+"__"+t.name, events.Type(*why))}, nil
		}
		res, err := t.finish(o)
		if note := pc.note.Load(); note != nil && err == nil && res.Call != nil {
			res.Call.Content = append(res.Call.Content, schema.Text(*note))
		}
		return res, err
	case q := <-pc.questions:
		s.pmu.Lock()
		if s.pending == nil {
			s.pending = map[string]*pendingCall{}
		}
		pc.current = q
		pc.waiting.Store(true)
		s.pending[pc.handle] = pc
		s.pmu.Unlock()
		return builtin.Result{InputRequired: &schema.InputRequiredResult{
			ResultType:    schema.ResultTypeInputRequired,
			InputRequests: map[string]schema.InputRequest{BridgeKey: {Method: "elicitation/create", Params: q.params}},
			RequestState:  bridgePrefix + pc.handle,
		}}, nil
	case <-timer.C:
		pc.cancel() // sends notifications/cancelled
		<-pc.done
		return builtin.Result{}, fmt.Errorf("mcp server %q did not answer within %s", s.name, timeout)
	case <-ctx.Done():
		pc.cancel()
		<-pc.done
		return builtin.Result{}, fmt.Errorf("mcp server %q: call abandoned: %w", s.name, ctx.Err())
	}
}

// resume hands the person's answer to the server's waiting request and
// waits for what the server does next.
func (t *tool) resume(ctx context.Context, handle string, req builtin.Request) (builtin.Result, error) {
	s := t.s
	s.pmu.Lock()
	pc := s.pending[handle]
	delete(s.pending, handle)
	if pc == nil {
		if s.unknown == nil {
			s.unknown = map[string]time.Time{}
		}
		first, seen := s.unknown[handle]
		if !seen {
			if len(s.unknown) >= MaxPending {
				clear(s.unknown)
			}
			first = time.Now()
			s.unknown[handle] = first
		}
		s.pmu.Unlock()
		if time.Since(first) < UnknownHandleGrace {
			return builtin.Result{}, errElsewhere{bus.RetryLater(fmt.Errorf("mcp server %q: the call waiting for this answer is not held by this tool-executor", s.name), time.Second)}
		}
		s.log.Warn("answer for an MCP elicitation whose call is gone; outcome unknown", "handle", handle)
		return builtin.Result{Call: toolexec.OutcomeUnknown(s.name+"__"+t.name,
			"the tool-executor holding its MCP session stopped while the server was waiting for an answer")}, nil
	}
	q := pc.current
	pc.current = nil
	s.pmu.Unlock()
	ans, ok := req.InputResponses[BridgeKey]
	if !ok {
		ans = schema.ElicitResult{Action: schema.ActionCancel}
	}
	pc.waiting.Store(false)
	q.answer <- ans
	return t.await(ctx, pc)
}

// watch follows the call's thread for as long as the call runs, and
// cancels the call when its turn ends without it: the turn completed or
// failed (it timed out, the agent gave up), a newer message superseded the
// paused turn (elicitation.cancelled), or the pause expired
// (elicitation.expired). The server then gets notifications/cancelled for
// its tools/call (the SDK sends it when the call's context ends), and, if
// it was waiting for the person, the person's decline or cancel (the last
// one seen on the thread) or cancel. A call whose turn has ended is never
// retried, so nothing else would end the server's work.
//
// Only the events of the call's own turn count (see ofRun).
func (t *tool) watch(pc *pendingCall, run, turn string) {
	s := t.s
	var mu sync.Mutex
	last := schema.ActionCancel
	stop, err := toolexec.WatchThread(pc.ctx, func(e *event.Event) {
		switch events.TypeOf(e) {
		case events.TypeElicitationResponded:
			if r, err := events.Data[events.ElicitationResponded](e); err == nil &&
				(r.Action == schema.ActionDecline || r.Action == schema.ActionCancel) {
				mu.Lock()
				last = r.Action
				mu.Unlock()
			}
			return
		case events.TypeTurnCompleted, events.TypeTurnFailed, events.TypeElicitationExpired, events.TypeElicitationCancelled:
			if !ofRun(e, run, turn) {
				return
			}
		default:
			return
		}
		why := e.Type()
		if !pc.ended.CompareAndSwap(nil, &why) {
			return
		}
		s.pmu.Lock()
		var q *elicitQ
		if s.pending[pc.handle] == pc {
			delete(s.pending, pc.handle)
			q = pc.current
			pc.current = nil
		}
		s.pmu.Unlock()
		if q != nil {
			mu.Lock()
			action := last
			mu.Unlock()
			pc.waiting.Store(false)
			s.log.Info("turn went on without the server's answer; telling the server", "action", action, "event", why)
			q.answer <- schema.ElicitResult{Action: action}
		}
		s.log.Info("the call's turn ended; cancelling the call", "event", why, "run_id", run)
		pc.cancel() // notifications/cancelled
	})
	if err != nil {
		s.log.Warn("cannot watch the thread of a running call; the end of its turn will not cancel it", "error", err)
	}
	pc.stopWatch = stop
}

// ofRun reports whether a chat event is about the run of the call: its
// runid extension is run, or its turn (the turnid extension, else the
// data's turnId) is the run's turn. The processor's turn events carry
// only the turn. turn is the call's turnId; "" from an agent of the
// release before run IDs were derived from the thread and the turn,
// whose run ID was the turn's ID, so run stands for it. An event naming
// neither (a turn.failed for a message that never started a turn) is
// about no run.
func ofRun(e *event.Event, run, turn string) bool {
	if run == "" {
		return false
	}
	if turn == "" {
		turn = run
	}
	ext := e.Extensions()
	if v, ok := ext[events.ExtRunID].(string); ok && v != "" {
		return v == run
	}
	if v, ok := ext[events.ExtTurnID].(string); ok && v != "" {
		return v == turn
	}
	var d struct {
		TurnID string `json:"turnId"`
	}
	_ = json.Unmarshal(e.Data(), &d)
	return d.TurnID != "" && d.TurnID == turn
}

// turnEnded is the result recorded for a call cancelled because its turn
// ended (nobody reads it: the run is over; it keeps the record honest).
func turnEnded(tool string, why events.Type) *schema.CallToolResult {
	return schema.ErrorResult(fmt.Sprintf("%s was cancelled because its turn ended (%s) while it ran; the server was "+
		"sent notifications/cancelled, so it may or may not have taken effect.", tool, why))
}

// urlRequiredState is the requestState of the retry of a call the server
// refused with a URLElicitationRequiredError (-32042).
const urlRequiredState = "mcp-url-required"

// MaxURLElicitations bounds the URL-mode elicitations taken from one
// URLElicitationRequiredError; a server sending more gets the call
// reported as an error.
const MaxURLElicitations = 8

// urlRequired converts a URLElicitationRequiredError (MCP 2025-11-25,
// -32042: the server needs the person to visit URLs before it can run the
// call) to an input-required result asking the person each URL
// ("url-0", "url-1", ... in the server's order). The retry carries the
// answers (see Call); an error's elicitations that are not valid URL-mode
// requests make the call an isError result naming the problem.
func (s *Server) urlRequired(tool string, je *jsonrpc.Error) builtin.Result {
	var data struct {
		Elicitations []schema.ElicitRequestParams `json:"elicitations"`
	}
	fail := func(why string) builtin.Result {
		return builtin.Result{Call: schema.ErrorResult(fmt.Sprintf("server %s refused %s: it requires a URL visit, but %s (MCP error %d: %s)",
			s.name, tool, why, je.Code, je.Message))}
	}
	if err := json.Unmarshal(je.Data, &data); err != nil {
		return fail("its error data is not valid: " + err.Error())
	}
	switch n := len(data.Elicitations); {
	case n == 0:
		return fail("it named no URL")
	case n > MaxURLElicitations:
		return fail(fmt.Sprintf("it named %d URLs, more than the limit of %d", n, MaxURLElicitations))
	}
	reqs := map[string]schema.InputRequest{}
	for i, p := range data.Elicitations {
		s.guard(&p)
		if !p.IsURLMode() {
			return fail(fmt.Sprintf("elicitations[%d].mode: must be \"url\"", i))
		}
		if err := p.Validate(schema.Rev20251125); err != nil {
			return fail(fmt.Sprintf("elicitations[%d]: %v", i, err))
		}
		reqs[fmt.Sprintf("url-%d", i)] = schema.InputRequest{Method: schema.MethodElicitationCreate, Params: p}
	}
	return builtin.Result{InputRequired: &schema.InputRequiredResult{ResultType: schema.ResultTypeInputRequired,
		InputRequests: reqs, RequestState: urlRequiredState}}
}

// onElicitationComplete takes notifications/elicitation/complete: the
// out-of-band interaction of a URL-mode elicitation finished. It is
// logged; the call it belongs to goes on by itself (the server answers
// its tools/call), and unknown IDs are ignored as MCP requires.
func (s *Server) onElicitationComplete(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
	if req.Params == nil {
		return
	}
	s.log.Info("mcp server reports a url-mode elicitation complete", "elicitation_id", req.Params.ElicitationID)
}

// errElsewhere wraps a retry-later error for a call held by another
// process: nothing was sent, so the executor may retry it.
type errElsewhere struct{ err error }

func (e errElsewhere) Error() string    { return e.err.Error() }
func (e errElsewhere) Unwrap() error    { return e.err }
func (e errElsewhere) NotStarted() bool { return true }

// finish converts a call's outcome.
func (t *tool) finish(o callOutcome) (builtin.Result, error) {
	s := t.s
	if o.err != nil {
		var je *jsonrpc.Error
		if errors.As(o.err, &je) && je.Code == mcp.CodeURLElicitationRequired {
			return s.urlRequired(t.name, je), nil
		}
		if errors.As(o.err, &je) {
			return builtin.Result{Call: schema.ErrorResult(fmt.Sprintf("MCP error %d from server %s: %s", je.Code, s.name, je.Message))}, nil
		}
		return builtin.Result{}, fmt.Errorf("mcp server %q: %w", s.name, o.err)
	}
	res := o.res
	if res.NeedsInput() {
		return s.inputRequired(res)
	}
	r, err := resultFromSDK(res)
	if err != nil {
		return builtin.Result{Call: schema.ErrorResult(fmt.Sprintf("server %s returned an invalid tool result: %v", s.name, err))}, nil
	}
	// parley's own _meta keys are parley's to write, on results as on
	// questions; the blocks a client may show the person are marked with
	// the server whose words they are (schema.CallToolResult.FromMCPServer).
	if dropped := r.FromMCPServer(s.name, s.cfg.Trusted); len(dropped) > 0 {
		s.log.Warn("mcp tool result carried _meta keys reserved for parley; dropped", "tool", t.name, "keys", dropped)
	}
	if err := r.Validate(&t.def); err != nil {
		return builtin.Result{Call: schema.ErrorResult(fmt.Sprintf("server %s returned a tool result that breaks the MCP rules: %v", s.name, err))}, nil
	}
	return builtin.Result{Call: r}, nil
}

// onElicit takes a server's elicitation/create. With Options.Elicit set
// it answers directly; otherwise it puts the question to the call's
// person (see above). The call it belongs to is the server's only running
// call; with none or several running, it is declined as unattributable.
func (s *Server) onElicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	var r running
	n := 0
	var ids []string
	s.calls.Range(func(_, v any) bool {
		c := v.(running)
		if c.pc != nil && c.pc.waiting.Load() {
			return true // its request is with the person already
		}
		r = c
		n++
		ids = append(ids, r.call.RunID+"/"+r.call.Call.ID)
		return n < 2
	})
	params, err := elicitFromSDK(req.Params)
	if err != nil {
		return nil, err
	}
	if secrets := s.guard(&params); s.refuses(secrets) {
		s.log.Warn("untrusted mcp server asked for what looks like a secret in a form, which MCP forbids; declined without asking the person",
			"fields", secrets, "running_calls", ids)
		if n == 1 && r.pc != nil {
			note := secretsRefused(s.name, secrets)
			r.pc.note.Store(&note)
		}
		return &mcp.ElicitResult{Action: string(schema.ActionDecline)}, nil
	}
	if s.opts.Elicit != nil {
		res, err := s.opts.Elicit(ctx, s.name, r.call, params)
		if err != nil {
			return nil, err
		}
		return elicitResultToSDK(res)
	}
	if n != 1 || r.pc == nil {
		s.log.Warn("elicitation/create not attributable to one running call; declined", "running_calls", ids)
		return &mcp.ElicitResult{Action: string(schema.ActionDecline)}, nil
	}
	s.pmu.Lock()
	full := len(s.pending) >= MaxPending
	s.pmu.Unlock()
	if full {
		s.log.Warn("too many calls waiting for a person; elicitation declined", "max", MaxPending)
		return &mcp.ElicitResult{Action: string(schema.ActionDecline)}, nil
	}
	q := &elicitQ{params: params, answer: make(chan schema.ElicitResult, 1)}
	select {
	case r.pc.questions <- q:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.ctx.Done(): // Close
		return &mcp.ElicitResult{Action: string(schema.ActionCancel)}, nil
	}
	timer := time.NewTimer(s.opts.ElicitTimeout)
	defer timer.Stop()
	select {
	case a := <-q.answer:
		return elicitResultToSDK(a)
	case <-timer.C:
		s.pmu.Lock()
		delete(s.pending, r.pc.handle)
		s.pmu.Unlock()
		return &mcp.ElicitResult{Action: string(schema.ActionCancel)}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.ctx.Done(): // Close
		return &mcp.ElicitResult{Action: string(schema.ActionCancel)}, nil
	}
}

// Running returns the number of this server's tool calls in flight,
// including calls whose server request waits for a person.
func (s *Server) Running() int {
	n := 0
	s.calls.Range(func(_, _ any) bool { n++; return true })
	return n
}
