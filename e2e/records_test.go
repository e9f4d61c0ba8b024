package e2e

import (
	"encoding/json"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
)

// storedThread is the processor's thread record as the tests read it from
// parley_threads: only the fields they check (the record is the
// processor's own type, workers/processor/thread.go).
type storedThread struct {
	State  string `json:"state"`
	Paused *struct {
		TurnID       string    `json:"turnId"`
		Record       string    `json:"record"`
		ExpiresAt    time.Time `json:"expiresAt"`
		Elicitations []struct {
			ID         string          `json:"id"`
			Status     string          `json:"status"`
			AnsweredBy events.Identity `json:"answeredBy"`
		} `json:"elicitations"`
	} `json:"paused"`
}

// storedThread reads thread's record, decoded as storedThread and as a
// map (to write back changed), with its revision.
func (s *system) storedThread(thread string) (storedThread, map[string]any, uint64) {
	s.t.Helper()
	kv, err := s.bus.JetStream().KeyValue(s.ctx, kvstate.BucketThreads)
	if err != nil {
		s.t.Fatal(err)
	}
	entry, err := kv.Get(s.ctx, thread)
	if err != nil {
		s.t.Fatalf("thread %s not in %s: %v", thread, kvstate.BucketThreads, err)
	}
	var th storedThread
	var raw map[string]any
	if err := json.Unmarshal(entry.Value(), &th); err != nil {
		s.t.Fatal(err)
	}
	if err := json.Unmarshal(entry.Value(), &raw); err != nil {
		s.t.Fatal(err)
	}
	return th, raw, entry.Revision()
}

// pendingOf lists the IDs of th's paused questions still pending.
func pendingOf(th storedThread) []string {
	var ids []string
	if th.Paused != nil {
		for _, el := range th.Paused.Elicitations {
			if el.Status == "pending" {
				ids = append(ids, el.ID)
			}
		}
	}
	return ids
}

// asLegacy rewrites thread's paused turn as a version before the thread
// held it stored it: the thread record without it, and the whole paused
// turn (change may edit it, as a JSON map) a record of its own in
// parley_paused under the thread ID, with the snapshot of its pause
// record. It exercises the adoption of such a pause after an upgrade.
func (s *system) asLegacy(thread string, change func(p map[string]any)) {
	s.t.Helper()
	_, raw, rev := s.storedThread(thread)
	p, ok := raw["paused"].(map[string]any)
	if !ok {
		s.t.Fatalf("thread %s has no paused turn: %v", thread, raw)
	}
	js := s.bus.JetStream()
	pkv, err := js.KeyValue(s.ctx, kvstate.BucketPaused)
	if err != nil {
		s.t.Fatal(err)
	}
	entry, err := pkv.Get(s.ctx, p["record"].(string))
	if err != nil {
		s.t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		s.t.Fatal(err)
	}
	p["format"], p["thread"], p["snapshot"] = 1, thread, rec["snapshot"]
	delete(p, "record")
	if change != nil {
		change(p)
	}
	data, _ := json.Marshal(p)
	if _, err := pkv.Put(s.ctx, thread, data); err != nil {
		s.t.Fatal(err)
	}
	delete(raw, "paused")
	raw["pending"] = pendingIDs(p)
	data, _ = json.Marshal(raw)
	tkv, err := js.KeyValue(s.ctx, kvstate.BucketThreads)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := tkv.Update(s.ctx, thread, data, rev); err != nil {
		s.t.Fatal(err)
	}
}

func pendingIDs(p map[string]any) []string {
	var ids []string
	els, _ := p["elicitations"].([]any)
	for _, e := range els {
		if m, ok := e.(map[string]any); ok && m["status"] == "pending" {
			ids = append(ids, m["id"].(string))
		}
	}
	return ids
}
