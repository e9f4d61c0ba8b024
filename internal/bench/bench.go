// Package bench measures parley against the raw NATS floor of the same
// machine, in the same run: full turns, confirmation pauses and resumes,
// the pre-execute request-reply, and resumes with many paused turns held.
//
// Run starts an embedded nats-server (or uses Options.NATSURL), runs the
// real workers (processor, agent, tool-executor, gate) in-process, each on
// its own NATS connection over TCP loopback, with the scripted model and
// no-op tools, and next to them a minimal program of the same operation mix
// written with nats.go only (the floor). The Report holds parley's figures,
// the floor's and their ratios; WriteTable prints them.
//
// It is a composition root: it may import any of parley's packages; only
// cmd/parley imports it.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options configures Run.
type Options struct {
	// NATSURL is the server to measure against. Optional. Default: an
	// embedded nats-server with JetStream on a temporary store directory.
	// Against a shared server, run no other parley workers: the bench's
	// workers join the durable consumers "processor", "agent" and
	// "toolexec", and the held phase leaves Held paused turns (thread
	// records in parley_threads, pause records with TTL SeedTTL in
	// parley_paused).
	NATSURL string
	// NATSOptions are added to every connection to NATSURL (credentials,
	// TLS: `parley bench` passes its flags'). Optional.
	NATSOptions []nats.Option
	// Storage of streams and buckets. Optional. Default: file.
	Storage jetstream.StorageType
	// Duration is the budget of each phase (floor, turn, confirm, veto,
	// held); a phase with two measurements gives each half. Optional.
	// Default: 10s.
	Duration time.Duration
	// Concurrency of the throughput measurements. Optional. Default: 64.
	Concurrency int
	// Held is how many paused turns the held phase holds at once.
	// Optional. Default: 100000.
	Held int
	// BaselineHeld is the held count of the baseline. Optional. Default: 100.
	BaselineHeld int
	// SeedTTL is the TTL of the pause records the held phase seeds.
	// Optional. Default: 1h.
	SeedTTL time.Duration
	// Logger receives the workers' logs. Optional. Default: discard.
	Logger *slog.Logger
	// Progress receives one line per phase. Optional. Default: discard.
	Progress io.Writer
	// OnPhase, when set, is called as each phase starts (with its name:
	// one of Phases) and the function it returns as the phase ends, on
	// success or error; `parley bench --profile-phase` starts and stops
	// its CPU and heap profiles there. Optional.
	OnPhase func(phase string) (end func())
}

// Phases are the names of Run's phases, in the order it runs them.
var Phases = []string{"floor", "floor_min", "turn", "confirm", "veto", "held", "neighbour"}

func (o *Options) defaults() error {
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 64
	}
	if o.Held <= 0 {
		o.Held = 100000
	}
	if o.BaselineHeld <= 0 {
		o.BaselineHeld = 100
	}
	if o.BaselineHeld > o.Held {
		return fmt.Errorf("held: %d is below the baseline of %d", o.Held, o.BaselineHeld)
	}
	if o.SeedTTL <= 0 {
		o.SeedTTL = time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return nil
}

// Report is the outcome of Run. Times are milliseconds, rates per second.
type Report struct {
	Floor FloorFigures `json:"floor"`
	// FloorMin is the minimal floor: the 6-hop, 1 request-reply, 3
	// KV-write chain a turn needs at the least (floormin.go).
	FloorMin FloorMinFigures `json:"floor_min"`
	Turn     TurnFigures     `json:"turn"`
	Confirm  ConfirmFigures  `json:"confirm"`
	Veto     VetoFigures     `json:"veto"`
	Held     HeldFigures     `json:"held"`
	// Neighbour is another user's turn while one integrator floods a
	// thread (the noisy neighbour), next to the same turn unloaded.
	Neighbour NeighbourFigures `json:"neighbour"`
	// Ratios are parley ÷ floor for each figure (latency: above 1 is
	// slower; rates: below 1 is slower); the keys starting "min_" are
	// parley ÷ the minimal floor.
	Ratios map[string]float64 `json:"ratios"`
	// Ops counts what one turn and one confirm cycle cost on the bus, as
	// seen by a subscriber on ">" during a probe.
	Ops OpCounts `json:"ops"`
	// OpsFloorMin counts the same for the minimal floor.
	OpsFloorMin OpCounts `json:"ops_floor_min"`
	Machine     Machine  `json:"machine"`
}

// FloorFigures are the raw nats.go program's figures.
type FloorFigures struct {
	TurnP50    float64 `json:"turn_p50_ms"`
	TurnP99    float64 `json:"turn_p99_ms"`
	TurnsPerS  float64 `json:"turns_per_s"`
	ResumeP50  float64 `json:"resume_p50_ms"`
	ResumeP99  float64 `json:"resume_p99_ms"`
	CyclesPerS float64 `json:"cycles_per_s"`
	Samples    int     `json:"samples"`
	// PerTurn and PerCycle are what one read turn and one confirm cycle
	// of the throughput measurements cost the process.
	PerTurn  PerOp `json:"per_turn"`
	PerCycle PerOp `json:"per_confirm_cycle"`
}

// FloorMinFigures are the minimal floor's figures, measured as parley's
// are (latency at concurrency 1, rates at Options.Concurrency).
type FloorMinFigures struct {
	TurnP50           float64 `json:"turn_p50_ms"`
	TurnP99           float64 `json:"turn_p99_ms"`
	TurnsPerS         float64 `json:"turns_per_s"`
	ConfirmResumeP50  float64 `json:"confirm_resume_p50_ms"`
	ConfirmResumeP99  float64 `json:"confirm_resume_p99_ms"`
	ConfirmCyclesPerS float64 `json:"confirm_cycles_per_s"`
	Samples           int     `json:"samples"`
	// PerTurn and PerConfirmCycle are what one read turn and one confirm
	// cycle of the throughput measurements cost the process.
	PerTurn         PerOp `json:"per_turn"`
	PerConfirmCycle PerOp `json:"per_confirm_cycle"`
}

// TurnFigures are full turns with one read-only tool call.
type TurnFigures struct {
	P50         float64 `json:"p50_ms"`
	P99         float64 `json:"p99_ms"`
	TurnsPerS   float64 `json:"turns_per_s"`
	Samples     int     `json:"samples"`
	Concurrency int     `json:"concurrency"`
	// PerTurn is what one turn of the throughput measurement cost the
	// process (CPU, allocations).
	PerTurn PerOp `json:"per_turn"`
}

// ConfirmFigures are turns that pause for a tool confirmation.
type ConfirmFigures struct {
	ResumeP50  float64 `json:"resume_p50_ms"`
	ResumeP99  float64 `json:"resume_p99_ms"`
	CyclesPerS float64 `json:"cycles_per_s"`
	Samples    int     `json:"samples"`
	// PerCycle is what one confirm cycle of the throughput measurement
	// cost the process (CPU, allocations).
	PerCycle PerOp `json:"per_confirm_cycle"`
}

// VetoFigures compare the pre-execute request-reply with raw core NATS.
type VetoFigures struct {
	P50          float64 `json:"p50_ms"`
	P99          float64 `json:"p99_ms"`
	RawP50       float64 `json:"raw_p50_ms"`
	RawP99       float64 `json:"raw_p99_ms"`
	Samples      int     `json:"samples"`
	RequestBytes int     `json:"request_bytes"`
	ReplyBytes   int     `json:"reply_bytes"`
}

// NeighbourFigures are a read turn on a fresh thread, unloaded and
// started right after one integrator published a burst of FloodMessages
// messages to one thread of its own (neighbourPhase).
type NeighbourFigures struct {
	FloodMessages int `json:"flood_messages"`
	Rounds        int `json:"rounds"`
	// FloodPublishMS is how long publishing one burst took (async).
	FloodPublishMS float64 `json:"flood_publish_ms"`
	// FloodStored and FloodRefused are the burst's messages PARLEY_INPUT
	// took and refused (bus.InputMaxMsgsPerSubject), per round.
	FloodStored  int `json:"flood_stored"`
	FloodRefused int `json:"flood_refused"`
	// UnloadedP50 and LoadedP50 are the victim's turn, without and with
	// the flood; LoadedMax its slowest with the flood.
	UnloadedP50        float64 `json:"unloaded_p50_ms"`
	LoadedP50          float64 `json:"loaded_p50_ms"`
	LoadedMax          float64 `json:"loaded_max_ms"`
	LoadedOverUnloaded float64 `json:"loaded_over_unloaded"`
}

// HeldFigures compare resumes with many paused turns held and with few.
type HeldFigures struct {
	Paused                int     `json:"paused"`
	ResumeP50             float64 `json:"resume_p50_ms"`
	ResumeP99             float64 `json:"resume_p99_ms"`
	BaselinePaused        int     `json:"baseline_paused"`
	BaselineResumeP50     float64 `json:"baseline_resume_p50_ms"`
	BaselineResumeP99     float64 `json:"baseline_resume_p99_ms"`
	KVBytesPerPausedTurn  float64 `json:"kv_bytes_per_paused_turn"`
	RecordBytes           int     `json:"record_bytes"`
	SeedPerS              float64 `json:"seed_records_per_s"`
	Samples               int     `json:"samples"`
	BaselineSamples       int     `json:"baseline_samples"`
	WatcherSettleMillisec float64 `json:"watcher_settle_ms"`
}

// OpCounts are bus operations per turn by kind.
type OpCounts struct {
	// Turn and Confirm count the operations of one read turn and one
	// confirm cycle by kind (js_publish, js_deliver, ack, kv_get,
	// kv_write, stream_msg_get, request_reply, ...) and in all ("total").
	Turn    map[string]int `json:"turn"`
	Confirm map[string]int `json:"confirm_cycle"`
	// TurnDetail and ConfirmDetail count them by kind and target: "kv_get
	// parley_threads", "js_publish agent.run.requested", "ack
	// PARLEY_AGENT/agent".
	TurnDetail    map[string]int `json:"turn_detail,omitempty"`
	ConfirmDetail map[string]int `json:"confirm_cycle_detail,omitempty"`
	// TurnTrace and ConfirmTrace are the same operations in the order the
	// probe saw them.
	TurnTrace    []string `json:"turn_trace,omitempty"`
	ConfirmTrace []string `json:"confirm_cycle_trace,omitempty"`
}

// Machine describes where the figures were measured.
type Machine struct {
	CPUs     int     `json:"cpus"`
	CPU      string  `json:"cpu_model"`
	Go       string  `json:"go"`
	OSArch   string  `json:"os_arch"`
	Server   string  `json:"server"`
	Storage  string  `json:"storage"`
	Duration string  `json:"duration"`
	ElapsedS float64 `json:"elapsed_s"`
}

// ms converts a duration to milliseconds rounded to 3 decimals.
func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func round1(f float64) float64 { return math.Round(f*10) / 10 }

// percentile returns the nearest-rank q-quantile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// p50p99 sorts ds and returns its p50 and p99 in milliseconds.
func p50p99(ds []time.Duration) (float64, float64) {
	slices.Sort(ds)
	return ms(percentile(ds, 0.50)), ms(percentile(ds, 0.99))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(a/b*100) / 100
}

func (r *Report) computeRatios() {
	r.Ratios = map[string]float64{
		"turn_p50":             ratio(r.Turn.P50, r.Floor.TurnP50),
		"turn_p99":             ratio(r.Turn.P99, r.Floor.TurnP99),
		"turns_per_s":          ratio(r.Turn.TurnsPerS, r.Floor.TurnsPerS),
		"confirm_resume_p50":   ratio(r.Confirm.ResumeP50, r.Floor.ResumeP50),
		"confirm_resume_p99":   ratio(r.Confirm.ResumeP99, r.Floor.ResumeP99),
		"confirm_cycles_per_s": ratio(r.Confirm.CyclesPerS, r.Floor.CyclesPerS),
		"veto_p50":             ratio(r.Veto.P50, r.Veto.RawP50),
		"veto_p99":             ratio(r.Veto.P99, r.Veto.RawP99),
		"held_resume_p50":      ratio(r.Held.ResumeP50, r.Held.BaselineResumeP50),
		"held_resume_p99":      ratio(r.Held.ResumeP99, r.Held.BaselineResumeP99),

		"min_turn_p50":             ratio(r.Turn.P50, r.FloorMin.TurnP50),
		"min_turn_p99":             ratio(r.Turn.P99, r.FloorMin.TurnP99),
		"min_turns_per_s":          ratio(r.Turn.TurnsPerS, r.FloorMin.TurnsPerS),
		"min_confirm_resume_p50":   ratio(r.Confirm.ResumeP50, r.FloorMin.ConfirmResumeP50),
		"min_confirm_resume_p99":   ratio(r.Confirm.ResumeP99, r.FloorMin.ConfirmResumeP99),
		"min_confirm_cycles_per_s": ratio(r.Confirm.CyclesPerS, r.FloorMin.ConfirmCyclesPerS),

		"cpu_per_turn":                 ratio(r.Turn.PerTurn.CPUms, r.Floor.PerTurn.CPUms),
		"cpu_per_confirm_cycle":        ratio(r.Confirm.PerCycle.CPUms, r.Floor.PerCycle.CPUms),
		"min_cpu_per_turn":             ratio(r.Turn.PerTurn.CPUms, r.FloorMin.PerTurn.CPUms),
		"min_cpu_per_confirm_cycle":    ratio(r.Confirm.PerCycle.CPUms, r.FloorMin.PerConfirmCycle.CPUms),
		"min_allocs_per_turn":          ratio(r.Turn.PerTurn.Allocs, r.FloorMin.PerTurn.Allocs),
		"min_allocs_per_confirm_cycle": ratio(r.Confirm.PerCycle.Allocs, r.FloorMin.PerConfirmCycle.Allocs),
	}
}

// WriteTable prints the report as a table: each figure, the floor's figure
// beside it, and the ratio parley ÷ floor.
func WriteTable(w io.Writer, r *Report) error {
	type row struct {
		name, parley, floor, ratio, min, minRatio string
	}
	f3 := func(v float64) string { return fmt.Sprintf("%.3f", v) }
	f0 := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	x := func(k string) string { return fmt.Sprintf("%.2f×", r.Ratios[k]) }
	c := r.Turn.Concurrency
	fm := r.FloorMin
	rows := []row{
		{"turn latency p50 (ms), c=1", f3(r.Turn.P50), f3(r.Floor.TurnP50), x("turn_p50"), f3(fm.TurnP50), x("min_turn_p50")},
		{"turn latency p99 (ms), c=1", f3(r.Turn.P99), f3(r.Floor.TurnP99), x("turn_p99"), f3(fm.TurnP99), x("min_turn_p99")},
		{fmt.Sprintf("turns/s, c=%d", c), f0(r.Turn.TurnsPerS), f0(r.Floor.TurnsPerS), x("turns_per_s"), f0(fm.TurnsPerS), x("min_turns_per_s")},
		{"confirm resume p50 (ms), c=1", f3(r.Confirm.ResumeP50), f3(r.Floor.ResumeP50), x("confirm_resume_p50"), f3(fm.ConfirmResumeP50), x("min_confirm_resume_p50")},
		{"confirm resume p99 (ms), c=1", f3(r.Confirm.ResumeP99), f3(r.Floor.ResumeP99), x("confirm_resume_p99"), f3(fm.ConfirmResumeP99), x("min_confirm_resume_p99")},
		{fmt.Sprintf("confirm cycles/s, c=%d", c), f0(r.Confirm.CyclesPerS), f0(r.Floor.CyclesPerS), x("confirm_cycles_per_s"), f0(fm.ConfirmCyclesPerS), x("min_confirm_cycles_per_s")},
		{"CPU ms per read turn", f3(r.Turn.PerTurn.CPUms), f3(r.Floor.PerTurn.CPUms), x("cpu_per_turn"), f3(fm.PerTurn.CPUms), x("min_cpu_per_turn")},
		{"CPU ms per confirm cycle", f3(r.Confirm.PerCycle.CPUms), f3(r.Floor.PerCycle.CPUms), x("cpu_per_confirm_cycle"), f3(fm.PerConfirmCycle.CPUms), x("min_cpu_per_confirm_cycle")},
		{"allocations per read turn", f0(r.Turn.PerTurn.Allocs), f0(r.Floor.PerTurn.Allocs), "", f0(fm.PerTurn.Allocs), x("min_allocs_per_turn")},
		{"allocations per confirm cycle", f0(r.Confirm.PerCycle.Allocs), f0(r.Floor.PerCycle.Allocs), "", f0(fm.PerConfirmCycle.Allocs), x("min_allocs_per_confirm_cycle")},
		{"bus messages per read turn", fmt.Sprint(r.Ops.Turn["total"]), "", "", fmt.Sprint(r.OpsFloorMin.Turn["total"]), ""},
		{"bus messages per confirm cycle", fmt.Sprint(r.Ops.Confirm["total"]), "", "", fmt.Sprint(r.OpsFloorMin.Confirm["total"]), ""},
		{"veto request-reply p50 (ms)", f3(r.Veto.P50), f3(r.Veto.RawP50) + " raw", x("veto_p50"), "", ""},
		{"veto request-reply p99 (ms)", f3(r.Veto.P99), f3(r.Veto.RawP99) + " raw", x("veto_p99"), "", ""},
		{fmt.Sprintf("resume p50 (ms), %d held", r.Held.Paused), f3(r.Held.ResumeP50),
			f3(r.Held.BaselineResumeP50) + fmt.Sprintf(" @%d", r.Held.BaselinePaused), x("held_resume_p50"), "", ""},
		{fmt.Sprintf("resume p99 (ms), %d held", r.Held.Paused), f3(r.Held.ResumeP99),
			f3(r.Held.BaselineResumeP99) + fmt.Sprintf(" @%d", r.Held.BaselinePaused), x("held_resume_p99"), "", ""},
		{"KV bytes per paused turn", f0(r.Held.KVBytesPerPausedTurn), "", "", "", ""},
		{fmt.Sprintf("read turn p50 (ms) during a %d-message flood of another thread", r.Neighbour.FloodMessages),
			f3(r.Neighbour.LoadedP50), f3(r.Neighbour.UnloadedP50) + " unloaded", f3(r.Neighbour.LoadedOverUnloaded), "", ""},
		{"read turn max (ms) during the flood", f3(r.Neighbour.LoadedMax), "", "", "", ""},
	}
	head := row{"figure", "parley", "floor", "ratio", "floor_min", "ratio"}
	wd := [6]int{}
	for _, rr := range append([]row{head}, rows...) {
		for i, s := range []string{rr.name, rr.parley, rr.floor, rr.ratio, rr.min, rr.minRatio} {
			wd[i] = max(wd[i], len([]rune(s)))
		}
	}
	var b strings.Builder
	line := func(rr row) {
		fmt.Fprintf(&b, "| %-*s | %*s | %*s | %*s | %*s | %*s |\n", wd[0], rr.name, wd[1], rr.parley, wd[2], rr.floor,
			wd[3], rr.ratio, wd[4], rr.min, wd[5], rr.minRatio)
	}
	line(head)
	fmt.Fprintf(&b, "|%s|", strings.Repeat("-", wd[0]+2))
	for _, w := range wd[1:] {
		fmt.Fprintf(&b, "%s:|", strings.Repeat("-", w+1))
	}
	b.WriteString("\n")
	for _, rr := range rows {
		line(rr)
	}
	m := r.Machine
	fmt.Fprintf(&b, "\nratio = parley ÷ floor (latency: above 1 is slower; rates: below 1 is slower); floor replays "+
		"parley's own operation mix, floor_min is the minimal chain (6 hops, 1 request-reply, 3 KV writes). "+
		"%d CPUs (%s), %s, %s, %s storage, %s per phase, %.0fs in all.\n",
		m.CPUs, m.CPU, m.Go, m.Server, m.Storage, m.Duration, m.ElapsedS)
	_, err := io.WriteString(w, b.String())
	return err
}

// Run measures everything and returns the report. It stops early with
// ctx's error when ctx is cancelled.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	rep := &Report{}
	rep.Machine = Machine{CPUs: runtime.NumCPU(), CPU: cpuModel(), Go: runtime.Version(),
		OSArch: runtime.GOOS + "/" + runtime.GOARCH, Storage: storageName(opts.Storage), Duration: opts.Duration.String()}

	env, err := startEnv(ctx, &opts)
	if err != nil {
		return nil, err
	}
	defer env.close()
	rep.Machine.Server = env.serverDesc

	sys, err := startSystem(ctx, env, &opts)
	if err != nil {
		return nil, err
	}
	defer sys.stop()

	progress := func(format string, a ...any) {
		fmt.Fprintf(opts.Progress, "bench: %6.1fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, a...)...)
	}
	progress("system up on %s (%s storage); probing one turn", rep.Machine.Server, rep.Machine.Storage)
	sizes, ops, err := sys.probe(ctx)
	if err != nil {
		return nil, fmt.Errorf("probing a turn: %w", err)
	}
	rep.Ops = ops

	fl, err := startFloor(ctx, env, &opts, sizes)
	if err != nil {
		return nil, err
	}
	defer fl.stop()
	fm, err := startMinFloor(ctx, env, &opts, sizes)
	if err != nil {
		return nil, err
	}
	defer fm.stop()
	if _, rep.OpsFloorMin, err = probeOps(ctx, env, fm, "probe-min"); err != nil {
		return nil, fmt.Errorf("probing the minimal floor: %w", err)
	}

	steps := []struct {
		name string
		fn   func() error
	}{
		{"floor", func() error { return floorPhase(ctx, fl, &opts, &rep.Floor) }},
		{"floor_min", func() error { return floorMinPhase(ctx, fm, &opts, &rep.FloorMin) }},
		{"turn", func() error { return turnPhase(ctx, sys, &opts, &rep.Turn) }},
		{"confirm", func() error { return confirmPhase(ctx, sys, &opts, &rep.Confirm) }},
		{"veto", func() error { return vetoPhase(ctx, sys, &opts, &rep.Veto) }},
		{"held", func() error { return heldPhase(ctx, sys, env, &opts, &rep.Held, progress) }},
		{"neighbour", func() error { return neighbourPhase(ctx, sys, &opts, &rep.Neighbour) }},
	}
	for _, s := range steps {
		progress("%s", s.name)
		end := func() {}
		if opts.OnPhase != nil {
			end = opts.OnPhase(s.name)
		}
		err := s.fn()
		end()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	rep.computeRatios()
	rep.Machine.ElapsedS = round1(time.Since(start).Seconds())
	progress("done")
	return rep, nil
}

func storageName(s jetstream.StorageType) string {
	if s == jetstream.MemoryStorage {
		return "memory"
	}
	return "file"
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for l := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// errTimeout is returned when an expected event does not arrive in time.
var errTimeout = errors.New("timed out waiting for an event")
