// Python for a worker: Pyodide 0.27.7 from ./pyodide/, numpy and the wheels listed in
// wheels/manifest.json (pyengine, jinja2, markupsafe). worker.js (the main worker) and
// shard_worker.js (its helpers) both start Python through this one function.
import { loadPyodide } from "./pyodide/pyodide.mjs";

// stage(text) is told what is happening; resolves to the started pyodide.
export async function bootPython(stage = () => {}) {
  stage("starting Python");
  const manifest = fetch(new URL("./wheels/manifest.json", import.meta.url)).then((r) => r.json());
  const pyodide = await loadPyodide({ indexURL: new URL("./pyodide/", import.meta.url).href });
  stage("loading numpy and pyengine");
  // One call: Pyodide fetches and unpacks numpy (from its lock file) and our wheels side by side.
  const { pyodide_packages: packages, wheels } = await manifest;
  const urls = wheels.map((w) => new URL(`./wheels/${w.file}`, import.meta.url).href);
  await pyodide.loadPackage([...packages, ...urls], { messageCallback: () => {} });
  return pyodide;
}

// Bytes of this worker's WebAssembly memory (it only grows: the peak so far).
export const heapBytes = (pyodide) => pyodide._module.HEAPU8.length;
