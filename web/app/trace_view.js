// @ts-check
// Inside one step: the panel a reply token opens (click it, or Space on it, with Token probabilities on).
// The worker runs the step that wrote the token again on the conversation's cache and sends its trace
// (pyengine.generation.trace): drawn here as the logit lens (a table: each layer's likeliest next tokens,
// and where the final answer appears), the attention of one head or the mean of them (a heatmap over
// layers and positions in SVG, the chosen layer over the conversation's tokens, and the positions it read
// most as a table), and the step's cost (a bar per kind of operation, and the same as a table). Every
// picture has a text table beside it; the panel is a <dialog> (Escape closes it, focus comes back).
import { make } from "./dom.js";
/** @typedef {import("./messages.js").TokenRecord} TokenRecord */
/** @typedef {import("./messages.js").Trace} Trace */

const SVG = "http://www.w3.org/2000/svg";
const TOP_POSITIONS = 8; // the positions the attention table lists
const HEAT_COLUMNS = 256; // the heatmap's columns at most: a longer conversation's positions are summed by bins
const HEAT_WIDTH = 512; // the heatmap's cells span this many units at most (narrower cells for more columns)
const MEAN = "mean";

const percent = (p) => (p < 1e-5 ? `${(100 * p).toExponential(1)}%` : `${(100 * p).toFixed(p < 0.001 ? 3 : 1)}%`);
const visible = (text) => JSON.stringify(text).slice(1, -1); // spaces shown as they are, newlines as \n
const largest = (a) => a.reduce((m, v) => (v > m ? v : m), 0); // Math.max(...a) overflows the stack on long chats
const ms = (s) => `${(1000 * s).toFixed(2)} ms`;
const mib = (b) => `${(b / 2 ** 20).toFixed(1)} MiB`;

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// A table in a box that scrolls (focusable, so the keyboard scrolls it too), named by label.
function table(head, rows, className, label) {
  const t = make("table", className);
  const tr = make("tr");
  for (const h of head) tr.append(make("th", "", h));
  const body = make("tbody");
  for (const row of rows) {
    const r = make("tr");
    for (const cell of row) r.append(cell instanceof Node ? cell : make("td", "", cell));
    body.append(r);
  }
  const thead = make("thead");
  thead.append(tr);
  t.append(thead, body);
  const wrap = make("div", "table-wrap");
  wrap.tabIndex = 0;
  wrap.setAttribute("role", "region");
  wrap.setAttribute("aria-label", label);
  wrap.append(t);
  return wrap;
}

// A cell with a token's text, escaped (quoted: a space shows as one).
const code = (text, quoted = false) => {
  const td = make("td");
  td.append(make("code", "", quoted ? `"${visible(text)}"` : visible(text)));
  return td;
};

// --- the logit lens

// The first layer from which the final answer stays the top token, and the first where it enters the top 5.
function whenItAppears(layers) {
  let top1 = layers.length - 1;
  while (top1 > 0 && layers[top1 - 1].answer[0] === 0) top1--;
  const top5 = layers.findIndex((l) => l.answer[0] < 5);
  return { top1, top5 };
}

function drawLens(trace) {
  const part = make("section", "trace-part");
  const { top1, top5 } = whenItAppears(trace.layers);
  const answer = visible(trace.next[1]);
  part.append(make("h3", "", "Logit lens: what each layer would answer"),
    make("p", "lens-note", `The answer "${answer}" is first among the 5 likeliest after layer ${top5}, and the `
      + `likeliest from layer ${top1} on. Each row is the stream after that layer put through the model's final `
      + "norm and output matrix."));
  const rows = trace.layers.map((l) => {
    const first = code(l.top[0][1], true);
    if (l.top[0][0] === trace.next[0]) first.classList.add("answer");
    return [String(l.layer), first, percent(l.top[0][2]),
      l.top.slice(1).map((t) => `"${visible(t[1])}" ${percent(t[2])}`).join(", "),
      `${l.answer[0] + 1} (${percent(l.answer[1])})`];
  });
  part.append(table(["layer", "top token", "p", "next 4", `rank of "${answer}"`], rows, "lens-table",
    "The logit lens, a row per layer"));
  return part;
}

// --- attention

// Layer il's weights for head h (or the mean over heads), as a full row over positions 0..n; null: none.
function weightsOf(layer, head, n) {
  if (!layer.attention) return null;
  const rows = head === MEAN ? layer.attention : [layer.attention[head]];
  const out = new Array(n + 1).fill(0);
  for (const row of rows) row.forEach((w, i) => { out[layer.first + i] += w / rows.length; });
  return out;
}

// Positions 0..n in at most HEAT_COLUMNS columns: w (n + 1) summed by bins of ``per`` positions.
function binned(w, per) {
  const out = new Array(Math.ceil(w.length / per)).fill(0);
  w.forEach((v, i) => { out[Math.floor(i / per)] += v; });
  return out;
}

function heatmap(trace, head, chosen) {
  const n = trace.position, per = Math.ceil((n + 1) / HEAT_COLUMNS), cols = Math.ceil((n + 1) / per);
  const cell = Math.min(8, HEAT_WIDTH / cols), rowH = 8, left = 28; // a row stays tall on a long conversation
  const width = left + cell * cols, height = rowH * trace.layers.length + 2;
  const bins = per > 1 ? `, ${per} positions a column` : "";
  const pic = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "heatmap", role: "img",
    "aria-label": `Attention of ${head === MEAN ? "the mean of the heads" : `head ${head}`} in every layer `
      + `(rows) over positions 0 to ${n} (columns${bins}); the table below lists layer ${chosen}'s` });
  trace.layers.forEach((layer, il) => {
    const w = weightsOf(layer, head, n);
    if (il % 5 === 0) {
      const label = svg("text", { x: 0, y: il * rowH + rowH - 1, class: "heat-label" });
      label.textContent = String(il);
      pic.append(label);
    }
    if (!w) return;
    const row = binned(w, per), max = largest(row) || 1;
    row.forEach((v, i) => {
      if (v > 0) {
        pic.append(svg("rect", { x: left + i * cell, y: il * rowH, width: cell, height: rowH, class: "heat",
          "fill-opacity": (v / max).toFixed(3) }));
      }
    });
  });
  pic.append(svg("rect", { x: left - 1, y: chosen * rowH, width: cell * cols + 2, height: rowH, class: "heat-row" }));
  return pic;
}

// The conversation's tokens, each shaded by the weight layer il's head gave it (w-0 faint to w-9 strong).
function tokenStrip(trace, w) {
  const strip = make("p", "attn-tokens");
  strip.setAttribute("aria-hidden", "true"); // the table beside it says the same
  const max = largest(w) || 1;
  trace.tokens.forEach((t, i) => {
    strip.append(make("span", `w-${Math.min(9, Math.floor((10 * w[i]) / max))}`, t));
  });
  return strip;
}

function attentionBody(trace, il, head) {
  const layer = trace.layers[il];
  const box = make("div", "attn-body");
  box.append(heatmap(trace, head, il));
  const w = weightsOf(layer, head, trace.position);
  if (!w) {
    box.append(make("p", "attn-note", `Layer ${il}: ${layer.note}.`
      + (layer.state_norm ? ` State norm per head: ${layer.state_norm.map((x) => x.toFixed(2)).join(", ")}.` : "")));
    return box;
  }
  const shared = layer.kv_layer !== undefined ? ` It reads layer ${layer.kv_layer}'s keys and values.` : "";
  const window = layer.first ? ` A sliding window: positions ${layer.first} to ${trace.position} only.` : "";
  box.append(make("p", "attn-note", `Layer ${il}, ${head === MEAN ? "the mean of the heads" : `head ${head}`}.`
    + shared + window), tokenStrip(trace, w));
  const order = w.map((v, i) => [v, i]).sort((a, b) => b[0] - a[0]).slice(0, TOP_POSITIONS);
  box.append(table(["position", "token", "weight"], order.map(([v, i]) => [String(i), code(trace.tokens[i]), percent(v)]),
    "attn-table", "The positions this head read most"));
  return box;
}

/** @returns {[HTMLLabelElement, HTMLSelectElement]} */
function picker(label, options, onChange) {
  const wrap = make("label", "picker", `${label} `);
  const select = make("select");
  for (const [value, text] of options) {
    const o = make("option", "", text);
    o.value = value;
    select.append(o);
  }
  select.addEventListener("change", onChange);
  wrap.append(select);
  return [wrap, select];
}

function drawAttention(trace) {
  const part = make("section", "trace-part");
  part.append(make("h3", "", "Attention: where this step looked"));
  const attentive = trace.layers.findLast((l) => l.attention) ?? trace.layers.at(-1);
  const heads = attentive.attention?.length ?? 0;
  let body = make("div");
  const redraw = () => {
    const next = attentionBody(trace, Number(layerSelect.value), headSelect.value === MEAN ? MEAN : Number(headSelect.value));
    body.replaceWith(next);
    body = next;
  };
  const [layerPick, layerSelect] = picker("Layer", trace.layers.map((l) => [l.layer, `${l.layer} (${l.kind})`]), redraw);
  const [headPick, headSelect] = picker("Head", [[MEAN, "mean over the heads"],
    ...[...Array(heads).keys()].map((h) => [h, `head ${h}`])], redraw);
  layerSelect.value = String(attentive.layer);
  layerPick.dataset.testid = "trace-layer";
  headPick.dataset.testid = "trace-head";
  const pickers = make("div", "pickers");
  pickers.append(layerPick, headPick);
  part.append(pickers, body);
  redraw();
  return part;
}

// --- the cost

function drawCost(trace) {
  const part = make("section", "trace-part");
  const ops = Object.entries(trace.ops).sort((a, b) => b[1] - a[1]);
  const total = trace.total_seconds, bytes = Object.values(trace.bytes).reduce((a, b) => a + b, 0);
  part.append(make("h3", "", "The step's cost"),
    make("p", "", `${ms(total)} in all, ${mib(bytes)} of weights read (${trace.workers} worker`
      + `${trace.workers > 1 ? "s" : ""}, ${trace.weights} weights).`));
  const barH = 16, labelW = 150, width = 460, max = ops[0]?.[1] || 1;
  const pic = svg("svg", { viewBox: `0 0 ${width} ${barH * ops.length}`, class: "cost-bars", role: "img",
    "aria-label": "Seconds per kind of operation, longest first; the table below gives the numbers" });
  ops.forEach(([kind, s], i) => {
    const label = svg("text", { x: 0, y: i * barH + barH - 4, class: "bar-label" });
    label.textContent = kind;
    pic.append(label, svg("rect", { x: labelW, y: i * barH + 2, width: ((width - labelW - 60) * s / max).toFixed(1),
      height: barH - 4, class: "bar" }));
    const value = svg("text", { x: width - 56, y: i * barH + barH - 4, class: "bar-label" });
    value.textContent = ms(s);
    pic.append(value);
  });
  part.append(pic, table(["operation", "time", "share", "weights read"],
    ops.map(([kind, s]) => [kind, ms(s), percent(s / total), trace.bytes[kind] ? mib(trace.bytes[kind]) : ""]),
    "cost-table", "The step's cost per kind of operation"));
  return part;
}

// --- the panel

let dialog = null;
let opener = null; // the token that opened it: focus goes back there
let asked = null; // the back of the token it shows: the trace of a token clicked before it is not drawn

function panel() {
  if (dialog) return dialog;
  dialog = make("dialog", "trace");
  dialog.dataset.testid = "trace-panel";
  dialog.setAttribute("aria-labelledby", "trace-title");
  const head = make("div", "trace-head");
  const title = make("h2", "", "Inside the step");
  title.id = "trace-title";
  const close = make("button", "trace-close", "Close");
  close.type = "button";
  close.addEventListener("click", () => dialog.close());
  head.append(title, close);
  dialog.append(head, make("div", "trace-content"));
  // the close event comes a task after Escape: by then the focus may have moved on (the browser gives it back to
  // the opener itself), so take it back only from the dialog or from nowhere
  dialog.addEventListener("close", () => {
    const at = document.activeElement;
    if (!at || at === document.body || dialog.contains(at)) opener?.focus();
  });
  document.body.append(dialog);
  return dialog;
}

// Open the panel while the worker runs the step again: record is the token's own, back the tokens after it.
/** @param {HTMLElement} span @param {TokenRecord} record @param {number} back */
export function openTrace(span, record, back) {
  opener = span;
  asked = back;
  const d = panel();
  d.querySelector("h2").textContent = `Inside the step that wrote "${visible(record.token)}"`;
  const wait = make("p", "trace-wait", "Running the step again…");
  wait.setAttribute("role", "status");
  d.querySelector(".trace-content").replaceChildren(wait);
  if (!d.open) d.showModal();
}

// The trace the worker sent for the token back tokens before the last reply's end (only if it is the one asked).
/** @param {Trace} trace @param {number} back */
export function showTrace(trace, back) {
  if (back !== asked) return;
  const d = panel();
  const summary = make("p", "trace-summary", `Position ${trace.position} read "${visible(trace.token)}"; the `
    + `model's likeliest next token is "${visible(trace.next[1])}". ${trace.layers.length} layers, ${ms(trace.total_seconds)}.`);
  summary.setAttribute("role", "status");
  d.querySelector(".trace-content").replaceChildren(summary, drawLens(trace), drawAttention(trace), drawCost(trace));
}

/** @param {string} message */
export function traceFailed(message) {
  if (!dialog?.open) return false;
  const p = make("p", "trace-wait", message);
  p.setAttribute("role", "alert");
  dialog.querySelector(".trace-content").replaceChildren(p);
  return true;
}
