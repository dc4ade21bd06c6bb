// @ts-check
// The Tools setting: tool definitions as JSON (OpenAI's form), which Python checks as you type
// ("check-tools" -> "tools-checked": the line and column, or the definition at fault), and whether a
// reply to a message must be a call. Saved with the chat (chats.js), sent with every reply (turns.js);
// the calls a reply makes are drawn as cards (chat_view.js) that the user answers or declines.
import { el } from "./dom.js";
import { worker } from "./worker_client.js";
/** @typedef {import("./messages.js").ToolsCheckedMessage} ToolsCheckedMessage */

const CHECK_MS = 250;
let timer = 0;

function checkSoon() {
  clearTimeout(timer);
  el.toolsCheck.textContent = "";
  el.tools.removeAttribute("aria-invalid");
  if (el.tools.value.trim()) timer = setTimeout(() => worker.checkTools(el.tools.value), CHECK_MS);
}

// The setting as it is: {text, required} (text "": no tools).
export const readTools = () => ({ text: el.tools.value, required: el.toolRequired.checked });

// A chat's setting shown (missing: no tools).
export function setTools(value) {
  el.tools.value = value?.text ?? "";
  el.toolRequired.checked = Boolean(value?.required);
  checkSoon();
}

// Python's answer to a check.
/** @param {ToolsCheckedMessage} msg */
export function toolsChecked(msg) {
  el.tools.setAttribute("aria-invalid", String(!msg.ok));
  el.toolsCheck.textContent = msg.ok ? "The tool definitions are right." : msg.message;
}

// onEdit: the setting changed (the chat is saved).
export function wireTools(onEdit) {
  el.tools.addEventListener("input", () => { checkSoon(); onEdit(); });
  el.toolRequired.addEventListener("change", onEdit);
}
