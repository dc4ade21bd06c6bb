// The conversation as the page shows it: the messages, the reply streaming into the last one, the
// notes under a stopped or failed message, and the statistics line under the list.
import { el, make } from "./dom.js";

// The turn under way: reply, the assistant <li> growing; asked, the user <li> it answers (marked
// failed if the reply fails); text, the reply so far.
const turn = { reply: null, asked: null, text: "" };

// Why a reply ended, in words: stop reason -> words (pyengine.browser.page.STOP_WORDS, sent with booted).
let stopWords = {};
export const useStopWords = (words) => { stopWords = words; };

export const scrollToEnd = () => { el.messages.scrollTop = el.messages.scrollHeight; };

function addMessage(role, text) {
  el.messages.querySelector(".empty")?.remove();
  const li = make("li", `message ${role}`);
  li.dataset.testid = "message";
  li.dataset.role = role;
  li.append(make("div", "who", role === "user" ? "You" : "Model"), make("div", "body", text));
  el.messages.append(li);
  scrollToEnd();
  return li;
}

// A note under a message: data-note "stopped" or "failed", and the text in words.
function addNote(li, note, text) {
  li.dataset.note = note;
  li.append(make("span", "note", text));
}

// The user's message, and an empty reply under it that the pieces fill.
export function startTurn(text) {
  turn.asked = addMessage("user", text);
  turn.reply = addMessage("assistant", "");
  turn.reply.classList.add("streaming");
  turn.text = "";
}

export function addPiece(text) {
  turn.text += text;
  turn.reply.querySelector(".body").textContent = turn.text;
  scrollToEnd();
}

// note: null for a reply that ended by itself, "stopped" or "failed".
function finishReply(note) {
  const li = turn.reply;
  if (!li) return;
  li.classList.remove("streaming");
  if (note) addNote(li, note, note === "stopped" ? "stopped" : "failed, not part of the conversation");
  turn.reply = null;
}

export function endTurn(stopped) {
  finishReply(stopped ? "stopped" : null);
  turn.asked = null;
}

// A reply that failed: the worker dropped the message and the reply from the conversation, so both are
// marked failed (an empty reply goes), and no statistics of an earlier reply stay. Returns the text of
// the message, to offer again (null when no message was waiting).
export function failTurn(message) {
  const asked = turn.asked;
  if (turn.reply && !turn.text) turn.reply.remove();
  else finishReply("failed");
  turn.reply = null;
  turn.asked = null;
  setStatsLine("");
  if (!asked) return null;
  addNote(asked, "failed", `failed, not part of the conversation: ${message}`);
  scrollToEnd();
  return asked.querySelector(".body").textContent;
}

export function clearMessages(hasModel) {
  const hint = hasModel ? "Ask the model something." : "Load a model, then ask it something.";
  el.messages.replaceChildren(make("li", "empty", hint));
  turn.reply = null;
  turn.asked = null;
}

// s: the reply's statistics (pyengine TurnStats.as_dict()).
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
