package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
)

// heldPhase measures resumes with opts.Held paused turns held at once,
// against a baseline of opts.BaselineHeld. Pausing that many turns through
// the pipeline would take minutes, so the held turns are seeded: a real
// paused turn's records (pause record with its per-key TTL, and thread)
// are copied under new thread, turn and elicitation IDs straight into the
// buckets with bounded async publishes. Then sample turns are paused
// through the pipeline and resumed one at a time.
func heldPhase(ctx context.Context, s *system, env *benchEnv, opts *Options, out *HeldFigures, progress func(string, ...any)) error {
	js := s.drv.JetStream()
	pausedStream := "KV_" + kvstate.BucketPaused
	if env.own() {
		// The confirm phase left its (resumed) records; start the baseline
		// from an empty bucket. Only on the bench's own server.
		st, err := js.Stream(ctx, pausedStream)
		if err != nil {
			return err
		}
		if err := st.Purge(ctx); err != nil {
			return fmt.Errorf("purging %s: %w", pausedStream, err)
		}
	}

	// A real paused turn is the template of the seeded ones.
	th := newThreads(env, "held", 0)
	tplThread := th.fresh()
	if _, err := pauseTurn(ctx, s, tplThread); err != nil {
		return err
	}
	tpl, err := newTemplate(ctx, js, tplThread)
	if err != nil {
		return err
	}
	out.RecordBytes = len(tpl.paused) + len(tpl.thread)

	sd, err := newSeeder(env, opts.SeedTTL)
	if err != nil {
		return err
	}
	measure := func(budget time.Duration) ([]time.Duration, error) {
		return latency(ctx, budget, func() (time.Duration, error) {
			thread := th.fresh()
			id, err := pauseTurn(ctx, s, thread)
			if err != nil {
				return 0, err
			}
			return resume(ctx, s, thread, id)
		})
	}

	// Baseline: BaselineHeld paused (the template is one of them).
	if err := sd.seed(ctx, tpl, 0, opts.BaselineHeld-1); err != nil {
		return err
	}
	if _, err := settle(ctx, js, pausedStream); err != nil {
		return err
	}
	ds, err := measure(opts.Duration / 2)
	if err != nil {
		return err
	}
	out.BaselinePaused = opts.BaselineHeld
	out.BaselineResumeP50, out.BaselineResumeP99 = p50p99(ds)
	out.BaselineSamples = len(ds)

	progress("held: seeding %d paused turns", opts.Held-opts.BaselineHeld)
	start := time.Now()
	if err := sd.seed(ctx, tpl, opts.BaselineHeld-1, opts.Held-1); err != nil {
		return err
	}
	wait, err := settle(ctx, js, pausedStream)
	if err != nil {
		return err
	}
	out.SeedPerS = round1(float64(opts.Held-opts.BaselineHeld) / time.Since(start).Seconds())
	out.WatcherSettleMillisec = ms(wait)
	st, err := js.Stream(ctx, pausedStream)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs > 0 {
		out.KVBytesPerPausedTurn = round1(float64(info.State.Bytes) / float64(info.State.Msgs))
	}
	progress("held: %d records in %s (%.0f bytes each); resuming with them held", info.State.Msgs, pausedStream, out.KVBytesPerPausedTurn)

	ds, err = measure(opts.Duration / 2)
	if err != nil {
		return err
	}
	out.Paused = opts.Held
	out.ResumeP50, out.ResumeP99 = p50p99(ds)
	out.Samples = len(ds)
	return s.failed()
}

// template is a real paused turn's records (the thread record, which
// holds the paused turn, and the pause record under pausedKey) and the IDs
// to replace in them.
type template struct {
	paused, thread, pausedKey  []byte
	threadID, turnID, elicitID []byte
}

func newTemplate(ctx context.Context, js jetstream.JetStream, thread string) (*template, error) {
	t, err := kvGet(ctx, js, kvstate.BucketThreads, thread)
	if err != nil {
		return nil, err
	}
	// The processor's thread record, decoded only as far as the bench
	// needs it.
	var rec struct {
		Paused *struct {
			TurnID       string `json:"turnId"`
			Record       string `json:"record"`
			Elicitations []struct {
				ID string `json:"id"`
			} `json:"elicitations"`
		} `json:"paused"`
	}
	if err := json.Unmarshal(t, &rec); err != nil {
		return nil, err
	}
	if rec.Paused == nil || len(rec.Paused.Elicitations) == 0 || rec.Paused.Record == "" {
		return nil, errors.New("the template thread has no paused turn with a question and a pause record")
	}
	p, err := kvGet(ctx, js, kvstate.BucketPaused, rec.Paused.Record)
	if err != nil {
		return nil, err
	}
	return &template{paused: p, thread: t, pausedKey: []byte(rec.Paused.Record), threadID: []byte(thread),
		turnID: []byte(rec.Paused.TurnID), elicitID: []byte(rec.Paused.Elicitations[0].ID)}, nil
}

// instance returns the template's records for thread, with new IDs, and
// the pause record's key.
func (t *template) instance(thread string) (paused, th []byte, pausedKey string) {
	turn := []byte(events.DerivedID("held-turn", thread))
	elicit := []byte(events.DerivedID("held-elicitation", thread))
	rep := func(b []byte) []byte {
		b = bytes.ReplaceAll(b, t.threadID, []byte(thread))
		b = bytes.ReplaceAll(b, t.turnID, turn)
		return bytes.ReplaceAll(b, t.elicitID, elicit)
	}
	return rep(t.paused), rep(t.thread), string(rep(t.pausedKey))
}

// scheduledPauseSuffix ends the key of a pause record the processor
// stores as a message schedule (processor.scheduledPauseKey), and
// pauseExpirySuffix the key of its thread's expiries
// (processor.pauseExpiryKey).
const (
	scheduledPauseSuffix = ".pause"
	pauseExpirySuffix    = ".pause.expired"
)

// seeder writes paused turns with bounded async publishes.
type seeder struct {
	env  *benchEnv
	js   jetstream.JetStream
	ttl  time.Duration
	errs atomic.Int64
	last atomic.Value
}

func newSeeder(env *benchEnv, ttl time.Duration) (*seeder, error) {
	nc, err := env.connect("seeder")
	if err != nil {
		return nil, err
	}
	sd := &seeder{env: env, ttl: ttl}
	sd.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			sd.errs.Add(1)
			sd.last.Store(err.Error())
		}))
	return sd, err
}

// seed stores held turns from..to-1 (pause record and thread record).
func (sd *seeder) seed(ctx context.Context, t *template, from, to int) error {
	pub := func(m *nats.Msg, opts ...jetstream.PublishOpt) error {
		for {
			_, err := sd.js.PublishMsgAsync(m, opts...)
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	for i := from; i < to; i++ {
		thread := fmt.Sprintf("%s-held-%d", sd.env.runID, i)
		p, th, key := t.instance(thread)
		expiry := []jetstream.PublishOpt{jetstream.WithMsgTTL(sd.ttl)}
		if strings.HasSuffix(key, scheduledPauseSuffix) {
			// As the processor writes a record on a server with
			// message schedules (processor.scheduledPauseKey).
			expiry = kvstate.ScheduleOpts(kvstate.BucketPaused, thread+pauseExpirySuffix, time.Now().Add(sd.ttl))
		}
		if err := pub(&nats.Msg{Subject: "$KV." + kvstate.BucketPaused + "." + key, Data: p},
			append(expiry, jetstream.WithStallWait(5*time.Second))...); err != nil {
			return fmt.Errorf("seeding paused turn %d: %w", i, err)
		}
		if err := pub(&nats.Msg{Subject: "$KV." + kvstate.BucketThreads + "." + thread, Data: th},
			jetstream.WithStallWait(5*time.Second)); err != nil {
			return fmt.Errorf("seeding thread %d: %w", i, err)
		}
	}
	select {
	case <-sd.js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		return errors.New("seeding: publishes not acknowledged within 2 minutes")
	case <-ctx.Done():
		return ctx.Err()
	}
	if n := sd.errs.Load(); n > 0 {
		return fmt.Errorf("seeding: %d publishes failed, the last: %v", n, sd.last.Load())
	}
	return nil
}

// settle waits until every consumer of stream (the processors' expiry
// watchers) has been delivered everything in it, so seeding's fan-out is
// over before anything is measured. It returns how long that took.
func settle(ctx context.Context, js jetstream.JetStream, stream string) (time.Duration, error) {
	start := time.Now()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	for {
		behind := false
		lister := st.ListConsumers(ctx)
		for ci := range lister.Info() {
			if ci.NumPending > 0 {
				behind = true
			}
		}
		if err := lister.Err(); err != nil {
			return 0, err
		}
		if !behind {
			return time.Since(start), nil
		}
		if time.Since(start) > time.Minute {
			return 0, errors.New("the paused bucket's watchers did not catch up within a minute")
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
