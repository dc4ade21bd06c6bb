// @ts-check
// The page's elements, looked up once, and a helper that makes new ones. The elements the tests
// use are found by their data-testid, the others by their class.

/** @type {(id: string) => any} */
export const byId = (id) => document.querySelector(`[data-testid="${id}"]`);
/** @type {(name: string) => any} */
const byClass = (name) => document.querySelector(`.${name}`);

// Each element as index.html has it (its tag's type: the checker's, nothing is checked when the page runs).
/** @type {{
 *   status: HTMLSpanElement, error: HTMLDivElement, tabNote: HTMLParagraphElement, errorText: HTMLSpanElement,
 *   errorClose: HTMLButtonElement, errorAction: HTMLButtonElement, dropzone: HTMLLabelElement, dropzoneHint: HTMLSpanElement,
 *   fileInput: HTMLInputElement, loadDemo: HTMLButtonElement, savedModels: HTMLDivElement,
 *   savedModelList: HTMLUListElement, storageNote: HTMLParagraphElement, progress: HTMLDivElement,
 *   progressFill: HTMLDivElement, progressText: HTMLDivElement, modelInfo: HTMLElement,
 *   systemPrompt: HTMLTextAreaElement, chatList: HTMLUListElement, chatsNote: HTMLParagraphElement,
 *   exportJson: HTMLButtonElement, exportMarkdown: HTMLButtonElement, importChat: HTMLButtonElement,
 *   importFile: HTMLInputElement, settings: HTMLDivElement, settingsFold: HTMLDetailsElement,
 *   announce: HTMLParagraphElement, settingsHint: HTMLParagraphElement, structure: HTMLSelectElement,
 *   structureText: HTMLTextAreaElement, structureCheck: HTMLParagraphElement, tools: HTMLTextAreaElement,
 *   toolRequired: HTMLInputElement, toolsCheck: HTMLParagraphElement, workers: HTMLSelectElement,
 *   workersNote: HTMLParagraphElement, weights: HTMLSelectElement, weightsNote: HTMLParagraphElement,
 *   theme: HTMLSelectElement, messages: HTMLOListElement, showProbs: HTMLInputElement, probsNote: HTMLSpanElement,
 *   thinking: HTMLInputElement, stats: HTMLDivElement, sendError: HTMLParagraphElement, composer: HTMLFormElement,
 *   prompt: HTMLTextAreaElement, send: HTMLButtonElement, stop: HTMLButtonElement, newChat: HTMLButtonElement,
 *   inspector: HTMLDivElement, tensorSearch: HTMLInputElement
 * }} */
export const el = {
  status: byId("status"),
  error: byId("error"),
  tabNote: byId("tab-note"),
  errorText: byClass("error-text"),
  errorClose: byClass("error-close"),
  errorAction: byId("error-action"),
  dropzone: byId("dropzone"),
  dropzoneHint: byId("dropzone-hint"),
  fileInput: byId("file-input"),
  loadDemo: byId("load-demo"),
  savedModels: byId("saved-models"),
  savedModelList: byId("saved-model-list"),
  storageNote: byId("storage-note"),
  progress: byId("progress"),
  progressFill: byClass("progress-fill"),
  progressText: byClass("progress-text"),
  modelInfo: byId("model-info"),
  systemPrompt: byId("system-prompt"),
  chatList: byId("chat-list"),
  chatsNote: byId("chats-note"),
  exportJson: byId("export-json"),
  exportMarkdown: byId("export-markdown"),
  importChat: byId("import-chat"),
  importFile: byId("import-file"),
  settings: byClass("settings"),
  settingsFold: byId("settings-fold"),
  announce: byId("announce"),
  settingsHint: byId("settings-hint"),
  structure: byId("structure"),
  structureText: byId("structure-text"),
  structureCheck: byId("structure-check"),
  tools: byId("tools"),
  toolRequired: byId("tool-required"),
  toolsCheck: byId("tools-check"),
  workers: byId("workers"),
  workersNote: byId("workers-note"),
  weights: byId("weights"),
  weightsNote: byId("weights-note"),
  theme: byId("theme"),
  messages: byClass("messages"),
  showProbs: byId("show-probs"),
  probsNote: byId("probs-note"),
  thinking: byId("thinking"),
  stats: byId("stats"),
  sendError: byId("send-error"),
  composer: byClass("composer"),
  prompt: byId("prompt"),
  send: byId("send"),
  stop: byId("stop"),
  newChat: byId("new-chat"),
  inspector: byId("inspector"),
  tensorSearch: byClass("tensor-search"),
};

// A new element with a class and a text. Text from the model or the file is always set as
// textContent, never parsed as HTML.
/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string} [className]
 * @param {string} [text]
 * @returns {HTMLElementTagNameMap[K]}
 */
export function make(tag, className = "", text = undefined) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}
