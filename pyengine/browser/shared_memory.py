"""The split over workers in a browser: the SharedArrayBuffer, the vocabulary rows kept in place, a helper's job.

The protocol is :mod:`pyengine.parallel.channel`'s; :class:`JsBlock` is its
buffer on a ``SharedArrayBuffer`` with ``Atomics``.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import numpy as np

from pyengine.browser.file_source import BrowserFileSource
from pyengine.parallel.channel import CTL_WORDS, NumpyBlock
from pyengine.parallel.server import load_shard
from pyengine.weights.forms import RowSplit, row_split

STASH_MIN = 1 << 20    # bytes of an array above which keep_vocab_rows moves it through JS memory


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


def new_block(spec: dict):
    """A fresh shared buffer for ``spec`` (:func:`pyengine.parallel.plan.plan`): a SharedArrayBuffer
    under Pyodide, numpy arrays in CPython (the tests run the worker glue there)."""
    n = spec["x_size"] + spec["out_size"]
    return JsBlock.new(n) if sys.platform == "emscripten" else NumpyBlock(n)


def keep_vocab_rows(model, lo: int, hi: int):
    """Rows ``[lo, hi)`` of ``model.output`` in its form; the whole matrix is let go.

    The kept rows wait in JS memory while the whole matrix is freed, then come
    back into the space it left: the wasm heap (which never shrinks) grows by
    nothing, where a plain copy first would add the kept rows to its peak. In
    CPython (the tests), a plain copy.
    """
    if sys.platform != "emscripten":
        return model.output.take_rows(lo, hi)
    import js

    w = model.output
    views = w.take_rows(lo, hi, copy=False)
    kept = []
    for part in views.parts if isinstance(views, RowSplit) else [views]:
        arrays = {k: v for k, v in vars(part).items() if isinstance(v, np.ndarray)}
        stash = {k: _stash(v, js) for k, v in arrays.items() if v.nbytes > STASH_MIN}
        for k, v in arrays.items():
            setattr(part, k, None if k in stash else v.copy())   # no view keeps the whole matrix alive
        kept.append((part, stash))
    del views
    if model.token_embd is w:
        model.token_embd = None
    model.output = None
    del w
    gc.collect()
    for part, stash in kept:
        for k, (buf, shape, dtype) in stash.items():
            a = np.empty(shape, dtype)                  # the kept rows, where the matrix was
            buf.assign_to(a.reshape(-1).view(np.uint8))
            setattr(part, k, a)
    return row_split([part for part, _ in kept])


def _stash(a: np.ndarray, js) -> tuple:
    """``a``'s bytes copied into JS memory (outside the wasm heap): (Uint8Array, shape, dtype)."""
    buf = js.Uint8Array.new(a.nbytes)
    buf.assign(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
    return buf, a.shape, a.dtype


def serve_shard(files: list, spec: Any, index: int, sab: Any, ready) -> None:
    """A shard worker's job (``web/shard_worker.js``): load its rows from the browser ``files``, call
    ``ready(bytes held)``, then serve commands until EXIT; its rows are let go on return."""
    spec = spec.to_py() if hasattr(spec, "to_py") else spec
    server = load_shard([BrowserFileSource(f) for f in files], spec, index, JsBlock(sab))
    ready(sum(w.nbytes for w in server.locals if w is not None))
    try:
        server.serve()
    finally:
        del server
        gc.collect()
