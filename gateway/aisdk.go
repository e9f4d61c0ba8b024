package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// The Vercel AI SDK's UI message stream (package `ai` 7, `useChat` with
// `DefaultChatTransport`) over parley's threads: docs/AI-SDK.md.

// AI SDK routes: the chat endpoint DefaultChatTransport POSTs to, and the
// stream its reconnectToStream (useChat's resume: true) GETs.
var (
	RouteAISDKChat   = Route{http.MethodPost, "/v1/ai-sdk/chat"}
	RouteAISDKStream = Route{http.MethodGet, "/v1/ai-sdk/chat/{id}/stream"}
)

// AISDKStreamHeader is the response header that marks the UI message
// stream protocol (the AI SDK's UI_MESSAGE_STREAM_HEADERS).
const AISDKStreamHeader = "x-vercel-ai-ui-message-stream"

// MaxUIMessageIDBytes bounds a UI message's id (it derives the event ID
// of what it publishes); a longer one is refused 400.
const MaxUIMessageIDBytes = 256

// UI message parts parley defines (docs/AI-SDK.md).
const (
	// UIPartForm carries a form question: {elicitationId, question: MCP
	// elicitation/create params}.
	UIPartForm = "data-parley-form"
	// UIPartFormResponse, in a user message, answers a form question:
	// {elicitationId, action, content?}.
	UIPartFormResponse = "data-parley-form-response"
	// UIPartProgress is the turn's progress: {progress, message?, status?}.
	UIPartProgress = "data-parley-progress"
	// UIPartSuggestions are the answer's suggested replies: {suggestions}.
	UIPartSuggestions = "data-parley-suggestions"
)

// AISDKChatRequest is the body DefaultChatTransport POSTs: the chat's id
// (the thread), its messages, what triggered the request, the message it
// is about, and, from the transport's `body` option, the agent.
type AISDKChatRequest struct {
	// ID is the chat's ID: the thread (a token, see events.ValidToken).
	ID string `json:"id"`
	// Messages are the chat's UI messages; parley reads the last one (a
	// new user message, or the assistant message carrying approvals) and
	// keeps the conversation itself.
	Messages []UIMessage `json:"messages"`
	// Trigger is "submit-message" (the only one parley serves: it does
	// not regenerate an answer).
	Trigger string `json:"trigger"`
	// MessageID names the message the request is about (the assistant
	// message of an approval); optional.
	MessageID string `json:"messageId,omitempty"`
	// Agent names the agent that answers a new message; optional.
	Agent string `json:"agent,omitempty"`
}

// UIMessage is an AI SDK UIMessage: parts are read by type, and only those
// parley acts on are checked (text and data-parley-form-response parts of
// a user message, tool parts in state approval-responded).
type UIMessage struct {
	ID       string            `json:"id"`
	Role     string            `json:"role"`
	Parts    []json.RawMessage `json:"parts"`
	Metadata json.RawMessage   `json:"metadata,omitempty"`
}

// uiPart holds the members of a UI part parley reads.
type uiPart struct {
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	ToolCallID string          `json:"toolCallId"`
	State      string          `json:"state"`
	Input      json.RawMessage `json:"input"`
	Approval   *struct {
		ID       string `json:"id"`
		Approved *bool  `json:"approved"`
		Reason   string `json:"reason"`
	} `json:"approval"`
	Data json.RawMessage `json:"data"`
}

// FormResponse is the data of a data-parley-form-response part: the
// answer to the form question elicitationId (an MCP ElicitResult).
type FormResponse struct {
	ElicitationID string              `json:"elicitationId"`
	Action        schema.ElicitAction `json:"action"`
	Content       map[string]any      `json:"content,omitempty"`
}

func badField(w http.ResponseWriter, path, rule string) {
	writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest, Detail: path + ": " + rule,
		Errors: []schema.Violation{{Path: path, Rule: rule}}})
}

// approval is one tool part in state approval-responded.
type approval struct {
	path       string
	id, callID string
	approved   bool
	reason     string
	input      json.RawMessage
}

func (g *Gateway) postAISDKChat(w http.ResponseWriter, r *http.Request, user string) {
	var req AISDKChatRequest
	if !decodeBody(w, r, &req) {
		return
	}
	thread := req.ID
	if err := events.ValidToken("thread", thread); err != nil {
		badField(w, "id", err.Error())
		return
	}
	if req.Trigger != "submit-message" {
		badField(w, "trigger", `must be "submit-message" (parley does not regenerate an answer)`)
		return
	}
	if len(req.Messages) == 0 {
		badField(w, "messages", "must hold at least one message")
		return
	}
	if req.Agent != "" {
		if err := events.ValidToken("agent", req.Agent); err != nil {
			badField(w, "agent", err.Error())
			return
		}
	}
	at := len(req.Messages) - 1
	if req.MessageID != "" {
		at = -1
		for i, m := range req.Messages {
			if m.ID == req.MessageID {
				at = i
			}
		}
		if at < 0 {
			badField(w, "messageId", "must name one of the messages")
			return
		}
		if at != len(req.Messages)-1 {
			// The messages after it would go unread: a new text after an
			// approval, or an approval after a text.
			badField(w, "messageId", fmt.Sprintf("must name the last message (messages[%d]): messages after it are not read", len(req.Messages)-1))
			return
		}
	}
	m := req.Messages[at]
	base := fmt.Sprintf("messages[%d]", at)
	if m.ID == "" || len(m.ID) > MaxUIMessageIDBytes {
		badField(w, base+".id", fmt.Sprintf("required, at most %d bytes", MaxUIMessageIDBytes))
		return
	}
	parts := make([]uiPart, len(m.Parts))
	for i, raw := range m.Parts {
		path := fmt.Sprintf("%s.parts[%d]", base, i)
		if err := json.Unmarshal(raw, &parts[i]); err != nil || parts[i].Type == "" {
			badField(w, path, "must be an object with a type")
			return
		}
		// The members parley reads are matched exactly, as decodeBody
		// does for the body: {"approved": false, "Approved": true} reads
		// as a decline to a proxy, a log or the AI SDK and as an approval
		// to encoding/json (the last spelling wins).
		if vs := exactMembers(raw, reflect.TypeFor[uiPart]()); len(vs) > 0 {
			badField(w, path+"."+vs[0].Path, vs[0].Rule+" (member names are case-sensitive)")
			return
		}
	}
	// One stream per request, counted before anything is published.
	if !g.openStream(user) {
		w.Header().Set("Retry-After", "5")
		writeProblem(w, Problem{Status: http.StatusTooManyRequests, Reason: ReasonRateLimited,
			Detail: "too many open event streams for this user"})
		return
	}
	defer g.closeStream(user)
	switch m.Role {
	case "user":
		// A form answer is the message's only part parley acts on: text
		// beside it, or a second answer, would be dropped unread.
		form, text := -1, -1
		for i, p := range parts {
			switch {
			case p.Type == UIPartFormResponse && form >= 0:
				badField(w, fmt.Sprintf("%s.parts[%d]", base, i), "a message answers one form: parts["+strconv.Itoa(form)+"] already does")
				return
			case p.Type == UIPartFormResponse:
				form = i
			case p.Type == "text" && text < 0:
				text = i
			}
		}
		if form >= 0 && text >= 0 {
			badField(w, fmt.Sprintf("%s.parts[%d]", base, text), "a message answering a form (parts["+strconv.Itoa(form)+"]) carries no text: send the text as a message of its own")
			return
		}
		if form >= 0 {
			g.aisdkFormAnswer(w, r, user, thread, m.ID, fmt.Sprintf("%s.parts[%d].data", base, form), parts[form].Data)
			return
		}
		g.aisdkMessage(w, r, user, thread, req.Agent, m.ID, base, parts)
	case "assistant":
		var as []approval
		for i, p := range parts {
			if (p.Type != "dynamic-tool" && !strings.HasPrefix(p.Type, "tool-")) || p.State != "approval-responded" {
				continue
			}
			path := fmt.Sprintf("%s.parts[%d]", base, i)
			if p.Approval == nil || p.Approval.ID == "" {
				badField(w, path+".approval.id", "required in state approval-responded")
				return
			}
			if p.Approval.Approved == nil {
				badField(w, path+".approval.approved", "required in state approval-responded")
				return
			}
			if j := slices.IndexFunc(as, func(a approval) bool { return a.id == p.Approval.ID }); j >= 0 {
				badField(w, path+".approval.id", "answers the question "+as[j].path+" already answers: one answer per question")
				return
			}
			as = append(as, approval{path: path, id: p.Approval.ID, callID: p.ToolCallID, approved: *p.Approval.Approved,
				reason: p.Approval.Reason, input: p.Input})
		}
		if len(as) == 0 {
			badField(w, base, "an assistant message must carry a tool part in state approval-responded (a new message is a user message)")
			return
		}
		g.aisdkApprovals(w, r, user, thread, as)
	default:
		badField(w, base+".role", `must be "user" (a new message or a form answer) or "assistant" (approvals)`)
	}
}

// aisdkMessage publishes the user message's text as turn.requested, as
// POST .../messages does, and streams its turn.
func (g *Gateway) aisdkMessage(w http.ResponseWriter, r *http.Request, user, thread, agent, msgID, base string, parts []uiPart) {
	var texts []string
	for i, p := range parts {
		switch {
		case p.Type == "text":
			texts = append(texts, p.Text)
		case p.Type == "step-start" || strings.HasPrefix(p.Type, "data-"):
		default:
			badField(w, fmt.Sprintf("%s.parts[%d].type", base, i), `a user message takes "text" parts (and a `+UIPartFormResponse+" part)")
			return
		}
	}
	from, err := g.owners.nextChatSeq(r.Context())
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	// The event ID derives from the thread, the user and the UI message's
	// ID: a retried request is the same message (JetStream drops the
	// copy; the processor takes a later copy for a redelivery).
	eventID := events.DerivedID("ai-sdk", thread, user, msgID)
	e, c, pending, ok := g.publishMessage(w, r, thread, user, MessageRequest{Text: strings.Join(texts, "\n\n"), Agent: agent}, eventID)
	if !ok {
		return
	}
	if pending {
		out, rej, err := g.owners.resolve(r.Context(), thread, user, c, e.ID(), pendingStreamWait)
		switch {
		case err != nil:
			g.unavailable(w, r, err)
			return
		case out == outcomeRejected && rej.Reason == events.RejectForbidden:
			g.notFound(w)
			return
		case out == outcomeRejected:
			writeProblem(w, Problem{Status: rejectionStatus(rej.Reason), Reason: rej.Reason,
				Detail: "the message was refused: " + rej.Reason, EventID: rej.RequestEventID, Errors: rej.Errors,
				Title: "message rejected: " + rej.Reason})
			return
		case out == outcomePending:
			writeProblem(w, Problem{Status: http.StatusServiceUnavailable, Reason: ReasonUnavailable, EventID: e.ID(),
				Detail: "no processor took the message yet; send the same message again (same id) to follow it"})
			return
		}
	}
	rec, err := g.owners.access(r.Context(), thread, user, 0)
	if !g.owned(w, r, err) {
		return
	}
	if seq, ok := g.echoSeq(r.Context(), thread, e.ID(), firstShown(rec)); ok {
		from = seq // a retry of a message already taken: replay its turn
	}
	turnID := events.DerivedID("turn", e.ID())
	g.streamUI(w, r, user, thread, rec, from, newTurnReader(g.opts.Principal, turnID, e.ID(), nil, nil, nil), turnID)
}

// echoSeq returns the stream sequence of the echo of the input eventID
// among thread's turn.requested and elicitation.responded events from
// first (at most MaxVerdictScan read).
func (g *Gateway) echoSeq(ctx context.Context, thread, eventID string, first uint64) (uint64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	subjects := []string{events.ChatSubject(thread, events.ChatTurnRequested), events.ChatSubject(thread, events.ChatElicitationResponded)}
	end, err := g.chatEnd(ctx)
	if err != nil || end < first {
		return 0, false
	}
	items, stop, err := g.follow(ctx, subjects, first)
	if err != nil {
		return 0, false
	}
	defer stop()
	for n := 0; n < MaxVerdictScan; n++ {
		it, ok := nextItem(ctx, items)
		if !ok {
			return 0, false
		}
		if it.ev != nil && it.ev.ID() == eventID && events.EchoIdentity(it.ev).Principal == g.opts.Principal {
			return it.seq, true
		}
		if it.numPending == 0 || it.seq >= end {
			return 0, false
		}
	}
	return 0, false
}

// lastPause reads the thread's last turn.paused.
func (g *Gateway) lastPause(ctx context.Context, thread string) (*events.TurnPaused, uint64, error) {
	ctx, cancel := bus.WithRequestTimeout(ctx)
	defer cancel()
	stream, err := g.bus.JetStream().Stream(ctx, events.StreamChat)
	if err != nil {
		return nil, 0, fmt.Errorf("opening %s: %w", events.StreamChat, err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, events.ChatSubject(thread, events.ChatTurnPaused))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading the last pause of %s: %w", thread, err)
	}
	ev, err := events.Decode(events.Header(m.Header), m.Data)
	if err != nil {
		return nil, 0, fmt.Errorf("decoding the last pause of %s: %w", thread, err)
	}
	d, err := events.Data[events.TurnPaused](ev)
	if err != nil {
		return nil, 0, fmt.Errorf("decoding the last pause of %s: %w", thread, err)
	}
	return &d, m.Sequence, nil
}

// pendingOf returns the thread's open questions (the processor's record,
// else the fold of its events) and the pause they belong to; it writes
// the problem and returns ok false when user may not use the thread or
// the bus is not reachable.
func (g *Gateway) pendingOf(w http.ResponseWriter, r *http.Request, user, thread string) (rec ThreadOwner, pending []schema.ElicitRequestParams, pause *events.TurnPaused, ok bool) {
	rec, err := g.owners.access(r.Context(), thread, user, 0)
	if !g.owned(w, r, err) {
		return rec, nil, nil, false
	}
	st, err := g.threadState(r.Context(), thread, rec)
	if !g.owned(w, r, err) {
		return rec, nil, nil, false
	}
	pause, _, err = g.lastPause(r.Context(), thread)
	if err != nil {
		g.unavailable(w, r, err)
		return rec, nil, nil, false
	}
	return rec, st.Pending, pause, true
}

// pendingQuestion finds the pending question id of the pause.
func pendingQuestion(pending []schema.ElicitRequestParams, pause *events.TurnPaused, id string) (schema.ElicitRequestParams, bool) {
	if pause == nil || !containsString(pause.ElicitationIDs, id) {
		return schema.ElicitRequestParams{}, false
	}
	for _, q := range pending {
		if qid, _ := q.Meta[schema.MetaElicitationID].(string); qid == id {
			return q, true
		}
	}
	return schema.ElicitRequestParams{}, false
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func gone(w http.ResponseWriter, path, id string) {
	writeProblem(w, Problem{Status: http.StatusGone, Reason: events.RejectUnknownOrExpired,
		Detail: fmt.Sprintf("%s: no pending question %q on this thread (answered, expired, withdrawn or unknown)", path, id),
		Errors: []schema.Violation{{Path: path, Rule: "must name a pending question of the thread"}}})
}

// aisdkApprovals answers each approval (approved: accept; else decline
// with the reason as instructions) through the gateway's answer path,
// after checking that each names a pending confirmation of this thread,
// of that tool call, with the arguments the client showed; then it
// streams the turn on.
func (g *Gateway) aisdkApprovals(w http.ResponseWriter, r *http.Request, user, thread string, as []approval) {
	rec, pending, pause, ok := g.pendingOf(w, r, user, thread)
	if !ok {
		return
	}
	var confirmations []schema.ElicitRequestParams
	for _, a := range as {
		q, found := pendingQuestion(pending, pause, a.id)
		if !found {
			gone(w, a.path+".approval.id", a.id)
			return
		}
		tc, isConfirm := toolCallOf(q)
		if !isConfirm {
			badField(w, a.path+".approval.id", "names a form question, not a tool confirmation: answer it with a "+UIPartFormResponse+" part")
			return
		}
		if a.callID != tc.ToolID {
			badField(w, a.path+".toolCallId", fmt.Sprintf("must be %q, the call the question confirms", tc.ToolID))
			return
		}
		if len(a.input) > 0 && !sameJSON(a.input, tc.Arguments) {
			badField(w, a.path+".input", "must equal the arguments of the call the question confirms (what runs is what was confirmed)")
			return
		}
		confirmations = append(confirmations, q)
	}
	from, err := g.owners.nextChatSeq(r.Context())
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	var ids []string
	for _, a := range as {
		ans := AnswerRequest{Action: schema.ActionAccept}
		if !a.approved {
			ans.Action = schema.ActionDecline
			if strings.TrimSpace(a.reason) != "" {
				ans.Content = map[string]any{schema.InstructionsProperty: a.reason}
			}
		}
		id := events.DerivedID("ai-sdk-answer", thread, user, a.id, string(ans.Action))
		if _, ok := g.publishAnswer(w, r, thread, user, a.id, id, ans); !ok {
			return
		}
		ids = append(ids, id)
	}
	g.streamUI(w, r, user, thread, rec, from, newTurnReader(g.opts.Principal, pause.TurnID, "", ids, pause, confirmations), "")
}

// aisdkFormAnswer answers a form question from a data-parley-form-response
// part and streams the turn on, as a new assistant message.
func (g *Gateway) aisdkFormAnswer(w http.ResponseWriter, r *http.Request, user, thread, msgID, path string, data json.RawMessage) {
	var fr FormResponse
	if vs := exactMembers(data, reflect.TypeFor[FormResponse]()); len(vs) > 0 {
		badField(w, path+"."+vs[0].Path, vs[0].Rule+" (member names are case-sensitive)")
		return
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fr); err != nil {
		rule := "must be {elicitationId, action, content?}: " + err.Error()
		if name, ok := unknownField(err); ok {
			path, rule = path+"."+name, events.RuleUnknownMember
		}
		badField(w, path, rule)
		return
	}
	if err := events.ValidToken("elicitation id", fr.ElicitationID); err != nil {
		badField(w, path+".elicitationId", err.Error())
		return
	}
	switch fr.Action {
	case schema.ActionAccept, schema.ActionDecline, schema.ActionCancel:
	default:
		badField(w, path+".action", `must be "accept", "decline" or "cancel"`)
		return
	}
	rec, pending, pause, ok := g.pendingOf(w, r, user, thread)
	if !ok {
		return
	}
	q, found := pendingQuestion(pending, pause, fr.ElicitationID)
	if !found {
		gone(w, path+".elicitationId", fr.ElicitationID)
		return
	}
	if _, isConfirm := toolCallOf(q); isConfirm {
		badField(w, path+".elicitationId", "names a tool confirmation: answer it through the tool part's approval (addToolApprovalResponse)")
		return
	}
	from, err := g.owners.nextChatSeq(r.Context())
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	// The question is part of the ID: a client reusing a message id for
	// another answer must not have it dropped as a retry of the first.
	id := events.DerivedID("ai-sdk-answer", thread, user, msgID, fr.ElicitationID)
	if _, ok := g.publishAnswer(w, r, thread, user, fr.ElicitationID, id, AnswerRequest{Action: fr.Action, Content: fr.Content}); !ok {
		return
	}
	g.streamUI(w, r, user, thread, rec, from, newTurnReader(g.opts.Principal, pause.TurnID, "", []string{id}, pause, nil),
		"msg-"+events.DerivedID("ai-sdk-reply", thread, msgID))
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	if len(b) == 0 {
		y = nil
	}
	return reflect.DeepEqual(x, y)
}

// getAISDKStream replays the thread's current part of a turn (from its
// message, or from the answers that resumed it) and follows it to its
// end; 204 when no turn runs (the last one ended or paused: its stream
// finished).
func (g *Gateway) getAISDKStream(w http.ResponseWriter, r *http.Request, user string) {
	thread := r.PathValue("id")
	if err := events.ValidToken("thread", thread); err != nil {
		badField(w, "id", err.Error())
		return
	}
	if !g.openStream(user) {
		w.Header().Set("Retry-After", "5")
		writeProblem(w, Problem{Status: http.StatusTooManyRequests, Reason: ReasonRateLimited,
			Detail: "too many open event streams for this user"})
		return
	}
	defer g.closeStream(user)
	rec, err := g.owners.access(r.Context(), thread, user, pendingStreamWait)
	if !g.owned(w, r, err) {
		return
	}
	last, err := g.lastTurnEvent(r.Context(), thread)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if last.ev == nil || last.seq < firstShown(rec) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	switch events.TypeOf(last.ev) {
	case events.TypeTurnRequested:
		turnID := events.DerivedID("turn", last.ev.ID())
		g.streamUI(w, r, user, thread, rec, last.seq, newTurnReader(g.opts.Principal, turnID, last.ev.ID(), nil, nil, nil), turnID)
	case events.TypeElicitationResponded:
		pause, seq, err := g.lastPause(r.Context(), thread)
		if err != nil {
			g.unavailable(w, r, err)
			return
		}
		if pause == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		g.streamUI(w, r, user, thread, rec, seq+1, newTurnReader(g.opts.Principal, pause.TurnID, "", []string{last.ev.ID()}, pause, nil), "")
	default: // the turn ended or paused: no stream is active
		w.WriteHeader(http.StatusNoContent)
	}
}

// lastTurnEvent returns the thread's newest event among those that start,
// resume, pause or end a turn.
func (g *Gateway) lastTurnEvent(ctx context.Context, thread string) (item, error) {
	ctx, cancel := bus.WithRequestTimeout(ctx)
	defer cancel()
	stream, err := g.bus.JetStream().Stream(ctx, events.StreamChat)
	if err != nil {
		return item{}, fmt.Errorf("opening %s: %w", events.StreamChat, err)
	}
	var last item
	for _, s := range []string{events.ChatTurnRequested, events.ChatElicitationResponded, events.ChatTurnPaused,
		events.ChatTurnCompleted, events.ChatTurnFailed, events.ChatElicitationCancelled, events.ChatElicitationExpired} {
		m, err := stream.GetLastMsgForSubject(ctx, events.ChatSubject(thread, s))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return item{}, fmt.Errorf("reading the last %s of %s: %w", s, thread, err)
		}
		if m.Sequence <= last.seq {
			continue
		}
		ev, err := events.Decode(events.Header(m.Header), m.Data)
		if err != nil {
			continue
		}
		last = item{seq: m.Sequence, time: m.Time, ev: ev}
	}
	return last, nil
}

// streamUI writes the UI message stream of one part of a turn: the
// thread's events from stream sequence from, read by rd, as chunks (a
// `start` with messageID when not "", then the parts), until the part
// ends, the client goes, the gateway shuts down (no finish: the client
// resumes with GET .../stream) or the user may no longer read the thread.
func (g *Gateway) streamUI(w http.ResponseWriter, r *http.Request, user, thread string, rec ThreadOwner, from uint64, rd *turnReader, messageID string) {
	ctx := r.Context()
	changed, unsubscribe := g.access.subscribe(thread)
	defer unsubscribe()
	epoch := g.owners.reader(thread, rec)
	items, stop, err := g.follow(ctx, []string{events.ChatThreadSubjects(thread)}, max(from, firstShown(rec)))
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	defer stop()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set(AISDKStreamHeader, "v1")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	flush := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
		if bw.Flush() != nil {
			return false
		}
		return rc.Flush() == nil
	}
	m := &uiMapper{emit: func(c uiChunk) {
		b, err := json.Marshal(c)
		if err != nil {
			return
		}
		bw.WriteString("data: ")
		bw.Write(b)
		bw.WriteString("\n\n")
	}}
	m.begin(messageID)
	if !flush() {
		return
	}
	beat := time.NewTicker(g.opts.Heartbeat)
	defer beat.Stop()
	recheck := time.NewTicker(g.opts.AccessRecheck)
	defer recheck.Stop()
	end := func(detail string) {
		m.fail(detail)
		bw.WriteString("data: [DONE]\n\n")
		flush()
	}
	for {
		select {
		case it, ok := <-items:
			if !ok {
				return
			}
			if err := epoch.shows(ctx, it.seq, it.time, it.ev); err != nil {
				end("the thread's owner changed")
				return
			}
			parts, done := rd.read(it.ev)
			for _, p := range parts {
				m.part(p)
			}
			if done {
				bw.WriteString("data: [DONE]\n\n")
				flush()
				return
			}
			if len(items) == 0 && !flush() {
				return
			}
		case <-beat.C:
			bw.WriteString(": heartbeat\n\n")
			if !flush() {
				return
			}
		case t := <-changed:
			if !t.allows(user) {
				end("access to the thread was revoked")
				return
			}
		case <-recheck.C:
			if err := g.owners.check(ctx, thread, user); errors.Is(err, errNotOwner) {
				end("access to the thread was revoked")
				return
			}
		case <-g.closing:
			flush() // no finish: the client resumes (GET .../stream)
			return
		case <-ctx.Done():
			return
		}
	}
}

// uiChunk is one UI message stream chunk (uiMessageChunkSchema of `ai`).
type uiChunk map[string]any

// uiMapper maps TurnParts to UI message stream chunks.
type uiMapper struct {
	emit func(uiChunk)
	// text is the open text part's ID ("" none), stream the delta stream
	// it shows, streamed its text, step the model call.
	text, stream, streamed string
	step                   int
	n                      int
	confirm                bool
}

func (m *uiMapper) begin(messageID string) {
	c := uiChunk{"type": "start"}
	if messageID != "" {
		c["messageId"] = messageID
	}
	m.emit(c)
	m.emit(uiChunk{"type": "start-step"})
}

func (m *uiMapper) textPart(text string) {
	m.n++
	id := "text-" + strconv.Itoa(m.n)
	m.emit(uiChunk{"type": "text-start", "id": id})
	m.emit(uiChunk{"type": "text-delta", "id": id, "delta": text})
	m.emit(uiChunk{"type": "text-end", "id": id})
}

func (m *uiMapper) closeText() {
	if m.text != "" {
		m.emit(uiChunk{"type": "text-end", "id": m.text})
		m.text, m.stream, m.streamed = "", "", ""
	}
}

func (m *uiMapper) part(p TurnPart) {
	switch p.Kind {
	case PartTextDelta:
		if m.text != "" && m.stream != p.Stream {
			if m.step == p.Step {
				// A newer generation or attempt of the step: its earlier
				// text is void; reset-step drops the step's parts.
				m.emit(uiChunk{"type": "reset-step"})
				m.emit(uiChunk{"type": "start-step"})
				m.text, m.stream, m.streamed = "", "", ""
			} else {
				m.closeText()
				m.emit(uiChunk{"type": "finish-step"})
				m.emit(uiChunk{"type": "start-step"})
			}
		}
		if m.text == "" {
			m.n++
			m.text, m.stream, m.step = "text-"+strconv.Itoa(m.n), p.Stream, p.Step
			m.emit(uiChunk{"type": "text-start", "id": m.text})
		}
		m.streamed += p.Text
		m.emit(uiChunk{"type": "text-delta", "id": m.text, "delta": p.Text})
	case PartText:
		switch {
		case m.text != "" && strings.HasPrefix(p.Text, m.streamed):
			if rest := p.Text[len(m.streamed):]; rest != "" {
				m.emit(uiChunk{"type": "text-delta", "id": m.text, "delta": rest})
			}
			m.closeText()
		case m.text != "":
			// The final answer differs from the preview: replace it.
			m.emit(uiChunk{"type": "reset-step"})
			m.emit(uiChunk{"type": "start-step"})
			m.text, m.stream, m.streamed = "", "", ""
			fallthrough
		case p.Text != "":
			if p.Text != "" {
				m.textPart(p.Text)
			}
		}
	case PartToolRan:
		t := p.Tool
		if !p.InputShown {
			m.input(t.CallID, t.Tool, t.Arguments, nil)
		}
		switch {
		case t.OutcomeUnknown:
			m.emit(uiChunk{"type": "tool-output-error", "toolCallId": t.CallID, "dynamic": true,
				"errorText": "outcome unknown: the call was sent to the tool and no result came back (it may have run)"})
		case t.IsError:
			m.emit(uiChunk{"type": "tool-output-error", "toolCallId": t.CallID, "dynamic": true,
				"errorText": nonEmpty(toolResultContent(t.Tool, t.Summary), "the tool reported an error")})
		default:
			// The summary is the tool's words (an MCP server's too):
			// worded as parley's own note, it is labelled with the tool.
			m.emit(uiChunk{"type": "tool-output-available", "toolCallId": t.CallID, "dynamic": true,
				"output": map[string]any{"summary": toolResultContent(t.Tool, t.Summary)}})
		}
	case PartToolDenied:
		if !p.InputShown {
			m.input(p.Decision.CallID, p.Decision.Tool, nil, nil)
		}
		m.emit(uiChunk{"type": "tool-output-denied", "toolCallId": p.Decision.CallID})
	case PartToolVetoed:
		// Not run: the part ends in output-error (a page shows the reason)
		// whose text and providerMetadata say the call did not run, as
		// AG-UI's TOOL_CALL_RESULT does.
		d := p.Decision
		m.input(d.CallID, d.Tool, nil, nil)
		text, _ := blockedNote(d)
		meta := map[string]any{"notRun": true}
		if d.Decision == events.DecisionVeto {
			meta["vetoed"] = true
		}
		m.emit(uiChunk{"type": "tool-output-error", "toolCallId": d.CallID, "dynamic": true, "errorText": text,
			"providerMetadata": map[string]any{"parley": meta}})
	case PartConfirmation:
		tc, _ := toolCallOf(p.Question)
		// destructive is parley's reading of the hints (MCP's defaults for
		// absent ones, as the web chat reads them): an untrusted server's
		// tool has no annotations, and a page that looked for
		// destructiveHint: true would draw it as harmless.
		meta := map[string]any{"elicitationId": p.QuestionID, "message": p.Question.Message,
			"destructive": !tc.Annotations.ReadOnly() && tc.Annotations.Destructive()}
		if tc.Annotations != nil {
			meta["annotations"] = tc.Annotations
		}
		m.input(tc.ToolID, tc.Name, tc.Arguments, map[string]any{"parley": meta})
		m.emit(uiChunk{"type": "tool-approval-request", "approvalId": p.QuestionID, "toolCallId": tc.ToolID, "reason": p.Question.Message})
		m.confirm = true
	case PartForm:
		// A page shows the question's message: an MCP server's is framed
		// as the server's (askedMessage), in data.message and in the
		// question itself, so its words never read as parley's.
		q := p.Question
		q.Message = askedMessage(q)
		m.emit(uiChunk{"type": UIPartForm, "id": p.QuestionID, "data": map[string]any{"elicitationId": p.QuestionID,
			"message": q.Message, "question": q}})
	case PartProgress:
		d := map[string]any{"progress": p.Progress.Progress}
		if p.Progress.Message != "" {
			d["message"] = p.Progress.Message
		}
		if s, ok := p.Progress.Meta[schema.MetaStatusItem].(string); ok {
			d["status"] = s
		}
		m.emit(uiChunk{"type": UIPartProgress, "id": "progress", "data": d})
	case PartSources:
		for i, s := range p.Sources {
			c := uiChunk{"type": "source-url", "sourceId": "source-" + strconv.Itoa(i+1), "url": s.URL}
			if s.Server != nil {
				// The link is an MCP server's: its title is the server's
				// words. Labelled in the title itself (a page that knows
				// nothing of parley shows it) and in providerMetadata.
				c["title"] = serverLabel(*s.Server) + nonEmpty(s.Title, s.URL)
				c["providerMetadata"] = map[string]any{"parley": map[string]any{"mcpServer": map[string]any{"name": s.Server.Name, "trusted": s.Server.Trusted}}}
			} else if s.Title != "" {
				c["title"] = s.Title
			}
			m.emit(c)
		}
	case PartSuggestions:
		m.emit(uiChunk{"type": UIPartSuggestions, "id": "suggestions", "data": map[string]any{"suggestions": p.Suggestions}})
	case PartEnd:
		m.closeText()
		switch p.End.How {
		case EndCompleted:
			m.emit(uiChunk{"type": "finish-step"})
			m.emit(uiChunk{"type": "finish", "finishReason": "stop"})
		case EndPaused:
			reason := "other"
			if m.confirm {
				reason = "tool-calls"
			}
			m.emit(uiChunk{"type": "finish-step"})
			m.emit(uiChunk{"type": "finish", "finishReason": reason})
		default:
			m.fail(endText(p.End))
		}
	}
}

// input emits tool-input-available for a call (a dynamic tool: the
// client does not know parley's tools).
func (m *uiMapper) input(callID, tool string, args json.RawMessage, meta map[string]any) {
	c := uiChunk{"type": "tool-input-available", "toolCallId": callID, "toolName": tool, "dynamic": true}
	if len(args) > 0 {
		c["input"] = args
	} else {
		c["input"] = map[string]any{}
	}
	if meta != nil {
		c["providerMetadata"] = meta
	}
	m.emit(c)
}

// fail ends the stream with an error chunk and a finish.
func (m *uiMapper) fail(text string) {
	m.closeText()
	m.emit(uiChunk{"type": "finish-step"})
	m.emit(uiChunk{"type": "error", "errorText": text})
	m.emit(uiChunk{"type": "finish", "finishReason": "error"})
}

func endText(e TurnEnd) string {
	switch e.How {
	case EndFailed:
		return "turn failed: " + e.Reason + ": " + e.Detail
	case EndRejected:
		return "refused: " + e.Reason + nonEmptyPrefix(": ", e.Detail)
	case EndWithdrawn:
		return "the question was withdrawn" + nonEmptyPrefix(": ", e.Reason)
	case EndExpired:
		return "the question expired unanswered"
	}
	return e.How
}

// serverLabel is the prefix of an MCP server's words in a chunk, as
// `parley chat` prints them: "[from MCP server evil, not trusted] ".
func serverLabel(s schema.MCPServerMeta) string {
	l := "[from MCP server " + nonEmpty(s.Name, "(unnamed)")
	if !s.Trusted {
		l += ", not trusted"
	}
	return l + "] "
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func nonEmptyPrefix(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}
