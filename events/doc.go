// Package events is parley's event vocabulary: CloudEvents 1.0 types
// (github.com/cloudevents/sdk-go/v2/event), the NATS subjects they travel on,
// one payload struct per type, and the codec that carries an event in a NATS
// message in binary content mode per the CloudEvents NATS protocol binding
// (attributes as percent-encoded "ce-" headers, data as the body).
//
// The package opens no connection and imports no NATS client: headers are a
// plain map[string][]string that converts to nats.Header. docs/events.md is
// the catalog a person reads.
//
// Of parley's packages it imports only schema; it must not import NATS, bus,
// kvstate, a worker or a composition root (internal/layers checks the
// direction of imports).
package events
