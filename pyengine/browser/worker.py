"""Glue for the browser's Web Worker (``web/worker.js``): the page's commands in, messages out.

``worker.js`` starts Pyodide, installs the wheels, calls :func:`setup` with the
worker's ``postMessage``, then hands every command from the page to
:func:`handle`, one at a time. Commands (JS objects, converted to dicts):

=============  ==================================================  ==============================
command        fields                                              replies
=============  ==================================================  ==============================
``load``       ``files``: the ``File`` objects (all parts of a     (``unloaded``), ``progress``...,
               split model, any order); ``weights``: "auto"        ``model``; an architecture not
               (default), or a key of ``WEIGHT_FORMS``             run: ``inspect`` (the file's
                                                                   inspector), then ``error``
``check``      ``settings`` (:data:`SETTINGS` names -> the text    ``checked``
               typed in the field), ``bad_input`` (the names of
               the fields in which the browser found no number)
``chat``       ``messages`` (the whole conversation to answer,     ``piece``..., ``done``
               ``[{role, content}]``; or ``text``: one more
               user message), ``system`` (str, may be empty),
               ``probs`` (alternatives per token record, 0-20),
               ``continue`` (true: go on with the last message,
               the model's), ``thinking`` (the template's
               ``enable_thinking``; absent: its default),
               ``settings`` (:data:`SETTINGS` names -> numbers,
               None for a blank field), ``structure``
               (``{kind, text}``: the reply held to it),
               ``tools`` (``{text, required}``: the definitions;
               required: a reply to a user message is a call)
``trace``      ``back`` (a token of the last reply, counted back   ``traced`` (``back``, and
               from its last: 0 is the last; a continued reply's   ``trace``: the record of
               records run on), ``id`` (its id), ``heads`` (the    pyengine.generation.trace)
               q heads kept; absent: all)
``check-``     ``kind`` (a Structured output option: none, json,    ``structure-checked``
``structure``  schema, grammar), ``text`` (the editor's)
``check-``     ``text`` (the Tools editor's: tool definitions as   ``tools-checked``
``tools``      JSON, OpenAI's)
``new-chat``   --                                                  ``cleared``
(Stop)         a load under way (cross-origin isolated pages)      ``load-stopped``
=============  ==================================================  ==============================

The page draws its sampling fields from the rows of :data:`SETTINGS`
(:func:`setting_rules`: label, range in numbers and in words, default), sent with
``booted`` (:func:`page_data`) and again with ``model`` for the limits of the model
loaded. Before a message goes, the page sends ``check``, and only when
``checked {settings, errors}`` lists no error (``errors``: ``[{name, message}]``,
"Top-k must be a whole number from 0 to 49152 (it is -5)"; ``settings``: name ->
number, None for a blank seed) does it send ``chat`` with those numbers, which the
worker checks again. A ``check`` waits behind a running reply.

Any failure is an ``error`` message (``{"type": "error", "during", "message"}``):
the :class:`~pyengine.errors.PyEngineError` text for bad input (a setting named by
the page's label and its range, a file that is not a GGUF said plainly), ``internal
error: ...`` for a bug in pyengine (its traceback goes to the console only); the
worker stays alive, and keeps the model and the conversation it had unless a load
got as far as ``unloaded``: its error then says that it failed while the weights were
read and the model before was let go, and the page, which keeps the conversation,
offers to load that model again. A failed reply is not part of the conversation: the next
message is answered as if the failed one had not been sent.

Stop: when the page is cross-origin isolated it writes SIGINT into Pyodide's
interrupt buffer, and Python raises ``KeyboardInterrupt`` wherever it is (within
~0.1 s, even inside a matmul); the reply then runs without yielding, so the
interrupt always lands in :meth:`WorkerSession.reply`. Otherwise the reply yields
to the JS event loop after every token (``await asyncio.sleep(0)``, ~0.06 ms),
which lets the ``stop`` message in to set the flag ``should_stop()`` reads: the
stop comes after the token being computed. Either way the reply keeps the text
shown so far, and :class:`pyengine.generation.ChatSession` keeps its KV cache
consistent (the next turn reuses the common prefix).

Several workers: when ``worker.js`` has helper workers (``setup``'s ``pool``: the page
is cross-origin isolated and its "workers" setting is above 1), a load ends by giving
each helper its rows of the vocabulary matrix (:mod:`pyengine.parallel`); ``model``'s
``workers`` field says how many workers compute, the wasm memory of each, the cost of
one sync point (``sync_us``), or why the model stayed in this one (a helper that could
not start or load).

The bytes of a dropped file are read through :class:`BrowserFileSource`
(``FileReaderSync`` on ``file.slice(a, b)``): only the ranges the reader asks
for are copied. Measured in Chromium 156 on a 98 MB file, it reads as fast as
Emscripten's WORKERFS (both 230-400 MB/s in 1-16 MiB chunks, ~1 ms per call
whatever its size) and needs no mount, unmount or file-name bookkeeping.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from pyengine.browser.file_source import BrowserFileSource
from pyengine.browser.page import (
    CONTINUED,
    PROBS_NOTE,
    STOP_WORDS,
    error_text,
    inspector,
    model_card,
    open_gguf_plainly,
    weights_failed,
)
from pyengine.browser.settings import (
    MAX_STRUCTURE_CHARS,
    check_fields,
    memory_options,
    sampler_params,
    setting_rules,
    settings_hint,
    structure_gbnf,
    structure_options,
    weight_cards,
)
from pyengine.browser.shared_memory import new_block
from pyengine.errors import PyEngineError, TemplateError, UnsupportedArchitectureError
from pyengine.generation.chat import THINKING, ChatSession, thinking_switch
from pyengine.generation.engine import Engine, text_parts
from pyengine.gguf.quants import dequantizer
from pyengine.inspect import describe
from pyengine.model.config import ModelConfig
from pyengine.model.load import check_tensors, load_model, load_nbytes
from pyengine.model.shard import Placement
from pyengine.parallel.channel import Channel
from pyengine.parallel.driver import SplitModel, channel_layout, plan_load
from pyengine.parallel.server import plan_message
from pyengine.text.chat_template import check_messages
from pyengine.weights.budget import HEAP_LIMIT

PROGRESS_EVERY = 0.1  # seconds between two progress messages while loading
MAX_PROBS = 20        # the most alternatives a reply token's record may list


def header_progress(post: Callable) -> Callable[[int, int], None]:
    """:func:`pyengine.gguf.open_gguf`'s ``progress(bytes_done, bytes_total)``: posts ``progress`` (stage
    "reading header") at most every PROGRESS_EVERY seconds, and when a file's header ends."""
    last = [-PROGRESS_EVERY]

    def progress(done: int, total: int) -> None:
        if time.perf_counter() - last[0] >= PROGRESS_EVERY or done == total:
            last[0] = time.perf_counter()
            post({"type": "progress", "stage": "reading header", "bytes": done, "total_bytes": total})
    return progress


class LoadProgress:
    """The ``progress(done_tensors, total_tensors, done_bytes, total_bytes)`` callback of
    :func:`pyengine.model.load_model`: posts ``progress`` at most every PROGRESS_EVERY seconds, with this
    worker's tensors and bytes, or given a Channel the whole load's (``total_bytes`` over every worker)."""

    def __init__(self, post: Callable, chan: Channel | None = None, total_bytes: int = 0):
        self.post, self.chan, self.total_bytes = post, chan, total_bytes
        self.last, self.n_tensors = 0.0, 0

    def __call__(self, done: int, total: int, done_bytes: int, total_bytes: int) -> None:
        self.n_tensors = total
        if self.chan is not None:
            self.chan.report_load(done, done_bytes)
        if time.perf_counter() - self.last >= PROGRESS_EVERY or done == total:
            if self.chan is None:
                self.send(done, done_bytes, total_bytes)
            else:
                self.post_whole()

    def post_whole(self) -> None:
        """Post what every worker has read so far (the helpers write it to the shared buffer)."""
        self.send(*self.chan.load_progress(), self.total_bytes)

    def send(self, tensors: int, done_bytes: int, total_bytes: int) -> None:
        self.last = time.perf_counter()
        self.post({"type": "progress", "stage": "reading tensors", "tensors": tensors, "n_tensors": self.n_tensors,
                   "bytes": done_bytes, "total_bytes": total_bytes})


KV_MARGIN = 128 * 2**20    # heap kept free past a full KV cache: a forward pass's arrays (a prompt's chunk)
MIN_CONTEXT = 256


def context_that_fits(model, heaps: list[int]) -> int | None:
    """The chat's context: the positions whose keys and values every worker can add to its heap (``heaps``:
    each worker's bytes now, [] outside the browser) besides the recurrent states a hybrid model keeps,
    before the fullest passes ``budget.HEAP_LIMIT``; at most the model's training context, at least
    ``MIN_CONTEXT`` within it; None (the training context) outside the browser."""
    if not heaps:
        return None
    cache = model.new_cache(1)
    room = (HEAP_LIMIT - KV_MARGIN - max(heaps) - cache.state_nbytes_max) // max(cache.position_nbytes, 1)
    return min(model.config.n_ctx_train, max(MIN_CONTEXT, room))


class WorkerSession:
    """The model loaded in this worker and its chat; every method posts its replies with ``post``.

    ``should_stop()`` is the page's Stop as seen between tokens; ``interruptible``: Stop raises
    KeyboardInterrupt (Pyodide's interrupt buffer), so replies run without yielding.
    """

    def __init__(self, post: Callable[[dict], None], should_stop: Callable[[], bool] = lambda: False,
                 interruptible: bool = False, pool: Any = None, heap: Callable[[], int] | None = None):
        self.post, self.should_stop, self.interruptible = post, should_stop, interruptible
        self.pool, self.heap = pool, heap   # helper workers (worker.js's pool), this worker's wasm bytes
        self.chat = None     # pyengine.generation.ChatSession
        self.rules = setting_rules()  # the settings' ranges for the model loaded (setting_rules)
        self._structure: tuple = (("none", ""), None)   # the Structured output setting and its Grammar
        self.model = None    # the model (a parallel.driver.SplitModel when helpers hold shards of it)

    # --- load
    async def load(self, files: list, weights: str = "auto") -> None:
        """Open the files (a browser File each, or byte sources), build the model in weight policy
        ``weights`` over this worker and its helpers, and a new chat; post ``progress`` while the
        tensors are read, then ``model`` (card with the form in use, inspector, seconds, ``workers``:
        count, wasm bytes of each, the cost of one meeting, a note; ``thinking``: whether the chat
        template has an ``enable_thinking`` switch).

        Everything that can be checked before the weights are read is checked before anything
        changes (the header, the architecture and its keys, the tokenizer and chat template, the
        tensor table, whether the model fits the workers' memory): such a failure leaves the model
        loaded before and its conversation. Then the old model is let go (``unloaded``), so two
        models never share the 4 GiB of wasm memory, and every worker reads its own shard.
        """
        t0 = time.perf_counter()
        sources = [f if hasattr(f, "read") else BrowserFileSource(f) for f in files]
        gguf = open_gguf_plainly(sources, header_progress(self.post))
        d = describe(gguf)
        try:
            config = ModelConfig.from_metadata(gguf.metadata, gguf.tensors)
        except UnsupportedArchitectureError as e:                        # still a GGUF: the inspector shows it
            self.post({"type": "inspect", "inspect": inspector(d)})
            raise PyEngineError(f"{e}; the Inspector tab shows its metadata and tensors") from None
        tokenizer, template, template_error = text_parts(gguf)
        if template is None:
            raise TemplateError(template_error)                              # a chat needs one
        for name in check_tensors(gguf, config):                          # shapes, then types
            dequantizer(gguf.tensors[name].type, name)
        wanted, note = await self._start_helpers()
        plan = plan_load(gguf, config, weights, wanted)                   # an unknown form or no room fails here
        plan.note = plan.note or note
        let_go = self._unload()
        try:
            model, workers = await self._load_shards(gguf, config, files, plan)
        except Exception as e:  # noqa: BLE001 (said as a load that failed while the weights were read)
            raise PyEngineError(weights_failed(error_text(e), let_go)) from e
        chat = ChatSession(Engine(gguf, model, tokenizer, template, template_error),
                           n_ctx=context_that_fits(model, workers.get("heap", [])))
        self.chat, self.model = chat, model
        self.rules = setting_rules(config.n_vocab, chat.cache.n_ctx)
        card = model_card(d, chat.template_name, plan.weights)
        self.post({"type": "model", "card": card, "inspect": inspector(d),
                   "seconds": time.perf_counter() - t0, "workers": workers, "settings": self.rules,
                   "thinking": thinking_switch(chat.engine.template)})

    def load_stopped(self) -> None:
        """Stop (the page's SIGINT) cut a load short: what it read goes, helper workers that were reading
        their shards are ended (new ones start at the next load), and ``load-stopped`` says whether the
        model before is still loaded."""
        if self.chat is None:
            self.model = None
            if self.pool is not None:
                self.pool.resize(1)
            gc.collect()
        self.post({"type": "load-stopped", "has_model": self.chat is not None})

    def _unload(self) -> bool:
        """Let the model loaded before go (its helpers leave their loop and drop their shards); whether
        there was one."""
        if self.chat is None:
            return False
        if isinstance(self.model, SplitModel):
            self.model.close()
        self.chat = self.model = None
        gc.collect()                           # a chat and its last reply refer to each other
        self.post({"type": "unloaded"})
        return True

    def _drop_dead_helpers(self) -> bool:
        """After a failed reply: when a helper serves no more (killed mid-reply), the split model cannot go
        on: let it go (the page keeps the conversation), and the helper, replaced at the next load."""
        dead = self.model.chan.dead() if isinstance(self.model, SplitModel) else []
        if not dead:
            return False
        self._unload()                                       # the helpers still serving leave their loop
        self.pool.drop(_to_js([w - 2 for w in dead]))        # worker 2 is the pool's helper 0
        return True

    async def _start_helpers(self) -> tuple[int, str]:
        """The workers a load may use (this one and the helpers that run Python), and a note naming the
        first helper that cannot start (it is replaced at the next load)."""
        if self.pool is None or not int(self.pool.size()):
            return 1, ""
        failures = await self.pool.start()
        failures = list(failures.to_py() if hasattr(failures, "to_py") else failures)
        bad = [i for i, f in enumerate(failures) if f]
        if not bad:
            return 1 + len(failures), ""
        self.pool.drop(_to_js(bad))
        n = 1 + len(failures) - len(bad)
        return n, f"running in {n} worker{'s' * (n > 1)} (worker {bad[0] + 2} failed: {failures[bad[0]]})"

    async def _load_shards(self, gguf, config, files: list, plan) -> tuple:
        """This worker's shard, read while the helpers read theirs; the model (a SplitModel over several
        workers) and the ``workers`` field of the ``model`` message. A helper that cannot start or load
        is a PyEngineError naming it (the page offers to load again)."""
        n = len(plan.shards)
        if self.pool is not None and n == 1:
            self.pool.resize(1)                                            # helpers left from an earlier load go
        if n == 1:
            model = load_model(gguf, LoadProgress(self.post), plan.weights,
                               placement=Placement(plan.shards[0], plan.forms))
            return model, {"count": 1, "heap": self._heap(), "note": plan.note}
        lay = channel_layout(config, plan.shards)
        block = new_block(lay["n_floats"])
        self.post({"type": "stage", "stage": f"loading in {n} workers"})
        helpers = self.pool.load(_to_js(files), _to_js(plan_message(plan.shards, plan.forms, plan.weights, lay)),
                                 getattr(block, "sab", block), n - 1)
        chan = Channel(block, 0, lay, [s.vocab[1] - s.vocab[0] for s in plan.shards])
        progress = LoadProgress(self.post, chan, sum(load_nbytes(gguf, config, s) for s in plan.shards))
        main = load_model(gguf, progress, plan.weights, placement=Placement(plan.shards[0], plan.forms, chan))
        helpers = asyncio.ensure_future(helpers)
        while not helpers.done():                                         # the helpers still reading
            progress.post_whole()
            await asyncio.wait([helpers], timeout=PROGRESS_EVERY)
        progress.post_whole()
        results = helpers.result()
        results = results.to_py() if hasattr(results, "to_py") else list(results)
        failed = [i for i, r in enumerate(results) if not r["ok"]]
        if failed:
            self.pool.drop(_to_js(failed))
            raise PyEngineError(f"worker {failed[0] + 2} could not load its part of the model: "
                                f"{results[failed[0]]['message']}; load the model again (or choose 1 worker)")
        model = SplitModel(main, chan)
        return model, {"count": n, "heap": self._heap() + [int(r["heap"]) for r in results], "note": plan.note,
                       "sync_us": round(1e6 * model.ping(), 1)}

    def _heap(self) -> list[int]:
        return [int(self.heap())] if self.heap is not None else []


    # --- chat
    def check(self, fields: dict, bad_input: list) -> None:
        """Read the page's fields as typed against the rules of the model loaded (:func:`check_fields`)
        and post ``checked``: ``settings`` (name -> number, for the fields that are right) and
        ``errors`` (``[{name, message}]``)."""
        values, errors = check_fields(fields, bad_input, self.rules)
        self.post({"type": "checked", "settings": values, "errors": errors})

    async def reply(self, text: str | None, system: str, settings: dict, messages: list | None = None,
                    probs: int = 0, resume: bool = False, thinking: bool | None = None,
                    structure: tuple[str, str] | None = None, tools: tuple[str, bool] | None = None) -> None:
        """Stream the reply to ``messages`` (the whole conversation, as the page keeps it: the cache's
        common prefix with the last turn is reused, so a regenerated or edited turn prefills only what
        changed), or to the conversation so far and one more user message ``text``: a ``piece``
        message per piece of text (``resume``: ``messages`` ends with the model's reply, which goes on:
        :meth:`ChatSession.resume`; ``thinking``: the template's ``enable_thinking``, where it has
        one, None for its default; ``structure``: (kind, text) of the Structured output setting; ``tools``:
        (the Tools editor's text, whether a reply to a user message must be a call), ``done`` then lists
        the reply's ``tool_calls`` and its ``content`` outside them; with
        ``probs`` > 0 also ``tokens``: the records of the tokens sampled since the last piece,
        :class:`pyengine.generation.loop.Generation`'s ``token_probs``),
        then ``done`` (``stopped``, ``stats``). A stopped reply keeps the text the page has shown; a
        failed one (an exception, which handle() posts as ``error``) leaves the conversation as it was
        before, so the next turn is not sent the failed one."""
        if self.chat is None:
            raise PyEngineError("no model is loaded: drop a .gguf file first")
        if isinstance(probs, bool) or not isinstance(probs, int) or not 0 <= probs <= MAX_PROBS:
            raise PyEngineError(f"probs must be a whole number of alternatives from 0 to {MAX_PROBS}, got {probs!r}")
        params, max_tokens = sampler_params(settings, self.rules)
        self.chat.grammar = self.structure(*structure) if structure else None
        self.chat.set_system(system)
        switch = thinking is not None and thinking_switch(self.chat.engine.template)
        self.chat.options = {THINKING: bool(thinking)} if switch else {}
        last = "user" if messages is None else messages[-1].get("role") if messages else None
        required = bool(tools and tools[1]) and last == "user" and not resume
        self.chat.set_tools(read_tools(tools[0]) if tools else None, "required" if required else "auto")
        shown, turn, before, base = [], None, list(self.chat.messages), ""
        try:
            if messages is None:
                turn = self.chat.send(text, params, max_tokens, probs=probs)
            else:
                self.chat.messages = check_messages([dict(m) for m in messages])
                base = self.chat.messages[-1]["content"] if resume and self.chat.messages else ""
                start = self.chat.resume if resume else self.chat.respond
                turn = start(params, max_tokens, probs=probs)
            await self._stream(turn, shown)
        except KeyboardInterrupt:  # Stop, through the interrupt buffer
            pass
        except BaseException as e:
            self.chat.messages = before  # the failed message and its partial reply are not context
            if self._drop_dead_helpers():
                raise PyEngineError(f"{e}: the model was let go; load it again") from None
            raise
        finally:
            if turn is not None:
                turn.close()  # a no-op when the reply ended by itself
        stopped = turn is None or turn.stats.stop_reason == "stopped"
        if turn is not None and stopped and self.chat.messages[-1]["role"] == "assistant":
            self.chat.messages[-1]["content"] = base + "".join(shown)  # what the page shows, to the last character
        calls = self.chat.messages[-1].get("tool_calls") if turn is not None and not stopped else None
        extra = {"tool_calls": calls, "content": self.chat.messages[-1]["content"]} if calls else {}
        self.post({"type": "done", "stopped": stopped, "stats": turn.stats.as_dict() if turn else None, **extra})

    async def _stream(self, turn, shown: list[str]) -> None:
        """Post the reply's pieces (and token records) until it ends or the page stops it; each piece
        posted is appended to ``shown`` at once (a KeyboardInterrupt may come at any point)."""
        sent = 0
        while (piece := turn.step()) is not None:
            tokens = turn.token_probs[sent:]
            sent = len(turn.token_probs)
            if piece or tokens:
                self.post({"type": "piece", "text": piece, **({"tokens": tokens} if tokens else {})})
                shown.append(piece)
            if not self.interruptible:
                await asyncio.sleep(0)  # let the page's "stop" message in
            if self.should_stop():
                break

    def trace(self, back: int, tid: int, heads: int | None = None) -> None:
        """Post ``traced``: the trace of the step that gave the token ``back`` tokens before the last reply's
        last (whose record must name ``tid``), run again on the conversation's cache (left as it was).
        Raises PyEngineError for a token that is not one the last turn wrote."""
        from pyengine.generation.trace import trace
        turn = None if self.chat is None else self.chat.turn
        records = [] if turn is None else turn.token_probs
        ok = not isinstance(back, bool) and isinstance(back, int) and 0 <= back < len(records)
        index = len(records) - 1 - back if ok else -1
        if not ok or records[index]["id"] != tid:
            raise PyEngineError("only the tokens of the last reply written since the model was loaded can be "
                                "looked inside (with Token probabilities on)")
        ids = turn.prompt_ids + turn.ids
        n = len(turn.prompt_ids) + index - 1                 # the step that read the token before it
        rec = trace(self.chat.engine.model, self.chat.engine.tokenizer, ids[:n + 1], n, heads, cache=self.chat.cache)
        self.post({"type": "traced", "back": back, "trace": rec})

    def structure(self, kind: str, text: str):
        """The Grammar of a Structured output setting (None for none), the same object while the setting
        stays (its masks kept from reply to reply). Raises GrammarError with the line and column."""
        from pyengine.generation.grammar import Grammar
        key = (kind, text)
        if self._structure[0] != key:
            gbnf = structure_gbnf(kind, text)
            self._structure = (key, Grammar.from_gbnf(gbnf, kind) if gbnf is not None else None)
        return self._structure[1]

    def check_tools(self, text: str) -> None:
        """Post ``tools-checked {ok, message}``: whether the Tools editor's text is tool definitions, else
        why (its line and column, or the definition at fault)."""
        try:
            read_tools(text)
            self.post({"type": "tools-checked", "ok": True, "message": ""})
        except PyEngineError as e:
            self.post({"type": "tools-checked", "ok": False, "message": str(e)})

    def check_structure(self, kind: str, text: str) -> None:
        """Post ``structure-checked {kind, ok, message}``: whether the editor's text makes a grammar,
        else why, with its line and column."""
        try:
            self.structure(kind, text)
            self.post({"type": "structure-checked", "kind": kind, "ok": True, "message": ""})
        except PyEngineError as e:
            self.post({"type": "structure-checked", "kind": kind, "ok": False, "message": str(e)})

    def new_chat(self) -> None:
        """Forget the conversation (the system prompt is sent with every message)."""
        if self.chat is not None:
            self.chat.reset()
        self.post({"type": "cleared"})



# ---------------------------------------------------------------------------
# The entry points worker.js calls
# ---------------------------------------------------------------------------

_session: WorkerSession | None = None


def setup(post: Callable[[Any], None], should_stop: Callable[[], bool] = lambda: False,
          interruptible: bool = False, pool: Any = None, heap: Callable[[], int] | None = None) -> None:
    """Start the session.

    ``post``: the worker's ``postMessage`` (under Pyodide, dicts become JS objects);
    ``should_stop()``: true once the page has asked to stop the running reply;
    ``interruptible``: Pyodide has an interrupt buffer, so Stop raises KeyboardInterrupt;
    ``pool``: the helper workers (worker.js: ``size()``, ``load(files, spec, sab) -> Promise``,
    ``drop(indices)``), None for none; ``heap()``: this worker's wasm memory in bytes.
    """
    global _session
    if sys.platform == "emscripten":
        post = _js_post(post)
    _session = WorkerSession(post, should_stop, interruptible, pool, heap)


def read_tools(text: str) -> list | None:
    """The Tools editor's text as tool definitions (None when blank). Raises PyEngineError naming the
    line and column of bad JSON, or the definition at fault."""
    from pyengine.generation.tools import check_tools
    if not text.strip():
        return None
    if len(text) > MAX_STRUCTURE_CHARS:
        raise PyEngineError(f"tools: {len(text):,} characters, more than {MAX_STRUCTURE_CHARS:,}")
    try:
        tools = json.loads(text)
    except json.JSONDecodeError as e:
        raise PyEngineError(f"tools: line {e.lineno}, column {e.colno}: {e.msg}") from None
    return check_tools(tools)


def page_data() -> Any:
    """What the page builds its settings from before any model is loaded (worker.js sends it with
    ``booted``): ``settings`` (:func:`setting_rules` with no model limits), ``hint`` (the line under
    them), ``memory`` (the Memory options), ``cards`` (the model card's line per weight policy),
    ``stop_words`` (why a reply ended, in words, per stop reason), ``continued`` (the stop reasons of a
    reply Continue goes on with), ``probs_note`` (what the probabilities view shows) and ``structures``
    (the Structured output options)."""
    return _to_js({"settings": setting_rules(), "hint": settings_hint(), "memory": memory_options(),
                   "cards": weight_cards(), "stop_words": STOP_WORDS, "continued": list(CONTINUED),
                   "probs_note": PROBS_NOTE, "structures": structure_options()})


def _to_js(value: Any) -> Any:
    """A Python list or dict as a JS Array or Object under Pyodide (JS proxies inside pass as they are)."""
    if sys.platform != "emscripten":
        return value
    import js
    from pyodide.ffi import to_js
    return to_js(value, dict_converter=js.Object.fromEntries)


def _js_post(post: Callable[[Any], None]) -> Callable[[dict], None]:
    return lambda msg: post(_to_js(msg))


async def handle(msg: Any) -> None:
    """Run one command from the page (see the module doc); never raises."""
    if hasattr(msg, "to_py"):
        msg = msg.to_py()  # the File objects in it stay JS proxies
    kind = msg.get("type")
    try:
        if kind == "load":
            await _session.load(list(msg["files"]), str(msg.get("weights") or "auto"))
        elif kind == "check":
            _session.check(msg.get("settings") or {}, list(msg.get("bad_input") or []))
        elif kind == "chat":
            messages = msg.get("messages")
            text = None if messages is not None else str(msg["text"])
            shape = msg.get("structure") or {}
            structure = (str(shape.get("kind") or "none"), str(shape.get("text") or ""))
            tools = msg.get("tools") or {}
            tools = (str(tools.get("text") or ""), bool(tools.get("required"))) if tools.get("text") else None
            await _session.reply(text, str(msg.get("system") or ""), msg.get("settings") or {}, messages,
                                 msg.get("probs") or 0, bool(msg.get("continue")), msg.get("thinking"), structure,
                                 tools)
        elif kind == "trace":
            _session.trace(msg.get("back"), msg.get("id"), msg.get("heads"))
        elif kind == "check-tools":
            _session.check_tools(str(msg.get("text") or ""))
        elif kind == "check-structure":
            _session.check_structure(str(msg.get("kind") or "none"), str(msg.get("text") or ""))
        elif kind == "new-chat":
            _session.new_chat()
        else:
            raise PyEngineError(f"unknown command {kind!r}")
    except Exception as e:  # noqa: BLE001 (each one becomes a message; the worker lives on)
        _session.post({"type": "error", "during": kind, "message": error_text(e)})
    except KeyboardInterrupt:  # a Stop that landed outside the reply's loop (say, while "done" was posted)
        if kind == "chat":
            _session.post({"type": "done", "stopped": True, "stats": None})  # the page waits for one
        elif kind == "load":
            _session.load_stopped()

