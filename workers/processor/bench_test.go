package processor

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// benchPausedThread is a thread paused on a tool confirmation, as the
// record every answer reads and writes: one pending confirmation with its
// policy decision, and a history of ten messages (about 3 KB).
func benchPausedThread() *Thread {
	tool := &schema.Tool{Name: "delete_entities", Title: "Delete entities", Description: "Deletes the given entities.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"ids":{"type":"array","items":{"type":"string"}}}}`),
		Annotations: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(false), DestructiveHint: schema.Bool(true)}}
	call := schema.ToolCall{ID: "call_1_0", Name: tool.Name, Arguments: json.RawMessage(`{"ids":["a1","a2","a3"]}`)}
	req := schema.NewConfirmationRequest(tool, call)
	req.Meta[schema.MetaElicitationID] = "0b9c6f7e-3f1a-5d4e-9a51-2b7c8d9e0f12"
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	turn := "6f1e2d3c-4b5a-5968-8776-655443322110"
	t := &Thread{Format: ThreadFormat, ID: "thread-42", State: ThreadPaused, Agent: "default", TurnID: turn, RunID: turn,
		RunSeq: 812, PauseMark: 411, InputSeqs: true, LastTurnSeq: 411, UpdatedAt: now,
		Owner: &events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "ann"},
		Paused: &PausedTurn{TurnID: turn, RunID: turn, Agent: "default", CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour),
			RunSeq: 812, Record: pauseKey("thread-42", 812),
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			Elicitations: []Elicitation{{
				PendingElicitation: events.PendingElicitation{ID: "0b9c6f7e-3f1a-5d4e-9a51-2b7c8d9e0f12",
					Kind: events.KindToolConfirmation, CallID: call.ID, Tool: call.Name, Request: *req,
					Decision: &events.Decision{Decision: events.DecisionConfirm, Policy: "gate", ConfigVersion: "cfg-0123456789ab",
						Policies: []events.PolicyDecision{{Policy: "gate", Decision: events.DecisionConfirm, ConfigVersion: "cfg-0123456789ab"}}}},
				Status: StatusPending,
			}}}}
	for i := range 10 {
		t.Append(schema.ChatMessage{Role: schema.RoleUser, Text: strings.Repeat("delete the drafts ", 15) + string(rune('a'+i))})
		t.MarkHandled(events.DerivedID("m", string(rune('a'+i))))
	}
	return t
}

func BenchmarkPausedThreadEncode(b *testing.B) {
	t := benchPausedThread()
	b.ReportAllocs()
	var n int
	for b.Loop() {
		data, err := json.Marshal(t)
		if err != nil {
			b.Fatal(err)
		}
		n = len(data)
	}
	b.SetBytes(int64(n))
}

func BenchmarkPausedThreadDecode(b *testing.B) {
	data, err := json.Marshal(benchPausedThread())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var t Thread
		if err := json.Unmarshal(data, &t); err != nil {
			b.Fatal(err)
		}
		if t.Format != ThreadFormat || t.Paused.Find(t.Paused.Elicitations[0].ID) == nil {
			b.Fatal("decoded record is not the one encoded")
		}
	}
}
