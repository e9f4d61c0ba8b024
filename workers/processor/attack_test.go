package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// Attack on shares: a share covers the questions of the owner's messages
// sent after it; a question of a message sent before the share stays the
// owner's (docs/openapi.yaml, shareThread; e2e TestGatewayShares). Here
// alice's next message carries the share to the processor while her
// earlier message's turn still runs: it queues behind the turn, the turn
// then pauses, and bob (whom alice shared the thread with after sending
// the message whose turn asks) answers its question. His answer must be
// refused forbidden and consume nothing.
func TestShareInQueuedMessageDoesNotOpenEarlierQuestion(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	bob := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}
	if err := h.messageAs(events.PrincipalGateway, "m1", 1, events.TurnRequested{User: "alice"}); err != nil {
		t.Fatal(err)
	}
	// Shared after m1 was sent: m2 carries the share, and queues.
	if err := h.messageAs(events.PrincipalGateway, "m2", 2, events.TurnRequested{User: "alice", Share: []events.Identity{bob}}); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	h.answerAs(events.PrincipalGateway, "b1", "q1", "bob")
	if r := rejectedFor(h, "b1"); r != events.RejectForbidden {
		t.Errorf("bob's answer to the question of m1 (sent before the share): rejection %q, want forbidden", r)
	}
	if el := h.paused().Find("q1"); el.Status != StatusPending {
		t.Fatalf("q1 = %s answered by %v; want still pending, alice's to answer", el.Status, el.AnsweredBy)
	}
	// alice answers; m2's turn then starts, and its question is bob's too.
	h.answerAs(events.PrincipalGateway, "a1", "q1", "alice")
	if r := rejectedFor(h, "a1"); r != "" {
		t.Fatalf("alice's answer rejected %q", r)
	}
	turn := events.DerivedID("turn", "m1")
	h.run(events.TypeRunCompleted, "c1", 11, events.RunCompleted{RunID: turn, TurnID: turn})
	h.pause("m2", "p2", 12, "q2")
	h.answerAs(events.PrincipalGateway, "b2", "q2", "bob")
	if r := rejectedFor(h, "b2"); r != "" {
		t.Fatalf("bob's answer to the question of m2 (which shared the thread with him) rejected %q", r)
	}
}

// The same through a message refused thread_busy: the queue behind the
// paused turn is full, alice's message carrying the share is refused, and
// bob answers the question alice's earlier message asked.
func TestShareInRefusedMessageDoesNotOpenEarlierQuestion(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	bob := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}
	alice := events.TurnRequested{User: "alice"}
	if err := h.messageAs(events.PrincipalGateway, "m0", 1, alice); err != nil {
		t.Fatal(err)
	}
	seq := uint64(1)
	for range MaxQueue {
		seq++
		if err := h.messageAs(events.PrincipalGateway, "w"+string(rune('a'+seq)), seq, alice); err != nil {
			t.Fatal(err)
		}
	}
	h.pause("m0", "p1", 100, "q1")
	seq++
	if err := h.messageAs(events.PrincipalGateway, "m1", seq, events.TurnRequested{User: "alice", Share: []events.Identity{bob}}); err != nil {
		t.Fatal(err)
	}
	if r := turnRejectedFor(h, "m1"); r != events.RejectThreadBusy {
		t.Fatalf("m1: rejection %q, want thread_busy", r)
	}
	h.answerAs(events.PrincipalGateway, "b1", "q1", "bob")
	if r := rejectedFor(h, "b1"); r != events.RejectForbidden {
		t.Errorf("bob's answer to the question of m0 (sent before the share): rejection %q, want forbidden", r)
	}
	if el := h.paused().Find("q1"); el.Status != StatusPending {
		t.Fatalf("q1 = %s answered by %v; want still pending", el.Status, el.AnsweredBy)
	}
}

// attackQueue is PARLEY_INPUT as awaitPredecessors reads it: the
// turn.requested messages of thread t not yet acknowledged.
type attackQueue struct {
	memChat
	mu      sync.Mutex
	present map[uint64]bool
}

func (w *attackQueue) GetMsg(_ context.Context, seq uint64, _ ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var next uint64
	for s := range w.present {
		if s >= seq && (next == 0 || s < next) {
			next = s
		}
	}
	if next == 0 {
		return nil, jetstream.ErrMsgNotFound
	}
	return &jetstream.RawStreamMsg{Subject: events.InputThreadSubjects("t", events.ChatTurnRequested), Sequence: next}, nil
}

// deliver handles e, published by principal at PARLEY_INPUT sequence seq
// on thread t, and acknowledges it (removes it from the queue) when the
// handler succeeds.
func (w *attackQueue) deliver(h *harness, principal string, e *event.Event, seq uint64) error {
	err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, Subject: events.InputSubject(principal, "t", events.ChatTurnRequested),
		StreamSeq: seq, NumDelivered: 1})
	if err == nil {
		w.mu.Lock()
		delete(w.present, seq)
		w.mu.Unlock()
	}
	return err
}

// Messages of a thread run in stream order (FIFO), whichever replica
// takes them: a message waits until every earlier turn.requested of its
// thread is recorded. An invalid turn.requested (here one whose ce-subject
// is not its thread), which anyone who can publish input can put on any
// thread's subject, is recorded as dealt with at once, without waiting:
// the thread's LastTurnSeq jumps past the victim's messages still in
// flight, so the victim's second message stops waiting for its first and
// starts its turn before it.
func TestInvalidMessageDoesNotReorderEarlierMessages(t *testing.T) {
	h := newHarness(t)
	h.p.opts.OrderWait = 50 * time.Millisecond
	wq := &attackQueue{memChat: memChat{last: map[string]uint64{}}, present: map[uint64]bool{1: true, 2: true, 3: true}}
	h.p.input = wq
	msg := func(id, subject string) *event.Event {
		e, err := events.NewWithID(id, "/test", events.TypeTurnRequested, subject, events.TurnRequested{
			Message: schema.ChatMessage{Role: schema.RoleUser, Text: "message " + id}})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	m1, m2 := msg("m1", "t"), msg("m2", "t")
	x := msg("x", "elsewhere") // invalid: its ce-subject is not the thread
	// The replicas take x first, then m2, while m1 is still on its way.
	_ = wq.deliver(h, "mallory", x, 3)
	_ = wq.deliver(h, events.PrincipalIntegrator, m2, 2)
	if err := wq.deliver(h, events.PrincipalIntegrator, m1, 1); err != nil {
		t.Fatal(err)
	}
	// Redeliveries of whatever was released to wait.
	for range 3 {
		_ = wq.deliver(h, events.PrincipalIntegrator, m2, 2)
		_ = wq.deliver(h, "mallory", x, 3)
	}
	if r := turnRejectedFor(h, "x"); r != events.RejectInvalidEvent {
		t.Fatalf("x: rejection %q, want invalid_event", r)
	}
	want := []string{events.DerivedID("turn", "m1")}
	if got := h.runsStarted(); len(got) == 0 || got[0] != want[0] {
		t.Fatalf("turns started %v; want m1's turn (%s) first: m2 was sent after it", got, want[0])
	}
	if th := h.stored(); len(th.Queue) != 1 || th.Queue[0].EventID != "m2" {
		t.Fatalf("queue %v; want m2 waiting behind m1's turn", th.Queue)
	}
}

// Every part of the thread record at its bound at once, each filled to
// the byte (TestThreadRecordAtEveryBound fills each to within a
// few hundred bytes and asks 20 questions): the active turn's agent at
// 128 bytes, the stream sequences at 20 digits, the paused turn at
// exactly MaxPausedBytes with as many questions as fit (each one's ID is
// also kept in the last supersession's and the last expiry's lists), and
// every answer at its room. The KV write (value and its
// Nats-Expected-Last-Subject-Sequence header) must fit the server's 1 MiB.
func TestThreadRecordAtEveryBoundToTheByte(t *testing.T) {
	fits, largest := 0, 0
	for n := 1; ; n++ {
		th, ok := recordAtEveryBound(t, n)
		if !ok {
			break
		}
		fits = n
		data, err := json.Marshal(th)
		if err != nil {
			t.Fatal(err)
		}
		const header = "NATS/1.0\r\nNats-Expected-Last-Subject-Sequence: 18446744073709551615\r\n\r\n"
		largest = max(largest, len(data))
		if len(data)+len(header) > maxKVValue {
			t.Errorf("%d questions: the thread record at every bound is %d bytes, over the KV value limit of %d (with the write's %d header bytes)",
				n, len(data), maxKVValue, len(header))
		}
	}
	if fits == 0 {
		t.Fatal("no pause fits MaxPausedBytes")
	}
	t.Logf("up to %d questions fit; the largest record is %d bytes (limit %d)", fits, largest, maxKVValue)
}

// recordAtEveryBound builds thread records at every bound with n questions
// in the paused turn (false when n questions do not fit MaxPausedBytes).
func recordAtEveryBound(t *testing.T, n int) (*Thread, bool) {
	esc := func(k int) string { return strings.Repeat("<", max(k, 0)) }
	// pad fills s with plain bytes up to want bytes of size(s).
	pad := func(s string, size func(string) int, want int) string {
		return s + strings.Repeat("a", max(want-size(s), 0))
	}
	who := events.Identity{Principal: strings.Repeat("p", 128), OnBehalfOf: esc(maxOnBehalfOf)}
	id := func(i int) string { // the longest admitted, of escaped characters
		s := fmt.Sprint(i) + esc(MaxEventIDBytes/6-1)
		for {
			if _, ok := checkEventID(s + "a"); !ok {
				return s
			}
			s += "a"
		}
	}
	const big = uint64(math.MaxUint64)
	now := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
	grants := events.MaxShares
	th := &Thread{Format: ThreadFormat, ID: strings.Repeat("t", 128), State: ThreadIdle, Owner: &who}
	for range events.MaxShares {
		th.Shared = append(th.Shared, who)
	}
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	startTurn(th, QueuedMessage{EventID: id(0), Agent: strings.Repeat("a", 128), Grants: &grants, TraceParent: tp,
		Message: schema.ChatMessage{Role: schema.RoleUser, Text: "go"}})
	for i := 1; len(th.Queue) < MaxQueue; i++ {
		room := (MaxQueueBytes - queueBytes(th.Queue...)) / (MaxQueue - len(th.Queue))
		m := QueuedMessage{EventID: id(i), Agent: strings.Repeat("a", 128), User: esc(maxOnBehalfOf), Grants: &grants,
			TraceParent: tp, Message: schema.ChatMessage{Role: schema.RoleUser}}
		m.Message.Text = esc((room - queueBytes(m)) / 6)
		m.Message.Text = pad(m.Message.Text, func(s string) int { c := m; c.Message.Text = s; return queueBytes(c) }, room)
		th.Queue = append(th.Queue, m)
	}
	th.History = nil
	used := 0
	for i := range MaxHistory {
		room := (MaxHistoryBytes - used) / (MaxHistory - i)
		m := schema.ChatMessage{Role: schema.RoleUser}
		m.Text = pad(esc((room-historySize(m))/6), func(s string) int { c := m; c.Text = s; return historySize(c) }, room)
		used += historySize(m)
		th.History = append(th.History, m)
	}
	th.LastTurnSeq, th.RunSeq = big, big-1
	pt := &PausedTurn{TurnID: th.TurnID, RunID: th.RunID, Agent: th.Agent, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
		RunSeq: big, Record: pauseKey(th.ID, big), TraceParent: tp, Grants: &grants}
	for i := range n {
		rs := schema.RequestedSchema{Type: "object", Properties: map[string]*schema.PropertySchema{"a": {Type: "string"}, "b": {Type: "string"}}}
		pt.Elicitations = append(pt.Elicitations, Elicitation{Status: StatusPending, PendingElicitation: events.PendingElicitation{
			ID: events.DerivedID("q", fmt.Sprint(i)), Kind: events.KindForm, Request: schema.ElicitRequestParams{Message: "?", RequestedSchema: rs}}})
	}
	if pausedBytes(pt) > MaxPausedBytes {
		return nil, false
	}
	for i := range pt.Elicitations {
		room := (MaxPausedBytes - pausedBytes(pt)) / (n - i)
		el := &pt.Elicitations[i]
		el.Request.Message = esc(room / 6)
		el.Request.Message = pad(el.Request.Message, func(s string) int { el.Request.Message = s; return pausedBytes(pt) },
			MaxPausedBytes-(n-i-1)*room)
	}
	for pausedBytes(pt) > MaxPausedBytes {
		el := &pt.Elicitations[0]
		el.Request.Message = el.Request.Message[:len(el.Request.Message)-1]
	}
	if err := applyPause(th, pt, id(100), big); err != nil {
		t.Fatal(err)
	}
	for i, el := range pt.Elicitations {
		content := func(k int) map[string]any { // k bytes of content, escaped past the field bound
			plain := min(k, events.MaxAnswerField)
			return map[string]any{"a": strings.Repeat("a", plain), "b": esc(min((k-plain)/6, events.MaxAnswerField))}
		}
		growth := func(k int) int {
			return answerGrowth(th.Paused.Find(el.ID), schema.ElicitResult{Action: schema.ActionAccept, Content: content(k)}, nil, who, id(200+i), now)
		}
		best, lo, hi := -1, 0, 4*answerRoom
		for lo <= hi {
			if mid := (lo + hi) / 2; growth(mid) <= answerRoom {
				best, lo = mid, mid+1
			} else {
				hi = mid - 1
			}
		}
		v := applyAnswer(th, id(200+i), events.ElicitationResponded{ElicitationID: el.ID, Action: schema.ActionAccept, Content: content(best)}, who, now)
		if !v.consumed {
			t.Fatalf("answer %d not consumed: %s %v", i, v.reason, v.errors)
		}
	}
	for i := range maxHandled {
		th.MarkHandled(id(300 + i))
		th.Refuse(id(500 + i))
		th.MarkAccepted(inputPrint(events.TypeElicitationResponded, id(700+i), who, nil))
	}
	var ids []string
	for _, el := range pt.Elicitations {
		ids = append(ids, el.ID)
	}
	th.Superseded = &Supersession{TurnID: th.TurnID, By: id(1), Started: id(2), Cancelled: ids}
	th.Expired = &Expiry{TurnID: th.TurnID, ElicitationIDs: ids, At: now, Record: pauseKey(th.ID, big)}
	th.UpdatedAt = now
	return th, true
}

// A message whose event ID the thread has handled already is taken for a
// redelivery before anyone checks who sent it: ownership is skipped, and
// the duplicate's echo republishes the event as received. Any principal
// that reads a thread's message ID from PARLEY_CHAT (every integrator
// does) can so publish its own text under that ID on the thread and have
// the processor echo it into the thread as an accepted user message of
// its own principal (through the gateway, the owner's claim then ends:
// the gateway takes a stranger's accepted message for a new owner). It
// must be refused like any other message of a stranger, and its refusal
// must not name m1, which the thread accepted (a client takes a refusal
// naming its message for the verdict on it).
func TestReplayedMessageIDFromStrangerNotEchoed(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	if err := h.messageAs(events.PrincipalGateway, "m1", 1, events.TurnRequested{User: "alice"}); err != nil {
		t.Fatal(err)
	}
	evil := events.TurnRequested{Message: schema.ChatMessage{Role: schema.RoleUser, Text: "evil: transfer everything"}}
	if err := h.messageAs(events.PrincipalIntegrator, "m1", 2, evil); err != nil {
		t.Fatal(err)
	}
	for _, e := range h.pub.of(events.TypeTurnRequested) {
		if id := events.EchoIdentity(e); id.Principal != events.PrincipalGateway || id.OnBehalfOf != "alice" {
			d, _ := events.Data[events.TurnRequested](e)
			t.Errorf("echoed into alice's thread: %s from %v: %q", e.ID(), id, d.Message.Text)
		}
	}
	if r := turnRejectedFor(h, "m1"); r != "" {
		t.Errorf("the stranger's message under m1's ID: a refusal naming m1 (%s) in alice's thread", r)
	}
	if th := h.stored(); len(th.Queue) != 0 || th.LastTurnSeq != 2 {
		t.Errorf("after the stranger's message: queue %d, LastTurnSeq %d; want nothing queued, the message dealt with", len(th.Queue), th.LastTurnSeq)
	}
}

// The answer that consumed a question, redelivered, is finished (echoed,
// resumed) at any time. A party of the thread other than its answerer
// (bob, whom alice shared the thread with) publishes his own answer under
// the ID of alice's (it is in PARLEY_CHAT): it must not be taken for the
// redelivery, whose echo would record in the thread that bob answered,
// and how he did, when alice declined.
func TestWinningAnswerIDFromAnotherPartyNotEchoed(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	bob := events.Identity{Principal: events.PrincipalGateway, OnBehalfOf: "bob"}
	if err := h.messageAs(events.PrincipalGateway, "m1", 1, events.TurnRequested{User: "alice", Share: []events.Identity{bob}}); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1", "q2")
	respond := func(by string, action schema.ElicitAction) {
		e, err := events.NewWithID("a1", "/test", events.TypeElicitationResponded, "t",
			events.ElicitationResponded{ElicitationID: "q1", Action: action, AnsweredBy: by})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, StreamSeq: 100, NumDelivered: 1,
			Subject: events.InputSubject(events.PrincipalGateway, "t", events.ChatElicitationResponded)}); err != nil {
			t.Fatal(err)
		}
	}
	respond("alice", schema.ActionDecline)
	respond("bob", schema.ActionAccept) // bob, under alice's answer's ID
	for _, e := range h.pub.of(events.TypeElicitationResponded) {
		d, _ := events.Data[events.ElicitationResponded](e)
		if who := events.EchoIdentity(e); who.OnBehalfOf != "alice" || d.Action != schema.ActionDecline {
			t.Errorf("echoed as the answer to q1: %s by %v", d.Action, who)
		}
	}
	if el := h.paused().Find("q1"); el.Result.Action != schema.ActionDecline || el.AnsweredBy.OnBehalfOf != "alice" {
		t.Fatalf("q1 = %s by %v; want alice's decline", el.Result.Action, el.AnsweredBy)
	}
}

// A refusal carries the refused sender's principal (the extension
// attribute principal, as an echo does), so that a client matches only
// refusals of its own events: a refusal names the event by the ID its
// sender chose, which may be another principal's (client.Deliver).
func TestRefusalsNameTheRefusedPrincipal(t *testing.T) {
	h := newHarness(t)
	h.p.opts.TrustedPrincipals = DefaultTrustedPrincipals
	if err := h.messageAs(events.PrincipalGateway, "m1", 1, events.TurnRequested{User: "alice"}); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	if err := h.messageAs("mallory", "x1", 2, events.TurnRequested{}); err != nil { // forbidden
		t.Fatal(err)
	}
	h.answerAs("mallory", "x2", "q1", "") // forbidden
	e, err := events.NewWithID("x3", "/test", events.TypeElicitationResponded, "t", events.ElicitationResponded{
		ElicitationID: "q1", Action: "maybe"}) // invalid
	if err != nil {
		t.Fatal(err)
	}
	if err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, StreamSeq: 101, NumDelivered: 1,
		Subject: events.InputSubject("mallory", "t", events.ChatElicitationResponded)}); err != nil {
		t.Fatal(err)
	}
	h.answerAs(events.PrincipalGateway, "x4", "nope", "alice") // unknown, alice's
	want := map[string]events.Identity{"x1": {Principal: "mallory"}, "x2": {Principal: "mallory"}, "x3": {Principal: "mallory"},
		"x4": {Principal: events.PrincipalGateway, OnBehalfOf: "alice"}}
	got := map[string]events.Identity{}
	for _, e := range append(h.pub.of(events.TypeTurnRejected), h.pub.of(events.TypeElicitationRejected)...) {
		var d struct {
			Request   string `json:"requestEventId"`
			Responded string `json:"respondedEventId"`
		}
		_ = json.Unmarshal(e.Data(), &d)
		got[d.Request+d.Responded] = events.EchoIdentity(e)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("the refusal of %s names %+v, want %+v", id, got[id], w)
		}
	}
}

// An answer whose attributes (an unbounded extension) would bring its
// echo over JetStream's header limit is rejected before it consumes the
// question: consumed, its echo failing, it would resume nothing and leave
// the turn running for ever (e2e TestMessageWhoseEchoIsTooLargeDoesNotStickItsThread).
func TestAnswerWithHugeAttributesRejectedBeforeConsuming(t *testing.T) {
	h := newHarness(t)
	if err := h.message("m1", 1); err != nil {
		t.Fatal(err)
	}
	h.pause("m1", "p1", 10, "q1")
	e, err := events.NewWithID("a1", "/test", events.TypeElicitationResponded, "t", events.ElicitationResponded{
		ElicitationID: "q1", Action: schema.ActionAccept})
	if err != nil {
		t.Fatal(err)
	}
	e.SetExtension("pad", strings.Repeat("a", MaxAttributeBytes))
	if err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, StreamSeq: 100, NumDelivered: 1,
		Subject: events.InputSubject(events.PrincipalIntegrator, "t", events.ChatElicitationResponded)}); err != nil {
		t.Fatal(err)
	}
	if r := rejectedFor(h, "a1"); r != events.RejectInvalidEvent {
		t.Errorf("rejection %q, want invalid_event", r)
	}
	if el := h.paused().Find("q1"); el.Status != StatusPending {
		t.Fatalf("q1 = %s; want still pending", el.Status)
	}
}

// A turn's ID derives from its message's event ID, which the sender
// chooses, and every integrator reads the IDs of accepted messages in
// PARLEY_CHAT. An integrator that sends, on a thread of its own, a
// message under the ID of another party's message gets the same turn ID,
// and had the same run ID: the agent keys its run record, the questions'
// IDs and the decision records (what the tool-executor checks before it
// runs a tool) by the run ID. Read from workers/agent (not run end to end:
// it needs run.requested's 2-minute duplicate window to pass): the agent
// then continues the victim's stored run for the attacker's run.requested
// (onRequested, on the conflicting create), and the attacker's in-memory
// run records an allow decision under the victim's run and call ID
// before that conflict (advance, decide), so the victim's confirmed call
// later meets a record of another tool or arguments at the tool-executor
// and is refused. Runs of different threads must be different runs.
func TestSameMessageIDOnTwoThreadsRunsSeparately(t *testing.T) {
	h := newHarness(t)
	send := func(principal, thread string, seq uint64) {
		e, err := events.NewWithID("m1", "/test", events.TypeTurnRequested, thread, events.TurnRequested{
			Message: schema.ChatMessage{Role: schema.RoleUser, Text: "create an event"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.p.HandleInput(h.ctx, &bus.Delivery{Event: e, StreamSeq: seq, NumDelivered: 1,
			Subject: events.InputSubject(principal, thread, events.ChatTurnRequested)}); err != nil {
			t.Fatal(err)
		}
	}
	send(events.PrincipalIntegrator, "t", 1)
	send("mallory", "u", 2)
	runs := map[string]string{}
	for _, e := range h.pub.of(events.TypeRunRequested) {
		d, _ := events.Data[events.RunRequested](e)
		runs[d.Thread] = d.RunID
	}
	if len(runs) != 2 || runs["t"] == runs["u"] {
		t.Fatalf("runs by thread %v; want two different runs", runs)
	}
}
