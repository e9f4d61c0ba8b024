package processor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Attacks on the thread aggregate (the paused turn in the thread record):
// each test names the guarantee it attacks.

// rawEvent is events.NewWithID with data encoded as a client that does
// not HTML-escape would send it ('<' as one byte, not \u003c).
func rawEvent(t *testing.T, id string, typ events.Type, data any) *event.Event {
	t.Helper()
	e, err := events.NewWithID(id, "/test", typ, "t", data)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(data); err != nil {
		t.Fatal(err)
	}
	if err := e.SetData(event.ApplicationJSON, bytes.TrimSpace(b.Bytes())); err != nil {
		t.Fatal(err)
	}
	return e
}

// respond handles the answer id to question with content (accept), as
// delivered for the n-th time, and returns the handler's error.
func (h *harness) respond(id, question string, content map[string]any) error {
	h.t.Helper()
	e := rawEvent(h.t, id, events.TypeElicitationResponded, events.ElicitationResponded{
		ElicitationID: question, Action: schema.ActionAccept, Content: content})
	return h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatElicitationResponded),
		StreamSeq: 100, NumDelivered: 1})
}

// rejectedIDs lists the responded event IDs an elicitation.rejected names.
func (h *harness) rejectedIDs() []string {
	var ids []string
	for _, e := range h.pub.of(events.TypeElicitationRejected) {
		d, _ := events.Data[events.ElicitationRejected](e)
		ids = append(ids, d.RespondedEventID)
	}
	return ids
}

// A crash between the answer's write (consumed, resumed) and run.resumed,
// redelivered once the pause's time is up: the accepted answer must not
// be rejected, and the turn must not be left running with no run to
// finish it (it resumes, or fails and frees the thread).
func TestWinningAnswerRedeliveredAfterExpiry(t *testing.T) {
	for _, how := range []string{"record expired", "past ExpiresAt, record still there"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t)
			if err := h.message("m1", 1); err != nil {
				t.Fatal(err)
			}
			h.pause("m1", "p1", 10, "q1")
			h.pub.fail = func(e *event.Event) bool { return events.TypeOf(e) == events.TypeRunResumed }
			if err := h.respond("a1", "q1", nil); err == nil {
				t.Fatal("run.resumed failed, yet the answer was acked")
			}
			h.pub.fail = nil
			if th := h.stored(); th.State != ThreadRunning || !th.Paused.Resumed {
				t.Fatalf("after the answer: %s, resumed %v; want running, resumed", th.State, th.Paused.Resumed)
			}
			key := h.paused().Record
			if how == "record expired" {
				h.pauses.expire(key)
				h.p.pauses.cache.Drop(key) // redelivered to another replica, or after a restart
				if err := h.p.onExpired(h.ctx, key); err != nil {
					t.Fatal(err)
				}
			} else {
				// The answer was written in the pause's last moment; its
				// redelivery comes after ExpiresAt.
				h.threads.mu.Lock()
				th, rev := h.threads.load("t")
				th.Paused.ExpiresAt = time.Now().Add(-time.Second)
				data, _ := json.Marshal(th)
				h.threads.recs["t"] = memRecord{data, rev}
				h.threads.mu.Unlock()
				h.p.threads.Forget("t")
			}
			if err := h.respond("a1", "q1", nil); err != nil { // the redelivery
				t.Fatal(err)
			}
			if ids := h.rejectedIDs(); len(ids) != 0 {
				t.Errorf("the accepted answer's redelivery was rejected: %v", ids)
			}
			resumed, failed := len(h.pub.of(events.TypeRunResumed)), len(h.pub.of(events.TypeTurnFailed))
			if resumed+failed != 1 {
				t.Errorf("%d run.resumed, %d turn.failed; want the turn resumed or failed, once", resumed, failed)
			}
			if th := h.stored(); failed == 1 && th.State != ThreadIdle {
				t.Errorf("the turn failed, yet the thread is %s", th.State)
			}
			if th := h.stored(); resumed == 0 && th.State == ThreadRunning && th.TurnID == events.DerivedID("turn", "m1") {
				t.Errorf("the thread is left running turn m1 with no run.resumed: stuck")
			}
		})
	}
}

// The thread record must fit the KV value limit (1 MiB): the history's
// bound is measured in raw text, but the record stores JSON, where each
// '<', '>' and '&' (HTML-escaped by encoding/json) takes 6 bytes.
func TestHistoryFitsAsJSON(t *testing.T) {
	h := newHarness(t)
	text := strings.Repeat("<", events.MaxMessageText-100)
	for i := range 12 {
		id := "m" + string(rune('a'+i))
		e := rawEvent(t, id, events.TypeTurnRequested, events.TurnRequested{
			Message: schema.ChatMessage{Role: schema.RoleUser, Text: text}})
		seq := uint64(i + 1)
		h.inStream(seq)
		if err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatTurnRequested),
			StreamSeq: seq, NumDelivered: 1}); err != nil {
			t.Fatal(err)
		}
		turn := events.DerivedID("turn", id)
		h.run(events.TypeRunCompleted, "c-"+id, uint64(10+i), events.RunCompleted{RunID: turn, TurnID: turn,
			Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "ok"}})
		if n := len(h.pub.of(events.TypeTurnRejected)); n > 0 {
			t.Fatalf("message %d rejected", i+1)
		}
		if n := storedBytes(h); n > maxKVValue {
			t.Fatalf("after %d messages the thread record is %d bytes, over the KV value limit of %d", i+1, n, maxKVValue)
		}
	}
}

// maxKVValue is the NATS server's default max_payload, which bounds a KV value.
const maxKVValue = 1 << 20

// storedBytes is the size of thread t's record as stored.
func storedBytes(h *harness) int {
	h.threads.mu.Lock()
	defer h.threads.mu.Unlock()
	return len(h.threads.recs["t"].data)
}

// A paused turn is admitted with room for one answer per question; the
// record stores each answer re-encoded, where each '<' of its content
// takes 6 bytes. Whatever its answers, the thread record stays under the
// KV value limit (an answer too large as stored is rejected
// invalid_content and its question stays open), and an answer of
// events.MaxAnswerBytes as received without escapes is accepted.
func TestPausedAnswersFitAsJSON(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	// As many questions as the paused turn's bound admits.
	n := MaxPausedBytes/(events.MaxAnswerBytes+2<<10) - 1
	var qs []string
	for i := range n {
		qs = append(qs, "q"+strings.Repeat("x", 3)+string(rune('A'+i)))
	}
	turn := events.DerivedID("turn", "m1")
	in := events.RunPaused{RunID: turn, TurnID: turn, Agent: "default", Snapshot: json.RawMessage(`{}`)}
	for _, q := range qs {
		rs := schema.RequestedSchema{Type: "object", Properties: map[string]*schema.PropertySchema{
			"a": {Type: "string"}, "b": {Type: "string"}}}
		in.Elicitations = append(in.Elicitations, events.PendingElicitation{ID: q, Kind: events.KindForm,
			Request: schema.ElicitRequestParams{Message: "?", RequestedSchema: rs}})
	}
	h.run(events.TypeRunPaused, "p1", 10, in)
	if th := h.stored(); th.State != ThreadPaused {
		t.Fatalf("the pause of %d questions was not recorded: %s (%d turn.failed)", n, th.State, len(h.pub.of(events.TypeTurnFailed)))
	}
	content := func(c string) map[string]any {
		field := strings.Repeat(c, events.MaxAnswerField-64)
		return map[string]any{"a": field, "b": field[:events.MaxAnswerBytes-events.MaxAnswerField-1024]}
	}
	for i, q := range qs[:len(qs)-1] {
		if err := h.respond("a"+q, q, content("<")); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if rj := h.pub.of(events.TypeElicitationRejected); len(rj) > 0 {
			d, _ := events.Data[events.ElicitationRejected](rj[len(rj)-1])
			if d.RespondedEventID == "a"+q && (d.Reason != events.RejectInvalidContent || h.paused().Find(q).Status != StatusPending) {
				t.Fatalf("answer %d rejected %s, question %s; want invalid_content, the question still open", i+1, d.Reason, h.paused().Find(q).Status)
			}
		}
		if got := storedBytes(h); got > maxKVValue {
			t.Fatalf("after %d answers the thread record is %d bytes, over the KV value limit of %d", i+1, got, maxKVValue)
		}
	}
	last := qs[len(qs)-1]
	before := len(h.rejectedIDs())
	if err := h.respond("a"+last, last, content("a")); err != nil {
		t.Fatal(err)
	}
	if len(h.rejectedIDs()) != before || h.paused().Find(last).Status != StatusConsumed {
		t.Errorf("an answer of %d bytes as received, without escapes, was not accepted", events.MaxAnswerBytes-1024)
	}
	if got := storedBytes(h); got > maxKVValue {
		t.Fatalf("the thread record is %d bytes, over the KV value limit of %d", got, maxKVValue)
	}
}

// sendRaw handles the user message id at stream sequence seq with text,
// encoded without HTML escapes (as most clients send it).
func (h *harness) sendRaw(id string, seq uint64, text string) {
	h.t.Helper()
	h.inStream(seq)
	e := rawEvent(h.t, id, events.TypeTurnRequested, events.TurnRequested{
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: text}})
	if err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatTurnRequested),
		StreamSeq: seq, NumDelivered: 1}); err != nil {
		h.t.Fatalf("message %s: %v", id, err)
	}
}

// The thread record's parts are bounded together (history, queue,
// paused turn): a message that supersedes the paused turn joins the
// queue while the paused turn is still in the record, so it must count
// against the queue's bound like any other; else a full queue, a large
// paused turn and one superseding message overflow the 1 MiB KV value.
func TestSupersedeKeepsRecordUnderLimit(t *testing.T) {
	h := newHarness(t)
	plain := strings.Repeat("a", events.MaxMessageText-256)
	var seq, runSeq uint64
	next := func() uint64 { seq++; return seq }
	// The history at its bound.
	for i := range 10 {
		id := fmt.Sprint("h", i)
		h.sendRaw(id, next(), plain)
		turn := events.DerivedID("turn", id)
		runSeq++
		h.run(events.TypeRunCompleted, "c-"+id, runSeq, events.RunCompleted{RunID: turn, TurnID: turn,
			Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "ok"}})
	}
	// A running turn with a full queue behind it.
	h.sendRaw("m1", next(), "go")
	for i := 0; ; i++ {
		id := fmt.Sprint("w", i)
		h.sendRaw(id, next(), plain)
		if len(h.pub.of(events.TypeTurnRejected)) > 0 {
			break // the queue is full
		}
	}
	// The turn pauses on one large question, within MaxPausedBytes.
	turn := events.DerivedID("turn", "m1")
	q := confirmation("q1")
	q.Request.Message = strings.Repeat("a", MaxPausedBytes-answerRoomForTest-8<<10)
	runSeq++
	h.run(events.TypeRunPaused, "p1", runSeq, events.RunPaused{RunID: turn, TurnID: turn, Agent: "default",
		Snapshot: json.RawMessage(`{}`), Elicitations: []events.PendingElicitation{q}})
	if th := h.stored(); th.State != ThreadPaused {
		t.Fatalf("the pause was not recorded: %s", th.State)
	}
	t.Logf("before the supersede: %d bytes (history %d msgs, queue %d msgs)", storedBytes(h), len(h.stored().History), len(h.stored().Queue))
	h.sendRaw("m2", next(), strings.Repeat("<", events.MaxMessageText-256))
	if got := storedBytes(h); got > maxKVValue {
		t.Fatalf("after the supersede the thread record is %d bytes, over the KV value limit of %d", got, maxKVValue)
	}
}

// answerRoomForTest is the room a paused turn reserves per answer, at
// least events.MaxAnswerBytes.
const answerRoomForTest = events.MaxAnswerBytes + 1<<10

// Event IDs are kept in the thread record (Handled, Refused, StartedBy,
// an answer's ResponseEventID) and nothing bounds their length: user
// messages with long IDs take the record past the KV value limit. Either
// such a message is rejected (naming the id) or the record stays under
// the limit.
func TestLongEventIDsKeepRecordUnderLimit(t *testing.T) {
	h := newHarness(t)
	for i := range 20 {
		id := fmt.Sprintf("%s-%d", strings.Repeat("x", 64<<10), i)
		seq := uint64(i + 1)
		h.sendRaw(id, seq, "hello")
		turn := events.DerivedID("turn", id)
		if h.stored().TurnID == turn && h.stored().State == ThreadRunning {
			h.run(events.TypeRunCompleted, fmt.Sprint("c", i), seq, events.RunCompleted{RunID: turn, TurnID: turn,
				Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: "ok"}})
		}
		if got := storedBytes(h); got > maxKVValue {
			t.Fatalf("after %d messages the thread record is %d bytes, over the KV value limit of %d", i+1, got, maxKVValue)
		}
	}
	for _, e := range h.pub.of(events.TypeTurnRejected) {
		d, _ := events.Data[events.TurnRejected](e)
		if d.Reason != events.RejectInvalidEvent || len(d.Errors) == 0 || d.Errors[0].Path != "id" {
			t.Errorf("a message with a long ID was rejected %s %+v; want invalid_event naming id", d.Reason, d.Errors)
		}
	}
}

// A crash between the expiry's thread write and elicitation.expired is
// finished by the marker's redelivery, however late it comes (every
// processor down for a while): the announcement must not be lost.
func TestExpiryAnnouncedOnLateRedelivery(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	key := h.paused().Record
	h.pauses.expire(key)
	h.pub.fail = func(e *event.Event) bool { return events.TypeOf(e) == events.TypeElicitationExpired }
	if err := h.p.onExpired(h.ctx, key); err == nil {
		t.Fatal("the announcement failed, yet the marker was acked")
	}
	h.pub.fail = nil
	// The marker comes back two minutes later (the processors were down).
	h.threads.mu.Lock()
	th, rev := h.threads.load("t")
	th.Expired.At = th.Expired.At.Add(-2 * time.Minute)
	data, _ := json.Marshal(th)
	h.threads.recs["t"] = memRecord{data, rev}
	h.threads.mu.Unlock()
	h.p.threads.Forget("t")
	if err := h.p.onExpired(h.ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := len(h.pub.of(events.TypeElicitationExpired)); n != 1 {
		t.Fatalf("%d elicitation.expired after the late redelivery, want 1", n)
	}
	// The expiry of another record (an earlier pause's) announces nothing.
	if err := h.p.onExpired(h.ctx, pauseKey("t", 3)); err != nil {
		t.Fatal(err)
	}
	if n := len(h.pub.of(events.TypeElicitationExpired)); n != 1 {
		t.Fatalf("%d elicitation.expired after another record's expiry, want 1", n)
	}
}

// Every part of the thread record at its bound at once still fits the KV
// value limit (1 MiB): the history, queue and paused turn at their byte
// bounds (with answers to every question), the remembered event IDs at
// MaxEventIDBytes, and the owner and every share at the longest user name,
// all of it with characters encoding/json escapes.
func TestThreadRecordAtEveryBound(t *testing.T) {
	esc := func(n int) string { return strings.Repeat("<", n) }
	who := events.Identity{Principal: strings.Repeat("p", 128), OnBehalfOf: esc(maxOnBehalfOf)}
	// The longest event IDs admitted, of characters JSON escapes.
	id := func(i int) string {
		s := fmt.Sprint(i) + esc(MaxEventIDBytes)
		for _, ok := checkEventID(s); !ok; _, ok = checkEventID(s) {
			s = s[:len(s)-1]
		}
		return s
	}
	th := &Thread{Format: ThreadFormat, ID: strings.Repeat("t", 128), State: ThreadIdle, Owner: &who,
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	for range events.MaxShares {
		th.Shared = append(th.Shared, who)
	}
	// A running turn and a full queue behind it.
	startTurn(th, QueuedMessage{EventID: id(0), Agent: "default", Message: schema.ChatMessage{Role: schema.RoleUser, Text: "go"}})
	for i, text := 1, MaxQueueBytes/MaxQueue/6; len(th.Queue) < MaxQueue && text > 0; i++ {
		m := QueuedMessage{EventID: id(i), Agent: strings.Repeat("a", 128), User: esc(maxOnBehalfOf),
			TraceParent: th.TraceParent, Message: schema.ChatMessage{Role: schema.RoleUser, Text: esc(text)}}
		if refused, _, _ := applyMessage(th, m, uint64(i), time.Now()); refused {
			text -= 8 // fill the rest with smaller ones
		}
	}
	for i := range MaxHistory {
		th.Append(schema.ChatMessage{Role: schema.RoleUser, Text: esc((MaxHistoryBytes/MaxHistory - len(`{"role":"user","text":""}`)) / 6)})
		_ = i
	}
	// The turn pauses on as large a pause as is admitted, and every
	// question is answered with as much as is admitted.
	const n = 20
	pt := &PausedTurn{TurnID: th.TurnID, RunID: th.RunID, Agent: th.Agent, ExpiresAt: time.Now().Add(time.Hour),
		RunSeq: 1, Record: pauseKey(th.ID, 1), TraceParent: th.TraceParent}
	for i := range n {
		rs := schema.RequestedSchema{Type: "object", Properties: map[string]*schema.PropertySchema{"a": {Type: "string"}, "b": {Type: "string"}}}
		pt.Elicitations = append(pt.Elicitations, Elicitation{Status: StatusPending, PendingElicitation: events.PendingElicitation{
			ID: fmt.Sprintf("%036d", i), Kind: events.KindForm, Request: schema.ElicitRequestParams{Message: "?", RequestedSchema: rs}}})
	}
	fill := (MaxPausedBytes - pausedBytes(pt)) / n / 6
	for i := range pt.Elicitations {
		pt.Elicitations[i].Request.Message = esc(fill)
	}
	if pausedBytes(pt) > MaxPausedBytes {
		t.Fatalf("the paused turn is %d bytes with its room, over %d", pausedBytes(pt), MaxPausedBytes)
	}
	if err := applyPause(th, pt, id(100), 1); err != nil {
		t.Fatal(err)
	}
	for i, el := range pt.Elicitations {
		for size := answerRoomForTest; size > 0; size -= 64 {
			plain := min(size, events.MaxAnswerField-64)
			content := map[string]any{"a": strings.Repeat("a", plain), "b": esc(max(size-plain, 0) / 6)}
			v := applyAnswer(th, id(200+i), events.ElicitationResponded{ElicitationID: el.ID, Action: schema.ActionAccept,
				Content: content}, who, time.Now())
			if v.consumed {
				break
			}
		}
	}
	if !th.Paused.Settled() {
		t.Fatal("not every question was answered")
	}
	for i := range 2 * maxHandled {
		th.MarkHandled(id(300 + i))
		th.Refuse(id(500 + i))
	}
	th.StartedBy = id(0)
	var ids []string
	for _, el := range pt.Elicitations {
		ids = append(ids, el.ID)
	}
	th.Superseded = &Supersession{TurnID: th.TurnID, By: id(1), Started: id(2), Cancelled: ids}
	th.Expired = &Expiry{TurnID: th.TurnID, ElicitationIDs: ids, At: time.Now(), Record: pt.Record}
	th.UpdatedAt = time.Now()
	data, err := json.Marshal(th)
	if err != nil {
		t.Fatal(err)
	}
	hist, _ := json.Marshal(th.History)
	queue, _ := json.Marshal(th.Queue)
	paused, _ := json.Marshal(th.Paused)
	t.Logf("record %d bytes: history %d, queue %d, paused %d, rest %d", len(data), len(hist), len(queue), len(paused),
		len(data)-len(hist)-len(queue)-len(paused))
	// The KV update's headers (Nats-Expected-Last-Subject-Sequence) count
	// against the server's max_payload too.
	if len(data) > maxKVValue-128 {
		t.Errorf("the thread record at every bound is %d bytes, over the KV value limit of %d", len(data), maxKVValue)
	}
}

// The newest message is always kept in the history, whatever its size: an
// assistant reply (run.completed, up to the NATS message size) is bounded
// by nothing else, and the turn's settled paused turn stays in the record
// beside it, so a long reply takes the thread record past the KV value
// limit. The reply's start must stay in the history.
func TestLongReplyKeepsRecordUnderLimit(t *testing.T) {
	h := newHarness(t)
	h.sendRaw("m1", 1, "go")
	turn := events.DerivedID("turn", "m1")
	q := confirmation("q1")
	q.Request.Message = strings.Repeat("a", MaxPausedBytes-answerRoomForTest-8<<10)
	h.run(events.TypeRunPaused, "p1", 10, events.RunPaused{RunID: turn, TurnID: turn, Agent: "default",
		Snapshot: json.RawMessage(`{}`), Elicitations: []events.PendingElicitation{q}})
	if err := h.respond("a1", "q1", nil); err != nil {
		t.Fatal(err)
	}
	h.run(events.TypeRunCompleted, "c1", 11, events.RunCompleted{RunID: turn, TurnID: turn,
		Message: schema.ChatMessage{Role: schema.RoleAssistant, Text: strings.Repeat("<", 120<<10)}})
	if got := storedBytes(h); got > maxKVValue {
		t.Fatalf("after the reply the thread record is %d bytes, over the KV value limit of %d", got, maxKVValue)
	}
	th := h.stored()
	if last := th.History[len(th.History)-1]; last.Role != schema.RoleAssistant || !strings.HasPrefix(last.Text, "<<<<") {
		t.Errorf("the reply's start is not in the history: %.40q", last.Text)
	}
}

// A reply cut to fit the history is cut at a character boundary.
func TestCutKeepsCharacters(t *testing.T) {
	var th Thread
	th.Append(schema.ChatMessage{Role: schema.RoleAssistant, Text: strings.Repeat("é<", 100<<10)})
	m := th.History[0]
	if !utf8.ValidString(m.Text) || !strings.HasSuffix(m.Text, cutNote) || historySize(m) > MaxHistoryBytes ||
		historySize(m) < MaxHistoryBytes-16 {
		t.Errorf("cut to %d bytes (valid UTF-8 %v), want just under %d, ending with the note", historySize(m), utf8.ValidString(m.Text), MaxHistoryBytes)
	}
}

// A run.paused whose first handling died after storing the pause record
// and before the thread's write is redelivered later: the record (written
// once) keeps the first attempt's expiry, so the thread must record that
// one too, not a later one the record's TTL does not cover.
func TestRedeliveredPauseKeepsRecordExpiry(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	turn := events.DerivedID("turn", "m1")
	key := pauseKey("t", 10)
	first := time.Now().Add(-10 * time.Minute).Add(h.p.opts.PauseTTL).UTC().Truncate(time.Second)
	if err := h.p.pauses.save(h.ctx, key, &pauseRecord{Thread: "t", TurnID: turn, RunID: turn, RunSeq: 10, ExpiresAt: first,
		Snapshot: json.RawMessage(`{}`)}, recordUntil(first, h.p.opts.PauseTTL)); err != nil {
		t.Fatal(err)
	}
	h.p.pauses.cache.Drop(key) // the replica that stored it died
	h.pause("m1", "p1", 10, "q1")
	pt := h.paused()
	if pt == nil || !pt.ExpiresAt.Equal(first) {
		t.Fatalf("the thread says the pause expires at %v; its record, written once, at %v", pt.ExpiresAt, first)
	}
}

// An old-format processor consumed the last answer of a pause in the paused
// record's write and resumed in a thread write of its own; it died
// between them (an upgrade). A message sent then must not silently
// supersede a turn whose answers are all in: the answer's redelivery
// resumes it, and the message runs after it.
func TestLegacySettledPauseNotDroppedBySupersede(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	h.legacy(func(l *legacyPause) {
		l.Elicitations[0].Status = StatusConsumed
		l.Elicitations[0].Result = &schema.ElicitResult{Action: schema.ActionAccept}
		l.Elicitations[0].ResponseEventID = "a1"
	})
	if err := h.message("m2", 2); err != nil {
		t.Fatal(err)
	}
	h.answer("a1", "q1") // the redelivery of the winning answer
	resumed := len(h.pub.of(events.TypeRunResumed))
	announced := len(h.pub.of(events.TypeElicitationCancelled)) + len(h.pub.of(events.TypeTurnFailed))
	if resumed != 1 && announced == 0 {
		t.Fatalf("the answered turn neither resumed nor ended with an announcement: %d run.resumed, runs started %v",
			resumed, h.runsStarted())
	}
}
