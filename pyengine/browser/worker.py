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
``chat``       ``messages`` (the whole conversation to answer,     ``refused`` (a bad setting); or
               ``[{role, content}]``; or ``text``: one more        ``started``, ``piece``...,
               user message), ``system`` (str, may be empty),      ``done``
               ``probs`` (alternatives per token record, 0-20),
               ``continue`` (true: go on with the last message,
               the model's), ``thinking`` (the template's
               ``enable_thinking``; absent: its default),
               ``settings``, ``bad_input`` (as for ``check``),
               ``structure`` (``{kind, text}``: the reply held
               to it),
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
loaded. A message goes as one ``chat`` with the fields as typed, read and checked
here once: ``refused {errors}`` names the bad ones (``[{name, message}]``, "Top-k
must be a whole number from 0 to 49152 (it is -5)") and nothing more comes;
otherwise ``started`` says the reply runs. While the page shows a bad field, it
sends ``check`` as the fields are edited (``checked {settings, errors}``:
``settings``: name -> number, None for a blank seed). A ``check`` waits behind a
running reply.

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
shown so far, and :class:`pyengine.generation.chat.ChatSession` keeps its KV cache
consistent (the next turn reuses the common prefix).

Several workers: when ``worker.js`` has helper workers (``setup``'s ``pool``: the page
is cross-origin isolated and its "workers" setting is above 1), every helper loads its
share of the model's heads, FFN units and vocabulary while this one loads its own
(:mod:`pyengine.parallel`); ``model``'s
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
from dataclasses import dataclass, field, replace
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
    memory_names,
    memory_options,
    params_of,
    setting_rules,
    settings_hint,
    structure_gbnf,
    structure_options,
    weight_cards,
)
from pyengine.browser.shared_memory import new_block
from pyengine.errors import PyEngineError, TemplateError, UnsupportedArchitectureError
from pyengine.generation import engine
from pyengine.generation.chat import ChatSession, thinking_switch
from pyengine.generation.request import Request
from pyengine.inspect import describe
from pyengine.model.load import load_nbytes
from pyengine.model.shard import Placement
from pyengine.parallel.channel import Channel
from pyengine.parallel.driver import SplitModel, channel_layout, plan_load
from pyengine.parallel.server import plan_message
from pyengine.weights.budget import context_that_fits

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


@dataclass
class ChatCommand:
    """The page's ``chat`` (see the module doc): ``text`` (one more user message) or ``messages`` (the whole
    conversation to answer), ``system``, ``settings`` (:data:`SETTINGS` names -> the text typed, or a
    number) with ``bad_input`` (the names of the fields in which the browser found no number), ``probs``,
    ``resume`` (the message's ``continue``), ``thinking`` (None: the template's default), ``structure``
    ((kind, the editor's text)) and ``tools`` ((the Tools editor's text, whether a reply to a user message
    must be a call), None for none)."""
    text: str | None = None
    messages: list | None = None
    system: str = ""
    settings: dict = field(default_factory=dict)
    bad_input: list = field(default_factory=list)
    probs: Any = 0
    resume: bool = False
    thinking: bool | None = None
    structure: tuple[str, str] = ("none", "")
    tools: tuple[str, bool] | None = None

    @classmethod
    def from_message(cls, msg: dict) -> ChatCommand:
        messages = msg.get("messages")
        shape, tools = msg.get("structure") or {}, msg.get("tools") or {}
        return cls(None if messages is not None else str(msg["text"]), messages, str(msg.get("system") or ""),
                   msg.get("settings") or {}, list(msg.get("bad_input") or []), msg.get("probs") or 0,
                   bool(msg.get("continue")), msg.get("thinking"),
                   (str(shape.get("kind") or "none"), str(shape.get("text") or "")),
                   (str(tools.get("text") or ""), bool(tools.get("required"))) if tools.get("text") else None)


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
            checked = engine.check(gguf)                                  # everything but the weights
        except UnsupportedArchitectureError as e:                        # still a GGUF: the inspector shows it
            self.post({"type": "inspect", "inspect": inspector(d)})
            raise PyEngineError(f"{e}; the Inspector tab shows its metadata and tensors") from None
        if checked.template is None:
            raise TemplateError(checked.template_error)                  # a chat needs one
        wanted, note = await self._start_helpers()
        plan = plan_load(gguf, checked.config, weights, wanted, names=memory_names())   # no room fails here
        plan.note = plan.note or note
        let_go = self._unload()
        try:
            loaded, workers = await self._load_shards(checked, files, plan)
        except Exception as e:  # noqa: BLE001 (said as a load that failed while the weights were read)
            raise PyEngineError(weights_failed(error_text(e), let_go)) from e
        cache = loaded.model.new_cache(1)
        n_ctx = context_that_fits(workers.get("heap", []), cache.position_nbytes, cache.state_nbytes_max,
                                  checked.config.n_ctx_train)
        chat = ChatSession(loaded, n_ctx=n_ctx)
        self.chat, self.model = chat, loaded.model
        self.rules = setting_rules(checked.config.n_vocab, chat.cache.n_ctx)
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

    async def _load_shards(self, checked: engine.Checked, files: list, plan) -> tuple:
        """This worker's shard, read while the helpers read theirs (:func:`pyengine.generation.engine.load`);
        the Engine (its model a SplitModel over several workers) and the ``workers`` field of the ``model``
        message. A helper that cannot start or load is a PyEngineError naming it (the page offers to load
        again)."""
        n, gguf, config = len(plan.shards), checked.gguf, checked.config
        if self.pool is not None and n == 1:
            self.pool.resize(1)                                            # helpers left from an earlier load go
        if n == 1:
            loaded = engine.load(checked, LoadProgress(self.post), plan.weights, Placement(plan.shards[0], plan.forms))
            return loaded, {"count": 1, "heap": self._heap(), "note": plan.note}
        lay = channel_layout(config, plan.shards)
        block = new_block(lay["n_floats"])
        self.post({"type": "stage", "stage": f"loading in {n} workers"})
        helpers = self.pool.load(_to_js(files), _to_js(plan_message(plan.shards, plan.forms, plan.weights, lay)),
                                 getattr(block, "sab", block), n - 1)
        chan = Channel(block, 0, lay, [s.vocab[1] - s.vocab[0] for s in plan.shards])
        progress = LoadProgress(self.post, chan, sum(load_nbytes(gguf, config, s) for s in plan.shards))
        main = engine.load(checked, progress, plan.weights, Placement(plan.shards[0], plan.forms, chan))
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
        model = SplitModel(main.model, chan)
        return replace(main, model=model, wait_seconds=model.wait_seconds), {
            "count": n, "heap": self._heap() + [int(r["heap"]) for r in results], "note": plan.note,
            "sync_us": round(1e6 * model.ping(), 1)}

    def _heap(self) -> list[int]:
        return [int(self.heap())] if self.heap is not None else []

    def _heaps(self) -> list[int]:
        """Each worker's wasm heap in bytes, this one's first (a helper's after its last command; [] outside
        a browser)."""
        own = self._heap()
        return own + self.model.chan.heaps() if own and isinstance(self.model, SplitModel) else own


    # --- chat
    def check(self, fields: dict, bad_input: list) -> None:
        """Read the page's fields as typed against the rules of the model loaded (:func:`check_fields`)
        and post ``checked``: ``settings`` (name -> number, for the fields that are right) and
        ``errors`` (``[{name, message}]``)."""
        values, errors = check_fields(fields, bad_input, self.rules)
        self.post({"type": "checked", "settings": values, "errors": errors})

    async def reply(self, command: ChatCommand) -> None:
        """Answer the page's ``chat`` (:class:`ChatCommand`). Its settings, as typed, are read against the
        rules of the model loaded (:func:`check_fields`): a bad one posts ``refused`` (``errors``:
        ``[{name, message}]``, "Top-k must be a whole number from 0 to 49152 (it is -5)") and nothing else;
        right ones post ``started``, then the reply streams: a ``piece`` message per piece of text (with
        ``probs`` > 0 also ``tokens``: the records of the tokens sampled since the last piece,
        :class:`pyengine.generation.loop.Generation`'s ``token_probs``), then ``done`` (``stopped``,
        ``stats``; with tools, the reply's ``tool_calls`` and its ``content`` outside them).

        The reply answers ``messages`` (the whole conversation, as the page keeps it: the cache's common
        prefix with the last turn is reused, so a regenerated or edited turn prefills only what changed),
        or the conversation so far and one more user message ``text``; ``resume``: ``messages`` ends with
        the model's reply, which goes on (:meth:`ChatSession.resume`). A stopped reply keeps the text the
        page has shown; a failed one (an exception, which handle() posts as ``error``) leaves the
        conversation as it was before, so the next turn is not sent the failed one."""
        if self.chat is None:
            raise PyEngineError("no model is loaded: drop a .gguf file first")
        values, errors = check_fields(command.settings, command.bad_input, self.rules)
        if errors:
            self.post({"type": "refused", "errors": errors})
            return
        self.post({"type": "started"})
        request = self.request(command, values)
        self.chat.set_system(command.system)
        self.chat.set_thinking(command.thinking)
        tools = command.tools
        last = "user" if command.messages is None else command.messages[-1].get("role") if command.messages else None
        required = bool(tools and tools[1]) and last == "user" and not command.resume
        self.chat.set_tools(read_tools(tools[0]) if tools else None, "required" if required else "auto")
        shown, turn = [], None
        try:
            if command.messages is None:
                turn = self.chat.send(command.text, request)
            else:
                start = self.chat.resume if command.resume else self.chat.respond
                turn = start(request, command.messages)
            await self._stream(turn, shown)
        except KeyboardInterrupt:  # Stop, through the interrupt buffer
            pass
        except BaseException as e:
            if self._drop_dead_helpers():
                raise PyEngineError(f"{e}: the model was let go; load it again") from None
            raise
        finally:
            if turn is not None:
                turn.close()  # a no-op when the reply ended by itself
        stopped = turn is None or turn.stats.stop_reason == "stopped"
        if turn is not None and stopped:
            self.chat.keep_shown("".join(shown))  # what the page shows, to the last character
        calls = self.chat.messages[-1].get("tool_calls") if turn is not None and not stopped else None
        extra = {"tool_calls": calls, "content": self.chat.messages[-1]["content"]} if calls else {}
        self.post({"type": "done", "stopped": stopped, "stats": turn.stats.as_dict() if turn else None,
                   "heap": self._heaps(), **extra})

    def request(self, command: ChatCommand, values: dict) -> Request:
        """The reply's :class:`Request`: the settings' numbers (``values``, as :func:`check_fields` read them),
        the token records asked for, the Structured output setting's grammar. Raises PyEngineError for a
        bad ``probs``, GrammarError for a bad grammar."""
        probs = command.probs
        if isinstance(probs, bool) or not isinstance(probs, int) or not 0 <= probs <= MAX_PROBS:
            raise PyEngineError(f"probs must be a whole number of alternatives from 0 to {MAX_PROBS}, got {probs!r}")
        params, max_tokens = params_of(values)
        return Request(params, max_tokens, probs=probs, grammar=self.structure(*command.structure))

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
            await _session.reply(ChatCommand.from_message(msg))
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
            _session.post({"type": "done", "stopped": True, "stats": None, "heap": []})  # the page waits for one
        elif kind == "load":
            _session.load_stopped()

