// pyengine's benchmark worker: Pyodide, numpy and the wheels from static/ started as web/worker.js starts
// them, then bench/pyengine_bench.py (the code CPython and Node run too) on the File the page chose.
//
// Requests from bench.js, one at a time; each answers {type: "reply", value} or {type: "error", message}:
//   {type: "boot"}                      -> {boot_s, heap_bytes}    (before any file is chosen)
//   {type: "load", file}                -> {load_s, heap_bytes}    (pyengine.browser.worker's load on a BrowserFileSource)
//   {type: "generate", ids, n_gen}      -> TurnStats + ids + wasm_heap_bytes; a {type: "token", i} per token
import { bootPython } from "/pyodide_boot.js";

let pyodide = null;
const heapBytes = () => pyodide._module.HEAP8.length;

async function boot() {
  const t0 = performance.now();
  pyodide = await bootPython();     // as web/worker.js: the wheels and the C kernel the browser runs
  pyodide.FS.mkdirTree("/bench");
  pyodide.FS.writeFile("/bench/pyengine_bench.py", await (await fetch("/bench/pyengine_bench.py")).text());
  pyodide.runPython("import sys; sys.path.insert(0, '/bench'); import pyengine_bench");
  return { boot_s: (performance.now() - t0) / 1000, heap_bytes: heapBytes() };
}

async function load(file) {
  pyodide.globals.set("_file", file);
  const loadS = await pyodide.runPythonAsync(`
from pyengine.browser.file_source import BrowserFileSource
_engine, _load_s = await pyengine_bench.load([BrowserFileSource(_file)])
_load_s`);
  return { load_s: loadS, heap_bytes: heapBytes() };
}

self.benchToken = (i) => self.postMessage({ type: "token", i });

function generate(ids, nGen) {
  pyodide.globals.set("_ids", pyodide.toPy(ids));
  pyodide.globals.set("_n_gen", nGen);
  return JSON.parse(pyodide.runPython(`
import js, json
json.dumps({**pyengine_bench.run_greedy(_engine, list(_ids), _n_gen, js.benchToken), **pyengine_bench.peak_memory_bytes()})`));
}

self.onmessage = async (e) => {
  const msg = e.data;
  try {
    let value;
    if (msg.type === "boot") value = await boot();
    else if (msg.type === "load") value = await load(msg.file);
    else if (msg.type === "generate") value = generate(msg.ids, msg.n_gen);
    else throw new Error(`unknown request ${msg.type}`);
    self.postMessage({ type: "reply", value });
  } catch (err) {
    self.postMessage({ type: "error", message: String(err && err.message ? err.message : err) });
  }
};
