// The page: pick or drop a GGUF, show what is inside it, chat with it.
// All the work happens in worker.js (Python + numpy under Pyodide); this file only
// sends it commands and draws what it posts back. Text from the model or the file
// is always set with textContent, never parsed as HTML.

const byId = (id) => document.querySelector(`[data-testid="${id}"]`);
const el = {
  status: byId("status"),
  error: byId("error"),
  errorText: document.querySelector(".error-text"),
  dropzone: byId("dropzone"),
  fileInput: byId("file-input"),
  loadDemo: byId("load-demo"),
  progress: byId("progress"),
  progressFill: document.querySelector(".progress-fill"),
  progressText: document.querySelector(".progress-text"),
  modelInfo: byId("model-info"),
  inspector: byId("inspector"),
  messages: document.querySelector(".messages"),
  prompt: byId("prompt"),
  send: byId("send"),
  stop: byId("stop"),
  newChat: byId("new-chat"),
  stats: byId("stats"),
  systemPrompt: byId("system-prompt"),
  tensorSearch: document.querySelector(".tensor-search"),
  workers: byId("workers"),
  workersNote: byId("workers-note"),
  weights: byId("weights"),
  weightsNote: byId("weights-note"),
  sendError: byId("send-error"),
};

// ---------------------------------------------------------------- state
// phase: starting -> no model -> loading -> ready <-> generating (-> stopping) ; "failed" if Python cannot start.
// reply: the assistant <li> growing, asked: the user <li> it answers (marked failed if the reply fails);
// rules: the sampling fields' ranges for the model loaded (pyengine.browser.settings.setting_rules).
const state = { phase: "starting", hasModel: false, reply: null, asked: null, replyText: "", tensors: [], rules: [] };

function setPhase(phase) {
  state.phase = phase;
  el.status.textContent = phase;
  el.status.dataset.state = phase.replace(" ", "-");
  const busy = phase === "loading" || phase === "starting" || phase === "failed";
  el.prompt.disabled = !state.hasModel || busy;
  el.send.disabled = !(state.hasModel && phase === "ready");
  el.stop.disabled = phase !== "generating";
  // No new model while one loads or replies: Stop first (a load would end the reply and drop the chat).
  el.fileInput.disabled = phase === "loading" || phase === "failed" || replying();
  el.dropzone.classList.toggle("disabled", el.fileInput.disabled);
  el.loadDemo.disabled = el.fileInput.disabled;
  el.newChat.disabled = busy && phase !== "starting";
}

// Back to idle: "ready" with a model, "no model" without.
const settle = () => setPhase(state.hasModel ? "ready" : "no model");
// A reply is running (a load queued behind it owns the phase once it has begun).
const replying = () => state.phase === "generating" || state.phase === "stopping";

// How many workers compute the model, their memory, or why it runs in one.
function showWorkers(w) {
  if (!w) return;
  el.workersNote.dataset.count = w.count;
  el.workersNote.dataset.heap = JSON.stringify(w.heap); // bytes of wasm memory, per worker
  el.workersNote.dataset.syncUs = w.sync_us ?? ""; // one round trip through shared memory, microseconds
  const heap = w.heap.length ? ` (${w.heap.map(formatBytes).join(" + ")} of wasm memory)` : "";
  el.workersNote.textContent = w.note || `computing in ${w.count} worker${w.count > 1 ? "s" : ""}${heap}`;
}

function showError(message) {
  el.errorText.textContent = message;
  el.error.hidden = false;
}
function clearError() {
  el.error.hidden = true;
  el.errorText.textContent = "";
}
document.querySelector(".error-close").addEventListener("click", clearError);

// ---------------------------------------------------------------- the worker
const worker = new Worker("./worker.js", { type: "module" });
// Cross-origin isolated (COOP/COEP headers): Stop writes SIGINT (2) into shared memory that
// Python polls, so even a long matmul stops at once. Otherwise the worker's generation loop
// yields between tokens and sees the "stop" message.
const interrupt = self.crossOriginIsolated ? new Int32Array(new SharedArrayBuffer(4)) : null;
// Workers: helper workers share the model's largest matrix through shared memory, so only a
// cross-origin isolated page can have more than one. A change applies to the next model loaded.
el.workers.value = self.crossOriginIsolated ? "2" : "1";
el.workers.disabled = !self.crossOriginIsolated;
el.workersNote.textContent = self.crossOriginIsolated ? "" : "1 worker: the page is not cross-origin isolated";
// The helpers share the vocabulary matrix; ?split=all shares the layers' matrices too (4 sync
// points a layer: not faster on the machines measured, see pyengine/parallel).
const split = new URLSearchParams(location.search).get("split") === "all" ? "all" : "vocab";
worker.postMessage({ type: "init", interrupt, workers: Number(el.workers.value), split });
el.workers.addEventListener("change", () => {
  worker.postMessage({ type: "workers", workers: Number(el.workers.value) });
  if (state.hasModel) el.workersNote.textContent = "from the next model loaded on";
});
// Memory: the weight form (pyengine.weights.budget.WEIGHT_FORMS) sent with each load, so a change applies to
// the next model loaded.
el.weights.addEventListener("change", () => {
  if (state.hasModel) el.weightsNote.textContent = "from the next model loaded on";
});

worker.onerror = (e) => {
  showError(`the worker failed: ${e.message || "could not start (see the browser console)"}`);
  setPhase("failed");
};

const handlers = {
  boot(msg) { showProgress(msg.stage, null); },
  stage(msg) { showProgress(msg.stage, null); }, // a step of a load with no byte count (the helper workers)
  booted() {
    hideProgress();
    if (state.phase === "starting") settle();
  },
  "boot-error"(msg) {
    hideProgress();
    showError(msg.message);
    setPhase("failed");
  },
  progress(msg) {
    const frac = msg.total_bytes ? msg.bytes / msg.total_bytes : null;
    const tensors = msg.n_tensors ? ` · ${msg.tensors} / ${msg.n_tensors} tensors` : "";
    showProgress(`${msg.stage}: ${formatBytes(msg.bytes)} of ${formatBytes(msg.total_bytes)}${tensors}`, frac);
  },
  model(msg) {
    hideProgress();
    state.hasModel = true;
    showModelCard(msg.card);
    showInspector(msg.inspect);
    useRules(msg.settings);
    clearMessages();
    el.stats.textContent = `loaded in ${msg.seconds.toFixed(1)} s`;
    showWorkers(msg.workers);
    setPhase("ready");
    el.prompt.focus();
  },
  unloaded() { // the model loaded before is gone; the new one is on its way
    state.hasModel = false;
    el.modelInfo.hidden = true;
    el.inspector.querySelector(".empty").hidden = false;
    el.inspector.querySelector(".inspect-body").hidden = true;
  },
  piece(msg) {
    state.replyText += msg.text;
    setMessageText(state.reply, state.replyText);
    scrollToEnd();
  },
  done(msg) {
    finishReply(msg.stopped ? "stopped" : null);
    state.asked = null;
    showStats(msg.stats);
    if (replying()) settle();
  },
  cleared() {
    clearMessages();
    el.stats.textContent = "";
  },
  error(msg) {
    showError(msg.message);
    if (msg.during === "chat") failTurn(msg.message);
    if (msg.during === "load") hideProgress();
    if (msg.during === "load" || replying()) settle();
  },
};
worker.onmessage = (e) => {
  const handle = handlers[e.data.type];
  if (handle) handle(e.data);
  else console.warn("pyengine: unknown message from the worker", e.data);
};

// ---------------------------------------------------------------- loading a model
// Every file goes to the worker as it is: a File is a handle, nothing is read here.
function loadFiles(files) {
  files = Array.from(files);
  if (files.length === 0) return;
  clearError();
  stopReply();
  showProgress(`reading ${files.length > 1 ? `${files.length} files` : files[0].name}`, 0);
  el.progressText.title = files.map((f) => f.name).join("\n");
  setPhase("loading");
  el.weightsNote.textContent = "";
  worker.postMessage({ type: "load", files, weights: el.weights.value });
}
const canLoad = () => !el.fileInput.disabled;

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

// The demo model is a file beside the page (static/models/), described by models/demo.json.
let demo = null;
async function findDemo() {
  try {
    const r = await fetch("models/demo.json", { cache: "no-store" });
    if (!r.ok) return;
    demo = await r.json();
    const detail = document.createElement("small");
    detail.textContent = `${demo.display_name || demo.file} · ${formatBytes(demo.size)}`;
    el.loadDemo.replaceChildren("Load demo model", detail);
    el.loadDemo.hidden = false;
  } catch { /* no demo model (or offline): the button stays hidden */ }
}

async function fetchDemo() {
  if (!canLoad()) return;
  clearError();
  stopReply();
  setPhase("loading");
  try {
    const url = new URL(demo.url || `models/${demo.file}`, location.href);
    const r = await fetch(url);
    if (!r.ok) throw new Error(`HTTP ${r.status} for ${url.pathname}`);
    const total = Number(r.headers.get("content-length")) || demo.size || 0;
    const chunks = [];
    let got = 0;
    for (const reader = r.body.getReader(); ;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      got += value.length;
      showProgress(`downloading ${demo.file}: ${formatBytes(got)} of ${formatBytes(total)}`, total ? got / total : null);
    }
    loadFiles([new File(chunks, demo.file, { type: "application/octet-stream" })]);
  } catch (err) {
    hideProgress();
    showError(`could not fetch the demo model: ${err.message}`);
    settle();
  }
}
el.loadDemo.addEventListener("click", fetchDemo);

// ---------------------------------------------------------------- chat
// The sampling fields, checked against the worker's rules before a message goes: a blank field is an
// error (the seed's blank means a random seed: its rule says so), as is text that is not a number.
const fieldOf = (rule) => byId(rule.name.replace(/_/g, "-"));

function useRules(rules) {
  state.rules = rules || [];
  for (const rule of state.rules) {
    const input = fieldOf(rule);
    input.min = rule.min;
    input.max = rule.max ?? "";
    input.title = `${rule.label}: ${rule.rule}`;
    input.removeAttribute("aria-invalid");
  }
  el.sendError.hidden = true;
}

// One field against its rule: {value} (null: blank, allowed) or {error} in pyengine.browser.settings.check_setting's words.
function checkSetting(rule, input) {
  const text = input.value.trim();
  let shown = null;
  let value = null;
  if (input.validity.badInput) shown = "not a number"; // a number input holds no value for "1e" or "-"
  else if (text === "") shown = rule.blank ? null : "blank";
  else {
    value = Number(text);
    const ok = Number.isFinite(value) && (!rule.whole || Number.isInteger(value))
      && (rule.above ? value > rule.min : value >= rule.min) && (rule.max == null || value <= rule.max);
    if (!ok) shown = text;
  }
  return shown === null ? { value } : { error: `${rule.label} must be ${rule.rule} (it is ${shown})` };
}

// Every field checked: the settings to send, or null after marking the bad fields and showing the first one's error.
function checkSettings() {
  const settings = {};
  let first = null;
  for (const rule of state.rules) {
    const input = fieldOf(rule);
    const { value, error } = checkSetting(rule, input);
    input.setAttribute("aria-invalid", String(Boolean(error)));
    if (error) first ??= error;
    else settings[rule.name] = value;
  }
  el.sendError.textContent = first ? `Not sent: ${first}.` : "";
  el.sendError.hidden = !first;
  scrollToEnd(); // the line takes room from the messages
  return first ? null : settings;
}
document.querySelector(".settings").addEventListener("input", () => {
  if (!el.sendError.hidden) checkSettings(); // the error goes as soon as the field is right
});

function send() {
  const text = el.prompt.value;
  if (!text.trim() || el.send.disabled) return;
  const settings = checkSettings();
  if (!settings) return; // the text stays in the box; the error names the field
  clearError();
  el.prompt.value = "";
  state.asked = addMessage("user", text);
  state.reply = addMessage("assistant", "");
  state.reply.classList.add("streaming");
  state.replyText = "";
  setPhase("generating");
  worker.postMessage({ type: "chat", text, system: el.systemPrompt.value, settings });
}

// A reply that failed: the worker dropped the message and the reply from the conversation, so the page marks
// them failed (an empty reply goes), offers the text again, and shows no statistics of an earlier reply.
function failTurn(message) {
  const asked = state.asked;
  if (state.reply && !state.replyText) state.reply.remove();
  else finishReply("failed");
  state.reply = null;
  state.asked = null;
  el.stats.textContent = "";
  delete el.stats.dataset.stats;
  if (!asked) return;
  addNote(asked, "failed", `failed, not part of the conversation: ${message}`);
  scrollToEnd();
  if (!el.prompt.value) el.prompt.value = asked.querySelector(".body").textContent;
}

// A note under a message: note "stopped" or "failed" (data-note), text in words.
function addNote(li, note, text) {
  li.dataset.note = note;
  const tag = document.createElement("span");
  tag.className = "note";
  tag.textContent = text;
  li.append(tag);
}

function stopReply() {
  if (state.phase !== "generating") return;
  if (interrupt) Atomics.store(interrupt, 0, 2); // SIGINT: KeyboardInterrupt in Python
  worker.postMessage({ type: "stop" });
  setPhase("stopping");
}

function finishReply(note) {
  const li = state.reply;
  if (!li) return;
  li.classList.remove("streaming");
  if (note) addNote(li, note, note === "stopped" ? "stopped" : "failed, not part of the conversation");
  state.reply = null;
}

el.prompt.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});
document.querySelector(".composer").addEventListener("submit", (e) => {
  e.preventDefault();
  send();
});
el.stop.addEventListener("click", stopReply);
el.newChat.addEventListener("click", () => {
  stopReply();
  clearError();
  worker.postMessage({ type: "new-chat" });
});

// ---------------------------------------------------------------- drawing
function addMessage(role, text) {
  el.messages.querySelector(".empty")?.remove();
  const li = document.createElement("li");
  li.className = `message ${role}`;
  li.dataset.testid = "message";
  li.dataset.role = role;
  const who = document.createElement("div");
  who.className = "who";
  who.textContent = role === "user" ? "You" : "Model";
  const body = document.createElement("div");
  body.className = "body";
  li.append(who, body);
  setMessageText(li, text);
  el.messages.append(li);
  scrollToEnd();
  return li;
}
const setMessageText = (li, text) => { li.querySelector(".body").textContent = text; };
const scrollToEnd = () => { el.messages.scrollTop = el.messages.scrollHeight; };

function clearMessages() {
  el.messages.replaceChildren();
  const li = document.createElement("li");
  li.className = "empty";
  li.textContent = state.hasModel ? "Ask the model something." : "Load a model, then ask it something.";
  el.messages.append(li);
  state.reply = null;
  state.asked = null;
}

// Why a reply ended (pyengine.generate.STOP_REASONS), in words.
const STOP_REASONS = { eog: "end of turn", stop_string: "stop string", max_tokens: "token limit",
  context: "context full", stopped: "stopped", error: "error" };

function showStats(s) {
  if (!s) return;
  const parts = [
    `${s.prompt_tokens} prompt tokens${s.cached_tokens ? ` (${s.cached_tokens} cached)` : ""}`,
    `prefill ${s.prefill_tok_s.toFixed(1)} tok/s`,
    `${s.generated_tokens} generated`,
    s.decode_tokens ? `decode ${s.decode_tok_s.toFixed(1)} tok/s` : null,
    `first token ${s.ttft_seconds.toFixed(2)} s`,
    STOP_REASONS[s.stop_reason] || s.stop_reason,
  ];
  el.stats.textContent = parts.filter(Boolean).join(" · ");
  el.stats.dataset.stats = JSON.stringify(s); // the numbers as measured, for scripts (bench/bench_workers.py)
}

function showProgress(text, frac) {
  el.progress.hidden = false;
  el.progressText.textContent = text;
  el.progress.classList.toggle("indeterminate", frac == null);
  el.progressFill.style.width = frac == null ? "" : `${(100 * Math.min(1, frac)).toFixed(1)}%`;
}
const hideProgress = () => { el.progress.hidden = true; };

function formatBytes(n) {
  if (n == null) return "?";
  const units = ["bytes", "KiB", "MiB", "GiB"];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return i === 0 ? `${n} bytes` : `${n.toFixed(n < 10 ? 2 : 1)} ${units[i]}`;
}
const formatCount = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)} M` : `${n}`);
const withCommas = (n) => Number(n).toLocaleString("en-US");

function row(cells, tag = "td") {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement(tag);
    td.textContent = c;
    tr.append(td);
  }
  return tr;
}

// How the model holds its weights (model card), by pyengine.weights.budget.WEIGHT_FORMS key.
const WEIGHT_FORMS = {
  f32: "f32: float32, the fastest, the most memory",
  packed: "packed: int8 codes three to an int64, two thirds of f32's memory",
  mixed: "mixed: packed, the vocabulary partly int8 (under 3x the file)",
  int8: "int8: low memory, slower",
};

function showModelCard(card) {
  el.modelInfo.hidden = false;
  el.modelInfo.querySelector(".model-name").textContent = card.name;
  const fields = [
    ["architecture", card.architecture],
    ["parameters", `${formatCount(card.parameters)} (${withCommas(card.parameters)})`],
    ["quant types", card.quant_types],
    ["context length", `${withCommas(card.context_length)} tokens`],
    ["file size", `${formatBytes(card.file_size)}${card.files.length > 1 ? ` in ${card.files.length} files` : ""}`],
    [card.files.length > 1 ? "files" : "file", card.files.join("\n")],
    ["chat template", card.chat_template],
    ["weights", WEIGHT_FORMS[card.weights] ?? card.weights],
  ];
  const dl = el.modelInfo.querySelector(".card");
  dl.replaceChildren();
  for (const [k, v] of fields) {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v;
    dd.dataset.field = k.replace(" ", "-");
    dl.append(dt, dd);
  }
}

function showInspector(info) {
  el.inspector.querySelector(".empty").hidden = true;
  el.inspector.querySelector(".inspect-body").hidden = false;
  const h = info.header;
  el.inspector.querySelector(".header-line").textContent = `GGUF version ${h.version} · ${withCommas(h.n_kv)} keys · `
    + `${withCommas(h.n_tensors)} tensors · alignment ${h.alignment} · tensor data from byte ${withCommas(h.data_offset)}`;
  el.inspector.querySelector(".parts").replaceChildren(...info.parts.map((p) => drawPart(p, info.parts.length > 1)));
  const meta = el.inspector.querySelector(".meta-table tbody");
  meta.replaceChildren(...info.metadata.slice(0, MAX_ROWS).map((m) => row([m.key, m.type, m.value])));
  el.inspector.querySelector(".meta-count").textContent = `(${shownOf(Math.min(MAX_ROWS, info.metadata.length), h.n_kv)} keys)`;
  el.inspector.querySelector(".types-table tbody").replaceChildren(...info.types.map(
    (t) => row([t.type, withCommas(t.count), withCommas(t.params), `${withCommas(t.bytes)} (${formatBytes(t.bytes)})`])));
  state.tensors = info.tensors.map((t) => ({ ...t, search: `${t.name} ${t.type}`.toLowerCase() }));
  filterTensors();
}

// The tables show at most MAX_ROWS rows: real models have a few hundred tensors, a hostile file
// may claim millions. The search looks through every tensor the worker sent.
const MAX_ROWS = 2000;
const shownOf = (shown, total) => (shown < total ? `${withCommas(shown)} of ${withCommas(total)}` : withCommas(total));

// One file's five sections: a bar with each part as wide as its bytes (at least a sliver), and a table.
function drawPart(part, named) {
  const box = document.createElement("div");
  box.className = "part-box";
  if (named) {
    const title = document.createElement("h3");
    title.textContent = `${part.name} (${formatBytes(part.size)})`;
    box.append(title);
  }
  const bar = document.createElement("div");
  bar.className = "sections-bar";
  const table = document.createElement("table");
  table.className = "sections-table";
  const body = document.createElement("tbody");
  table.append(document.createElement("thead"), body);
  table.tHead.append(row(["part", "bytes", "size"], "th"));
  part.sections.forEach((s, i) => {
    const size = s.end - s.start;
    const piece = document.createElement("div");
    piece.className = `part part-${i}`;
    piece.style.flexGrow = String(size);
    piece.title = `${s.name}: bytes ${withCommas(s.start)}–${withCommas(s.end)} (${formatBytes(size)})`;
    bar.append(piece);
    const tr = row([s.name, `${withCommas(s.start)} – ${withCommas(s.end)}`, formatBytes(size)]);
    tr.firstChild.classList.add(`key-${i}`);
    body.append(tr);
  });
  box.append(bar, table);
  return box;
}

function filterTensors() {
  const q = el.tensorSearch.value.trim().toLowerCase();
  const found = q ? state.tensors.filter((t) => t.search.includes(q)) : state.tensors;
  el.inspector.querySelector(".tensor-table tbody").replaceChildren(...found.slice(0, MAX_ROWS).map(
    (t) => row([t.name, t.shape.join(" × "), t.type, withCommas(t.offset), withCommas(t.n_bytes)])));
  const total = q ? found.length : state.tensors.length;
  el.inspector.querySelector(".tensor-count").textContent = `(${shownOf(Math.min(MAX_ROWS, total), total)}${q ? " found" : ""})`;
}
el.tensorSearch.addEventListener("input", filterTensors);

for (const tab of document.querySelectorAll(".tab")) {
  tab.addEventListener("click", () => {
    for (const t of document.querySelectorAll(".tab")) t.setAttribute("aria-selected", String(t === tab));
    for (const pane of document.querySelectorAll(".tabpane")) pane.hidden = pane.dataset.pane !== tab.dataset.tab;
  });
}

// ---------------------------------------------------------------- start
setPhase("starting");
findDemo();
if ("serviceWorker" in navigator) {
  navigator.serviceWorker.register("./sw.js").catch((err) => console.warn("pyengine: no service worker:", err));
}
