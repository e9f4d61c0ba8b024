package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchProfilesOnePhase runs the smoke bench with a CPU and a heap
// profile of one phase and checks that both profiles (and the heap
// profile's base) are written as pprof files, and that the report carries
// CPU and allocations per turn for parley and the minimal floor.
func TestBenchProfilesOnePhase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and every worker")
	}
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.out"), filepath.Join(dir, "mem.out")
	var stdout, stderr bytes.Buffer
	code := run([]string{"bench", "--smoke", "--json", "--profile-phase", "turn", "--cpuprofile", cpu, "--memprofile", mem},
		strings.NewReader(""), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, p := range []string{cpu, mem, mem + ".base"} {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		// pprof writes gzipped protocol buffers.
		if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
			t.Errorf("%s: %d bytes, not a gzipped pprof profile", filepath.Base(p), len(data))
		}
	}
	var rep struct {
		Turn struct {
			PerTurn map[string]float64 `json:"per_turn"`
		} `json:"turn"`
		FloorMin struct {
			PerTurn  map[string]float64 `json:"per_turn"`
			PerCycle map[string]float64 `json:"per_confirm_cycle"`
		} `json:"floor_min"`
		Ratios map[string]float64 `json:"ratios"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	for name, m := range map[string]map[string]float64{"turn.per_turn": rep.Turn.PerTurn,
		"floor_min.per_turn": rep.FloorMin.PerTurn, "floor_min.per_confirm_cycle": rep.FloorMin.PerCycle} {
		for _, k := range []string{"cpu_ms", "allocs", "alloc_kb"} {
			if m[k] <= 0 {
				t.Errorf("%s.%s = %v, want positive", name, k, m[k])
			}
		}
	}
	if rep.Ratios["min_cpu_per_turn"] <= 0 {
		t.Errorf("ratios.min_cpu_per_turn = %v, want positive", rep.Ratios["min_cpu_per_turn"])
	}
}
