// Package natsauth is parley's NATS security: the principals (one NATS
// user per role) and their publish and subscribe allow-lists, the
// nats-server authorization configuration rendered from them, the nkey
// seeds `parley auth init` and `parley dev` generate, and the connection
// options (credentials, TLS, per-principal inbox prefix) every command
// connects with.
//
// The table in this file is the single source of the permissions parley
// ships: docs/SECURITY.md, the rendered authorization block, deploy/ and
// docker-compose.yml all come from it (deploy/nats/auth.conf is generated
// by `parley auth init` and checked by a test).
//
// Permissions follow docs/SECURITY.md's threat model: the four workers
// are trusted for their own step only; integrators are trusted for
// nothing but their own input; policy services only answer the requests
// they receive. JetStream API access is listed subject by subject
// (https://docs.nats.io/reference/reference-protocols/nats_api_reference),
// measured by running every role against a server with these permissions
// (TestRolesDoTheirJob).
//
// It owns the principals' permissions. It imports no other parley package
// (internal/layers checks the direction of imports).
package natsauth

import (
	"fmt"
	"regexp"
)

// Principal names of parley's roles. The name is also the principal's
// credential file (<name>.nk) and its inbox prefix (_INBOX_<name>).
const (
	Processor  = "processor"
	Agent      = "agent"
	Toolexec   = "toolexec"
	Gate       = "gate"
	Integrator = "integrator"
	Gateway    = "gateway"
	// Admin is the operator principal: every subject, for `parley`
	// operators' own tools (nats CLI, backups) and tests that inspect.
	Admin = "admin"
)

// Streams, buckets and durables the permissions name. They are the
// names in events, kvstate and the workers (TestNamesMatchCode checks);
// StreamInput and the parley.in. subjects are the trust design's
// integrator input stream.
const (
	StreamChat       = "PARLEY_CHAT"
	StreamInput      = "PARLEY_INPUT"
	StreamAgent      = "PARLEY_AGENT"
	StreamRuns       = "PARLEY_RUNS"
	StreamTools      = "PARLEY_TOOLS"
	StreamDeadLetter = "PARLEY_DLQ"

	BucketPaused      = "parley_paused"
	BucketThreads     = "parley_threads"
	BucketRuns        = "parley_runs"
	BucketToolResults = "parley_tool_results"
	BucketTools       = "parley_tools"
	BucketDecisions   = "parley_decisions"
	BucketContent     = "parley_content"
	// BucketApprovals holds the standing approvals (the processor's).
	BucketApprovals      = "parley_approvals"
	BucketGatewayThreads = "parley_gateway_threads"
	// ObjectResults is the agent's object store of large tool results.
	ObjectResults = "parley_results"

	// InputPrefix starts every integrator input subject:
	// parley.in.<principal>.<thread>.turn.requested and
	// parley.in.<principal>.<thread>.elicitation.responded.
	InputPrefix = "parley.in."
	// SubjectLookup is the entity lookup's request subject
	// (events.SubjectLookupEntities).
	SubjectLookup = "parley.lookup.entities"
	// SubjectResolve is the subject on which the processor asks the
	// lookup service to resolve a message's context references for the
	// person who sent it (events.SubjectResolveReferences): it names the
	// person, so only the processor may publish it.
	SubjectResolve = "parley.lookup.resolve"
)

// Kind is what a principal is for; it selects its permissions.
type Kind string

// Kinds of principal.
const (
	// KindWorker is one of parley's four workers (processor, agent,
	// toolexec) — each its own permissions.
	KindWorker Kind = "worker"
	// KindPolicy answers pre-execute requests (the gate, and any further
	// policy service).
	KindPolicy Kind = "policy"
	// KindIntegrator starts turns and answers questions under its own
	// input subjects and reads PARLEY_CHAT.
	KindIntegrator Kind = "integrator"
	// KindGateway is an integrator trusted to speak for end users, with
	// its own ownership bucket.
	KindGateway Kind = "gateway"
	// KindAdmin has every permission.
	KindAdmin Kind = "admin"
)

// Permissions are one principal's NATS permissions, in nats-server's terms
// (https://docs.nats.io/running-a-nats-service/configuration/securing_nats/authorization).
type Permissions struct {
	// PublishAllow and PublishDeny: the subjects it may publish on
	// (deny wins over allow).
	PublishAllow, PublishDeny []string
	// SubscribeAllow and SubscribeDeny: the subjects it may subscribe to.
	SubscribeAllow, SubscribeDeny []string
	// AllowResponses lets it publish one reply to the reply subject of
	// each request it received (policy services answer this way; nobody
	// may publish on an _INBOX subject otherwise).
	AllowResponses bool
}

// Principal is one NATS user.
type Principal struct {
	// Name is the principal's name: [a-z0-9_-], 1-64 characters.
	Name string
	// Kind selects the permissions.
	Kind Kind
	// Description says who uses it (a comment in the rendered config).
	Description string
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// CheckName reports whether name can be a principal: 1-64 characters of
// a-z 0-9 _ - starting with a letter or digit (it is a subject token, a
// file name and an inbox prefix).
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("principal %q: must be 1-64 characters of a-z 0-9 _ - starting with a letter or digit", name)
	}
	return nil
}

// Roles are parley's own principals, in the order configurations list
// them.
func Roles() []Principal {
	return []Principal{
		{Processor, KindWorker, "processor worker: turns, pauses, resumes"},
		{Agent, KindWorker, "agent worker: the model and tool loop"},
		{Toolexec, KindWorker, "tool-executor worker"},
		{Gate, KindPolicy, "the gate: the default pre-execute policy service"},
		{Integrator, KindIntegrator, "parley send/answer/events/chat and other integrators"},
		{Gateway, KindGateway, "the HTTP gateway: an integrator trusted to speak for end users"},
		{Admin, KindAdmin, "operators: every subject"},
	}
}

// Set is the principals of one installation: parley's roles plus the
// integrators and policy services an operator adds.
func Set(integrators, policies []string) ([]Principal, error) {
	ps := Roles()
	seen := map[string]bool{}
	for _, p := range ps {
		seen[p.Name] = true
	}
	add := func(name string, kind Kind, desc string) error {
		if err := CheckName(name); err != nil {
			return err
		}
		if seen[name] {
			return fmt.Errorf("principal %q: given twice (or a parley role's name)", name)
		}
		seen[name] = true
		ps = append(ps, Principal{Name: name, Kind: kind, Description: desc})
		return nil
	}
	for _, n := range integrators {
		if err := add(n, KindIntegrator, "integrator"); err != nil {
			return nil, err
		}
	}
	for _, n := range policies {
		if err := add(n, KindPolicy, "policy service"); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

// InboxPrefix is the inbox prefix of principal name: its replies arrive on
// _INBOX_<name>.<...>, the only inbox it may subscribe to.
func InboxPrefix(name string) string { return "_INBOX_" + name }

// PreExecuteReplyScope is the token of the agent's pre-execute reply
// subjects (events.PreExecuteReplyScope): _INBOX_agent.pre_execute.<unique>.
const PreExecuteReplyScope = "pre_execute"

// PolicyReplies is the one inbox subject policy may publish on: its
// answers to the agent's pre-execute requests,
// _INBOX_agent.pre_execute.*.<policy> (events.PolicyReplySubject). The
// agent reads the answering policy from the last token, so a policy
// principal cannot answer as another policy.
func PolicyReplies(policy string) string {
	return InboxPrefix(Agent) + "." + PreExecuteReplyScope + ".*." + policy
}

// consumerCreateUnnamed is the older consumer create subject,
// $JS.API.CONSUMER.CREATE.<stream>, whose consumer name is only in the
// request body.
const consumerCreateUnnamed = "$JS.API.CONSUMER.CREATE.*"

// streamNames lists the account's stream names (names only: no
// configuration, no messages), which readiness reads.
const streamNames = "$JS.API.STREAM.NAMES"

// durables are the names of parley's durable consumers
// (workers/processor, agent, toolexec): no integrator may create, update
// or delete a consumer of that name.
var durables = []string{"processor", "processor-runs", "processor-expiry", "processor-timers", "agent", "toolexec"}

// Permissions returns p's permissions.
func (p Principal) Permissions() Permissions {
	var perm Permissions
	pub := func(s ...string) { perm.PublishAllow = append(perm.PublishAllow, s...) }
	sub := func(s ...string) { perm.SubscribeAllow = append(perm.SubscribeAllow, s...) }
	inbox := InboxPrefix(p.Name) + ".>"
	switch p.Kind {
	case KindAdmin:
		pub(">")
		sub(">")
		return perm
	case KindWorker:
		// Every worker creates (and reconciles the configuration of)
		// parley's streams at start (bus.EnsureStreams), never deletes or
		// purges them.
		pub(streamAdmin(StreamChat, StreamInput, StreamAgent, StreamRuns, StreamTools, StreamDeadLetter)...)
		// Readiness (internal/health, GET /readyz) checks that the
		// streams and buckets it uses still exist from the stream names.
		pub(streamNames)
		sub(inbox)
		switch p.Name {
		case Processor:
			// Refusals of a stranger's event go under the stranger's
			// principal (events.RefusedSubject), not into the thread.
			pub("parley.chat.>", "parley.refused.>", "parley.agent.run.requested", "parley.agent.run.resumed")
			// A message's context references, resolved as its sender
			// (request-reply to the lookup service).
			pub(SubjectResolve)
			pub(consumer(StreamInput, "processor")...)
			pub(consumer(StreamRuns, "processor-runs")...)
			// Expiries of pause records (processor.HandleExpiry, raw bus
			// consumers): markers of records with a TTL, and scheduled
			// records' expiries.
			pub(consumer("KV_"+BucketPaused, "processor-expiry")...)
			pub(consumer("KV_"+BucketPaused, "processor-timers")...)
			pub(streamRead(StreamChat, StreamInput)...)
			pub(msgGet(StreamAgent, StreamDeadLetter)...)
			pub(bucketOwn(BucketThreads, BucketPaused, BucketApprovals)...)
			// The thread-state endpoint (events.SubjectThreadStateAll,
			// NATS micro): answered through allow_responses; micro
			// answers discovery ($SRV.PING|INFO|STATS).
			// The standing approvals (NATS micro, like the thread state):
			// integrators list and revoke, the agent asks at call time.
			sub("parley.state.>", "parley.approvals.>", "parley.approval.use.>", "$SRV.>")
			perm.AllowResponses = true
		case Agent:
			pub("parley.agent.run.completed", "parley.agent.run.paused", "parley.agent.run.failed",
				"parley.tool.call.>", "parley.tool.pre_execute.>",
				"parley.chat.*.progress", "parley.chat.*.message.delta",
				// Whether a call runs under a standing approval
				// (request-reply to the processor).
				"parley.approval.use.>")
			pub(consumer(StreamAgent, "agent")...)
			pub(msgGet(StreamRuns, StreamTools, StreamChat, StreamDeadLetter)...)
			pub(bucketOwn(BucketRuns, BucketDecisions)...)
			// It opens (creates when missing) the registry, and reads it.
			pub(bucketRead(BucketTools)...)
			pub(streamAdmin("KV_" + BucketTools)...)
			pub("$JS.API.INFO")
			pub(objectWrite(ObjectResults)...)
		case Toolexec:
			pub("parley.tool.result.>", "parley.chat.*.progress")
			pub(consumer(StreamTools, "toolexec")...)
			pub(msgGet(StreamAgent, StreamChat, StreamDeadLetter)...)
			pub(bucketOwn(BucketTools, BucketToolResults, BucketContent)...)
			// It opens (creates when missing) the decision records the
			// agent writes, and reads them.
			pub(bucketRead(BucketDecisions)...)
			pub(streamAdmin("KV_" + BucketDecisions)...)
			pub(objectRead(ObjectResults)...)
			// WatchThread: a waiting tool learns that its turn went on
			// (core NATS, live chat events of the call's thread).
			sub("parley.chat.>")
			// The read-only entity lookup (NATS micro, queue "lookup"):
			// it answers through allow_responses, and micro answers
			// discovery ($SRV.PING|INFO|STATS).
			sub(SubjectLookup, SubjectResolve, "$SRV.>")
			perm.AllowResponses = true
		}
	case KindPolicy:
		// A policy answers a pre-execute request on <reply>.<its name>
		// (events.PolicyReplySubject), and only its own principal may
		// publish there: the agent takes the policy's name from that
		// subject, so no policy can answer as another. It reads the tool
		// registry. allow_responses is for the nats.go micro framework's
		// discovery answers ($SRV.PING|INFO|STATS); a reply on the bare
		// reply subject is ignored by the agent.
		pub(PolicyReplies(p.Name))
		perm.AllowResponses = true
		sub("parley.tool.pre_execute.>", "$SRV.>", inbox)
		pub(bucketRead(BucketTools)...)
	case KindIntegrator, KindGateway:
		pub(InputPrefix + p.Name + ".>")
		// Where a thread stands, from the processor's record
		// (events.ThreadStateSubject): only under its own principal,
		// which the processor takes as the asker.
		pub("parley.state." + p.Name + ".*")
		// Its threads' standing approvals (events.ApprovalsSubject),
		// likewise under its own principal.
		pub("parley.approvals." + p.Name + ".*")
		pub(msgGet(StreamInput)...)
		pub(chatReader()...)
		// `parley chat` reads the titles of the entities a confirmation
		// names from the built-in site (parley_content), so a person
		// confirms titles, not bare IDs. No worker's state bucket: a
		// thread's state comes from its events (client/threadstate).
		pub(bucketRead(BucketContent)...)
		// The entity lookup behind the web chat's autocomplete
		// (request-reply to the tool-executor).
		pub(SubjectLookup)
		sub(inbox)
		if p.Kind == KindGateway {
			pub(bucketOwn(BucketGatewayThreads)...)
			// The gateway faces the internet: it may not create or change
			// parley's streams (the workers do); it waits for PARLEY_CHAT
			// (gateway.New, bus.AwaitStreams) through chatReader's info.
			// Its readiness, like a worker's (GET /readyz).
			pub(streamNames)
		}
		// Reading PARLEY_CHAT must not reach parley's durables: an
		// integrator creating "processor" with another filter would
		// reconfigure the processor's consumer. Each create form that
		// names the consumer in the subject is denied for them (the
		// older form, which names it only in the request body, is denied
		// to everyone below).
		for _, d := range durables {
			perm.PublishDeny = append(perm.PublishDeny,
				"$JS.API.CONSUMER.CREATE.*."+d, "$JS.API.CONSUMER.CREATE.*."+d+".>",
				"$JS.API.CONSUMER.DELETE.*."+d, "$JS.API.CONSUMER.DURABLE.CREATE.*."+d)
		}
	}
	// Every principal other than admin: no publish on any inbox (replies
	// go through allow_responses; a policy's own pre-execute replies are
	// its one allowed inbox subject), no subscription on another's inbox
	// or on the pre-execute requests unless it is a policy.
	perm.PublishDeny = append(perm.PublishDeny, "_INBOX.>")
	// The older consumer create, $JS.API.CONSUMER.CREATE.<stream>, names
	// the consumer only in the request body, where no permission can see
	// it: with it an integrator could create or reconfigure a durable
	// named "agent" or "processor". Every client parley ships names its
	// consumers in the subject (nats.go against NATS 2.9 or later), so the
	// form is refused to everyone but admin.
	perm.PublishDeny = append(perm.PublishDeny, consumerCreateUnnamed)
	if p.Kind != KindPolicy {
		perm.PublishDeny = append(perm.PublishDeny, "_INBOX_*.>")
	}
	if p.Kind != KindPolicy {
		perm.SubscribeDeny = append(perm.SubscribeDeny, "parley.tool.pre_execute.>")
	}
	perm.SubscribeDeny = append(perm.SubscribeDeny, "_INBOX.>")
	perm.PublishAllow, perm.PublishDeny = dedup(perm.PublishAllow), dedup(perm.PublishDeny)
	perm.SubscribeAllow, perm.SubscribeDeny = dedup(perm.SubscribeAllow), dedup(perm.SubscribeDeny)
	return perm
}

// dedup drops repeated subjects, keeping the first of each.
func dedup(subjects []string) []string {
	seen := make(map[string]bool, len(subjects))
	out := subjects[:0]
	for _, s := range subjects {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// streamAdmin is creating, reconfiguring and reading the configuration of
// streams (not deleting or purging them).
func streamAdmin(streams ...string) []string {
	var out []string
	for _, s := range streams {
		out = append(out, "$JS.API.STREAM.CREATE."+s, "$JS.API.STREAM.UPDATE."+s, "$JS.API.STREAM.INFO."+s)
	}
	return out
}

// streamRead is reading single messages of streams (by sequence or last
// by subject, direct or through the leader).
func streamRead(streams ...string) []string {
	var out []string
	for _, s := range streams {
		out = append(out, "$JS.API.STREAM.INFO."+s, "$JS.API.STREAM.MSG.GET."+s,
			"$JS.API.DIRECT.GET."+s, "$JS.API.DIRECT.GET."+s+".>")
	}
	return out
}

// msgGet is reading one stored message of streams by sequence: a
// publisher checks a duplicate PubAck against what is stored
// (bus.checkDuplicate) on every stream it publishes to.
func msgGet(streams ...string) []string {
	var out []string
	for _, s := range streams {
		out = append(out, "$JS.API.STREAM.MSG.GET."+s)
	}
	return out
}

// consumer is running a durable pull consumer of stream: create (with or
// without filter subject), info, fetch, acknowledge, and dead-letter what
// it cannot handle.
func consumer(stream, durable string) []string {
	return []string{
		"$JS.API.CONSUMER.CREATE." + stream + "." + durable,
		"$JS.API.CONSUMER.CREATE." + stream + "." + durable + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + "." + durable,
		"$JS.API.CONSUMER.INFO." + stream + "." + durable,
		"$JS.API.CONSUMER.MSG.NEXT." + stream + "." + durable,
		"$JS.ACK." + stream + "." + durable + ".>",
		"parley.dlq." + stream + "." + durable,
	}
}

// chatReader is reading PARLEY_CHAT through ordered consumers (created,
// fetched from, deleted by the reader) and single reads.
func chatReader() []string {
	return append(streamRead(StreamChat),
		"$JS.API.CONSUMER.CREATE."+StreamChat+".>",
		"$JS.API.CONSUMER.INFO."+StreamChat+".*", "$JS.API.CONSUMER.DELETE."+StreamChat+".*",
		"$JS.API.CONSUMER.MSG.NEXT."+StreamChat+".*")
}

// bucketRead is opening and reading KV buckets: info, gets, watches and
// key listings (ordered push consumers with flow control).
func bucketRead(buckets ...string) []string {
	var out []string
	for _, b := range buckets {
		s := "KV_" + b
		out = append(out, streamRead(s)...)
		out = append(out, "$JS.API.CONSUMER.CREATE."+s+".>",
			"$JS.API.CONSUMER.DELETE."+s+".*", "$JS.API.CONSUMER.INFO."+s+".*",
			"$JS.FC."+s+".>")
	}
	return out
}

// bucketOwn is bucketRead plus creating and reconfiguring the buckets
// (kvstate.OpenBucket; nats.go reads the account's JetStream limits
// first) and putting, deleting and purging keys.
func bucketOwn(buckets ...string) []string {
	out := append(bucketRead(buckets...), "$JS.API.INFO")
	for _, b := range buckets {
		out = append(out, streamAdmin("KV_"+b)...)
		out = append(out, "$KV."+b+".>")
	}
	return out
}

// objectRead is opening and reading an object store.
func objectRead(store string) []string {
	s := "OBJ_" + store
	return append(streamRead(s),
		"$JS.API.CONSUMER.CREATE."+s+".>",
		"$JS.API.CONSUMER.DELETE."+s+".*", "$JS.API.CONSUMER.INFO."+s+".*",
		"$JS.FC."+s+".>")
}

// objectWrite is creating an object store, and reading, putting and
// deleting its objects (a replaced object's chunks are purged).
func objectWrite(store string) []string {
	s := "OBJ_" + store
	return append(objectRead(store),
		"$JS.API.STREAM.CREATE."+s, "$JS.API.STREAM.UPDATE."+s, "$JS.API.STREAM.PURGE."+s,
		"$O."+store+".>")
}
