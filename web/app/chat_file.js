// @ts-check
// A chat as a file: exported as JSON (OpenAI-style messages: {role, content}, the system prompt as a first
// "system" message, a reply's tool_calls and the tool's results as OpenAI has them; the settings as typed; the
// Structured output {kind, text}; the tools {text, required}; the model's name) or as
// Markdown, and a JSON file read back
// with every problem named (which message, which field, what it holds).
import { boundedName, withCommas } from "./format.js";

export const FORMAT = "pyengine-chat";
const ROLES = ["system", "user", "assistant", "tool"];
const MAX_BYTES = 64 * 2 ** 20;   // a chat file larger than this is not read
const MAX_MESSAGES = 100_000;
export const MESSAGE_CHARS = 1_000_000; // the most a message may hold (sent or imported)

// Why a message of ``text`` is refused ("" when it is not): what names it, then what is wrong.
export const tooLong = (text) => (text.length > MESSAGE_CHARS
  ? `has ${withCommas(text.length)} chars, more than a message may hold (${withCommas(MESSAGE_CHARS)})` : "");

// What a message keeps in a file: role, content, a reply's tool_calls, a result's tool_call_id and name.
const kept = ({ role, content, tool_calls, tool_call_id, name }) => ({
  role, content, ...(tool_calls ? { tool_calls } : {}), ...(tool_call_id ? { tool_call_id, name } : {}) });

export function chatToJSON(chat) {
  const messages = [...(chat.system ? [{ role: "system", content: chat.system }] : []),
    ...chat.messages.map(kept)];
  return JSON.stringify({ format: FORMAT, version: 1, title: chat.title, model: chat.model,
    settings: chat.settings, structure: chat.structure, tools: chat.tools, messages,
    exported: new Date().toISOString() }, null, 2);
}

export function chatToMarkdown(chat) {
  const lines = [`# ${chat.title || "Chat"}`, ""];
  if (chat.model) lines.push(`Model: ${chat.model}`, "");
  if (chat.system) lines.push("## System prompt", "", chat.system, "");
  const heads = { user: "## You", assistant: "## Model", tool: "## Tool result" };
  for (const m of chat.messages) {
    lines.push(heads[m.role] ?? `## ${m.role}`, "", m.content, "");
    for (const c of m.tool_calls ?? []) lines.push(`Call ${c.function.name}: \`${JSON.stringify(c.function.arguments)}\``, "");
  }
  return lines.join("\n");
}

const kind = (v) => (v === null ? "null" : Array.isArray(v) ? "a list" : typeof v);
const shown = (v) => JSON.stringify(v)?.slice(0, 40) ?? String(v);

// A chat file (a File) -> what chatFromJSON makes of it; its size is checked before a byte is read.
export async function readChatFile(file) {
  if (file.size > MAX_BYTES) {
    throw new Error(`${file.name}: it is larger than ${MAX_BYTES / 2 ** 20} MiB (${withCommas(file.size)} bytes)`);
  }
  return chatFromJSON(await file.text(), file.name);
}

// A chat file's text -> {title, model, system, settings, messages}; throws an Error whose message says
// what is wrong: "chat.json: messages[2].role must be one of system, user, assistant (it is "robot")".
export function chatFromJSON(text, name = "the file") {
  const fail = (why) => { throw new Error(`${name}: ${why}`); };
  if (text.length > MAX_BYTES) fail(`it is larger than ${MAX_BYTES / 2 ** 20} MiB`);
  let data;
  try {
    data = JSON.parse(text);
  } catch (e) {
    fail(`not JSON (${e.message})`);
  }
  if (Array.isArray(data)) data = { messages: data }; // a bare list of messages
  if (kind(data) !== "object") fail(`must hold a chat object or a list of messages (it holds ${kind(data)})`);
  const { messages } = data;
  if (!Array.isArray(messages)) fail(`"messages" must be a list of {role, content} (it is ${kind(messages)})`);
  if (messages.length > MAX_MESSAGES) fail(`it has ${messages.length} messages, more than ${MAX_MESSAGES}`);
  messages.forEach((m, i) => {
    if (kind(m) !== "object") fail(`messages[${i}] must be an object with "role" and "content" (it is ${kind(m)})`);
    if (!ROLES.includes(m.role)) fail(`messages[${i}].role must be one of ${ROLES.join(", ")} (it is ${shown(m.role)})`);
    if (typeof m.content !== "string") fail(`messages[${i}].content must be text (it is ${kind(m.content)})`);
    if (m.role === "system" && i > 0) fail(`messages[${i}]: a system message may only come first`);
    if (tooLong(m.content)) fail(`messages[${i}].content ${tooLong(m.content)}`);
    checkCalls(m, i, fail);
  });
  const settings = data.settings ?? {};
  if (kind(settings) !== "object") fail(`"settings" must be an object of name: value (it is ${kind(settings)})`);
  for (const [k, v] of Object.entries(settings)) {
    if (!["string", "number"].includes(typeof v)) fail(`settings.${k} must be a number or text (it is ${kind(v)})`);
  }
  const tools = data.tools ?? { text: "", required: false };
  if (kind(tools) !== "object" || typeof tools.text !== "string" || typeof (tools.required ?? false) !== "boolean") {
    fail(`"tools" must be {"text": tool definitions as text, "required": true or false} (it is ${shown(tools)})`);
  }
  if (tooLong(tools.text)) fail(`tools.text ${tooLong(tools.text)}`);
  const structure = data.structure ?? { kind: "none", text: "" };
  if (kind(structure) !== "object" || typeof structure.kind !== "string" || typeof structure.text !== "string"
    || structure.kind.length > 20) {
    fail(`"structure" must be {"kind": "none", "json", "schema" or "grammar", "text": text} (it is ${shown(structure)})`);
  }
  if (tooLong(structure.text)) fail(`structure.text ${tooLong(structure.text)}`);
  for (const key of ["title", "model"]) {
    if (data[key] != null && typeof data[key] !== "string") fail(`"${key}" must be text (it is ${kind(data[key])})`);
  }
  const system = messages[0]?.role === "system" ? messages[0].content : "";
  return { title: boundedName(data.title), model: boundedName(data.model), system,
    structure: { kind: structure.kind, text: structure.text },
    tools: { text: tools.text, required: Boolean(tools.required) },
    settings: Object.fromEntries(Object.entries(settings).map(([k, v]) => [k, String(v)])),
    messages: messages.filter((m) => m.role !== "system").map(kept) };
}

// A reply's tool_calls ([{id, type, function: {name, arguments: an object}}]) and a result's tool_call_id
// and name checked; ``fail(why)`` throws.
function checkCalls(m, i, fail) {
  if (m.tool_calls !== undefined) {
    if (m.role !== "assistant" || !Array.isArray(m.tool_calls) || m.tool_calls.length > 64) {
      fail(`messages[${i}].tool_calls must be a list of calls of a reply (it is ${shown(m.tool_calls)})`);
    }
    m.tool_calls.forEach((c, j) => {
      if (kind(c) !== "object" || typeof c.id !== "string" || kind(c.function) !== "object"
        || typeof c.function.name !== "string" || kind(c.function.arguments) !== "object") {
        fail(`messages[${i}].tool_calls[${j}] must be {id, function: {name, arguments: {...}}} (it is ${shown(c)})`);
      }
    });
  }
  if (m.role === "tool" && (typeof m.tool_call_id !== "string" || typeof m.name !== "string")) {
    fail(`messages[${i}]: a tool's result must have "tool_call_id" and "name" as text`);
  }
}
