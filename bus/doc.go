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
package bus
