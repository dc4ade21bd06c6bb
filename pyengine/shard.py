"""The model's matrices split by rows over several Pyodide workers, with no message per token.

When the page is cross-origin isolated, ``web/worker.js`` (the main worker) can
start N-1 helper workers (``web/shard_worker.js``, "shards"). Once the main
worker has loaded the model, each shard opens the same ``File`` objects and reads
only its rows of each split matrix (rows are contiguous in the GGUF, so rows
``[lo, hi)`` are bytes ``[lo * row_bytes, hi * row_bytes)`` of the tensor), in the
main model's weight form (float32, or int8 with its scales). Split are: the
vocabulary matrix (``model.output``; ``token_embd`` when tied, else
``output.weight``) and, unless the plan says ``layers=False``, each layer's
``wqkv``, ``wo``, ``w_gate_up`` and ``w_down`` (4 sync points per layer). The
main worker keeps the first rows of each and puts a :class:`ShardedLinear` in
its place: a call writes ``x`` into a ``SharedArrayBuffer``, wakes the shards
with ``Atomics.notify``, computes its own rows, waits for theirs
(``Atomics.wait`` in bounded steps, so the page's Stop still lands as
KeyboardInterrupt) and reads the rows they wrote into the shared buffer.

The shared buffer (``Int32`` control words, then ``Float32`` data)::

    ctl[SEQ]          command number; a shard serves each new value once
    ctl[CMD]          MATVEC (x -> rows of W x), ROWS (token ids -> embedding rows), PING (nothing) or EXIT
    ctl[MAT]          which matrix of the plan (0: the vocabulary matrix, then 4 per layer)
    ctl[NROWS]        R, the rows of x (or ids) in this command (at most the matrix's ``cap``)
    ctl[DONE + i]     the last command shard i finished (== SEQ: its output is there)
    ctl[FAIL + i]     the last command shard i failed
    data[0 : x_size]                            x (R, n_in), or R token ids (as float32)
    data[x_size + cap*lo : ... + R*(hi-lo)]     MATVEC: shard (lo, hi)'s rows of the output (R, hi - lo)
    data[x_size + k*n_embd : ... + n_embd]      ROWS: the embedding row of id k, written by its owner

A stale command (the main worker gave up waiting, on Stop) needs no cleanup: the
next one has a new SEQ, and the main worker reads only after ``DONE + i == SEQ``.

The same code runs in CPython on numpy arrays (:class:`NumpyBlock`), which the
unit tests use with the shards served in-process.

Measured (``bench/bench_workers.py``, Chromium 156, Gemma 3 270M Q4_K_M with
the default "mixed" weights, a 119-token chat prompt then 64 greedy tokens,
median (min-max) of 3 interleaved runs, 2026-11-30; ``bench/workers.json``).
The machine has 2 cores shared with other work: ``cpu_parallel``, two
processes spinning side by side against one after the other, stayed at
0.6-1.8 (2.0 would be two free cores), so these numbers say more about the
neighbours than about the split::

    workers  decode ms/token      prefill tok/s     load s            wasm heap per worker           one sync
    1        344 (215-357)        21.0 (15.6-22.1)  6.5 (5.6-6.9)     667 MiB                        -
    2        268 (263-350) 1.28x  18.0 (7.7-25.0)   7.6 (6.7-10.4)    667 + 197 MiB                  45 us
    2:all    321 (304-340) 1.07x  18.7 (16.4-21.7)  9.2 (9.0-10.2)    667 + 341 MiB                  45 us
    4        285 (276-368) 1.21x  22.4 (14.9-22.8)  17.2 (13.1-17.9)  667 + 3 x 140 MiB              238 us

An earlier run of the same bench (medians): 1 worker 200 ms/token, 2 workers
189 (1.06x), 2:all 211 (0.95x), 4 workers 239 (0.84x). At a quieter moment
(one spot check, 16-token prompt, float32 output): 1 worker 9.3 tok/s, 2
workers 14.4 tok/s (1.55x; the output layer was 60 of 107 ms). So: 2 workers
help when a second core is free, never by more than the vocabulary matrix's
share of a token; 4 workers on 2 cores add a sync that costs 5x more (238 us:
three helpers share one core) and 10 s of load (three more Pyodides reading
their rows); splitting the layers' matrices too ("2:all", 4 sync points a
layer, 72 a token for Gemma 3) was not faster in either run and loads 1.6-4 s
slower, so it is off by default (``?split=all``). Prefill is not helped: its
time is in the layers, the output layer runs for the last token only.

Memory: each helper holds only its rows (Gemma 3: 197 MiB of wasm heap for
half the int8 vocabulary matrix plus Python and numpy); the main worker's heap
is the same as with one worker (it peaks while it loads the whole model, and
the kept rows come back into the space the whole matrix left, see
:func:`keep_vocab_rows`), so what it gives away is free for the KV cache.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pyengine import quants
from pyengine.errors import PyEngineError
from pyengine.kernels import LANES, Linear, RowSplit, quantize_int8, row_split
from pyengine.model import pack_chunks, read_rows, vocab_tensor

MAX_SHARDS = 8          # helper workers a shared buffer has room for
R_MAX = 8               # rows of x per command on the vocabulary matrix (a longer batch: several commands)
LAYER_ROWS = 512        # rows of x per command on a layer's matrix (model.UBATCH: a prompt step in one)
LOAD_ROWS = 4096        # rows read and dequantized at once while a shard loads
WAIT_MS = 20            # one bounded Atomics.wait; Stop is seen between two
TIMEOUT_S = 120.0       # a shard silent this long is dead: PyEngineError

# control words (Int32) and commands
SEQ, CMD, NROWS, MAT, DONE, FAIL = 0, 1, 2, 3, 8, 8 + MAX_SHARDS
CTL_WORDS = 8 + 2 * MAX_SHARDS
MATVEC, ROWS, EXIT, PING = 1, 2, 3, 4

# a layer's matrices (pyengine.model.Layer fields) and the GGUF tensors stacked in each, by rows
LAYER_MATRICES = {
    "wqkv": ("attn_q", "attn_k", "attn_v"),
    "wo": ("attn_output",),
    "w_gate_up": ("ffn_gate", "ffn_up"),
    "w_down": ("ffn_down",),
}


# ---------------------------------------------------------------------------
# The split: who holds which rows
# ---------------------------------------------------------------------------

def row_ranges(n_rows: int, n_workers: int, align: int = 1) -> list[tuple[int, int]]:
    """``n_rows`` cut into ``n_workers`` contiguous ``(lo, hi)`` ranges, sizes differing by at most
    ``align`` (every bound but the last a multiple of ``align``: 3 for packed rows).

    Range 0 (the main worker's) comes first. Raises PyEngineError for fewer than 1
    worker, more than ``MAX_SHARDS + 1``, or more workers than groups of rows.
    """
    groups = -(-n_rows // align)
    if not 1 <= n_workers <= MAX_SHARDS + 1 or n_workers > groups:
        raise PyEngineError(f"cannot split {n_rows} rows over {n_workers} workers (1..{MAX_SHARDS + 1})")
    base, extra = divmod(groups, n_workers)
    bounds = [0]
    for i in range(n_workers):
        bounds.append(bounds[-1] + base + (i < extra))
    bounds = [min(n_rows, b * align) for b in bounds]
    return list(zip(bounds[:-1], bounds[1:]))


def load_rows(gguf, names: list[str], lo: int, hi: int, form: dict) -> Linear:
    """Rows ``[lo, hi)`` of the weights ``names`` stacked by rows, as a :class:`Linear` in weight ``form``
    (see :func:`weight_form`).

    Reads only those rows' bytes (``LOAD_ROWS`` rows a read), never a whole
    tensor: row r spans bytes ``r * row_bytes`` to ``(r + 1) * row_bytes`` of
    its tensor. int8 rows are made as ``pyengine.model`` makes them (divided by
    the column scale ``col`` if any, then ``kernels.quantize_int8`` row by
    row), so the slice equals those rows of the main model's matrix. Raises
    GGUFError on a short read.
    """
    infos = [gguf.tensors[n] for n in names]
    n_in = infos[0].shape[0]
    if "parts" in form:                                        # a RowSplit: each part's rows in its form
        return row_split([load_rows(gguf, names, max(lo, a), min(hi, b), f) for a, b, f in form["parts"]
                          if max(lo, a) < min(hi, b)])
    if form.get("packed"):
        return _load_packed_rows(gguf, names, lo, hi, form)
    block, col = form["block"], form["col"]
    col = None if col is None else np.asarray(col, np.float32)                  # (n_in,)
    w = np.empty((hi - lo, n_in), np.float32 if block is None else np.int8)    # (hi-lo, n_in)
    scale = None if block is None else np.empty((hi - lo, n_in // block), np.float32)
    for name, a, b, r0 in _stacked_ranges(gguf, names, lo, hi):
        rows = _read_rows(gguf, name, a - r0, b - r0)                           # (b-a, n_in) float32
        if block is None:
            w[a - lo:b - lo] = rows
            continue
        if col is not None:
            rows /= col
        w[a - lo:b - lo], scale[a - lo:b - lo] = quantize_int8(rows, block)
    return linear(w, scale, form["act"], col)


def _stacked_ranges(gguf, names: list[str], lo: int, hi: int):
    """Yield ``(name, a, b, r0)``: rows ``a..b-1`` of the weights ``names`` stacked by rows, within
    ``[lo, hi)``, ``LOAD_ROWS`` at a time; they are rows ``a-r0..b-r0-1`` of tensor ``name``."""
    r0 = 0
    for name in names:
        r1 = r0 + gguf.tensors[name].shape[1]
        for a in range(max(lo, r0), min(hi, r1), LOAD_ROWS):
            yield name, a, min(hi, r1, a + LOAD_ROWS), r0
        r0 = r1


def _load_packed_rows(gguf, names: list[str], lo: int, hi: int, form: dict) -> Linear:
    """Rows ``[lo, hi)`` (``lo`` a multiple of 3) in the packed form, as ``pyengine.model`` packs them
    (``model.pack_chunks``: int8 codes per ``form["block"]`` weights), with the matrix's ``levels``."""
    chunks = ((a - lo, read_rows(gguf, name, a - r0, b - r0), gguf.tensors[name], b - a)
              for name, a, b, r0 in _stacked_ranges(gguf, names, lo, hi))
    w, scale, _ = pack_chunks(chunks, hi - lo, gguf.tensors[names[0]].shape[0], form["block"])
    return Linear(w, None, scale, n_out=hi - lo, levels=form["levels"])


def _read_rows(gguf, name: str, a: int, b: int) -> np.ndarray:
    """Rows ``a..b-1`` of tensor ``name`` dequantized: (b - a, n_in) float32, one read of the file."""
    info = gguf.tensors[name]
    n_in = info.shape[0]
    raw = read_rows(gguf, name, a, b)                                   # (bytes of rows a..b-1,) uint8
    return quants.dequantize(raw, info.type, (b - a) * n_in, name=name).reshape(b - a, n_in)


def linear(w: np.ndarray, scale: np.ndarray | None, act: str | None, col: np.ndarray | None) -> Linear:
    """A bias-free Linear (a column scale only when there is one: older kernels have none)."""
    return Linear(w, None, scale, act) if col is None else Linear(w, None, scale, act, None, col)


def weight_form(lin: Any) -> dict | None:
    """How ``lin`` holds its weights, for a shard to hold its rows alike: ``{"block": weights per scale
    (None: float32), "col": column scales (list of float) or None, "act"}``, with ``"packed": True`` and
    the ``"levels"`` of a packed Linear; for a :class:`RowSplit`, ``{"parts": [(first row, end row,
    form)]}``. None when the rows cannot be split (not a Linear, a bias, or rows of different
    activation rounding)."""
    if isinstance(lin, RowSplit):
        forms = [weight_form(p) for p in lin.parts]
        bounds = lin.starts.tolist()
        return None if None in forms else {"parts": [(a, b, f) for a, b, f in zip(bounds, bounds[1:], forms)]}
    if not isinstance(lin, Linear) or lin.b is not None or lin.groups is not None:
        return None
    if lin.packed:
        return {"packed": True, "block": lin.w.shape[1] // lin.scale.shape[1], "levels": lin.levels,
                "col": None, "act": None}
    col = getattr(lin, "col", None)
    return {"block": None if lin.scale is None else lin.w.shape[1] // lin.scale.shape[1],
            "col": None if col is None else col.tolist(), "act": lin.act}


def row_slice(lin: Linear, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Views of the arrays holding rows ``[lo, hi)`` of ``lin``: (weights, scales or None). Packed rows
    (``lo`` a multiple of 3) are the int64 rows ``lo/3 .. ceil(hi/3)`` and their scales."""
    if lin.packed:
        a, b = lo // LANES, -(-hi // LANES)
        return lin.w[a:b], lin.scale[LANES * a:LANES * b]
    return lin.w[lo:hi], None if lin.scale is None else lin.scale[lo:hi]


def like(lin: Linear, w: np.ndarray, scale: np.ndarray | None, n_out: int) -> Linear:
    """A bias-free Linear holding ``n_out`` rows in ``lin``'s form."""
    if lin.packed:
        return Linear(w, None, scale, n_out=n_out, levels=lin.levels)
    return linear(w, scale, lin.act, getattr(lin, "col", None))


def pieces(lin: Linear | RowSplit, lo: int, hi: int) -> list[tuple[Linear, int, int]]:
    """Rows ``[lo, hi)`` of ``lin`` as ``(Linear, first, end)`` row ranges of its parts, in order."""
    if not isinstance(lin, RowSplit):
        return [(lin, lo, hi)]
    return [(part, max(lo, a) - a, min(hi, b) - a)
            for part, a, b in zip(lin.parts, lin.starts.tolist(), lin.starts[1:].tolist()) if max(lo, a) < min(hi, b)]


def keep_rows(lin: Linear | RowSplit, lo: int, hi: int) -> Linear | RowSplit:
    """A new Linear (RowSplit) with copies of rows ``[lo, hi)`` of ``lin`` (so the rest can be freed)."""
    kept = []
    for part, a, b in pieces(lin, lo, hi):
        w, scale = row_slice(part, a, b)
        kept.append(like(part, w.copy(), None if scale is None else scale.copy(), b - a))
    return row_split(kept)


def keep_vocab_rows(model, lo: int, hi: int) -> Linear:
    """Rows ``[lo, hi)`` of ``model.output`` as a new Linear; the whole matrix is let go.

    Under Pyodide the kept rows wait in JS memory while the whole matrix is
    freed, then come back into the space it left: the wasm heap (which never
    shrinks) grows by nothing (a plain copy first would add the kept rows to
    its peak: +128 MiB for gemma3 with 2 workers).
    """
    import gc
    import sys

    lin = model.output
    if sys.platform != "emscripten":
        return keep_rows(lin, lo, hi)
    import js
    stashed = []
    for part, a, b in pieces(lin, lo, hi):
        rows, scale = row_slice(part, a, b)
        stash = js.Uint8Array.new(rows.nbytes)
        stash.assign(rows.reshape(-1).view(np.uint8))
        empty = like(part, np.empty((0, rows.shape[1]), rows.dtype), None, 0)   # the part's form
        stashed.append((empty, stash, rows.shape, rows.dtype, None if scale is None else scale.copy(), b - a))
    if model.token_embd is lin:
        model.token_embd = None
    model.output = None
    del lin, part, rows
    gc.collect()
    kept = []
    for empty, stash, shape, dtype, scale, n in stashed:
        w = np.empty(shape, dtype)                                    # the kept rows, where the matrix was
        stash.assign_to(w.reshape(-1).view(np.uint8))
        kept.append(like(empty, w, scale, n))
    return row_split(kept)


# ---------------------------------------------------------------------------
# The shared buffer: in a browser (SharedArrayBuffer + Atomics) or numpy
# ---------------------------------------------------------------------------

class JsBlock:
    """The shared buffer seen from Pyodide: ``ctl`` Int32Array, ``data`` Float32Array on one SharedArrayBuffer."""

    def __init__(self, sab: Any):
        import js
        self.sab, self.atomics = sab, js.Atomics
        self.ctl = js.Int32Array.new(sab, 0, CTL_WORDS)
        self.data = js.Float32Array.new(sab, 4 * CTL_WORDS)

    @classmethod
    def new(cls, n_floats: int) -> "JsBlock":
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


class NumpyBlock:
    """The same buffer as numpy arrays, for CPython: ``on_wait()`` runs while the main side waits
    (tests serve the shards there)."""

    def __init__(self, n_floats: int, on_wait=None):
        self.ctl = np.zeros(CTL_WORDS, np.int32)
        self.data = np.zeros(n_floats, np.float32)
        self.on_wait = on_wait

    def load(self, i: int) -> int:
        return int(self.ctl[i])

    def store(self, i: int, v: int) -> None:
        self.ctl[i] = v

    def notify(self, i: int) -> None:
        pass

    def wait(self, i: int, v: int, ms: float) -> None:
        if self.on_wait is not None and self.ctl[i] == v:
            self.on_wait()

    def write(self, at: int, a: np.ndarray) -> None:
        self.data[at:at + a.size] = a.reshape(-1)

    def read(self, at: int, out: np.ndarray) -> None:
        out.reshape(-1)[:] = self.data[at:at + out.size]


def new_block(spec: dict) -> Any:
    """A fresh shared buffer for ``spec``: a SharedArrayBuffer under Pyodide, numpy arrays in CPython."""
    import sys
    n = spec["x_size"] + spec["out_size"]
    return JsBlock.new(n) if sys.platform == "emscripten" else NumpyBlock(n)


def command(block: Any, cmd: int, mat: int = 0, a: np.ndarray | None = None) -> int:
    """Post command ``cmd`` on matrix ``mat`` with input ``a`` (rows of x, or ids) and wake the shards;
    returns its number. Only the main worker writes commands."""
    if a is not None:
        block.write(0, a)
    block.store(CMD, cmd)
    block.store(MAT, mat)
    block.store(NROWS, 0 if a is None else len(a))
    seq = block.load(SEQ) + 1
    block.store(SEQ, seq)
    block.notify(SEQ)
    return seq


def wait_done(block: Any, seq: int, n_shards: int) -> None:
    """Until every shard has done command ``seq``: bounded waits, so Stop (KeyboardInterrupt) gets through.
    Raises PyEngineError when a shard failed it or stays silent for ``TIMEOUT_S``."""
    t0 = time.monotonic()
    for i in range(n_shards):
        while (done := block.load(DONE + i)) != seq:
            if time.monotonic() - t0 > TIMEOUT_S:
                raise PyEngineError(f"worker {i + 2} did not answer in {TIMEOUT_S:.0f} s")
            block.wait(DONE + i, done, WAIT_MS)
        if block.load(FAIL + i) == seq:
            raise PyEngineError(f"worker {i + 2} failed (see the browser console)")


def send_exit(block: Any) -> None:
    """Command EXIT: every shard on ``block`` leaves its loop (now, or as soon as it has loaded)."""
    command(block, EXIT)


def ping(block: Any, n_shards: int, n: int = 50) -> float:
    """Seconds of one command that does nothing (write, notify, every shard wakes and answers, wait):
    the cost of a sync point, the median of ``n``."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        wait_done(block, command(block, PING), n_shards)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


# ---------------------------------------------------------------------------
# The main worker's side
# ---------------------------------------------------------------------------

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

    def __init__(self, local: Linear, ranges: list, block: Any, mat: int, cap: int, out_at: int):
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
# ---------------------------------------------------------------------------

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
# The entry points: the main worker's and a shard worker's
# ---------------------------------------------------------------------------

def plan(model, tensor_names, n_workers: int, layers: bool = True) -> dict | None:
    """What every shard must load to split the model over ``n_workers`` workers, or None when
    ``model.output`` cannot be split (see :func:`weight_form`).

    Returns ``{"matrices", "x_size", "out_size"}``. ``matrices[0]`` is the
    vocabulary matrix (``model.output``), then, with ``layers``, each layer's
    ``LAYER_MATRICES`` in order (None for one that cannot be split): each
    ``{"names": GGUF tensors stacked by rows, "ranges": (lo, hi) per worker,
    "form": weight_form, "cap": rows of x per command}``. ``ranges[0]`` stays
    in the main worker, ``ranges[i]`` goes to shard i - 1. ``x_size`` /
    ``out_size``: float32 elements of the input and output areas. Raises
    PyEngineError for a bad split.
    """
    out = model.output
    form = weight_form(out)
    if form is None:
        return None
    n_vocab, n_embd = out.shape
    if n_vocab >= 1 << 24:
        raise PyEngineError(f"n_vocab {n_vocab}: token ids travel as float32, exact below 2**24")
    mats = [{"names": [vocab_tensor(tensor_names)], "ranges": row_ranges(n_vocab, n_workers, align(form)), "form": form,
             "cap": R_MAX, "n_in": n_embd}]
    for il, layer in enumerate(model.layers if layers else []):
        for attr, parts in LAYER_MATRICES.items():
            lin, names = getattr(layer, attr, None), [f"blk.{il}.{p}.weight" for p in parts]
            form = weight_form(lin)
            ok = form is not None and all(n in tensor_names for n in names) and \
                -(-lin.shape[0] // align(form)) >= n_workers
            mats.append({"names": names, "ranges": row_ranges(lin.shape[0], n_workers, align(form)), "form": form,
                         "cap": LAYER_ROWS, "n_in": lin.shape[1]} if ok else None)
    return {"matrices": mats,
            "x_size": max(m["cap"] * m["n_in"] for m in mats if m),
            "out_size": max(m["cap"] * m["ranges"][-1][1] for m in mats if m)}


def align(form: dict | None) -> int:
    """Rows a split of a matrix in ``form`` must keep together: 3 when packed (one int64 row), else 1."""
    if form and "parts" in form:
        return max(align(f) for _, _, f in form["parts"])
    return LANES if form and form.get("packed") else 1


def layer_matrix(model, i: int) -> tuple[Any, str]:
    """Matrix ``i`` (from 1) of a plan: (the layer, the field name)."""
    return model.layers[(i - 1) // len(LAYER_MATRICES)], list(LAYER_MATRICES)[(i - 1) % len(LAYER_MATRICES)]


def install(model, spec: dict, block: Any) -> list[ShardedLinear]:
    """Put a :class:`ShardedLinear` in place of each split matrix of ``model`` (``model.output``, and
    ``model.token_embd`` when they are the same object; the layers' matrices); the rows given away
    are let go. The shards must have loaded their rows. Returns the ShardedLinears."""
    mats, at = spec["matrices"], spec["x_size"]
    tied = model.token_embd is model.output
    lo, hi = mats[0]["ranges"][0]
    vocab = ShardedLinear(keep_vocab_rows(model, lo, hi), mats[0]["ranges"], block, 0, mats[0]["cap"], at)
    model.output = vocab
    if tied:
        model.token_embd = vocab
    done = [vocab]
    for i, m in enumerate(mats[1:], start=1):
        if m is None:
            continue
        layer, attr = layer_matrix(model, i)
        lo, hi = m["ranges"][0]
        setattr(layer, attr, ShardedLinear(keep_rows(getattr(layer, attr), lo, hi), m["ranges"], block, i,
                                           m["cap"], at))
        done.append(getattr(layer, attr))
    return done


def load_shard(files: list, spec: dict, index: int, block: Any) -> ShardServer:
    """Shard ``index``'s server: its rows of every matrix of ``spec`` read from ``files`` (browser Files,
    or byte sources) in the main model's weight forms. Raises PyEngineError."""
    from pyengine.gguf import open_gguf
    from pyengine.worker import BrowserFileSource

    with open_gguf([f if hasattr(f, "read") else BrowserFileSource(f) for f in files]) as g:
        locals_ = [None if m is None else load_rows(g, m["names"], *m["ranges"][index + 1], m["form"])
                   for m in spec["matrices"]]
    return ShardServer(locals_, index, spec, block)


def serve_shard(files: list, spec: Any, index: int, sab: Any, ready) -> None:
    """A shard worker's job (``web/shard_worker.js``): load its rows, call ``ready(bytes held)``, then
    serve commands until EXIT; its rows are let go on return."""
    import gc

    server = load_shard(files, spec.to_py() if hasattr(spec, "to_py") else spec, index, JsBlock(sab))
    ready(sum(lin.nbytes for lin in server.locals if lin is not None))
    try:
        server.serve()
    finally:
        del server
        gc.collect()
