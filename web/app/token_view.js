// @ts-check
// A reply as its tokens, each shaded by its probability, with the likeliest alternatives on hover or
// keyboard focus. By keyboard the tokens are one stop: the arrow keys (and Home, End) move between them,
// Enter opens or closes a token's alternatives and Escape closes them. A token is a button whose name
// begins with its text ("Paris: 87.1%") and is described by its alternatives once they are open. The probabilities are those the token was drawn
// from: after the repetition penalty and the temperature, before top-k, top-p and min-p cut the list
// (pyengine.generation.sampling.Sampler.probabilities; at temperature 0, the softmax of the penalized
// logits). The shade is a class, p-0 (under 10%) to p-9 (90% or more): no style attribute. A click, or
// Space, looks inside the step that wrote the token (trace_view.js).
import { make } from "./dom.js";

export const PROBS_SHOWN = 5; // the alternatives listed for each token

const percent = (p) => `${(100 * p).toFixed(p < 0.001 ? 3 : 1)}%`;
const visible = (text) => JSON.stringify(text).slice(1, -1); // spaces shown as they are, newlines as \n

// tokens: [{id, token, text, p, top: [{id, token, p}]}] (pyengine Generation.token_probs); text: the
// reply (any text the tokens' records do not hold, at its end, is shown plain).
export function drawTokens(body, text, tokens) {
  const spans = tokens.map((t, i) => {
    const span = make("span", `tok p-${Math.min(9, Math.floor(t.p * 10))}`, t.text);
    span.tabIndex = i === 0 ? 0 : -1;
    span.dataset.index = i;
    span.dataset.p = t.p;
    span.setAttribute("role", "button");
    span.setAttribute("aria-roledescription", "token");
    span.setAttribute("aria-label", `${t.text.trim() || visible(t.text)}: ${percent(t.p)}`);
    span.setAttribute("aria-expanded", "false");
    return span;
  });
  const joined = tokens.map((t) => t.text).join("");
  const rest = text.startsWith(joined) ? text.slice(joined.length) : "";
  body.replaceChildren(...spans, ...(rest ? [rest] : []));
  body.classList.add("tokens");
}

let boxes = 0; // the ids of the alternatives' boxes

// The alternatives of one token, under it (made when it is hovered or focused the first time).
function showAlternatives(span, record) {
  span.classList.remove("shut");
  span.setAttribute("aria-expanded", "true");
  if (span.querySelector(".alts")) return;
  const box = make("span", "alts");
  box.id = `alts-${++boxes}`;
  // Out of the token's own text (its name begins with what it shows), read as its description instead.
  box.setAttribute("aria-hidden", "true");
  span.setAttribute("aria-describedby", box.id);
  box.append(make("span", "alts-head", `${visible(record.token)} ${percent(record.p)}`));
  for (const alt of record.top) {
    const row = make("span", `alt${alt.id === record.id ? " chosen" : ""}`);
    row.dataset.id = alt.id;
    row.dataset.p = alt.p;
    row.append(make("code", "", visible(alt.token)), make("span", "alt-p", percent(alt.p)));
    box.append(row);
  }
  span.append(box);
}

// Escape (or Enter on an open token): the alternatives hidden until the token is opened again.
function hideAlternatives(span) {
  span.classList.add("shut");
  span.setAttribute("aria-expanded", "false");
}

// The token the keys move to from ``span``: key -> its neighbour, the first or the last; null for another key.
function moveTo(span, key) {
  const all = () => span.parentElement.querySelectorAll(":scope > .tok");
  if (key === "ArrowRight" || key === "ArrowDown") return span.nextElementSibling;
  if (key === "ArrowLeft" || key === "ArrowUp") return span.previousElementSibling;
  if (key === "Home") return all()[0];
  if (key === "End") return [...all()].pop();
  return null;
}

/** @typedef {import("./messages.js").TokenRecord} TokenRecord */

// recordsOf(li): the token records of a message. Hover and focus show a token's alternatives; the
// keys move the focus between tokens, open and close the alternatives; a click or Space calls
// look(span, li, index, record).
/**
 * @param {(li: Element) => TokenRecord[] | undefined} recordsOf
 * @param {(span: HTMLElement, li: Element, index: number, record: TokenRecord) => void} [look]
 */
export function wireTokens(list, recordsOf, look = () => {}) {
  const open = (span) => {
    const records = recordsOf(span.closest("[data-testid=message]"));
    if (records?.[span.dataset.index]) showAlternatives(span, records[span.dataset.index]);
  };
  const opened = (e) => {
    const span = e.target.closest?.(".tok");
    if (span) open(span);
  };
  const lookAt = (span) => {
    const li = span.closest("[data-testid=message]");
    const record = recordsOf(li)?.[span.dataset.index];
    if (record) look(span, li, Number(span.dataset.index), record);
  };
  list.addEventListener("mouseover", opened);
  list.addEventListener("click", (e) => {
    const span = e.target.closest?.(".tok");
    if (span && !e.target.closest(".alts")) lookAt(span);
  });
  list.addEventListener("focusin", opened);
  list.addEventListener("focusout", (e) => {
    const span = e.target.closest?.(".tok");
    if (span) span.setAttribute("aria-expanded", "false");
  });
  list.addEventListener("keydown", (e) => {
    const span = e.target.closest?.(".tok");
    if (!span) return;
    if (e.key === "Escape" || (e.key === "Enter" && span.getAttribute("aria-expanded") === "true")) {
      e.preventDefault();
      return void hideAlternatives(span);
    }
    if (e.key === "Enter") {
      e.preventDefault();
      return void open(span);
    }
    if (e.key === " ") {
      e.preventDefault();
      return void lookAt(span);
    }
    const next = moveTo(span, e.key);
    if (!next?.classList.contains("tok")) return;
    e.preventDefault();
    span.tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  });
}
