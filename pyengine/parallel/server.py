"""A helper worker's side of a split: its rows of each split matrix, read from the file, and the serving loop."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyengine.gguf import open_gguf
from pyengine.parallel.channel import CMD, DONE, EXIT, FAIL, MAT, MATVEC, NROWS, ROWS, SEQ
from pyengine.weights.build import Builder
from pyengine.weights.forms import Form, row_split


def load_rows(gguf, names: list[str], lo: int, hi: int, spec: dict):
    """Rows ``[lo, hi)`` of the weights ``names`` stacked by rows, in the form ``spec`` describes
    (:func:`pyengine.parallel.plan.weight_spec`), built as the main worker built its matrix
    (:class:`pyengine.weights.build.Builder`), so the rows are bit for bit its rows. Reads only
    those rows' bytes, never a whole tensor. Raises GGUFError on a short read."""
    form = Form[spec["form"]]
    if form is Form.ROW_SPLIT:
        return row_split([load_rows(gguf, names, max(lo, a), min(hi, b), part) for a, b, part in spec["parts"]
                          if max(lo, a) < min(hi, b)])
    build = Builder(gguf, ggml_rounding=spec.get("act") is not None)
    if form is Form.PACKED:
        return build.packed(names, lo, hi, levels=spec["levels"], block=spec["block"])
    if form is Form.INT8_ROWS:
        return build.int8_rows(names, lo, hi, col=np.asarray(spec["col"], np.float32))
    if form is Form.INT8_BLOCKS:
        return build.int8(names, lo, hi, block=spec["block"])
    return build.f32(names, lo, hi)


class ShardServer:
    """One shard: its rows of each split matrix (``locals[m]``, None where it holds none), serving commands.

    ``index``: its place among the shards (0 for the main worker's first helper);
    ``spec``: the plan (:func:`plan`). It serves every command after number 0
    (a fresh block's SEQ): an EXIT sent while it was still loading is seen as
    soon as it starts serving.
    """

    def __init__(self, locals_: list, index: int, spec: dict, block: Any):
        self.locals, self.index, self.block = locals_, index, block
        self.mats = spec["matrices"]
        self.out_at = spec["x_size"]
        self.seq = 0

    def serve_one(self) -> bool:
        """Serve the newest command if there is one; False once told to EXIT."""
        seq = self.block.load(SEQ)
        if seq == self.seq:
            return True
        self.seq = seq
        cmd, r, m = self.block.load(CMD), self.block.load(NROWS), self.block.load(MAT)
        try:
            if cmd in (MATVEC, ROWS):
                self._run(cmd, r, m)
        except Exception:  # noqa: BLE001 (the main worker reports it; the traceback goes to the console)
            import traceback
            traceback.print_exc()
            self.block.store(FAIL + self.index, seq)
        self.block.store(DONE + self.index, seq)
        self.block.notify(DONE + self.index)
        return cmd != EXIT

    def _run(self, cmd: int, r: int, m: int) -> None:
        local, spec = self.locals[m], self.mats[m]
        lo, hi = spec["ranges"][self.index + 1]
        n_in = local.shape[1]
        if cmd == MATVEC:
            x = np.empty((r, n_in), np.float32)
            self.block.read(0, x)
            y = np.ascontiguousarray(local(x), dtype=np.float32)            # (r, hi - lo)
            self.block.write(self.out_at + spec["cap"] * lo, y)
            return
        ids = np.empty(r, np.float32)
        self.block.read(0, ids)
        ids = ids.astype(np.int64)
        for k in np.flatnonzero((ids >= lo) & (ids < hi)):
            self.block.write(self.out_at + int(k) * n_in, local.rows([ids[k] - lo])[0])   # (n_in,)

    def serve(self) -> None:
        """Serve commands until EXIT (blocks this worker's thread; ``Atomics.wait`` between commands)."""
        while self.serve_one():
            self.block.wait(SEQ, self.seq, 1000)


# ---------------------------------------------------------------------------


def load_shard(sources: list, spec: dict, index: int, block: Any) -> ShardServer:
    """Shard ``index``'s server: its rows of every matrix of ``spec`` read from ``sources`` (byte
    sources over the same files as the main worker's) in the main model's weight forms. Raises
    PyEngineError."""
    with open_gguf(sources) as g:
        locals_ = [None if m is None else load_rows(g, m["names"], *m["ranges"][index + 1], m["form"])
                   for m in spec["matrices"]]
    return ShardServer(locals_, index, spec, block)
