package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/client/threadstate"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// chatCmd is `parley chat`: a line-based terminal chat on one thread. Each
// input line is a user message; assistant messages, notices and questions
// (forms and tool confirmations) are rendered as they arrive on the thread.
type chatCmd struct {
	Thread string `name:"thread" short:"t" help:"Thread ID (A-Z a-z 0-9 _ -); default: a fresh chat-<random> thread."`
	AgentN string `name:"agent" short:"a" help:"Agent to answer (default: the processor's default agent)."`
	User   string `name:"user" help:"Your name as the chat shows it (default: $USER). Messages and answers are recorded under your NATS principal (--principal), not this name."`
	// PublishTimeout bounds the retries of one message or answer.
	PublishTimeout time.Duration `name:"publish-timeout" default:"30s" help:"How long to retry sending a message or answer (same event ID, so no duplicate) through a reconnect or a JetStream leader election."`
	principalFlag
}

// Validate checks the principal (kong calls it after parsing).
func (c *chatCmd) Validate() error { return c.principalFlag.check() }

// Run chats until stdin ends, the user types /quit, or the context is done
// (Ctrl-C); all of these end cleanly.
func (c *chatCmd) Run(e *env) error {
	e = e.withSafeOutput()
	thread := c.Thread
	if thread == "" {
		thread = "chat-" + shortID()
	}
	if err := events.ValidToken("--thread", thread); err != nil {
		return &exitError{code: 2, err: err}
	}
	if c.AgentN != "" {
		if err := events.ValidToken("--agent", c.AgentN); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	user := c.User
	if user == "" {
		user = os.Getenv("USER")
	}
	cl, done, err := integratorAs(e, c.Principal)
	if err != nil {
		return fmt.Errorf("%w (is `parley dev` running?)", err)
	}
	defer done()

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	// Follow the thread before anything is sent, so no answer is missed.
	// Link changes (disconnected, reconnected) are shown by the chat's
	// goroutine.
	status := make(chan client.WatchStatus, 8)
	s := &chatSession{
		ctx: ctx, out: e.stdout, status: status,
		lines: readLines(ctx, e.stdin), echo: !isTerminal(e.stdin),
		thread: thread, user: user, answered: map[string]bool{},
		unconfirmed: map[string]*event.Event{},
		titles:      entityTitles(ctx, cl), budget: c.PublishTimeout,
	}
	s.approvals = func(revoke string) (*events.ApprovalsReply, error) {
		return cl.Approvals(ctx, thread, "", revoke)
	}
	budget := c.PublishTimeout
	if budget <= 0 {
		budget = client.DefaultPublishBudget
	}
	// Say once per publish that it is retried, and why.
	cl = cl.WithRetry(client.RetryPolicy{Budget: budget, OnRetry: func(attempt int, err error) {
		if attempt == 1 {
			s.say("  (not confirmed yet: %s; retrying with the same ID for up to %s)", client.Explain(err), budget)
		}
	}})
	sess, err := cl.Follow(ctx, thread, &client.SessionOptions{Agent: c.AgentN, OnStatus: func(st client.WatchStatus) {
		select {
		case status <- st:
		default: // a burst of changes: the latest ones will do
		}
	}})
	if err != nil {
		return fmt.Errorf("%w (are parley's workers running on %s?)", err, e.NATS)
	}
	s.sess, s.items = sess, sess.Items()
	who := user
	if who == "" {
		who = "anonymous"
	}
	agent := c.AgentN
	if agent == "" {
		agent = "default"
	}
	fmt.Fprintf(e.stdout, "parley chat: thread %s, agent %s, you are %s.\n", thread, agent, who)
	fmt.Fprintln(e.stdout, "Type a message and press Enter; /ref <entity_type>:<id> makes the next message refer to a site entity; /quit or Ctrl-D ends the chat.")
	// Joining a paused thread: ask what it is waiting for.
	for _, q := range sess.Pending() {
		s.enqueue(q.ID, false)
	}
	if len(s.queue) > 0 {
		fmt.Fprintf(e.stdout, "The thread is waiting for %d answer(s).\n", len(s.queue))
	}
	return s.loop()
}

// shortID returns 8 random hex digits.
func shortID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// isTerminal reports whether f (a reader or writer) is a character device:
// a terminal, which echoes what is typed.
func isTerminal(rw any) bool {
	f, ok := rw.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// readLines reads r line by line on one goroutine; the channel is closed at
// the end of r (or when ctx is done).
func readLines(ctx context.Context, r io.Reader) <-chan string {
	out := make(chan string)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			select {
			case out <- strings.TrimRight(sc.Text(), "\r"):
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

const youPrompt = "you> "

var (
	// errAborted: the question being asked was withdrawn, expired or
	// answered elsewhere (chatSession.aborted says which).
	errAborted = errors.New("question aborted")
	// errQuestion: a question arrived while the prompt was idle.
	errQuestion = errors.New("question arrived")
	// errWatchClosed: the event stream stopped.
	errWatchClosed = errors.New("the event stream of the thread stopped")
	// errStop: the user stopped a form with !cancel or !decline.
	errStop = errors.New("stopped")
)

// chatSession is the UI of one chat on top of a client.Session (which
// folds the thread, publishes and validates): everything runs on the
// goroutine of loop, which multiplexes input lines and thread events.
type chatSession struct {
	ctx   context.Context
	sess  *client.Session
	out   io.Writer
	lines <-chan string
	items <-chan client.SessionItem
	// status carries the watch's link changes (nil in unit tests).
	status <-chan client.WatchStatus
	// budget bounds the retries of a publish (0: the client's default).
	budget time.Duration
	// titles looks up the title of a site entity by ID ("" when unknown;
	// nil: no lookups).
	titles func(id string) string
	// echo repeats input lines on out (when stdin is not a terminal).
	echo         bool
	thread, user string
	// approvals lists the thread's standing approvals, revoking revoke's
	// first when set (chat_approvals.go); nil in unit tests.
	approvals func(revoke string) (*events.ApprovalsReply, error)

	// answered holds the questions this chat answered whose settlement
	// has not arrived yet: the turn goes on meanwhile (waiting).
	answered map[string]bool
	// unconfirmed holds, by text, the messages whose publish was not
	// confirmed: typing the same text again resends the same event (same
	// ID), so JetStream drops it if the first one got through.
	unconfirmed map[string]*event.Event
	// queue holds the elicitation IDs waiting to be asked, in order.
	queue []string
	// asking is the elicitation being asked; aborted, when set, says why
	// it stopped before it was answered.
	asking, aborted string
	// prompt is the prompt on screen that no newline has ended yet.
	prompt string
	// progress drives the working indicator (chat_progress.go).
	progress progressState
	// refs are the context references the next message carries
	// (/ref <entity_type>:<id>), at most events.MaxReferences.
	refs []schema.Entity
}

// addRef adds the reference arg ("page:page-1") to the next message, or
// says what is wrong; "" lists the pending references.
func (s *chatSession) addRef(arg string) {
	if arg == "" {
		if len(s.refs) == 0 {
			s.say("  usage: /ref <entity_type>:<id> (e.g. /ref page:page-1): the next message refers to that entity")
			return
		}
		var names []string
		for _, r := range s.refs {
			names = append(names, r.EntityType+":"+r.ID)
		}
		s.say("  the next message refers to %s", strings.Join(names, ", "))
		return
	}
	e, err := events.ParseReference(arg)
	switch {
	case err != nil:
		s.say("! /ref: %v", err)
	case len(s.refs) >= events.MaxReferences:
		s.say("! /ref: a message refers to at most %d entities", events.MaxReferences)
	default:
		s.refs = append(s.refs, e)
		s.say("  the next message refers to %s:%s (parley checks that you may see it)", e.EntityType, e.ID)
	}
}

// loop runs the chat until input ends or the context is done.
func (s *chatSession) loop() error {
	for {
		for len(s.queue) > 0 {
			id := s.queue[0]
			s.queue = s.queue[1:]
			if err := s.ask(id); err != nil {
				return s.end(err)
			}
		}
		line, err := s.readLine(youPrompt, true)
		if errors.Is(err, errQuestion) {
			continue
		}
		if err != nil {
			return s.end(err)
		}
		text := strings.TrimSpace(line)
		switch text {
		case "":
			continue
		case "/quit", "/exit":
			return nil
		}
		if arg, ok := strings.CutPrefix(text, "/ref"); ok && (arg == "" || arg[0] == ' ') {
			s.addRef(strings.TrimSpace(arg))
			continue
		}
		if s.approvalsCommand(text) {
			continue
		}
		s.send(text)
	}
}

// send publishes a message, retrying (same event ID) through a reconnect
// or a leader election, and tells the truth when it is not confirmed: a
// message published while disconnected is sent on reconnect, so it may
// well arrive later. Typing the same text again resends the same event,
// which JetStream drops if the first got through.
func (s *chatSession) send(text string) {
	ev := s.unconfirmed[text]
	if ev != nil {
		s.say("  (sending it again with the same ID: if the first one got through, this one is dropped)")
	} else {
		var err error
		// No end user is named: the processor records the principal,
		// and refuses a name from a principal it does not trust to give one.
		if ev, err = s.sess.Message(text); err == nil && len(s.refs) > 0 {
			err = withReferences(ev, s.refs)
		}
		if err != nil {
			s.say("! %v", err)
			return
		}
		s.refs = nil
	}
	// Once confirmed, the session counts the turn as running: its
	// turn.requested may arrive after the end of input.
	ack, err := s.sess.Send(s.ctx, ev)
	switch {
	case err == nil:
		delete(s.unconfirmed, text)
		if ack.Duplicate {
			s.say("  (it had already arrived: not sent twice)")
		}
	case s.ctx.Err() != nil:
	case errors.Is(err, client.ErrNotConfirmed):
		s.unconfirmed[text] = ev
		s.say("! not confirmed yet: %s. It will be sent if the connection returns while the chat runs; "+
			"typing the same message again is safe (same ID, never run twice).", client.Explain(lastTry(err)))
	default:
		s.unconfirmed[text] = ev
		s.say("! the message was not sent: %s", client.Explain(err))
	}
}

// linkChanged shows a change of the link to the server; on reconnecting
// it resends the unconfirmed messages (same IDs: JetStream drops those
// that got through), since what nats.go flushed on reconnect may have
// reached the server before its stream was ready.
func (s *chatSession) linkChanged(st client.WatchStatus) {
	s.say("· %s", st)
	if st != client.WatchReconnected {
		return
	}
	texts := slices.Sorted(maps.Keys(s.unconfirmed))
	for _, text := range texts {
		ev := s.unconfirmed[text]
		if ev == nil {
			continue // confirmed meanwhile
		}
		if _, err := s.sess.Send(s.ctx, ev); err != nil {
			continue // still unconfirmed; it is resent on the next reconnect
		}
		if s.unconfirmed[text] != nil {
			delete(s.unconfirmed, text)
			s.say("  (your message %q arrived after all)", text)
		}
	}
}

// lastTry returns the error of the last try of an unconfirmed publish.
func lastTry(err error) error {
	var ue *client.UnconfirmedError
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// waiting reports whether a turn runs on the thread (and is not waiting
// for the user), so an answer is coming: the thread runs, or is paused
// only on questions this chat answered (their settlement is on its way).
func (s *chatSession) waiting() bool {
	if s.sess == nil {
		return false
	}
	switch s.sess.Status() {
	case threadstate.Running:
		return true
	case threadstate.Paused:
		for _, q := range s.sess.Pending() {
			if !s.answered[q.ID] {
				return false
			}
		}
		return true
	}
	return false
}

// end turns what stopped the loop into Run's result: the end of input
// (after the running turn has answered) and a done context are a clean end.
func (s *chatSession) end(err error) error {
	switch {
	case errors.Is(err, io.EOF):
		s.drain()
		return nil
	case s.ctx.Err() != nil:
		s.closePrompt()
		return nil
	}
	s.closePrompt()
	return err
}

// drain shows the events of a running turn after the end of input, until
// the turn ends or asks a question nobody can answer any more.
func (s *chatSession) drain() {
	if s.waiting() && len(s.queue) == 0 {
		s.say("(input ended; waiting for the answer, Ctrl-C quits)")
	}
	for s.waiting() && len(s.queue) == 0 {
		select {
		case it, ok := <-s.items:
			if !ok {
				return
			}
			s.handle(it)
		case <-s.silence():
			s.reportSilence()
		case st := <-s.status:
			s.linkChanged(st)
		case <-s.ctx.Done():
			return
		}
	}
	if len(s.queue) > 0 {
		s.say("(input ended; %d question(s) stay pending on thread %s)", len(s.queue), s.thread)
	}
	s.closePrompt()
}

// readLine shows prompt and returns the next input line, rendering the
// events that arrive meanwhile. It returns errAborted when the question
// being asked goes away and, if idle is set, errQuestion when a question
// arrives.
func (s *chatSession) readLine(prompt string, idle bool) (string, error) {
	for {
		if idle && len(s.queue) > 0 {
			return "", errQuestion
		}
		if s.asking != "" && s.aborted != "" {
			return "", errAborted
		}
		if !(prompt == youPrompt && s.waiting()) {
			s.show(prompt)
		}
		select {
		case l, ok := <-s.lines:
			if !ok {
				return "", io.EOF
			}
			if s.echo {
				if s.prompt == "" && prompt == youPrompt {
					s.write(youPrompt)
				}
				s.write(l + "\n")
			}
			s.prompt = "" // the typed newline ended the prompt's line
			return l, nil
		case it, ok := <-s.items:
			if !ok {
				if s.ctx.Err() != nil {
					return "", s.ctx.Err()
				}
				return "", errWatchClosed
			}
			s.handle(it)
		case <-s.silence():
			s.reportSilence()
		case st := <-s.status:
			s.linkChanged(st)
		case <-s.ctx.Done():
			return "", s.ctx.Err()
		}
	}
}

// show prints prompt unless it is already on screen.
func (s *chatSession) show(prompt string) {
	if s.prompt == prompt {
		return
	}
	s.closePrompt()
	fmt.Fprint(s.out, prompt)
	s.prompt = prompt
}

// closePrompt ends the line of a prompt on screen.
func (s *chatSession) closePrompt() {
	if s.prompt != "" {
		fmt.Fprintln(s.out)
		s.prompt = ""
	}
}

func (s *chatSession) write(text string) { fmt.Fprint(s.out, text) }

// say prints one or more lines below any open prompt.
func (s *chatSession) say(format string, args ...any) {
	s.closePrompt()
	fmt.Fprintf(s.out, format+"\n", args...)
}

// handle renders one event of the thread (the one renderer, chat mode)
// and updates the chat: questions to ask, settled questions to drop, the
// working indicator. The state itself is the session's fold.
func (s *chatSession) handle(it client.SessionItem) {
	if it.Err != nil {
		s.say("! unreadable event on %s: %v", it.Subject, it.Err)
		return
	}
	s.heardEvent(it.Change)
	if _, ok := it.Data.(events.TurnRequested); ok && it.Mine {
		for text, u := range s.unconfirmed {
			if u.ID() == it.Event.ID() {
				delete(s.unconfirmed, text)
				s.say("  (your message %q arrived after all)", text)
			}
		}
	}
	if text := render(it.Change, renderChat, it.Mine); text != "" && s.showing(it.Change, text) {
		s.say("%s", text)
	}
	if it.Opened != nil {
		// A new question, or one whose answer was refused: ask it (again).
		delete(s.answered, it.Opened.ID)
		s.enqueue(it.Opened.ID, it.Reopened)
	}
	s.settled(it.Settled)
}

// settled drops questions that can no longer be answered and says why:
// answered elsewhere, expired, withdrawn. This chat's own answers settle
// silently (it said "→ accepted").
func (s *chatSession) settled(ss []threadstate.Settled) {
	var expired, withdrawn []string
	reason := ""
	for _, st := range ss {
		delete(s.answered, st.ID)
		switch st.How {
		case threadstate.Expired:
			expired = append(expired, st.ID)
		case threadstate.Withdrawn:
			withdrawn, reason = append(withdrawn, st.ID), st.Reason
		default: // answered, declined or cancelled
			if s.sess.Mine(st.EventID) {
				continue
			}
			who := st.By.String()
			if who == "" {
				who = "someone"
			}
			note := fmt.Sprintf("%s answered elsewhere (%s)", who, st.How)
			switch {
			case s.asking == st.ID:
				s.aborted = "  · " + note
			case s.dequeue(st.ID):
				s.say("· a question was %s", note)
			}
		}
	}
	if len(expired) > 0 {
		s.settle(expired, "expired unanswered; the turn has ended")
	}
	if len(withdrawn) > 0 {
		why := "was withdrawn"
		if reason != "" {
			why += ": " + reason
		}
		s.settle(withdrawn, why)
	}
}

// settle drops questions that can no longer be answered and says why.
func (s *chatSession) settle(ids []string, why string) {
	n, current := 0, false
	for _, id := range ids {
		if s.asking == id {
			s.aborted, current = "  ! this question "+why, true
		} else if s.dequeue(id) {
			n++
		}
	}
	switch {
	case n > 1:
		s.say("! %d questions %s", n, why)
	case n == 1 || !current:
		s.say("! a question %s", why)
	}
}

// enqueue adds a question to ask, at the front when again is set; a
// question already queued or being asked is not added twice.
func (s *chatSession) enqueue(id string, again bool) {
	if s.asking == id || slices.Contains(s.queue, id) {
		return
	}
	if again {
		s.queue = append([]string{id}, s.queue...)
		return
	}
	s.queue = append(s.queue, id)
}

// dequeue removes a queued question and reports whether it was queued.
func (s *chatSession) dequeue(id string) bool {
	i := slices.Index(s.queue, id)
	if i < 0 {
		return false
	}
	s.queue = slices.Delete(s.queue, i, i+1)
	return true
}

// ask asks one question and sends the answer. Only the end of input, the
// context or the event stream stopping are errors.
func (s *chatSession) ask(id string) error {
	q, ok := s.sess.Question(id)
	if !ok {
		return nil // settled meanwhile
	}
	req := &q.Params
	s.asking, s.aborted = id, ""
	defer func() { s.asking, s.aborted = "", "" }()
	s.say("")
	var (
		res schema.ElicitResult
		err error
	)
	for _, l := range askedBy(req) {
		s.say("[%s]", l)
	}
	if req.IsToolConfirmation() {
		res, err = s.confirm(req)
	} else if req.IsURLMode() {
		res, err = s.urlConsent(req) // chat_url.go
	} else {
		res, err = s.form(req)
	}
	if errors.Is(err, errAborted) {
		s.say("%s", s.aborted)
		return nil
	}
	if errors.Is(err, io.EOF) {
		s.say("(input ended before the question was answered; it stays pending on thread %s)", s.thread)
	}
	if err != nil {
		return err
	}
	_, err = s.sess.Respond(s.ctx, id, res)
	var invalid *schema.ValidationError
	switch {
	case errors.Is(err, client.ErrNotPending):
		s.say("  ! %v", err) // settled while it was asked
		return nil
	case errors.As(err, &invalid):
		s.say("  ! %v", err)
		s.enqueue(id, true)
		return nil
	}
	if err != nil {
		if s.ctx.Err() != nil {
			return s.ctx.Err()
		}
		// A question answered nowhere stays pending: it is asked again
		// (a second copy of this answer, if the first arrives later, is
		// refused as already answered; nothing runs twice).
		s.say("! the answer was not confirmed: %s; asking again", client.Explain(lastTry(err)))
		s.enqueue(id, true)
		return nil
	}
	s.answered[id] = true
	if _, edited := res.Meta[schema.MetaArguments]; edited {
		s.say("  → accepted with your arguments")
		return nil
	}
	s.say("  → %s", actionWord(res.Action))
	return nil
}

func actionWord(a schema.ElicitAction) string {
	switch a {
	case schema.ActionAccept:
		return "accepted"
	case schema.ActionDecline:
		return "declined"
	case schema.ActionCancel:
		return "cancelled"
	}
	return string(a)
}

// confirm asks a tool confirmation: y accepts, n declines (and asks for
// optional instructions: what to do instead), c cancels.
func (s *chatSession) confirm(req *schema.ElicitRequestParams) (schema.ElicitResult, error) {
	s.say("? %s", indentRest(req.Message))
	tc, err := req.Meta.ToolCall()
	if err != nil || tc == nil {
		s.say("  (the tool call in _meta is unreadable: %v)", err)
	} else {
		s.say("  tool:        %s", tc.Name)
		s.say("  arguments:   %s", prettyJSON(tc.Arguments, "               "))
		if named := s.namedEntities(tc.Arguments); len(named) > 0 {
			s.say("  entities:    %s", strings.Join(named, "\n               "))
		}
		s.say("  annotations: %s", describeAnnotations(tc.Annotations))
	}
	_, editable := req.InputSchemaOf()
	for {
		var (
			action schema.ElicitAction
			err    error
		)
		if standingOffered(req, tc) {
			var res schema.ElicitResult
			res, err = s.confirmStanding(tc, editable)
			if err == nil && res.Action != schema.ActionDecline && res.Action != actionEdit {
				return res, nil
			}
			action = res.Action
		} else if editable && tc != nil {
			action, err = s.askActionOrEdit("  Allow? [y/n/c] (or e to edit the arguments) ")
		} else {
			action, err = s.askAction("  Allow? [y/n/c] ", "allow")
		}
		if action == actionEdit {
			res, ok, err := s.editArguments(req, tc.Arguments)
			if err != nil || ok {
				return res, err
			}
			continue // back to the question, nothing sent
		}
		if err != nil || action != schema.ActionDecline {
			return schema.ElicitResult{Action: action}, err
		}
		// Instructions go with a decline: what to do instead.
		res := schema.ElicitResult{Action: schema.ActionDecline}
		for {
			text, err := s.readLine("  Instructions for the agent (optional): ", false)
			if err != nil {
				return schema.ElicitResult{}, err
			}
			if text = strings.TrimSpace(text); text != "" {
				res.Content = map[string]any{schema.InstructionsProperty: text}
			}
			verr := res.Validate(req)
			if verr == nil {
				return res, nil
			}
			s.say("  ! %v", verr)
			res.Content = nil
		}
	}
}

// form asks each property of a form and returns the validated answer, or
// a decline or cancel when the user types !decline or !cancel.
func (s *chatSession) form(req *schema.ElicitRequestParams) (schema.ElicitResult, error) {
	rs := &req.RequestedSchema
	names := rs.PropertyNames()
	s.say("? %s", indentRest(req.Message))
	if len(rs.Required) < len(names) {
		s.say("  (Enter skips an optional field; !cancel or !decline stops)")
	} else if len(names) > 0 {
		s.say("  (!cancel or !decline stops)")
	}
	content := map[string]any{}
	todo := names
	for {
		for _, name := range todo {
			v, set, err := s.askProperty(name, rs.Properties[name], slices.Contains(rs.Required, name))
			switch {
			case errors.Is(err, errStop):
				return schema.ElicitResult{Action: stopAction(v)}, nil
			case err != nil:
				return schema.ElicitResult{}, err
			case set:
				content[name] = v
			default:
				delete(content, name)
			}
		}
		res := schema.ElicitResult{Action: schema.ActionAccept, Content: content}
		verr := res.Validate(req)
		if verr == nil {
			return res, nil
		}
		// Ask again for the properties the answer breaks.
		todo = nil
		for _, v := range schema.Violations(verr) {
			s.say("  ! %s", v)
			if rs.Properties[v.Path] != nil && !slices.Contains(todo, v.Path) {
				todo = append(todo, v.Path)
			} else if rs.Properties[v.Path] == nil {
				delete(content, v.Path)
			}
		}
		if len(todo) == 0 {
			todo = names
		}
	}
}

// stopAction maps the stop word askProperty returns to an action.
func stopAction(v any) schema.ElicitAction {
	if v == "!decline" {
		return schema.ActionDecline
	}
	return schema.ActionCancel
}

// askProperty prompts for one property until the input is valid. set is
// false when an optional property is left empty. On !cancel or !decline it
// returns that word and errStop.
func (s *chatSession) askProperty(name string, p *schema.PropertySchema, required bool) (v any, set bool, err error) {
	if p == nil {
		return nil, false, nil
	}
	label := p.Title
	if label == "" {
		label = name
	}
	opts := choices(p)
	if p.Description != "" {
		s.say("  %s: %s", label, indentRest(p.Description))
	}
	for i, o := range opts {
		s.say("    %d) %s", i+1, o.label)
	}
	var def any
	if len(p.Default) > 0 {
		_ = json.Unmarshal(p.Default, &def)
	}
	prompt := "  " + label + propertyHint(p, required, defaultLabel(def, opts), len(opts)) + ": "
	for {
		line, err := s.readLine(prompt, false)
		if err != nil {
			return nil, false, err
		}
		in := strings.TrimSpace(line)
		switch strings.ToLower(in) {
		case "!cancel", "!decline":
			return strings.ToLower(in), false, errStop
		}
		if in == "" {
			switch {
			case def != nil:
				return def, true, nil
			case !required:
				return nil, false, nil
			}
			s.say("  ! %s is required", label)
			continue
		}
		v, problem := parseValue(p, opts, in)
		if problem == "" {
			problem = strings.Join(checkValue(name, p, v), "; ")
		}
		if problem != "" {
			s.say("  ! %s", problem)
			continue
		}
		return v, true, nil
	}
}

// defaultLabel shows a default by the titles of its options (a 2025-11-25
// titled enum's const values mean little to a person), or as it is.
func defaultLabel(def any, opts []choice) any {
	label := func(v any) any {
		for _, o := range opts {
			if o.value == v && o.label != "" {
				return o.label
			}
		}
		return v
	}
	switch d := def.(type) {
	case string:
		return label(d)
	case []any:
		parts := make([]string, len(d))
		for i, v := range d {
			parts[i] = fmt.Sprint(label(v))
		}
		return strings.Join(parts, ", ")
	}
	return def
}

// choice is one option of an enum property.
type choice struct{ value, label string }

// choices lists the options of an enum, titled single-select or
// multi-select property (nil for other properties).
func choices(p *schema.PropertySchema) []choice {
	var out []choice
	switch {
	case p.Enum != nil:
		for i, v := range p.Enum {
			label := v
			if i < len(p.EnumNames) && p.EnumNames[i] != "" {
				label = p.EnumNames[i]
			}
			out = append(out, choice{v, label})
		}
	case p.OneOf != nil:
		for _, o := range p.OneOf {
			out = append(out, choice{o.Const, o.Title})
		}
	case p.Items != nil:
		for _, v := range p.Items.Enum {
			out = append(out, choice{v, v})
		}
		for _, o := range p.Items.AnyOf {
			out = append(out, choice{o.Const, o.Title})
		}
	}
	return out
}

// propertyHint says what a prompt expects: " (kind, bounds, optional)".
func propertyHint(p *schema.PropertySchema, required bool, def any, nopts int) string {
	var parts []string
	switch {
	case p.Type == "array":
		parts = append(parts, fmt.Sprintf("numbers 1-%d, comma-separated", nopts))
	case nopts > 0:
		parts = append(parts, fmt.Sprintf("1-%d", nopts))
	case p.Type == "boolean":
		parts = append(parts, "y/n")
	case p.Type == "number" || p.Type == "integer":
		r := p.Type
		switch {
		case p.Minimum != nil && p.Maximum != nil:
			r += fmt.Sprintf(", %s to %s", fmtNum(*p.Minimum), fmtNum(*p.Maximum))
		case p.Minimum != nil:
			r += ", at least " + fmtNum(*p.Minimum)
		case p.Maximum != nil:
			r += ", at most " + fmtNum(*p.Maximum)
		}
		parts = append(parts, r)
	case p.Format != "":
		parts = append(parts, formatHint(p.Format))
	}
	if def != nil {
		d := fmt.Sprint(def)
		if b, ok := def.(bool); ok {
			d = map[bool]string{true: "y", false: "n"}[b]
		}
		parts = append(parts, "default "+d)
	} else if !required {
		parts = append(parts, "optional")
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// formatHint shows what a string format looks like.
func formatHint(f string) string {
	switch f {
	case schema.FormatDate:
		return "date, YYYY-MM-DD"
	case schema.FormatDateTime:
		return "date-time, e.g. 2026-12-24T18:00:00Z"
	case schema.FormatEmail:
		return "email, e.g. ada@example.com"
	case schema.FormatURI:
		return "uri, e.g. https://example.com/"
	}
	return f
}

// parseValue turns input into the property's JSON value, or says why it
// cannot.
func parseValue(p *schema.PropertySchema, opts []choice, in string) (any, string) {
	switch {
	case p.Type == "array":
		var out []string
		for part := range strings.SplitSeq(in, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			c, ok := pick(opts, part)
			if !ok {
				return nil, fmt.Sprintf("%q is not one of the options", part)
			}
			out = append(out, c)
		}
		return out, ""
	case len(opts) > 0:
		c, ok := pick(opts, in)
		if !ok {
			return nil, fmt.Sprintf("choose a number from 1 to %d (or type an option)", len(opts))
		}
		return c, ""
	case p.Type == "boolean":
		switch strings.ToLower(in) {
		case "y", "yes", "true", "1":
			return true, ""
		case "n", "no", "false", "0":
			return false, ""
		}
		return nil, "answer y or n"
	case p.Type == "integer":
		n, err := strconv.ParseInt(in, 10, 64)
		if err != nil {
			return nil, "must be a whole number"
		}
		return n, ""
	case p.Type == "number":
		f, err := strconv.ParseFloat(in, 64)
		if err != nil {
			return nil, "must be a number"
		}
		return f, ""
	}
	return in, ""
}

// pick finds an option by its number, value or label.
func pick(opts []choice, in string) (string, bool) {
	if n, err := strconv.Atoi(in); err == nil && n >= 1 && n <= len(opts) {
		return opts[n-1].value, true
	}
	for _, o := range opts {
		if o.value == in {
			return o.value, true
		}
	}
	for _, o := range opts {
		if strings.EqualFold(o.label, in) {
			return o.value, true
		}
	}
	return "", false
}

// checkValue returns the rules v breaks as the value of property name.
func checkValue(name string, p *schema.PropertySchema, v any) []string {
	req := schema.ElicitRequestParams{RequestedSchema: schema.RequestedSchema{
		Type: "object", Properties: map[string]*schema.PropertySchema{name: p}}}
	res := schema.ElicitResult{Action: schema.ActionAccept, Content: map[string]any{name: v}}
	var rules []string
	for _, vi := range schema.Violations(res.Validate(&req)) {
		rules = append(rules, vi.Rule)
	}
	return rules
}

// maxNamedEntities bounds how many entities a confirmation names.
const maxNamedEntities = 20

// namedEntities lists the entities a tool call's arguments refer to, with
// their titles: from the arguments themselves (an object with "id" and
// "title"), or looked up on the site. IDs are the string values of "id"
// and "ids" keys. Entities with no known title are left out; nil when none
// has one.
func (s *chatSession) namedEntities(args json.RawMessage) []string {
	var v any
	if json.Unmarshal(args, &v) != nil {
		return nil
	}
	var ids []string
	given := map[string]string{}
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			if id, ok := v["id"].(string); ok {
				if title, ok := v["title"].(string); ok && title != "" {
					given[id] = title
				}
			}
			for k, c := range v {
				walk(c, k)
			}
		case []any:
			for _, c := range v {
				walk(c, key)
			}
		case string:
			if (key == "id" || key == "ids") && !slices.Contains(ids, v) {
				ids = append(ids, v)
			}
		}
	}
	walk(v, "")
	var out []string
	for _, id := range ids {
		if len(out) == maxNamedEntities {
			out = append(out, fmt.Sprintf("(and %d more)", len(ids)-maxNamedEntities))
			break
		}
		title := given[id]
		if title == "" && s.titles != nil {
			title = s.titles(id)
		}
		if title != "" {
			out = append(out, fmt.Sprintf("%s %q", id, title))
		}
	}
	return out
}

// entityTitles returns a lookup of site entity titles by ID, asked of
// the entity lookup service (parley.lookup.entities, the request-reply the
// gateway's GET /v1/lookup/entities uses; client.EntityTitle), never a
// tool's storage. Each lookup waits at most a second; an unknown ID, or
// no lookup service, gives "" (the ID alone is shown); an answer is
// remembered, so a confirmation naming an entity again asks no more.
func entityTitles(ctx context.Context, cl *client.Client) func(string) string {
	cache := map[string]string{}
	return func(id string) string {
		if t, ok := cache[id]; ok {
			return t
		}
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		title, err := cl.EntityTitle(lctx, id)
		if err == nil {
			cache[id] = title
		}
		return title
	}
}

// describeAnnotations spells out a tool's effective MCP hints.
func describeAnnotations(a *schema.ToolAnnotations) string {
	var parts []string
	hint := func(b bool, yes, no string) string {
		if b {
			return yes
		}
		return no
	}
	parts = append(parts,
		hint(a.ReadOnly(), "read-only", "writes"),
		hint(a.Destructive(), "destructive", "not destructive"),
		hint(a.Idempotent(), "idempotent", "not idempotent"),
		hint(a.OpenWorld(), "open-world", "closed-world"))
	s := strings.Join(parts, ", ")
	if a == nil {
		s += " (none declared: MCP defaults)"
	}
	return s
}

// prettyJSON indents raw JSON, continuation lines prefixed by prefix.
func prettyJSON(raw json.RawMessage, prefix string) string {
	if len(raw) == 0 {
		return "(none)"
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, prefix, "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// renderBlock renders one content block on one line (or a few, indented).
// A block of an MCP server's tool result (parley marks it with
// _meta["dev.parley/mcp_server"]) is first labelled with the server, and
// warned of when the server is not trusted: its words are the server's,
// not the assistant's or parley's.
func renderBlock(c schema.Content) string {
	if m := schema.MetaOf(c); m != nil {
		if ms, err := m.MCPServer(); err != nil || ms != nil {
			from := "[from an MCP server whose name is unreadable; parley cannot vouch for it] "
			if ms != nil {
				from = "[from MCP server " + ms.Name + "] "
				if !ms.Trusted {
					from = "[from MCP server " + ms.Name + ", not trusted: parley cannot vouch for what it says] "
				}
			}
			return from + ownBlock(c)
		}
	}
	return ownBlock(c)
}

func ownBlock(c schema.Content) string {
	switch c := c.(type) {
	case *schema.TextContent:
		return "[text] " + indentRest(c.Text)
	case *schema.ResourceLink:
		s := fmt.Sprintf("[link] %s <%s>", c.Name, c.URI)
		if c.Description != "" {
			s += " " + c.Description
		}
		return s
	case *schema.ImageContent:
		return fmt.Sprintf("[image %s]", c.MIMEType)
	case *schema.AudioContent:
		return fmt.Sprintf("[audio %s]", c.MIMEType)
	case *schema.EmbeddedResource:
		s := "[resource] " + c.Resource.URI
		if c.Resource.MIMEType != "" {
			s += " (" + c.Resource.MIMEType + ")"
		}
		if c.Resource.Text != nil {
			s += "\n    " + strings.ReplaceAll(*c.Resource.Text, "\n", "\n    ")
		}
		return s
	}
	return "[" + c.ContentType() + "]"
}

// violationList formats violations as ": a: rule; b: rule" ("" for none).
func violationList(vs []schema.Violation) string {
	if len(vs) == 0 {
		return ""
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.String()
	}
	return ": " + strings.Join(parts, "; ")
}

// indentRest indents every non-empty line but the first by two spaces.
func indentRest(s string) string {
	lines := strings.Split(s, "\n")
	for i := 1; i < len(lines); i++ {
		if lines[i] != "" {
			lines[i] = "  " + lines[i]
		}
	}
	return strings.Join(lines, "\n")
}

// actionEdit is what askActionOrEdit returns for e: the person wants to
// change the call's arguments before allowing it.
const actionEdit schema.ElicitAction = "edit"

// askActionOrEdit is askAction for a confirmation that takes an edit of
// its arguments: e (edit) besides y, n and c.
func (s *chatSession) askActionOrEdit(prompt string) (schema.ElicitAction, error) {
	for {
		line, err := s.readLine(prompt, false)
		if err != nil {
			return "", err
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return schema.ActionAccept, nil
		case "n", "no", "!decline":
			return schema.ActionDecline, nil
		case "c", "cancel", "!cancel":
			return schema.ActionCancel, nil
		case "e", "edit":
			return actionEdit, nil
		}
		s.say("  please answer y (allow), n (decline) or c (cancel), or e to edit the arguments")
	}
}

// editArguments asks for the call's new arguments (one line of JSON; an
// empty line goes back to the question), checks them as the processor
// will (schema.CheckEdit against the confirmation's input schema), shows
// what will run and asks again before allowing it: ok is false when the
// person went back, and nothing is sent then.
func (s *chatSession) editArguments(req *schema.ElicitRequestParams, current json.RawMessage) (res schema.ElicitResult, ok bool, err error) {
	s.say("  Type the complete arguments to run, as one line of JSON (now: %s); Enter alone goes back.", compactJSON(current))
	for {
		line, err := s.readLine("  arguments: ", false)
		if err != nil {
			return schema.ElicitResult{}, false, err
		}
		if line = strings.TrimSpace(line); line == "" {
			return schema.ElicitResult{}, false, nil
		}
		args, err := schema.CheckEdit(req, json.RawMessage(line))
		if err != nil {
			for _, v := range schema.Violations(err) {
				s.say("  ! %s: %s", "arguments"+strings.TrimPrefix(v.Path, schema.EditPath), v.Rule)
			}
			continue
		}
		s.say("  will run:    %s", prettyJSON(args, "               "))
		action, err := s.askAction("  Allow with these arguments? [y/n/c] ", "allow with these arguments")
		switch {
		case err != nil:
			return schema.ElicitResult{}, false, err
		case action == schema.ActionAccept:
			return schema.ElicitResult{Action: schema.ActionAccept, Meta: schema.Meta{schema.MetaArguments: args}}, true, nil
		case action == schema.ActionCancel:
			return schema.ElicitResult{Action: schema.ActionCancel}, true, nil
		}
		return schema.ElicitResult{}, false, nil // n: back to the question
	}
}

// compactJSON is raw on one line (raw itself when it is not JSON).
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// askAction asks prompt until the person types y (accept), n (decline) or
// c (cancel), or "!decline" / "!cancel"; yes names what y means in the
// reminder shown after any other answer.
func (s *chatSession) askAction(prompt, yes string) (schema.ElicitAction, error) {
	for {
		line, err := s.readLine(prompt, false)
		if err != nil {
			return "", err
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return schema.ActionAccept, nil
		case "n", "no", "!decline":
			return schema.ActionDecline, nil
		case "c", "cancel", "!cancel":
			return schema.ActionCancel, nil
		}
		s.say("  please answer y (%s), n (decline) or c (cancel)", yes)
	}
}
