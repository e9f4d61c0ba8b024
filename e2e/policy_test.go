package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/gate"
)

// Two policy services answer every pre-execute request: the gate asks for
// confirmation of the delete, a compliance gate denies it. The veto wins:
// nobody is asked, nothing is deleted, and turn.completed records both
// policies' answers ("two policy services").
func TestTwoPoliciesVetoWins(t *testing.T) {
	compliance, err := gate.ParseConfig([]byte(`{"agents":{"*":{"tools":{"delete_entities":"deny"},
	  "deny_reasons":{"delete_entities":"deletes need a change ticket"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, options{policies: map[string]*gate.Config{"compliance": compliance}})
	s.send("pol1", deleteDrafts)
	text := s.completed("pol1", 1)
	if !strings.Contains(text, "Execution of delete_entities was denied: deletes need a change ticket") {
		t.Fatalf("completed = %q, want compliance's veto", text)
	}
	if n := s.drafts(); n != 10 || len(s.ledger()) != 0 {
		t.Fatalf("vetoed delete ran: drafts %d, ledger %v", n, s.ledger())
	}
	if n := len(s.rec.matching("pol1", events.TypeElicitationRequested)); n != 0 {
		t.Fatalf("a vetoed call asked the user %d times", n)
	}
	tc, err := events.Data[events.TurnCompleted](s.rec.matching("pol1", events.TypeTurnCompleted)[0])
	if err != nil {
		t.Fatal(err)
	}
	var del *events.DecisionRecord
	for i, d := range tc.Decisions {
		if d.Tool == "delete_entities" {
			del = &tc.Decisions[i]
		}
	}
	if del == nil || del.Decision != events.DecisionVeto || del.Policy != "compliance" {
		t.Fatalf("decisions %+v, want compliance's veto of delete_entities", tc.Decisions)
	}
	got := map[string]string{}
	for _, p := range del.Policies {
		got[p.Policy] = p.Decision
	}
	if len(got) != 2 || got["gate"] != events.DecisionConfirm || got["compliance"] != events.DecisionVeto {
		t.Fatalf("policies %+v, want the gate's confirm and compliance's veto", del.Policies)
	}
}

// The normal confirm flow still deletes, and leaves the decision record
// the tool-executor checked: the confirmed tool and arguments, every
// policy's answer and who confirmed.
func TestConfirmedDeleteLeavesDecisionRecord(t *testing.T) {
	s := start(t, options{})
	s.send("pol2", deleteDrafts)
	id, q := s.question("pol2", 1)
	tc, ok := q.Meta[schema.MetaToolCall].(map[string]any)
	if !ok || tc["name"] != "delete_entities" || !strings.Contains(q.Message, "Delete") {
		t.Fatalf("confirmation %q with %v, want the registry's wording for delete_entities", q.Message, q.Meta[schema.MetaToolCall])
	}
	// The prose restatement shows the same tool and arguments.
	paused, err := events.Data[events.TurnPaused](s.rec.await(t, 10*time.Second, "pol2", events.TypeTurnPaused, 1))
	if err != nil {
		t.Fatal(err)
	}
	shown, _ := json.Marshal(tc["arguments"])
	if !strings.Contains(paused.Message.Text, q.Message) || !strings.Contains(paused.Message.Text, "Tool: delete_entities") ||
		!strings.Contains(paused.Message.Text, "Arguments: "+string(shown)) {
		t.Errorf("prose %q does not restate the confirmation (%q, arguments %s)", paused.Message.Text, q.Message, shown)
	}
	s.answer("pol2", id, schema.ActionAccept, nil)
	s.completed("pol2", 1)
	if n := s.drafts(); n != 0 {
		t.Fatalf("drafts = %d after the confirmed delete, want 0", n)
	}
	_, js := s.srv.JetStream(t)
	kv, err := js.KeyValue(s.ctx, kvstate.BucketDecisions)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	decisions, err := kvstate.OpenDecisions(s.ctx, js, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for k := range keys.Keys() {
		parts := strings.Split(k, ".")
		if len(parts) != 3 {
			t.Fatalf("decision key %q, want <run>.<call>.<round>", k)
		}
		rec, err := decisions.Get(s.ctx, parts[0], parts[1], 0)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Tool != "delete_entities" {
			continue
		}
		found = true
		args, _ := json.Marshal(tc["arguments"])
		if sum, _ := schema.ArgumentsSHA256(args); rec.ArgumentsSHA256 != sum {
			t.Errorf("decision record hashes %s, the confirmed arguments %s hash %s", rec.ArgumentsSHA256, args, sum)
		}
		if rec.Decision != events.DecisionConfirm || rec.ConfirmedBy == nil || rec.ConfirmedBy.Principal == "" ||
			len(rec.Policies) != 1 || rec.Policies[0].Policy != gate.PolicyName {
			t.Errorf("decision record %+v", rec)
		}
	}
	if !found {
		t.Fatal("no decision record for the confirmed delete")
	}
}

// Every policy's answer is on the agent's span, as the event
// parley.pre_execute.decided ("record every policy's
// decision").
func TestPolicyDecisionsOnSpan(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	compliance, err := gate.ParseConfig([]byte(`{"agents":{"*":{"tools":{"delete_entities":"deny"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, options{policies: map[string]*gate.Config{"compliance": compliance}})
	s.send("pol3", deleteDrafts)
	s.completed("pol3", 1)
	// The agent's span ends when its handler returns, which may be after
	// the processor announced the turn's end: wait for it.
	var found bool
	deadline := time.Now().Add(10 * time.Second)
	for !found && time.Now().Before(deadline) {
		found = checkDecidedEvent(t, spans.Ended())
		if !found {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !found {
		t.Fatalf("no parley.pre_execute.decided span event for delete_entities among %d spans", len(spans.Ended()))
	}
}

// checkDecidedEvent reports whether one of spans carries the
// parley.pre_execute.decided event of delete_entities, and checks its
// attributes name both policies' answers and the veto.
func checkDecidedEvent(t *testing.T, spans []sdktrace.ReadOnlySpan) bool {
	t.Helper()
	for _, sp := range spans {
		for _, ev := range sp.Events() {
			if ev.Name != "parley.pre_execute.decided" {
				continue
			}
			attrs := map[string]string{}
			for _, kv := range ev.Attributes {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			if attrs["parley.tool.name"] != "delete_entities" {
				continue
			}
			if attrs["parley.policy.decision"] != events.DecisionVeto ||
				!strings.Contains(attrs["parley.policy.names"], "gate") || !strings.Contains(attrs["parley.policy.names"], "compliance") ||
				!strings.Contains(attrs["parley.policy.decisions"], "confirm") || !strings.Contains(attrs["parley.policy.decisions"], "veto") {
				t.Errorf("span event attributes %v, want both policies' answers and the veto", attrs)
			}
			return true
		}
	}
	return false
}
