// Package layers holds no code: its test checks the direction of the
// imports between parley's packages (TestImports), the way the design
// draws it — value types and validation (schema, events) know nothing of
// NATS; storage (kvstate) and transport (bus) sit below the workers; the
// workers never import each other; only the composition roots (cmd,
// internal/starter, internal/bench) import every worker.
package layers
