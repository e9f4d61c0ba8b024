// Package kvstate keeps parley's state in JetStream key-value buckets:
// the processor's pause records (bucket parley_paused, key =
// <thread>.<runs sequence>.pause, History 1, expiring by message
// schedule where the server has them, so a durable consumer of the
// ExpiredKey subjects sees each expiry and no write; else by per-key TTL
// with LimitMarkerTTL, whose markers share the keys' subjects:
// BucketOptions.Schedules) and threads
// (parley_threads) — both records are the processor's own types
// (workers/processor/thread.go, paused.go) — agent run checkpoints
// (parley_runs, key = run ID), tool results (parley_tool_results, key =
// run and call) and decision records (parley_decisions, key =
// <run>.<call>.<round>, see CallDecision). Buckets are created idempotently.
// A record kind is read and written through a Store[T]: Get, Create,
// CreateNew, Put, DeleteIf and Mutate(key, fn), the one compare-and-swap
// loop (a write that lost a race reads again and reapplies fn; ErrNoChange
// skips the write), with TTL-preserving writes (StoreOptions.ExpiresAt),
// an optional revision-checked cache and one Decode hook per kind where
// records of older formats are read. Every read-modify-write of the
// processor's threads, the gateway's claims and the built-in tools'
// ledger and entities goes through a Store. What still writes a Bucket
// directly: the processor's pause records (written once; an extension
// gives way to another's), the tool-executor's call claims (a lease: a
// lost create or takeover gives way) and the agent's run checkpoints,
// whose model step and dispatch run between the read and the
// revision-checked write, so a lost race re-reads and redoes the step
// (workers/agent onToolResult) instead of reapplying a pure function.
// Each of them sees a lost race only as ErrConflict: it is recognised
// here alone (IsConflict), on single and replicated buckets alike.
//
// kvstate imports events, schema, internal/retry (the start-up retry
// policy shared with bus) and internal/health; never bus, nor a worker.
//
// Library errors are translated at this boundary: ErrNotFound, ErrConflict
// (a revision-checked write lost a race) and ErrIncompatible (a stored
// record of a format this code does not read).
//
// It owns the buckets' configurations and the revision-checked reads and
// writes of their records, not what a record means (the workers do). Of
// parley's packages it imports only bus (its retry policy and permanent-
// error type), events, internal/health and schema; it must not import a
// worker, client, gateway or a composition root (internal/layers checks the
// direction of imports).
package kvstate

import "errors"

// Errors callers branch on.
var (
	// ErrNotFound: no live value under the key (absent, deleted or expired).
	ErrNotFound = errors.New("kvstate: not found")
	// ErrConflict: the key changed since the revision the write expected
	// (or a create found a live value).
	ErrConflict = errors.New("kvstate: revision conflict")
	// ErrIncompatible: the stored record's format version is not one this
	// code reads; fail closed (state_incompatible).
	ErrIncompatible = errors.New("kvstate: stored state is incompatible with this version")
)
