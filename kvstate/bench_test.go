package kvstate

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// benchPausedTurn is a paused turn as a tool confirmation leaves it: one
// pending confirmation with its policy decision and an agent snapshot of
// about 3 KB.
func benchPausedTurn() *PausedTurn {
	tool := &schema.Tool{Name: "delete_entities", Title: "Delete entities", Description: "Deletes the given entities.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"ids":{"type":"array","items":{"type":"string"}}}}`),
		Annotations: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(false), DestructiveHint: schema.Bool(true)}}
	call := schema.ToolCall{ID: "call_1_0", Name: tool.Name, Arguments: json.RawMessage(`{"ids":["a1","a2","a3"]}`)}
	req := schema.NewConfirmationRequest(tool, call)
	req.Meta[schema.MetaElicitationID] = "0b9c6f7e-3f1a-5d4e-9a51-2b7c8d9e0f12"
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return &PausedTurn{
		Format: PausedFormat, Thread: "thread-42", TurnID: "6f1e2d3c-4b5a-5968-8776-655443322110",
		RunID: "6f1e2d3c-4b5a-5968-8776-655443322110", Agent: "default", CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour),
		Elicitations: []Elicitation{{
			PendingElicitation: events.PendingElicitation{ID: "0b9c6f7e-3f1a-5d4e-9a51-2b7c8d9e0f12",
				Kind: events.KindToolConfirmation, CallID: call.ID, Tool: call.Name, Request: *req,
				Decision: &events.Decision{Decision: events.DecisionConfirm, Policy: "gate", ConfigVersion: "cfg-0123456789ab", Policies: []events.PolicyDecision{{Policy: "gate", Decision: events.DecisionConfirm, ConfigVersion: "cfg-0123456789ab"}}}},
			Status: StatusPending,
		}},
		Snapshot:    json.RawMessage(`{"format":1,"runId":"6f1e2d3c","messages":[{"role":"user","text":"` + strings.Repeat("delete the drafts ", 150) + `"}],"step":1}`),
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
}

func BenchmarkPausedTurnEncode(b *testing.B) {
	p := benchPausedTurn()
	b.ReportAllocs()
	var n int
	for b.Loop() {
		data, err := json.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		n = len(data)
	}
	b.SetBytes(int64(n))
}

func BenchmarkPausedTurnDecode(b *testing.B) {
	data, err := json.Marshal(benchPausedTurn())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var p PausedTurn
		if err := json.Unmarshal(data, &p); err != nil {
			b.Fatal(err)
		}
		if p.Format != PausedFormat || p.Find(p.Elicitations[0].ID) == nil {
			b.Fatal("decoded record is not the one encoded")
		}
	}
}
