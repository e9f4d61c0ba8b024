package toolexec

import (
	"context"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// MaxResultBytes bounds one tool result the tool-executor records in
// parley_tool_results and publishes on parley.tool.result.<run>: the JSON
// encoding of its events.ToolResult data, in bytes. It is well under the
// 1 MiB NATS maximum payload and KV value limit, so a large result is
// never refused by the server (which used to be retried and
// dead-lettered). A larger CallToolResult is reduced by boundResult; a
// larger input-required result becomes a tool error. docs/events.md
// ("Limits") says what the model and the user then see.
const MaxResultBytes = 256 << 10

// maxResultMetaBytes bounds the _meta of a reduced result; a larger one
// is left out (with a note).
const maxResultMetaBytes = 16 << 10

// resultReserve is the part of MaxResultBytes kept for the envelope
// (runId, callId, round) and the note of a reduced result.
const resultReserve = 4 << 10

// askForLess ends the note on a reduced result.
const askForLess = "Ask the tool for less (a narrower filter, or its limit and cursor arguments) to see the rest."

// bound returns res within MaxResultBytes (see boundToolResult) and logs
// when it had to reduce it.
func (x *Executor) bound(ctx context.Context, tool string, res events.ToolResult) events.ToolResult {
	out, before := boundToolResult(tool, res)
	if before > 0 {
		x.log.WarnContext(ctx, "tool result over the size limit reduced", "tool", tool, "run_id", res.RunID,
			"bytes", before, "limit", MaxResultBytes)
	}
	return out
}

// boundToolResult returns res if its encoding fits MaxResultBytes, with
// size 0. Otherwise it returns res reduced to fit, and the encoded size it
// had: its CallToolResult reduced by boundResult, or an input-required
// result that does not fit replaced by a tool error naming the size (a
// question that large cannot be shown to anyone).
func boundToolResult(tool string, res events.ToolResult) (events.ToolResult, int) {
	size := encodedSize(res)
	if size <= MaxResultBytes {
		return res, 0
	}
	if res.InputRequired != nil {
		res.InputRequired = nil
		res.Result = schema.ErrorResult(fmt.Sprintf(
			"%s was not run: it asked a question of %d bytes, more than the tool-executor's limit of %d bytes for one result.",
			tool, size, MaxResultBytes))
		return res, size
	}
	if res.Result != nil {
		res.Result = boundResult(res.Result, MaxResultBytes-(size-encodedSize(res.Result)))
	}
	return res, size
}

// boundResult returns r if its JSON encoding fits limit bytes, else a copy
// reduced to fit, which says in a last text block what was left out:
//
//   - _meta over 16 KiB is left out;
//   - structuredContent is left out if it alone does not fit;
//   - non-text blocks (images, audio, resources, links) are kept in order
//     while they fit in the room the text leaves, the others are left out;
//   - text blocks are cut at a character boundary, in order, to what room
//     is left, with a note naming the original size and how to ask for
//     less.
//
// isError is kept. The note block is always present on a reduced result,
// so nothing is left out silently.
func boundResult(r *schema.CallToolResult, limit int) *schema.CallToolResult {
	if r == nil {
		return nil
	}
	size := encodedSize(r)
	if size <= limit {
		return r
	}
	out := &schema.CallToolResult{IsError: r.IsError}
	budget := limit - resultReserve
	note := fmt.Sprintf("[Result reduced by the tool-executor: the tool returned %d bytes, more than the limit of %d bytes for one result.", size, limit)
	if len(r.Meta) > 0 {
		if n := encodedSize(r.Meta); n <= maxResultMetaBytes {
			out.Meta = r.Meta
			budget -= n
		} else {
			note += fmt.Sprintf(" Its _meta (%d bytes) was left out.", n)
		}
	}
	if r.StructuredContent != nil {
		if n := encodedSize(r.StructuredContent); n <= budget {
			out.StructuredContent = r.StructuredContent
			budget -= n
		} else {
			note += fmt.Sprintf(" Its structuredContent (%d bytes) was left out.", n)
		}
	}
	// Text first gets the room it needs up to half of what is left; the
	// other blocks get the rest, then the text the room they leave.
	textBytes := 0
	for _, c := range r.Content {
		if t, ok := c.(*schema.TextContent); ok {
			textBytes += encodedSize(t)
		}
	}
	other := budget - min(textBytes, budget/2)
	keep := map[int]bool{}
	dropped, droppedBytes := 0, 0
	for i, c := range r.Content {
		if _, ok := c.(*schema.TextContent); ok {
			continue
		}
		n := encodedSize(c) + 1
		if n <= other {
			keep[i] = true
			other -= n
			budget -= n
			continue
		}
		dropped++
		droppedBytes += n - 1
	}
	if dropped > 0 {
		note += fmt.Sprintf(" %d content blocks (%d bytes) were left out.", dropped, droppedBytes)
	}
	// Cut the text to what is left; JSON escaping can make the encoding
	// longer than the text, so shrink by a fifth until the whole result fits.
	for room := budget; ; room = room * 4 / 5 {
		out.Content = out.Content[:0]
		left, shown, total := room, 0, 0
		for i, c := range r.Content {
			t, ok := c.(*schema.TextContent)
			if !ok {
				if keep[i] {
					out.Content = append(out.Content, c)
				}
				continue
			}
			total += len(t.Text)
			s := cutUTF8(t.Text, max(left, 0))
			left -= len(s) + 32 // and the block's envelope
			shown += len(s)
			if s == "" && t.Text != "" {
				continue
			}
			b := *t
			b.Text = s
			out.Content = append(out.Content, &b)
		}
		n := note
		if shown < total {
			n += fmt.Sprintf(" The first %d of %d bytes of text are shown.", shown, total)
		}
		n += " " + askForLess + "]"
		out.Content = append(out.Content, schema.Text(n))
		if encodedSize(out) <= limit || room == 0 {
			return out
		}
	}
}

// cutUTF8 returns the longest prefix of s of at most n bytes that ends at
// a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// encodedSize is the length of v's JSON encoding (0 if it has none).
func encodedSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}
