package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
)

// The readers of records this processor no longer writes, in one place:
// readThread (the thread store's kvstate.StoreOptions.Decode) and
// decodePause are the only code that reads a stored record.
//
// Removal: a thread record written before PARLEY_INPUT (InputSeqs unset)
// and a paused turn stored as a pause record of its own
// (legacyPauseFormat, Thread.LegacyPending) live at most as long as the
// threads bucket keeps an untouched thread (--thread-ttl) and the pause
// records' TTL. Once every deployment has run this version for that
// long, inputSeqs, adoptLegacy, legacyPause and the legacyPauseFormat
// branch of decodePause can go, with Thread.LegacyPending and
// Thread.InputSeqs.

// readThread decodes the thread record stored under key: an error wrapping
// kvstate.ErrIncompatible when it is not JSON or its format is not
// ThreadFormat; a record of an earlier version is completed (inputSeqs,
// adoptLegacy).
func (p *Processor) readThread(ctx context.Context, key string, data []byte) (*Thread, error) {
	var t Thread
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("decoding thread %s: %w (%w)", key, err, kvstate.ErrIncompatible)
	}
	if t.Format != ThreadFormat {
		return nil, fmt.Errorf("thread %s has format %d, want %d: %w", key, t.Format, ThreadFormat, kvstate.ErrIncompatible)
	}
	inputSeqs(&t)
	if err := p.adoptLegacy(ctx, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// inputSeqs makes t's sequences PARLEY_INPUT's: a record written when
// integrator input was in PARLEY_CHAT has PARLEY_CHAT sequences in
// LastTurnSeq and PauseMark, which do not compare with PARLEY_INPUT's;
// they are read as unset (the order of the thread's messages then comes
// from PARLEY_INPUT alone), and every write marks the record's sequences
// as PARLEY_INPUT's.
func inputSeqs(t *Thread) {
	if t != nil && !t.InputSeqs {
		t.LastTurnSeq, t.PauseMark, t.InputSeqs = 0, 0, true
	}
}

// adoptLegacy completes a thread an earlier version paused: its paused
// turn was a record of its own in kvstate.BucketPaused under the thread
// ID, which becomes t.Paused (written with t's next write). A paused
// thread whose record is gone keeps no paused turn (it expired).
func (p *Processor) adoptLegacy(ctx context.Context, t *Thread) error {
	if t.State != ThreadPaused || t.Paused != nil && t.Paused.TurnID == t.TurnID {
		return nil
	}
	raw, err := p.pauses.store.Load(ctx, t.ID)
	if err != nil && !errors.Is(err, kvstate.ErrNotFound) {
		return fmt.Errorf("reading the paused turn of %s stored by an earlier version: %w", t.ID, err)
	}
	var legacy *legacyPause
	if err == nil {
		_, legacy, _ = decodePause(t.ID, raw)
	}
	if legacy != nil && legacy.TurnID == t.TurnID {
		t.Paused = legacy.pausedTurn()
	} else {
		// The record expired (or is another turn's): the questions the
		// thread named are past their expiry.
		t.Paused = &PausedTurn{TurnID: t.TurnID, RunID: t.RunID, Agent: t.Agent, Record: t.ID}
		for _, id := range t.LegacyPending {
			t.Paused.Elicitations = append(t.Paused.Elicitations,
				Elicitation{PendingElicitation: events.PendingElicitation{ID: id}, Status: StatusPending})
		}
	}
	// The grants its turn's message was sent under (Grants), when the
	// thread still has them; an earlier version's writes drop them, and
	// then those made before the adoption stand for them: a share the
	// thread records after it (in the same write, or later) covers only
	// later messages' questions, never this turn's.
	grants := t.TurnGrants
	if grants == nil {
		n := len(t.Shared)
		grants = &n
	}
	t.Paused.Grants, t.TurnGrants = grants, grants
	t.LegacyPending = nil
	return nil
}

// legacyPause is a pause record of legacyPauseFormat: the whole paused
// turn, its questions' state included.
type legacyPause struct {
	pauseRecord
	Elicitations []Elicitation `json:"elicitations"`
	CreatedAt    time.Time     `json:"createdAt"`
	Agent        string        `json:"agent"`
	TraceParent  string        `json:"traceparent,omitempty"`
	Resumed      bool          `json:"resumed,omitempty"`
	WithdrawnBy  string        `json:"withdrawnBy,omitempty"`
	Withdrawn    []string      `json:"withdrawn,omitempty"`
}

// pausedTurn is the paused turn a legacy record stores.
func (l *legacyPause) pausedTurn() *PausedTurn {
	return &PausedTurn{TurnID: l.TurnID, RunID: l.RunID, Agent: l.Agent, CreatedAt: l.CreatedAt, ExpiresAt: l.ExpiresAt,
		Elicitations: l.Elicitations, TraceParent: l.TraceParent, Resumed: l.Resumed, RunSeq: l.RunSeq,
		WithdrawnBy: l.WithdrawnBy, Withdrawn: l.Withdrawn, Record: l.Thread}
}

// decodePause reads a pause record of either format; kvstate.ErrIncompatible
// for any other. legacy is set for legacyPauseFormat.
func decodePause(key string, raw json.RawMessage) (*pauseRecord, *legacyPause, error) {
	var l legacyPause
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, nil, fmt.Errorf("decoding the pause record %s: %w (%w)", key, err, kvstate.ErrIncompatible)
	}
	switch l.Format {
	case pauseFormat:
		return &l.pauseRecord, nil, nil
	case legacyPauseFormat:
		return &l.pauseRecord, &l, nil
	}
	return nil, nil, fmt.Errorf("the pause record %s has format %d, want %d: %w", key, l.Format, pauseFormat, kvstate.ErrIncompatible)
}
