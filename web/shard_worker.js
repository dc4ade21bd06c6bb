// @ts-check
// A helper worker: started by worker.js when the page is cross-origin isolated and more than one
// worker is chosen. It holds its shard of the model (some attention heads, FFN units and
// vocabulary rows) and runs every forward pass in step with the main worker, meeting the others
// through shared memory (pyengine/parallel has the protocol): no message per token.
//   in:  {type: "load", files, plan, index, sab}  (files: the same File objects as the main worker's)
//   out: {type: "booted"} | {type: "boot-error", message}
//        {type: "ready", bytes, heap} once its shard is loaded (then it serves until told to exit)
//        {type: "error", message} when the load failed;  {type: "exited"} after the serving loop
import { bootPython, heapBytes } from "./pyodide_boot.js";
/** @typedef {import("./app/messages.js").HelperLoad} HelperLoad */

/** @param {import("./app/messages.js").HelperMessage} msg */
const post = (msg) => self.postMessage(msg);
/** @type {import("./pyodide/pyodide.mjs").PyodideAPI} */
let pyodide = null;
/** @type {import("./pyodide/pyodide.mjs").PyProxy} */
let shard = null; // the pyengine.browser.shared_memory module

const booting = bootPython().then((py) => {
  pyodide = py;
  shard = py.pyimport("pyengine.browser.shared_memory");
  post({ type: "booted" });
}).catch((err) => post({ type: "boot-error", message: `${err.message || err}` }));

/** @param {MessageEvent<HelperLoad>} e */
self.onmessage = async (e) => {
  const msg = e.data;
  if (msg.type !== "load") return;
  await booting;
  if (!shard) return post({ type: "error", message: "Python did not start in this worker" });
  const words = shard.dead_words(msg.index).toJs({ dict_converter: Object.fromEntries });
  try {
    // Blocks this worker until the main worker sends EXIT (a new model, or a failed load elsewhere).
    shard.serve_helper(msg.files, msg.plan, msg.index, msg.sab,
      (bytes) => post({ type: "ready", bytes, heap: heapBytes(pyodide) }), () => heapBytes(pyodide));
    post({ type: "exited" });
  } catch (err) {
    markDead(msg.sab, words);
    post({ type: "error", message: `${err.message || err}` });
  }
};

// Python left its loop for good (killed, or a fatal error): say so in the shared buffer, so the main
// worker's next meeting fails at once instead of waiting for this worker (pyengine.parallel.channel.mark_dead).
function markDead(sab, words) {
  const ctl = new Int32Array(sab);
  Atomics.store(ctl, words.fail, words.value);
  Atomics.notify(ctl, words.gen);
  Atomics.notify(ctl, words.done);
}
