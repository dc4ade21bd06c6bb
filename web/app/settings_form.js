// @ts-check
// The settings beside the chat: the sampling fields, the Memory select and the Workers select.
// The sampling fields are drawn from Python's rules (pyengine.browser.settings.SETTINGS: label, range,
// default), and only Python checks them: the page sends the fields as typed and marks the ones the
// answer names. The Memory options are the weight forms of pyengine.weights.budget.WEIGHT_FORMS.
import { el, make } from "./dom.js";
import { formatBytes } from "./format.js";
import { status } from "./status.js";
import { isolated, worker } from "./worker_client.js";
/** @typedef {import("./messages.js").PageData} PageData */
/** @typedef {import("./messages.js").SettingRule} SettingRule */
/** @typedef {import("./messages.js").WorkersInfo} WorkersInfo */

const fields = new Map(); // setting name -> its <input>
let waiting = null;       // the values setFields was given before the fields were drawn

// page: what Python sends once it is up (pyengine.browser.worker.page_data): the sampling rules with
// no model limits, the line under them and the Memory options.
/** @param {PageData} page */
export function drawSettings(page) {
  if (fields.size) return void useRules(page.settings); // a worker started again: the fields stay as typed
  el.settings.replaceChildren(...page.settings.map(drawField));
  el.settingsHint.textContent = page.hint;
  if (waiting) setFields(waiting);
  useRules(page.settings);
  // The first option ("auto") is the one selected.
  el.weights.replaceChildren(...page.memory.map((o) => new Option(o.label, o.value)));
  el.weights.disabled = false;
}

function drawField(rule) {
  const input = make("input");
  input.type = "number";
  input.dataset.testid = rule.name.replace(/_/g, "-");
  input.defaultValue = rule.default; // the value attribute: what the field starts with
  input.step = rule.step;
  input.placeholder = rule.placeholder;
  fields.set(rule.name, input);
  const label = make("label", "field", `${rule.label} `);
  label.append(input);
  return label;
}

// The rules of the model loaded (its vocabulary and context bound two fields): what the fields take.
/** @param {SettingRule[]} rules */
export function useRules(rules) {
  for (const rule of rules) {
    const input = fields.get(rule.name);
    input.min = rule.min;
    input.max = rule.max ?? "";
    input.title = `${rule.label}: ${rule.rule}`;
    input.removeAttribute("aria-invalid");
  }
  el.sendError.hidden = true;
}

// The fields as typed, for the worker's "check": {settings: name -> text, badInput: [names]}. A number
// input reports "" for text it cannot read ("1e", "-"), so the browser's own verdict goes along.
/** @returns {{settings: import("./messages.js").FieldTexts, badInput: string[]}} */
export function readFields() {
  /** @type {import("./messages.js").FieldTexts} */
  const settings = {};
  const badInput = [];
  for (const [name, input] of fields) {
    settings[name] = input.value;
    if (input.validity.badInput) badInput.push(name);
  }
  return { settings, badInput };
}

// Put values (name -> the text typed, as readFields gives them: a saved chat's) in the fields; a name
// missing from values takes the field's default. Before the fields are drawn, they are kept until then.
export function setFields(values) {
  waiting = fields.size ? null : values;
  for (const [name, input] of fields) input.value = values[name] ?? input.defaultValue;
}

// The answer to a check: every field it names marked, the first one's error under the chat.
export function showCheck(errors) {
  const bad = new Set(errors.map((e) => e.name));
  for (const [name, input] of fields) input.setAttribute("aria-invalid", String(bad.has(name)));
  el.sendError.textContent = errors.length ? `Not sent: ${errors[0].message}.` : "";
  el.sendError.hidden = !errors.length;
}

// The weight form asked for at the next load.
export const memoryChoice = () => el.weights.value;

/** @type {WorkersInfo | null} */
let workers = null;

// How many workers compute the model, their memory, or why it runs in one.
/** @param {WorkersInfo} w */
export function showWorkers(w) {
  if (!w) return;
  workers = w;
  el.workersNote.dataset.count = String(w.count);
  el.workersNote.dataset.syncUs = String(w.sync_us ?? ""); // one round trip through shared memory, microseconds
  showHeap(w.heap);
}

// Each worker's wasm memory (bytes), as the last load or reply left it (it only grows).
/** @param {number[]} [heap] */
export function showHeap(heap) {
  if (!workers || !heap?.length) return;
  el.workersNote.dataset.heap = JSON.stringify(heap); // bytes of wasm memory, per worker
  const held = heap.length ? ` (${heap.map(formatBytes).join(" + ")} of wasm memory)` : "";
  el.workersNote.textContent = workers.note || `computing in ${workers.count} worker${workers.count > 1 ? "s" : ""}${held}`;
}

// Workers: each holds a share of the model's heads, FFN units and vocabulary and they meet through
// shared memory, so only a cross-origin isolated page can have more than one; by default as many as
// the machine has cores (at most 8). Workers and Memory apply to the next model loaded.
// onEdit: a sampling field changed.
export function wireSettings(onEdit) {
  const cores = Math.max(1, Math.min(8, navigator.hardwareConcurrency || 1));
  el.workers.replaceChildren(...[1, 2, 3, 4, 5, 6, 7, 8].map((n) => new Option(String(n), String(n))));
  el.workers.value = isolated ? String(cores) : "1";
  el.workers.disabled = !isolated;
  el.workersNote.textContent = isolated ? "" : "1 worker: the page is not cross-origin isolated";
  el.workers.addEventListener("change", () => {
    worker.setWorkers(Number(el.workers.value));
    if (status.hasModel) el.workersNote.textContent = "from the next model loaded on";
  });
  el.weights.addEventListener("change", () => {
    if (status.hasModel) el.weightsNote.textContent = "from the next model loaded on";
  });
  el.settings.addEventListener("input", onEdit);
}

// How many workers the next model is computed in (1 to 8).
export const workersWanted = () => Number(el.workers.value);
