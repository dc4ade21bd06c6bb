"""Glue for the browser's Web Worker (``web/worker.js``): the page's commands in, messages out.

``worker.js`` starts Pyodide, installs the wheels, calls :func:`setup` with the
worker's ``postMessage``, then hands every command from the page to
:func:`handle`, one at a time, and :func:`stop` at once (it must not wait
behind the reply it stops). Commands (JS objects, converted to dicts):

=============  ====================================================  ===========================
command        fields                                                replies
=============  ====================================================  ===========================
``load``       ``files``: the ``File`` objects (all parts of a split  ``progress``..., ``model``
               model, any order)
``chat``       ``text``, ``system`` (str), ``settings`` (dict of      ``piece``..., ``done``
               :data:`SETTINGS` names)
``new-chat``   --                                                    ``cleared``
=============  ====================================================  ===========================

Any failure is an ``error`` message (``{"type": "error", "during", "message"}``):
the :class:`~pyengine.errors.PyEngineError` text for bad input, ``internal error:
...`` for a bug in pyengine; the worker stays alive and keeps the model and the
conversation it had.

Stopping a reply: when the page is cross-origin isolated, it writes SIGINT into
Pyodide's interrupt buffer and Python raises ``KeyboardInterrupt`` wherever it
is, within ~0.1 s. Otherwise the generation loop yields to the JS event loop
after every token (``await asyncio.sleep(0)``, ~0.1 ms), which lets the
``stop`` message in to set a flag. Either way the reply so far is kept and the
session is left ready for the next message.

The bytes of a dropped file are read through :class:`BrowserFileSource`
(``FileReaderSync`` on ``file.slice(a, b)``): nothing is copied whole.
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from typing import Any, Callable

from pyengine.errors import PyEngineError

PROGRESS_EVERY = 0.1  # seconds between two progress messages while loading

# The page's sampling settings: name -> (type, default). Empty fields arrive as None and take the default.
SETTINGS: dict[str, tuple[type, Any]] = {
    "temperature": (float, 0.7),
    "top_k": (int, 40),
    "top_p": (float, 0.95),
    "min_p": (float, 0.05),
    "repeat_penalty": (float, 1.0),
    "max_tokens": (int, 256),
    "seed": (int, None),
}


# ---------------------------------------------------------------------------
# The bytes: a browser File as a byte source
# ---------------------------------------------------------------------------

class BrowserFileSource:
    """A browser ``File`` (or ``Blob``) as a byte source (see :mod:`pyengine.source`).

    Each :meth:`read` is one ``FileReaderSync().readAsArrayBuffer(file.slice(a, b))``
    (workers only), ~1-2 ms per call whatever its size, 250-500 MB/s in 16 MiB
    chunks: callers read in large chunks. Only the bytes asked for are copied,
    into the wasm heap. ``bytes_read`` counts them, for load progress.
    ``reader`` is for tests (anything with ``readAsArrayBuffer(blob)``).
    """

    def __init__(self, file: Any, reader: Any = None):
        self.file = file
        self.name = str(file.name)
        self.size = int(file.size)
        self.reads = 0
        self.bytes_read = 0
        self._reader = reader

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer only at end of file)."""
        if offset < 0 or length < 0:
            raise ValueError(f"read at offset {offset} of length {length}: both must be >= 0")
        self.reads += 1
        end = min(self.size, offset + length)
        if end <= offset:
            return b""
        if self._reader is None:
            import js  # Pyodide's window onto the worker's globals
            self._reader = js.FileReaderSync.new()
        data = self._reader.readAsArrayBuffer(self.file.slice(offset, end)).to_bytes()
        self.bytes_read += len(data)
        return data

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"BrowserFileSource(name={self.name!r}, size={self.size})"


# ---------------------------------------------------------------------------
# What the page shows: the model card and the inspector
# ---------------------------------------------------------------------------

def model_card(gguf: Any, chat_template: str) -> dict:
    """The model card: name, architecture, parameters, quant types, context length, file size."""
    meta = gguf.metadata
    arch = str(meta.get("general.architecture", "?"))
    counts: dict[str, int] = {}
    for t in gguf.tensors.values():
        counts[t.type.name] = counts.get(t.type.name, 0) + t.n_elements
    by_weight = sorted(counts, key=counts.get, reverse=True)  # the type holding most weights first
    return {
        "name": str(meta.get("general.name") or gguf.name),
        "architecture": arch,
        "parameters": sum(counts.values()),
        "quant_types": ", ".join(by_weight),
        "context_length": int(meta.get(f"{arch}.context_length", 0)),
        "file_size": gguf.file_size,
        "files": len(gguf.parts),
        "chat_template": chat_template,
    }


def inspector(gguf: Any) -> dict:
    """The inspector's data: ``sections`` (name, start, end), ``metadata`` (key, type, value as text),
    ``tensors`` (name, shape, type, offset, n_bytes), from :func:`pyengine.inspect.describe`."""
    from pyengine.inspect import describe
    d = describe(gguf)
    return {
        "sections": [{"name": s["name"], "start": s["start"], "end": s["end"]} for s in d["sections"]],
        "metadata": [{"key": k, "type": gguf.value_types.get(k, "?"), "value": _show_value(v)}
                     for k, v in d["metadata"].items()],
        "tensors": [{k: t[k] for k in ("name", "shape", "type", "offset", "n_bytes")} for t in d["tensors"]],
    }


def _show_value(v: Any) -> str:
    return v if isinstance(v, str) else repr(v)


# ---------------------------------------------------------------------------
# The session: one model, one conversation
# ---------------------------------------------------------------------------

class WorkerSession:
    """The model loaded in this worker and its chat; every method posts its replies with ``post``."""

    def __init__(self, post: Callable[[dict], None]):
        self.post = post
        self.gguf = None
        self.chat = None   # pyengine.generate.ChatSession
        self._stop = False

    # --- load
    def load(self, files: list) -> None:
        """Open the files, build the model and a new chat; post ``progress`` then ``model``.

        The model loaded before stays until the new one is ready, so a broken file
        leaves the app as it was.
        """
        from pyengine import generate
        from pyengine.gguf import open_gguf

        t0 = time.perf_counter()
        sources = [f if hasattr(f, "read") else BrowserFileSource(f) for f in files]
        total = sum(s.size for s in sources)
        progress = _Progress(self.post, sources, total)
        gguf = open_gguf(sources)
        progress("header", force=True)
        engine = generate.load(gguf, progress=lambda done, n: progress("tensors", done, n))
        chat = generate.ChatSession(engine)
        progress("tensors", force=True)
        card = model_card(gguf, chat.template_name)
        info = inspector(gguf)
        self.gguf, self.chat = gguf, chat
        self.post({"type": "model", "card": card, "inspect": info, "seconds": time.perf_counter() - t0})

    # --- chat
    async def reply(self, text: str, system: str, settings: dict) -> None:
        """Add the user's message and stream the reply: ``piece`` per text piece, then ``done``."""
        if self.chat is None:
            raise PyEngineError("no model is loaded: drop a .gguf file first")
        from pyengine.sampling import SamplerParams
        params = sampler_params(settings)
        self.chat.set_system(system or None)
        self._stop = False
        turn = self.chat.send(text, params=SamplerParams(**params["sampler"]), max_tokens=params["max_tokens"])
        stopped = False
        try:
            for piece in turn:
                if piece:
                    self.post({"type": "piece", "text": piece})
                await asyncio.sleep(0)  # let a "stop" message in
                if self._stop:
                    stopped = True
                    break
        except KeyboardInterrupt:  # the interrupt buffer: Stop in a cross-origin isolated page
            stopped = True
        finally:
            turn.close()
        self.post({"type": "done", "stopped": stopped, "stats": turn.stats.as_dict()})

    def new_chat(self) -> None:
        if self.chat is not None:
            self.chat.reset()
        self.post({"type": "cleared"})


class _Progress:
    """Posts ``progress`` messages (bytes read over all files, tensors built), at most every PROGRESS_EVERY s."""

    def __init__(self, post: Callable[[dict], None], sources: list, total: int):
        self.post, self.sources, self.total = post, sources, total
        self.tensors, self.n_tensors, self.last = 0, 0, 0.0

    def __call__(self, stage: str, tensors: int | None = None, n_tensors: int | None = None,
                 force: bool = False) -> None:
        if tensors is not None:
            self.tensors, self.n_tensors = tensors, n_tensors
        now = time.perf_counter()
        if not force and now - self.last < PROGRESS_EVERY:
            return
        self.last = now
        done = sum(getattr(s, "bytes_read", 0) for s in self.sources)
        self.post({"type": "progress", "stage": stage, "bytes": min(done, self.total), "total_bytes": self.total,
                   "tensors": self.tensors, "n_tensors": self.n_tensors})


def sampler_params(settings: dict) -> dict:
    """The page's settings (missing or None -> default) as ``{"sampler": {...}, "max_tokens": int}``.

    Raises PyEngineError for a value of the wrong kind or range.
    """
    out = {}
    for name, (kind, default) in SETTINGS.items():
        v = settings.get(name)
        if v is None:
            out[name] = default
            continue
        try:
            out[name] = kind(v)
        except (TypeError, ValueError):
            raise PyEngineError(f"setting {name}: {v!r} is not a number") from None
    for name in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty"):
        if out[name] < 0:
            raise PyEngineError(f"setting {name}: {out[name]} must be >= 0")
    if out["max_tokens"] < 1:
        raise PyEngineError(f"setting max_tokens: {out['max_tokens']} must be >= 1")
    max_tokens = out.pop("max_tokens")
    return {"sampler": out, "max_tokens": max_tokens}


# ---------------------------------------------------------------------------
# The entry points worker.js calls
# ---------------------------------------------------------------------------

_session: WorkerSession | None = None


def setup(post: Callable[[Any], None]) -> None:
    """Start the session; ``post`` is the worker's ``postMessage`` (under Pyodide, dicts become JS objects)."""
    global _session
    _session = WorkerSession(_js_post(post) if sys.platform == "emscripten" else post)


def _js_post(post: Callable[[Any], None]) -> Callable[[dict], None]:
    import js
    from pyodide.ffi import to_js
    return lambda msg: post(to_js(msg, dict_converter=js.Object.fromEntries))


def stop() -> None:
    """Ask the running reply to stop at its next token (the cooperative half of Stop)."""
    if _session is not None:
        _session._stop = True


async def handle(msg: Any) -> None:
    """Run one command from the page (see the module doc); never raises."""
    if hasattr(msg, "to_py"):
        msg = msg.to_py()  # the File objects in it stay JS proxies
    kind = msg.get("type")
    try:
        if kind == "load":
            _session.load(list(msg["files"]))
        elif kind == "chat":
            await _session.reply(str(msg["text"]), str(msg.get("system") or ""), msg.get("settings") or {})
        elif kind == "new-chat":
            _session.new_chat()
        else:
            raise PyEngineError(f"unknown command {kind!r}")
    except Exception as e:  # noqa: BLE001 (each one becomes a message; the worker lives on)
        _session.post({"type": "error", "during": kind, "message": error_text(e)})
    except KeyboardInterrupt:  # a Stop that arrived between two commands: nothing to stop
        pass


def error_text(e: BaseException) -> str:
    """What the page shows for an exception: the PyEngineError's own text, else 'internal error: ...'."""
    if isinstance(e, PyEngineError):
        return str(e)
    if isinstance(e, MemoryError):
        return "out of memory: the model does not fit in the browser's 4 GiB of WebAssembly memory"
    traceback.print_exception(e, file=sys.stderr)  # the console keeps the traceback for a bug report
    return f"internal error: {type(e).__name__}: {e}"
