package bench

import (
	"math"
	"runtime/metrics"
	"time"
)

// cost is what the process spent while a measurement ran: CPU time (user
// and system, every goroutine of the process: with the embedded server
// that includes the server's work; against --nats it does not) and heap
// allocations (objects and bytes).
type cost struct {
	cpu          time.Duration
	allocObjects uint64
	allocBytes   uint64
}

// allocMetrics are the runtime/metrics counters cost reads: cumulative,
// and cheap to read (no stop-the-world, unlike runtime.ReadMemStats).
var allocMetrics = []string{"/gc/heap/allocs:objects", "/gc/heap/allocs:bytes"}

// sampleCost returns the process's cumulative CPU time and allocations.
func sampleCost() cost {
	var c cost
	c.cpu = processCPU()
	s := []metrics.Sample{{Name: allocMetrics[0]}, {Name: allocMetrics[1]}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		c.allocObjects = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		c.allocBytes = s[1].Value.Uint64()
	}
	return c
}

// PerOp is what one operation (a read turn or a confirm cycle) cost the
// whole process on average over a throughput measurement: process CPU
// time ÷ operations, and heap allocations ÷ operations. With the embedded
// server (no --nats) the CPU includes the server's; the driver's own
// goroutines are in it too, for parley and for the floors alike.
type PerOp struct {
	// CPUms is process CPU milliseconds (user + system) per operation.
	CPUms float64 `json:"cpu_ms"`
	// Allocs is heap objects allocated per operation.
	Allocs float64 `json:"allocs"`
	// AllocKB is heap kibibytes allocated per operation.
	AllocKB float64 `json:"alloc_kb"`
}

// perOp divides what the process spent between before and after by n
// operations; zero when n is zero.
func perOp(before, after cost, n int64) PerOp {
	if n <= 0 {
		return PerOp{}
	}
	f := float64(n)
	return PerOp{
		CPUms:   round3(float64(after.cpu-before.cpu) / float64(time.Millisecond) / f),
		Allocs:  math.Round(float64(after.allocObjects-before.allocObjects) / f),
		AllocKB: round1(float64(after.allocBytes-before.allocBytes) / 1024 / f),
	}
}
