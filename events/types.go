package events

// Type is a CloudEvents `type` attribute: reverse-DNS, past tense,
// versioned by name when its data changes incompatibly.
type Type string

// Event types on the CHAT stream (integrators publish and read these).
const (
	// TypeTurnRequested: a user message starts (or queues) a turn. Data: TurnRequested.
	TypeTurnRequested Type = "dev.parley.turn.requested"
	// TypeTurnPaused: the turn waits for the user; data is the assistant
	// message restating the question in prose. Data: TurnPaused.
	TypeTurnPaused Type = "dev.parley.turn.paused"
	// TypeTurnCompleted: the assistant's answer. Data: TurnCompleted.
	TypeTurnCompleted Type = "dev.parley.turn.completed"
	// TypeTurnFailed: the turn ended with an error. Data: TurnFailed.
	TypeTurnFailed Type = "dev.parley.turn.failed"
	// TypeTurnRejected: a turn.requested event was refused. Data: TurnRejected.
	TypeTurnRejected Type = "dev.parley.turn.rejected"
	// TypeElicitationRequested: a question for the user. Data: MCP
	// `elicitation/create` params (schema.ElicitRequestParams) with
	// _meta["drupal.org/ai.elicitation_id"].
	TypeElicitationRequested Type = "dev.parley.elicitation.requested"
	// TypeElicitationResponded: the user's answer. Data: ElicitationResponded.
	TypeElicitationResponded Type = "dev.parley.elicitation.responded"
	// TypeElicitationRejected: an answer was refused. Data: ElicitationRejected.
	TypeElicitationRejected Type = "dev.parley.elicitation.rejected"
	// TypeElicitationExpired: a question expired unanswered. Data: ElicitationExpired.
	TypeElicitationExpired Type = "dev.parley.elicitation.expired"
	// TypeElicitationCancelled: a question was withdrawn because a new user
	// message superseded the paused turn. Data: ElicitationCancelled.
	TypeElicitationCancelled Type = "dev.parley.elicitation.cancelled"
	// TypeProgress: MCP progress of a running tool (core NATS, not stored).
	// Data: schema.Progress-shaped {progressToken, progress, total?, message?}.
	TypeProgress Type = "dev.parley.progress"
)

// Event types between workers.
const (
	// TypeRunRequested: processor asks an agent to run a turn. Data: RunRequested.
	TypeRunRequested Type = "dev.parley.agent.run.requested"
	// TypeRunResumed: processor resumes a paused run with answers. Data: RunResumed.
	TypeRunResumed Type = "dev.parley.agent.run.resumed"
	// TypeRunCompleted: the agent finished a run. Data: RunCompleted.
	TypeRunCompleted Type = "dev.parley.agent.run.completed"
	// TypeRunPaused: the agent needs answers. Data: RunPaused.
	TypeRunPaused Type = "dev.parley.agent.run.paused"
	// TypeRunFailed: the agent could not finish. Data: RunFailed.
	TypeRunFailed Type = "dev.parley.agent.run.failed"
	// TypeToolCallRequested: agent asks the tool-executor to run a call. Data: ToolCallRequested.
	TypeToolCallRequested Type = "dev.parley.tool.call.requested"
	// TypeToolResultReady: the tool-executor's result. Data: ToolResult.
	TypeToolResultReady Type = "dev.parley.tool.result.ready"
	// TypePreExecuteRequested: agent asks policy services about a call
	// (request-reply). Data: PreExecuteRequest.
	TypePreExecuteRequested Type = "dev.parley.tool.pre_execute.requested"
	// TypePreExecuteDecided: a policy service's answer. Data: PolicyDecision.
	TypePreExecuteDecided Type = "dev.parley.tool.pre_execute.decided"
	// TypeDeadLettered: an event that could not be handled. Data: DeadLetter.
	TypeDeadLettered Type = "dev.parley.dead_lettered"
)

// Sources (CloudEvents `source`) of parley's own workers.
const (
	SourceProcessor = "/parley/processor"
	SourceAgent     = "/parley/agent"
	SourceToolexec  = "/parley/toolexec"
	SourceGate      = "/parley/gate"
	SourceCLI       = "/parley/cli"
)

// Extension attribute names (CloudEvents extensions: lowercase a-z0-9).
const (
	ExtTurnID = "turnid"
	ExtRunID  = "runid"
	// ExtTraceParent and ExtTraceState are the CloudEvents distributed
	// tracing extension: the trace context the turn started in.
	ExtTraceParent = "traceparent"
	ExtTraceState  = "tracestate"
)
