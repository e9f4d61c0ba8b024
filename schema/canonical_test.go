package schema

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCanonicalArguments(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{``, `{}`},
		{`null`, `{}`},
		{` { "b" : 1 , "a" : [ 2 , {"d":true,"c":null} ] } `, `{"a":[2,{"c":null,"d":true}],"b":1}`},
		{`{"n":10000000000000001,"f":1.50}`, `{"f":1.50,"n":10000000000000001}`},
		{`{"html":"<a href='x'>&</a>"}`, `{"html":"<a href='x'>&</a>"}`},
		{`{"u":"\u00e9"}`, `{"u":"é"}`},
	} {
		got, err := CanonicalArguments(json.RawMessage(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("CanonicalArguments(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for in, rule := range map[string]string{
		`[1]`:                               "must be a JSON object",
		`"x"`:                               "must be a JSON object",
		`{"a":1} {"b":2}`:                   "after the JSON value",
		`{"a":`:                             "not valid JSON",
		`{"ids":[1],"ids":[2]}`:             `arguments.ids: duplicate member "ids"`,
		`{"x":{"y":1,"z":[{"y":2}],"y":3}}`: `arguments.x.y: duplicate member "y"`,
	} {
		if _, err := CanonicalArguments(json.RawMessage(in)); err == nil || !strings.Contains(err.Error(), rule) {
			t.Errorf("CanonicalArguments(%s) error %v, want %q", in, err, rule)
		}
	}
	// The same member name in different objects is not a duplicate.
	if _, err := CanonicalArguments(json.RawMessage(`{"a":{"id":1},"b":{"id":2},"id":[{"id":3}]}`)); err != nil {
		t.Errorf("names repeated across objects: %v", err)
	}
	a, _ := ArgumentsSHA256(json.RawMessage(`{"ids":["a","b"],"all":false}`))
	b, _ := ArgumentsSHA256(json.RawMessage("{\n  \"all\": false,\n  \"ids\": [\"a\", \"b\"]\n}"))
	c, _ := ArgumentsSHA256(json.RawMessage(`{"ids":["b","a"],"all":false}`))
	if a != b || a == c || len(a) != 64 {
		t.Errorf("hashes %s %s %s: want equal for one value, different for another", a, b, c)
	}
}
