// @ts-check
// The workers' sums (pyengine.parallel.channel.Channel.all_reduce) in one call from Python each. A call
// through Pyodide's proxies costs microseconds, and a meeting made of Atomics and typed-array calls from
// Python took about twenty of them; a decode step meets twice a layer. Python imports this as the module
// `pyengine_meeting` (pyodide_boot.js registers it) and falls back to its own calls where it is missing.
//
// The protocol is channel.py's: a worker writes its partial sums to its slot, arrives at the barrier
// (ctl[STAMP + index] = gen + 1; the last of ctl[COUNT] to arrive resets it and moves ctl[GEN] on), then
// adds every worker's slot in worker order. Addresses are byte offsets into Pyodide's wasm memory.

const SPIN_MS = 2; // milliseconds a wait spins at most before it sleeps ...
const MIN_SPIN_MS = 0.05; // ... and at least

// The Float32Array of n floats at byte address `address` of Pyodide's memory (looked up at every call:
// the memory's buffer changes when it grows).
const heapFloats = (pyodide, address, n) => new Float32Array(pyodide._module.HEAPU8.buffer, address, n);

// Make `import pyengine_meeting` work in this Pyodide: its block(sab, gen, count, stamp, dataAt) is
// meetingBlock's.
export function registerMeeting(pyodide) {
  pyodide.registerJsModule("pyengine_meeting", {
    block: (sab, gen, count, stamp, dataAt) => meetingBlock(pyodide, sab, { gen, count, stamp }, dataAt),
  });
}

// words: {gen, count, stamp} (control word indices, channel.py's GEN, COUNT, STAMP); dataAt: the float
// index where the data starts (after the control words).
export function meetingBlock(pyodide, sab, words, dataAt) {
  const ctl = new Int32Array(sab, 0, dataAt);
  const data = new Float32Array(sab, 4 * dataAt);
  // Sleep while ctl[i] is v, at most ms; returns ctl[i]. Spins first: a worker put to sleep by
  // Atomics.wait wakes late after the notify (in Chromium on 2 cores, a small model's decode step lost
  // 0.3 ms a meeting that way), and a decode step meets every half millisecond or so. But a spin holds a
  // core: when other work wants the CPU too, the worker awaited may be the one it keeps waiting (Gemma 3
  // in 2 workers beside one busy process: 130 ms a token spinning 2 ms, 64-79 spinning 0.1 ms). So the spin
  // halves after a wait it did not cover (down to MIN_SPIN_MS) and doubles after one it did (up to SPIN_MS).
  let spin = SPIN_MS;
  const wait = (i, v, ms) => {
    const until = performance.now() + spin;
    while (Atomics.load(ctl, i) === v) {
      for (let k = 0; k < 256 && Atomics.load(ctl, i) === v; k++);
      if (performance.now() > until) break;
    }
    const covered = Atomics.load(ctl, i) !== v;
    spin = covered ? Math.min(SPIN_MS, 2 * spin) : Math.max(MIN_SPIN_MS, spin / 2);
    if (!covered) Atomics.wait(ctl, i, v, ms);
    return Atomics.load(ctl, i);
  };
  return {
    wait,
    // Write the n floats at `from` to data[mine ..], arrive at the barrier and wait there at most `ms`.
    // Once every worker has arrived, sum the count slots of `size` floats from data[slots ..] in worker
    // order into the n floats at `to` and return -1; else return the generation still awaited (Python
    // then waits as Channel.barrier does, watching for a Stop or a failed worker, and sums itself).
    sum(from, n, mine, slots, size, index, count, to, ms) {
      data.set(heapFloats(pyodide, from, n), mine);
      const gen = Atomics.load(ctl, words.gen);
      Atomics.store(ctl, words.stamp + index, gen + 1);
      if (Atomics.add(ctl, words.count, 1) === count - 1) {  // the last to arrive
        Atomics.store(ctl, words.count, 0);
        Atomics.store(ctl, words.gen, gen + 1);
        Atomics.notify(ctl, words.gen);
      } else if (wait(words.gen, gen, ms) === gen) {
        return gen;
      }
      const out = heapFloats(pyodide, to, n);
      out.set(data.subarray(slots, slots + n));
      for (let w = 1; w < count; w++) {
        const part = data.subarray(slots + w * size, slots + w * size + n);
        for (let i = 0; i < n; i++) out[i] += part[i]; // float32 sums: a Float32Array rounds each store
      }
      return -1;
    },
  };
}
