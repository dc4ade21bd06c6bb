// @ts-check
// The Structured output setting: none, a JSON object, a JSON schema or a GBNF grammar (the options are
// Python's: pyengine.browser.settings.STRUCTURES), and its editor, which Python checks as you type
// ("check-structure" -> "structure-checked": the line and column of what is wrong). Saved with the chat
// (chats.js), sent with every reply (turns.js).
import { el } from "./dom.js";
import { worker } from "./worker_client.js";
/** @typedef {import("./messages.js").PageData} PageData */
/** @typedef {import("./messages.js").StructureCheckedMessage} StructureCheckedMessage */

const CHECK_MS = 250;     // a check this long after the last key
let editors = {};         // option -> what its editor holds ("": no editor)
let timer = 0;
let waiting = null;       // a chat's setting given before the options were drawn

// page: what Python sends once it is up (pyengine.browser.worker.page_data).
/** @param {PageData} page */
export function drawStructure(page) {
  if (Object.keys(editors).length) return;
  editors = Object.fromEntries(page.structures.map((o) => [o.value, o.editor]));
  el.structure.replaceChildren(...page.structures.map((o) => new Option(o.label, o.value)));
  el.structure.disabled = false;
  if (waiting) setStructure(waiting);
  showEditor();
}

function showEditor() {
  const editor = editors[el.structure.value] || "";
  el.structureText.closest("label").hidden = !editor;
  el.structureText.placeholder = editor ? `${editor}` : "";
  el.structureCheck.textContent = "";
  el.structureText.removeAttribute("aria-invalid");
  if (editor) checkSoon();
}

function checkSoon() {
  clearTimeout(timer);
  timer = setTimeout(() => worker.checkStructure(el.structure.value, el.structureText.value), CHECK_MS);
}

// The setting as it is: {kind, text} (text: the editor's, kept whatever the kind).
export const readStructure = () => ({ kind: el.structure.value || "none", text: el.structureText.value });

// A chat's setting shown ({kind, text}; missing: none).
export function setStructure(value) {
  const { kind = "none", text = "" } = value || {};
  el.structureText.value = text;
  if (!Object.keys(editors).length) return void (waiting = { kind, text });
  waiting = null;
  el.structure.value = kind in editors ? kind : "none";
  showEditor();
}

// Python's answer to a check: the editor marked, what is wrong said under it.
/** @param {StructureCheckedMessage} msg */
export function structureChecked(msg) {
  if (msg.kind !== el.structure.value) return;
  el.structureText.setAttribute("aria-invalid", String(!msg.ok));
  el.structureCheck.textContent = msg.ok ? `The ${el.structure.selectedOptions[0].text.toLowerCase()} is right.`
    : msg.message;
  el.structureCheck.dataset.ok = String(msg.ok);
}

// onEdit: the setting changed (the chat is saved).
export function wireStructure(onEdit) {
  el.structure.addEventListener("change", () => { showEditor(); onEdit(); });
  el.structureText.addEventListener("input", () => { checkSoon(); onEdit(); });
}
