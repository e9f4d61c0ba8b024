package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
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
	CPUProfile string        `name:"cpuprofile" hidden:"" help:"Write a CPU profile of the whole run (server, workers, driver) to this file."`

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
	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return fmt.Errorf("cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.Run(e.ctx, opts)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return bench.WriteTable(e.stdout, rep)
}
