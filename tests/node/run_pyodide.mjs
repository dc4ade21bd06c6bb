// Run a Python snippet with pyengine under Pyodide in Node, from the built static/ folder, and print its
// value as JSON.
//
//   node tests/node/run_pyodide.mjs [--static DIR] [--kernel FILE] [--mount HOSTDIR:/mnt/point]...
//        [--code 'python' | < snippet.py]
//
// 1. loadPyodide from static/pyodide/ (the npm core; nothing is fetched from the network),
// 2. loadPackage of static/wheels/manifest.json's pyodide_packages (numpy: its wheel sits beside the lock file),
// 3. loadPackage of each wheel in the manifest, in order, after checking its sha256 (no dependency resolution),
// 4. write static/kernel/pyengine_kernel.so (pyengine's C kernel; --kernel: another build in static/kernel/,
//    e.g. pyengine_kernel_relaxed.so, which needs node --experimental-wasm-relaxed-simd) where Python loads it,
//    its name in PYENGINE_KERNEL_NAME as the page sets it, and register
//    static/meeting.js and static/file_read.js as the modules pyengine_meeting and pyengine_file, as the page does,
// 5. mount each host folder into Pyodide's FS with NODEFS (models are read through plain open/seek/read),
// 6. run the snippet; the value of its last expression, through json.dumps, is the one line on stdout.
// Python's print() goes to stderr, so stdout stays parseable. A Python error exits 1 with its traceback.

import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const args = { staticDir: path.resolve(here, "../../static"), kernel: "pyengine_kernel.so", mounts: [], code: null };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = argv[++i];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === "--static") args.staticDir = path.resolve(value);
    else if (flag === "--kernel") args.kernel = path.basename(value);
    else if (flag === "--mount") {
      const at = value.lastIndexOf(":");
      args.mounts.push({ host: path.resolve(value.slice(0, at)), point: value.slice(at + 1) });
    } else if (flag === "--code") args.code = value;
    else throw new Error(`unknown argument ${flag}`);
  }
  return args;
}

function sha256(file) {
  return createHash("sha256").update(readFileSync(file)).digest("hex");
}

async function startPyodide(staticDir, kernelName) {
  const indexURL = path.join(staticDir, "pyodide") + path.sep;
  const { loadPyodide } = await import(pathToFileURL(path.join(indexURL, "pyodide.mjs")).href);
  const quiet = () => {};
  const env = { PYENGINE_KERNEL_NAME: kernelName };
  const pyodide = await loadPyodide({ indexURL, packageCacheDir: indexURL, stdout: quiet, stderr: quiet, env });
  pyodide.setStdout({ batched: (line) => process.stderr.write(line + "\n") });
  pyodide.setStderr({ batched: (line) => process.stderr.write(line + "\n") });

  const wheelsDir = path.join(staticDir, "wheels");
  const manifest = JSON.parse(readFileSync(path.join(wheelsDir, "manifest.json"), "utf8"));
  await pyodide.loadPackage(manifest.pyodide_packages, { messageCallback: quiet });
  for (const wheel of manifest.wheels) {
    const file = path.join(wheelsDir, wheel.file);
    const digest = sha256(file);
    if (digest !== wheel.sha256) throw new Error(`${wheel.file}: sha256 ${digest} != manifest ${wheel.sha256}`);
    await pyodide.loadPackage(file, { messageCallback: quiet });
  }
  // loadPackage reports a failed download and carries on: check that every package is really there.
  const missing = [...manifest.pyodide_packages, ...manifest.wheels.map((w) => w.name)]
    .filter((name) => !(name in pyodide.loadedPackages));
  if (missing.length) throw new Error(`packages not loaded: ${missing.join(", ")}`);
  const kernel = path.join(staticDir, "kernel", kernelName);
  if (existsSync(kernel)) pyodide.FS.writeFile("/lib/pyengine_kernel.so", readFileSync(kernel));
  const { registerMeeting } = await import(pathToFileURL(path.join(staticDir, "meeting.js")).href);
  registerMeeting(pyodide);
  const { registerFileRead } = await import(pathToFileURL(path.join(staticDir, "file_read.js")).href);
  registerFileRead(pyodide);
  return pyodide;
}

function mount(pyodide, { host, point }) {
  pyodide.FS.mkdirTree(point);
  pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: host }, point);
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const code = args.code ?? (await readStdin());
  const t0 = performance.now();
  const pyodide = await startPyodide(args.staticDir, args.kernel);
  process.stderr.write(`pyodide ${pyodide.version} ready in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
  args.mounts.forEach((m) => mount(pyodide, m));
  pyodide.globals.set("_harness_code", code);
  const result = await pyodide.runPythonAsync(`
import json
from pyodide.code import eval_code_async
json.dumps(await eval_code_async(_harness_code, {"__name__": "__main__"}))
`);
  process.stdout.write(result + "\n");
}

main().catch((err) => {
  process.stderr.write(String(err && err.message ? err.message : err) + "\n");
  process.exit(1);
});
