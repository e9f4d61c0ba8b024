package agent

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// Size limits of the agent. Every value that grows with data has one, and
// docs/events.md ("Limits") says what happens at each. Sizes are bytes of
// the JSON encoding unless said otherwise.
const (
	// MaxResultTextBytes bounds the text of one tool result the model
	// reads (UTF-8 bytes). Longer text is cut at a character boundary and
	// ends with a note saying how much was cut and how to ask for less.
	MaxResultTextBytes = 16 << 10
	// MaxInlineResultBytes bounds one tool result kept in the run record.
	// A larger result is stored whole in the object store ResultsBucket
	// and the run keeps a reduced copy: the cut text, the content blocks
	// meant for the user that fit, structuredContent if it fits, and a
	// reference (_meta MetaResultRef).
	MaxInlineResultBytes = 32 << 10
	// MaxRunBytes bounds the run record (the checkpoint in parley_runs and
	// the snapshot of a paused run) together with its pending forms and
	// the tool calls it ran (Run.Effects), which run.paused carries twice. Above it the oldest tool results are
	// shortened, then the oldest thread history is dropped; a run still
	// above it fails with reason RejectRunTooLarge instead of being
	// written (no dead letter).
	MaxRunBytes = 640 << 10
	// MaxUserBlocksBytes bounds the tool content blocks a final message
	// carries to the user (audience "user", resource links); blocks beyond
	// it are left out and the message says how many.
	MaxUserBlocksBytes = 64 << 10
	// shortenedToolText is what an old tool result is cut to when the run
	// record is over MaxRunBytes.
	shortenedToolText = 1 << 10
)

// RejectRunTooLarge is the run.failed reason of a run whose record cannot
// be brought under MaxRunBytes.
const RejectRunTooLarge = "run_too_large"

// ResultsBucket is the JetStream object store holding tool results larger
// than MaxInlineResultBytes, by name "<runId>.<callId>.<round>.<digest>"
// (digest: the first 8 bytes of the result's SHA-256, hex), kept as long
// as run records (Options.RunTTL). The digest in the name keeps two
// different results of one call apart: a read-only call redelivered to
// the tool-executor runs again, and two agents applying its two results
// at once must not overwrite the object the winning run record points at.
const ResultsBucket = "parley_results"

// MetaResultRef is the _meta key of a reduced tool result in a run record,
// pointing at the whole result: ResultRef.
const MetaResultRef = "drupal.org/parley.result_ref"

// ResultRef points at a whole tool result stored in ResultsBucket.
type ResultRef struct {
	// Bucket is the object store, ResultsBucket.
	Bucket string `json:"bucket"`
	// Name is the object name, "<runId>.<callId>.<round>.<digest>"
	// (see ResultsBucket).
	Name string `json:"name"`
	// Size is the whole result's encoded size in bytes.
	Size int `json:"size"`
	// Digest is "SHA-256=" and the base64url SHA-256 of the encoding (the
	// object store's own digest form).
	Digest string `json:"digest"`
}

// openResults creates the result object store, or opens it when it exists
// and updates it when its TTL or replicas differ — create before update,
// retried under ctx's start-up policy (bus.WithStartupPolicy) like every
// stream and bucket, so replicas starting at once on a fresh cluster do not
// race a create-or-update.
func openResults(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int, ttl time.Duration) (jetstream.ObjectStore, error) {
	cfg := jetstream.ObjectStoreConfig{Bucket: ResultsBucket, TTL: ttl, Storage: storage, Replicas: max(replicas, 1),
		Description: "parley tool results too large for a run record"}
	var store jetstream.ObjectStore
	err := bus.Retry(ctx, "ensuring object store "+ResultsBucket, bus.StartupPolicy(ctx, bus.RetryPolicy{}), func(ctx context.Context) error {
		var err error
		if store, err = js.CreateObjectStore(ctx, cfg); err == nil || !errors.Is(err, jetstream.ErrBucketExists) {
			return err
		}
		if store, err = js.ObjectStore(ctx, ResultsBucket); err != nil {
			return bus.NotVisibleYet(err)
		}
		st, err := store.Status(ctx)
		if err != nil {
			return bus.NotVisibleYet(err)
		}
		if st.TTL() == cfg.TTL && st.Replicas() == cfg.Replicas {
			return nil
		}
		store, err = js.UpdateObjectStore(ctx, cfg)
		return bus.RefusedUpdate(err)
	})
	if err != nil {
		return nil, fmt.Errorf("ensuring object store %s: %w", ResultsBucket, err)
	}
	return store, nil
}

// admitResult returns r as the run record keeps it: r itself when its
// encoding fits MaxInlineResultBytes; otherwise r is stored whole in
// ResultsBucket and a reduced copy pointing at it is returned. The error
// is a failure of the object store, worth retrying.
func (a *Agent) admitResult(ctx context.Context, run *Run, c *CallState, r *schema.CallToolResult) (*schema.CallToolResult, error) {
	if r == nil {
		return nil, nil
	}
	if _, ok := r.Meta[MetaResultRef]; ok {
		// The agent alone writes a result reference (below): one a tool
		// (an MCP server) returned would have the model read whichever
		// stored result it names as this call's.
		a.log.WarnContext(ctx, "tool result carried a result reference, which only the agent writes; dropped",
			"tool", c.Call.Name, "run_id", run.RunID)
		cp := *r
		cp.Meta = r.Meta.Clone()
		delete(cp.Meta, MetaResultRef)
		r = &cp
	}
	b, err := json.Marshal(r)
	if err != nil {
		return schema.ErrorResult(fmt.Sprintf("%s returned a result that cannot be encoded: %v", c.Call.Name, err)), nil
	}
	if len(b) <= MaxInlineResultBytes {
		return r, nil
	}
	sum := sha256.Sum256(b)
	name := fmt.Sprintf("%s.%s.%d.%x", run.RunID, c.Call.ID, c.Round, sum[:8])
	// Bounded like a request (a lost reply fails the call, not hangs it),
	// allowing for the chunks of a large result.
	pctx, cancel := context.WithTimeout(ctx, 4*bus.RequestTimeout)
	defer cancel()
	if _, err := a.results.PutBytes(pctx, name, b); err != nil {
		return nil, fmt.Errorf("storing the large result of %s: %w", c.Call.Name, err)
	}
	ref := &ResultRef{Bucket: ResultsBucket, Name: name, Size: len(b),
		Digest: "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])}
	a.log.InfoContext(ctx, "tool result stored by reference", "tool", c.Call.Name, "run_id", run.RunID,
		"bytes", len(b), "object", name)
	return reduceResult(r, len(b), ref), nil
}

// reduceResult is the copy of a large result kept in the run record: one
// text block (the result's text cut to MaxResultTextBytes, with a note),
// the blocks meant for the user that fit in MaxInlineResultBytes,
// structuredContent if it fits in a quarter of that, and the reference.
func reduceResult(r *schema.CallToolResult, size int, ref *ResultRef) *schema.CallToolResult {
	text := model.ResultText(r)
	note := fmt.Sprintf("[The whole result is %d bytes; it was stored as %s/%s and only part of it is shown here.]",
		size, ref.Bucket, ref.Name)
	out := &schema.CallToolResult{IsError: r.IsError, Meta: schema.Meta{MetaResultRef: ref}}
	budget := MaxInlineResultBytes - MaxResultTextBytes - 1024
	if r.StructuredContent != nil {
		if sb, err := json.Marshal(r.StructuredContent); err == nil && len(sb) <= MaxInlineResultBytes/4 {
			out.StructuredContent = r.StructuredContent
			budget -= len(sb)
		} else {
			note += " [structuredContent left out: too large.]"
		}
	}
	blocks, left := fitBlocks(r.Content, budget, forUser)
	if left > 0 {
		note += fmt.Sprintf(" [%d more content blocks left out.]", left)
	}
	// Leave room for the note, so modelText does not cut it off again.
	out.Content = append(schema.ContentList{schema.Text(cutText(text, MaxResultTextBytes-1024, askForLess) + "\n" + note)}, blocks...)
	return out
}

// fitBlocks returns the blocks of in that keep, in order, while their
// encodings (as a JSON array) fit in budget bytes, and how many keep-able blocks were left
// out.
func fitBlocks(in schema.ContentList, budget int, keep func(schema.Content) bool) (schema.ContentList, int) {
	var out schema.ContentList
	left := 0
	for _, c := range in {
		if !keep(c) {
			continue
		}
		b, err := json.Marshal(c)
		n := len(b) + 1 // and its separator in the JSON array
		if err != nil || n > budget {
			left++
			budget = -1 // keep the order: nothing after a block left out
			continue
		}
		budget -= n
		out = append(out, c)
	}
	return out, left
}

// modelText is the text of a tool result as the model reads it: at most
// MaxResultTextBytes, with a note when it was cut.
func modelText(r *schema.CallToolResult) string {
	return cutText(model.ResultText(r), MaxResultTextBytes, askForLess)
}

// askForLess ends the note on a cut result.
const askForLess = "Ask the tool for less (a narrower filter, or its limit and cursor arguments) to see the rest."

// cutText returns s if it fits in max bytes, else its longest prefix that
// does (at a character boundary) and a note saying what was cut, followed
// by hint.
func cutText(s string, max int, hint string) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	note := fmt.Sprintf("\n[Output cut: the first %d of %d bytes are shown.", cut, len(s))
	if hint != "" {
		note += " " + hint
	}
	return s[:cut] + note + "]"
}

// boundUserBlocks keeps the final message's tool blocks within
// MaxUserBlocksBytes, and says in text how many were left out.
func boundUserBlocks(text string, blocks schema.ContentList) (string, schema.ContentList) {
	out, left := fitBlocks(blocks, MaxUserBlocksBytes, func(schema.Content) bool { return true })
	if left > 0 {
		text += fmt.Sprintf("\n\n(%d more items are not shown here.)", left)
	}
	return text, out
}

// errRunTooLarge stops advance after fit failed the run.
var errRunTooLarge = errors.New("run record too large")

// fit brings the run record under MaxRunBytes: first it shortens the
// oldest tool results (text to about 1 KiB, blocks dropped, the reference
// kept), then drops the oldest messages before this turn's user message.
// If the run is still too large it fails it (RejectRunTooLarge), clearing
// what made it large, and reports true.
func (a *Agent) fit(ctx context.Context, run *Run) (failed bool) {
	size := runSize(run)
	if size <= MaxRunBytes {
		return false
	}
	before := size
	for i := range run.Messages {
		if size <= MaxRunBytes {
			break
		}
		m := &run.Messages[i]
		if m.Role != model.RoleTool {
			continue
		}
		old := msgSize(m)
		short := model.Message{Role: m.Role, ToolCallID: m.ToolCallID, ToolName: m.ToolName,
			Text: cutText(m.Text, shortenedToolText, "This earlier result was shortened to keep the run record small.")}
		if m.Result != nil {
			short.Result = &schema.CallToolResult{Content: schema.ContentList{schema.Text(short.Text)}, IsError: m.Result.IsError}
			if ref, ok := m.Result.Meta[MetaResultRef]; ok {
				short.Result.Meta = schema.Meta{MetaResultRef: ref}
			}
		}
		if n := msgSize(&short); n < old {
			*m = short
			size -= old - n
		}
	}
	// Thread history before this turn's message: oldest first.
	last := -1
	for i, m := range run.Messages {
		if m.Role == model.RoleUser {
			last = i
		}
	}
	drop := 0
	for drop < last && (size > MaxRunBytes || run.Messages[drop].Role == model.RoleTool) {
		// A unit at a time: an earlier turn's tool results go with the
		// assistant message that called them (a model refuses a tool
		// result without its call).
		size -= msgSize(&run.Messages[drop]) + 1
		drop++
	}
	if drop > 0 {
		run.Messages = append([]model.Message(nil), run.Messages[drop:]...)
	}
	size = runSize(run)
	if size <= MaxRunBytes {
		a.log.WarnContext(ctx, "run record shortened to fit", "run_id", run.RunID, "bytes_before", before,
			"bytes_after", size, "history_dropped", drop, "limit", MaxRunBytes)
		return false
	}
	a.log.ErrorContext(ctx, "run record too large even shortened; failing the run", "run_id", run.RunID,
		"bytes", size, "limit", MaxRunBytes)
	run.Failed = &events.RunFailed{RunID: run.RunID, TurnID: run.TurnID, Reason: RejectRunTooLarge, Detail: fmt.Sprintf(
		"the run grew to %d bytes, more than the limit of %d, even after shortening old tool results and history", size, MaxRunBytes)}
	run.Messages, run.Calls, run.Final = nil, nil, nil
	return true
}

// runSize is the encoded size of run plus its pending forms and its
// effects (run.paused carries them once more next to the snapshot).
func runSize(run *Run) int {
	b, err := json.Marshal(run)
	if err != nil {
		return 0
	}
	n := len(b)
	if eb, err := json.Marshal(run.Effects); err == nil && len(run.Effects) > 0 {
		n += len(eb)
	}
	for _, c := range run.Calls {
		if c.Status == callAwaiting {
			for _, p := range c.Awaiting {
				if pb, err := json.Marshal(p); err == nil {
					n += len(pb)
				}
			}
		}
	}
	return n
}

func msgSize(m *model.Message) int {
	b, _ := json.Marshal(m)
	return len(b)
}

// MaxModelResultsBytes bounds the whole results one model request loads
// back from ResultsBucket (the sum of their encoded sizes). Results past
// it are given to the model as the run record keeps them: the reduced
// copy, whose text says what was left out.
const MaxModelResultsBytes = 4 << 20

// modelMessages is the conversation as the model is given it: run.Messages
// with every tool result of this turn that the run record keeps reduced
// (MetaResultRef) replaced by the whole result from ResultsBucket, so the
// model decides on what the tool returned (its structuredContent and
// content), not on the reduced copy. The text is cut as usual
// (MaxResultTextBytes). A result that cannot be loaded, or does not fit
// MaxModelResultsBytes, stays reduced and its text says so; run.Messages
// itself is not changed.
func (a *Agent) modelMessages(ctx context.Context, run *Run) []model.Message {
	turn := 0
	for i, m := range run.Messages {
		if m.Role == model.RoleUser {
			turn = i
		}
	}
	var out []model.Message
	budget := MaxModelResultsBytes
	for i := turn; i < len(run.Messages); i++ {
		m := run.Messages[i]
		if m.Role != model.RoleTool || m.Result == nil {
			continue
		}
		raw, ok := m.Result.Meta[MetaResultRef]
		if !ok {
			continue
		}
		if out == nil {
			out = append([]model.Message(nil), run.Messages...)
		}
		whole, err := a.loadResult(ctx, raw, &budget)
		if err != nil {
			a.log.WarnContext(ctx, "whole tool result not given to the model", "run_id", run.RunID, "tool", m.ToolName, "error", err)
			out[i].Text = m.Text + fmt.Sprintf("\n[The whole result could not be loaded (%v); only the part above is shown.]", err)
			continue
		}
		// The message text is the reduced copy's text plus what the
		// agent appended (the user's instructions): keep the latter.
		rest := ""
		if short := modelText(m.Result); strings.HasPrefix(m.Text, short) {
			rest = m.Text[len(short):]
		}
		out[i].Text = modelText(whole) + rest
		out[i].Result = whole
	}
	if out == nil {
		return run.Messages
	}
	return out
}

// loadResult reads the whole result a MetaResultRef value points at,
// checking its digest, and takes its size from budget.
func (a *Agent) loadResult(ctx context.Context, raw any, budget *int) (*schema.CallToolResult, error) {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("reading the reference: %w", err)
	}
	var ref ResultRef
	if err := json.Unmarshal(b, &ref); err != nil || ref.Name == "" {
		return nil, fmt.Errorf("reading the reference %s: not a result reference", b)
	}
	if ref.Size > *budget {
		return nil, fmt.Errorf("it is %d bytes and the model request may load only %d more bytes of results (limit %d)", ref.Size, *budget, MaxModelResultsBytes)
	}
	gctx, cancel := context.WithTimeout(ctx, 4*bus.RequestTimeout)
	defer cancel()
	data, err := a.results.GetBytes(gctx, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("object %s/%s: %w", ref.Bucket, ref.Name, err)
	}
	sum := sha256.Sum256(data)
	if d := "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:]); ref.Digest != "" && d != ref.Digest {
		return nil, fmt.Errorf("object %s/%s: digest %s, want %s", ref.Bucket, ref.Name, d, ref.Digest)
	}
	var r schema.CallToolResult
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("object %s/%s: %w", ref.Bucket, ref.Name, err)
	}
	*budget -= len(data)
	return &r, nil
}
