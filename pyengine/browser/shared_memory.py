"""The split over workers in a browser: the SharedArrayBuffer and a helper worker's job.

The protocol is :mod:`pyengine.parallel.channel`'s; :class:`JsBlock` is its
buffer on a ``SharedArrayBuffer`` with ``Atomics``.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import numpy as np

from pyengine.browser.file_source import BrowserFileSource
from pyengine.gguf import open_gguf
from pyengine.parallel.channel import CTL_WORDS, ThreadBlock, dead_words  # noqa: F401 (dead_words: for shard_worker.js)
from pyengine.parallel.server import load_helper


class JsBlock:
    """The shared buffer seen from Pyodide: ``ctl`` Int32Array, ``data`` Float32Array on one SharedArrayBuffer."""

    def __init__(self, sab: Any):
        import js
        self.sab, self.atomics = sab, js.Atomics
        self.ctl = js.Int32Array.new(sab, 0, CTL_WORDS)
        self.data = js.Float32Array.new(sab, 4 * CTL_WORDS)

    @classmethod
    def new(cls, n_floats: int) -> JsBlock:
        import js
        return cls(js.SharedArrayBuffer.new(4 * (CTL_WORDS + n_floats)))

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


def new_block(n_floats: int):
    """A fresh shared buffer of ``n_floats`` floats of data: a SharedArrayBuffer under Pyodide, numpy
    arrays in CPython (the tests run the worker glue there, helpers as threads)."""
    return JsBlock.new(n_floats) if sys.platform == "emscripten" else ThreadBlock(n_floats)


def serve_helper(files: list, plan: Any, index: int, sab: Any, ready) -> None:
    """A helper worker's job (``web/shard_worker.js``): load its shard of the model from the browser
    ``files``, call ``ready(bytes held)``, then run commands until EXIT; its shard is let go on return."""
    plan = plan.to_py() if hasattr(plan, "to_py") else plan
    with open_gguf([BrowserFileSource(f) for f in files]) as g:
        helper = load_helper(g, plan, index, JsBlock(sab))
    ready(helper.model.weights_nbytes)
    try:
        helper.serve()
    finally:
        del helper
        gc.collect()
