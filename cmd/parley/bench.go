package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/internal/bench"
	"github.com/parley-dev/parley/internal/natsauth"
)

type benchCmd struct {
	Storage    string        `name:"storage" default:"file" enum:"file,memory" help:"JetStream storage of streams and buckets (${enum})."`
	Duration   time.Duration `name:"duration" default:"10s" help:"Budget of each phase (floor, turn, confirm, veto, held)."`
	Held       int           `name:"held" default:"100000" help:"Paused turns held at once in the held phase."`
	Baseline   int           `name:"baseline" default:"100" help:"Paused turns held in the held phase's baseline."`
	Conc       int           `name:"concurrency" default:"64" help:"Concurrent threads of the throughput measurements."`
	JSON       bool          `name:"json" help:"Print the report as one JSON object instead of a table."`
	Smoke      bool          `name:"smoke" help:"A few seconds' run that only checks everything works (CI): --duration 300ms --held 200 --baseline 50 --concurrency 8."`
	Verbose    bool          `name:"verbose" short:"v" help:"Also print the workers' logs (stderr)."`
	CPUProfile string        `name:"cpuprofile" help:"Write a CPU profile (server, workers, driver) to this file: of the whole run, or of --profile-phase."`
	MemProfile string        `name:"memprofile" help:"Write a heap allocation profile to this file at the end of the run, or of --profile-phase (then also FILE.base at its start, for 'go tool pprof -base')."`
	Phase      string        `name:"profile-phase" help:"Profile only this phase (floor, floor_min, turn, confirm, veto, held, neighbour)."`

	// natsGiven is set when --nats (or PARLEY_NATS) chose a server;
	// otherwise the bench starts an embedded one.
	natsGiven bool
}

// AfterApply notes whether --nats was given: the global flag has a
// default, and the bench must tell "given" from "defaulted".
func (c *benchCmd) AfterApply(kctx *kong.Context) error {
	for _, p := range kctx.Path {
		if p.Flag != nil && p.Flag.Name == "nats" {
			c.natsGiven = true
		}
	}
	if _, ok := os.LookupEnv("PARLEY_NATS"); ok {
		c.natsGiven = true
	}
	return nil
}

// Validate checks the flags (kong calls it after parsing).
func (c *benchCmd) Validate() error {
	switch {
	case c.Conc < 1:
		return fmt.Errorf("--concurrency must be at least 1, got %d", c.Conc)
	case c.Duration <= 0:
		return fmt.Errorf("--duration must be positive, got %v", c.Duration)
	case c.Held < 1:
		return fmt.Errorf("--held must be at least 1, got %d", c.Held)
	case c.Baseline < 1:
		return fmt.Errorf("--baseline must be at least 1, got %d", c.Baseline)
	case c.Phase != "" && !slices.Contains(bench.Phases, c.Phase):
		return fmt.Errorf("--profile-phase must be one of %s, got %q", strings.Join(bench.Phases, ", "), c.Phase)
	case c.Phase != "" && c.CPUProfile == "" && c.MemProfile == "":
		return fmt.Errorf("--profile-phase needs --cpuprofile or --memprofile")
	}
	return nil
}

func (c *benchCmd) Run(e *env) error {
	opts := bench.Options{Duration: c.Duration, Held: c.Held, BaselineHeld: c.Baseline, Concurrency: c.Conc,
		Progress: e.stderr}
	if c.Smoke {
		opts.Duration, opts.Held, opts.BaselineHeld, opts.Concurrency = 300*time.Millisecond, 200, 50, 8
	}
	if c.natsGiven {
		opts.NATSURL = e.NATS
		// The bench creates and purges its own streams and buckets: on a
		// secured server it needs the admin principal.
		no, err := e.credentials(natsauth.Admin).Options()
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		opts.NATSOptions = no
	}
	if c.Storage == "memory" {
		opts.Storage = jetstream.MemoryStorage
	}
	logw := io.Discard
	if c.Verbose {
		logw = e.stderr
	}
	opts.Logger = slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	prof := &benchProfiles{cpu: c.CPUProfile, mem: c.MemProfile}
	if c.Phase == "" {
		if err := prof.start(false); err != nil {
			return &exitError{code: 1, err: err}
		}
		defer prof.stop()
	} else {
		opts.OnPhase = func(phase string) func() {
			if phase != c.Phase {
				return func() {}
			}
			if err := prof.start(true); err != nil {
				fmt.Fprintf(e.stderr, "bench: %v\n", err)
				return func() {}
			}
			return prof.stop
		}
	}
	rep, err := bench.Run(e.ctx, opts)
	if err != nil {
		return err
	}
	if err := prof.err; err != nil {
		return &exitError{code: 1, err: err}
	}
	if c.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return bench.WriteTable(e.stdout, rep)
}

// benchProfiles writes the CPU and heap profiles `parley bench` was asked
// for, around the whole run or one phase.
type benchProfiles struct {
	cpu, mem string
	cpuFile  *os.File
	// err is the first error writing a profile (reported after the run).
	err error
}

// start begins the CPU profile and, for a phase (withBase), writes the
// heap allocation profile so far to mem + ".base".
func (p *benchProfiles) start(withBase bool) error {
	if p.cpu != "" {
		f, err := os.Create(p.cpu)
		if err != nil {
			return fmt.Errorf("cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("cpuprofile: %w", err)
		}
		p.cpuFile = f
	}
	if p.mem != "" && withBase {
		if err := writeAllocs(p.mem + ".base"); err != nil {
			return err
		}
	}
	return nil
}

// stop ends the CPU profile and writes the heap allocation profile.
func (p *benchProfiles) stop() {
	if p.cpuFile != nil {
		pprof.StopCPUProfile()
		if err := p.cpuFile.Close(); err != nil && p.err == nil {
			p.err = fmt.Errorf("cpuprofile: %w", err)
		}
		p.cpuFile = nil
	}
	if p.mem != "" {
		if err := writeAllocs(p.mem); err != nil && p.err == nil {
			p.err = err
		}
	}
}

// writeAllocs writes the "allocs" profile (every allocation sampled since
// the process started) to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("memprofile: %w", err)
	}
	runtime.GC() // the profile's in-use figures are as of the last GC
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("memprofile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("memprofile: %w", err)
	}
	return nil
}
