// @ts-check
// What the page is doing, and the three places that say so: the status badge (and which controls
// each phase allows), the progress bar, the error banner.
import { el } from "./dom.js";

// phase: starting -> no model -> loading -> ready <-> generating (-> stopping); "failed" if Python cannot start.
// hasModel: a model is loaded (it stays through a reply, and through a load that fails before "unloaded").
/** @typedef {"starting" | "no model" | "loading" | "ready" | "generating" | "stopping" | "failed"} Phase */
/** @type {{phase: Phase, hasModel: boolean}} */
export const status = { phase: "starting", hasModel: false };

const DROP_HINT = el.dropzoneHint.textContent; // as index.html has it

/** @param {Phase} phase */
export function setPhase(phase) {
  status.phase = phase;
  el.status.textContent = phase;
  el.status.dataset.state = phase.replace(" ", "-");
  const busy = phase === "loading" || phase === "starting" || phase === "failed";
  el.prompt.disabled = !status.hasModel || busy;
  el.send.disabled = !(status.hasModel && phase === "ready");
  el.stop.disabled = phase !== "generating" && phase !== "loading"; // Stop also cancels a load
  // No new model while one loads or replies: Stop first (a load would end the reply and drop the chat).
  el.fileInput.disabled = phase === "loading" || phase === "failed" || replying();
  el.dropzone.classList.toggle("disabled", el.fileInput.disabled);
  el.dropzoneHint.textContent = replying() ? "a reply is running: Stop it to load another model"
    : phase === "loading" ? "a model is loading (Stop cancels it)" : DROP_HINT;
  el.loadDemo.disabled = el.fileInput.disabled;
  el.newChat.disabled = busy && phase !== "starting";
}

// Back to idle: "ready" with a model, "no model" without.
export const settle = () => setPhase(status.hasModel ? "ready" : "no model");

// A reply is running (a load queued behind it owns the phase once it has begun).
export const replying = () => status.phase === "generating" || status.phase === "stopping";

export const canLoad = () => !el.fileInput.disabled;

let errorAction = null; // what the banner's button does, when it has one

// action: {label, run} for a button beside the message (Load the model before again), or null.
export function showError(message, action = null) {
  el.errorText.textContent = message;
  if (action) el.errorAction.textContent = action.label;
  el.errorAction.hidden = !action;
  errorAction = action && action.run;
  el.error.hidden = false;
}

export function clearError() {
  el.error.hidden = true;
  el.errorText.textContent = "";
  el.errorAction.hidden = true;
  errorAction = null;
}

// frac: the part done, from 0 to 1; null for a step of unknown length (the bar slides).
export function showProgress(text, frac) {
  el.progress.hidden = false;
  el.progressText.textContent = text;
  el.progress.classList.toggle("indeterminate", frac == null);
  el.progressFill.style.width = frac == null ? "" : `${(100 * Math.min(1, frac)).toFixed(1)}%`;
}

export const hideProgress = () => { el.progress.hidden = true; };

export function wireStatus() {
  el.errorClose.addEventListener("click", clearError);
  el.errorAction.addEventListener("click", () => {
    const run = errorAction;
    clearError();
    run?.();
  });
}
