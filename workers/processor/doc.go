// Package processor owns each thread's turn lifecycle (the ChatProcessor):
// it is the only writer of thread state, paused turns included.
//
// Consumes: parley.in.<principal>.<thread>.turn.requested and
// .elicitation.responded (durable "processor" on PARLEY_INPUT),
// parley.agent.run.completed|paused|failed (durable "processor-runs" on
// PARLEY_RUNS), and the expiries of the pause records in parley_paused
// (on KV_parley_paused: durable "processor-timers" for records that
// expire by a message schedule, "processor-expiry" for the expiry markers
// of records with a per-key TTL; durable, so an expiry while every
// processor is down is announced when one starts).
// Produces: parley.agent.run.requested|resumed, and on parley.chat.<thread>.:
// turn.paused|completed|failed|rejected, elicitation.requested|rejected|expired|cancelled.
// KV: parley_threads (thread ID; the record is Thread, in thread.go, read by
// no other package; it holds the paused turn, so every transition is one
// revision-checked write), parley_paused (a pause record per pause,
// "<thread>.<runs sequence>.pause", expiring by a message schedule a
// grace after the pause expires, or "<thread>.<runs sequence>" with a
// per-key TTL on a server without schedules: the run's snapshot, written
// once; paused.go). Threads are
// cached by KV revision (threads.go): a write from the cache is
// revision-checked, and any decision a stale record could make
// differently is taken again on a fresh read, so any number of replicas
// may run. Pause records are never rewritten, so a cached one is current
// while it lives.
//
// Of parley's packages it imports only bus, events, internal/metrics,
// kvstate and schema; it must not import another worker (agent, toolexec,
// gate), client, gateway or a composition root (internal/layers checks the
// direction of imports).
package processor
