"""The split over workers in a browser: the SharedArrayBuffer and a helper worker's job.

The protocol is :mod:`pyengine.parallel.channel`'s; :class:`JsBlock` is its
buffer on a ``SharedArrayBuffer`` with ``Atomics``, and :class:`JsSumBlock` adds
web/meeting.js's one-call sums where the page has registered it.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import numpy as np

from pyengine.browser.file_source import BrowserFileSource
from pyengine.gguf import open_gguf
from pyengine.parallel.channel import (  # noqa: F401 (dead_words: for shard_worker.js)
    COUNT,
    CTL_WORDS,
    GEN,
    STAMP,
    WAIT_MS,
    ThreadBlock,
    dead_words,
)
from pyengine.parallel.server import load_helper
from pyengine.text.vocab import VOCAB_ARRAYS


class JsBlock:
    """The shared buffer seen from Pyodide: ``ctl`` Int32Array, ``data`` Float32Array on one SharedArrayBuffer."""

    def __init__(self, sab: Any):
        import js
        self.sab, self.atomics = sab, js.Atomics
        self.ctl = js.Int32Array.new(sab, 0, CTL_WORDS)
        self.data = js.Float32Array.new(sab, 4 * CTL_WORDS)

    @staticmethod
    def new(n_floats: int) -> JsBlock:
        import js
        return js_block(js.SharedArrayBuffer.new(4 * (CTL_WORDS + n_floats)))

    def load(self, i: int) -> int:
        return self.atomics.load(self.ctl, i)

    def store(self, i: int, v: int) -> None:
        self.atomics.store(self.ctl, i, v)

    def add(self, i: int, v: int) -> int:
        """ctl[i] += v atomically; returns the old value."""
        return self.atomics.add(self.ctl, i, v)

    def notify(self, i: int) -> None:
        self.atomics.notify(self.ctl, i)

    def wait(self, i: int, v: int, ms: float) -> None:
        """Sleep while ctl[i] == v, at most ``ms`` (or until notified)."""
        self.atomics.wait(self.ctl, i, v, ms)

    def write(self, at: int, a: np.ndarray) -> None:
        """data[at : at + a.size] = a (float32, contiguous)."""
        self.data.subarray(at, at + a.size).assign(a)

    def read(self, at: int, out: np.ndarray) -> None:
        """out[...] = data[at : at + out.size] (out float32, contiguous)."""
        self.data.subarray(at, at + out.size).assign_to(out)

    def write_ints(self, at: int, a: np.ndarray) -> None:
        """ctl[at : at + a.size] = a (int32)."""
        self.ctl.subarray(at, at + a.size).assign(np.ascontiguousarray(a, np.int32))

    def read_ints(self, at: int, n: int) -> np.ndarray:
        """ctl[at : at + n] as int64 (n,)."""
        out = np.empty(n, np.int32)
        self.ctl.subarray(at, at + n).assign_to(out)
        return out.astype(np.int64)


class JsSumBlock(JsBlock):
    """:class:`JsBlock` with :meth:`sum`, a meeting of ``Channel.all_reduce`` in one JavaScript call, and
    waits that spin before they sleep."""

    def __init__(self, sab: Any, meeting: Any):
        super().__init__(sab)
        self.meeting = meeting.block(sab, GEN, COUNT, STAMP, CTL_WORDS)

    def wait(self, i: int, v: int, ms: float) -> None:
        """Sleep while ctl[i] == v, at most ``ms``, after a short spin (web/meeting.js)."""
        self.meeting.wait(i, v, ms)

    def sum(self, part: np.ndarray, out: np.ndarray, slots: int, size: int, index: int, count: int) -> int:
        """Write ``part`` (float32, contiguous) to worker ``index``'s slot, data[slots + index * size:], arrive
        at the barrier, wait at most ``WAIT_MS``; once all have arrived, ``out`` (float32, contiguous, part's
        size) = the ``count`` slots of ``size`` floats from data[slots:] added in worker order, and -1 is
        returned; else the generation still awaited (nothing is summed)."""
        if part.dtype != np.float32 or out.dtype != np.float32 or part.size != out.size \
                or not (part.flags.c_contiguous and out.flags.c_contiguous):
            raise ValueError("sum: part and out must be contiguous float32 arrays of one size")
        return self.meeting.sum(part.ctypes.data, part.size, slots + index * size, slots, size, index, count,
                                out.ctypes.data, WAIT_MS)


def js_block(sab: Any) -> JsBlock:
    """The block on ``sab``: :class:`JsSumBlock` where web/meeting.js is registered, else :class:`JsBlock`."""
    try:
        import pyengine_meeting
    except ImportError:
        return JsBlock(sab)
    return JsSumBlock(sab, pyengine_meeting)


def new_block(n_floats: int):
    """A fresh shared buffer of ``n_floats`` floats of data: a SharedArrayBuffer under Pyodide, numpy
    arrays in CPython (the tests run the worker glue there, helpers as threads)."""
    return JsBlock.new(n_floats) if sys.platform == "emscripten" else ThreadBlock(n_floats)


def serve_helper(files: list, plan: Any, index: int, sab: Any, ready, heap) -> None:
    """A helper worker's job (``web/shard_worker.js``): load its shard of the model from the browser
    ``files``, call ``ready(bytes held)``, then run commands until EXIT, telling the main worker its wasm
    heap (``heap()``, bytes) after each; its shard is let go on return."""
    plan = plan.to_py() if hasattr(plan, "to_py") else plan
    with open_gguf([BrowserFileSource(f) for f in files], skip=VOCAB_ARRAYS) as g:
        helper = load_helper(g, plan, index, js_block(sab), lambda: int(heap()))
    ready(helper.model.weights_nbytes)
    try:
        helper.serve()
    finally:
        del helper
        gc.collect()
