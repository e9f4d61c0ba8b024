// Package metrics defines every OpenTelemetry metric parley's workers
// record, and the small functions the workers call to record them (one line
// at each place where something countable happens).
//
// Names follow the OpenTelemetry semantic conventions where one applies:
// messaging.process.duration (messaging, with messaging.system "nats" and
// messaging.consumer.group.name the durable consumer),
// gen_ai.client.operation.duration and gen_ai.client.token.usage (GenAI);
// parley's own metrics are named parley.<noun>.<verb> with units in UCUM
// ("s", "{turn}"). The Prometheus exporter (Setup) writes them with
// underscores, unit suffixes and _total on counters:
// parley.turns.started → parley_turns_started_total,
// messaging.process.duration → messaging_process_duration_seconds.
//
// Every attribute value is bounded: event types outside parley's
// vocabulary are recorded as "_OTHER", reasons are parley's stable codes,
// tool names are those of registered tools, model names those of the
// configured endpoint.
//
// Instruments are created from the meter provider installed with Use
// (Setup installs one); until then they are no-ops, so a worker without
// metrics configured pays almost nothing.
//
// It owns the instruments' names, units and attributes. Of parley's packages
// it imports only events and model (for the names of event types and failure
// reasons); it must not import bus, kvstate, a worker or a composition root
// (internal/layers checks the direction of imports).
package metrics

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/semconv/v1.40.0/genaiconv"
	"go.opentelemetry.io/otel/semconv/v1.40.0/messagingconv"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
)

// InstrumentationName is the meter's (instrumentation scope's) name.
const InstrumentationName = "github.com/parley-dev/parley"

// Names of parley's own instruments (the semantic-convention ones are
// genaiconv's and messagingconv's). Counters count events stored for the
// first time (a publish JetStream reports as a duplicate is not counted).
const (
	// TurnsStarted counts turns handed to an agent (agent.run.requested). Unit {turn}.
	TurnsStarted = "parley.turns.started"
	// TurnsCompleted counts turn.completed events. Unit {turn}.
	TurnsCompleted = "parley.turns.completed"
	// TurnsFailed counts turn.failed events by error.type (the event's reason). Unit {turn}.
	TurnsFailed = "parley.turns.failed"
	// TurnsRejected counts turn.rejected events by error.type (the reason). Unit {turn}.
	TurnsRejected = "parley.turns.rejected"
	// TurnsPaused counts turn.paused events: a turn waiting for a person. Unit {pause}.
	TurnsPaused = "parley.turns.paused"
	// ElicitationsRequested counts questions asked (elicitation.requested). Unit {elicitation}.
	ElicitationsRequested = "parley.elicitations.requested"
	// ElicitationsAnswered counts answers the processor accepted, by
	// parley.elicitation.action (accept, decline, cancel). Unit {answer}.
	ElicitationsAnswered = "parley.elicitations.answered"
	// ElicitationsRejected counts refused answers (elicitation.rejected) by
	// error.type (the reason). Unit {answer}.
	ElicitationsRejected = "parley.elicitations.rejected"
	// ElicitationsExpired counts paused turns whose questions expired
	// (elicitation.expired). Unit {pause}.
	ElicitationsExpired = "parley.elicitations.expired"
	// ElicitationsCancelled counts withdrawn questions
	// (elicitation.cancelled events). Unit {pause}.
	ElicitationsCancelled = "parley.elicitations.cancelled"
	// PolicyDecisions counts pre-execute decisions the agent received, by
	// parley.policy.decision (allow, veto, confirm, policy_unavailable) and
	// parley.policy.name. Unit {decision}.
	PolicyDecisions = "parley.policy.decisions"
	// PolicyDuplicateReplies counts second (and further) replies of one
	// policy to one pre-execute request, by parley.policy.name: a replica
	// in a queue group of its own, or another subscriber holding that
	// policy's credentials. The stricter answer counts. Unit {reply}.
	PolicyDuplicateReplies = "parley.policy.duplicate_replies"
	// ToolCallDuration is the duration of tool executions in seconds, by
	// gen_ai.tool.name and parley.tool.outcome (ok, error, input_required,
	// failure); its count is the number of tool calls.
	ToolCallDuration = "parley.tool.call.duration"
	// MessagingRedeliveries counts deliveries after the first (NumDelivered
	// > 1), by messaging.consumer.group.name. Unit {message}.
	MessagingRedeliveries = "parley.messaging.redeliveries"
	// MessagingDeadLetters counts messages moved to the dead-letter stream,
	// by messaging.consumer.group.name. Unit {message}.
	MessagingDeadLetters = "parley.messaging.dead_letters"
	// ConsumerPending is a JetStream consumer's messages not yet delivered
	// (num_pending), by messaging.consumer.group.name and
	// messaging.destination.name (the stream). Unit {message}.
	ConsumerPending = "parley.jetstream.consumer.pending"
	// ConsumerAckPending is a JetStream consumer's messages delivered but
	// not yet acknowledged (num_ack_pending). Unit {message}.
	ConsumerAckPending = "parley.jetstream.consumer.ack_pending"
)

// Attribute keys parley adds to the conventions' own.
const (
	keyEventType    = attribute.Key("cloudevents.event_type")
	keyOutcome      = attribute.Key("parley.outcome")
	keyAction       = attribute.Key("parley.elicitation.action")
	keyDecision     = attribute.Key("parley.policy.decision")
	keyPolicy       = attribute.Key("parley.policy.name")
	keyToolOutcome  = attribute.Key("parley.tool.outcome")
	keyToolName     = attribute.Key("gen_ai.tool.name")
	keyErrorType    = attribute.Key("error.type")
	keyConsumer     = attribute.Key("messaging.consumer.group.name")
	keyDestination  = attribute.Key("messaging.destination.name")
	keySystem       = attribute.Key("messaging.system")
	keyResponseModl = attribute.Key("gen_ai.response.model")
	keyTokenType    = attribute.Key("gen_ai.token.type")
	other           = "_OTHER"
)

// Bucket boundaries: the GenAI conventions' advice for durations and
// tokens; handler and tool durations use the duration ones.
var (
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

type instruments struct {
	turnsStarted, turnsCompleted, turnsFailed, turnsRejected, turnsPaused metric.Int64Counter
	elicRequested, elicAnswered, elicRejected, elicExpired, elicCancelled metric.Int64Counter
	policyDecisions, policyDuplicates                                     metric.Int64Counter
	toolDuration                                                          metric.Float64Histogram
	redeliveries, deadLetters                                             metric.Int64Counter
	process                                                               messagingconv.ProcessDuration
	genaiDuration                                                         genaiconv.ClientOperationDuration
	genaiTokens                                                           genaiconv.ClientTokenUsage
	gauges                                                                metric.Registration
	// published is the counter of each event type Published counts.
	published map[events.Type]metric.Int64Counter
}

// withReason are the types whose count carries the event's reason as
// error.type.
var withReason = map[events.Type]bool{
	events.TypeTurnFailed: true, events.TypeTurnRejected: true, events.TypeElicitationRejected: true,
}

var (
	current atomic.Pointer[instruments]
	useMu   sync.Mutex
)

func init() { _ = Use(noop.NewMeterProvider()) }

// Use creates every instrument from mp and records into them from now on
// (Setup calls it; tests call it with a provider on a manual reader). It
// returns the first instrument error; the instruments that failed are
// no-ops.
func Use(mp metric.MeterProvider) error {
	useMu.Lock()
	defer useMu.Unlock()
	m := mp.Meter(InstrumentationName)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	in := &instruments{
		turnsStarted:    counter(TurnsStarted, "{turn}", "Turns handed to an agent."),
		turnsCompleted:  counter(TurnsCompleted, "{turn}", "Turns that completed with an answer."),
		turnsFailed:     counter(TurnsFailed, "{turn}", "Turns that failed, by error.type."),
		turnsRejected:   counter(TurnsRejected, "{turn}", "Turn requests refused, by error.type."),
		turnsPaused:     counter(TurnsPaused, "{pause}", "Pauses: turns waiting for a person."),
		elicRequested:   counter(ElicitationsRequested, "{elicitation}", "Questions asked of a person."),
		elicAnswered:    counter(ElicitationsAnswered, "{answer}", "Answers accepted, by parley.elicitation.action."),
		elicRejected:    counter(ElicitationsRejected, "{answer}", "Answers refused, by error.type."),
		elicExpired:     counter(ElicitationsExpired, "{pause}", "Pauses whose questions expired unanswered."),
		elicCancelled:   counter(ElicitationsCancelled, "{pause}", "Questions withdrawn (superseded or cancelled)."),
		policyDecisions: counter(PolicyDecisions, "{decision}", "Pre-execute policy decisions, by parley.policy.decision and parley.policy.name."),
		policyDuplicates: counter(PolicyDuplicateReplies, "{reply}",
			"Second and further replies of one policy to one pre-execute request, by parley.policy.name (the stricter answer counts)."),
		redeliveries: counter(MessagingRedeliveries, "{message}", "Deliveries of a message after its first."),
		deadLetters:  counter(MessagingDeadLetters, "{message}", "Messages moved to the dead-letter stream."),
	}
	in.published = map[events.Type]metric.Int64Counter{
		events.TypeRunRequested: in.turnsStarted, events.TypeTurnCompleted: in.turnsCompleted,
		events.TypeTurnFailed: in.turnsFailed, events.TypeTurnRejected: in.turnsRejected,
		events.TypeTurnPaused: in.turnsPaused, events.TypeElicitationRequested: in.elicRequested,
		events.TypeElicitationRejected: in.elicRejected, events.TypeElicitationExpired: in.elicExpired,
		events.TypeElicitationCancelled: in.elicCancelled,
	}
	var err error
	in.toolDuration, err = m.Float64Histogram(ToolCallDuration, metric.WithUnit("s"),
		metric.WithDescription("Tool execution time, by gen_ai.tool.name and parley.tool.outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	in.process, err = messagingconv.NewProcessDuration(m, metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	in.genaiDuration, err = genaiconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	in.genaiTokens, err = genaiconv.NewClientTokenUsage(m, metric.WithExplicitBucketBoundaries(tokenBuckets...))
	errs = append(errs, err)
	pending, err := m.Int64ObservableGauge(ConsumerPending, metric.WithUnit("{message}"),
		metric.WithDescription("JetStream consumer messages not yet delivered (num_pending), from consumer info polled every few seconds."))
	errs = append(errs, err)
	ackPending, err := m.Int64ObservableGauge(ConsumerAckPending, metric.WithUnit("{message}"),
		metric.WithDescription("JetStream consumer messages delivered but not acknowledged (num_ack_pending)."))
	errs = append(errs, err)
	in.gauges, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, c := range Consumers() {
			if !c.Polled {
				continue
			}
			attrs := metric.WithAttributes(keySystem.String("nats"), keyConsumer.String(c.Durable), keyDestination.String(c.Stream))
			o.ObserveInt64(pending, int64(c.Pending), attrs)
			o.ObserveInt64(ackPending, int64(c.AckPending), attrs)
		}
		return nil
	}, pending, ackPending)
	errs = append(errs, err)
	if old := current.Swap(in); old != nil && old.gauges != nil {
		_ = old.gauges.Unregister()
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func get() *instruments { return current.Load() }

// reasonOf reads the "reason" of an event's JSON data (turn.failed,
// turn.rejected, elicitation.rejected); "" when there is none.
func reasonOf(e *event.Event) string {
	var d struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(e.Data(), &d)
	return bounded(d.Reason)
}

// bounded keeps a stable code (lower-case letters, digits, '_', '.', '-',
// at most 64 bytes) and replaces anything else with "_OTHER", so a value
// that is not one of parley's codes cannot grow a metric's series.
func bounded(s string) string {
	if s == "" || len(s) > 64 {
		return other
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return other
		}
	}
	return s
}

// Published counts e when JetStream stored it for the first time (dup is
// PubAck.Duplicate: a redelivered handler publishing the same event ID
// again is not counted twice). Only the turn and elicitation outcomes are
// counted; other types are ignored. bus.Client.Publish calls it.
func Published(ctx context.Context, e *event.Event, dup bool) {
	if dup || e == nil {
		return
	}
	in := get()
	t := events.TypeOf(e)
	c, ok := in.published[t]
	switch {
	case !ok:
	case withReason[t]:
		c.Add(ctx, 1, metric.WithAttributes(keyErrorType.String(reasonOf(e))))
	default:
		c.Add(ctx, 1)
	}
}

// Answered counts an answer the processor accepted, by its MCP action
// (accept, decline, cancel).
func Answered(ctx context.Context, action string) {
	get().elicAnswered.Add(ctx, 1, metric.WithAttributes(keyAction.String(bounded(action))))
}

// PolicyDecision counts a pre-execute decision by its decision and the
// policy that gave it ("" when none answered: "none").
func PolicyDecision(ctx context.Context, decision, policy string) {
	if policy == "" {
		policy = "none"
	}
	get().policyDecisions.Add(ctx, 1, metric.WithAttributes(keyDecision.String(bounded(decision)), keyPolicy.String(bounded(policy))))
}

// PolicyDuplicateReply counts a further reply of policy to one
// pre-execute request.
func PolicyDuplicateReply(ctx context.Context, policy string) {
	get().policyDuplicates.Add(ctx, 1, metric.WithAttributes(keyPolicy.String(bounded(policy))))
}

// Tool outcomes, the values of parley.tool.outcome.
const (
	// ToolOK: the tool returned a result that is not an error.
	ToolOK = "ok"
	// ToolError: the tool returned a result with isError (MCP).
	ToolError = "error"
	// ToolInputRequired: the tool asked for input (MCP input_required).
	ToolInputRequired = "input_required"
	// ToolFailure: the call failed without a result (retried, or reported
	// as outcome unknown).
	ToolFailure = "failure"
)

// ToolCall records one execution of the registered tool name that took d,
// with its outcome: err non-nil is ToolFailure, else isError ToolError,
// else inputRequired ToolInputRequired, else ToolOK.
func ToolCall(ctx context.Context, name string, d time.Duration, err error, isError, inputRequired bool) {
	outcome := ToolOK
	switch {
	case err != nil:
		outcome = ToolFailure
	case isError:
		outcome = ToolError
	case inputRequired:
		outcome = ToolInputRequired
	}
	get().toolDuration.Record(ctx, d.Seconds(), metric.WithAttributes(keyToolName.String(name), keyToolOutcome.String(outcome)))
}

// ModelCall records one chat completion of provider that started at start:
// gen_ai.client.operation.duration, and gen_ai.client.token.usage for the
// input and output tokens when the provider reported usage. provider names
// itself with a ProviderName() string method ("_OTHER" otherwise); a
// failed call carries error.type (a *model.Error's reason, else "_OTHER").
func ModelCall(ctx context.Context, provider any, start time.Time, resp model.Response, err error) {
	in := get()
	name := genaiconv.ProviderNameAttr(other)
	if p, ok := provider.(interface{ ProviderName() string }); ok {
		name = genaiconv.ProviderNameAttr(bounded(p.ProviderName()))
	}
	attrs := []attribute.KeyValue{}
	if resp.Model != "" {
		attrs = append(attrs, keyResponseModl.String(resp.Model))
	}
	durAttrs := attrs
	if err != nil {
		et := other
		if me := model.AsError(err); me != nil {
			et = bounded(me.Reason)
		}
		durAttrs = append(durAttrs[:len(durAttrs):len(durAttrs)], keyErrorType.String(et))
	}
	in.genaiDuration.Record(ctx, time.Since(start).Seconds(), genaiconv.OperationNameChat, name, durAttrs...)
	if err == nil && resp.Usage != nil {
		in.genaiTokens.Record(ctx, resp.Usage.InputTokens, genaiconv.OperationNameChat, name, genaiconv.TokenTypeInput, attrs...)
		in.genaiTokens.Record(ctx, resp.Usage.OutputTokens, genaiconv.OperationNameChat, name, genaiconv.TokenTypeOutput, attrs...)
	}
}

// Handler outcomes, the values of parley.outcome on
// messaging.process.duration.
const (
	// OutcomeAck: handled and acknowledged.
	OutcomeAck = "ack"
	// OutcomeRetry: failed, nakked with backoff for another delivery.
	OutcomeRetry = "retry"
	// OutcomeWait: not handled yet (RetryLater), nakked without counting as a failure.
	OutcomeWait = "wait"
	// OutcomeDeadLetter: dead-lettered (permanent error, or out of deliveries).
	OutcomeDeadLetter = "dead_letter"
)

// knownTypes are the event types recorded by name, the catalogue's (a
// bounded set); others are "_OTHER".
var knownTypes = func() map[events.Type]bool {
	out := map[events.Type]bool{}
	for _, e := range events.Catalog() {
		out[e.Type] = true
	}
	return out
}()

// EventType bounds a CloudEvents type for use as an attribute: parley's
// types as they are, anything else "_OTHER".
func EventType(t string) string {
	if knownTypes[events.Type(t)] {
		return t
	}
	return other
}

// processKey names one attribute set of messaging.process.duration.
type processKey struct{ consumer, eventType, outcome string }

// maxProcessSets bounds the attribute sets processSet keeps; consumers
// and outcomes are parley's own names and event types are bounded
// (EventType), so a deployment stays far below it.
const maxProcessSets = 4096

var (
	processSets    sync.Map // processKey -> attribute.Set
	processSetsLen atomic.Int32
)

// processSet returns the attribute set of one consumer, event type and
// outcome, built once (attribute.NewSet sorts and copies) rather than on
// every message.
func processSet(consumer, eventType, outcome string) attribute.Set {
	k := processKey{consumer, eventType, outcome}
	if s, ok := processSets.Load(k); ok {
		return s.(attribute.Set)
	}
	s := attribute.NewSet(attribute.String("messaging.operation.name", "process"), keySystem.String("nats"),
		keyConsumer.String(consumer), keyEventType.String(eventType), keyOutcome.String(outcome))
	if processSetsLen.Load() < maxProcessSets {
		if _, loaded := processSets.LoadOrStore(k, s); !loaded {
			processSetsLen.Add(1)
		}
	}
	return s
}

// Processed records one handler run of the durable consumer on an event of
// type eventType ("" when undecodable) that took d and ended with outcome
// (OutcomeAck...), as messaging.process.duration; numDelivered > 1 also
// counts a redelivery.
func Processed(ctx context.Context, consumer, eventType, outcome string, numDelivered uint64, d time.Duration) {
	in := get()
	if in.process.Enabled(ctx) {
		in.process.RecordSet(ctx, d.Seconds(), processSet(consumer, EventType(eventType), outcome))
	}
	if numDelivered > 1 {
		in.redeliveries.Add(ctx, 1, metric.WithAttributes(keySystem.String("nats"), keyConsumer.String(consumer)))
	}
}

// DeadLettered counts a message the durable consumer moved to the
// dead-letter stream.
func DeadLettered(ctx context.Context, consumer string) {
	get().deadLetters.Add(ctx, 1, metric.WithAttributes(keySystem.String("nats"), keyConsumer.String(consumer)))
}
