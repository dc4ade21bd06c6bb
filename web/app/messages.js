// @ts-check
// The messages between the page, the worker (worker.js, then pyengine.browser.worker, whose module doc
// says what each one does) and its helper workers (shard_worker.js), as types for the checker (make lint):
// this module holds only typedefs, and the others import them, `@typedef {import("./messages.js").X} X`.
// A field named as Python names it (bad_input, total_bytes) is the message's own; Python's dicts arrive
// as plain objects.

// ---------------------------------------------------------------------------------------------------
// What the messages carry

/**
 * A message of the conversation, as the page keeps it and sends it with "chat" (chat_template.py's
 * check_messages reads role, content, tool_calls, tool_call_id and name; the page's own fields ride along).
 * @typedef {object} ChatMessage
 * @property {string} role "system", "user", "assistant" or "tool"
 * @property {string} content
 * @property {ToolCall[]} [tool_calls] a reply's tool calls (pyengine.generation.tools)
 * @property {string} [tool_call_id] a tool result: the call it answers
 * @property {string} [name] a tool result: the tool's name
 * @property {TokenRecord[]} [tokens] a reply's token records (the page's, never sent back as context)
 * @property {string} [note] why the reply ended early, in words (the page's)
 * @property {string} [stop] the reply's stop reason (the page's)
 * @property {number} [dropped] the oldest messages left out of its prompt (the page's)
 */

/** @typedef {{id: string, type: "function", function: {name: string, arguments: string}}} ToolCall */

/**
 * A sampled token's record (pyengine.generation.loop.Generation.token_probs): its id and piece, the text
 * it added, its probability, and the most likely alternatives.
 * @typedef {object} TokenRecord
 * @property {number} id
 * @property {string} token
 * @property {string} text
 * @property {number} p
 * @property {{id: number, token: string, p: number}[]} top
 */

/**
 * One reply's numbers (pyengine.generation.loop.TurnStats.as_dict): token counts, seconds, the stop reason.
 * @typedef {object} TurnStats
 * @property {number} prompt_tokens
 * @property {number} cached_tokens
 * @property {number} prefill_tokens
 * @property {number} generated_tokens
 * @property {number} decode_tokens
 * @property {number} lookup
 * @property {number} drafted_tokens
 * @property {number} accepted_tokens
 * @property {number} prefill_seconds
 * @property {number} decode_seconds
 * @property {number} ttft_seconds
 * @property {number} prefill_wait_seconds
 * @property {number} decode_wait_seconds
 * @property {number} dropped_messages
 * @property {string} stop_reason one of pyengine.generation.loop.STOP_REASONS
 * @property {number} prefill_tok_s
 * @property {number} decode_tok_s
 */

/**
 * A sampling field's rule (pyengine.browser.settings.setting_rules): its range in numbers and in words.
 * @typedef {object} SettingRule
 * @property {string} name
 * @property {string} label
 * @property {boolean} whole
 * @property {number} min
 * @property {number | null} max null: no upper bound
 * @property {boolean} above the lowest itself is excluded
 * @property {number} step
 * @property {string} blank what a blank field means ("": a blank field is an error)
 * @property {string} placeholder
 * @property {string} default the text the field starts with
 * @property {string} rule what the field takes, in words
 */

/** @typedef {Record<string, string>} FieldTexts the sampling fields as typed: name -> text */
/** @typedef {Record<string, number | null>} Settings the sampling fields read: name -> number (null: blank) */
/** @typedef {{name: string, message: string}} FieldError a field the worker found wrong, and why */
/** @typedef {{kind: string, text: string}} Structure the Structured output setting: an option and its editor's text */
/** @typedef {{text: string, required: boolean}} Tools the Tools setting: its definitions; required: a reply calls */

/**
 * What the page draws its settings from before a model is loaded (pyengine.browser.worker.page_data).
 * @typedef {object} PageData
 * @property {SettingRule[]} settings
 * @property {string} hint the line under the settings
 * @property {{value: string, label: string}[]} memory the Memory options
 * @property {Record<string, string>} cards the model card's line per weight form
 * @property {Record<string, string>} stop_words why a reply ended, in words, per stop reason
 * @property {string[]} continued the stop reasons of a reply Continue goes on with
 * @property {string} probs_note what the probabilities view shows
 * @property {{value: string, label: string, editor: string}[]} structures the Structured output options
 */

/**
 * The model card (pyengine.browser.page.model_card).
 * @typedef {object} ModelCard
 * @property {string} name
 * @property {string} architecture
 * @property {number} parameters
 * @property {string} quant_types
 * @property {number} context_length
 * @property {number} file_size bytes, all parts
 * @property {string[]} files
 * @property {string} chat_template
 * @property {string} weights the weight form in use (a key of WEIGHT_FORMS)
 * @property {string} products what runs the quantized products
 */

/**
 * The inspector's tables (pyengine.browser.page.inspector).
 * @typedef {object} Inspector
 * @property {{version: number, n_kv: number, n_tensors: number, alignment: number, data_offset: number}} header
 * @property {{name: string, size: number, sections: {name: string, start: number, end: number}[]}[]} parts each
 *   file's name, size (bytes) and five sections (byte ranges, end exclusive)
 * @property {{key: string, type: string, value: string}[]} metadata
 * @property {{type: string, count: number, params: number, bytes: number}[]} types
 * @property {{name: string, shape: number[], type: string, offset: number, n_bytes: number}[]} tensors
 */

/**
 * The workers that compute the model (the "model" message's): how many, each one's wasm bytes, the cost
 * of one meeting through shared memory (absent with one worker), or why it runs in one.
 * @typedef {{count: number, heap: number[], note: string, sync_us?: number}} WorkersInfo
 */

/**
 * The trace of one step (pyengine.generation.trace: its module doc has the fields).
 * @typedef {object} Trace
 * @property {number} position
 * @property {string} token
 * @property {[number, string]} next
 * @property {string[]} tokens
 * @property {Record<string, any>[]} layers
 * @property {Record<string, any>} stages
 * @property {Record<string, number>} ops
 * @property {Record<string, number>} bytes
 * @property {number} total_seconds
 * @property {string} weights
 * @property {number} workers
 */

// ---------------------------------------------------------------------------------------------------
// The page's commands to the worker (worker_client.js sends them; worker.js keeps init, workers and stop,
// and hands the others to Python)

/** @typedef {{type: "init", interrupt: Int32Array | null, workers: number}} InitCommand */
/** @typedef {{type: "workers", workers: number}} WorkersCommand the Workers setting, from the next load on */
/** @typedef {{type: "stop"}} StopCommand */
/** @typedef {{type: "load", files: File[], weights: string}} LoadCommand weights: "auto" or a Memory option */
/** @typedef {{type: "check", settings: FieldTexts, bad_input: string[]}} CheckCommand */
/**
 * @typedef {object} ChatCommand
 * @property {"chat"} type
 * @property {ChatMessage[]} messages the whole conversation the reply answers, its last one the user's
 * @property {string} system the system prompt (may be empty)
 * @property {FieldTexts} settings the sampling fields as typed (checked once, in the worker)
 * @property {string[]} bad_input the fields the browser found no number in
 * @property {number} probs the alternatives each token's record lists (0: no records)
 * @property {boolean} continue the last message is the model's reply, which goes on
 * @property {boolean} [thinking] the template's enable_thinking (absent: its default)
 * @property {Structure} [structure]
 * @property {Tools} [tools]
 */
/** @typedef {{type: "trace", back: number, id: number, heads?: number}} TraceCommand */
/** @typedef {{type: "check-tools", text: string}} CheckToolsCommand */
/** @typedef {{type: "check-structure", kind: string, text: string}} CheckStructureCommand */
/** @typedef {{type: "new-chat"}} NewChatCommand */

/**
 * @typedef {InitCommand | WorkersCommand | StopCommand | LoadCommand | CheckCommand | ChatCommand
 *   | TraceCommand | CheckToolsCommand | CheckStructureCommand | NewChatCommand} Command
 */

// ---------------------------------------------------------------------------------------------------
// The worker's messages to the page (app.js's handlers, one per type)

/** @typedef {{type: "boot", stage: string}} BootMessage a step of Python's start */
/**
 * @typedef {{type: "booted", seconds: number, isolated: boolean, workers: number, page: PageData}} BootedMessage
 */
/** @typedef {{type: "boot-error", message: string}} BootErrorMessage */
/** @typedef {{type: "stage", stage: string}} StageMessage a step of a load with no byte count */
/**
 * A load's progress: the header ("reading header") or the tensors ("reading tensors", with their count).
 * @typedef {object} ProgressMessage
 * @property {"progress"} type
 * @property {string} stage
 * @property {number} bytes
 * @property {number} total_bytes
 * @property {number} [tensors]
 * @property {number} [n_tensors]
 */
/** @typedef {{type: "unloaded"}} UnloadedMessage the model loaded before is gone */
/**
 * @typedef {object} ModelMessage
 * @property {"model"} type
 * @property {ModelCard} card
 * @property {Inspector} inspect
 * @property {number} seconds the load's
 * @property {WorkersInfo} workers
 * @property {SettingRule[]} settings the rules with the model's limits
 * @property {boolean} thinking the chat template has an enable_thinking switch
 */
/** @typedef {{type: "inspect", inspect: Inspector}} InspectMessage a file whose architecture is not run */
/** @typedef {{type: "load-stopped", has_model: boolean}} LoadStoppedMessage */
/** @typedef {{type: "checked", settings: Settings, errors: FieldError[]}} CheckedMessage */
/** @typedef {{type: "started"}} StartedMessage a "chat"'s settings were right: its reply runs */
/** @typedef {{type: "refused", errors: FieldError[]}} RefusedMessage a "chat"'s settings were not: no reply */
/** @typedef {{type: "structure-checked", kind: string, ok: boolean, message: string}} StructureCheckedMessage */
/** @typedef {{type: "tools-checked", ok: boolean, message: string}} ToolsCheckedMessage */
/** @typedef {{type: "piece", text: string, tokens?: TokenRecord[]}} PieceMessage */
/**
 * A reply ended: stopped (by Stop), its numbers (null: it ended before a step), each worker's wasm bytes
 * after it, and a reply that is tool calls, its calls and its text outside them.
 * @typedef {object} DoneMessage
 * @property {"done"} type
 * @property {boolean} stopped
 * @property {TurnStats | null} stats
 * @property {number[]} heap
 * @property {ToolCall[]} [tool_calls]
 * @property {string} [content]
 */
/** @typedef {{type: "traced", back: number, trace: Trace}} TracedMessage */
/** @typedef {{type: "cleared"}} ClearedMessage */
/** @typedef {{type: "error", during: string, message: string}} ErrorMessage during: the command that failed */

/**
 * @typedef {BootMessage | BootedMessage | BootErrorMessage | StageMessage | ProgressMessage | UnloadedMessage
 *   | ModelMessage | InspectMessage | LoadStoppedMessage | CheckedMessage | StartedMessage | RefusedMessage
 *   | StructureCheckedMessage
 *   | ToolsCheckedMessage | PieceMessage | DoneMessage | TracedMessage | ClearedMessage | ErrorMessage} WorkerMessage
 */

/**
 * The page's handler of each event, by its type (app.js); `restarted` is called by worker_client.js when it
 * started the worker again (no message).
 * @typedef {{[T in WorkerMessage["type"]]: (msg: Extract<WorkerMessage, {type: T}>) => void}
 *   & {restarted?: () => void}} Handlers
 */

// ---------------------------------------------------------------------------------------------------
// The worker and its helpers (worker.js <-> shard_worker.js)

/**
 * Load a shard: the same File objects as the main worker's, the plan (pyengine.parallel.server.plan_message),
 * the helper's index (1..), and the shared buffer the workers meet in.
 * @typedef {{type: "load", files: File[], plan: object, index: number, sab: SharedArrayBuffer}} HelperLoad
 */
/**
 * @typedef {{type: "booted"} | {type: "boot-error", message: string} | {type: "ready", bytes: number, heap: number}
 *   | {type: "error", message: string} | {type: "exited"}} HelperMessage
 */

export {};
