// @ts-check
// A reply's Markdown as the page shows it: markdown-it parses it (raw HTML in it stays text, only
// absolute http(s) links become links, images are not loaded), DOMPurify cleans what it renders (no
// script, no event attributes, no style attributes: a strict CSP holds), highlight.js colours fenced
// code whose language it knows. Each code block gets a bar with its language and a Copy button.
// While a reply streams it is drawn again at most once a frame, and only the top-level blocks whose
// HTML changed are replaced: the blocks above stay the same nodes (no flicker, no scroll jump, a
// selection in them survives).
import markdownit from "../vendor/markdown-it.mjs";
import DOMPurify from "../vendor/purify.mjs";
import hljs from "../vendor/highlight.mjs";
import { make } from "./dom.js";

const LIVE_LINK = /^https?:\/\//i;

function highlight(code, lang) {
  if (!lang || !hljs.getLanguage(lang)) return ""; // markdown-it escapes it
  try {
    return hljs.highlight(code, { language: lang, ignoreIllegals: true }).value;
  } catch {
    return "";
  }
}

const md = markdownit({ html: false, linkify: true, breaks: true, highlight });
md.disable("image"); // a reply never makes the page fetch anything
md.validateLink = (url) => LIVE_LINK.test(url.trim()); // other links stay text

// Table cells' alignment as a class (align-left/center/right), not markdown-it's style attribute.
md.core.ruler.push("align_class", (state) => {
  for (const token of state.tokens) {
    const style = token.attrGet?.("style");
    if (!style) continue;
    token.attrs = token.attrs.filter(([name]) => name !== "style");
    const align = /text-align:\s*(left|center|right)/.exec(style);
    if (align) token.attrJoin("class", `align-${align[1]}`);
  }
});

// A table shows at most MAX_TABLE_ROWS rows, and says how many more there are (a reply's text, which Copy
// copies, keeps them all): a hostile reply's 10,000 rows would cost seconds of layout.
const MAX_TABLE_ROWS = 500;

md.core.ruler.push("cap_tables", (state) => {
  const out = [];
  let rows = 0;
  let dropping = false;
  for (const token of state.tokens) {
    if (token.type === "tbody_open") rows = 0;
    if (token.type === "tr_open" && rows++ >= MAX_TABLE_ROWS) dropping = true;
    if (token.type === "tbody_close") dropping = false;
    if (!dropping) out.push(token);
    if (token.type === "table_close" && rows > MAX_TABLE_ROWS) out.push(...paragraph(state, `(${rows - MAX_TABLE_ROWS} more rows not shown)`));
  }
  state.tokens = out;
});

// The tokens of a paragraph of plain text (class "note").
function paragraph(state, text) {
  const open = new state.Token("paragraph_open", "p", 1);
  open.attrSet("class", "table-note");
  const inline = new state.Token("inline", "", 0);
  const child = new state.Token("text", "", 0);
  child.content = text;
  inline.children = [child];
  return [open, inline, new state.Token("paragraph_close", "p", -1)];
}

const PURIFY = { RETURN_DOM_FRAGMENT: true, FORBID_TAGS: ["style", "img", "form", "input"], FORBID_ATTR: ["style"] };

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName !== "A") return;
  if (!LIVE_LINK.test(node.getAttribute("href") || "")) node.removeAttribute("href");
  node.setAttribute("rel", "noopener noreferrer");
  node.setAttribute("target", "_blank");
});

// A reply whose Markdown parses into more than MAX_TOKENS tokens is shown as plain text: each token is an
// element or more to build and lay out (200,000 chars of "```" fences made 25,000 code blocks, 7 s).
const MAX_TOKENS = 20_000;
const countTokens = (tokens) => tokens.reduce((n, t) => n + 1 + (t.children?.length ?? 0), 0);

// Markdown text -> a DocumentFragment of clean nodes, code blocks with their bar, links with their host.
export function renderMarkdown(text) {
  const env = {};
  const tokens = md.parse(text, env);
  const n = countTokens(tokens);
  if (n > MAX_TOKENS) {
    const frag = document.createDocumentFragment();
    frag.append(make("p", "long-note", `This text makes ${n.toLocaleString("en-US")} Markdown parts, more than `
      + `${MAX_TOKENS.toLocaleString("en-US")}: it is shown as plain text.`), make("div", "plain-text", text));
    return frag;
  }
  const frag = DOMPurify.sanitize(md.renderer.render(tokens, md.options, env), PURIFY);
  for (const pre of frag.querySelectorAll("pre")) decorateCode(pre);
  for (const a of frag.querySelectorAll("a[href]")) showHost(a);
  return frag;
}

// The host an address names ("" if the text is not an address): "https://a.example/x", "a.example/x".
const WITH_SCHEME = /^[a-z][\w+.-]*:\/\/\S+$/i;
const BARE = /^[^\s/?#@:]+\.[^\s/?#@:]+([:/?#]\S*)?$/;
function hostOf(text) {
  if (!WITH_SCHEME.test(text) && !BARE.test(text)) return "";
  try {
    return new URL(WITH_SCHEME.test(text) ? text : `http://${text}`).hostname;
  } catch {
    return "";
  }
}

// The hosts a link's text names, one per word that reads as an address ("Visit bank.example now",
// "me@bank.example"), without a final dot.
const bareHost = (host) => host.replace(/\.$/, "");
const namedHosts = (text) => text.split(/[\s@<>()[\]"'`,;]+/).map(hostOf).filter(Boolean).map(bareHost);

// A link goes where its href says: shown on hover (its title), and beside a text that names another host
// ("[bank.example](https://elsewhere.example/?chat=...)" reads "bank.example (elsewhere.example)", and so
// does "[Visit bank.example now](...)").
function showHost(a) {
  const href = a.getAttribute("href");
  a.title = href;
  const host = bareHost(hostOf(href));
  if (host && namedHosts(a.textContent).some((named) => named !== host)) {
    a.after(make("span", "link-host", ` (${host})`));
  }
}

function decorateCode(pre) {
  const lang = /language-(\S+)/.exec(pre.querySelector("code")?.className || "")?.[1] || "";
  const box = make("div", "code-block");
  const copy = make("button", "copy-code", "Copy");
  copy.type = "button";
  copy.setAttribute("aria-label", lang ? `Copy the ${lang} code` : "Copy the code");
  const bar = make("div", "code-bar");
  bar.append(make("span", "code-lang", lang || "code"), copy);
  pre.replaceWith(box);
  box.append(bar, pre);
}

// Draw ``text`` into ``body``, replacing only the top-level nodes that differ from the ones shown.
export function drawMarkdown(body, text) {
  const fresh = [...renderMarkdown(text).childNodes];
  const old = [...body.childNodes];
  fresh.forEach((node, i) => {
    if (i >= old.length) body.append(node);
    else if (!old[i].isEqualNode(node)) old[i].replaceWith(node);
  });
  for (const node of old.slice(fresh.length)) node.remove();
}

// A reasoning model's reply: "<think>...</think>" first (Qwen3 and later), then the answer. Returns
// {thinking (null: none), thought (the block is closed), answer}.
const THINK = /^\s*<think>([\s\S]*?)(<\/think>|$)/;
export function splitThinking(text) {
  const m = THINK.exec(text);
  if (!m) return { thinking: null, thought: false, answer: text };
  return { thinking: m[1].trim(), thought: m[2] !== "", answer: text.slice(m[0].length).replace(/^\s+/, "") };
}

// A reply drawn into ``body``: its thinking, if any, in a collapsed section (kept open or closed as the
// reader left it while the reply streams), then the answer as Markdown.
export function drawReply(body, text) {
  const { thinking, thought, answer } = splitThinking(text);
  let box = body.querySelector(":scope > details.thinking");
  if (thinking === null) {
    if (box) body.replaceChildren();
    return drawMarkdown(body, text);
  }
  if (!box) {
    box = make("details", "thinking");
    box.append(make("summary"), make("div", "thinking-body"));
    body.replaceChildren(box, make("div", "answer"));
  }
  box.querySelector("summary").textContent = thought ? "Thinking" : "Thinking…";
  box.dataset.done = String(thought);
  drawMarkdown(box.querySelector(".thinking-body"), thinking);
  drawMarkdown(body.querySelector(":scope > .answer"), answer);
}

// A click on a code block's Copy button (delegated from the message list): its code to the clipboard.
export function copyCode(button) {
  copyAndSay(button, button.closest(".code-block")?.querySelector("pre")?.textContent ?? "");
}

// ``text`` to the clipboard; the button says for a moment whether it went, its name beginning with what
// it says ("Copied: Copy this reply").
export async function copyAndSay(button, text) {
  const label = (button.dataset.label ??= button.textContent);
  const name = (button.dataset.name ??= button.getAttribute("aria-label") ?? label);
  let ok = true;
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    ok = false;
  }
  button.textContent = ok ? "Copied" : "Copy failed";
  button.setAttribute("aria-label", `${button.textContent}: ${name}`);
  setTimeout(() => {
    button.textContent = label;
    button.setAttribute("aria-label", name);
  }, 1500);
}
