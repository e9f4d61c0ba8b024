package events

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Visibility says who may read an event type.
type Visibility string

const (
	// Public events are part of the integrator contract: integrators
	// publish or read them (PARLEY_CHAT), and they change only compatibly
	// (a new optional member) or under a new type name.
	Public Visibility = "public"
	// Internal events travel between parley's workers; integrators never
	// see them, and they may change with a release (see
	// docs/OPERATIONS.md, Upgrades).
	Internal Visibility = "internal"
)

// Role names a party on the bus: parley's workers, the policy services
// they ask, the integrators they serve, and the operators who read dead
// letters.
type Role string

// Roles of Route.Publishers and Route.Consumers.
const (
	RoleIntegrator Role = "integrator"
	RoleProcessor  Role = "processor"
	RoleAgent      Role = "agent"
	RoleToolexec   Role = "toolexec"
	// RolePolicy is a pre-execute policy service: the gate, or an
	// operator's own.
	RolePolicy Role = "policy"
	// RoleOperator is a person (or tool) reading the dead-letter stream.
	RoleOperator Role = "operator"
)

// Route is one subject an event type travels on: its subject pattern, the
// stream that stores it, and who publishes and who consumes it there.
type Route struct {
	// Subject is the NATS subject with each variable token written as a
	// {parameter}, e.g. "parley.chat.{thread}.turn.requested" (the
	// AsyncAPI channel address). Parameters are tokens (see ValidToken).
	// Empty for a reply, which travels on the requester's inbox.
	Subject string
	// Stream is the JetStream stream that stores the event; "" for core
	// NATS (request-reply).
	Stream string
	// Publishers and Consumers are the roles that send and receive the
	// event on this subject.
	Publishers []Role
	Consumers  []Role
}

// Entry is the catalogue's description of one event type.
type Entry struct {
	// Type is the CloudEvents type.
	Type Type
	// Summary says in one line what the event means.
	Summary string
	// Payload is the Go type of the event's data (decode with Data[T]).
	// Its JSON Schema is schema/<Type>.json, the file DataSchema names.
	Payload reflect.Type
	// Visibility is Public or Internal.
	Visibility Visibility
	// Routes are the subjects the event travels on (at least one).
	Routes []Route
	// Reply is the type of the answer to a request-reply event, "" for
	// others.
	Reply Type
}

// DataSchema returns the event's CloudEvents dataschema URI,
// DataSchemaBase + Type + ".json" (what New sets).
func (e Entry) DataSchema() string { return DataSchemaBase + string(e.Type) + ".json" }

// SchemaFile returns the path, from the repository root, of the JSON Schema
// file DataSchema names: "schema/<Type>.json".
func (e Entry) SchemaFile() string { return "schema/" + string(e.Type) + ".json" }

// Params returns the route's subject parameters in order, e.g. ["thread"].
func (r Route) Params() []string {
	var out []string
	for tok := range strings.SplitSeq(r.Subject, ".") {
		if name, ok := paramName(tok); ok {
			out = append(out, name)
		}
	}
	return out
}

// Filter returns the route's subject with every parameter as "*", the
// NATS filter subject that matches every event of the route.
func (r Route) Filter() string {
	toks := strings.Split(r.Subject, ".")
	for i, tok := range toks {
		if _, ok := paramName(tok); ok {
			toks[i] = "*"
		}
	}
	return strings.Join(toks, ".")
}

// SubjectFor returns the route's subject with its parameters replaced by
// values, in the order of Params. Each value must be a token (ValidToken);
// the error names the parameter, or says how many values were expected.
func (r Route) SubjectFor(values ...string) (string, error) {
	params := r.Params()
	if len(values) != len(params) {
		return "", fmt.Errorf("subject %s: %d values for parameters %v", r.Subject, len(values), params)
	}
	toks := strings.Split(r.Subject, ".")
	i := 0
	for j, tok := range toks {
		if _, ok := paramName(tok); ok {
			if err := ValidToken(params[i], values[i]); err != nil {
				return "", err
			}
			toks[j] = values[i]
			i++
		}
	}
	return strings.Join(toks, "."), nil
}

func paramName(tok string) (string, bool) {
	if len(tok) > 2 && tok[0] == '{' && tok[len(tok)-1] == '}' {
		return tok[1 : len(tok)-1], true
	}
	return "", false
}

// Subject patterns of the catalogue (see Route.Subject).
const (
	chatPattern       = "parley.chat.{thread}."
	refusedPattern    = "parley.refused.{principal}.{thread}."
	inputPattern      = "parley.in.{principal}.{thread}."
	toolCallPattern   = "parley.tool.call.{tool}"
	toolResultPattern = "parley.tool.result.{run}"
	preExecPattern    = "parley.tool.pre_execute.{agent}.{tool}"
	deadLetterPattern = "parley.dlq.{stream}.{consumer}"
)

// inputRoute is an integrator's input on PARLEY_INPUT; the processor
// echoes it, once accepted, on the chat route of the same suffix.
func inputRoute(suffix string) Route {
	return Route{Subject: inputPattern + suffix, Stream: StreamInput, Publishers: integrators, Consumers: processor}
}

// refusedRoute is a refusal stored under the refused sender's principal
// (RefusedSubject), when the sender is not a party of the thread.
func refusedRoute(suffix string) Route {
	return Route{Subject: refusedPattern + suffix, Stream: StreamChat, Publishers: processor, Consumers: integrators}
}

func chatRoute(suffix string, pub []Role, sub []Role) Route {
	return Route{Subject: chatPattern + suffix, Stream: StreamChat, Publishers: pub, Consumers: sub}
}

var (
	integrators = []Role{RoleIntegrator}
	processor   = []Role{RoleProcessor}
)

// of returns e as the entry of k: its Type and Payload are k's, so the
// catalogue's payload type and a Kind's cannot disagree.
func of[T any](k Kind[T], e Entry) Entry {
	e.Type, e.Payload = k.typ, reflect.TypeFor[T]()
	return e
}

// catalog lists every event type, public ones first, in the order of
// docs/events.md.
var catalog = []Entry{
	of(KindTurnRequested, Entry{Summary: "A user message starts (or queues) a turn on a thread.",
		Visibility: Public,
		Routes:     []Route{inputRoute(ChatTurnRequested), chatRoute(ChatTurnRequested, processor, integrators)}}),
	of(KindElicitationResponded, Entry{Summary: "A person's answer to an elicitation (MCP ElicitResult plus the elicitation it answers).",
		Visibility: Public,
		Routes:     []Route{inputRoute(ChatElicitationResponded), chatRoute(ChatElicitationResponded, processor, integrators)}}),
	of(KindTurnPaused, Entry{Summary: "The turn waits for answers; the question restated in prose.",
		Visibility: Public,
		Routes:     []Route{chatRoute(ChatTurnPaused, processor, integrators)}}),
	of(KindElicitationRequested, Entry{Summary: "A question for a person: MCP elicitation/create params with _meta[\"drupal.org/ai.elicitation_id\"]; one an MCP server asked also carries _meta[\"dev.parley/mcp_server\"] = {name, trusted, secretFields?}.",
		Visibility: Public,
		Routes:     []Route{chatRoute(ChatElicitationRequested, processor, integrators)}}),
	of(KindElicitationRejected, Entry{Summary: "An answer was refused; the reason names the rule.",
		Visibility: Public,
		Routes: []Route{chatRoute(ChatElicitationRejected, processor, integrators),
			refusedRoute(ChatElicitationRejected)}}),
	of(KindElicitationExpired, Entry{Summary: "Questions expired unanswered; the thread is idle again.",
		Visibility: Public,
		Routes:     []Route{chatRoute(ChatElicitationExpired, processor, integrators)}}),
	of(KindElicitationCancelled, Entry{Summary: "Questions were withdrawn (a newer message superseded the turn, or a cancel answer).",
		Visibility: Public,
		Routes:     []Route{chatRoute(ChatElicitationCancelled, processor, integrators)}}),
	of(KindTurnCompleted, Entry{Summary: "The assistant's answer, with how each tool call was decided.",
		Visibility: Public,
		Routes:     []Route{chatRoute(ChatTurnCompleted, processor, integrators)}}),
	of(KindTurnFailed, Entry{Summary: "The turn ended with an error; reason is a stable code.",
		Visibility: Public,
		Routes:     []Route{chatRoute(ChatTurnFailed, processor, integrators)}}),
	of(KindTurnRejected, Entry{Summary: "A turn.requested was refused; errors name each field and rule.",
		Visibility: Public,
		Routes: []Route{chatRoute(ChatTurnRejected, processor, integrators),
			refusedRoute(ChatTurnRejected)}}),
	of(KindApprovalGranted, Entry{Summary: "A person granted a standing approval: later confirmations of the tool by the agent in the thread are skipped until it expires or is revoked.",
		Visibility: Public,
		Routes:     []Route{chatRoute(ChatApprovalGranted, processor, integrators)}}),
	of(KindApprovalUsed, Entry{Summary: "A tool call ran without a question under a standing approval.",
		Visibility: Public,
		Routes:     []Route{chatRoute(ChatApprovalUsed, processor, integrators)}}),
	of(KindApprovalRevoked, Entry{Summary: "A thread's owner revoked a standing approval; the tool asks again.",
		Visibility: Public,
		Routes:     []Route{chatRoute(ChatApprovalRevoked, processor, integrators)}}),
	of(KindMessageDelta, Entry{Summary: "A piece of the assistant's answer while the model writes it (a preview; turn.completed is authoritative).",
		Visibility: Public,
		Routes:     []Route{chatRoute(ChatMessageDelta, []Role{RoleAgent}, integrators)}}),
	of(KindProgress, Entry{Summary: "MCP progress of a running turn or tool call (advisory).",
		Visibility: Public,
		Routes:     []Route{chatRoute(ChatProgress, []Role{RoleAgent, RoleToolexec}, integrators)}}),

	of(KindRunRequested, Entry{Summary: "The processor asks an agent to run a turn.",
		Visibility: Internal,
		Routes:     []Route{{Subject: SubjectRunRequested, Stream: StreamAgent, Publishers: processor, Consumers: []Role{RoleAgent}}}}),
	of(KindRunResumed, Entry{Summary: "The processor resumes a paused run with every answer.",
		Visibility: Internal,
		Routes:     []Route{{Subject: SubjectRunResumed, Stream: StreamAgent, Publishers: processor, Consumers: []Role{RoleAgent}}}}),
	of(KindToolResultReady, Entry{Summary: "The tool-executor's result of one tool call (or its request for input).",
		Visibility: Internal,
		Routes:     []Route{{Subject: toolResultPattern, Stream: StreamAgent, Publishers: []Role{RoleToolexec}, Consumers: []Role{RoleAgent}}}}),
	of(KindRunCompleted, Entry{Summary: "The agent finished a run.",
		Visibility: Internal,
		Routes:     []Route{{Subject: SubjectRunCompleted, Stream: StreamRuns, Publishers: []Role{RoleAgent}, Consumers: processor}}}),
	of(KindRunPaused, Entry{Summary: "The agent needs answers; the snapshot to resume from.",
		Visibility: Internal,
		Routes:     []Route{{Subject: SubjectRunPaused, Stream: StreamRuns, Publishers: []Role{RoleAgent}, Consumers: processor}}}),
	of(KindRunFailed, Entry{Summary: "The agent could not finish a run.",
		Visibility: Internal,
		Routes:     []Route{{Subject: SubjectRunFailed, Stream: StreamRuns, Publishers: []Role{RoleAgent}, Consumers: processor}}}),
	of(KindToolCallRequested, Entry{Summary: "The agent asks the tool-executor to run one tool call.",
		Visibility: Internal,
		Routes:     []Route{{Subject: toolCallPattern, Stream: StreamTools, Publishers: []Role{RoleAgent}, Consumers: []Role{RoleToolexec}}}}),
	of(KindPreExecuteRequested, Entry{Summary: "The agent asks the policy services about a tool call before running it (request-reply).",
		Visibility: Internal, Reply: TypePreExecuteDecided,
		Routes: []Route{{Subject: preExecPattern, Publishers: []Role{RoleAgent}, Consumers: []Role{RolePolicy}}}}),
	of(KindPreExecuteDecided, Entry{Summary: "A policy service's decision: allow, veto or confirm (the reply to pre_execute.requested).",
		Visibility: Internal,
		Routes:     []Route{{Publishers: []Role{RolePolicy}, Consumers: []Role{RoleAgent}}}}),
	of(KindLookupEntitiesRequested, Entry{Summary: "An integrator (the gateway's entity autocomplete) asks for entities matching a query (NATS micro request-reply).",
		Visibility: Internal, Reply: TypeLookupEntitiesAnswered,
		Routes: []Route{{Subject: SubjectLookupEntities, Publishers: integrators, Consumers: []Role{RoleToolexec}}}}),
	of(KindLookupEntitiesAnswered, Entry{Summary: "The entities matching a lookup (the reply to lookup.entities.requested).",
		Visibility: Internal,
		Routes:     []Route{{Publishers: []Role{RoleToolexec}, Consumers: integrators}}}),
	of(KindResolveReferencesRequested, Entry{Summary: "The processor asks the entity lookup service to resolve a message's context references for the person who sent it (NATS micro request-reply).",
		Visibility: Internal, Reply: TypeResolveReferencesAnswered,
		Routes: []Route{{Subject: SubjectResolveReferences, Publishers: processor, Consumers: []Role{RoleToolexec}}}}),
	of(KindResolveReferencesAnswered, Entry{Summary: "Which context references the person may use, with each one's summary (the reply to lookup.resolve.requested).",
		Visibility: Internal,
		Routes:     []Route{{Publishers: []Role{RoleToolexec}, Consumers: processor}}}),
	of(KindThreadStateRequested, Entry{Summary: "An integrator asks the processor where a thread stands and which questions are open, from its record (request-reply).",
		Visibility: Internal, Reply: TypeThreadStateAnswered,
		Routes: []Route{{Subject: threadStatePattern, Publishers: integrators, Consumers: processor}}}),
	of(KindThreadStateAnswered, Entry{Summary: "A thread's state and open questions from the processor's record (the reply to thread.state.requested).",
		Visibility: Internal,
		Routes:     []Route{{Publishers: processor, Consumers: integrators}}}),
	of(KindApprovalsRequested, Entry{Summary: "An integrator lists or revokes a thread's standing approvals (request-reply with the processor).",
		Visibility: Internal, Reply: TypeApprovalsAnswered,
		Routes: []Route{{Subject: approvalsPattern, Publishers: integrators, Consumers: processor}}}),
	of(KindApprovalsAnswered, Entry{Summary: "A thread's standing approvals, and those revoked (the reply to approvals.requested).",
		Visibility: Internal,
		Routes:     []Route{{Publishers: processor, Consumers: integrators}}}),
	of(KindApprovalUseRequested, Entry{Summary: "The agent asks whether a call a policy asked to confirm may run under a standing approval (request-reply).",
		Visibility: Internal, Reply: TypeApprovalUseAnswered,
		Routes: []Route{{Subject: approvalUsePattern, Publishers: []Role{RoleAgent}, Consumers: processor}}}),
	of(KindApprovalUseAnswered, Entry{Summary: "The standing approval the call runs under, if any (the reply to approval.use.requested).",
		Visibility: Internal,
		Routes:     []Route{{Publishers: processor, Consumers: []Role{RoleAgent}}}}),
	of(KindDeadLettered, Entry{Summary: "An event that could not be handled, with the reason and the original message.",
		Visibility: Internal,
		Routes: []Route{{Subject: deadLetterPattern, Stream: StreamDeadLetter,
			Publishers: []Role{RoleProcessor, RoleAgent, RoleToolexec}, Consumers: []Role{RoleOperator}}}}),
}

// Catalog returns every event type parley defines, one entry each: public
// types first (in the order of docs/events.md), then internal ones. The
// slice is a copy; docs/asyncapi.yaml and the JSON Schemas in schema/ are
// generated from it (go test ./events -run 'TestJSONSchemas|TestAsyncAPI'
// -update).
func Catalog() []Entry {
	out := slices.Clone(catalog)
	for i := range out {
		out[i].Routes = slices.Clone(out[i].Routes)
	}
	return out
}

// Lookup returns the catalogue entry of t; ok is false for a type parley
// does not define.
func Lookup(t Type) (Entry, bool) {
	if i, ok := catalogIndex[t]; ok {
		return catalog[i], true
	}
	return Entry{}, false
}

// catalogIndex is the position of each type in catalog.
var catalogIndex = func() map[Type]int {
	out := make(map[Type]int, len(catalog))
	for i, e := range catalog {
		out[e.Type] = i
	}
	return out
}()
