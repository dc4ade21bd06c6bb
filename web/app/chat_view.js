// @ts-check
// The conversation as the page shows it: the messages (a reply as Markdown, a message of the user as
// typed), each with its actions (copy; edit and delete a turn on the user's; regenerate on the last
// reply), the reply streaming into the last one, the notes under a stopped or failed message, and the
// statistics line under the list. Every message keeps its text in data-text (what the chat sends).
import { el, make } from "./dom.js";
import { drawReply } from "./markdown.js";
import { drawTokens, wireTokens } from "./token_view.js";
import { withCommas } from "./format.js";
/** @typedef {import("./messages.js").TokenRecord} TokenRecord */
/** @typedef {import("./messages.js").TurnStats} TurnStats */

// A reply longer than MARKDOWN_CHARS is drawn as plain text (markdown-it takes seconds, or minutes, on
// some texts of a few MB: 16 M chars of "[x" took 35 s), and so are the older replies of a chat once its
// newer ones hold CHAT_MARKDOWN_CHARS. A message shows at most SHOWN_CHARS (a chat saved before messages
// were capped may hold more), and the older messages of a chat whose newer ones hold CHAT_SHOWN_CHARS only
// their first PREVIEW_CHARS (40 replies of 200,000 chars of "```" drew 6 M elements in 112 s, and 8 M
// chars of 2 M lines take seconds to lay out). Copy and export keep the whole text.
const MARKDOWN_CHARS = 200_000;
const CHAT_MARKDOWN_CHARS = 300_000;
const SHOWN_CHARS = 1_000_000;
const CHAT_SHOWN_CHARS = 1_000_000;
const PREVIEW_CHARS = 2_000;

// The turn under way: reply, the assistant <li> growing; asked, the user <li> it answers (marked
// failed if the reply fails); text, the reply so far; drawn, the text drawn; frame, a drawing asked for
// the next frame.
const turn = { reply: null, asked: null, text: "", drawn: "", tokens: [], frame: 0 };

// The reply the worker's conversation ends with (its last turn wrote it, or goes on writing it): the only
// one whose tokens it can look inside. Another chat's last reply, or one left last by a delete, is not it.
let written = null;

// A reply's token records (pyengine Generation.token_probs), by its <li>; shown: whether replies that
// have them are drawn as their tokens (token_view.js) rather than as Markdown.
const records = new WeakMap();
const probs = { shown: false };
export const showTokens = (on) => { probs.shown = on; };

// Why a reply ended, in words: stop reason -> words (pyengine.browser.page.STOP_WORDS, sent with booted).
let stopWords = {};
/** @param {Record<string, string>} words */
export const useStopWords = (words) => { stopWords = words; };

// The list follows a reply only while it is scrolled to its end: a reader who scrolled up stays put.
const atEnd = () => el.messages.scrollHeight - el.messages.scrollTop - el.messages.clientHeight < 48;
export const scrollToEnd = () => { el.messages.scrollTop = el.messages.scrollHeight; };

// The buttons of a message: [action, label, accessible name]. Each name begins with its label (WCAG
// 2.5.3: a voice-control user says what is written, "click Regenerate").
const ACTIONS = {
  user: [["copy", "Copy", "Copy this message"], ["edit", "Edit", "Edit this message and send it again"],
    ["delete", "Delete", "Delete this message and its reply"]],
  assistant: [["copy", "Copy", "Copy this reply"], ["regenerate", "Regenerate", "Regenerate: write this reply again"],
    ["continue", "Continue", "Continue this reply"]],
  tool: [["copy", "Copy", "Copy this result"]],
};
const WHO = { user: "You", assistant: "Model", tool: "Tool result" };

function actionBar(role) {
  const bar = make("div", "actions");
  for (const [action, label, name] of ACTIONS[role]) {
    const b = make("button", "action", label);
    b.type = "button";
    b.dataset.action = action;
    b.setAttribute("aria-label", name);
    bar.append(b);
  }
  return bar;
}

// A message's <li>: index, its place in the conversation (undefined: not part of it yet); tokens: a
// reply's token records, if it has them; how: {plain, shown} as drawMessages budgets them (plain: a reply
// drawn as plain text whatever its length; shown: the chars it may show).
function messageItem(role, text, index, tokens, how = {}) {
  const li = make("li", `message ${role}`);
  li.dataset.testid = "message";
  li.dataset.role = role;
  if (index !== undefined) li.dataset.index = index;
  li.append(make("div", "who", WHO[role] ?? role), make("div", "body"), actionBar(role));
  if (tokens?.length) records.set(li, tokens);
  setText(li, text, how);
  return li;
}

function setText(li, text, { plain = false, shown = SHOWN_CHARS } = {}) {
  li.dataset.text = text;
  const body = li.querySelector(".body");
  const tokens = records.get(li);
  const reply = li.dataset.role === "assistant";
  if (text.length > SHOWN_CHARS || (reply && text.length > MARKDOWN_CHARS)) {
    return drawPlain(body, text, `This message is ${withCommas(text.length)} chars long`, shown);
  }
  if (text.length > shown) {
    return drawPlain(body, text, `The messages after this one hold more than ${withCommas(CHAT_SHOWN_CHARS)} chars`,
      shown);
  }
  if (plain && reply) {
    return drawPlain(body, text, `The replies after this one hold more than ${withCommas(CHAT_MARKDOWN_CHARS)} chars`,
      shown);
  }
  if (body.classList.contains("plain")) body.replaceChildren();
  body.classList.remove("plain");
  if (!reply) body.textContent = text;
  else if (probs.shown && tokens?.length) drawTokens(body, text, tokens);
  else {
    if (body.classList.contains("tokens")) body.replaceChildren();
    body.classList.remove("tokens");
    drawReply(body, text);
  }
}

// A message as plain text (its first ``shown`` chars, at most SHOWN_CHARS), under a line that says why
// (``why``: its start).
function drawPlain(body, text, why, shown = SHOWN_CHARS) {
  const n = Math.min(shown, SHOWN_CHARS);
  const cut = text.length > n ? `; its first ${withCommas(n)} are shown (Copy and export keep them all)` : "";
  body.classList.remove("tokens");
  body.classList.add("plain");
  body.replaceChildren(
    make("p", "long-note", `${why}: it is shown as plain text${cut}.`),
    make("div", "plain-text", text.slice(0, n)));
}

function addMessage(role, text, index, tokens, how = {}) {
  el.messages.querySelector(".empty")?.remove();
  const li = messageItem(role, text, index, tokens, how);
  el.messages.append(li);
  scrollToEnd();
  return li;
}

// A note under a message: data-note "stopped" or "failed", and the text in words.
function addNote(li, note, text) {
  li.dataset.note = note;
  li.insertBefore(make("span", "note", text), li.querySelector(".actions"));
}

// How each of ``messages`` is drawn, the newest first: {plain: the replies after it hold CHAT_MARKDOWN_CHARS
// of Markdown, shown: the chars it may show once the messages after it show CHAT_SHOWN_CHARS}.
function budgets(messages) {
  let markdown = 0;
  let shown = 0;
  return [...messages].reverse().map((m) => {
    const n = m.content.length;
    const plain = m.role === "assistant" && n <= MARKDOWN_CHARS && (markdown += n) > CHAT_MARKDOWN_CHARS;
    const room = Math.max(PREVIEW_CHARS, CHAT_SHOWN_CHARS - shown);
    shown += Math.min(n, room, SHOWN_CHARS);
    return { plain, shown: room };
  }).reverse();
}

// The whole conversation drawn again: messages [{role, content, note}], in order.
export function drawMessages(messages, hasModel) {
  clearMessages(hasModel);
  if (messages.length) el.messages.replaceChildren();
  const how = budgets(messages);
  messages.forEach((m, i) => {
    const li = addMessage(m.role, m.content, i, m.tokens, how[i]);
    if (m.note === "stopped") addNote(li, "stopped", "stopped");
    showContext(li, m);
    if (m.tool_calls?.length) showCalls(li, m, waitingCalls(messages, i));
  });
}

// The ids of the calls of message ``i`` still waiting for a result: none unless it is the last reply.
export function waitingCalls(messages, i) {
  const after = messages.slice(i + 1);
  if (after.some((m) => m.role !== "tool")) return new Set();
  const answered = new Set(after.map((m) => m.tool_call_id));
  return new Set((messages[i].tool_calls ?? []).map((c) => c.id).filter((id) => !answered.has(id)));
}

// A reply's calls as cards (m: its message, {content, tool_calls}): the tool's name and arguments, and for
// each call in ``waiting`` a box for its result, with Send result and Decline (turns.js acts on them).
export function showCalls(li, m, waiting) {
  li.querySelectorAll(".tool-call").forEach((c) => c.remove());
  setText(li, m.content);
  for (const call of m.tool_calls) {
    const card = make("div", "tool-call");
    card.dataset.testid = "tool-call";
    card.dataset.id = call.id;
    const name = call.function.name;
    card.append(make("p", "tool-name", `Call: ${name}`),
      make("pre", "tool-args", JSON.stringify(call.function.arguments, null, 1)));
    if (waiting.has(call.id)) {
      const box = make("textarea", "tool-result");
      box.dataset.testid = "tool-result";
      box.rows = 2;
      box.setAttribute("aria-label", `The result of ${name}`);
      const result = make("label", "field", "Result ");
      result.append(box);
      card.append(result);
      for (const [action, label, aria] of [["tool-result", "Send result", `Send result: the result of ${name}`],
        ["tool-decline", "Decline", `Decline: do not run ${name}`]]) {
        const b = make("button", "action", label);
        b.type = "button";
        b.dataset.action = action;
        b.dataset.call = call.id;
        b.setAttribute("aria-label", aria);
        card.append(b);
      }
    }
    li.insertBefore(card, li.querySelector(".actions"));
  }
}

// What the context did to a reply (m: its message): data-stop (why it ended, when Continue can go on with
// it: m.stop, one of pyengine.browser.page.CONTINUED) and a line saying so when the context was full.
export function showContext(li, m) {
  li.querySelector(".context-note")?.remove();
  if (m.stop) li.dataset.stop = m.stop;
  else delete li.dataset.stop;
  const lines = [];
  if (m.dropped) {
    lines.push(`The conversation no longer fit the model's context: the ${m.dropped} oldest messages were left out `
      + "of this reply's prompt (the system prompt and the newest turns were kept).");
  }
  if (m.stop === "context") lines.push("The context is full: the reply stopped here. Continue goes on with it.");
  if (lines.length) li.insertBefore(make("p", "context-note", lines.join(" ")), li.querySelector(".actions"));
}

// The user's message (index: its place), and an empty reply under it that the pieces fill.
export function startTurn(text, index) {
  turn.asked = addMessage("user", text, index);
  startReply();
}

// An empty reply at the end of the list (a regenerated one: the user's message is already shown).
export function startReply() {
  turn.reply = written = addMessage("assistant", "");
  turn.reply.classList.add("streaming");
  turn.text = turn.drawn = "";
  turn.tokens = [];
  records.set(turn.reply, turn.tokens);
}

// The last reply drawn again as it streams on (Continue): the pieces are added to its text.
export function resumeReply() {
  const li = /** @type {HTMLLIElement[]} */ ([...el.messages.querySelectorAll("[data-role=assistant]")]).pop();
  if (!li) return;
  turn.reply = written = li;
  turn.text = turn.drawn = li.dataset.text;
  turn.tokens = [...(records.get(li) ?? [])];
  records.set(li, turn.tokens);
  showContext(li, {});
  delete li.dataset.note;
  li.querySelector(".note")?.remove();
  li.classList.add("streaming");
}

// text: the piece; tokens: the records of the tokens it holds (none unless probabilities were asked for).
/** @param {string} text @param {TokenRecord[]} [tokens] */
export function addPiece(text, tokens = []) {
  turn.tokens.push(...tokens);
  turn.text += text;
  turn.reply.dataset.text = turn.text;
  if (!turn.frame) turn.frame = requestAnimationFrame(drawStreaming);
}

function drawStreaming() {
  turn.frame = 0;
  if (!turn.reply) return;
  const follow = atEnd();
  drawTurn();
  if (follow) scrollToEnd();
}

function drawTurn() {
  if (turn.drawn !== turn.text || !turn.text) setText(turn.reply, turn.text);
  turn.drawn = turn.text;
}

// note: null for a reply that ended by itself, "stopped" or "failed".
function finishReply(note) {
  const li = turn.reply;
  if (!li) return;
  cancelAnimationFrame(turn.frame);
  turn.frame = 0;
  const follow = atEnd();
  drawTurn();
  li.classList.remove("streaming");
  if (note) addNote(li, note, note === "stopped" ? "stopped" : "failed, not part of the conversation");
  if (follow) scrollToEnd();
  // read out once, whole (the list itself is not live: a streaming reply would be read a piece at a time)
  el.announce.textContent = note === "failed" ? "The reply failed."
    : `The model replied${note === "stopped" ? " (stopped)" : ""}: ${turn.text}`;
  turn.reply = null;
}

// The reply ended (stopped: by the Stop button); index: its place in the conversation. Returns its text
// and its token records.
export function endTurn(stopped, index) {
  const { text, tokens } = turn;
  if (turn.reply && index !== undefined) turn.reply.dataset.index = index;
  finishReply(stopped ? "stopped" : null);
  turn.asked = null;
  return { text, tokens };
}

// A reply that failed: the worker dropped the message and the reply from the conversation, so both are
// marked failed (an empty reply goes), and no statistics of an earlier reply stay. Returns the text of
// the message, to offer again (null when no message was waiting).
export function failTurn(message) {
  const asked = turn.asked;
  written = null;
  if (turn.reply && !turn.text) turn.reply.remove();
  else finishReply("failed");
  turn.reply = null;
  turn.asked = null;
  setStatsLine("");
  if (!asked) return null;
  delete asked.dataset.index;
  addNote(asked, "failed", `failed, not part of the conversation: ${message}`);
  scrollToEnd();
  return asked.dataset.text;
}

export function clearMessages(hasModel) {
  const hint = hasModel ? "Ask the model something." : "Load a model, then ask it something.";
  el.messages.replaceChildren(make("li", "empty", hint));
  turn.reply = null;
  turn.asked = null;
}

// Hover and focus on a token show its alternatives.
// look(span, back, record, which): a token was clicked or Space pressed on it; back: the tokens after it in
// its reply; which: "writing" (the reply is still being written: back moves on), "last" (the reply the
// worker's conversation ends with) or "other".
export const wireChatView = (look) => wireTokens(el.messages, (li) => records.get(li),
  (span, li, index, record) => look(span, records.get(li).length - 1 - index, record,
    li === turn.reply ? "writing" : li === written ? "last" : "other"));

// A user message's text in a box, to change and send again: onSend(text) or onCancel().
export function editMessage(li, onSend, onCancel) {
  const box = make("textarea", "edit-box");
  box.value = li.dataset.text;
  box.setAttribute("aria-label", "The message, edited");
  const send = make("button", "primary", "Send");
  const cancel = make("button", "", "Cancel");
  send.type = cancel.type = "button";
  const form = make("div", "edit");
  form.append(box, send, cancel);
  li.querySelector(".body").replaceWith(form);
  send.addEventListener("click", () => onSend(box.value));
  cancel.addEventListener("click", onCancel);
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      onSend(box.value);
    } else if (e.key === "Escape") onCancel();
  });
  box.focus();
}

// s: the reply's statistics (pyengine TurnStats.as_dict()).
/** @param {TurnStats | null} s */
export function showStats(s) {
  if (!s) return;
  const parts = [
    `${s.prompt_tokens} prompt tokens${s.cached_tokens ? ` (${s.cached_tokens} cached)` : ""}`,
    `prefill ${s.prefill_tok_s.toFixed(1)} tok/s`,
    `${s.generated_tokens} generated`,
    s.decode_tokens ? `decode ${s.decode_tok_s.toFixed(1)} tok/s` : null,
    `first token ${s.ttft_seconds.toFixed(2)} s`,
    stopWords[s.stop_reason] || s.stop_reason,
  ];
  el.stats.textContent = parts.filter(Boolean).join(" · ");
  el.stats.dataset.stats = JSON.stringify(s); // the numbers as measured, for scripts (bench/bench_workers.py)
}

// A line of text in place of the statistics ("" clears it, and the numbers with it).
export function setStatsLine(text) {
  el.stats.textContent = text;
  delete el.stats.dataset.stats;
}
