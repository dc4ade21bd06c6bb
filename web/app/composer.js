// @ts-check
// The message box and its buttons: Send, Stop, New chat; and the gate every reply passes. A reply is
// asked in two steps: the worker first checks the settings as typed ("check"), and only when it names
// no bad field does the action run (a message sent, a reply regenerated, an edit sent) with the numbers
// the check read. Otherwise the message stays in the box, the bad fields are marked, and the line under
// the chat says why; it goes once the fields are right.
import { el } from "./dom.js";
import { tooLong } from "./chat_file.js";
import { scrollToEnd } from "./chat_view.js";
import { readFields, showCheck } from "./settings_form.js";
import { clearError, setPhase, status } from "./status.js";
import { stopLoad } from "./loading.js";
import { sendText } from "./turns.js";
import { worker } from "./worker_client.js";
/** @typedef {import("./messages.js").CheckedMessage} CheckedMessage */

// action: what runs once the settings are right (null: none waits); checks: checks sent and not answered yet.
const sending = { action: null, checks: 0 };

// Run action(settings) once the worker has checked the settings (nothing if a reply cannot start now).
export function request(action) {
  if (status.phase !== "ready" || !status.hasModel || sending.action !== null) return;
  sending.action = action;
  checkSettings();
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
  if (!text.trim() || el.send.disabled || !sendable(text)) return;
  request((settings) => {
    el.prompt.value = "";
    sendText(text, settings);
  });
}

function checkSettings() {
  const { settings, badInput } = readFields();
  sending.checks += 1;
  worker.check(settings, badInput);
}

// The worker's "checked" message: {settings: name -> number, errors: [{name, message}]}.
/** @param {CheckedMessage} msg */
export function checked(msg) {
  sending.checks -= 1;
  if (sending.checks > 0) return; // the fields changed since: the answer to the newest check counts
  showCheck(msg.errors);
  scrollToEnd(); // the error line takes room from the messages
  const action = sending.action;
  sending.action = null;
  if (action === null || msg.errors.length || status.phase !== "ready") return;
  clearError();
  action(msg.settings);
}

// A check that failed in the worker (an "error" during "check"): the message stays in the box.
export function checkFailed() {
  sending.checks = Math.max(0, sending.checks - 1);
  sending.action = null;
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
    stopReply();
    clearError();
    sending.action = null;
    onNewChat();
  });
}

// A sampling field changed: while the line under the chat names a bad field, check again.
export function settingEdited() {
  if (!el.sendError.hidden) checkSettings();
}
