package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
	"github.com/parley-dev/parley/schema"
)

// The thread record: the processor's own state of a conversation, stored
// in kvstate.BucketThreads and read by no other package (the bench and
// the tests decode only what they need of it).

// Thread states.
const (
	ThreadIdle    = "idle"
	ThreadRunning = "running"
	ThreadPaused  = "paused"
)

// QueuedMessage is a user message waiting for the thread's active turn.
type QueuedMessage struct {
	EventID string `json:"eventId"`
	// TraceParent is the trace context the message arrived in.
	TraceParent string             `json:"traceparent,omitempty"`
	Agent       string             `json:"agent"`
	User        string             `json:"user,omitempty"`
	Message     schema.ChatMessage `json:"message"`
	// Grants is how many of the thread's grants (Thread.Shared, which
	// only grows) were made when the message was recorded: the parties
	// that may answer the questions of its turn besides the owner (nil
	// in a message an earlier version queued: every grant).
	Grants *int `json:"grants,omitempty"`
}

// Expiry names a paused turn that expired and its questions.
type Expiry struct {
	TurnID         string    `json:"turnId"`
	ElicitationIDs []string  `json:"elicitationIds"`
	At             time.Time `json:"at"`
	// Record is the key of the pause record whose expiry ended the turn:
	// a redelivery of that record's marker announces the expiry again,
	// however late; another record's marker does not ("" in a record an
	// earlier version wrote: then only within a minute of At).
	Record string `json:"record,omitempty"`
}

// Supersession is a paused turn ended by a new user message.
type Supersession struct {
	// TurnID is the superseded turn.
	TurnID string `json:"turnId"`
	// By is the turn.requested event ID of the superseding message.
	By string `json:"by"`
	// Started is the turn.requested event ID of the turn started then (the
	// head of the queue, which is By only when nothing was queued).
	Started string `json:"started,omitempty"`
	// Cancelled are the questions withdrawn; Expired those found expired.
	Cancelled []string `json:"cancelled,omitempty"`
	Expired   []string `json:"expired,omitempty"`
}

// ThreadFormat is the format version of Thread.
const ThreadFormat = 1

// Thread is a conversation: its state, bounded history, active turn and the
// messages queued behind it (FIFO).
type Thread struct {
	Format int    `json:"format"`
	ID     string `json:"id"`
	State  string `json:"state"`
	Agent  string `json:"agent,omitempty"`
	TurnID string `json:"turnId,omitempty"`
	RunID  string `json:"runId,omitempty"`
	// LastTurnSeq is the highest PARLEY_INPUT stream sequence of a
	// turn.requested recorded for the thread (started, queued, rejected or
	// dead-lettered): later messages wait for earlier ones (FIFO).
	LastTurnSeq uint64 `json:"lastTurnSeq,omitempty"`
	// InputSeqs says LastTurnSeq and PauseMark are PARLEY_INPUT sequences;
	// a record without it was written when input was in PARLEY_CHAT, and
	// its sequences do not compare with PARLEY_INPUT's.
	InputSeqs bool `json:"inputSeqs,omitempty"`
	// RunSeq is the PARLEY_RUNS stream sequence of the last run outcome
	// applied to the thread (any turn): an outcome at or below it is stale
	// (a redelivery after the turn moved on) and is not applied again.
	RunSeq uint64 `json:"runSeq,omitempty"`
	// PauseMark is, while the active turn is paused, the stream sequence
	// of the thread's last turn.requested when the pause was recorded: a
	// message at or below it was sent before the turn paused and queues
	// behind it; only a later message supersedes the paused turn.
	PauseMark uint64 `json:"pauseMark,omitempty"`
	// Superseded records the last paused turn a new message superseded and
	// what that withdrew, so a redelivery of the message announces it.
	Superseded *Supersession `json:"superseded,omitempty"`
	// TraceParent is the W3C trace context the active turn started in.
	TraceParent string `json:"traceparent,omitempty"`
	// Owner is the party whose turn.requested started the thread (set by
	// the first message recorded); Shared the parties it granted the
	// thread to (TurnRequested.Share, at most events.MaxShares). Anyone
	// else's message or answer is rejected forbidden. A record without an
	// Owner (written before ownership existed) is claimed by its next
	// message.
	Owner  *events.Identity  `json:"owner,omitempty"`
	Shared []events.Identity `json:"shared,omitempty"`
	// StartedBy is the ID of the turn.requested event that started the
	// active turn.
	StartedBy string `json:"startedBy,omitempty"`
	// TurnGrants is the active turn's message's QueuedMessage.Grants,
	// which its pauses record (PausedTurn.Grants).
	TurnGrants *int                 `json:"turnGrants,omitempty"`
	History    []schema.ChatMessage `json:"history,omitempty"`
	Queue      []QueuedMessage      `json:"queue,omitempty"`
	// Paused is the thread's last paused turn, its questions and what
	// became of them (paused.go): the active turn's while State is
	// paused; kept, settled, until the next pause replaces it.
	Paused *PausedTurn `json:"paused,omitempty"`
	// LegacyPending is what a version before Paused stored of the paused
	// turn in the thread: its open questions' IDs. Read only to name them
	// when the turn's own record expired before this version adopted it
	// (adoptLegacy); cleared once adopted.
	LegacyPending []string `json:"pending,omitempty"`
	// Expired records the last paused turn that expired, so every replica
	// that sees the expiry marker announces the same event.
	Expired *Expiry `json:"expired,omitempty"`
	// Refused lists recent turn.requested event IDs refused as thread_busy,
	// so a redelivery repeats the refusal.
	Refused []string `json:"refused,omitempty"`
	// Handled lists recent event IDs already applied (dedup on redelivery).
	Handled []string `json:"handled,omitempty"`
	// Accepted lists the fingerprints (inputPrint) of the last
	// maxHandled inputs the thread accepted: messages it started or
	// queued, answers it consumed. An accepted input is owed its echo
	// (docs/events.md, "The echo") whatever the thread did since: the
	// redelivery of one whose processor died before echoing it, found
	// after the thread moved past it (the thread's next pause replaced
	// an answer's question; a message's ID aged out of Handled), is
	// recognised here and echoed. A fingerprint is 36 bytes whatever the
	// input's size: TestThreadRecordAtEveryBoundToTheByte.
	Accepted  []string  `json:"accepted,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// MaxHistory bounds Thread.History (oldest messages drop first).
const MaxHistory = 50

// MaxQueue bounds Thread.Queue: a message beyond it is rejected
// (thread_busy).
const MaxQueue = 16

// MaxQueueBytes bounds the JSON of Thread.Queue's messages: a message that
// would take the queue past it is rejected (thread_busy), also when it
// would supersede a paused turn (the queue it joins then is the one
// after its head starts), so the queue (256 KiB), the history
// (MaxHistoryBytes) and the paused turn (MaxPausedBytes) fit the 1 MiB KV
// value together.
const MaxQueueBytes = 256 << 10

// MaxPausedBytes bounds Thread.Paused: the questions of one pause as the
// agent asked them (JSON) plus answerRoom for the answer to each. A pause
// over it is not recorded: the turn fails run_too_large. With the queue
// and the history at their bounds it leaves about 72 KiB of the 1 MiB KV
// value for the rest of the record, which takes up to 64 KiB (the owner
// and 16 shares, 2×64 remembered event IDs, the questions' IDs listed
// again by the last supersession and expiry) and the write's header:
// TestThreadRecordAtEveryBoundToTheByte.
const MaxPausedBytes = 440 << 10

// answerRoom is what the paused turn reserves for the answer to each of
// its questions: an answer of events.MaxAnswerBytes as received, with who
// answered, when and the event's ID. An answer that would add more to the
// thread record as stored (JSON, where encoding/json writes each '<', '>'
// and '&' in 6 bytes) is rejected invalid_content (applyAnswer).
const answerRoom = events.MaxAnswerBytes + 1<<10

// queueBytes is the JSON size of msgs.
func queueBytes(msgs ...QueuedMessage) int {
	n := 0
	for _, m := range msgs {
		b, _ := json.Marshal(m)
		n += len(b)
	}
	return n
}

// pausedBytes is what pt counts against MaxPausedBytes.
func pausedBytes(pt *PausedTurn) int {
	b, _ := json.Marshal(pt)
	return len(b) + len(pt.Elicitations)*answerRoom
}

// MaxHistoryBytes bounds the JSON of Thread.History (historySize): the
// oldest messages drop first, so the thread record stays well under the
// KV value limit. The newest message is always kept, its text cut to fit
// when it alone is over (cutToHistory; an assistant's reply is bounded by
// nothing else).
const MaxHistoryBytes = 256 << 10

const maxHandled = 64

// Append adds messages to the history, keeping at most MaxHistory.
func (t *Thread) Append(msgs ...schema.ChatMessage) {
	t.History = append(t.History, msgs...)
	if n := len(t.History); n > MaxHistory {
		t.History = append([]schema.ChatMessage(nil), t.History[n-MaxHistory:]...)
	}
	size := 0
	for _, m := range t.History {
		size += historySize(m)
	}
	drop := 0
	for size > MaxHistoryBytes && drop < len(t.History)-1 {
		size -= historySize(t.History[drop])
		drop++
	}
	if drop > 0 {
		t.History = append([]schema.ChatMessage(nil), t.History[drop:]...)
	}
	if n := len(t.History); n > 0 && size > MaxHistoryBytes {
		t.History[n-1] = cutToHistory(t.History[n-1])
	}
}

// cutNote ends a message's text cut to fit MaxHistoryBytes.
const cutNote = "\n[cut: the rest of this message did not fit the thread's history]"

// cutToHistory cuts m's text (at a character boundary, ending with
// cutNote) so that m alone fits MaxHistoryBytes: the newest message is
// always kept, and an assistant's reply is bounded by nothing else.
func cutToHistory(m schema.ChatMessage) schema.ChatMessage {
	if historySize(m) <= MaxHistoryBytes {
		return m
	}
	text := m.Text
	fits := func(keep int) bool {
		m.Text = text[:keep] + cutNote
		return historySize(m) <= MaxHistoryBytes
	}
	// The longest prefix that fits (escapes make a byte of text take up
	// to 6 in the JSON), at a character boundary.
	lo, hi := 0, len(text)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	for lo > 0 && lo < len(text) && !utf8.RuneStart(text[lo]) {
		lo--
	}
	m.Text = text[:lo] + cutNote
	return m
}

// historySize is what m counts against MaxHistoryBytes: its JSON as the
// thread record stores it (text, content blocks and _meta, escapes
// included: encoding/json writes '<', '>' and '&' as 6 bytes each, so a
// bound on the raw text would let the record grow six times past it).
func historySize(m schema.ChatMessage) int {
	b, _ := json.Marshal(m)
	return len(b)
}

// ranTools are the tool calls a turn executed (the agent's run outcome
// reports them, events.ToolEffect; a paused turn keeps those of its run so
// far), and how many more ran than are listed.
type ranTools struct {
	effects []events.ToolEffect
	omitted int
}

// pausedRan is what the paused turn turnID of t recorded of its run's
// tool calls (none when t's last paused turn is another).
func pausedRan(t *Thread, turnID string) ranTools {
	if p := t.Paused; p != nil && p.TurnID == turnID {
		return ranTools{effects: p.Effects, omitted: p.EffectsOmitted}
	}
	return ranTools{}
}

// orPaused is r, or, when r lists nothing (an outcome without effects: a
// run that failed before reading its snapshot, a dead letter that could
// not be read), what the paused turn turnID of t recorded: the run's
// effects only grow, so its outcome's list, when there is one, holds
// those of its pauses.
func (r ranTools) orPaused(t *Thread, turnID string) ranTools {
	if len(r.effects) > 0 || r.omitted > 0 {
		return r
	}
	return pausedRan(t, turnID)
}

// appendRan adds to the history the tool calls a turn executed, as one
// assistant message recording them (events.MetaToolEffects, which the
// agent gives the model as the calls and their results), with note as its
// text: how the turn ended when it gave no answer ("" when the answer
// follows). Nothing when no tool ran. So an effect that happened stays in
// the conversation whatever became of its turn.
func (t *Thread) appendRan(r ranTools, note string) {
	if len(r.effects) == 0 && r.omitted == 0 {
		return
	}
	if r.omitted > 0 {
		note = strings.TrimSpace(note + fmt.Sprintf(" (%d more tool calls of this turn ran and are not listed.)", r.omitted))
	}
	t.Append(schema.ChatMessage{Role: schema.RoleAssistant, Text: note,
		Meta: schema.Meta{events.MetaToolEffects: slices.Clone(r.effects)}})
}

// Notes of a turn that ended with no answer after its tool calls ran
// (appendRan).
func failedNote(reason string) string {
	return fmt.Sprintf("[parley: this turn ended before an answer (%s); the tool calls above ran.]", reason)
}

const (
	supersededNote = "[parley: this turn ended unanswered: a newer message withdrew its open question; the tool calls above ran.]"
	expiredNote    = "[parley: this turn ended unanswered: its open question expired; the tool calls above ran.]"
)

// pending returns the IDs of the questions the paused thread waits on (nil
// unless State is paused).
func (t *Thread) pending() []string {
	if t.State != ThreadPaused || t.Paused == nil || t.Paused.TurnID != t.TurnID {
		return nil
	}
	return t.Paused.PendingIDs()
}

// MarkHandled records an applied event ID; Seen reports one.
func (t *Thread) MarkHandled(id string) {
	t.Handled = append(t.Handled, id)
	if n := len(t.Handled); n > maxHandled {
		t.Handled = append([]string(nil), t.Handled[n-maxHandled:]...)
	}
}

// MarkAccepted records the fingerprint (inputPrint) of an input the
// thread accepted (bounded like Handled); HasAccepted reports one.
func (t *Thread) MarkAccepted(fp string) {
	t.Accepted = append(t.Accepted, fp)
	if n := len(t.Accepted); n > maxHandled {
		t.Accepted = append([]string(nil), t.Accepted[n-maxHandled:]...)
	}
}

// HasAccepted reports whether the thread accepted the input with
// fingerprint fp.
func (t *Thread) HasAccepted(fp string) bool { return slices.Contains(t.Accepted, fp) }

// inputPrint identifies an accepted input event as its redelivery
// carries it: its type, its event ID, the party that sent it (as
// authenticated) and the event's data as received (a redelivery is the
// stored message, byte for byte). Another party's event, or another
// event under the same ID, has another fingerprint.
func inputPrint(typ events.Type, id string, who events.Identity, data []byte) string {
	return events.DerivedID("accepted", string(typ), id, who.Principal, who.OnBehalfOf, string(data))
}

// Refuse records a refused message ID (bounded like Handled).
func (t *Thread) Refuse(id string) {
	t.Refused = append(t.Refused, id)
	if n := len(t.Refused); n > maxHandled {
		t.Refused = append([]string(nil), t.Refused[n-maxHandled:]...)
	}
}

// Seen reports whether the event ID was already applied to the thread.
func (t *Thread) Seen(id string) bool {
	for _, h := range t.Handled {
		if h == id {
			return true
		}
	}
	return false
}

// openThreads creates or updates the threads bucket; ttl bounds how long an
// untouched thread is kept (0: forever).
func openThreads(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int, ttl time.Duration) (*kvstate.Bucket[json.RawMessage], error) {
	return kvstate.OpenBucket[json.RawMessage](ctx, js, kvstate.BucketThreads, kvstate.BucketOptions{Storage: storage, Replicas: replicas, TTL: ttl})
}

// newThread is the record of a thread never seen (its sequences are
// PARLEY_INPUT's from the start).
func newThread(id string) *Thread {
	return &Thread{Format: ThreadFormat, ID: id, State: ThreadIdle, InputSeqs: true}
}

// threadStore returns the store of the thread records in recs (the
// threads bucket, or a fake in the package tests), caching them when
// cache is set. A thread never written reads as a new idle one at
// revision 0; a record is read by readThread (older formats included) and
// stamped with ThreadFormat, PARLEY_INPUT sequences and its update time on
// every write, which wakes this replica's waiters (p.writes).
//
// The cache is correct under several replicas because it is never trusted
// on its own (kvstate.StoreOptions.Cache), and the handlers (turns.go,
// pause.go) read afresh before any decision a cached record would make
// differently from the current one: waiting, refusing, withdrawing a
// pause, or ignoring an outcome as stale.
func (p *Processor) threadStore(recs kvstate.Records, cache bool) *kvstate.Store[Thread] {
	return kvstate.NewStore(recs, kvstate.StoreOptions[Thread]{
		Name:   "thread",
		New:    newThread,
		Decode: p.readThread,
		BeforeWrite: func(t *Thread) {
			inputSeqs(t)
			t.Format, t.UpdatedAt = ThreadFormat, time.Now().UTC()
		},
		AfterWrite: p.writes.wrote,
		Cache:      cache,
	})
}

// writeWaiters wakes the handlers of this replica that wait for a thread's
// record to change (changed): closed and dropped on each write.
type writeWaiters struct {
	mu     sync.Mutex
	writes map[string]chan struct{}
}

// changed returns a channel closed at this replica's next write of
// thread id's record (another replica's writes are seen only by
// reading).
func (w *writeWaiters) changed(id string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writes == nil {
		w.writes = map[string]chan struct{}{}
	}
	ch, ok := w.writes[id]
	if !ok {
		ch = make(chan struct{})
		w.writes[id] = ch
	}
	return ch
}

// wrote wakes the waiters of changed(id).
func (w *writeWaiters) wrote(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.writes[id]; ok {
		close(ch)
		delete(w.writes, id)
	}
}
