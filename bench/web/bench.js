// The benchmark page's two engines, driven by bench/run.py through Playwright (one engine per page load):
//
//   ?engine=pyengine           pyengine under Pyodide in a module worker (pyengine_worker.js)
//   ?engine=wllama&threads=N   wllama (llama.cpp in wasm), N threads (pthreads need the page cross-origin isolated)
//
//   await bench.boot()                 start the runtime before any file is chosen (wllama has nothing to
//                                      start without a model: its wasm is compiled inside loadModel)
//   Playwright sets the file input     the load starts on "change" and is timed from that event
//   await bench.loaded                 {load_wall_s, ...}: file chosen -> ready
//   await bench.generate(prompt, nGen) greedy, temperature 0, always nGen tokens (end of generation ignored):
//                                      {ttft_wall_s, prefill/decode tokens and seconds, ids or text, memory}
//                                      prompt: token ids for pyengine; text for wllama (its completion API
//                                      takes no ids: bench/run.py passes a text that tokenizes to the same ids)
//
// Times are performance.now() on this page (wall), plus each engine's own timings of its prefill and
// decode (pyengine's TurnStats, llama.cpp server's `timings`).

const params = new URLSearchParams(location.search);
const threads = Number(params.get("threads") || 1);
const seconds = (t0) => (performance.now() - t0) / 1000;

// --- pyengine: a module worker with Pyodide, answering one request at a time
const pyengine = {
  worker: null,
  pending: null,    // {resolve, reject} of the request in flight
  onToken: null,

  request(msg) {
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
      this.worker.postMessage(msg);
    });
  },

  onMessage(msg) {
    if (msg.type === "token") return this.onToken && this.onToken(msg.i);
    const { resolve, reject } = this.pending;
    this.pending = null;
    if (msg.type === "error") reject(new Error(msg.message));
    else resolve(msg.value);
  },

  async boot() {
    this.worker = new Worker("./pyengine_worker.js", { type: "module" });
    this.worker.onmessage = (e) => this.onMessage(e.data);
    this.worker.onerror = (e) => this.pending && this.pending.reject(new Error(e.message));
    return this.request({ type: "boot" });
  },

  load(file) {
    return this.request({ type: "load", file });
  },

  async generate(ids, nGen) {
    const t0 = performance.now();
    let first = null;
    this.onToken = (i) => { if (first === null) first = seconds(t0); };
    const result = await this.request({ type: "generate", ids, n_gen: nGen });
    return { ...result, ttft_wall_s: first, total_wall_s: seconds(t0) };
  },
};

// --- wllama: its wasm memory is read through hooks put in front of its worker's code (the worker is
// a module made from a string, so nothing in it is reachable from outside): every WebAssembly.Memory
// made or exported there is kept, and their sizes are broadcast to the page every 200 ms (when the
// worker is idle) on the BroadcastChannel "bench-memory", so nothing has to evaluate in wllama's workers.
const MEMORY_HOOKS = `
self.__benchMemories = [];
{
  const channel = new BroadcastChannel("bench-memory");
  setInterval(() => channel.postMessage(self.__benchMemories.map((m) => m.buffer.byteLength)), 200);
  const Memory = WebAssembly.Memory;
  const Hooked = function (desc) { const m = new Memory(desc); self.__benchMemories.push(m); return m; };
  Hooked.prototype = Memory.prototype;
  WebAssembly.Memory = Hooked;
  const keep = (result) => {
    const instance = result.instance || result;
    for (const v of Object.values(instance.exports || {})) if (v instanceof Memory) self.__benchMemories.push(v);
    return result;
  };
  const instantiate = WebAssembly.instantiate, streaming = WebAssembly.instantiateStreaming;
  WebAssembly.instantiate = (...a) => instantiate(...a).then(keep);
  if (streaming) WebAssembly.instantiateStreaming = (...a) => streaming(...a).then(keep);
}
`;

function hookWllamaWorker() {
  const NativeBlob = self.Blob;
  self.Blob = class extends NativeBlob {
    constructor(parts, options) {
      const code = parts && parts.length === 1 && typeof parts[0] === "string" ? parts[0] : "";
      super(code.startsWith("const RUN_OPTIONS") ? [MEMORY_HOOKS, code] : parts, options);
    }
  };
}

let wllamaMemory = null;   // the largest wasm memory of wllama's worker, bytes, as last broadcast
new BroadcastChannel("bench-memory").onmessage = (e) => { wllamaMemory = Math.max(0, ...e.data); };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const wllama = {
  instance: null,

  async boot() {
    hookWllamaWorker();
    const { Wllama } = await import("/wllama/index.js");
    this.instance = new Wllama({ default: "/wllama/wasm/wllama.wasm" }, { suppressNativeLog: true });
    return {};
  },

  async load(file) {
    await this.instance.loadModel([file], { n_ctx: 1024, n_threads: threads, n_gpu_layers: 0 });
    return { threads: this.instance.getNumThreads(), multithread: this.instance.isMultithread() };
  },

  async generate(prompt, nGen) {
    const t0 = performance.now();
    let first = null, timings = null, text = "", chunks = 0;
    await this.instance.createCompletion({
      prompt, max_tokens: nGen, temperature: 0, ignore_eos: true, cache_prompt: false,
      stream: true,
      onData: (chunk) => {
        if (first === null) first = seconds(t0);
        chunks += 1;
        if (chunk.timings) timings = chunk.timings;
        for (const c of chunk.choices || []) text += c.text || "";
      },
    });
    const t = timings || {}, total = seconds(t0);
    await sleep(500);   // a broadcast from the idle worker
    return {
      ttft_wall_s: first, total_wall_s: total, chunks, text, wasm_heap_bytes: wllamaMemory,
      prompt_tokens: t.prompt_n, prefill_tokens: t.prompt_n, prefill_seconds: t.prompt_ms / 1000,
      // llama-server's prompt time ends when the first token is sampled, its predicted time runs from
      // there to the last token: predicted_n - 1 decode passes, as pyengine's decode_tokens count them.
      generated_tokens: t.predicted_n, decode_tokens: t.predicted_n - 1, decode_seconds: t.predicted_ms / 1000,
      prefill_tok_s: t.prompt_per_second, decode_tok_s: (t.predicted_n - 1) / (t.predicted_ms / 1000), timings: t,
    };
  },
};

// --- the page: one engine, the file input, the load timed from "change"
const engine = { pyengine, wllama }[params.get("engine")];
const input = document.getElementById("file");
let loadDone, loadFailed;
const loaded = new Promise((resolve, reject) => { loadDone = resolve; loadFailed = reject; });
input.addEventListener("change", () => {
  const t0 = performance.now();
  engine.load(input.files[0]).then((extra) => loadDone({ load_wall_s: seconds(t0), ...extra }), loadFailed);
});

window.bench = {
  engine: params.get("engine"),
  isolated: self.crossOriginIsolated,
  boot: () => engine.boot(),
  loaded,
  generate: (prompt, nGen) => engine.generate(prompt, nGen),
};
