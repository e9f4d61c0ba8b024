package schema

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestCheckJSON(t *testing.T) {
	many := func(dupAt int) string { // an object of 40 members, "k<dupAt>" repeated last
		var b strings.Builder
		b.WriteString("{")
		for i := range 40 {
			b.WriteString(`"k` + strconv.Itoa(i) + `":1,`)
		}
		b.WriteString(`"k` + strconv.Itoa(dupAt) + `":2}`)
		return b.String()
	}
	tests := []struct {
		name, in   string
		path, rule string // rule: a substring; "" path and rule: valid
	}{
		{name: "plain", in: `{"action":"accept","content":{"a":"b","c":[1,2,{"d":null}]}}`},
		{name: "same name in sibling objects", in: `{"a":{"x":1},"b":{"x":2},"c":[{"x":1},{"x":2}]}`},
		{name: "escapes and unicode", in: `{"t":"caf\u00e9 \ud83d\ude00 \"q\" \\ é 😀","\u0062":1}`},
		{name: "scalars", in: `"x"`},
		{name: "empty", in: `{}`},
		{name: "top-level duplicate", in: `{"action":"decline","action":"accept"}`, path: "action", rule: `duplicate member "action"`},
		{name: "nested duplicate", in: `{"content":{"name":"a","name":"b"}}`, path: "content.name", rule: `duplicate member "name"`},
		{name: "in an array", in: `{"share":[{"principal":"a"},{"principal":"b","principal":"c"}]}`, path: "share[1].principal", rule: "duplicate member"},
		{name: "escaped duplicate", in: `{"action":"decline","\u0061ction":"accept"}`, path: "action", rule: `duplicate member "action"`},
		{name: "duplicate past 16 members", in: many(3), path: "k3", rule: `duplicate member "k3"`},
		{name: "duplicate of the 30th member", in: many(30), path: "k30", rule: `duplicate member "k30"`},
		{name: "40 members", in: strings.Replace(many(3), `"k3":2}`, `"z":2}`, 1)},
		{name: "invalid UTF-8", in: "{\"message\":{\"text\":\"ab\xffc\"}}", path: "message.text", rule: "invalid UTF-8 in a string (byte 0xFF at offset 2)"},
		{name: "truncated UTF-8", in: "{\"t\":\"\xe2\x82\"}", path: "t", rule: "invalid UTF-8"},
		{name: "overlong encoding", in: "{\"t\":\"\xc0\xaf\"}", path: "t", rule: "invalid UTF-8"},
		{name: "invalid UTF-8 in a name", in: "{\"a\xff\":1}", path: "", rule: "invalid UTF-8"},
		{name: "lone high surrogate", in: `{"t":"x\ud800y"}`, path: "t", rule: `\uD800 is half of a surrogate pair`},
		{name: "lone low surrogate", in: `{"t":"\udc00"}`, path: "t", rule: `\uDC00 is half`},
		{name: "high surrogate then a letter escape", in: `{"t":"\ud800\u0041"}`, path: "t", rule: "surrogate"},
		{name: "array element", in: "[\"ok\",\"\xff\"]", path: "[1]", rule: "invalid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckJSON([]byte(tt.in))
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("CheckJSON(%s) = %v, want nil", tt.in, err)
				}
				return
			}
			vs := Violations(err)
			if len(vs) != 1 || vs[0].Path != tt.path || !strings.Contains(vs[0].Rule, tt.rule) {
				t.Fatalf("CheckJSON(%s) = %v, want path %q, rule containing %q", tt.in, err, tt.path, tt.rule)
			}
		})
	}
}

// CheckJSON never fails JSON without duplicate names and invalid strings,
// and never panics on anything.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[true,null,"x"]}`, `{"a":{"a":{"a":1}}}`, `"\ud83d\ude00"`, `[1,2`, `{"a"`, `{"a":"\u12`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := CheckJSON(data)
		var v any
		if json.Unmarshal(data, &v) != nil || err == nil {
			return
		}
		// Refused: it must hold a duplicate name or an invalid string.
		rule := Violations(err)[0].Rule
		if !strings.Contains(rule, "duplicate member") && !strings.Contains(rule, "invalid UTF") && !strings.Contains(rule, "nested deeper") {
			t.Fatalf("CheckJSON(%q) = %v on JSON encoding/json reads", data, err)
		}
		// A re-encoding of what encoding/json read has neither.
		clean, _ := json.Marshal(v)
		if err := CheckJSON(clean); err != nil {
			t.Fatalf("CheckJSON(%s) = %v on encoding/json's own output", clean, err)
		}
	})
}

// BenchmarkCheckJSON measures the check on an answer-sized and a
// message-sized event data.
func BenchmarkCheckJSON(b *testing.B) {
	answer := []byte(`{"elicitationId":"0191d5b8-7c1e-7b3e-9a55-3f1f2f0c9e11","action":"accept","content":{"title":"Team lunch","date":"2026-12-03","attendees":12,"vegan":true},"answeredBy":"ann@example.com"}`)
	msg, _ := json.Marshal(map[string]any{"agent": "default", "message": map[string]any{"role": "user",
		"text": strings.Repeat("Plan the launch event for the new café — “quoted” text. ", 60)}, "user": "ann"})
	for _, c := range []struct {
		name string
		data []byte
	}{{"answer", answer}, {"message", msg}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := CheckJSON(c.data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/unmarshal", func(b *testing.B) { // for scale: what decoding costs anyway
			b.SetBytes(int64(len(c.data)))
			b.ReportAllocs()
			for b.Loop() {
				var v map[string]any
				if err := json.Unmarshal(c.data, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
