// Drives parley's gateway (POST /v1/ag-ui) with the real AG-UI client
// (@ag-ui/client's HttpAgent, pinned in package.json) through one
// scenario, and checks every event the gateway sent: each parses with
// @ag-ui/core's EventSchema, the stream of each run passes the client's
// own verifyEvents, and the client's enforcement stage warns about
// nothing (an unknown member on an event would be stripped with a
// warning). Run by e2e/agui_test.go:
//
//	node run.mjs <scenario> <gateway base URL> <token> <thread>
//
// Scenarios: approve, decline, edit, form, stream, restart (pauses, prints
// {"paused": true} and reads the base URL of a gateway to resume through
// from standard input). The last line printed is a JSON summary; the
// exit status is 0 only when every check passed.
import { HttpAgent, verifyEvents } from "@ag-ui/client";
import { EventSchema, AgentCapabilitiesSchema } from "@ag-ui/core/schemas";
import { from, lastValueFrom, toArray, tap } from "rxjs";
import { createInterface } from "node:readline";

const [scenario, base, token, thread] = process.argv.slice(2);
if (!scenario || !base || !token || !thread) {
  console.error("usage: node run.mjs <scenario> <base URL> <token> <thread>");
  process.exit(2);
}

// Any warning of the client (its enforcement stage strips unknown members
// and events with one) fails the scenario.
const warnings = [];
const warn = console.warn;
console.warn = (...args) => {
  warnings.push(args.map(String).join(" "));
  warn(...args);
};

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
  }
}

// ParleyAgent is HttpAgent plus what it leaves to subclasses: the agent's
// capabilities (GET <url>/capabilities), and a record of the raw events of
// each run as they came off the wire.
class ParleyAgent extends HttpAgent {
  constructor(config) {
    super(config);
    this.raw = [];
  }
  run(input) {
    const events = [];
    this.raw.push(events);
    return super.run(input).pipe(tap((e) => events.push(e)));
  }
  async getCapabilities() {
    const res = await fetch(this.url + "/capabilities", { headers: this.headers });
    check(res.ok, "GET capabilities", res.status);
    return AgentCapabilitiesSchema.parse(await res.json());
  }
}

const agent = new ParleyAgent({
  url: base + "/v1/ag-ui",
  threadId: thread,
  headers: { Authorization: "Bearer " + token },
});

// run runs the agent once and checks the run's raw events.
async function run(params) {
  let finished;
  let error;
  const res = await agent.runAgent(params, {
    onRunFinishedEvent: (p) => {
      finished = p;
    },
    onRunErrorEvent: (p) => {
      error = p.event;
    },
  });
  const events = agent.raw[agent.raw.length - 1];
  for (const e of events) {
    const r = EventSchema.safeParse(e);
    check(r.success, "event does not parse with EventSchema", { event: e, issues: r.error?.issues });
  }
  const verified = await lastValueFrom(from(events).pipe(verifyEvents(), toArray()));
  check(verified.length === events.length, "verifyEvents dropped events");
  check(events[0]?.type === "RUN_STARTED", "first event", events[0]);
  check(events[0].threadId === thread && events[0].runId, "RUN_STARTED ids", events[0]);
  return { res, finished, error, events, types: events.map((e) => e.type) };
}

function text(events) {
  return events
    .filter((e) => e.type === "TEXT_MESSAGE_CONTENT")
    .map((e) => e.delta)
    .join("");
}

async function interrupted(message) {
  agent.addMessage({ id: "m-" + thread, role: "user", content: message });
  const r = await run({});
  check(!r.error, "run errored", r.error);
  check(r.finished?.outcome === "interrupt", "outcome", r.finished?.event);
  check(agent.pendingInterrupts.length === 1, "pending interrupts", agent.pendingInterrupts);
  const i = agent.pendingInterrupts[0];
  check(typeof i.expiresAt === "string" && Date.parse(i.expiresAt) > Date.now(), "expiresAt", i);
  return { r, i };
}

async function approval(message) {
  const { r, i } = await interrupted(message);
  check(i.reason === "tool_approval", "reason", i);
  check(i.responseSchema?.properties?.approved?.type === "boolean", "responseSchema", i);
  // The gated call was opened (its arguments shown) and has no result.
  const start = r.events.find((e) => e.type === "TOOL_CALL_START" && e.toolCallId === i.toolCallId);
  check(start?.toolCallName === "delete_entities", "gated call started", r.events);
  check(!r.events.some((e) => e.type === "TOOL_CALL_RESULT" && e.toolCallId === i.toolCallId), "gated call has no result");
  // list_entities ran before the pause: its call and its result.
  check(r.events.some((e) => e.type === "TOOL_CALL_RESULT" && e.metadata?.["dev.parley/tool"] === "list_entities"), "list result", r.types);
  return { r, i };
}

async function resume(i, status, payload) {
  const entry = { interruptId: i.id, status };
  if (payload !== undefined) entry.payload = payload;
  return run({ resume: [entry] });
}

const summary = { scenario };
try {
  const caps = await agent.getCapabilities();
  check(caps.humanInTheLoop?.interrupts === true, "capabilities declare interrupts", caps);

  switch (scenario) {
    case "approve":
    case "restart": {
      const { i } = await approval("delete the 10 draft articles");
      if (scenario === "restart") {
        console.log(JSON.stringify({ paused: true, interrupt: i.id }));
        const rl = createInterface({ input: process.stdin });
        const next = await new Promise((resolve) => rl.once("line", resolve));
        rl.close();
        agent.url = next.trim() + "/v1/ag-ui";
      }
      const r = await resume(i, "resolved", { approved: true });
      check(!r.error, "resume errored", r.error);
      check(r.finished?.outcome === "success", "resume outcome", r.finished?.event);
      check(agent.pendingInterrupts.length === 0, "interrupts left", agent.pendingInterrupts);
      const result = r.events.find((e) => e.type === "TOOL_CALL_RESULT" && e.toolCallId === i.toolCallId);
      check(result && !result.metadata?.["dev.parley/isError"], "the approved call's result", r.events);
      // No call opened again on the resume.
      check(!r.events.some((e) => e.type === "TOOL_CALL_START"), "no TOOL_CALL_START on resume", r.types);
      summary.text = text(r.events);
      summary.result = result.content;
      break;
    }
    case "decline": {
      const { i } = await approval("delete the 10 draft articles");
      const r = await resume(i, "resolved", { approved: false, reason: "not before the audit" });
      check(!r.error, "resume errored", r.error);
      check(r.finished?.outcome === "success", "resume outcome", r.finished?.event);
      const result = r.events.find((e) => e.type === "TOOL_CALL_RESULT" && e.toolCallId === i.toolCallId);
      check(result && result.metadata?.["dev.parley/notRun"], "the declined call is closed, not run", r.events);
      summary.text = text(r.events);
      break;
    }
    case "edit": {
      // approveWithEdits: the interrupt's responseSchema offers editedArgs
      // (the tool's input schema); an edit that does not fit it re-raises
      // the interrupt with the field's error; a valid one runs as edited.
      check(caps.humanInTheLoop?.approveWithEdits === true, "capabilities declare approveWithEdits", caps);
      const { i } = await approval("delete the 10 draft articles");
      const edit = i.responseSchema?.properties?.editedArgs;
      check(edit?.properties?.ids?.type === "array", "responseSchema offers editedArgs", i.responseSchema);
      let r = await resume(i, "resolved", { approved: true, editedArgs: { ids: [] } });
      check(!r.error, "invalid edit errored", r.error);
      check(r.finished?.outcome === "interrupt", "re-raised", r.finished?.event);
      const again = agent.pendingInterrupts[0];
      check(again?.id === i.id, "the same interrupt", agent.pendingInterrupts);
      const errs = again.metadata?.["dev.parley/errors"];
      check(Array.isArray(errs) && errs[0]?.path === "editedArgs.ids", "the field's error", again);
      summary.errors = errs;
      r = await resume(again, "resolved", { approved: true, editedArgs: { ids: ["article-2"] } });
      check(!r.error, "resume errored", r.error);
      check(r.finished?.outcome === "success", "resume outcome", r.finished?.event);
      const result = r.events.find((e) => e.type === "TOOL_CALL_RESULT" && e.toolCallId === i.toolCallId);
      check(result && !result.metadata?.["dev.parley/isError"], "the edited call's result", r.events);
      summary.text = text(r.events);
      summary.result = result.content;
      break;
    }
    case "form": {
      const { i } = await interrupted("create an event for the launch party");
      check(i.reason === "input_required", "reason", i);
      check(i.responseSchema?.properties?.date?.format === "date", "the form's schema", i);
      check(!i.toolCallId, "a form names no tool call", i);
      // An invalid date: the same interrupt again, with the field's error.
      let r = await resume(i, "resolved", { title: "Launch party", date: "next friday" });
      check(!r.error, "invalid resume errored", r.error);
      check(r.finished?.outcome === "interrupt", "re-raised", r.finished?.event);
      const again = agent.pendingInterrupts[0];
      check(again?.id === i.id, "the same interrupt", agent.pendingInterrupts);
      const errs = again.metadata?.["dev.parley/errors"];
      check(Array.isArray(errs) && errs[0]?.path === "date", "the field's error", again);
      summary.errors = errs;
      r = await resume(again, "resolved", { title: "Launch party", date: "2027-03-12" });
      check(!r.error, "resume errored", r.error);
      check(r.finished?.outcome === "success", "resume outcome", r.finished?.event);
      summary.text = text(r.events);
      break;
    }
    case "stream": {
      // A streaming model: the text arrives as deltas, progress as
      // activity, and the final message adds no second copy of the text.
      agent.addMessage({ id: "m-" + thread, role: "user", content: "hello" });
      const r = await run({});
      check(!r.error, "run errored", r.error);
      check(r.finished?.outcome === "success", "outcome", r.finished?.event);
      check(r.types.filter((t) => t === "TEXT_MESSAGE_START").length === 1, "one text message", r.types);
      check(r.types.includes("ACTIVITY_SNAPSHOT"), "progress as activity", r.types);
      const assistant = agent.messages.filter((m) => m.role === "assistant");
      check(assistant.length === 1 && assistant[0].content === text(r.events), "the client's message", agent.messages);
      summary.text = text(r.events);
      break;
    }
    default:
      throw new Error("unknown scenario " + scenario);
  }
  check(warnings.length === 0, "client warnings", warnings);
  summary.ok = true;
  summary.messages = agent.messages.map((m) => m.role);
  console.log(JSON.stringify(summary));
} catch (err) {
  summary.ok = false;
  summary.error = String(err?.stack || err);
  console.log(JSON.stringify(summary));
  process.exit(1);
}
