// Package agent runs the agent loop: model call → tool calls → pre-execute
// request-reply → tool dispatch → tool results → model call … It is
// stateless between events: the loop state is checkpointed per step in the
// parley_runs bucket (key = run ID) and travels as the snapshot of a paused
// run, so a killed agent loses nothing and a redelivered event neither calls
// the model again for a step already taken nor repeats a tool call.
//
// Consumes (durable "agent" on PARLEY_AGENT): parley.agent.run.requested,
// parley.agent.run.resumed, parley.tool.result.<run>.
// Produces: parley.tool.call.<tool>, parley.agent.run.completed|paused|failed.
// Requests: parley.tool.pre_execute.<agent>.<tool> (policy services; every
// reply is gathered until the expected policies answered, and combined:
// any veto wins, then any confirm — docs/POLICY.md).
// Writes: parley_decisions (key <run>.<call>.<round>), the decision record
// of every call before it is dispatched, which the tool-executor checks.
//
// It owns the run: its checkpoints (parley_runs), the results store and the
// decision records it writes (parley_decisions). Of parley's packages it
// imports only bus, events, internal/metrics, kvstate, model and schema; it
// must not import another worker (processor, toolexec, gate), client,
// gateway or a composition root (internal/layers checks the direction of
// imports).
package agent
