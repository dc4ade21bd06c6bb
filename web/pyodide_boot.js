// @ts-check
// Python for a worker: Pyodide 0.27.7 from ./pyodide/, numpy and the wheels listed in
// wheels/manifest.json (pyengine, jinja2, markupsafe), and pyengine's C kernel. worker.js (the main
// worker) and shard_worker.js (its helpers) both start Python through this one function.
import { loadPyodide } from "./pyodide/pyodide.mjs";
import { registerFileRead } from "./file_read.js";
import { registerMeeting } from "./meeting.js";

// (module (func (result v128) v128.const 0)): valid where the browser runs WebAssembly SIMD128
const SIMD128 = new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 5, 1, 0x60, 0, 1, 0x7b, 3, 2, 1, 0,
  0x0a, 0x16, 1, 0x14, 0, 0xfd, 0x0c, ...new Array(16).fill(0), 0x0b]);
// (module (func (result v128) (i16x8.relaxed_dot_i8x16_i7x16_s (v128.const 0) (v128.const 0)))): valid
// where the browser runs relaxed SIMD
const RELAXED = new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 5, 1, 0x60, 0, 1, 0x7b, 3, 2, 1, 0,
  0x0a, 0x2b, 1, 0x29, 0, 0xfd, 0x0c, ...new Array(16).fill(0), 0xfd, 0x0c, ...new Array(16).fill(0),
  0xfd, 0x92, 0x02, 0x0b]);
export const KERNEL_PATH = "/lib/pyengine_kernel.so"; // pyengine.weights.kernel.WASM_PATH

async function fetchBytes(name) {
  try {
    const r = await fetch(new URL(`./kernel/${name}`, import.meta.url));
    if (!r.ok) return { why: `kernel/${name}: HTTP ${r.status} (make build)` };
    return { bytes: new Uint8Array(await r.arrayBuffer()), name };
  } catch (err) {
    return { why: `kernel/${name}: ${err.message || err}` };
  }
}

// pyengine's C kernel, a wasm side module (build_scripts/build_kernel.py): the relaxed-SIMD build where the
// browser validates a relaxed instruction, else the SIMD128 one. Resolves to {bytes, name} or {why} (the
// browser lacks SIMD, or no file could be had).
async function fetchKernel() {
  if (!WebAssembly.validate(SIMD128)) return { why: "this browser has no WebAssembly SIMD" };
  if (WebAssembly.validate(RELAXED)) {
    const relaxed = await fetchBytes("pyengine_kernel_relaxed.so");
    if (relaxed.bytes) return relaxed;
  }
  return fetchBytes("pyengine_kernel.so");
}

// stage(text) is told what is happening; resolves to the started pyodide.
/** @param {(text: string) => void} [stage] */
export async function bootPython(stage = () => {}) {
  stage("starting Python");
  const manifest = fetch(new URL("./wheels/manifest.json", import.meta.url)).then((r) => r.json());
  const kernel = await fetchKernel();
  // Python reads the kernel from KERNEL_PATH when it first multiplies; why there is none, from its env
  const env = kernel.bytes ? { PYENGINE_KERNEL_NAME: kernel.name } : { PYENGINE_KERNEL_WHY: kernel.why };
  const pyodide = await loadPyodide({ indexURL: new URL("./pyodide/", import.meta.url).href, env });
  if (kernel.bytes) pyodide.FS.writeFile(KERNEL_PATH, kernel.bytes);
  registerMeeting(pyodide);
  registerFileRead(pyodide);
  stage("loading numpy and pyengine");
  // One call: Pyodide fetches and unpacks numpy (from its lock file) and our wheels side by side.
  const { pyodide_packages: packages, wheels } = await manifest;
  const urls = wheels.map((w) => new URL(`./wheels/${w.file}`, import.meta.url).href);
  await pyodide.loadPackage([...packages, ...urls], { messageCallback: () => {} });
  return pyodide;
}

// Bytes of this worker's WebAssembly memory (it only grows: the peak so far).
export const heapBytes = (pyodide) => pyodide._module.HEAPU8.length;
