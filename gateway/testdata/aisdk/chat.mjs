// Drives parley's gateway with the AI SDK's own client code (package `ai`,
// pinned in package.json): DefaultChatTransport sends the requests a useChat
// page sends, readUIMessageStream folds the chunks into UIMessages, and every
// chunk on the wire is checked with the package's uiMessageChunkSchema.
// Run by e2e/aisdk_test.go:
//
//   PARLEY_URL=http://… PARLEY_TOKEN=… node chat.mjs <scenario> <thread>
//
// scenarios: approve, decline, form, approve-wait (prints "PAUSED" and waits
// for a line on standard input before approving). The last line of standard
// output is a JSON report; any failure exits non-zero.
import { DefaultChatTransport, readUIMessageStream, uiMessageChunkSchema } from "ai";
import { safeValidateTypes } from "@ai-sdk/provider-utils";
import { createInterface } from "node:readline";

const [scenario, thread] = process.argv.slice(2);
const base = process.env.PARLEY_URL;
const token = process.env.PARLEY_TOKEN;
const report = { scenario, chunks: [], headers: [] };

function fail(msg) {
  console.log(JSON.stringify({ ...report, error: msg }));
  process.exit(1);
}

// checkedFetch checks the response header and every chunk of the stream
// against uiMessageChunkSchema, recording the chunk types.
async function checkedFetch(url, init) {
  const resp = await fetch(url, init);
  if (!resp.ok || resp.status === 204 || !resp.body) return resp;
  report.headers.push(resp.headers.get("x-vercel-ai-ui-message-stream"));
  const [mine, theirs] = resp.body.tee();
  report.pending = (async () => {
    const text = await new Response(mine).text();
    for (const block of text.split("\n\n")) {
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") { report.chunks.push("[DONE]"); continue; }
        const value = JSON.parse(data);
        const r = await safeValidateTypes({ value, schema: uiMessageChunkSchema });
        if (!r.success) fail("chunk does not validate: " + data + ": " + r.error);
        report.chunks.push(value.type);
      }
    }
  })();
  return new Response(theirs, { status: resp.status, headers: resp.headers });
}

const transport = new DefaultChatTransport({
  api: base + "/v1/ai-sdk/chat",
  headers: { Authorization: "Bearer " + token },
  fetch: checkedFetch,
});

// send posts messages and returns the last UIMessage snapshot of the answer.
async function send(messages, { message, messageId } = {}) {
  const stream = await transport.sendMessages({ chatId: thread, messages, trigger: "submit-message", messageId, abortSignal: undefined });
  let last;
  const errors = [];
  for await (const m of readUIMessageStream({ stream, message, onError: (e) => errors.push(String(e)) })) last = m;
  await report.pending;
  if (errors.length) report.streamErrors = (report.streamErrors || []).concat(errors);
  return structuredClone(last);
}

const textOf = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");

async function waitForLine() {
  const rl = createInterface({ input: process.stdin });
  for await (const _ of rl) { rl.close(); return; }
}

async function confirm(approved, reason, wait) {
  const user = { id: "u-" + thread, role: "user", parts: [{ type: "text", text: "delete the 10 draft articles" }] };
  const paused = await send([user]);
  report.paused = paused;
  const part = paused.parts.find((p) => p.type === "dynamic-tool" && p.state === "approval-requested");
  if (!part) fail("no tool part awaiting approval: " + JSON.stringify(paused));
  report.approvalId = part.approval.id;
  report.resumeWhilePaused = (await transport.reconnectToStream({ chatId: thread })) === null ? "none" : "stream";
  if (wait) {
    console.log("PAUSED");
    await waitForLine();
  }
  // What addToolApprovalResponse does to the part, then the request
  // sendAutomaticallyWhen (lastAssistantMessageIsCompleteWithApprovalResponses) makes.
  const answered = { ...paused, parts: paused.parts.map((p) => p === part
    ? { ...p, state: "approval-responded", approval: { ...p.approval, approved, ...(reason ? { reason } : {}) } } : p) };
  const done = await send([user, answered], { message: answered, messageId: answered.id });
  report.final = done;
  report.text = textOf(done);
  report.toolState = done.parts.find((p) => p.toolCallId === part.toolCallId)?.state;
}

async function form() {
  const user = { id: "u-" + thread, role: "user", parts: [{ type: "text", text: "create an event for the launch party" }] };
  const asked = await send([user]);
  report.paused = asked;
  const q = asked.parts.find((p) => p.type === "data-parley-form");
  if (!q) fail("no data-parley-form part: " + JSON.stringify(asked));
  const content = {};
  for (const [name, p] of Object.entries(q.data.question.requestedSchema.properties)) {
    content[name] = p.format === "date" ? "2027-01-25" : "Launch party";
  }
  const answer = { id: "a-" + thread, role: "user", parts: [{ type: "data-parley-form-response",
    data: { elicitationId: q.data.elicitationId, action: "accept", content } }] };
  const done = await send([user, asked, answer]);
  report.final = done;
  report.text = textOf(done);
}

try {
  switch (scenario) {
    case "approve": await confirm(true, "", false); break;
    case "approve-wait": await confirm(true, "", true); break;
    case "decline": await confirm(false, "not yet", false); break;
    case "form": await form(); break;
    default: fail("unknown scenario " + scenario);
  }
} catch (e) {
  fail(String(e?.stack || e));
}
delete report.pending;
console.log(JSON.stringify(report));
