//go:build !unix

package bench

import "time"

// processCPU is not measured on this system: CPU per operation reads 0.
func processCPU() time.Duration { return 0 }
