// Package bus is parley's only JetStream and OpenTelemetry plumbing: it
// creates the streams, publishes CloudEvents (binary mode, Nats-Msg-Id = event
// ID, W3C trace context in a case-preserving header carrier), runs durable
// pull consumers with a bounded worker pool, InProgress heartbeats, bounded
// redelivery with backoff and a dead-letter subject, and serves and sends the
// pre-execute request-reply.
//
// Streams (see events): PARLEY_CHAT (limits; parley.chat.>), PARLEY_AGENT
// (work queue; parley.agent.run.requested|resumed, parley.tool.result.>),
// PARLEY_RUNS (work queue; parley.agent.run.completed|paused|failed),
// PARLEY_TOOLS (work queue; parley.tool.call.>), PARLEY_DLQ (limits;
// parley.dlq.>).
//
// It owns the streams' definitions and every JetStream and OpenTelemetry
// call of the workers. Of parley's packages it imports only events,
// internal/health and internal/metrics; it must not import kvstate, client,
// gateway, a worker or a composition root (internal/layers checks the
// direction of imports).
package bus
