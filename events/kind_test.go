package events

import (
	"reflect"
	"strings"
	"testing"
)

func TestKindBuildsAndDecodesItsOwnType(t *testing.T) {
	e, err := KindTurnFailed.New(SourceProcessor, "id-1", "th", TurnFailed{TurnID: "t1", Reason: "agent_failed"})
	if err != nil {
		t.Fatal(err)
	}
	if TypeOf(e) != TypeTurnFailed || e.ID() != "id-1" || e.Subject() != "th" || e.DataSchema() != DataSchemaBase+string(TypeTurnFailed)+".json" {
		t.Errorf("event: type %s id %s subject %s dataschema %s", e.Type(), e.ID(), e.Subject(), e.DataSchema())
	}
	got, err := KindTurnFailed.Data(e)
	if err != nil || got.TurnID != "t1" || got.Reason != "agent_failed" {
		t.Errorf("Data = %+v, %v", got, err)
	}
	// Another kind refuses it, naming the type.
	if _, err := KindTurnCompleted.Data(e); err == nil || !strings.HasPrefix(err.Error(), "type: ") {
		t.Errorf("KindTurnCompleted.Data(turn.failed) = %v, want a type: error", err)
	}
	fresh, err := KindTurnFailed.New(SourceProcessor, "", "th", TurnFailed{})
	if err != nil || fresh.ID() == "" || fresh.ID() == e.ID() {
		t.Errorf("New with no id: %v, id %q", err, fresh.ID())
	}
	if _, err := (Kind[TurnFailed]{}).New(SourceProcessor, "", "th", TurnFailed{}); err == nil {
		t.Error("the zero Kind built an event")
	}
	if got, ok := KindTurnFailed.Entry(); !ok || got.Payload != reflect.TypeFor[TurnFailed]() {
		t.Errorf("Entry() = %v, %v", got.Payload, ok)
	}
}

func TestSubjectOfFollowsTheEventType(t *testing.T) {
	e, err := KindToolResultReady.New(SourceToolexec, "", "th", ToolResult{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := SubjectOf(e, StreamAgent, "r1"); err != nil || got != ToolResultSubject("r1") {
		t.Errorf("SubjectOf = %s, %v", got, err)
	}
	for _, tc := range []struct {
		stream string
		values []string
		want   string
	}{
		{StreamChat, []string{"th"}, `no route in stream "PARLEY_CHAT"`},
		{StreamAgent, []string{"r.1"}, "run: "},
		{StreamAgent, nil, "0 values for parameters [run]"},
	} {
		if _, err := SubjectOf(e, tc.stream, tc.values...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SubjectOf(%s, %v) = %v, want %q", tc.stream, tc.values, err, tc.want)
		}
	}
	e.SetType("com.example.other")
	if _, err := SubjectOf(e, StreamAgent, "r1"); err == nil || !strings.Contains(err.Error(), "not in the catalogue") {
		t.Errorf("foreign type: %v", err)
	}
}
