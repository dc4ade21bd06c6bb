// The message box and its buttons: Send, Stop, New chat. A message goes in two steps: the worker first
// checks the settings as typed ("check"), and only when it names no bad field does the message join the
// chat and the reply start ("chat", with the numbers the check read). Otherwise the message stays in the
// box, the bad fields are marked, and the line under the chat says why; it goes once the fields are right.
import { el } from "./dom.js";
import { scrollToEnd, startTurn } from "./chat_view.js";
import { readFields, showCheck } from "./settings_form.js";
import { clearError, setPhase, status } from "./status.js";
import { worker } from "./worker_client.js";

// text: the message waiting for its check (null: none); checks: checks sent and not answered yet.
const sending = { text: null, checks: 0 };

function send() {
  const text = el.prompt.value;
  if (!text.trim() || el.send.disabled || sending.text !== null) return;
  sending.text = text;
  checkSettings();
}

function checkSettings() {
  const { settings, badInput } = readFields();
  sending.checks += 1;
  worker.check(settings, badInput);
}

// The worker's "checked" message: {settings: name -> number, errors: [{name, message}]}.
export function checked(msg) {
  sending.checks -= 1;
  if (sending.checks > 0) return; // the fields changed since: the answer to the newest check counts
  showCheck(msg.errors);
  scrollToEnd(); // the error line takes room from the messages
  const text = sending.text;
  sending.text = null;
  if (text === null || msg.errors.length || status.phase !== "ready") return;
  clearError();
  el.prompt.value = "";
  startTurn(text);
  setPhase("generating");
  worker.chat(text, el.systemPrompt.value, msg.settings);
}

// A check that failed in the worker (an "error" during "check"): the message stays in the box.
export function checkFailed() {
  sending.checks = Math.max(0, sending.checks - 1);
  sending.text = null;
}

// The text of a message whose reply failed, offered again in the box (unless the box holds another).
export function offerAgain(text) {
  if (text !== null && !el.prompt.value) el.prompt.value = text;
}

function stopReply() {
  if (status.phase !== "generating") return;
  worker.stop();
  setPhase("stopping");
}

export function wireComposer() {
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
  el.stop.addEventListener("click", stopReply);
  el.newChat.addEventListener("click", () => {
    stopReply();
    clearError();
    sending.text = null;
    worker.newChat();
  });
}

// A sampling field changed: while the line under the chat names a bad field, check again.
export function settingEdited() {
  if (!el.sendError.hidden) checkSettings();
}
