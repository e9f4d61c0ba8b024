package builtin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// ledgerRecord is the value under "ledger.<callID>": the effect a tool call
// planned, the result it returned, and whether the effect was applied.
type ledgerRecord struct {
	CallID string    `json:"call_id"`
	RunID  string    `json:"run_id,omitempty"`
	Tool   string    `json:"tool"`
	IDs    []string  `json:"ids"`
	At     time.Time `json:"at"`
	Round  int       `json:"round"`
	// Fingerprint is the hex SHA-256 of the call's tool, arguments and
	// input responses: a different call under the same ID is refused.
	Fingerprint string `json:"fingerprint"`
	// Event is the entity create_event creates.
	Event *Entity `json:"event,omitempty"`
	// Result is returned to every execution of the call.
	Result *schema.CallToolResult `json:"result"`
	// Applied is set once the effect was fully applied; until then a
	// re-execution applies it again (idempotently).
	Applied bool `json:"applied"`
}

// callKey is the identity of a tool call across executions.
func callKey(req Request) string {
	if req.RunID == "" {
		return ledgerKey(req.CallID)
	}
	sum := sha256.Sum256([]byte(req.RunID + "\x00" + req.CallID))
	return ledgerPrefix + "r." + hex.EncodeToString(sum[:])
}

// callSeed is what IDs derived from the call (create_event's entity ID) hash.
func callSeed(req Request) string {
	if req.RunID == "" {
		return req.CallID
	}
	return req.RunID + "\x00" + req.CallID
}

func fingerprint(tool string, req Request) string {
	h := sha256.New()
	h.Write([]byte(tool))
	h.Write([]byte{0})
	var args bytes.Buffer
	if json.Compact(&args, req.Arguments) == nil {
		h.Write(args.Bytes())
	} else {
		h.Write(req.Arguments)
	}
	h.Write([]byte{0})
	// Only action and content of the answers: _meta may be re-stamped.
	answers := make(map[string]any, len(req.InputResponses))
	for k, r := range req.InputResponses {
		answers[k] = map[string]any{"action": r.Action, "content": r.Content}
	}
	resp, _ := json.Marshal(answers) // map keys sorted: deterministic
	h.Write(resp)
	return hex.EncodeToString(h.Sum(nil))
}

// planFunc decides a call's effect without applying it: it returns the
// record to store (IDs, Event, Result filled in), or a tool failure that
// has no effect and is not recorded.
type planFunc func(ctx context.Context) (*ledgerRecord, *Result, error)

// applyFunc applies a recorded effect idempotently: applying it twice
// changes nothing the first time did not.
type applyFunc func(ctx context.Context, rec *ledgerRecord) error

// once runs a mutating tool call exactly once per call identity. The first
// execution plans the effect and records it with Store.Create (first writer
// wins), then applies it and marks the record applied. Any later execution,
// or a concurrent one that lost the Create, finds the record, re-applies it
// idempotently if it was not marked applied, and returns the stored result.
func (s *Site) once(ctx context.Context, tool string, req Request, plan planFunc, apply applyFunc) (Result, error) {
	if req.CallID == "" {
		return errorResult("%s needs a tool call ID to run exactly once; none was given", tool), nil
	}
	key := callKey(req)
	fp := fingerprint(tool, req)
	for attempt := 0; ; attempt++ {
		cur, rev, err := s.ledger.Get(ctx, key)
		if err == nil {
			return s.replay(ctx, tool, fp, key, cur, rev, apply)
		}
		if !errors.Is(err, kvstate.ErrNotFound) {
			return Result{}, fmt.Errorf("reading ledger %s: %w", key, err)
		}
		rec, fail, err := plan(ctx)
		if err != nil || fail != nil {
			// The plan may have read the site after a concurrent execution
			// of this call recorded and applied its effect (its records
			// gone, its entity already there): a record now in the ledger
			// wins, and this execution replays it instead of reporting the
			// effect it could not plan. A record is created before its
			// effect is applied, so a plan that saw the effect finds it.
			if cur, rev, gerr := s.ledger.Get(ctx, key); gerr == nil {
				return s.replay(ctx, tool, fp, key, cur, rev, apply)
			}
			if err != nil {
				return Result{}, err
			}
			return *fail, nil
		}
		rec.CallID, rec.RunID, rec.Tool, rec.Round, rec.Fingerprint = req.CallID, req.RunID, tool, req.Round, fp
		rec.At = s.now()
		if rec.Result, err = normalize(rec.Result); err != nil {
			return Result{}, err
		}
		rev, err = s.ledger.Create(ctx, key, rec)
		if errors.Is(err, kvstate.ErrConflict) && attempt < 3 {
			continue // a concurrent execution recorded first: replay its record
		}
		if err != nil {
			return Result{}, fmt.Errorf("recording ledger %s: %w", key, err)
		}
		if err := s.applyAndMark(ctx, key, rec, rev, apply); err != nil {
			return Result{}, err
		}
		return callResult(rec.Result), nil
	}
}

// replay returns the result recorded in rec (at rev under key), applying
// its effect first when no execution marked it applied.
func (s *Site) replay(ctx context.Context, tool, fp, key string, rec *ledgerRecord, rev uint64, apply applyFunc) (Result, error) {
	if rec.Tool != tool || rec.Fingerprint != fp {
		return errorResult("tool call ID %q was already used for a different %s call; nothing was done",
			rec.CallID, rec.Tool), nil
	}
	if !rec.Applied {
		if err := s.applyAndMark(ctx, key, rec, rev, apply); err != nil {
			return Result{}, err
		}
	}
	if rec.Result == nil {
		return Result{}, fmt.Errorf("ledger %s has no result", key)
	}
	return callResult(rec.Result), nil
}

// applyAndMark applies rec's effect and marks the record (at rev under
// key) applied; a concurrent execution marking it first changes nothing.
func (s *Site) applyAndMark(ctx context.Context, key string, rec *ledgerRecord, rev uint64, apply applyFunc) error {
	if err := apply(ctx, rec); err != nil {
		return fmt.Errorf("applying %s of call %s: %w", rec.Tool, rec.CallID, err)
	}
	done := *rec
	_, _, err := s.ledger.MutateFrom(ctx, key, &done, rev, false, func(r *ledgerRecord) error {
		if r.Applied {
			return kvstate.ErrNoChange
		}
		r.Applied = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("marking ledger %s applied: %w", key, err)
	}
	return nil
}
