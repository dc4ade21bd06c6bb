// @ts-check
// The message box and its buttons: Send, Stop, New chat; and the gate every reply passes. A reply is
// asked in one step: "chat" goes with the settings as typed, and the worker reads and checks them. When
// it names no bad field it answers "started" and the action's turn is drawn (a message sent, a reply
// regenerated, an edit sent) while the reply runs; otherwise it answers "refused": the message stays in
// the box, the bad fields are marked, and the line under the chat says why; it goes once the fields are
// right.
import { el } from "./dom.js";
import { tooLong } from "./chat_file.js";
import { scrollToEnd } from "./chat_view.js";
import { readFields, showCheck } from "./settings_form.js";
import { clearError, replying, setPhase, status } from "./status.js";
import { stopLoad } from "./loading.js";
import { replyRefused, replyStarted, sendText } from "./turns.js";
import { worker } from "./worker_client.js";
/** @typedef {import("./messages.js").CheckedMessage} CheckedMessage */

// waiting: a "chat" sent whose settings the worker has not answered yet; started: what runs when it takes
// them; newChat: New chat pressed meanwhile (it runs once the worker has answered, the reply stopped);
// checks: "check"s sent (as a bad field is edited) and not answered yet.
const sending = { waiting: false, started: null, newChat: null, checks: 0 };

// The worker has answered the "chat" (started: its reply runs): New chat, if pressed meanwhile, goes on.
function answered(started) {
  const newChat = sending.newChat;
  Object.assign(sending, { waiting: false, started: null, newChat: null });
  if (!newChat) return;
  if (started) stopReply();
  newChat();
}

// Ask for a reply: ask(fields) sends "chat" with the fields as typed (settings_form.js readFields), or
// returns false when there is nothing to ask; started() runs once the worker has taken them (nothing
// happens if a reply cannot start now).
export function request(ask, started = () => {}) {
  if (status.phase !== "ready" || !status.hasModel || sending.waiting) return;
  sending.waiting = true;
  sending.started = started;
  if (ask(readFields()) === false) {
    sending.waiting = false;
    sending.started = null;
  }
}

// Whether ``text`` may be sent; the line under the chat says why not.
export function sendable(text) {
  const why = tooLong(text);
  if (why) {
    el.sendError.textContent = `Not sent: the message ${why}.`;
    el.sendError.hidden = false;
  }
  return !why;
}

function send() {
  const text = el.prompt.value;
  if (text.trim() && replying()) return void notSentYet();
  if (!text.trim() || el.send.disabled || !sendable(text)) return;
  request((fields) => sendText(text, fields), () => { el.prompt.value = ""; });
}

const NOT_SENT_YET = "Not sent yet: a reply is running. Send it when the reply ends (Stop ends it now).";

// Enter while a reply runs: the message stays in the box, and the line under the chat says why ...
function notSentYet() {
  el.sendError.textContent = NOT_SENT_YET;
  el.sendError.hidden = false;
}

// ... until the reply ends, however it ends.
export function replyOver() {
  if (el.sendError.textContent === NOT_SENT_YET) el.sendError.hidden = true;
}

function checkSettings() {
  const { settings, badInput } = readFields();
  sending.checks += 1;
  worker.check(settings, badInput);
}

// The worker's "checked" (a "check" sent as a bad field was edited): {settings, errors: [{name, message}]}.
/** @param {CheckedMessage} msg */
export function checked(msg) {
  sending.checks -= 1;
  if (sending.checks > 0) return; // the fields changed since: the answer to the newest check counts
  showCheck(msg.errors);
  scrollToEnd(); // the error line takes room from the messages
}

// The worker's "started": the settings were right, the reply runs (its turn drawn: turns.js).
export function started() {
  const then = sending.started;
  showCheck([]);
  clearError();
  then?.();
  replyStarted();
  scrollToEnd();
  answered(true);
}

// The worker's "refused" {errors: [{name, message}]}: the message stays in the box, the bad fields marked.
/** @param {import("./messages.js").RefusedMessage} msg */
export function refused(msg) {
  showCheck(msg.errors);
  scrollToEnd(); // the error line takes room from the messages
  replyRefused();
  answered(false);
}

// A "chat" that failed in the worker: true when it failed before its reply started (nothing was drawn;
// the message stays in the box).
export function chatFailed() {
  const before = sending.waiting;
  if (before) replyRefused();
  answered(false);
  return before;
}

// A check that failed in the worker (an "error" during "check").
export function checkFailed() {
  sending.checks = Math.max(0, sending.checks - 1);
}

// The text of a message whose reply failed, offered again in the box (unless the box holds another).
export function offerAgain(text) {
  if (text !== null && !el.prompt.value) el.prompt.value = text;
}

export function stopReply() {
  if (status.phase !== "generating") return;
  worker.stop();
  setPhase("stopping");
}

// Stop: the reply running, or the model loading.
function stop() {
  if (status.phase === "loading") stopLoad();
  else stopReply();
}

// onNewChat(): New chat pressed (the reply running stopped first).
export function wireComposer(onNewChat) {
  el.prompt.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  el.composer.addEventListener("submit", (e) => {
    e.preventDefault();
    send();
  });
  el.stop.addEventListener("click", stop);
  el.newChat.addEventListener("click", () => {
    clearError();
    if (sending.waiting) return void (sending.newChat = onNewChat); // once the worker has answered the chat
    stopReply();
    onNewChat();
  });
}

// A sampling field changed: while the line under the chat names a bad field, check again.
export function settingEdited() {
  if (!el.sendError.hidden) checkSettings();
}
