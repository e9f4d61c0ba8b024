// Package gateway is parley's HTTP face for people: a JSON + server-sent
// events API over the PARLEY_CHAT stream, and a reference web chat served
// from embedded files (web/).
//
// The gateway is an integrator like any other: it publishes
// dev.parley.turn.requested and dev.parley.elicitation.responded on
// parley.chat.<thread>.turn.requested / .elicitation.responded, and reads a
// thread's events (parley.chat.<thread>.>) through ordered consumers. It
// never reads the processor's KV buckets: a thread's state and pending
// questions are derived from the thread's events.
//
// Identity: every request carries a bearer token (a JWT verified against a
// JWKS, or a static development token). The token's subject is the user:
// it is the `user` of the messages the gateway publishes and the
// `answeredBy` of the answers. Who owns a thread is the processor's
// verdict (the party of its first accepted message, or one it was shared
// with), and the gateway's read access follows it: the first message of a
// user on a thread makes a pending claim in the gateway's KV bucket
// (BucketThreads, keys "t.<thread>" and "u.<user>.<thread>"; kv.Create, so
// replicas on one NATS agree on the one claimant), confirmed only when the
// processor's echo of a message of that user (extension attributes
// principal = the gateway's principal, onbehalfof = the user) is seen, and
// released when the processor refuses the claim's first message
// (verify.go; docs/SECURITY.md). A confirmed claim lasts only as long as
// the processor's ownership it was confirmed under: the thread's events
// showing an idle gap of the processor's thread TTL (Options.ThreadTTL,
// less a margin), a reset of its record, or an accepted message of a
// party the claim does not know void it, and no read shows an event from
// there on (epoch.go). A pending or someone else's thread is 404
// on every route, like an unknown one, and nothing is published for a
// thread someone else's claim holds, nor for an unclaimed thread whose
// recent accepted messages are someone else's and share nothing with the
// user (mayClaim: the processor would refuse it into that owner's
// thread). The owner may share the thread with
// other users (shares.go); a share counts only once the owner's claim is
// confirmed, and a released claim goes with its shares.
//
// The gateway is also an AG-UI agent (agui.go, docs/AG-UI.md): POST
// /v1/ag-ui runs a thread's turns for AG-UI clients, sending each message
// and answer through the same paths as the JSON routes.
//
// The routes are listed in Routes and documented in docs/openapi.yaml.
//
// It owns the HTTP API, the web chat's files and the gateway's thread claims
// (parley_gateway_threads). Of parley's packages it imports only bus,
// client, client/threadstate, events, internal/health, kvstate and schema;
// it must not import a worker or a composition root (internal/layers checks
// the direction of imports).
package gateway
