package kvstate

// Bucket names.
const (
	// BucketPaused holds one record per pause (the processor's; key
	// "<thread>.<runs sequence>", per-key TTL until the pause expires):
	// the paused run's snapshot. Its expiry marker ends the pause.
	BucketPaused      = "parley_paused"
	BucketThreads     = "parley_threads"
	BucketRuns        = "parley_runs"
	BucketToolResults = "parley_tool_results"
	BucketTools       = "parley_tools"
)
