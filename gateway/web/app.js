// parley web chat: a reference client of the gateway API (docs/openapi.yaml).
// Safety rule: text from models, tools and users is never parsed as HTML.
// Every node is built with createElement and textContent; links and media
// URLs are accepted only with http(s) (media also data:) schemes.
"use strict";

const META = {
  elicitationID: "drupal.org/ai.elicitation_id",
  toolCall: "drupal.org/ai.tool_call",
  entity: "drupal.org/ai.entity",
  citations: "drupal.org/ai.citations",
  suggestions: "drupal.org/ai.suggested_replies",
  status: "drupal.org/ai.status_item",
  widgets: "drupal.org/ai.widgets",
  mcpServer: "dev.parley/mcp_server",
  inputSchema: "dev.parley/input_schema",
  standing: "dev.parley/standing",
};

const T = {
  turnRequested: "dev.parley.turn.requested",
  turnPaused: "dev.parley.turn.paused",
  turnCompleted: "dev.parley.turn.completed",
  turnFailed: "dev.parley.turn.failed",
  turnRejected: "dev.parley.turn.rejected",
  elicitRequested: "dev.parley.elicitation.requested",
  elicitResponded: "dev.parley.elicitation.responded",
  elicitRejected: "dev.parley.elicitation.rejected",
  elicitExpired: "dev.parley.elicitation.expired",
  elicitCancelled: "dev.parley.elicitation.cancelled",
  progress: "dev.parley.progress",
  delta: "dev.parley.message.delta",
  approvalGranted: "dev.parley.approval.granted",
  approvalUsed: "dev.parley.approval.used",
  approvalRevoked: "dev.parley.approval.revoked",
};

// drafts: streamed assistant text per turn ID, shown until the turn's
// authoritative message (turn.completed) replaces it.
// awaiting: answered cards whose turn has not completed yet (their
// one-line summary gains the reply's first line). titles: thread titles
// by ID, from GET /v1/threads.
// running: a turn of the open thread is running (progress is shown only then).
const state = { token: "", thread: "", abort: null, following: false, lastID: 0, questions: new Map(), drafts: new Map(), awaiting: [], titles: new Map(), running: false };

// SUGGESTIONS are the phrases the empty page offers: the demo's three
// scenarios, in words the scripted model (model/default_rules.json) knows;
// the veto first, as deleting the drafts leaves nothing to publish.
const SUGGESTIONS = ["Publish the draft articles", "Create an event called Launch party", "Delete the draft articles"];

// ---- DOM helpers -----------------------------------------------------------

function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") n.className = v;
    else if (k === "text") n.textContent = v;
    else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) n.append(c);
  return n;
}

// safeURL returns the URL when its scheme is allowed, else "".
function safeURL(s, allowData) {
  try {
    const u = new URL(String(s), location.href);
    if (u.protocol === "http:" || u.protocol === "https:") return u.href;
    if (allowData && u.protocol === "data:" && /^data:(image|audio)\/(png|jpeg|gif|webp|mpeg|ogg|wav|mp3)[;,]/i.test(u.href)) return u.href;
  } catch (_) { /* not a URL */ }
  return "";
}

function link(href, text) {
  const u = safeURL(href, false);
  if (!u) return document.createTextNode(text);
  return el("a", { href: u, rel: "noopener noreferrer nofollow", target: "_blank", text });
}

// ---- Markdown (a safe subset, rendered to DOM nodes) -------------------------

// Citation markers: renderMessage puts one private-use character per
// anchor end into the text (U+E001 for source 1, ...) while cites is set;
// plainText turns them into [n] links to the source, and code keeps none.
// Outside such a message they are ordinary characters.
const MARK = /[\uE001-\uE0FF]/g;
let cites = null;
// plainLinks is set while a question card's message is rendered: a link
// there is shown as its text and its target ("text <url>"), never as a
// link whose text could name one place and whose target is another.
let plainLinks = false;

// questionMarkdown renders the message of a question card (plainLinks).
function questionMarkdown(src) {
  plainLinks = true;
  try { return markdown(src); } finally { plainLinks = false; }
}

// plainMessage renders text as it is, line breaks kept: for words of an
// MCP server, which never get parley's formatting (headings, emphasis,
// links), so they cannot dress up as parley's.
function plainMessage(text, cls) {
  return el("p", { class: "plain " + (cls || ""), text: String(text || "") });
}

function unmark(text) { return cites ? String(text).replace(MARK, "") : String(text); }

function plainText(text) {
  if (!cites) return document.createTextNode(text);
  const frag = document.createDocumentFragment();
  let last = 0;
  for (const m of text.matchAll(MARK)) {
    if (m.index > last) frag.append(document.createTextNode(text.slice(last, m.index)));
    const n = m[0].codePointAt(0) - 0xE000, c = cites[n - 1];
    if (c) {
      const a = link(c.url, "[" + n + "]");
      if (a.setAttribute) { a.setAttribute("title", c.title || c.url); a.setAttribute("aria-label", "source " + n + ": " + (c.title || c.url)); }
      frag.append(el("sup", { class: "cite" }, a));
    }
    last = m.index + m[0].length;
  }
  if (last < text.length) frag.append(document.createTextNode(text.slice(last)));
  return frag;
}

function inline(text) {
  const frag = document.createDocumentFragment();
  const re = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*|(?<![\w])_[^_\s][^_]*_(?![\w]))|(\[([^\]]+)\]\(([^)\s]+)\))/g;
  let last = 0, m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) frag.append(plainText(text.slice(last, m.index)));
    if (m[1]) frag.append(el("code", { text: unmark(m[1].slice(1, -1)) }));
    else if (m[2]) frag.append(el("strong", {}, inline(m[2].slice(2, -2))));
    else if (m[3]) frag.append(el("em", {}, inline(m[3].slice(1, -1))));
    else if (m[4]) frag.append(plainLinks ? document.createTextNode(unmark(m[5]) + " <" + unmark(m[6]) + ">") : link(unmark(m[6]), unmark(m[5])));
    last = re.lastIndex;
  }
  if (last < text.length) frag.append(plainText(text.slice(last)));
  return frag;
}

function markdown(src) {
  const root = el("div", { class: "md" });
  const lines = String(src || "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (/^```/.test(line)) {
      const body = [];
      for (i++; i < lines.length && !/^```/.test(lines[i]); i++) body.push(lines[i]);
      i++;
      root.append(el("pre", {}, el("code", { text: unmark(body.join("\n")) })));
      continue;
    }
    const h = /^(#{1,4})\s+(.*)$/.exec(line);
    if (h) { root.append(el("h" + (h[1].length + 2), {}, inline(h[2]))); i++; continue; }
    if (/^\s*([-*]|\d+\.)\s+/.test(line)) {
      const ordered = /^\s*\d+\./.test(line);
      const list = el(ordered ? "ol" : "ul");
      while (i < lines.length && /^\s*([-*]|\d+\.)\s+/.test(lines[i])) {
        list.append(el("li", {}, inline(lines[i].replace(/^\s*([-*]|\d+\.)\s+/, ""))));
        i++;
      }
      root.append(list);
      continue;
    }
    if (line.trim() === "") { i++; continue; }
    const para = [];
    while (i < lines.length && lines[i].trim() !== "" && !/^(```|#{1,4}\s|\s*([-*]|\d+\.)\s+)/.test(lines[i])) para.push(lines[i++]);
    const p = el("p");
    para.forEach((l, k) => { if (k) p.append(el("br")); p.append(inline(l)); });
    root.append(p);
  }
  return root;
}

// ---- content blocks ------------------------------------------------------------

function entityCard(block, meta) {
  const e = meta[META.entity];
  const title = block.title || block.name || (e && e.id) || block.uri;
  const card = el("div", { class: "entity", role: "group", "aria-label": "Entity " + title, "data-entity-id": e && typeof e.id === "string" ? e.id : null });
  if (e) card.append(el("span", { class: "kind", text: [e.entity_type, e.bundle !== e.entity_type && e.bundle].filter(Boolean).join(" · ") }));
  card.append(el("strong", {}, link(block.uri, title)));
  if (block.description) card.append(el("span", { text: block.description }));
  if (e && e.status) card.append(el("span", { class: "badge", text: e.status }));
  return card;
}

// renderBlock shows a content block of a message. A block from an MCP
// server's tool result (parley marks it with _meta["dev.parley/mcp_server"])
// is framed and labelled with the server, with a warning when the server is
// not trusted, and its text is shown as it is (no Markdown): the server's
// words never read as the assistant's or parley's.
function renderBlock(b) {
  const meta = (b && b._meta) || {};
  const s = meta[META.mcpServer];
  if (!s || typeof s !== "object") return renderOwnBlock(b, meta);
  const name = typeof s.name === "string" && s.name ? s.name : "(unnamed)";
  const box = el("div", { class: "from-server" + (s.trusted === true ? "" : " untrusted"), "data-mcp-server": name, role: "group",
    "aria-label": "From MCP server " + name });
  box.append(el("p", { class: "label", text: "From MCP server " + name + (s.trusted === true ? "" : " (not trusted: parley cannot vouch for what it says)") }));
  box.append(b && b.type === "text" ? plainMessage(b.text, "server-text") : renderOwnBlock(b, meta));
  return box;
}

function renderOwnBlock(b, meta) {
  switch (b && b.type) {
    case "text": return markdown(b.text);
    case "image": {
      const src = safeURL("data:" + b.mimeType + ";base64," + b.data, true);
      return src ? el("img", { src, alt: (b.annotations && b.annotations.title) || "image from the assistant" }) : el("p", { text: "[image]" });
    }
    case "audio": {
      const src = safeURL("data:" + b.mimeType + ";base64," + b.data, true);
      return src ? el("audio", { src, controls: true, "aria-label": "audio from the assistant" }) : el("p", { text: "[audio]" });
    }
    case "resource_link": return entityCard(b, meta);
    case "resource": {
      const r = b.resource || {};
      const box = el("div", { class: "entity" }, el("span", { class: "kind", text: "resource" }), el("strong", {}, link(r.uri, r.uri || "resource")));
      if (typeof r.text === "string") box.append(el("pre", { text: r.text }));
      return box;
    }
    default: return el("p", { class: "badge", text: "[unsupported block " + String(b && b.type) + "]" });
  }
}

// validCitations returns the message's citations (at most 20, as the
// server bounds them) or [] when the value is not a list.
function validCitations(meta) {
  const cs = meta[META.citations];
  return Array.isArray(cs) ? cs.filter((c) => c && typeof c.url === "string").slice(0, 20) : [];
}

// markText returns text with a marker character after each citation
// anchor (offsets in code points, as docs/events.md says); anchors outside
// the text are ignored. Marker characters already in the text become
// U+FFFD (same length), so text cannot fake a marker.
function markText(text, cs) {
  const chars = Array.from(String(text || "")).map((c) => (/^[\uE001-\uE0FF]$/.test(c) ? "\uFFFD" : c));
  const at = new Map();
  cs.forEach((c, i) => {
    for (const a of Array.isArray(c.anchors) ? c.anchors : []) {
      if (!a || !Number.isInteger(a.start) || !Number.isInteger(a.end) || a.start < 0 || a.end <= a.start || a.end > chars.length) continue;
      const list = at.get(a.end) || [];
      if (!list.includes(i + 1)) list.push(i + 1);
      at.set(a.end, list);
    }
  });
  if (at.size === 0) return null;
  let out = "";
  for (let k = 0; k <= chars.length; k++) {
    for (const n of at.get(k) || []) out += String.fromCodePoint(0xE000 + n);
    if (k < chars.length) out += chars[k];
  }
  return out;
}

function renderMessage(msg, cls) {
  const li = el("li", { class: "msg " + cls });
  const meta = msg._meta || {};
  const cs = validCitations(meta);
  const marked = markText(msg.text, cs);
  if (marked !== null) {
    cites = cs;
    try { li.append(markdown(marked)); } finally { cites = null; }
  } else li.append(markdown(msg.text));
  const chips = el("div", { class: "ref-chips", role: "list", "aria-label": "Referenced entities" });
  for (const b of msg.content || []) {
    if (b.type === "text" && b.text === msg.text) continue;
    const aud = b.annotations && b.annotations.audience;
    if (aud && !aud.includes("user")) continue;
    const ref = cls === "user" ? referenceOf(b) : null;
    if (ref) { chips.append(refChip(ref)); continue; }
    li.append(renderBlock(b));
  }
  if (chips.childElementCount) li.append(chips);
  if (cs.length) {
    const ol = el("ol", { class: "citations", "aria-label": "Sources" });
    for (const c of cs) ol.append(el("li", {}, link(c.url, String(c.title || c.url))));
    li.append(ol);
  }
  const replies = Array.isArray(meta[META.suggestions]) ? meta[META.suggestions].filter((r) => typeof r === "string" && r.trim()).slice(0, 8) : [];
  if (replies.length) {
    const box = el("div", { class: "suggestions", role: "group", "aria-label": "Suggested replies" });
    for (const r of replies) {
      const b = el("button", { type: "button", text: r });
      b.addEventListener("click", async () => {
        box.querySelectorAll("button").forEach((n) => { n.disabled = true; });
        if (!(await sendMessage(r))) box.querySelectorAll("button").forEach((n) => { n.disabled = false; });
      });
      box.append(b);
    }
    li.append(box);
  }
  return li;
}

// addItem appends an item to the thread, before the working indicator,
// and scrolls it into view: a reply or a question by its start (so a
// long one is read from its first line), anything else by its end.
function addItem(node, top) {
  const list = document.getElementById("messages");
  list.querySelector(".empty-hint")?.remove();
  const working = document.getElementById("working");
  if (working && working.parentNode === list) list.insertBefore(node, working);
  else list.append(node);
  node.scrollIntoView({ block: top ? "start" : "end" });
}

// setWorking shows (text) or hides (null) the in-thread indicator that a
// turn is running: a slow model or tool shows "Working…" (or its progress
// message) until the turn pauses, completes or fails.
function setWorking(text) {
  const list = document.getElementById("messages");
  let w = document.getElementById("working");
  state.running = text !== null;
  if (text === null) { w?.remove(); return; }
  if (!w) w = el("li", { id: "working", class: "msg working", role: "status", "aria-live": "polite", "aria-busy": "true" });
  w.replaceChildren(el("span", { class: "spinner", "aria-hidden": "true" }), el("span", { text }));
  if (w.parentNode !== list || w !== list.lastElementChild) list.append(w);
}

// emptyHint is the page of a thread with nothing in it yet: three things
// to try, each a button that sends it.
function emptyHint() {
  const box = el("div", { class: "suggestions", role: "group", "aria-label": "Things to try" });
  for (const text of SUGGESTIONS) box.append(el("button", { type: "button", text, onclick: () => sendMessage(text, null) }));
  return el("li", { class: "empty-hint" }, el("p", { text: "Nothing here yet. Try one of these:" }), box);
}

// hhmm is a time of day, 24-hour, in the page's time zone.
function hhmm(t) {
  const d = t ? new Date(t) : new Date();
  const n = isNaN(d) ? new Date() : d;
  return String(n.getHours()).padStart(2, "0") + ":" + String(n.getMinutes()).padStart(2, "0");
}

// ---- questions ------------------------------------------------------------------

// widgetName is a widget hint's name ("widget", or the older "type").
function widgetName(w) {
  if (!w || typeof w !== "object") return "";
  if (typeof w.widget === "string") return w.widget;
  return typeof w.type === "string" ? w.type : "";
}

// entityAutocomplete turns a plain text input into an entity autocomplete:
// a native <datalist> filled from GET /v1/lookup/entities as the user
// types (the value stays the entity ID, a plain string). When the lookup
// is unavailable it leaves the plain field.
function entityAutocomplete(input, w) {
  const opts = (w.options && typeof w.options === "object") ? { ...w.options, ...w } : w;
  const list = el("datalist", { id: input.id + "-list" });
  input.setAttribute("list", list.id);
  input.setAttribute("autocomplete", "off");
  input.dataset.widget = "entity_autocomplete";
  let timer = 0, seq = 0;
  input.addEventListener("input", () => {
    clearTimeout(timer);
    const q = input.value.trim();
    if (!q || input.dataset.widget !== "entity_autocomplete") return;
    timer = setTimeout(async () => {
      const my = ++seq;
      const params = new URLSearchParams({ q: q.slice(0, 200), limit: "10" });
      if (typeof opts.target_type === "string") params.set("type", opts.target_type);
      for (const b of Array.isArray(opts.bundles) ? opts.bundles : []) if (typeof b === "string") params.append("bundle", b);
      let resp;
      try { resp = await api("GET", "/v1/lookup/entities?" + params); } catch (_) { resp = null; }
      if (my !== seq) return; // a newer query is on its way
      if (resp && resp.status === 429) return; // rate limited: the next keystroke asks again
      if (!resp || resp.status !== 200) {
        // No lookup here: the plain field (the value is typed as is).
        input.dataset.widget = "degraded";
        input.removeAttribute("list");
        return;
      }
      const { entities } = await resp.json().catch(() => ({ entities: [] }));
      list.replaceChildren(...(entities || []).map((e) => el("option", {
        value: String(e.id), label: String(e.label) + " (" + [e.bundle || e.entity_type, e.status].filter(Boolean).join(", ") + ")",
      })));
    }, 200);
  });
  return list;
}

// choices returns the [value, title] pairs of an enum (with enumNames) or
// a titled oneOf/anyOf list of {const, title}; it throws when the list is
// not one of those shapes.
function choices(list, titles, key) {
  if (key) {
    if (!Array.isArray(list) || !list.length || !list.every((o) => o && typeof o === "object" && typeof o.const === "string")) throw new Error("not a titled enum");
    return list.map((o) => [o.const, typeof o.title === "string" ? o.title : o.const]);
  }
  if (!Array.isArray(list) || !list.length || !list.every((v) => typeof v === "string")) throw new Error("not a string enum");
  return list.map((v, k) => [v, (Array.isArray(titles) && typeof titles[k] === "string" && titles[k]) || v]);
}

// fieldInput builds the control of one requestedSchema property. It throws
// for a property the MCP elicitation schema does not allow (not a string,
// number, integer, boolean, enum or enum multi-select), so the question
// shows its restatement instead of a form that cannot be answered.
function fieldInput(name, p, id) {
  const common = { id, name, "aria-describedby": id + "-err " + id + "-hint" };
  if (!p || typeof p !== "object") throw new Error("not a schema");
  let def;
  if (p.default !== undefined) def = p.default;
  if (p.type === "boolean") {
    return el("input", { ...common, type: "checkbox", checked: def === true });
  }
  if (p.type === "array") {
    const items = p.items || {};
    const opts = items.anyOf ? choices(items.anyOf, null, true) : choices(items.enum, null, false);
    const box = el("div", { ...common, role: "group", "data-kind": "multi", "data-min": p.minItems, "data-max": p.maxItems });
    opts.forEach(([v, t], k) => {
      const cid = id + "-" + k;
      box.append(el("label", { for: cid }, el("input", { id: cid, type: "checkbox", value: v, checked: Array.isArray(def) && def.includes(v) }), " " + t));
    });
    return box;
  }
  if (p.enum || p.oneOf) {
    const opts = p.oneOf ? choices(p.oneOf, null, true) : choices(p.enum, p.enumNames, false);
    const sel = el("select", common, el("option", { value: "", text: "— choose —" }));
    for (const [v, t] of opts) sel.append(el("option", { value: v, text: t, selected: def === v }));
    return sel;
  }
  if (p.type === "number" || p.type === "integer") {
    return el("input", { ...common, type: "number", min: p.minimum, max: p.maximum, step: p.type === "integer" ? "1" : "any", value: def });
  }
  if (p.type !== "string") throw new Error("unsupported type " + String(p.type));
  const type = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" }[p.format] || "text";
  return el("input", { ...common, type, minlength: p.minLength, maxlength: p.maxLength, value: def });
}

function readField(input, p) {
  if (p.type === "boolean") return input.checked;
  if (p.type === "array") return [...input.querySelectorAll("input:checked")].map((c) => c.value);
  const v = input.value;
  if (v === "") return undefined;
  if (p.type === "number") return Number(v);
  if (p.type === "integer") return parseInt(v, 10);
  if (p.format === "date-time") { const d = new Date(v); return isNaN(d) ? v : d.toISOString().replace(/\.\d{3}Z$/, "Z"); }
  return v;
}

function setFieldError(card, name, text) {
  const f = card.querySelector('[data-field="' + CSS.escape(name) + '"]');
  if (!f) return false;
  f.querySelector(".error").textContent = text || "";
  const input = f.querySelector("[name]");
  if (input) input.setAttribute("aria-invalid", text ? "true" : "false");
  return true;
}

// FORMAT_RULE is what a field of a string format says when what was
// typed is not a value of that format.
const FORMAT_RULE = { date: "not a valid date (YYYY-MM-DD)", "date-time": "not a valid date and time", email: "not a valid email address", uri: "not a valid URL" };

// isDate reports whether s is an RFC 3339 full-date naming a real day.
function isDate(s) {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s);
  if (!m) return false;
  const d = new Date(Date.UTC(+m[1], +m[2] - 1, +m[3]));
  return d.getUTCFullYear() === +m[1] && d.getUTCMonth() === +m[2] - 1 && d.getUTCDate() === +m[3];
}

// orderedProperties returns a form's properties in the order a person
// fills them: the required ones in the order of "required" (a form's
// property order does not survive the JSON objects it travels in), then
// the rest in the order given — as parley chat asks them.
function orderedProperties(props, required) {
  const names = Object.keys(props);
  const first = required.filter((n, i) => Object.hasOwn(props, n) && required.indexOf(n) === i);
  return [...first, ...names.filter((n) => !first.includes(n))].map((n) => [n, props[n]]);
}

// checkField mirrors the server's checks for one field; "" when valid.
function checkField(input, p, required) {
  const v = readField(input, p);
  if (p.type === "array") {
    if (required && v.length === 0) return "choose at least one";
    if (p.minItems !== undefined && v.length < p.minItems) return "choose at least " + p.minItems;
    if (p.maxItems !== undefined && v.length > p.maxItems) return "choose at most " + p.maxItems;
    return "";
  }
  // Something typed that is not a value (an impossible date such as
  // 02/30/2026) is not "missing": say what a valid one looks like.
  if (input.validity && input.validity.badInput) return FORMAT_RULE[p.format] || "not a valid value";
  if (v === undefined) return required ? "required" : "";
  if (typeof v === "string" && p.format === "date" && !isDate(v)) return FORMAT_RULE.date;
  if (input.validity && !input.validity.valid) return input.validationMessage || "not valid";
  if (typeof v === "string") {
    if (p.minLength !== undefined && v.length < p.minLength) return "at least " + p.minLength + " characters";
    if (p.maxLength !== undefined && v.length > p.maxLength) return "at most " + p.maxLength + " characters";
  }
  if (typeof v === "number") {
    if (Number.isNaN(v)) return "must be a number";
    if (p.minimum !== undefined && v < p.minimum) return "must be at least " + p.minimum;
    if (p.maximum !== undefined && v > p.maximum) return "must be at most " + p.maximum;
  }
  return "";
}

// settle ends a question card: its controls are disabled and it collapses
// to its one-line state (a button shows the rest again).
function settle(card, text) {
  card.classList.add("settled", "collapsed");
  card.querySelector(".state").textContent = text;
  card.querySelectorAll("button, input, select, textarea").forEach((n) => { n.disabled = true; });
  let toggle = card.querySelector(":scope > .toggle");
  if (!toggle) {
    toggle = el("button", { type: "button", class: "toggle", "aria-expanded": "false", text: "Details" });
    toggle.addEventListener("click", () => {
      const open = card.classList.toggle("collapsed") === false;
      toggle.setAttribute("aria-expanded", String(open));
      toggle.textContent = open ? "Hide" : "Details";
    });
    card.querySelector(".state").after(toggle);
  }
  toggle.disabled = false;
}

function unsettle(card) {
  card.classList.remove("settled", "collapsed");
  card.querySelector(":scope > .toggle")?.remove();
  card.querySelector(".state").textContent = "Please correct the marked fields.";
  card.querySelectorAll("button, input, select, textarea").forEach((n) => { n.disabled = false; });
}

// answered settles a card someone answered, as one line: "Allowed by
// you, 14:02"; the reply's first line follows when its turn completes.
function answered(card, action, who, time) {
  const tc = card.classList.contains("confirmation");
  const word = action === "accept" ? (tc ? (card.dataset.edited === "true" ? "Allowed with changes" : "Allowed") : "Answered") : action === "decline" ? "Declined" : "Cancelled";
  settle(card, word + " by " + who + ", " + hhmm(time));
  if (!state.awaiting.includes(card)) state.awaiting.push(card);
}

// firstLine is a reply's first line, for an answered card's summary.
function firstLine(text) {
  const line = String(text || "").trim().split("\n")[0].trim().replace(/:$/, "");
  return line.length > 80 ? line.slice(0, 79) + "…" : line;
}

// ---- confirmations ----------------------------------------------------------

// entityIDs returns the string values of "id" and "ids" keys anywhere in
// a tool call's arguments (the entities parley chat names), at most 50.
function entityIDs(v, key, out) {
  out = out || [];
  if (Array.isArray(v)) v.forEach((c) => entityIDs(c, key, out));
  else if (v && typeof v === "object") for (const [k, c] of Object.entries(v)) entityIDs(c, k, out);
  else if (typeof v === "string" && (key === "id" || key === "ids") && !out.includes(v) && out.length < 50) out.push(v);
  return out;
}

// lookupEntities finds the site entities with these IDs through GET
// /v1/lookup/entities: one query for the IDs' common prefix, then one per
// ID still missing (at most 10). It resolves to a Map of ID → entity
// ({id, label, entity_type, bundle, status}), or null when no lookup
// answered.
async function lookupEntities(ids) {
  const found = new Map();
  const ask = async (q) => {
    let resp;
    try { resp = await api("GET", "/v1/lookup/entities?" + new URLSearchParams({ q: q.slice(0, 200), limit: "50" })); } catch (_) { return false; }
    if (resp.status !== 200) return false;
    const { entities } = await resp.json().catch(() => ({ entities: [] }));
    for (const e of Array.isArray(entities) ? entities : []) if (e && ids.includes(String(e.id))) found.set(String(e.id), e);
    return true;
  };
  let prefix = ids[0] || "", ok = false;
  for (const id of ids) while (!id.startsWith(prefix)) prefix = prefix.slice(0, -1);
  if (ids.length > 1 && prefix.trim().length >= 2) ok = await ask(prefix);
  for (const id of ids.filter((i) => !found.has(i)).slice(0, 10)) {
    if (!(await ask(id))) break;
    ok = true;
  }
  return ok ? found : null;
}

function plural(n, noun) {
  if (n === 1) return noun;
  return /[^aeiou]y$/.test(noun) ? noun.slice(0, -1) + "ies" : noun + "s";
}

// confirmTitle says what a confirmed call will do, in words: "Delete 10
// draft articles?" — the verb from the tool's name, the count of the
// entities its arguments name, their kind and status when the lookup
// knows them all; without entities, the tool's title.
function confirmTitle(tc, ann, ids, found) {
  if (!ids.length) return String(ann.title || tc.name || "Run a tool") + "?";
  const word = String(tc.name || "").split(/[_.\s-]/)[0] || "use";
  let noun = "entity", status = "";
  const ents = found ? ids.map((id) => found.get(id)).filter(Boolean) : [];
  if (ents.length === ids.length) {
    const kinds = [...new Set(ents.map((e) => String(e.bundle || e.entity_type || "")))];
    const sts = [...new Set(ents.map((e) => String(e.status || "")))];
    if (kinds.length === 1 && kinds[0]) noun = kinds[0];
    if (sts.length === 1 && sts[0]) status = sts[0] + " ";
  }
  return word[0].toUpperCase() + word.slice(1) + " " + ids.length + " " + status + plural(ids.length, noun) + "?";
}

// argValue renders one argument value as a readable list: arrays as
// lists, objects as nested terms, entity IDs with their titles.
function argValue(v, found) {
  if (Array.isArray(v)) {
    const ul = el("ul", { class: "arg-list" });
    for (const c of v.slice(0, 50)) ul.append(el("li", {}, argValue(c, found)));
    if (v.length > 50) ul.append(el("li", { text: "(and " + (v.length - 50) + " more)" }));
    return ul;
  }
  if (v && typeof v === "object") {
    const dl = el("dl", { class: "args" });
    for (const [k, c] of Object.entries(v)) dl.append(el("dt", { text: k }), el("dd", {}, argValue(c, found)));
    return dl;
  }
  if (typeof v === "string") {
    const e = found && found.get(v);
    if (!e) return el("span", { text: v });
    return el("span", {}, el("strong", { class: "entity-title", text: "“" + String(e.label || v) + "”" }), " ", el("code", { text: v }),
      e.status ? " · " + String(e.status) : "");
  }
  return el("code", { text: JSON.stringify(v) });
}

function renderArgs(dl, args, found) {
  dl.replaceChildren();
  for (const [k, v] of Object.entries(args)) dl.append(el("dt", { text: k }), el("dd", {}, argValue(v, found)));
}

// markDeleted shows the entity cards of deleted entities as deleted: no
// live link, a "deleted" badge.
function markDeleted(ids) {
  for (const card of document.querySelectorAll("#messages .entity[data-entity-id]")) {
    if (!ids.includes(card.dataset.entityId) || card.classList.contains("deleted")) continue;
    card.classList.add("deleted");
    for (const a of card.querySelectorAll("a")) a.replaceWith(el("s", { text: a.textContent }));
    const badge = card.querySelector(".badge");
    if (badge) badge.textContent = "deleted";
    else card.append(el("span", { class: "badge", text: "deleted" }));
  }
}

// checkDeleted asks the site which entities of an allowed delete are gone
// (the lookup no longer finds them) and marks their cards.
async function checkDeleted(ids) {
  const found = await lookupEntities(ids);
  if (found) markDeleted(ids.filter((id) => !found.has(id)));
}

// ---- editing a confirmed call's arguments ----------------------------------
// A confirmation that carries the tool's input schema
// (_meta["dev.parley/input_schema"]) may be allowed with changed
// arguments: the edit panel has one field per property of the schema
// (an array of strings or numbers as a list of rows), prefilled with the
// model's arguments, and the whole object as raw JSON behind a
// disclosure. "Allow with changes" sends them as the answer's
// "arguments"; the processor checks them against the same schema.

// EDIT_KEY is the answer's _meta key of edited arguments; EDIT_PATH how
// the processor's refusal names them (the gateway's problem says
// "arguments").
const EDIT_KEY = "dev.parley/arguments";
const EDIT_PATH = '_meta["' + EDIT_KEY + '"]';

// showEdit marks card as allowed with the edited arguments args and shows
// them on the card, also when it is folded: the arguments the card
// showed first are the model's, which did not run.
function showEdit(card, args) {
  card.dataset.edited = "true";
  let json = JSON.stringify(args);
  if (json.length > 400) json = json.slice(0, 399) + "…";
  card.querySelector(":scope > .edited-args")?.remove();
  const line = el("p", { class: "edited-args", text: "Runs with the changed arguments: " + json });
  card.querySelector(".state").after(line);
}

// schemaType is a property's JSON type ("string", ...), the first one that
// is not "null" of a type list; "" when it names none.
function schemaType(p) {
  if (!p || typeof p !== "object") return "";
  const t = Array.isArray(p.type) ? p.type.find((x) => x !== "null") : p.type;
  if (t) return String(t);
  if (Array.isArray(p.enum) && p.enum.length) return typeof p.enum[0] === "number" ? "number" : "string";
  return "";
}

// argInput builds the control of one argument: a list of rows for an
// array of primitives, a checkbox, a select for an enum, a number or a
// text field; null for a shape only the raw JSON can edit.
function argInput(name, p, v, fid) {
  const t = schemaType(p);
  const common = { id: fid, name: "arg:" + name, "aria-describedby": fid + "-err" };
  if (t === "array") {
    const it = schemaType(p.items || { type: "string" });
    if (!["string", "number", "integer"].includes(it)) return null;
    const list = el("div", { ...common, class: "arg-rows", role: "group", "data-kind": "rows", "data-item": it });
    const row = (x) => {
      const input = el("input", { type: it === "string" ? "text" : "number", step: it === "integer" ? "1" : "any", value: x === undefined ? "" : String(x), "aria-label": name + " item" });
      const r = el("div", { class: "arg-row" }, input,
        el("button", { type: "button", class: "remove", "data-action": "remove-item", text: "Remove", "aria-label": "Remove " + (x === undefined ? "item" : String(x)), onclick: () => r.remove() }));
      return r;
    };
    for (const x of Array.isArray(v) ? v : []) list.append(row(x));
    const add = el("button", { type: "button", "data-action": "add-item", text: "Add", onclick: () => { const r = row(undefined); add.before(r); r.querySelector("input").focus(); } });
    list.append(add);
    return list;
  }
  if (t === "boolean") return el("input", { ...common, type: "checkbox", checked: v === true });
  if (Array.isArray(p.enum) && p.enum.every((x) => typeof x === "string")) {
    const sel = el("select", common, el("option", { value: "", text: "— none —" }));
    for (const x of p.enum) sel.append(el("option", { value: x, text: x, selected: v === x }));
    return sel;
  }
  if (t === "number" || t === "integer") return el("input", { ...common, type: "number", step: t === "integer" ? "1" : "any", value: v === undefined ? "" : String(v) });
  if (t === "string") return el("input", { ...common, type: "text", value: v === undefined ? "" : String(v) });
  return null;
}

// readArg reads one argument's control; undefined when left empty.
function readArg(input, p) {
  const t = schemaType(p);
  const num = (s, it) => (it === "integer" ? parseInt(s, 10) : Number(s));
  if (input.dataset.kind === "rows") {
    const it = input.dataset.item;
    return [...input.querySelectorAll(".arg-row input")].map((i) => i.value.trim()).filter((x) => x !== "").map((x) => (it === "string" ? x : num(x, it)));
  }
  if (t === "boolean") return input.checked;
  const v = input.value;
  if (v === "") return undefined;
  return t === "number" || t === "integer" ? num(v, t) : v;
}

// editPanel builds the edit of a confirmed call's arguments args under
// the input schema is. It returns the panel and read(), which gives the
// edited arguments or throws an Error naming what is wrong.
function editPanel(id, args, is) {
  const panel = el("div", { class: "edit-panel", hidden: true, role: "group", "aria-label": "Edit the arguments" });
  panel.append(el("p", { class: "hint", text: "Change what the agent will run. Allow with changes runs exactly this." }));
  const props = (is && typeof is.properties === "object" && is.properties) || {};
  const required = new Set(Array.isArray(is && is.required) ? is.required : []);
  const inputs = [];
  for (const [name, p] of orderedProperties(props, [...required])) {
    const fid = "a-" + id + "-" + name;
    const input = argInput(name, p, args[name], fid);
    if (!input) continue; // only the raw JSON edits it
    const field = el("div", { class: "field", "data-field": "arguments." + name });
    const label = ((p && p.title) || name) + (required.has(name) ? " (required)" : "");
    if (input.dataset.kind === "rows") {
      field.append(el("span", { id: fid + "-label", text: label }), input);
      input.setAttribute("aria-labelledby", fid + "-label");
    } else if (input.type === "checkbox") field.append(el("label", { for: fid }, input, " " + label));
    else field.append(el("label", { for: fid, text: label }), input);
    if (p && p.description) field.append(el("span", { class: "hint", text: String(p.description) }));
    field.append(el("span", { class: "error", id: fid + "-err", "aria-live": "polite" }));
    panel.append(field);
    inputs.push([name, p, input]);
  }
  // A change clears its field's error (the server's rule stays until then).
  const clear = (ev) => {
    const f = ev.target.closest && ev.target.closest(".field");
    if (!f) return;
    const e = f.querySelector(".error");
    if (e) e.textContent = "";
    f.querySelector("[aria-invalid]")?.setAttribute("aria-invalid", "false");
  };
  panel.addEventListener("input", clear);
  panel.addEventListener("click", clear);
  const rawID = "a-" + id + "-raw";
  const raw = el("textarea", { id: rawID, name: "arg:*", rows: 6, spellcheck: "false", "aria-describedby": rawID + "-err" });
  raw.value = JSON.stringify(args, null, 2);
  const details = el("details", { class: "raw-edit" }, el("summary", { text: "Edit as JSON" }),
    el("div", { class: "field", "data-field": "arguments" }, el("label", { for: rawID, text: "Arguments (JSON object)" }), raw,
      el("span", { class: "error", id: rawID + "-err", "aria-live": "polite" })));
  // Opening the JSON carries the fields into it; closing it carries the
  // JSON back into a fresh panel only through the fields' values.
  details.addEventListener("toggle", () => { if (details.open) raw.value = JSON.stringify(fromFields(), null, 2); });
  panel.append(details);
  const fromFields = () => {
    const out = { ...args };
    for (const [name, p, input] of inputs) {
      const v = readArg(input, p);
      if (v === undefined || (Array.isArray(v) && !v.length && !required.has(name))) delete out[name];
      else out[name] = v;
    }
    return out;
  };
  const read = () => {
    if (!details.open) return fromFields();
    let v;
    try { v = JSON.parse(raw.value); } catch (e) { throw Object.assign(new Error("not JSON: " + e.message), { path: "arguments" }); }
    if (!v || typeof v !== "object" || Array.isArray(v)) throw Object.assign(new Error("must be a JSON object"), { path: "arguments" });
    return v;
  };
  return { panel, read, details };
}

function renderQuestion(q) {
  const meta = q._meta || {};
  const id = meta[META.elicitationID];
  if (!id || state.questions.has(id)) return;
  if (q.mode === "url") return renderURLQuestion(q, id);
  const tc = meta[META.toolCall];
  const card = el("li", { class: "msg question" + (tc ? " confirmation" : ""), "data-elicitation": id, role: "group", "aria-label": tc ? "Confirmation" : "Question" });
  card.append(el("p", { class: "state", role: "status", text: "" }));
  const notice = serverNotice(meta);
  if (notice) card.append(notice);
  const form = el("form", { novalidate: true });
  const props = (q.requestedSchema && q.requestedSchema.properties) || {};
  const required = new Set((q.requestedSchema && q.requestedSchema.required) || []);
  const widgets = (meta[META.widgets] && typeof meta[META.widgets] === "object") ? meta[META.widgets] : {};
  const ann = (tc && tc.annotations) || {};
  const destructive = !!tc && ann.readOnlyHint !== true && ann.destructiveHint !== false;
  if (tc) {
    // What will happen, in words ("Delete 10 draft articles?"), the
    // arguments as a readable list with the entities' titles, and the raw
    // JSON behind a disclosure.
    const args = (tc.arguments && typeof tc.arguments === "object" && !Array.isArray(tc.arguments)) ? tc.arguments : {};
    const ids = entityIDs(args);
    card.toolCall = { name: String(tc.name || ""), ids };
    const h = el("h3", { text: confirmTitle(tc, ann, ids, null) });
    card.append(h);
    card.append(el("p", { class: "tool-name" }, "Tool: ", el("strong", { text: String(ann.title || tc.name) }), " ", el("code", { text: String(tc.name) })));
    card.append(questionMarkdown(q.message));
    const badges = el("div", { class: "badges", "aria-label": "Tool annotations" });
    const flag = (on, label, danger) => on && badges.append(el("span", { class: "badge" + (danger ? " danger" : ""), text: label }));
    flag(ann.readOnlyHint === true, "read-only");
    flag(destructive, "destructive", true);
    flag(ann.idempotentHint === true, "idempotent");
    flag(ann.openWorldHint !== false, "open world");
    card.append(badges);
    const dl = el("dl", { class: "args", "aria-label": "Arguments" });
    renderArgs(dl, args, null);
    card.append(dl);
    let raw = "";
    try { raw = JSON.stringify(tc.arguments, null, 2); } catch (_) { raw = String(tc.arguments); }
    card.append(el("details", { class: "raw" }, el("summary", { text: "Raw arguments (JSON)" }), el("pre", {}, el("code", { text: raw }))));
    if (ids.length) {
      lookupEntities(ids).then((found) => {
        if (!found || !found.size) return;
        h.textContent = confirmTitle(tc, ann, ids, found);
        renderArgs(dl, args, found);
      });
    }
  } else if (notice) {
    // An MCP server's words, shown as they are under its label.
    card.append(plainMessage(q.message, "server-message"));
  } else {
    card.append(questionMarkdown(q.message));
  }
  let renderable = true;
  // A confirmation asks for nothing before its answer: its only property
  // (instructions for the agent) is asked after Decline, in the decline
  // panel, and sent only with the decline.
  const declinePanel = tc ? el("div", { class: "decline-panel", hidden: true }) : null;
  // Allow with changes: only a confirmation that carries its tool's input
  // schema offers it (the processor checks the edit against that schema).
  const is = tc && meta[META.inputSchema] && typeof meta[META.inputSchema] === "object" ? meta[META.inputSchema] : null;
  const editing = is ? editPanel(id, (tc.arguments && typeof tc.arguments === "object" && !Array.isArray(tc.arguments)) ? tc.arguments : {}, is) : null;
  for (const [name, p] of orderedProperties(props, [...required])) {
    const fid = "f-" + id + "-" + name;
    const field = el("div", { class: "field", "data-field": name });
    let input;
    try { input = fieldInput(name, p, fid); } catch (_) { renderable = false; continue; }
    const label = tc && name === "instructions" && !p.title ? "What should the agent do instead? (optional)"
      : (p.title || name) + (required.has(name) ? " (required)" : "");
    if (p.type === "boolean") field.append(el("label", { for: fid }, input, " " + label));
    else if (p.type === "array") field.append(el("span", { id: fid + "-label", text: label }), input);
    else field.append(el("label", { for: fid, text: label }), input);
    if (p.type === "array") input.setAttribute("aria-labelledby", fid + "-label");
    // Widget hints: the ones this page knows; any other renders the plain field.
    const w = Object.hasOwn(widgets, name) ? widgets[name] : null;
    if (widgetName(w) === "entity_autocomplete" && input.tagName === "INPUT" && input.type === "text") {
      field.append(entityAutocomplete(input, w));
      field.dataset.widget = "entity_autocomplete";
    }
    field.append(el("span", { class: "hint", id: fid + "-hint", text: p.description || "" }));
    field.append(el("span", { class: "error", id: fid + "-err", "aria-live": "polite" }));
    // Re-check while typing (not on blur: a message appearing or vanishing
    // on blur moves the buttons under a pointer that is clicking them).
    const recheck = () => setFieldError(card, name, checkField(input, p, required.has(name)));
    input.addEventListener("input", recheck);
    input.addEventListener("change", recheck);
    (declinePanel || form).append(field);
  }
  if (declinePanel) form.append(declinePanel);
  if (editing) form.append(editing.panel);
  if (!renderable) {
    // No form: the turn's restatement (turn.paused) says what is asked;
    // the person answers it in a message, or declines or cancels here.
    form.replaceChildren();
    card.dataset.unrenderable = "true";
    card.append(el("p", { class: "note", text: "This form cannot be shown here; answer the restated question in a message, or decline or cancel it." }));
  }
  // A standing approval, where the question offers one: a checkbox next
  // to the buttons; Allow stays the click that answers.
  const standing = tc && renderable ? standingOption(meta, tc, id) : null;
  const answer = async (action, edit) => {
    const content = {};
    let bad = false;
    let args;
    if (edit) {
      card.querySelectorAll('[data-field^="arguments"] .error').forEach((n) => { n.textContent = ""; });
      try { args = editing.read(); } catch (e) {
        setFieldError(card, e.path || "arguments", e.message);
        card.querySelector("[aria-invalid=true]")?.focus();
        return;
      }
    }
    // A confirmation's accept carries no content: instructions go only
    // with a decline (what the person wants instead).
    if ((action === "accept" && !tc) || (tc && action === "decline")) {
      for (const [name, p] of Object.entries(props)) {
        const input = form.querySelector('[name="' + CSS.escape(name) + '"]');
        if (!input) continue;
        const err = action === "accept" ? checkField(input, p, required.has(name)) : "";
        setFieldError(card, name, err);
        if (err) { bad = true; continue; }
        const v = readField(input, p);
        if (v !== undefined && !(Array.isArray(v) && v.length === 0 && !required.has(name)) && !(tc && v === "")) content[name] = v;
      }
    }
    if (bad) { card.querySelector("[aria-invalid=true]")?.focus(); return; }
    const body = { action };
    if (Object.keys(content).length) body.content = content;
    if (args) body.arguments = args;
    if (action === "accept" && standing && standing.chosen()) body._meta = { [META.standing]: standing.chosen() };
    card.dataset.answering = action;
    const resp = await api("POST", "/v1/threads/" + state.thread + "/elicitations/" + encodeURIComponent(id), body);
    if (resp.status === 202) {
      if (args) showEdit(card, args);
      if (!card.classList.contains("settled")) answered(card, action, "you", null);
      if (action === "accept") setWorking("Working…");
      return;
    }
    delete card.dataset.answering;
    const p = await resp.json().catch(() => ({}));
    if (p.reason === "invalid_content") {
      unsettle(card);
      for (const e of p.errors || []) {
        // An edit's error names its argument ("arguments.ids"): the field
        // of that argument, else the JSON.
        const path = String(e.path || "");
        const shown = path.startsWith("arguments")
          ? setFieldError(card, path.split(/[.[]/).slice(0, 2).join("."), e.rule) || setFieldError(card, "arguments", path + ": " + e.rule)
          : setFieldError(card, path.replace(/^content\./, ""), e.rule);
        if (!shown) card.querySelector(".state").textContent = path + ": " + e.rule;
      }
      card.querySelector("[aria-invalid=true]")?.focus();
    } else if (p.reason === "already_consumed") settle(card, "Already answered.");
    else if (p.reason === "unknown_or_expired") settle(card, "This question expired.");
    else card.querySelector(".state").textContent = "Not sent: " + (p.detail || p.reason || resp.status);
  };
  const actions = el("div", { class: "actions" });
  if (!renderable) {
    actions.append(el("button", { type: "button", "data-action": "decline", text: "Decline", onclick: () => answer("decline") }));
  } else if (tc) {
    // Allow is a button of its own (type "button"), never the form's submit:
    // no keystroke in a field of a confirmation answers it. Decline opens the
    // panel that asks what to do instead; "Send decline" sends it.
    // A destructive call's Allow has the danger style; no button of the
    // card takes the focus when it appears.
    const allow = el("button", { type: "button", class: destructive ? "danger" : "primary", "data-action": "accept", text: "Allow", onclick: () => answer("accept") });
    const openDecline = () => {
      declinePanel.hidden = false;
      allow.hidden = true;
      decline.hidden = true;
      send.hidden = false;
      back.hidden = false;
      declinePanel.querySelector("input, textarea")?.focus();
      actions.scrollIntoView({ block: "nearest" });
    };
    const closeDecline = () => {
      declinePanel.hidden = true;
      allow.hidden = false;
      decline.hidden = false;
      send.hidden = true;
      back.hidden = true;
      decline.focus();
    };
    const decline = el("button", { type: "button", "data-action": "decline", text: "Decline…", onclick: openDecline });
    // Edit opens the arguments' fields; "Allow with changes" (a button,
    // like Allow: no keystroke in a field sends it) runs exactly them.
    const edit = editing && el("button", { type: "button", "data-action": "edit", text: "Edit…", onclick: () => {
      editing.panel.hidden = false;
      allow.hidden = true; edit.hidden = true; decline.hidden = true;
      allowEdited.hidden = false; backEdit.hidden = false;
      editing.panel.querySelector("input, select, textarea")?.focus();
      actions.scrollIntoView({ block: "nearest" });
    } });
    const allowEdited = editing && el("button", { type: "button", class: destructive ? "danger" : "primary", "data-action": "accept-edited", text: "Allow with changes", hidden: true, onclick: () => answer("accept", true) });
    const backEdit = editing && el("button", { type: "button", "data-action": "back-edit", text: "Back", hidden: true, onclick: () => {
      editing.panel.hidden = true;
      allow.hidden = false; edit.hidden = false; decline.hidden = false;
      allowEdited.hidden = true; backEdit.hidden = true;
      edit.focus();
    } });
    const send = el("button", { type: "button", class: "primary", "data-action": "send-decline", text: "Send decline", hidden: true, onclick: () => answer("decline") });
    const back = el("button", { type: "button", "data-action": "back", text: "Back", hidden: true, onclick: closeDecline });
    actions.append(allow, decline, send, back);
    if (editing) actions.append(edit, backEdit, allowEdited);
  } else {
    actions.append(el("button", { type: "submit", class: "primary", "data-action": "accept", text: "Submit" }));
    actions.append(el("button", { type: "button", "data-action": "decline", text: "Decline", onclick: () => answer("decline") }));
  }
  actions.append(el("button", { type: "button", "data-action": "cancel", text: "Cancel", onclick: () => answer("cancel") }));
  // Allow comes last, set apart from Decline and Cancel.
  if (tc && renderable) actions.append(actions.querySelector("[data-action=accept]"));
  if (standing) form.append(standing.field);
  form.append(actions);
  // Enter in a form's field submits the form: for a question that is its
  // answer; for a confirmation it does nothing (only a click, or a key on
  // the focused button, answers a confirmation).
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (tc) {
      // Said next to the buttons, where the person is looking.
      let hint = form.querySelector(".enter-hint");
      if (!hint) form.append(hint = el("p", { class: "enter-hint", role: "status" }));
      hint.textContent = declinePanel && !declinePanel.hidden
        ? "Enter sends nothing here: press “Send decline” to send your instructions."
        : editing && !editing.panel.hidden
          ? "Enter sends nothing here: press “Allow with changes” to run your changes."
          : "Enter answers nothing here: use the buttons.";
      hint.scrollIntoView({ block: "nearest" });
      return;
    }
    if (renderable) answer("accept");
  });
  card.append(form);
  state.questions.set(id, card);
  addItem(card, true);
}

// serverNotice labels a question an MCP server asked: parley's tool-executor
// sets _meta["dev.parley/mcp_server"] = {name, trusted, secretFields?} on
// every server question (a server cannot: parley strips its own keys from
// what servers send). It says who asks, warns when parley cannot vouch for
// the server, and names fields that look like they ask for a secret.
// null for a question parley itself asked.
function serverNotice(meta) {
  const s = meta[META.mcpServer];
  if (!s || typeof s !== "object") return null;
  const name = typeof s.name === "string" && s.name ? s.name : "(unnamed)";
  const box = el("div", { class: "asked-by" + (s.trusted === true ? "" : " untrusted"), "data-mcp-server": name, role: "note" });
  box.append(el("p", { class: "label", text: "Asked by MCP server " + name }));
  if (s.trusted !== true) {
    box.append(el("p", { class: "warning", text: "parley cannot vouch for this server (it is not marked trusted), nor for what it does with your answer." }));
  }
  const secrets = Array.isArray(s.secretFields) ? s.secretFields.filter((f) => typeof f === "string") : [];
  if (secrets.length) {
    box.append(el("p", { class: "warning secret", text: "It asks for what looks like a secret (" + secrets.join(", ") +
      "). MCP forbids asking for passwords, keys, tokens or payment details in a form: do not enter them here." }));
  }
  return box;
}

// renderURLQuestion shows a URL-mode elicitation (MCP 2025-11-25): the
// server asks the person to open a web page out of band. The host and the
// full URL are shown as text, never as a link: the page never opens or
// fetches it; the person may open it themselves after consenting. The
// answer is only the action (no content).
function renderURLQuestion(q, id) {
  const card = el("li", { class: "msg question url-question", "data-elicitation": id, role: "group", "aria-label": "Web page to open" });
  card.append(el("p", { class: "state", role: "status", text: "" }));
  const notice = serverNotice(q._meta || {});
  if (notice) card.append(notice);
  // The server's message is shown as plain text, not Markdown: in a card
  // that asks for consent to open a page, a link whose text names one host
  // and whose target is another would be a phishing aid.
  card.append(el("p", { class: "url-message", text: q.message || "" }));
  let host = "";
  try { host = new URL(q.url).host; } catch (_) { /* shown as missing below */ }
  card.append(el("p", { text: "The server asks you to open this web page yourself (this page does not open it):" }));
  const dl = el("dl", { class: "args", "aria-label": "Web page" });
  dl.append(el("dt", { text: "host" }), el("dd", {}, el("strong", { text: host || "(none: do not open it)" })));
  // An internationalized host is shown in its ASCII (punycode) form.
  if (/(^|\.)xn--/i.test(host)) dl.append(el("dt", { text: "" }), el("dd", { text: "The host is an internationalized name (shown in its ASCII form): it may imitate a familiar one." }));
  dl.append(el("dt", { text: "url" }), el("dd", {}, el("code", { class: "url", text: String(q.url || "") })));
  card.append(dl);
  const answer = async (action) => {
    card.querySelectorAll("button").forEach((n) => { n.disabled = true; });
    const resp = await api("POST", "/v1/threads/" + state.thread + "/elicitations/" + encodeURIComponent(id), { action });
    if (resp.status === 202) { settle(card, action === "accept" ? "Consent given." : action === "decline" ? "Declined." : "Cancelled."); return; }
    const p = await resp.json().catch(() => ({}));
    if (p.reason === "already_consumed") settle(card, "Already answered.");
    else if (p.reason === "unknown_or_expired") settle(card, "This question expired.");
    else {
      card.querySelectorAll("button").forEach((n) => { n.disabled = false; });
      card.querySelector(".state").textContent = "Not sent: " + (p.detail || p.reason || resp.status);
    }
  };
  const actions = el("div", { class: "actions" });
  actions.append(el("button", { type: "button", "data-action": "accept", text: "I consent to open it", onclick: () => answer("accept") }));
  actions.append(el("button", { type: "button", "data-action": "decline", text: "Decline", onclick: () => answer("decline") }));
  actions.append(el("button", { type: "button", "data-action": "cancel", text: "Cancel", onclick: () => answer("cancel") }));
  card.append(actions);
  state.questions.set(id, card);
  addItem(card);
}

// ---- events --------------------------------------------------------------------

// onDelta shows streamed text (message.delta) in the turn's draft: per
// step, the newest generation and attempt win (a redone step or a retried
// stream replaces the text shown), deltas already shown (a replay after a
// reconnect) are skipped. The text is rendered like a message, never as
// HTML.
function onDelta(d) {
  const chunk = d.chunk || {};
  if (typeof d.turnId !== "string" || typeof chunk.text !== "string" || !chunk.text) return;
  let draft = state.drafts.get(d.turnId);
  if (!draft) {
    draft = { li: el("li", { class: "msg assistant draft", "aria-busy": "true", "data-turn": d.turnId }), steps: new Map() };
    state.drafts.set(d.turnId, draft);
    addItem(draft.li);
  }
  if (draft.done) return;
  const step = Number(d.step) || 0, attempt = Number(d.attempt) || 0, seq = Number(d.seq) || 0;
  let st = draft.steps.get(step);
  if (!st || st.generation !== d.generation || attempt > st.attempt) {
    st = { generation: d.generation, attempt, next: 0, text: "" };
    draft.steps.set(step, st);
  }
  if (attempt < st.attempt || seq < st.next) return; // void or already shown
  st.text += chunk.text;
  st.next = seq + 1;
  const text = [...draft.steps.keys()].sort((a, b) => a - b).map((k) => draft.steps.get(k).text).join("\n\n");
  draft.li.replaceChildren(markdown(text));
  draft.li.scrollIntoView({ block: "end" });
}

// endDraft removes the turn's draft when its final message arrives
// (completed: the message replaces it), or marks it interrupted.
function endDraft(turnId, completed) {
  const draft = state.drafts.get(turnId);
  if (!draft || draft.done) return;
  draft.done = true;
  draft.li.setAttribute("aria-busy", "false");
  if (completed) { draft.li.remove(); return; }
  draft.li.classList.add("interrupted");
  draft.li.append(el("p", { class: "badge", text: "(interrupted: this answer was not finished)" }));
}

// DENIAL is a line of the tool result a vetoed call gives the model
// (docs/events.md): a reply's lines that only repeat it are shown as the
// veto notice instead.
const DENIAL = /^Execution of \S+ was denied: .*$/;

function withoutDenials(text) {
  return String(text || "").split("\n").filter((l) => !DENIAL.test(l.trim())).join("\n").trim();
}

// onTurnCompleted shows a turn's end: a notice per vetoed call ("Blocked
// by policy gate: <reason>"), the reply (scrolled to its start), the
// reply's first line on the cards answered in the turn, and the entities
// an allowed delete removed as deleted.
function onTurnCompleted(d) {
  endDraft(d.turnId, true);
  setWorking(null);
  const decisions = Array.isArray(d.decisions) ? d.decisions.filter((x) => x && typeof x === "object") : [];
  const vetoes = decisions.filter((x) => x.decision === "veto");
  let first = null;
  for (const v of vetoes) {
    const notice = el("li", { class: "msg notice veto", role: "status", "data-tool": String(v.tool || "") },
      el("strong", { text: "Blocked by policy " + String(v.policy || "(unknown)") }), ": " + String(v.reason || "no reason given"),
      el("span", { class: "tool", text: " (" + String(v.tool || "a tool") + " did not run)" }));
    first = first || notice;
    addItem(notice, true);
  }
  let msg = d.message || {};
  if (vetoes.length) {
    const content = (Array.isArray(msg.content) ? msg.content : []).filter((b) => !(b && b.type === "text" && !withoutDenials(b.text)));
    msg = { ...msg, text: withoutDenials(msg.text), content };
  }
  const empty = !String(msg.text || "").trim() && !(msg.content || []).length;
  if (!empty) addItem(renderMessage(msg, "assistant"), true);
  // The turn's first new item (a veto notice, else the reply) is read first.
  if (first) first.scrollIntoView({ block: "start" });
  const line = empty && vetoes.length ? "blocked by policy" : firstLine(msg.text);
  for (const card of state.awaiting) if (line && !card.querySelector(".outcome")) card.querySelector(".state").append(el("span", { class: "outcome", text: " · " + line }));
  state.awaiting = [];
  for (const card of state.questions.values()) if (!card.classList.contains("settled")) settle(card, "Closed.");
  for (const x of decisions) {
    const card = x.elicitationId && state.questions.get(x.elicitationId);
    if (x.action === "accept" && card && card.toolCall && /^delete/i.test(card.toolCall.name) && card.toolCall.ids.length) checkDeleted(card.toolCall.ids);
  }
}

// answerer names who answered a question: "you" when this page sent that
// answer, else the user the answer names.
function answerer(card, d) {
  if (card.dataset.answering === d.action) return "you";
  const by = d.answeredBy;
  const name = typeof by === "string" ? by : by && typeof by === "object" ? (by.onBehalfOf || by.principal) : "";
  return name ? String(name) : "another user";
}

function onEvent(ce) {
  const d = ce.data || {};
  const status = document.getElementById("status");
  switch (ce.type) {
    case T.delta: onDelta(d); document.getElementById("working")?.remove(); status.textContent = "Writing…"; break;
    case T.turnRequested: addItem(renderMessage(d.message || {}, "user")); setWorking("Working…"); status.textContent = "Thinking…"; break;
    case T.turnCompleted: onTurnCompleted(d); status.textContent = ""; break;
    case T.turnPaused: {
      // The restatement is for questions this page cannot show as a form:
      // when every question of the pause is on screen as a card, the prose
      // would only say the same thing twice.
      const ids = d.elicitationIds || [];
      const shown = (id) => { const c = state.questions.get(id); return c && c.dataset.unrenderable !== "true"; };
      setWorking(null);
      if (ids.length === 0 || !ids.every(shown)) addItem(renderMessage(d.message || {}, "restated"));
      status.textContent = "Waiting for your answer";
      break;
    }
    case T.turnFailed: endDraft(d.turnId, false); setWorking(null); state.awaiting = []; addItem(el("li", { class: "msg error", role: "alert", text: "The turn failed: " + (d.detail || d.reason) })); status.textContent = ""; break;
    case T.turnRejected: setWorking(null); addItem(el("li", { class: "msg error", role: "alert", text: "Message refused: " + d.reason + (d.errors ? " — " + d.errors.map((e) => e.path + ": " + e.rule).join("; ") : "") })); status.textContent = ""; break;
    case T.elicitRequested: renderQuestion(d); break;
    case T.elicitExpired: endDraft(d.turnId, false); setWorking(null); for (const id of d.elicitationIds || []) { const c = state.questions.get(id); if (c) settle(c, "Expired: this question was not answered in time."); } status.textContent = ""; break;
    case T.elicitCancelled: if (d.reason && /new user message/.test(d.reason)) endDraft(d.turnId, false); for (const id of d.elicitationIds || []) { const c = state.questions.get(id); if (c) settle(c, "Withdrawn: " + (d.reason || "no longer needed") + "."); } break;
    case T.elicitResponded: {
      const c = state.questions.get(d.elicitationId);
      if (c && d._meta && Object.hasOwn(d._meta, EDIT_KEY) && d.action === "accept") showEdit(c, d._meta[EDIT_KEY]);
      if (c && !c.classList.contains("settled")) answered(c, d.action, answerer(c, d), ce.time);
      if (c && d.action === "accept") setWorking("Working…");
      break;
    }
    case T.elicitRejected: {
      const c = state.questions.get(d.elicitationId);
      if (c && d.reason === "invalid_content") {
        unsettle(c);
        for (const e of d.errors || []) {
          const path = String(e.path || "");
          if (path.startsWith(EDIT_PATH)) {
            const a = "arguments" + path.slice(EDIT_PATH.length);
            setFieldError(c, a.split(/[.[]/).slice(0, 2).join("."), e.rule) || setFieldError(c, "arguments", a + ": " + e.rule);
          } else setFieldError(c, path.replace(/^content\./, ""), e.rule);
        }
      }
      break;
    }
    case T.approvalGranted: case T.approvalRevoked: loadApprovals(state.thread); break;
    case T.approvalUsed: addItem(ranUnderApproval(d)); break;
    case T.progress: {
      const text = (typeof d.message === "string" && d.message) || ("Working… " + (d.total ? Math.round(100 * d.progress / d.total) + "%" : ""));
      status.textContent = text;
      // The in-thread indicator only while a turn runs: a late phase of an
      // ended turn (another agent replica's) does not bring it back.
      if (state.running) setWorking(text);
      break;
    }
  }
  const meta = d.message && d.message._meta;
  if (meta && meta[META.status]) status.textContent = String(meta[META.status]);
}

// follow reads the thread's events with fetch (so the token goes in a
// header, not the URL), parses server-sent events, and reconnects with
// Last-Event-ID.
async function follow(thread) {
  if (state.abort) state.abort.abort();
  const ctl = new AbortController();
  state.abort = ctl;
  state.following = true;
  try { await followLoop(thread, ctl); } finally { if (state.abort === ctl) state.following = false; }
}

async function followLoop(thread, ctl) {
  while (!ctl.signal.aborted) {
    try {
      const headers = { Authorization: "Bearer " + state.token };
      if (state.lastID) headers["Last-Event-ID"] = String(state.lastID);
      const resp = await fetch("/v1/threads/" + thread + "/events", { headers, signal: ctl.signal });
      if (resp.status === 401) { signOut(true); return; }
      if (resp.status === 404) {
        // Not ours, or nothing yet (the first message claims it); after
        // events were shown, the share was revoked.
        if (state.lastID) addItem(el("li", { class: "msg error", role: "alert", text: "You can no longer see this thread (it is not shared with you any more)." }));
        return;
      }
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let k;
        while ((k = buf.indexOf("\n\n")) >= 0) {
          const chunk = buf.slice(0, k);
          buf = buf.slice(k + 2);
          let id = 0, data = "";
          for (const line of chunk.split("\n")) {
            if (line.startsWith("id: ")) id = Number(line.slice(4));
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (!data) continue;
          if (id) state.lastID = id;
          try { onEvent(JSON.parse(data)); } catch (e) { console.error("bad event", e); }
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

// ---- context references ("@" mentions) ---------------------------------------

// A message may refer to site entities: typing "@" and a few letters in
// the composer asks the entity lookup (GET /v1/lookup/entities, the one
// behind the forms' entity_autocomplete) and offers the matches; choosing
// one puts "@<label>" in the text (the text stays readable without the
// blocks) and a chip in the composer. The chips go with the message as
// resource_link blocks with _meta["drupal.org/ai.entity"]; parley resolves
// each as the signed-in user before the model sees it.
const MAX_REFS = 8; // events.MaxReferences
let mentions = { refs: [], clear() {} };

// referenceBlock is the resource_link block of a reference.
function referenceBlock(r) {
  const ent = { entity_type: r.entity_type, id: r.id };
  if (r.label) ent.label = r.label;
  return { type: "resource_link", uri: r.uri || "entity:" + r.entity_type + "/" + encodeURIComponent(r.id),
    name: r.label || r.entity_type + ":" + r.id, _meta: { [META.entity]: ent } };
}

// referenceOf is the reference a user message's block makes, or null.
function referenceOf(b) {
  if (!b || (b.type !== "resource_link" && b.type !== "resource")) return null;
  const e = b._meta && b._meta[META.entity];
  if (!e || typeof e !== "object" || typeof e.id !== "string" || typeof e.entity_type !== "string") return null;
  return { entity_type: e.entity_type, id: e.id, label: typeof e.label === "string" ? e.label : (b.name || "") };
}

// refChip shows a reference; remove, when given, adds a button that drops it.
function refChip(r, remove) {
  const label = r.label || r.entity_type + ":" + r.id;
  const chip = el("span", { class: "ref-chip", role: "listitem", "data-entity-id": r.id, title: r.entity_type + " " + r.id },
    el("span", { text: "@" + label }));
  if (remove) chip.append(el("button", { type: "button", "aria-label": "Remove reference to " + label, text: "×", onclick: remove }));
  return chip;
}

// setupMentions wires the "@" autocomplete to the composer's textarea and
// returns the composer's references ({refs, clear}).
function setupMentions(text) {
  const refs = [];
  const wrap = el("div", { class: "composer-main" });
  text.replaceWith(wrap);
  const chips = el("div", { id: "composer-refs", class: "ref-chips", role: "list", "aria-label": "Referenced entities" });
  const list = el("ul", { id: "mention-list", class: "mention-list", role: "listbox", "aria-label": "Entities to refer to", hidden: true });
  wrap.append(chips, text, list);
  text.setAttribute("aria-controls", "mention-list");
  let timer = 0, seq = 0, active = -1, found = [];
  const showChips = () => chips.replaceChildren(...refs.map((r, i) => refChip(r, () => { refs.splice(i, 1); showChips(); text.focus(); })));
  const close = () => { list.hidden = true; list.replaceChildren(); found = []; active = -1; text.removeAttribute("aria-activedescendant"); };
  // at is the "@query" just before the caret, or null.
  const at = () => {
    const before = text.value.slice(0, text.selectionStart);
    const m = /(?:^|\s)@([^\s@]{1,60})$/.exec(before);
    return m ? { start: before.length - m[1].length - 1, end: before.length, q: m[1] } : null;
  };
  const mark = (i) => {
    active = i;
    [...list.children].forEach((n, k) => n.setAttribute("aria-selected", String(k === i)));
    if (i >= 0) text.setAttribute("aria-activedescendant", list.children[i].id);
  };
  const choose = (i) => {
    const e = found[i], m = at();
    close();
    if (!e || !m) return;
    const label = String(e.label || e.id);
    text.value = text.value.slice(0, m.start) + "@" + label + " " + text.value.slice(m.end);
    const caret = m.start + label.length + 2;
    text.setSelectionRange(caret, caret);
    if (!refs.some((r) => r.entity_type === e.entity_type && r.id === e.id) && refs.length < MAX_REFS) {
      refs.push({ entity_type: String(e.entity_type), id: String(e.id), label, uri: typeof e.uri === "string" ? e.uri : "" });
      showChips();
    }
    text.focus();
  };
  text.addEventListener("input", () => {
    clearTimeout(timer);
    const m = at();
    if (!m) { close(); return; }
    timer = setTimeout(async () => {
      const my = ++seq;
      let resp;
      try { resp = await api("GET", "/v1/lookup/entities?" + new URLSearchParams({ q: m.q.slice(0, 200), limit: "8" })); } catch (_) { resp = null; }
      if (my !== seq) return;
      if (!resp || resp.status !== 200) { close(); return; } // no lookup: "@" stays plain text
      const { entities } = await resp.json().catch(() => ({ entities: [] }));
      found = (entities || []).filter((e) => e && e.id !== undefined && typeof e.entity_type === "string");
      if (!found.length) { close(); return; }
      list.replaceChildren(...found.map((e, i) => el("li", { id: "mention-" + i, role: "option", "aria-selected": "false",
        "data-entity-id": String(e.id), onmousedown: (ev) => { ev.preventDefault(); choose(i); } },
        el("strong", { text: String(e.label || e.id) }), el("span", { text: " " + [e.bundle || e.entity_type, e.status].filter(Boolean).join(", ") }))));
      list.hidden = false;
      mark(0);
    }, 150);
  });
  // While the list is open, arrows move, Enter or Tab chooses (it never
  // sends), Escape closes.
  let swallow = false; // the Enter that chose: its keypress inserts nothing
  text.addEventListener("keypress", (ev) => { if (swallow && ev.key === "Enter") ev.preventDefault(); swallow = false; }, true);
  text.addEventListener("keydown", (ev) => {
    swallow = false;
    if (list.hidden) return;
    if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
      ev.preventDefault();
      mark((active + (ev.key === "ArrowDown" ? 1 : found.length - 1)) % found.length);
    } else if (ev.key === "Enter" || ev.key === "Tab") {
      ev.preventDefault();
      ev.stopImmediatePropagation();
      swallow = ev.key === "Enter";
      choose(active);
    } else if (ev.key === "Escape") {
      ev.preventDefault();
      close();
    }
  }, true);
  text.addEventListener("blur", () => setTimeout(close, 150));
  return { refs, clear() { refs.length = 0; showChips(); close(); } };
}

// ---- API and UI ------------------------------------------------------------------

async function api(method, path, body) {
  const resp = await fetch(path, {
    method,
    headers: { Authorization: "Bearer " + state.token, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  if (resp.status === 401) signOut(true);
  return resp;
}

// sendMessage posts a user message to the open thread, for the agent
// chosen in the composer's Agent field (none: the default agent).
async function sendMessage(text, refs) {
  if (!state.thread) openThread(newThreadID());
  const body = { text };
  const agent = document.getElementById("agent").value.trim();
  if (agent) body.agent = agent;
  if (refs && refs.length) body.content = refs.map(referenceBlock);
  const resp = await api("POST", "/v1/threads/" + state.thread + "/messages", body);
  if (resp.status !== 202) {
    const p = await resp.json().catch(() => ({}));
    const why = Array.isArray(p.errors) && p.errors.length ? p.errors.map((e) => e.path + ": " + e.rule).join("; ") : (p.detail || resp.status);
    addItem(el("li", { class: "msg error", role: "alert", text: "Not sent: " + why }));
    return false;
  }
  if (!state.following) follow(state.thread);
  loadThreads();
  return true;
}

function newThreadID() { return "web-" + crypto.randomUUID(); }

// ---- sharing ------------------------------------------------------------------------

// showAccess renders who may use the thread (a ThreadAccess or thread
// state: owner, shared, role): the owner gets the list with a remove
// button per user and the share form; a user it is shared with sees who
// shared it. A thread nobody has claimed yet (access null) can be shared
// before its first message (the share claims it).
function showAccess(access) {
  const info = document.getElementById("share-info");
  const list = document.getElementById("share-list");
  const form = document.getElementById("share-form");
  const owner = !access || access.role !== "shared";
  const shared = (access && Array.isArray(access.shared)) ? access.shared : [];
  info.textContent = !access ? "Not shared." : !owner ? "Shared with you by " + access.owner + "." :
    shared.length ? "Shared with " + shared.length + (shared.length === 1 ? " user." : " users.") : "Only you.";
  form.hidden = !owner;
  list.replaceChildren(...shared.map((u) => el("li", {}, el("span", { text: u }), owner ? el("button", {
    type: "button", "aria-label": "Stop sharing with " + u, text: "Remove", onclick: () => changeShare("DELETE", u),
  }) : null)));
}

async function loadSharing(thread) {
  document.getElementById("share-error").textContent = "";
  const resp = await api("GET", "/v1/threads/" + thread);
  if (thread !== state.thread) return;
  if (resp.status === 200) showAccess(await resp.json());
  else showAccess(null);
}

async function changeShare(method, user) {
  const errBox = document.getElementById("share-error");
  errBox.textContent = "";
  const resp = await api(method, "/v1/threads/" + state.thread + "/shares/" + encodeURIComponent(user));
  const body = await resp.json().catch(() => ({}));
  if (resp.status !== 200) { errBox.textContent = "Not changed: " + (body.detail || resp.status); return false; }
  showAccess({ ...body, role: "owner" });
  loadThreads();
  return true;
}

function openThread(id) {
  state.thread = id;
  state.lastID = 0;
  state.questions.clear();
  state.drafts.clear();
  state.awaiting = [];
  state.running = false;
  document.getElementById("messages").replaceChildren(emptyHint());
  document.getElementById("thread-title").textContent = state.titles.get(id) || id;
  document.querySelectorAll("#threads button").forEach((b) => b.setAttribute("aria-current", b.dataset.thread === id ? "true" : "false"));
  history.replaceState(null, "", "#thread=" + encodeURIComponent(id));
  follow(id);
  loadSharing(id);
  loadApprovals(id);
}

async function loadThreads() {
  const resp = await api("GET", "/v1/threads");
  if (resp.status !== 200) return;
  const { threads } = await resp.json();
  const ul = document.getElementById("threads");
  // A thread is listed by its title (its first message, from the
  // gateway) when it has one, else by its ID.
  for (const t of threads) if (typeof t.title === "string" && t.title.trim()) state.titles.set(t.thread, t.title.trim());
  ul.replaceChildren(...threads.map((t) => el("li", {}, el("button", {
    type: "button", "data-thread": t.thread, "aria-current": t.thread === state.thread ? "true" : "false",
    title: t.thread, text: state.titles.get(t.thread) || t.thread, onclick: () => { openThread(t.thread); closeSidebar(); },
  }))));
  if (state.titles.has(state.thread)) document.getElementById("thread-title").textContent = state.titles.get(state.thread);
}

function closeSidebar() {
  document.getElementById("app").classList.remove("threads-open");
  document.getElementById("threads-toggle").setAttribute("aria-expanded", "false");
}

// signOut shows the login card; refused says the token was tried and not
// accepted (wrong, or from an earlier parley dev), and where a good one is.
function signOut(refused) {
  const had = state.token !== "";
  sessionStorage.removeItem("parley-token");
  state.token = "";
  if (state.abort) state.abort.abort();
  // (A second refusal of the same token, from a request already on its
  // way, keeps the message.)
  const msg = document.getElementById("login-error");
  if (refused && had) msg.textContent = "Token not accepted: it is wrong, or from an earlier run of parley dev.";
  else if (!refused) msg.textContent = "";
  document.getElementById("app").hidden = true;
  document.getElementById("login").hidden = false;
}

function start() {
  document.getElementById("login").hidden = true;
  document.getElementById("app").hidden = false;
  loadThreads();
  const m = /thread=([^&]+)/.exec(location.hash);
  openThread(m ? decodeURIComponent(m[1]) : newThreadID());
  document.getElementById("composer-text").focus();
}

document.addEventListener("DOMContentLoaded", () => {
  const m = /token=([^&]+)/.exec(location.hash);
  if (m) { sessionStorage.setItem("parley-token", decodeURIComponent(m[1])); history.replaceState(null, "", location.pathname); }
  state.token = sessionStorage.getItem("parley-token") || "";
  document.getElementById("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = document.getElementById("login-token").value.trim();
    sessionStorage.setItem("parley-token", state.token);
    start();
  });
  document.getElementById("new-thread").addEventListener("click", () => { openThread(newThreadID()); closeSidebar(); });
  document.getElementById("threads-toggle").addEventListener("click", (ev) => {
    const open = document.getElementById("app").classList.toggle("threads-open");
    ev.currentTarget.setAttribute("aria-expanded", String(open));
  });
  document.getElementById("share-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const input = document.getElementById("share-user");
    const user = input.value.trim();
    if (user && (await changeShare("PUT", user))) input.value = "";
  });
  const text = document.getElementById("composer-text");
  text.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); document.getElementById("composer").requestSubmit(); }
  });
  document.getElementById("composer").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = text.value.trim();
    if (!v) return;
    if (await sendMessage(v, mentions.refs)) { text.value = ""; mentions.clear(); }
  });
  mentions = setupMentions(text);
  if (state.token) start(); else signOut();
});

// ---- standing approvals ----------------------------------------------------
// A confirmation may offer "allow this tool for this thread"
// (_meta["dev.parley/standing"], docs/POLICY.md): later calls of the tool
// by the same agent in this thread then run without asking, until the
// approval expires or its owner revokes it. The header lists the thread's
// approvals ("allowed: delete_entities · revoke").

// standingOption is the checkbox (and, when the deployment offers shorter
// lifetimes, a choice of one) of a confirmation offering a standing
// approval; null when it offers none. chosen() is the answer's
// _meta["dev.parley/standing"], or null when unchecked.
function standingOption(meta, tc, id) {
  const offer = meta[META.standing];
  if (!offer || typeof offer !== "object" || !Array.isArray(offer.scopes) || !offer.scopes.includes("thread")) return null;
  const fid = "standing-" + id;
  const box = el("input", { type: "checkbox", id: fid, name: "standing", "data-standing": "thread" });
  const field = el("div", { class: "field standing" }, el("label", { for: fid }, box, " Also allow " + String(tc.name) + " in this thread without asking again"));
  const ttls = (Array.isArray(offer.ttlSeconds) ? offer.ttlSeconds : []).filter((n) => Number.isInteger(n) && n > 0);
  let pick = null;
  if (ttls.length) {
    pick = el("select", { "aria-label": "For how long", "data-standing-ttl": "" },
      el("option", { value: "", text: "until the approval expires" }),
      ...ttls.map((n) => el("option", { value: String(n), text: "for " + humanSeconds(n) })));
    field.append(" ", pick);
  }
  const chosen = () => {
    if (!box.checked) return null;
    const v = { scope: "thread" };
    if (pick && pick.value) v.ttlSeconds = Number(pick.value);
    return v;
  };
  return { field, chosen };
}

function humanSeconds(n) {
  if (n % 3600 === 0) return n / 3600 === 1 ? "1 hour" : n / 3600 + " hours";
  if (n % 60 === 0) return n / 60 === 1 ? "1 minute" : n / 60 + " minutes";
  return n + " seconds";
}

// ranUnderApproval notes a call that ran without a question.
function ranUnderApproval(d) {
  const a = d.approval || {};
  const by = a.grantedBy ? (a.grantedBy.onBehalfOf || a.grantedBy.principal) : "someone";
  return el("li", { class: "msg note approval-used", text: String(a.tool) + " ran without asking: allowed for this thread by " + by + "." });
}

// loadApprovals shows the thread's standing approvals in the header, each
// with a revoke button (the gateway answers 403 to anyone but the owner).
async function loadApprovals(thread) {
  const line = document.getElementById("approvals");
  if (!line || !thread) return;
  const resp = await api("GET", "/v1/threads/" + thread + "/approvals");
  if (thread !== state.thread) return;
  if (resp.status !== 200) { line.hidden = true; line.replaceChildren(); return; }
  const { approvals } = await resp.json();
  const live = (approvals || []).filter((a) => Date.parse(a.expiresAt) > Date.now());
  line.replaceChildren();
  line.hidden = live.length === 0;
  if (!live.length) return;
  line.append("allowed: ");
  live.forEach((a, i) => {
    if (i) line.append(", ");
    line.append(el("strong", { text: String(a.tool), title: "granted by " + (a.grantedBy ? (a.grantedBy.onBehalfOf || a.grantedBy.principal) : "?") + ", expires " + a.expiresAt }));
    line.append(" · ", el("button", { type: "button", class: "link", "data-revoke": String(a.tool), text: "revoke", onclick: () => revokeApproval(thread, String(a.tool)) }));
  });
}

async function revokeApproval(thread, tool) {
  const resp = await api("DELETE", "/v1/threads/" + thread + "/approvals?tool=" + encodeURIComponent(tool));
  const line = document.getElementById("approvals");
  if (resp.status !== 200) {
    const p = await resp.json().catch(() => ({}));
    line.append(el("span", { class: "error", role: "alert", text: " Not revoked: " + (p.detail || p.reason || resp.status) }));
    return;
  }
  loadApprovals(thread);
}
