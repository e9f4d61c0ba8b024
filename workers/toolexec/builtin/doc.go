// Package builtin holds parley's built-in demo tools: five MCP tools over a
// small site-content store (articles, pages and events) kept in a JetStream
// key-value bucket. The tool-executor worker (package toolexec) calls them
// through the Tool interface; each call returns an MCP CallToolResult, or an
// InputRequiredResult when the tool needs an answer from the user first
// ("which of these pages did you mean?", "a title and a date for the
// event?"), in the shape of MCP 2026-07-28 multi round-trip requests.
//
// The tools are list_entities and get_entity (read-only), create_event,
// publish_entities and delete_entities (mutating). Mutating tools are
// exactly-once per tool call: a call executed again after a crash (same
// Request.CallID) finds its ledger entry, re-applies the recorded effect
// idempotently and returns the recorded result, byte for byte.
//
// # KV bucket and keys
//
// The package touches one bucket, SiteOptions.Bucket (default
// "parley_content", History 1, no TTL), created by OpenSite with
// CreateOrUpdateKeyValue. It consumes and produces no subjects other than the
// bucket's own ($KV.<bucket>.>). Keys:
//
//   - "entity.<id>": one Entity as JSON, e.g. "entity.article-3". Deleted
//     entities leave a KV delete marker.
//   - "meta.seeded": written once after the embedded fixture
//     (fixture/site.json) was seeded; its presence skips seeding.
//   - "ledger.<callID>": one ledger record per effecting tool call (JSON:
//     call_id, run_id, tool, ids, at, round, a fingerprint of the arguments
//     and answers, the planned effect, the result, applied), where <callID>
//     is the CallID itself when it matches [A-Za-z0-9_-]{1,128} and
//     "x.<hex SHA-256 of the CallID>" otherwise; with Request.RunID set it is
//     "r.<hex SHA-256 of RunID, NUL, CallID>". Ledger keys have one or two
//     tokens after "ledger" and never collide. Records are never deleted.
//
// Entities created by create_event get the ID "event-<first 12 hex digits of
// SHA-256(CallID)>" (of RunID, NUL, CallID when RunID is set), so a
// re-executed call cannot create a second event. A call ID reused for a
// different call (other tool, arguments or answers) gets an IsError result
// and no effect, never the other call's result.
//
// It owns the demo site's bucket (parley_content) and its ledger; no other
// package reads them (clients ask the entity lookup). Of parley's packages
// it imports only bus, events, kvstate and schema; it must not import
// workers/toolexec, another worker, client, gateway or a composition root
// (internal/layers checks the direction of imports).
package builtin
