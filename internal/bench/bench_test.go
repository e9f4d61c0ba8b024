package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the whole bench with tiny settings so it cannot rot. It
// checks that every figure is there and positive, never how fast.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and every worker")
	}
	rep, err := Run(t.Context(), Options{Duration: 300 * time.Millisecond, Held: 200, BaselineHeld: 50, Concurrency: 8})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"floor":     {"turn_p50_ms", "turn_p99_ms", "turns_per_s"},
		"floor_min": {"turn_p50_ms", "turn_p99_ms", "turns_per_s", "confirm_resume_p50_ms", "confirm_cycles_per_s"},
		"turn":      {"p50_ms", "p99_ms", "turns_per_s"},
		"confirm":   {"resume_p50_ms", "resume_p99_ms", "cycles_per_s"},
		"veto":      {"p50_ms", "p99_ms", "raw_p50_ms", "raw_p99_ms"},
		"held": {"paused", "resume_p50_ms", "resume_p99_ms", "baseline_resume_p50_ms", "baseline_resume_p99_ms",
			"kv_bytes_per_paused_turn"},
		"neighbour": {"flood_messages", "flood_publish_ms", "unloaded_p50_ms", "loaded_p50_ms", "loaded_over_unloaded"},
	}
	for section, keys := range want {
		for _, k := range keys {
			v, ok := got[section][k].(float64)
			if !ok || v <= 0 {
				t.Errorf("report %s.%s = %v, want a positive number", section, k, got[section][k])
			}
		}
	}
	// What a turn and a confirm cycle cost the process, for parley and
	// both floors.
	perOp := map[string][]string{"turn": {"per_turn"}, "confirm": {"per_confirm_cycle"},
		"floor": {"per_turn", "per_confirm_cycle"}, "floor_min": {"per_turn", "per_confirm_cycle"}}
	for section, keys := range perOp {
		for _, k := range keys {
			m, _ := got[section][k].(map[string]any)
			for _, f := range []string{"cpu_ms", "allocs", "alloc_kb"} {
				if v, ok := m[f].(float64); !ok || v <= 0 {
					t.Errorf("report %s.%s.%s = %v, want a positive number", section, k, f, m[f])
				}
			}
		}
	}
	// The minimal floor is the chain the issue defines: 6 JetStream
	// publishes, 1 request-reply and 3 KV writes per read turn.
	for kind, n := range map[string]int{"js_publish": 6, "request_reply": 1, "kv_write": 3, "kv_get": 0} {
		if got := rep.OpsFloorMin.Turn[kind]; got != n {
			t.Errorf("minimal floor read turn: %d %s, want %d (%v)", got, kind, n, rep.OpsFloorMin.TurnTrace)
		}
	}
	// What one read turn costs parley on its buckets:
	// the agent writes its run record once (the checkpoint before the
	// tool call) and never reads it back (the result's first delivery is
	// applied to its memory of that write, agent.runCache: the bench runs
	// one agent replica), reads no tool definition (the listing's
	// cache), and the processor reads the
	// thread once per handler. A confirm cycle writes one pause record
	// (a message schedule: neither expiry watcher is delivered it) and
	// reads none (this processor wrote it); the agent never reads its
	// record (a run paused before its first checkpoint is resumed without
	// reading it, and the tool result is applied to the agent's memory of
	// the checkpoint).
	for k, most := range map[string]int{
		"kv_write parley_runs": 1, "kv_get parley_runs": 0, "kv_get parley_tools": 0, "kv_get parley_threads": 2,
	} {
		if got := rep.Ops.TurnDetail[k]; got > most {
			t.Errorf("read turn: %d × %s, want at most %d (%v)", got, k, most, rep.Ops.TurnTrace)
		}
	}
	for k, most := range map[string]int{"kv_get parley_paused": 0, "kv_write parley_paused": 1, "kv_write parley_runs": 1,
		"kv_get parley_runs": 0, "ack KV_parley_paused/processor-expiry": 0, "ack KV_parley_paused/processor-timers": 0} {
		if got := rep.Ops.ConfirmDetail[k]; got > most {
			t.Errorf("confirm cycle: %d × %s, want at most %d (%v)", got, k, most, rep.Ops.ConfirmTrace)
		}
	}
	// Bus messages per read turn and per confirm cycle, not counting the
	// consumers' pull renewals (at the smoke run's concurrency of 8 a few
	// fall in the window; at 64, as in the default run, none do): at most
	// 25 and 47. The confirm cycle's 47 include the call-time standing
	// approval check (the agent's request on parley.approval.use and the
	// processor's read of parley_approvals), which a revoke racing the
	// call needs (docs/POLICY.md, "Standing approvals").
	for _, c := range []struct {
		name  string
		ops   map[string]int
		most  int
		trace []string
	}{
		{"read turn", rep.Ops.Turn, 25, rep.Ops.TurnTrace},
		{"confirm cycle", rep.Ops.Confirm, 47, rep.Ops.ConfirmTrace},
	} {
		if got := c.ops["total"] - c.ops["pull_request"]; got > c.most {
			t.Errorf("%s: %d bus messages besides pull renewals, want at most %d (%v)", c.name, got, c.most, c.trace)
		}
	}
	for _, k := range []string{"min_turn_p50", "min_turns_per_s", "min_confirm_resume_p50", "min_confirm_cycles_per_s"} {
		if rep.Ratios[k] <= 0 {
			t.Errorf("ratio %s = %v, want positive", k, rep.Ratios[k])
		}
	}
	if rep.Held.Paused != 200 {
		t.Errorf("held.paused = %d, want 200", rep.Held.Paused)
	}
	var b strings.Builder
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "turns/s") || !strings.Contains(b.String(), "floor_min") {
		t.Errorf("table lacks the turns/s row:\n%s", b.String())
	}
}
