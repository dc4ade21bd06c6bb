// The module worker: starts Python (Pyodide 0.27.7) with numpy, installs the wheels
// listed in wheels/manifest.json (pyengine, jinja2, markupsafe), then hands every
// command from the page to pyengine.worker, one at a time. Python posts its replies
// (progress, text pieces, errors) straight to the page with postMessage.
import { loadPyodide } from "./pyodide/pyodide.mjs";

const post = (msg) => self.postMessage(msg);
let interrupt = null;      // Int32Array on a SharedArrayBuffer, when the page is cross-origin isolated
let stopRequested = false; // set by a "stop" message; Python reads it between tokens
let glue = null;           // the pyengine.worker module, once Python is up

async function boot() {
  const t0 = performance.now();
  post({ type: "boot", stage: "starting Python" });
  const manifest = fetch("./wheels/manifest.json").then((r) => r.json());
  const pyodide = await loadPyodide({ indexURL: new URL("./pyodide/", import.meta.url).href });
  post({ type: "boot", stage: "loading numpy and pyengine" });
  // One call: Pyodide fetches and unpacks numpy (from its lock file) and our wheels side by side.
  const { pyodide_packages: packages, wheels } = await manifest;
  const urls = wheels.map((w) => new URL(`./wheels/${w.file}`, import.meta.url).href);
  await pyodide.loadPackage([...packages, ...urls], { messageCallback: () => {} });
  if (interrupt) pyodide.setInterruptBuffer(interrupt);
  glue = pyodide.pyimport("pyengine.worker");
  glue.setup(post, () => stopRequested, interrupt !== null);
  post({ type: "booted", seconds: (performance.now() - t0) / 1000, isolated: self.crossOriginIsolated });
}

// Commands run in order; "stop" must not wait in that line, since the command it stops is
// the one running. With the interrupt buffer, Stop is the page's SIGINT (KeyboardInterrupt
// in Python); without it, Python yields to this event loop between tokens to let "stop" in.
let line = boot().catch((err) => post({ type: "boot-error", message: `Python did not start: ${err.message || err}` }));

self.onmessage = (e) => {
  const msg = e.data;
  if (msg.type === "init") {
    interrupt = msg.interrupt;
  } else if (msg.type === "stop") {
    stopRequested = true; // no Python here: a SIGINT may be pending in the buffer
  } else {
    line = line.then(() => run(msg));
  }
};

async function run(msg) {
  if (!glue) return post({ type: "error", during: msg.type, message: "Python is not running (see the error above)" });
  // A Stop that came after the last reply ended must not hit this command.
  stopRequested = false;
  if (interrupt) Atomics.store(interrupt, 0, 0);
  try {
    await glue.handle(msg);
  } catch (err) {
    // pyengine.worker turns every Python exception into an error message; this is the last resort.
    post({ type: "error", during: msg.type, message: `internal error: ${err.message || err}` });
  }
}
