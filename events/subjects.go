package events

import (
	"fmt"
	"regexp"
	"strings"
)

// Streams and the subjects they hold.
const (
	// StreamChat holds everything integrators see: parley.chat.<thread>.>.
	StreamChat = "PARLEY_CHAT"
	// StreamAgent is the agent's work queue: run requests, resumes and tool
	// results (parley.agent.run.requested|resumed, parley.tool.result.>).
	StreamAgent = "PARLEY_AGENT"
	// StreamRuns is the processor's work queue of run outcomes
	// (parley.agent.run.completed|paused|failed).
	StreamRuns = "PARLEY_RUNS"
	// StreamTools is the tool-executor's work queue: parley.tool.call.>.
	StreamTools = "PARLEY_TOOLS"
	// StreamDeadLetter keeps events that could not be handled: parley.dlq.>.
	StreamDeadLetter = "PARLEY_DLQ"
)

// Subject prefixes and fixed subjects.
const (
	SubjectChatAll      = "parley.chat.>"
	SubjectRunRequested = "parley.agent.run.requested"
	SubjectRunResumed   = "parley.agent.run.resumed"
	SubjectRunCompleted = "parley.agent.run.completed"
	SubjectRunPaused    = "parley.agent.run.paused"
	SubjectRunFailed    = "parley.agent.run.failed"
	SubjectToolCallAll  = "parley.tool.call.>"
	SubjectToolResAll   = "parley.tool.result.>"
	SubjectPreExecAll   = "parley.tool.pre_execute.>"
	SubjectDeadLetters  = "parley.dlq.>"
)

// Chat subject suffixes: parley.chat.<thread>.<suffix>.
const (
	ChatTurnRequested         = "turn.requested"
	ChatTurnPaused            = "turn.paused"
	ChatTurnCompleted         = "turn.completed"
	ChatTurnFailed            = "turn.failed"
	ChatTurnRejected          = "turn.rejected"
	ChatElicitationRequested  = "elicitation.requested"
	ChatElicitationResponded  = "elicitation.responded"
	ChatElicitationRejected   = "elicitation.rejected"
	ChatElicitationExpired    = "elicitation.expired"
	ChatElicitationCancelled  = "elicitation.cancelled"
	ChatProgress              = "progress"
	subjectChatPrefix         = "parley.chat."
	subjectToolCallPrefix     = "parley.tool.call."
	subjectToolResultPrefix   = "parley.tool.result."
	subjectPreExecutePrefix   = "parley.tool.pre_execute."
	subjectDeadLetterTemplate = "parley.dlq.%s.%s"
)

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidToken checks a thread ID, agent or tool name that goes into a subject
// or a KV key: 1 to 128 of A-Z a-z 0-9 _ -. The error names field.
func ValidToken(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s: required", field)
	}
	if !tokenRE.MatchString(s) {
		return fmt.Errorf("%s: %q must be 1-128 characters of A-Z a-z 0-9 _ -", field, s)
	}
	return nil
}

// ChatSubject returns parley.chat.<thread>.<suffix>.
func ChatSubject(thread, suffix string) string { return subjectChatPrefix + thread + "." + suffix }

// ChatThreadSubjects returns the filter parley.chat.<thread>.> (all of one thread).
func ChatThreadSubjects(thread string) string { return subjectChatPrefix + thread + ".>" }

// ParseChatSubject splits parley.chat.<thread>.<suffix>; ok is false for
// any other subject.
func ParseChatSubject(subject string) (thread, suffix string, ok bool) {
	rest, found := strings.CutPrefix(subject, subjectChatPrefix)
	if !found {
		return "", "", false
	}
	thread, suffix, ok = strings.Cut(rest, ".")
	return thread, suffix, ok && thread != "" && suffix != ""
}

// ToolCallSubject returns parley.tool.call.<tool>.
func ToolCallSubject(tool string) string { return subjectToolCallPrefix + tool }

// ToolResultSubject returns parley.tool.result.<run>.
func ToolResultSubject(run string) string { return subjectToolResultPrefix + run }

// PreExecuteSubject returns parley.tool.pre_execute.<agent>.<tool>.
func PreExecuteSubject(agent, tool string) string {
	return subjectPreExecutePrefix + agent + "." + tool
}

// PreExecuteReplyScope is the token between the requester's inbox prefix
// and the request's own token in the reply subject of a pre-execute
// request: _INBOX_<principal>.pre_execute.<unique> (bus.Client.RequestMany
// with this scope). Policy services answer on PolicyReplySubject of it,
// and NATS permissions let the principal of policy P publish only on
// _INBOX_agent.pre_execute.*.P (internal/natsauth).
const PreExecuteReplyScope = "pre_execute"

// PolicyReplySubject returns where policy answers a pre-execute request
// whose reply subject is reply: <reply>.<policy>. The agent reads the
// answering policy from this last token, never from the reply's data, so
// under parley's NATS permissions a reply for policy P can only come from
// P's principal (docs/SECURITY.md).
func PolicyReplySubject(reply, policy string) string { return reply + "." + policy }

// DeadLetterSubject returns parley.dlq.<stream>.<consumer>.
func DeadLetterSubject(stream, consumer string) string {
	return fmt.Sprintf(subjectDeadLetterTemplate, stream, consumer)
}

// Refusals of a party who is not a party of the thread (a stranger's
// message or answer, or the first message of a thread nobody owns yet)
// are stored under the refused sender's principal, not in the thread:
// parley.refused.<principal>.<thread>.<suffix> (suffix ChatTurnRejected or
// ChatElicitationRejected), in StreamChat. The sender reads them there
// (RefusedThreadSubjects); the thread's own subjects
// (ChatThreadSubjects) never see them, so no stranger can add events to
// someone else's thread. See docs/events.md "Refusals".
const (
	// SubjectRefusedAll is every refusal subject.
	SubjectRefusedAll    = "parley.refused.>"
	subjectRefusedPrefix = "parley.refused."
)

// RefusedSubject returns parley.refused.<principal>.<thread>.<suffix>:
// where the refusal of principal's event on thread is stored when
// principal is not a party of the thread.
func RefusedSubject(principal, thread, suffix string) string {
	return subjectRefusedPrefix + principal + "." + thread + "." + suffix
}

// RefusedThreadSubjects returns the filter
// parley.refused.<principal>.<thread>.>: principal's refusals on thread
// that are stored under its principal (RefusedSubject).
func RefusedThreadSubjects(principal, thread string) string {
	return subjectRefusedPrefix + principal + "." + thread + ".>"
}

// ParseRefusedSubject splits parley.refused.<principal>.<thread>.<suffix>;
// ok is false for any other subject.
func ParseRefusedSubject(subject string) (principal, thread, suffix string, ok bool) {
	rest, found := strings.CutPrefix(subject, subjectRefusedPrefix)
	if !found {
		return "", "", "", false
	}
	principal, rest, ok1 := strings.Cut(rest, ".")
	thread, suffix, ok2 := strings.Cut(rest, ".")
	return principal, thread, suffix, ok1 && ok2 && principal != "" && thread != "" && suffix != ""
}

// ThreadOf returns the thread of a subject of StreamChat: the <thread>
// token of a chat subject (ParseChatSubject) or of a refusal subject
// (ParseRefusedSubject); ok is false for any other subject.
func ThreadOf(subject string) (thread string, ok bool) {
	if th, _, ok := ParseChatSubject(subject); ok {
		return th, true
	}
	_, th, _, ok := ParseRefusedSubject(subject)
	return th, ok
}
