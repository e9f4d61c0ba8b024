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
// `answeredBy` of the answers. A thread belongs to the user whose message
// first named it; the gateway records that in its own KV bucket
// (BucketThreads, keys "t.<thread>" and "u.<user>.<thread>"), claimed with
// kv.Create so two gateway replicas on one NATS agree on the owner. Anyone
// else gets 404 and nothing is published.
//
// The routes are listed in Routes and documented in docs/openapi.yaml.
package gateway
