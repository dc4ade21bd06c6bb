// A reply as its tokens, each shaded by its probability, with the likeliest alternatives on hover or
// keyboard focus (arrow keys move between tokens). The probabilities are those the token was drawn
// from: after the repetition penalty and the temperature, before top-k, top-p and min-p cut the list
// (pyengine.generation.sampling.Sampler.probabilities; at temperature 0, the softmax of the penalized
// logits). The shade is a class, p-0 (under 10%) to p-9 (90% or more): no style attribute.
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
    span.setAttribute("aria-label", `${visible(t.token)}: ${percent(t.p)}`);
    return span;
  });
  const joined = tokens.map((t) => t.text).join("");
  const rest = text.startsWith(joined) ? text.slice(joined.length) : "";
  body.replaceChildren(...spans, ...(rest ? [rest] : []));
  body.classList.add("tokens");
}

// The alternatives of one token, under it (made when it is hovered or focused).
function showAlternatives(span, record) {
  if (span.querySelector(".alts")) return;
  const box = make("span", "alts");
  box.setAttribute("role", "tooltip");
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

// recordsOf(li): the token records of a message. Hover and focus show a token's alternatives; the
// arrow keys move the focus to the next or previous token.
export function wireTokens(list, recordsOf) {
  const open = (e) => {
    const span = e.target.closest?.(".tok");
    const records = span && recordsOf(span.closest("[data-testid=message]"));
    if (records?.[span.dataset.index]) showAlternatives(span, records[span.dataset.index]);
  };
  list.addEventListener("mouseover", open);
  list.addEventListener("focusin", open);
  list.addEventListener("keydown", (e) => {
    const span = e.target.closest?.(".tok");
    if (!span || (e.key !== "ArrowRight" && e.key !== "ArrowLeft")) return;
    const next = e.key === "ArrowRight" ? span.nextElementSibling : span.previousElementSibling;
    if (!next?.classList.contains("tok")) return;
    e.preventDefault();
    span.tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  });
}
