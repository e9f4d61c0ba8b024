// Package retry is parley's one retry policy for work against NATS: Do
// runs an operation with exponential backoff and jitter within a Policy's
// budget, IsRetryable classifies what may go away by itself on a
// JetStream cluster, Permanent marks what never will, and
// WithRequestTimeout bounds one JetStream request. Both bus (streams,
// consumers, publishes) and kvstate (buckets) use it.
//
// It imports only the standard library and nats.go; it must not import
// any parley package.
package retry
