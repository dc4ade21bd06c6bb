// @ts-check
// The Web Worker that runs Python (worker.js, then pyengine.browser.worker): started here, sent the
// page's commands through `worker`, and each message it posts handed to the handler of its type.
// pyengine/browser/worker.py lists the commands and their replies; messages.js has their types.
/** @typedef {import("./messages.js").Command} Command */
/** @typedef {import("./messages.js").Handlers} Handlers */
/** @typedef {import("./messages.js").WorkerMessage} WorkerMessage */
/** @typedef {import("./messages.js").ChatMessage} ChatMessage */

// Cross-origin isolated (COOP/COEP headers): Stop writes SIGINT (2) into shared memory that Python
// polls, so even a long matmul stops at once, and helper workers can share the model. Otherwise the
// worker's reply loop yields between tokens and sees the "stop" message.
export const isolated = self.crossOriginIsolated;

/** @type {Worker} */
let thread = null;     // the Worker
/** @type {Int32Array | null} */
let interrupt = null;  // Int32Array on a SharedArrayBuffer when isolated, else null
/** @type {{handlers: Handlers, onFailure: (text: string) => void, workers: number}} */
let started = null;    // the arguments of start, for restart

/** @param {Command} msg */
const post = (msg) => thread.postMessage(msg);

export const worker = {
  // handlers: message type -> function(msg); onFailure(text): the worker itself could not run.
  // workers: how many workers compute the model (the Workers setting: one of its options).
  /** @param {Handlers} handlers @param {(text: string) => void} onFailure @param {number} workers */
  start(handlers, onFailure, workers) {
    started = { handlers, onFailure, workers };
    thread = new Worker("./worker.js", { type: "module" });
    interrupt = isolated ? new Int32Array(new SharedArrayBuffer(4)) : null;
    thread.onerror = (e) => onFailure(e.message || "could not start (see the browser console)");
    /** @param {MessageEvent<WorkerMessage>} e */
    thread.onmessage = (e) => {
      const handle = /** @type {(msg: WorkerMessage) => void} */ (handlers[e.data.type]); // the handler of its type
      if (handle) handle(e.data);
      else console.warn("pyengine: unknown message from the worker", e.data);
    };
    post({ type: "init", interrupt, workers });
  },
  // Every file goes as it is: a File is a handle, nothing is read on the page.
  /** @type {(files: File[], weights: string) => void} */
  load: (files, weights) => post({ type: "load", files, weights }),
  // settings: name -> the text typed; badInput: the names of the fields the browser found no number in.
  /** @type {(settings: import("./messages.js").FieldTexts, badInput: string[]) => void} */
  check: (settings, badInput) => post({ type: "check", settings, bad_input: badInput }),
  // messages: the whole conversation the reply answers, [{role, content}], its last one the user's;
  // fields: the settings as typed, {settings, badInput} as for check (the worker answers "refused" or
  // "started"); probs: the alternatives each token's record lists (0: no records); resume: the last
  // message is the model's reply, which goes on; thinking: the template's enable_thinking (null: its
  // default); structure: the Structured output setting, {kind, text};
  // tools: {text, required}: the tool definitions (text "": none).
  /**
   * @param {ChatMessage[]} messages @param {string} system
   * @param {{settings: import("./messages.js").FieldTexts, badInput: string[]}} fields
   * @param {number} [probs] @param {boolean} [resume] @param {boolean | null} [thinking]
   * @param {import("./messages.js").Structure | null} [structure] @param {import("./messages.js").Tools | null} [tools]
   */
  chat: (messages, system, fields, probs = 0, resume = false, thinking = null, structure = null, tools = null) =>
    post({
      type: "chat", messages, system, settings: fields.settings, bad_input: fields.badInput, probs, continue: resume,
      ...(thinking === null ? {} : { thinking }), ...(structure ? { structure } : {}),
      ...(tools?.text.trim() ? { tools } : {}),
    }),
  /** @type {(text: string) => void} */
  checkTools: (text) => post({ type: "check-tools", text }),
  // kind: a Structured output option; text: its editor's.
  /** @type {(kind: string, text: string) => void} */
  checkStructure: (kind, text) => post({ type: "check-structure", kind, text }),
  newChat: () => post({ type: "new-chat" }),
  // The trace of the step that wrote a token of the last reply: back, how many tokens come after it in the
  // reply (a continued reply's first tokens came from a turn before); id, its id.
  /** @type {(back: number, id: number) => void} */
  trace: (back, id) => post({ type: "trace", back, id }),
  /** @param {number} workers */
  setWorkers(workers) {
    if (started) started.workers = workers;
    post({ type: "workers", workers });
  },
  // The worker ended and started again (its model and helpers gone; the handlers hear "booted" again).
  restart() {
    thread.terminate();
    this.start(started.handlers, started.onFailure, started.workers);
    started.handlers.restarted?.();
  },
  stop() {
    if (interrupt) Atomics.store(interrupt, 0, 2); // SIGINT: KeyboardInterrupt in Python
    post({ type: "stop" });
  },
};
