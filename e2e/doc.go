// Package e2e holds end-to-end tests of parley's workers against a real
// (embedded) NATS server with JetStream: every hop crosses the bus.
//
// Test-only: it may import any of parley's packages, and nothing imports it.
package e2e
