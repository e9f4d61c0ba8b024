"use client";
// A minimal useChat page on parley's gateway (docs/AI-SDK.md).
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";
import { useState } from "react";

const api = process.env.NEXT_PUBLIC_PARLEY_URL + "/v1/ai-sdk/chat";
const token = process.env.NEXT_PUBLIC_PARLEY_TOKEN;

export default function Page() {
  const { messages, sendMessage, addToolApprovalResponse, status, error } = useChat({
    id: "web-1", // the parley thread
    transport: new DefaultChatTransport({ api, headers: { Authorization: "Bearer " + token } }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    resume: true,
  });
  const [text, setText] = useState("");
  return (
    <main>
      {messages.map((m) => (
        <div key={m.id} className={m.role}>
          {m.parts.map((p: any, i) => {
            if (p.type === "text") return <p key={i}>{p.text}</p>;
            if (p.type === "dynamic-tool") return <Tool key={i} part={p} answer={addToolApprovalResponse} />;
            if (p.type === "data-parley-form") return <Form key={i} data={p.data} send={sendMessage} />;
            if (p.type === "source-url") return <a key={i} href={p.url}>{p.title ?? p.url}</a>; // an MCP server's link is titled "[from MCP server …]"
            if (p.type === "data-parley-suggestions")
              return p.data.suggestions.map((s: string) => <button key={s} onClick={() => sendMessage({ text: s })}>{s}</button>);
            if (p.type === "data-parley-progress" && status === "streaming") return <em key={i}>{p.data.status ?? p.data.message}</em>;
            return null; // data-parley-form-response and step-start are not shown
          })}
        </div>
      ))}
      {error && <p role="alert">{error.message}</p>}
      <form onSubmit={(e) => { e.preventDefault(); if (text.trim()) sendMessage({ text }); setText(""); }}>
        <input value={text} onChange={(e) => setText(e.target.value)} placeholder="delete the 10 draft articles" />
      </form>
    </main>
  );
}

// Tool shows a call; a call awaiting approval gets Allow / Decline (buttons
// only: no keystroke answers it).
function Tool({ part, answer }: { part: any; answer: (r: { id: string; approved: boolean; reason?: string }) => void }) {
  const [reason, setReason] = useState("");
  // parley's reading of the hints (an absent hint is destructive); absent
  // metadata counts as destructive too.
  const destructive = part.callProviderMetadata?.parley?.destructive !== false;
  return (
    <div className="tool">
      <strong>{part.toolName}</strong> <code>{JSON.stringify(part.input)}</code> — {part.state}
      {part.state === "output-available" && <span> {part.output.summary}</span>}
      {part.state === "output-error" && <span> {part.errorText}</span>}
      {part.state === "approval-requested" && (
        <div>
          <p>{part.approval.requestReason}</p>
          <input value={reason} onChange={(e) => setReason(e.target.value)} placeholder="instructions (with Decline)" />
          <button type="button" onClick={() => answer({ id: part.approval.id, approved: false, reason })}>Decline</button>
          <button type="button" className={destructive ? "danger" : ""} onClick={() => answer({ id: part.approval.id, approved: true })}>Allow</button>
        </div>
      )}
    </div>
  );
}

// Form renders a flat MCP requestedSchema as text fields (see the web chat
// for every field kind) and answers with a data-parley-form-response part.
function Form({ data, send }: { data: any; send: (m: any) => void }) {
  const props = data.question.requestedSchema?.properties ?? {};
  const server = data.question._meta?.["dev.parley/mcp_server"]; // a server's question, not parley's
  const [values, setValues] = useState<Record<string, string>>({});
  const answer = (action: string) =>
    send({ parts: [{ type: "data-parley-form-response", data: { elicitationId: data.elicitationId, action, ...(action === "accept" ? { content: values } : {}) } }] });
  return (
    <form onSubmit={(e) => { e.preventDefault(); answer("accept"); }}>
      {server && <p className="label">Asked by MCP server {server.name}{server.trusted === true ? "" : " (not trusted: parley cannot vouch for it)"}</p>}
      <p>{data.question.message}</p>
      {Object.entries(props).map(([name, p]: [string, any]) => (
        <label key={name}>{p.title ?? name}
          <input type={p.format === "date" ? "date" : "text"} value={values[name] ?? ""}
            onChange={(e) => setValues({ ...values, [name]: e.target.value })} />
        </label>
      ))}
      <button type="submit">Submit</button>
      <button type="button" onClick={() => answer("decline")}>Decline</button>
    </form>
  );
}
