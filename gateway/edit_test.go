package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// An answer body's edit given as _meta["dev.parley/arguments"] is
// published with its numbers as written: read as a float64,
// 10000000000000001 would run as 10000000000000000, not what the person
// confirmed.
func TestAnswerBodyMetaEditKeepsNumbers(t *testing.T) {
	const edit = `{"ids":["article-2"],"n":10000000000000001,"z":-0,"f":1.50}`
	body := `{"action":"accept","_meta":{"dev.parley/arguments":` + edit + `}}`
	rec := httptest.NewRecorder()
	req, ok := decodeAnswer(rec, httptest.NewRequest("POST", "/v1/threads/t/elicitations/q1", strings.NewReader(body)))
	if !ok {
		t.Fatalf("decode: %d %s", rec.Code, rec.Body)
	}
	if vs := req.editedArguments(); len(vs) > 0 {
		t.Fatalf("edit refused: %v", vs)
	}
	data, err := json.Marshal(events.ElicitationResponded{ElicitationID: "q1", Action: req.Action, Meta: req.Meta})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := events.EditedArguments(data)
	if !schema.SameArguments(got, json.RawMessage(edit)) || !strings.Contains(string(got), "10000000000000001") {
		t.Errorf("published edit %s, want %s as sent", got, edit)
	}
}
