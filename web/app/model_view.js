// @ts-check
// The model loaded: its card in the sidebar, and the inspector's tab (the file's parts to scale, its
// metadata, its tensor types, a searchable tensor table). Also the tabs between the chat and the inspector.
import { el, make } from "./dom.js";
import { formatBytes, formatCount, withCommas } from "./format.js";
/** @typedef {import("./messages.js").ModelCard} ModelCard */
/** @typedef {import("./messages.js").Inspector} Inspector */

// The tables show at most MAX_ROWS rows: real models have a few hundred tensors, a hostile file
// may claim millions. The search looks through every tensor the worker sent.
const MAX_ROWS = 2000;

let weightCards = {}; // the card's line per weight form (pyengine.weights.budget.WEIGHT_FORMS), from page_data
let tensors = [];     // the inspector's tensors, each with the text the search looks in

// cards: weight form -> the card's line, sent once Python is up.
/** @param {Record<string, string>} cards */
export function useCards(cards) {
  weightCards = cards;
}

// card: pyengine.browser.page.model_card; info: pyengine.browser.page.inspector.
/** @param {ModelCard} card @param {Inspector} info */
export function showModel(card, info) {
  showCard(card);
  showInspector(info);
}

// The model loaded before is gone (a new one is on its way).
export function hideModel() {
  el.modelInfo.hidden = true;
  /** @type {HTMLElement} */ (el.inspector.querySelector(".empty")).hidden = false;
  /** @type {HTMLElement} */ (el.inspector.querySelector(".inspect-body")).hidden = true;
}

function showCard(card) {
  el.modelInfo.hidden = false;
  el.modelInfo.querySelector(".model-name").textContent = card.name;
  const several = card.files.length > 1;
  const fields = [
    ["architecture", card.architecture],
    ["parameters", `${formatCount(card.parameters)} (${withCommas(card.parameters)})`],
    ["quant types", card.quant_types],
    ["context length", `${withCommas(card.context_length)} tokens`],
    ["file size", `${formatBytes(card.file_size)}${several ? ` in ${card.files.length} files` : ""}`],
    [several ? "files" : "file", card.files.join("\n")],
    ["chat template", card.chat_template],
    ["weights", weightCards[card.weights] ?? card.weights],
    ["products", card.products],
  ];
  el.modelInfo.querySelector(".card").replaceChildren(...fields.flatMap(([k, v]) => {
    const dd = make("dd", "", v);
    dd.dataset.field = k.replace(" ", "-");
    return [make("dt", "", k), dd];
  }));
}

/** @param {string[]} cells @param {"td" | "th"} [tag] */
function row(cells, tag = "td") {
  const tr = make("tr");
  tr.append(...cells.map((c) => make(tag, "", c)));
  return tr;
}

const shownOf = (shown, total) => (shown < total ? `${withCommas(shown)} of ${withCommas(total)}` : withCommas(total));

// info: pyengine.browser.page.inspector (also of a file that could not be loaded).
/** @param {Inspector} info */
export function showInspector(info) {
  const find = (selector) => el.inspector.querySelector(selector);
  find(".empty").hidden = true;
  find(".inspect-body").hidden = false;
  const h = info.header;
  find(".header-line").textContent = `GGUF version ${h.version} · ${withCommas(h.n_kv)} keys · `
    + `${withCommas(h.n_tensors)} tensors · alignment ${h.alignment} · `
    + `tensor data from byte ${withCommas(h.data_offset)}`;
  find(".parts").replaceChildren(...info.parts.map((p) => drawPart(p, info.parts.length > 1)));
  find(".meta-table tbody").replaceChildren(
    ...info.metadata.slice(0, MAX_ROWS).map((m) => row([m.key, m.type, m.value])));
  find(".meta-count").textContent = `(${shownOf(Math.min(MAX_ROWS, info.metadata.length), h.n_kv)} keys)`;
  find(".types-table tbody").replaceChildren(...info.types.map((t) => row(
    [t.type, withCommas(t.count), withCommas(t.params), `${withCommas(t.bytes)} (${formatBytes(t.bytes)})`])));
  tensors = info.tensors.map((t) => ({ ...t, search: `${t.name} ${t.type}`.toLowerCase() }));
  filterTensors();
}

// One file's five sections: a bar with each part as wide as its bytes (at least a sliver), and a table.
// named: the file's name and size above them (a model in several files).
function drawPart(part, named) {
  const box = make("div", "part-box");
  if (named) box.append(make("h3", "", `${part.name} (${formatBytes(part.size)})`));
  const bar = make("div", "sections-bar");
  const table = make("table", "sections-table");
  const body = make("tbody");
  table.append(make("thead"), body);
  table.tHead.append(row(["part", "bytes", "size"], "th"));
  part.sections.forEach((s, i) => {
    const size = s.end - s.start;
    const piece = make("div", `part part-${i}`);
    piece.style.flexGrow = String(size);
    piece.title = `${s.name}: bytes ${withCommas(s.start)}–${withCommas(s.end)} (${formatBytes(size)})`;
    bar.append(piece);
    const tr = row([s.name, `${withCommas(s.start)} – ${withCommas(s.end)}`, formatBytes(size)]);
    tr.firstElementChild.classList.add(`key-${i}`);
    body.append(tr);
  });
  box.append(bar, table);
  return box;
}

function filterTensors() {
  const q = el.tensorSearch.value.trim().toLowerCase();
  const found = q ? tensors.filter((t) => t.search.includes(q)) : tensors;
  el.inspector.querySelector(".tensor-table tbody").replaceChildren(...found.slice(0, MAX_ROWS).map(
    (t) => row([t.name, t.shape.join(" × "), t.type, withCommas(t.offset), withCommas(t.n_bytes)])));
  const total = q ? found.length : tensors.length;
  const count = shownOf(Math.min(MAX_ROWS, total), total);
  el.inspector.querySelector(".tensor-count").textContent = `(${count}${q ? " found" : ""})`;
}

export function wireModelView() {
  el.tensorSearch.addEventListener("input", filterTensors);
  const tabs = /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll(".tab"));
  for (const tab of tabs) {
    tab.addEventListener("click", () => {
      for (const t of tabs) t.setAttribute("aria-selected", String(t === tab));
      const panes = /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll(".tabpane"));
      for (const pane of panes) pane.hidden = pane.dataset.pane !== tab.dataset.tab;
    });
  }
}
