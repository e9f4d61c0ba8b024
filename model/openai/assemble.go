package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	oai "github.com/openai/openai-go/v3"

	"github.com/parley-dev/parley/schema"
)

// Streamed tool calls are assembled the way robust clients do, because
// OpenAI-compatible servers differ from the API reference in ways seen in
// the wild: some repeat the whole function name (or a growing prefix of
// it) in every delta, some leave out "index", some give parallel calls the
// same index with different ids, some reuse one id at distinct indexes.
// openai-go's ChatCompletionAccumulator keys calls by index alone and
// appends every name fragment, which merges such calls into one
// ("list_entitiesget_entity" with both argument objects glued together),
// so parley does not use it. The rules, per tool-call delta:
//
//   - a delta with an id not seen before starts a new call, whatever its
//     index — unless the call last opened at its index (without an
//     index: the call last opened) is unfinished (its arguments are not
//     yet whole JSON) and the delta names no tool, or names that call's
//     tool again after some of its arguments: then it continues that
//     call, which keeps its first id (servers that change the id on
//     every delta);
//   - a delta with an id seen before continues that call (the call
//     opened last with it), unless it names
//     another index than that call's (an id reused by a parallel call):
//     then the call at its index, or a new one;
//   - a delta without an id continues the call last opened at its index,
//     or without an index the call last opened;
//   - a name delta that equals the name held, or is a prefix of it, is not
//     appended; one that extends it (the whole name so far and more)
//     replaces it; other fragments are appended — unless the name held is
//     already a whole offered tool name and the result would not be the
//     start of one: then the delta starts a new call (parallel calls
//     sharing an index without ids). Names come before arguments: once
//     a call's arguments are whole JSON, a delta naming another tool
//     (even one whose name starts with the held one) starts a new call,
//     and so does one naming the same tool with arguments that open
//     another JSON object (the same tool called twice without ids, or
//     with one id reused) — a repeat of the whole call, or cumulative
//     arguments, is not a new call;
//   - arguments concatenate per call; when the concatenation is not JSON
//     but reading each fragment that repeats everything before it as a
//     replacement is (servers that send cumulative arguments), that is
//     used.
//
// Arguments sent as a JSON object rather than a string (llama.cpp's
// server, Ollama and others have done so) reach the assembler as that
// object's JSON text: openai-go's decoder hands a string field the raw
// JSON of an object. A legacy "function_call" delta (servers answering in
// the format that preceded tool calls, finish_reason "function_call") is a
// tool-call delta without id or index: it continues the call last opened.
//
// What still cannot be read — arguments for a call the stream never
// opened, a call without a name, arguments that are not a JSON object
// (an object encoded twice, as a JSON string holding it, is unwrapped;
// empty or null arguments are {}) — is reported
// (model.Response.ToolCallsError), never run and never merged.

// functionCall returns a legacy function_call delta as a tool-call delta
// (no id, no index).
func functionCall(f oai.ChatCompletionChunkChoiceDeltaFunctionCall) oai.ChatCompletionChunkChoiceDeltaToolCall {
	var d oai.ChatCompletionChunkChoiceDeltaToolCall
	d.Function.Name, d.Function.Arguments = f.Name, f.Arguments
	return d
}

// toolCall is a tool call being assembled from stream chunks.
type toolCall struct {
	id, name string
	// index is the index the call was opened at (hasIndex false: none).
	index    int64
	hasIndex bool
	// args are the argument fragments concatenated; cumulative reads a
	// fragment that starts with everything before it as a replacement.
	args, cumulative []byte
	// orphan: arguments arrived for a call the stream never opened with
	// an id or a name.
	orphan bool
}

// assembler assembles the tool calls of one streamed answer (choice 0).
type assembler struct {
	names   nameMap
	calls   []*toolCall
	byID    map[string]*toolCall
	byIndex map[int64]*toolCall
	last    *toolCall
}

func newAssembler(names nameMap) *assembler {
	return &assembler{names: names, byID: map[string]*toolCall{}, byIndex: map[int64]*toolCall{}}
}

// open starts a new call for d.
func (a *assembler) open(d oai.ChatCompletionChunkChoiceDeltaToolCall) *toolCall {
	c := &toolCall{id: d.ID, index: d.Index, hasIndex: d.JSON.Index.Valid()}
	a.calls = append(a.calls, c)
	if c.id != "" {
		// An id reused by a later call names that call from now on.
		a.byID[c.id] = c
	}
	return c
}

// add takes one tool-call delta.
func (a *assembler) add(d oai.ChatCompletionChunkChoiceDeltaToolCall) {
	hasIndex := d.JSON.Index.Valid()
	var c *toolCall
	switch {
	case d.ID != "" && a.byID[d.ID] != nil:
		c = a.byID[d.ID]
		if hasIndex && c.hasIndex && c.index != d.Index {
			// The same id at another index: a parallel call reusing it.
			c = a.byIndex[d.Index]
		}
	case d.ID != "":
		if c = a.renamed(d, hasIndex); c != nil {
			a.byID[d.ID] = c // later deltas may repeat the new id
		} else {
			c = a.open(d)
		}
	case hasIndex:
		c = a.byIndex[d.Index]
	default:
		c = a.last
	}
	name, args := d.Function.Name, d.Function.Arguments
	if c == nil {
		if name == "" && args == "" {
			return // nothing to hold
		}
		c = a.open(d)
		c.orphan = name == ""
	}
	if name != "" {
		merged, fresh := a.mergeName(c.name, name)
		if !fresh && c.name != "" && c.complete() && (merged != c.name || startsCall(args, c.cumulative)) {
			// A name arrives before its call's arguments: after whole
			// arguments, another name (even one the held name begins),
			// or the same name with other arguments, is another call
			// at this index (or without one) — servers that share an
			// index, or reuse one id, for parallel calls.
			merged, fresh = name, true
		}
		if fresh {
			c = a.open(d)
		}
		c.name, c.orphan = merged, false
	}
	if args != "" {
		if len(c.args) > 0 && strings.HasPrefix(args, string(c.cumulative)) {
			c.cumulative = []byte(args)
		} else {
			c.cumulative = append(c.cumulative, args...)
		}
		c.args = append(c.args, args...)
	}
	if hasIndex {
		a.byIndex[d.Index] = c
	}
	a.last = c
}

// renamed returns the call a delta with an id not seen before continues
// (nil: the delta starts a new call). Some servers give one call a new id
// on every delta: such a delta continues the call last opened at its index
// (without an index, the call last opened) while that call's arguments are
// not yet whole JSON, when it names no tool, or names the call's tool again
// after some of its arguments. A call keeps the id it was opened with.
func (a *assembler) renamed(d oai.ChatCompletionChunkChoiceDeltaToolCall, hasIndex bool) *toolCall {
	c := a.last
	if hasIndex {
		c = a.byIndex[d.Index]
	}
	if c == nil || c.orphan || c.name == "" || c.complete() || c.hasIndex != hasIndex {
		return nil
	}
	if n := d.Function.Name; n != "" && (len(c.args) == 0 || !strings.HasPrefix(n, c.name) && !strings.HasPrefix(c.name, n)) {
		// Another tool, or the same tool again after a call that has
		// no arguments yet (parallel calls of a tool without parameters).
		return nil
	}
	return c
}

// complete reports whether the call holds arguments that are whole JSON
// (read as fragments or cumulatively).
func (c *toolCall) complete() bool {
	return len(strings.TrimSpace(string(c.args))) > 0 && (json.Valid(c.args) || json.Valid(c.cumulative))
}

// startsCall reports whether args, arriving with a repeated name for a
// call whose arguments are whole, are the start of another call's
// arguments: they open a JSON object and do not repeat the arguments held
// (a server repeating the whole call, or sending arguments cumulatively,
// repeats them).
func startsCall(args string, held []byte) bool {
	return strings.HasPrefix(strings.TrimSpace(args), "{") && !strings.HasPrefix(args, string(held))
}

// mergeName returns the name a call holding held has after a name delta
// d, and whether d starts a new call instead (then the name is d). See the
// rules above; where both readings are possible the one that is, or
// begins, an offered name wins, and otherwise a repeat is not appended.
func (a *assembler) mergeName(held, d string) (name string, fresh bool) {
	if held == "" {
		return d, false
	}
	appended := held + d
	var other string
	switch {
	case strings.HasPrefix(d, held):
		other = d // the whole name again, or a longer prefix of it
	case strings.HasPrefix(held, d):
		other = held // a prefix already held
	default:
		if a.offered(held) && !a.offeredPrefix(appended) {
			return d, true
		}
		return appended, false
	}
	if !a.offered(other) && !a.offeredPrefix(other) && a.offeredPrefix(appended) {
		return appended, false
	}
	return other, false
}

// offered reports whether name is an API name offered to the model.
func (a *assembler) offered(name string) bool {
	_, ok := a.names[name]
	return ok
}

// offeredPrefix reports whether an offered API name starts with s.
func (a *assembler) offeredPrefix(s string) bool {
	for n := range a.names {
		if strings.HasPrefix(n, s) {
			return true
		}
	}
	return false
}

// result returns the calls with parley's tool names, in the order the
// stream opened them, and what makes them unreadable ("" when nothing).
// A call without a name is left out (it cannot be shown to the model as
// a call); an unreadable call's arguments are kept as a JSON string.
func (a *assembler) result() ([]schema.ToolCall, string) {
	var out []schema.ToolCall
	var problems []string
	for i, c := range a.calls {
		what := describe(i, c)
		switch {
		case c.orphan:
			problems = append(problems, what+": arguments arrived for a call the stream never opened with an id or a name")
			continue
		case c.name == "":
			problems = append(problems, what+": the call has no name")
			continue
		}
		args, err := arguments(c.args, c.cumulative)
		if err != nil {
			if errors.Is(err, errNotObject) {
				problems = append(problems, what+": the arguments are JSON but not a JSON object")
			} else {
				problems = append(problems, fmt.Sprintf("%s: the arguments are not valid JSON (%v)", what, err))
			}
		}
		out = append(out, schema.ToolCall{ID: c.id, Name: a.names.parley(c.name), Arguments: args})
	}
	return out, strings.Join(problems, "; ")
}

// describe names call i (from 0) of the stream for an error: its name, id
// and index as far as the stream gave them.
func describe(i int, c *toolCall) string {
	s := fmt.Sprintf("tool call %d", i+1)
	var parts []string
	if c.name != "" {
		parts = append(parts, c.name)
	}
	if c.id != "" {
		parts = append(parts, "id "+c.id)
	}
	if c.hasIndex {
		parts = append(parts, fmt.Sprintf("index %d", c.index))
	}
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// arguments returns a call's arguments as a JSON object: {} when empty
// or null, the concatenated fragments when they are an object, else the
// cumulative reading when it is; an object encoded twice (a JSON string
// holding it, as some servers send) is unwrapped. Otherwise it returns the
// fragments as a JSON string (so they stay readable in the conversation)
// and what is wrong: not JSON, or JSON but not an object (MCP tools take
// an object).
func arguments(concat, cumulative []byte) (json.RawMessage, error) {
	for _, raw := range [][]byte{concat, cumulative} {
		if obj, ok := object(raw); ok {
			return obj, nil
		}
	}
	s, _ := json.Marshal(string(concat))
	var v any
	if err := json.Unmarshal(concat, &v); err != nil {
		return s, err
	}
	return s, errNotObject
}

// errNotObject: a call's arguments are JSON but not an object.
var errNotObject = errors.New("not a JSON object")

// object returns raw as a JSON object when it is one, empty or null ({}),
// or a JSON string holding one of those.
func object(raw []byte) (json.RawMessage, bool) {
	t := bytes.TrimSpace(raw)
	switch {
	case len(t) == 0 || string(t) == "null":
		return json.RawMessage(`{}`), true
	case t[0] == '{' && json.Valid(t):
		return json.RawMessage(t), true
	case t[0] == '"':
		var inner string
		if json.Unmarshal(t, &inner) == nil && !strings.HasPrefix(strings.TrimSpace(inner), `"`) {
			return object([]byte(inner))
		}
	}
	return nil, false
}
