"""The main worker's side of a split: a :class:`ShardedLinear` in place of each split matrix.

A call writes ``x`` into the shared buffer, wakes the shards, computes this
worker's own rows meanwhile, waits for theirs (bounded waits, so the page's
Stop still lands as KeyboardInterrupt) and reads the rows they wrote.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyengine.parallel.channel import MATVEC, ROWS, command, wait_done
from pyengine.parallel.plan import layer_matrix


class ShardedLinear:
    """A weight matrix over several workers by rows: ``x (R, n_in) -> (R, n_out)``, as its Linear.

    ``local``: this worker's rows ``ranges[0]`` (a Linear); ``ranges[1:]``: the
    shards' rows, in shard order; ``mat``: the matrix's number in the spec;
    ``cap``: rows of x per command; ``out_at``: where the output area starts.
    The results equal the whole matrix's Linear, bit for bit (each row's dot
    product is computed alike wherever it runs). As ``model.token_embd`` (tied)
    it also looks up embedding rows (:meth:`rows`). Raises PyEngineError when a
    shard reports a failure or stays silent for ``TIMEOUT_S``; KeyboardInterrupt
    (Stop) propagates from the wait.
    """

    def __init__(self, local: Any, ranges: list, block: Any, mat: int, cap: int, out_at: int):
        self.local, self.ranges, self.block = local, [tuple(r) for r in ranges], block
        self.mat, self.cap, self.out_at = mat, cap, out_at
        self.n_in, self.n_out = local.shape[1], self.ranges[-1][1]

    @property
    def shape(self) -> tuple:
        return (self.n_out, self.n_in)

    @property
    def nbytes(self) -> int:
        """Bytes held in this worker (its own rows)."""
        return self.local.nbytes

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x (R, n_in) or (n_in,) float32 -> (R, n_out) or (n_out,)."""
        xs = x.reshape(-1, self.n_in)                                     # (R, n_in)
        out = np.empty((len(xs), self.n_out), np.float32)                # (R, n_out)
        hi0 = self.ranges[0][1]
        for j in range(0, len(xs), self.cap):
            xc = np.ascontiguousarray(xs[j:j + self.cap], dtype=np.float32)   # (r, n_in)
            r = len(xc)
            seq = command(self.block, MATVEC, self.mat, xc)
            out[j:j + r, :hi0] = self.local(xc)                           # this worker's rows, meanwhile
            wait_done(self.block, seq, len(self.ranges) - 1)
            for lo, hi in self.ranges[1:]:
                part = out[j, lo:hi] if r == 1 else np.empty((r, hi - lo), np.float32)
                self.block.read(self.out_at + self.cap * lo, part)        # (r, hi - lo)
                if r > 1:
                    out[j:j + r, lo:hi] = part
        return out if x.ndim == 2 else out[0]

    def rows(self, ids) -> np.ndarray:
        """Rows ``ids`` as float32 (the embedding lookup): (len(ids), n_in); other workers' rows by ROWS."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        hi0 = self.ranges[0][1]
        out = np.empty((len(ids), self.n_in), np.float32)               # (T, n_in)
        mine = ids < hi0
        if mine.any():
            out[mine] = self.local.rows(ids[mine])
        if mine.all():
            return out
        step = min(self.cap * self.n_in, self.cap * self.n_out // self.n_in)   # ids in x, rows in the output area
        for j in range(0, len(ids), step):
            chunk = ids[j:j + step]
            wait_done(self.block, command(self.block, ROWS, self.mat, chunk.astype(np.float32)),
                      len(self.ranges) - 1)
            got = np.empty((len(chunk), self.n_in), np.float32)
            self.block.read(self.out_at, got)
            theirs = chunk >= hi0
            out[j:j + len(chunk)][theirs] = got[theirs]
        return out


# ---------------------------------------------------------------------------
# A shard's side


def install(model, spec: dict, block: Any, keep_vocab=None) -> list[ShardedLinear]:
    """Put a :class:`ShardedLinear` in place of each split matrix of ``model`` (``model.output``, and
    ``model.token_embd`` when they are the same object; the layers' matrices); the rows given away
    are let go. ``keep_vocab(model, lo, hi)`` keeps the vocabulary matrix's rows (default: a copy,
    :meth:`take_rows`; the browser's moves them without growing the heap). The shards must have
    loaded their rows. Returns the ShardedLinears."""
    mats, at = spec["matrices"], spec["x_size"]
    tied = model.token_embd is model.output
    lo, hi = mats[0]["ranges"][0]
    kept = keep_vocab(model, lo, hi) if keep_vocab else model.output.take_rows(lo, hi)
    vocab = ShardedLinear(kept, mats[0]["ranges"], block, 0, mats[0]["cap"], at)
    model.output = vocab
    if tied:
        model.token_embd = vocab
    done = [vocab]
    for i, m in enumerate(mats[1:], start=1):
        if m is None:
            continue
        layer, attr = layer_matrix(model, i)
        lo, hi = m["ranges"][0]
        setattr(layer, attr, ShardedLinear(getattr(layer, attr).take_rows(lo, hi), m["ranges"], block, i,
                                           m["cap"], at))
        done.append(getattr(layer, attr))
    return done
