// Package e2e holds end-to-end tests of parley's workers against a real
// (embedded) NATS server with JetStream: every hop crosses the bus.
package e2e
