// @ts-check
// The models saved in the browser (opfs.js): a model that loads from a dropped file is copied into the
// Origin Private File System (the progress, its size and the storage used and allowed shown), listed on
// the next visit with Load (one click, no file to choose, no network) and Forget (its space freed).
import { el, make } from "./dom.js";
import { formatBytes } from "./format.js";
import { lastLoad, loadFiles } from "./loading.js";
import { canLoad } from "./status.js";
import { announce } from "./tabs.js";
import { available, forgetModel, listModels, modelFiles, saveModel, savedAs, storageState } from "./opfs.js";

let saving = false;

function note(text) {
  el.storageNote.textContent = text;
}

const why = (err) => String(err.message || err).replace(/\.$/, "");

async function storageLine() {
  const { usage, quota, persisted } = await storageState();
  const kept = persisted ? "kept by the browser" : "the browser may clear it when space runs low";
  return `This page's storage: ${formatBytes(usage)} used of ${formatBytes(quota)} (${kept}).`;
}

function modelItem(entry) {
  const li = make("li", "saved-model");
  li.dataset.folder = entry.folder;
  const parts = entry.files.length > 1 ? ` in ${entry.files.length} parts` : "";
  li.append(make("span", "saved-name", entry.name), make("small", "", `${formatBytes(entry.size)}${parts}`));
  const load = make("button", "", "Load");
  load.type = "button";
  load.setAttribute("aria-label", `Load the saved model ${entry.name}`);
  load.addEventListener("click", () => loadSaved(entry));
  const forget = make("button", "", "Forget");
  forget.type = "button";
  forget.setAttribute("aria-label", `Forget the saved model ${entry.name} (frees ${formatBytes(entry.size)})`);
  forget.addEventListener("click", () => forgetSaved(entry));
  li.append(load, forget);
  return li;
}

// The list drawn again; resolves to the saved models, or null when they cannot be read (the note says why).
export async function drawModels() {
  if (!available()) return void note("This browser cannot keep models (no Origin Private File System).");
  try {
    const { models, failed } = await listModels();
    el.savedModelList.replaceChildren(...models.map(modelItem));
    el.savedModels.hidden = !models.length && !saving;
    if (!saving) note(`${await storageLine()}${failed ? ` But ${failed}.` : ""}`);
    return models;
  } catch (err) {
    el.savedModels.hidden = false;
    note(`The saved models cannot be read: ${why(err)}.`);
    return null;
  }
}

async function loadSaved(entry) {
  if (!canLoad()) return;
  try {
    loadFiles(await modelFiles(entry), true);
  } catch (err) {
    note(`${entry.name} cannot be read: ${why(err)}.`);
  }
}

async function forgetSaved(entry) {
  let failed = "";
  try {
    await forgetModel(entry);
    announce({ type: "models" });
  } catch (err) {
    failed = `${entry.name} could not be forgotten: ${why(err)}.`;
  }
  await drawModels();
  if (failed) note(failed);
}

// The model asked last has loaded (name: its card's): its files are saved unless they came from here or
// are saved already.
export async function modelLoaded(name) {
  const { files, saved } = lastLoad();
  if (saved || saving || !available() || !files.length) return;
  const all = await drawModels();
  if (!all || savedAs(all, files)) return;
  saving = true;
  el.savedModels.hidden = false;
  try {
    await saveModel(files, name, (done, total) => {
      note(`Saving ${name} for the next visit: ${formatBytes(done)} of ${formatBytes(total)}`);
      el.storageNote.dataset.progress = (done / total).toFixed(3);
    });
    saving = false;
    announce({ type: "models" });
    await drawModels();
  } catch (err) {
    saving = false;
    await drawModels();
    note(`${name} is not saved: ${why(err)}. The model stays loaded; the models saved before are kept.`);
  }
}

export const wireSavedModels = () => drawModels();
