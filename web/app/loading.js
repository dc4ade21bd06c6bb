// @ts-check
// A model for the worker: the file picker, the drop zone, and the demo model, a file beside the page
// (static/models/, described by models/demo.json) that the page downloads first.
import { el, make } from "./dom.js";
import { formatBytes } from "./format.js";
import { canLoad, clearError, hideProgress, setPhase, settle, showError, showProgress } from "./status.js";
import { memoryChoice } from "./settings_form.js";
import { isolated, worker } from "./worker_client.js";
/** @typedef {import("./messages.js").ProgressMessage} ProgressMessage */

let demo = null; // models/demo.json: {display_name, file, url, size}
let last = { files: [], saved: false }; // the files of the load asked last; saved: they came from OPFS
let loaded = null; // the model loaded now: {files, saved, name}
let letGo = null; // the model the load under way let go ("unloaded"), offered again if the load fails

// The files of the load asked last, and whether they are a saved model's (saved_models.js).
export const lastLoad = () => last;

// Load ``files`` (one model, every part); saved: they are a saved model's.
export function loadFiles(files, saved = false) {
  files = Array.from(files);
  if (files.length === 0) return;
  last = { files, saved };
  letGo = null;
  clearError();
  showProgress(`reading ${files.length > 1 ? `${files.length} files` : files[0].name}`, 0);
  el.progressText.title = files.map((f) => f.name).join("\n");
  setPhase("loading");
  el.weightsNote.textContent = "";
  worker.load(files, memoryChoice());
}

// The worker's "model": the load asked last is the model loaded now (named as its card).
export function loadSucceeded(name) {
  loaded = { ...last, name };
  letGo = null;
}

// The worker's "unloaded": the model loaded before is gone.
export function modelLetGo() {
  letGo = loaded;
  loaded = null;
}

// A load failed: the error, with a button to load again the model it let go, if it got that far (the
// weights failed to read: the conversation is kept, and goes on with that model once it is back).
export function loadFailed(message) {
  const before = letGo;
  letGo = null;
  const again = before && { label: `Load ${before.name} again`, run: () => loadFiles(before.files, before.saved) };
  showError(message, again);
}

// The worker's "progress" message while it reads the tensors.
/** @param {ProgressMessage} msg */
export function showReading(msg) {
  const frac = msg.total_bytes ? msg.bytes / msg.total_bytes : null;
  const tensors = msg.n_tensors ? ` · ${msg.tensors} / ${msg.n_tensors} tensors` : "";
  showProgress(`${msg.stage}: ${formatBytes(msg.bytes)} of ${formatBytes(msg.total_bytes)}${tensors}`, frac);
}

// The demo button shows only when the build put a demo model beside the page (and the page is online).
export async function findDemo() {
  try {
    const r = await fetch("models/demo.json", { cache: "no-store" });
    if (!r.ok) return;
    demo = await r.json();
    const detail = make("small", "", `${demo.display_name || demo.file} · ${formatBytes(demo.size)}`);
    el.loadDemo.replaceChildren("Load demo model", detail);
    el.loadDemo.hidden = false;
  } catch { /* no demo model (or offline): the button stays hidden */ }
}

let download = null; // the AbortController of the demo model's download under way

async function fetchDemo() {
  if (!canLoad()) return;
  clearError();
  setPhase("loading");
  download = new AbortController();
  try {
    const url = new URL(demo.url || `models/${demo.file}`, location.href);
    const r = await fetch(url, { signal: download.signal });
    if (!r.ok) throw new Error(`HTTP ${r.status} for ${url.pathname}`);
    const total = Number(r.headers.get("content-length")) || demo.size || 0;
    const chunks = [];
    let got = 0;
    for (const reader = r.body.getReader(); ;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      got += value.length;
      const text = `downloading ${demo.file}: ${formatBytes(got)} of ${formatBytes(total)}`;
      showProgress(text, total ? got / total : null);
    }
    download = null;
    loadFiles([new File(chunks, demo.file, { type: "application/octet-stream" })]);
  } catch (err) {
    hideProgress();
    if (err.name !== "AbortError") showError(`could not fetch the demo model: ${err.message}`);
    download = null;
    settle();
  }
}

// Stop pressed while a model loads: the demo's download is aborted; a load in the worker is interrupted
// (cross-origin isolated: SIGINT, and the worker answers "load-stopped"), or else the worker is started
// again, since Python reading the file sees no message until it is done.
export function stopLoad() {
  if (download) return void download.abort();
  if (isolated) worker.stop();
  else worker.restart();
}

export function wireLoading() {
  el.fileInput.addEventListener("change", () => {
    if (canLoad()) loadFiles(el.fileInput.files);
    el.fileInput.value = "";
  });
  el.dropzone.addEventListener("dragover", (e) => {
    e.preventDefault();
    el.dropzone.classList.add("over");
  });
  el.dropzone.addEventListener("dragleave", () => el.dropzone.classList.remove("over"));
  el.dropzone.addEventListener("drop", (e) => {
    e.preventDefault();
    el.dropzone.classList.remove("over");
    if (canLoad()) loadFiles(e.dataTransfer.files);
  });
  el.dropzone.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") { e.preventDefault(); el.fileInput.click(); }
  });
  // A file dropped anywhere else must not make the browser navigate away from the chat.
  window.addEventListener("dragover", (e) => e.preventDefault());
  window.addEventListener("drop", (e) => e.preventDefault());
  el.loadDemo.addEventListener("click", fetchDemo);
}
