// @ts-check
// The conversation the page keeps, and what can be done with its turns: send a message, regenerate the
// last reply, edit a message of the user and send it again, delete a turn, copy a message. The page owns
// the messages: every reply is asked with the whole conversation it answers ("chat" with ``messages``),
// and the worker keeps the KV cache of the longest prefix it shares with the last one, so a regenerated
// or edited turn prefills only what changed. A reply joins the conversation when it ends (a stopped one
// as far as it was shown); one that fails leaves the conversation as it was.
import { el } from "./dom.js";
import {
  drawMessages, editMessage, endTurn, failTurn, resumeReply, showCalls, showContext, showTokens, startReply, startTurn,
  waitingCalls,
} from "./chat_view.js";
import { PROBS_SHOWN } from "./token_view.js";
import { copyAndSay, copyCode } from "./markdown.js";
import { setPhase, status } from "./status.js";
import { readStructure } from "./structure.js";
import { readTools } from "./tools_panel.js";
import { worker } from "./worker_client.js";
/** @typedef {import("./messages.js").ChatMessage} ChatMessage */
/** @typedef {import("./messages.js").Settings} Settings */
/** @typedef {import("./messages.js").TurnStats} TurnStats */
/** @typedef {import("./messages.js").PageData} PageData */
/** @typedef {import("./messages.js").DoneMessage} DoneMessage */
/** @typedef {(action: (settings: Settings) => void) => void} Request run action once the settings are checked */

// messages: [{role, content, note?, tokens?}] (note "stopped"; tokens: a reply's token records), the
// conversation the next reply answers.
/** @type {{messages: ChatMessage[]}} */
export const chat = { messages: [] };
// The reply running: kind ("send", "regenerate", "edit") and the messages it answers.
let pending = null;
/** @type {{request: Request, sendable: (text: string) => boolean, changed: () => void}} */
let hooks = { request: null, sendable: () => true, changed: () => {} };
const PROBS_KEY = "pyengine.probs"; // localStorage: the probabilities toggle
// From Python once it is up (pyengine.browser.page): the stop reasons of a reply Continue goes on with
// (CONTINUED), and what the probabilities view shows (PROBS_NOTE).
const words = { continued: [], probsNote: "" };

// A message as the worker takes it: {role, content}, and a reply's tool_calls or a result's tool_call_id, name.
const plain = (messages) => messages.map(({ role, content, tool_calls, tool_call_id, name }) => ({
  role, content, ...(tool_calls ? { tool_calls } : {}), ...(tool_call_id ? { tool_call_id, name } : {}) }));

// kind: "send", "regenerate", "edit", "continue" or "tool"; messages: the conversation before the reply (for
// "continue", before the reply that goes on, which is sent last); fields: the settings as typed
// (settings_form.js readFields); draw(): what the page shows of the turn once the worker takes them.
function ask(kind, messages, fields, draw, resumed = null) {
  pending = { kind, messages, draw };
  const probs = el.showProbs.checked ? PROBS_SHOWN : 0;
  const thinking = el.thinking.closest("label").hidden ? null : el.thinking.checked;
  worker.chat(plain(resumed ? [...messages, resumed] : messages), el.systemPrompt.value, fields, probs,
    resumed !== null, thinking, readStructure(), readTools());
}

// The worker took the settings ("started"): the turn is drawn and the reply runs.
export function replyStarted() {
  pending?.draw();
  if (status.phase === "ready") setPhase("generating");
}

// The worker refused the settings, or the reply failed before it started: nothing was drawn.
export function replyRefused() {
  pending = null;
}

// A new message of the user.
export function sendText(text, fields) {
  const index = chat.messages.length;
  ask("send", [...chat.messages, { role: "user", content: text }], fields, () => startTurn(text, index));
}

function regenerate(fields) {
  const messages = chat.messages.slice(0, lastUser() + 1);
  ask("regenerate", messages, fields, () => {
    drawMessages(messages, true);
    startReply();
  });
}

function resend(index, text, fields) {
  const messages = chat.messages.slice(0, index);
  ask("edit", [...messages, { role: "user", content: text }], fields, () => {
    drawMessages(messages, true);
    startTurn(text, index);
  });
}

// Go on with the last reply; false when the last message is not one.
function continueReply(fields) {
  const last = chat.messages.at(-1);
  if (last?.role !== "assistant") return false;
  ask("continue", chat.messages.slice(0, -1), fields, resumeReply, last);
  return true;
}

function deleteTurn(index) {
  const n = chat.messages[index + 1]?.role === "assistant" ? 2 : 1;
  chat.messages.splice(index, n);
  drawMessages(chat.messages, status.hasModel);
  hooks.changed();
}

const lastUser = () => chat.messages.map((m) => m.role).lastIndexOf("user");

// The worker's "done" (stats: the reply's, pyengine TurnStats; done: the message, with the reply's
// tool_calls and its content outside them when it made calls): the reply joins the conversation.
/** @param {boolean} stopped @param {TurnStats | null} stats @param {Partial<DoneMessage>} [done] */
export function replyDone(stopped, stats, done = {}) {
  const li = el.messages.querySelector(".message.streaming");
  const { text, tokens } = endTurn(stopped, pending?.messages.length);
  if (!pending) return;
  const stop = words.continued.includes(stats?.stop_reason) ? stats.stop_reason : undefined;
  const reply = { role: "assistant", content: text, ...(stopped ? { note: "stopped" } : {}),
    ...(tokens.length ? { tokens } : {}), ...(stop ? { stop } : {}),
    ...(stats?.dropped_messages ? { dropped: stats.dropped_messages } : {}),
    ...(done.tool_calls?.length ? { content: done.content, tool_calls: done.tool_calls } : {}) };
  if (li) showContext(li, reply);
  chat.messages = [...pending.messages, reply];
  if (li && reply.tool_calls) showCalls(li, reply, waitingCalls(chat.messages, chat.messages.length - 1));
  pending = null;
  hooks.changed();
}

// The worker's "error" during a chat: the conversation stays as it was. Returns the text of a new
// message that failed, to offer again (null otherwise).
export function replyFailed(message) {
  const kind = pending?.kind;
  pending = null;
  if (kind === "send" || kind === undefined) return failTurn(message);
  failTurn(message);
  drawMessages(chat.messages, status.hasModel); // the reply regenerated or the message edited is back
  return null;
}

// The conversation replaced (another chat, a new one, an import): drawn again.
// The model loaded: whether its chat template has a thinking switch (enable_thinking), shown as a toggle.
/** @param {boolean} has */
export function useThinkingSwitch(has) {
  el.thinking.closest("label").hidden = !has;
}

export function useMessages(messages) {
  chat.messages = messages;
  drawMessages(messages, status.hasModel);
}

function onAction(button) {
  const li = button.closest("[data-testid=message]");
  const index = li?.dataset.index === undefined ? -1 : Number(li.dataset.index);
  const action = button.dataset.action;
  if (action === "copy") return void copyAndSay(button, li.dataset.text);
  if (status.phase !== "ready" || index < 0) return; // nothing changes while a reply runs
  if (action === "tool-result" || action === "tool-decline") return void answerCall(button, action);
  if (action === "delete") deleteTurn(index);
  else if (action === "regenerate") hooks.request((s) => regenerate(s));
  else if (action === "continue") hooks.request((s) => continueReply(s));
  else if (action === "edit") {
    editMessage(li, (text) => text.trim() && hooks.sendable(text) && hooks.request((s) => resend(index, text, s)),
      () => drawMessages(chat.messages, status.hasModel));
  }
}

// A call's card answered: its result (or that the user declined) joins the conversation as the tool's
// message; once every call of the reply has one, the model goes on.
const DECLINED = "The user declined to run this tool.";

function answerCall(button, action) {
  const card = button.closest(".tool-call");
  const i = chat.messages.findLastIndex((m) => m.tool_calls?.some((c) => c.id === button.dataset.call));
  if (i < 0 || !waitingCalls(chat.messages, i).has(button.dataset.call)) return;
  const call = chat.messages[i].tool_calls.find((c) => c.id === button.dataset.call);
  const content = action === "tool-decline" ? DECLINED : card.querySelector("textarea").value;
  chat.messages = [...chat.messages, { role: "tool", tool_call_id: call.id, name: call.function.name, content }];
  drawMessages(chat.messages, status.hasModel);
  hooks.changed();
  if (waitingCalls(chat.messages, i).size) return;
  hooks.request((fields) => ask("tool", chat.messages, fields, startReply));
}

// page: what Python sends once it is up (pyengine.browser.worker.page_data).
/** @param {PageData} page */
export function usePageWords(page) {
  words.continued = page.continued;
  words.probsNote = page.probs_note;
  if (el.showProbs.checked) el.probsNote.textContent = words.probsNote;
}

// request(ask): ask for a reply with the settings as typed (composer.js); sendable(text):
// whether a message may be sent (composer.js says why not); changed(): the conversation changed (it is saved).
export function wireTurns(request, sendable, changed) {
  hooks = { request, sendable, changed };
  el.showProbs.checked = localStorage.getItem(PROBS_KEY) === "1";
  const useProbs = () => {
    showTokens(el.showProbs.checked);
    el.probsNote.textContent = el.showProbs.checked ? words.probsNote : "";
    localStorage.setItem(PROBS_KEY, el.showProbs.checked ? "1" : "0");
    drawMessages(chat.messages, status.hasModel);
  };
  el.showProbs.addEventListener("change", useProbs);
  useProbs();
  el.messages.addEventListener("click", (e) => {
    const button = /** @type {Element} */ (e.target).closest("button");
    if (!button) return;
    if (button.classList.contains("copy-code")) copyCode(button);
    else if (button.dataset.action) onAction(button);
  });
}
