// @ts-check
// The module worker: starts Python (Pyodide 0.27.7) with numpy and the wheels (pyodide_boot.js),
// then hands every command from the page to pyengine.browser.worker, one at a time. Python posts its
// replies (progress, text pieces, errors) straight to the page with postMessage.
// When the page is cross-origin isolated and more than one worker is chosen, this worker also
// starts the helper workers (shard_worker.js) that each hold a share of the model's heads, FFN units
// and vocabulary (pyengine/parallel).
import { bootPython, heapBytes } from "./pyodide_boot.js";
/** @typedef {import("./app/messages.js").Command} Command */
/** @typedef {import("./app/messages.js").HelperLoad} HelperLoad */
/** @typedef {import("./app/messages.js").HelperMessage} HelperMessage */
/** @typedef {{ok: boolean, message?: string, bytes?: number, heap?: number}} ShardLoaded a helper's load */
/** @typedef {{worker: Worker, booted?: Promise<string | null>, failed: string | null}} Shard */

/** @param {import("./app/messages.js").WorkerMessage} msg what this file posts; Python posts the others */
const post = (msg) => self.postMessage(msg);
/** @type {Int32Array | null} */
let interrupt = null;      // Int32Array on a SharedArrayBuffer, when the page is cross-origin isolated
let stopRequested = false; // set by a "stop" message; Python reads it between tokens
/** @type {import("./pyodide/pyodide.mjs").PyProxy} */
let glue = null;           // the pyengine.browser.worker module, once Python is up
/** @type {import("./pyodide/pyodide.mjs").PyodideAPI} */
let pyodide = null;
/** @type {(value?: unknown) => void} */
let setup = null;          // resolves when "init" came (the interrupt buffer and the worker count)
const inited = new Promise((resolve) => { setup = resolve; });

const SHARD_MS = 600_000;  // a helper that has not booted and loaded its shard by then is given up

// The helper workers. wanted: workers in all (the page's setting; 1 when not isolated).
// A change applies at the next load: Python sends the old helpers out of their loop first.
const pool = {
  wanted: 1,
  /** @type {Shard[]} */
  shards: [], // {worker, booted: Promise<string|null> (null: ok, else the error), failed}
  spawn() {
    const worker = new Worker(new URL("./shard_worker.js", import.meta.url), { type: "module" });
    /** @type {Shard} */
    const shard = { worker, failed: null }; // failed: why it cannot start, once known
    shard.booted = new Promise((resolve) => {
      /** @param {MessageEvent<HelperMessage>} e */
      worker.onmessage = (e) => {
        if (e.data.type === "booted") resolve(null);
        else if (e.data.type === "boot-error") resolve((shard.failed = `Python did not start: ${e.data.message}`));
      };
      worker.onerror = (e) => {
        e.preventDefault(); // handled here: not an error of this worker for the page to see
        resolve((shard.failed = `could not start: ${e.message || "see the console"}`));
      };
    });
    return shard;
  },
  // Python: the page's helpers started; resolves to each one's failure (null: it runs Python).
  start() {
    this.resize();
    const late = new Promise((resolve) => setTimeout(() => resolve("did not start in time"), SHARD_MS));
    return Promise.all(this.shards.map((s) => Promise.race([s.booted, late])));
  },
  // Python: keep ``workers`` workers in all (helpers: one fewer), default the page's setting.
  /** @param {number} [workers] */
  resize(workers) {
    const n = self.crossOriginIsolated ? Math.max(0, (workers ?? this.wanted) - 1) : 0;
    for (const s of this.shards.splice(n)) s.worker.terminate();
    while (this.shards.length < n) this.shards.push(this.spawn());
  },
  // Python: how many helpers the next load may use.
  size() { return self.crossOriginIsolated ? Math.max(0, this.wanted - 1) : 0; },
  // Python: helpers 1..count load their shards of the plan; resolves to [{ok, message, bytes, heap}] in order.
  /** @param {File[]} files @param {object} plan @param {SharedArrayBuffer} sab @param {number} count */
  load(files, plan, sab, count) {
    this.resize(count + 1);
    return Promise.all(this.shards.map((s, i) => loadShard(s, { type: "load", files, plan, index: i + 1, sab })));
  },
  // Python: the helpers that failed are replaced at the next load.
  /** @param {Iterable<number>} failed the helpers' indices */
  drop(failed) {
    for (const i of [...failed].sort((a, b) => b - a)) this.shards.splice(i, 1)[0]?.worker.terminate();
  },
};

// Posted at once, while Python still runs (the helper waits for its own Python to start): every
// worker then reads its shard at the same time as this one.
/** @param {Shard} s @param {HelperLoad} msg @returns {Promise<ShardLoaded>} */
function loadShard(s, msg) {
  if (s.failed) return Promise.resolve({ ok: false, message: s.failed });
  /** @type {Promise<ShardLoaded>} */
  const answer = new Promise((resolve) => {
    /** @param {MessageEvent<HelperMessage>} e */
    s.worker.onmessage = (e) => {
      const m = e.data;
      if (m.type === "ready") resolve({ ok: true, bytes: m.bytes, heap: m.heap });
      else if (m.type === "error") resolve({ ok: false, message: m.message.trim().split("\n").pop() });
      else if (m.type === "boot-error") resolve({ ok: false, message: `Python did not start: ${m.message}` });
    };
    s.worker.onerror = (e) => {
      e.preventDefault();
      resolve({ ok: false, message: e.message || "the worker died" });
    };
  });
  s.worker.postMessage(msg);
  const timeout = new Promise((resolve) => setTimeout(() => resolve("did not answer in time"), SHARD_MS));
  return Promise.race([answer, timeout]).then((got) => (typeof got === "string" ? { ok: false, message: got } : got));
}

async function boot() {
  const t0 = performance.now();
  await inited;
  pool.resize(); // the helpers start Python beside this one
  pyodide = await bootPython((stage) => post({ type: "boot", stage }));
  if (interrupt) pyodide.setInterruptBuffer(interrupt);
  glue = pyodide.pyimport("pyengine.browser.worker");
  glue.setup(post, () => stopRequested, interrupt !== null, pool, () => heapBytes(pyodide));
  post({ type: "booted", seconds: (performance.now() - t0) / 1000, isolated: self.crossOriginIsolated,
         workers: 1 + pool.size(), page: glue.page_data() });
}

// Commands run in order; "stop" must not wait in that line, since the command it stops is
// the one running. With the interrupt buffer, Stop is the page's SIGINT (KeyboardInterrupt
// in Python); without it, Python yields to this event loop between tokens to let "stop" in.
let line = boot().catch((err) => post({ type: "boot-error", message: `Python did not start: ${err.message || err}` }));

/** @param {MessageEvent<Command>} e */
self.onmessage = (e) => {
  const msg = e.data;
  if (msg.type === "init") {
    interrupt = msg.interrupt;
    pool.wanted = msg.workers || 1;
    setup();
  } else if (msg.type === "workers") {
    pool.wanted = msg.workers; // from the next load on
  } else if (msg.type === "stop") {
    stopRequested = true; // no Python here: a SIGINT may be pending in the buffer
  } else {
    line = line.then(() => run(msg));
  }
};

/** @param {Command} msg */
async function run(msg) {
  if (!glue) return post({ type: "error", during: msg.type, message: "Python is not running (see the error above)" });
  // A Stop that came after the last reply ended must not hit this command.
  stopRequested = false;
  if (interrupt) Atomics.store(interrupt, 0, 0);
  try {
    await glue.handle(msg);
  } catch (err) {
    // pyengine.browser.worker turns every Python exception into an error message; this is the last resort.
    post({ type: "error", during: msg.type, message: `internal error: ${err.message || err}` });
  }
}
