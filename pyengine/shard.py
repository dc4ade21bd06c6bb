"""The vocabulary matrix split by rows over several Pyodide workers, with no message per token.

When the page is cross-origin isolated, ``web/worker.js`` (the main worker) can
start N-1 helper workers (``web/shard_worker.js``, "shards"). Each opens the same
``File`` objects and reads only its rows of the vocabulary matrix (``token_embd``
when the output is tied to it, else ``output.weight``; rows are contiguous in the
GGUF, so rows ``[lo, hi)`` are bytes ``[lo * row_bytes, hi * row_bytes)`` of the
tensor) in the same form as the main model's ``model.output`` (float32, or int8
with a float32 scale per block). The main worker keeps the first rows and puts a
:class:`ShardedLinear` in place of ``model.output`` (and ``model.token_embd`` when
tied): each call writes ``x`` into a ``SharedArrayBuffer``, wakes the shards with
``Atomics.notify``, computes its own rows, waits for theirs (``Atomics.wait`` in
bounded steps, so the page's Stop still lands as KeyboardInterrupt), and reads
the logits the shards wrote into the shared buffer.

The shared buffer (``Int32`` control words, then ``Float32`` data)::

    ctl[SEQ]          command number; a shard serves each new value once
    ctl[CMD]          MATVEC (x -> logits), ROWS (token ids -> embedding rows), PING (nothing) or EXIT
    ctl[NROWS]        R, the rows of x (or ids) in this command
    ctl[DONE + i]     the last command shard i finished (== SEQ: its output is there)
    ctl[FAIL + i]     the last command shard i failed
    data[X : X + R_MAX*n_embd]              x (R, n_embd), or R token ids (as float32)
    data[OUT + R_MAX*lo : ... + R*(hi-lo)]  MATVEC: shard (lo, hi)'s logits (R, hi - lo)
    data[OUT + k*n_embd : ... + n_embd]     ROWS: the embedding row of id k, written by its owner

A stale command (the main worker gave up waiting, on Stop) needs no cleanup: the
next one has a new SEQ, and the main worker reads only after ``DONE + i == SEQ``.

The same code runs in CPython on numpy arrays (:class:`NumpyBlock`), which the
unit tests use with the shards served in-process.

Measured in Chromium 156 on this 2-core machine, Gemma 3 270M Q4_K_M (float32
weights), ``bench/bench_workers.py`` (median of 3, interleaved)::

    (see bench/workers.json; the table is filled in below)
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pyengine import quants
from pyengine.errors import GGUFError, PyEngineError
from pyengine.kernels import Linear, quantize_int8

MAX_SHARDS = 8          # helper workers a shared buffer has room for
R_MAX = 8               # rows of x per command (a longer batch goes in several commands)
LOAD_ROWS = 4096        # rows read and dequantized at once while a shard loads
WAIT_MS = 20            # one bounded Atomics.wait; Stop is seen between two
TIMEOUT_S = 120.0       # a shard silent this long is dead: PyEngineError

# control words (Int32) and commands
SEQ, CMD, NROWS, DONE, FAIL = 0, 1, 2, 8, 8 + MAX_SHARDS
CTL_WORDS = 8 + 2 * MAX_SHARDS
MATVEC, ROWS, EXIT, PING = 1, 2, 3, 4


# ---------------------------------------------------------------------------
# The split: who holds which rows
# ---------------------------------------------------------------------------

def row_ranges(n_rows: int, n_workers: int) -> list[tuple[int, int]]:
    """``n_rows`` cut into ``n_workers`` contiguous ``(lo, hi)`` ranges, sizes differing by at most 1.

    Range 0 (the main worker's) comes first. Raises PyEngineError for fewer than 1
    worker, more than ``MAX_SHARDS + 1``, or more workers than rows.
    """
    if not 1 <= n_workers <= MAX_SHARDS + 1 or n_workers > n_rows:
        raise PyEngineError(f"cannot split {n_rows} rows over {n_workers} workers (1..{MAX_SHARDS + 1})")
    base, extra = divmod(n_rows, n_workers)
    bounds = [0]
    for i in range(n_workers):
        bounds.append(bounds[-1] + base + (i < extra))
    return list(zip(bounds[:-1], bounds[1:]))


def vocab_tensor(tensor_names) -> str:
    """The GGUF tensor behind ``model.output``: ``output.weight``, or ``token_embd.weight`` when tied."""
    return "output.weight" if "output.weight" in tensor_names else "token_embd.weight"


def data_size(n_embd: int, n_vocab: int) -> int:
    """Float32 elements of the data area: x (R_MAX, n_embd), then the logits (R_MAX, n_vocab)."""
    return R_MAX * (n_embd + n_vocab)


def buffer_bytes(n_embd: int, n_vocab: int) -> int:
    """Bytes of the whole shared buffer (control words, then data)."""
    return 4 * (CTL_WORDS + data_size(n_embd, n_vocab))


def out_at(n_embd: int) -> int:
    """Where the output area starts in the data (float32 elements): after x (R_MAX, n_embd)."""
    return R_MAX * n_embd


def rows_per_command(n_embd: int, n_vocab: int) -> int:
    """Token ids one ROWS command carries: as many rows as fit in the logits area (and ids in x)."""
    return min(R_MAX * n_embd, R_MAX * n_vocab // n_embd)


def load_rows(gguf, name: str, lo: int, hi: int, form: dict) -> Linear:
    """Rows ``[lo, hi)`` of weight ``name`` as a :class:`Linear` in weight ``form`` (see :func:`weight_form`).

    Reads only those rows' bytes (``LOAD_ROWS`` rows a read), never the whole
    tensor: row r spans bytes ``r * row_bytes`` to ``(r + 1) * row_bytes`` of
    the tensor. int8 rows are made as ``pyengine.model`` makes them (divided by
    the column scale ``col`` if any, then ``kernels.quantize_int8`` row by
    row), so the slice equals those rows of the main model's matrix. Raises
    GGUFError on a short read.
    """
    info = gguf.tensors[name]
    n_in = info.shape[0]
    row_bytes = info.type.n_bytes(n_in)
    src = gguf.parts[info.part].source
    block, col = form["block"], form["col"]
    col = None if col is None else np.asarray(col, np.float32)                  # (n_in,)
    w = np.empty((hi - lo, n_in), np.float32 if block is None else np.int8)    # (hi-lo, n_in)
    scale = None if block is None else np.empty((hi - lo, n_in // block), np.float32)
    for a in range(lo, hi, LOAD_ROWS):
        b = min(hi, a + LOAD_ROWS)
        at, n = info.offset + a * row_bytes, (b - a) * row_bytes
        raw = src.read(at, n)
        if len(raw) != n:
            raise GGUFError(f"{src.name}: byte {at}: tensor {name!r}: read {len(raw)} of {n} bytes")
        if block is None:
            quants.dequantize(raw, info.type, (b - a) * n_in, name=name, out=w[a - lo:b - lo].reshape(-1))
            continue
        rows = quants.dequantize(raw, info.type, (b - a) * n_in, name=name).reshape(b - a, n_in)
        if col is not None:
            rows /= col
        w[a - lo:b - lo], scale[a - lo:b - lo] = quantize_int8(rows, block)
    return linear(w, scale, form["act"], col)


def linear(w: np.ndarray, scale: np.ndarray | None, act: str | None, col: np.ndarray | None) -> Linear:
    """A bias-free Linear (a column scale only when there is one: older kernels have none)."""
    return Linear(w, None, scale, act) if col is None else Linear(w, None, scale, act, None, col)


def weight_form(lin: Linear) -> dict | None:
    """How ``lin`` holds its weights, for a shard to hold its rows alike: ``{"block": weights per scale
    (None: float32), "col": column scales (list of float) or None, "act"}``; None when the rows cannot
    be split (a bias, or rows of different activation rounding)."""
    if not isinstance(lin, Linear) or lin.b is not None or lin.groups is not None:
        return None
    col = getattr(lin, "col", None)
    return {"block": None if lin.scale is None else lin.w.shape[1] // lin.scale.shape[1],
            "col": None if col is None else col.tolist(), "act": lin.act}


def keep_rows(model, lo: int, hi: int) -> Linear:
    """Rows ``[lo, hi)`` of ``model.output`` as a new Linear; the whole matrix is let go.

    Under Pyodide the kept rows wait in JS memory while the whole matrix is
    freed, then come back into the space it left: the wasm heap (which never
    shrinks) grows by nothing (a plain copy first would add the kept rows to
    its peak: +128 MiB for gemma3 with 2 workers).
    """
    import gc
    import sys

    lin = model.output
    scale = None if lin.scale is None else lin.scale[lo:hi].copy()   # (hi-lo, blocks): small
    act, col, shape, dtype = lin.act, getattr(lin, "col", None), (hi - lo, lin.w.shape[1]), lin.w.dtype
    if sys.platform != "emscripten":
        return linear(lin.w[lo:hi].copy(), scale, act, col)
    import js
    stash = js.Uint8Array.new(lin.w[lo:hi].nbytes)
    stash.assign(lin.w[lo:hi].reshape(-1).view(np.uint8))
    if model.token_embd is lin:
        model.token_embd = None
    model.output = None
    del lin
    gc.collect()
    w = np.empty(shape, dtype)                                        # (hi-lo, n_in), where the matrix was
    stash.assign_to(w.reshape(-1).view(np.uint8))
    return linear(w, scale, act, col)


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
    def new(cls, n_embd: int, n_vocab: int) -> "JsBlock":
        import js
        return cls(js.SharedArrayBuffer.new(buffer_bytes(n_embd, n_vocab)))

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

    def __init__(self, n_embd: int, n_vocab: int, on_wait=None):
        self.ctl = np.zeros(CTL_WORDS, np.int32)
        self.data = np.zeros(data_size(n_embd, n_vocab), np.float32)
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


def new_block(n_embd: int, n_vocab: int) -> Any:
    """A fresh shared buffer: a SharedArrayBuffer under Pyodide, numpy arrays in CPython."""
    import sys
    return JsBlock.new(n_embd, n_vocab) if sys.platform == "emscripten" else NumpyBlock(n_embd, n_vocab)


# ---------------------------------------------------------------------------
# The main worker's side
# ---------------------------------------------------------------------------

class ShardedLinear:
    """``model.output`` (and ``model.token_embd`` when tied) over several workers: (R, n_embd) -> (R, n_vocab).

    ``local``: this worker's rows ``ranges[0]`` (a Linear); ``ranges[1:]``: the
    shards' rows, in shard order; ``block``: the shared buffer (JsBlock or
    NumpyBlock). Same results as the whole matrix's Linear, bit for bit (each
    row's dot product is computed alike wherever it runs).
    Raises PyEngineError when a shard reports a failure or stays silent for
    ``TIMEOUT_S``; KeyboardInterrupt (Stop) propagates from the wait.
    """

    def __init__(self, local: Linear, ranges: list[tuple[int, int]], block: Any, n_embd: int):
        self.local, self.ranges, self.block = local, ranges, block
        self.n_embd, self.n_vocab = n_embd, ranges[-1][1]
        self.seq = block.load(SEQ)

    @property
    def shape(self) -> tuple:
        return (self.n_vocab, self.n_embd)

    @property
    def nbytes(self) -> int:
        """Bytes held in this worker (its own rows)."""
        return self.local.nbytes

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x (R, n_embd) or (n_embd,) float32 -> logits (R, n_vocab) or (n_vocab,)."""
        xs = x.reshape(-1, self.n_embd)                                   # (R, n_embd)
        out = np.empty((len(xs), self.n_vocab), np.float32)              # (R, n_vocab)
        hi0 = self.ranges[0][1]
        for j in range(0, len(xs), R_MAX):
            xc = np.ascontiguousarray(xs[j:j + R_MAX], dtype=np.float32)  # (r, n_embd)
            r = len(xc)
            self._command(MATVEC, xc)
            out[j:j + r, :hi0] = self.local(xc)                           # this worker's rows, meanwhile
            self._wait()
            for lo, hi in self.ranges[1:]:
                part = out[j, lo:hi] if r == 1 else np.empty((r, hi - lo), np.float32)
                self.block.read(out_at(self.n_embd) + R_MAX * lo, part)   # (r, hi - lo)
                if r > 1:
                    out[j:j + r, lo:hi] = part
        return out if x.ndim == 2 else out[0]

    def rows(self, ids) -> np.ndarray:
        """Rows ``ids`` as float32 (the embedding lookup): (len(ids), n_embd); other workers' rows by ROWS."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        hi0 = self.ranges[0][1]
        out = np.empty((len(ids), self.n_embd), np.float32)             # (T, n_embd)
        mine = ids < hi0
        if mine.any():
            out[mine] = self.local.rows(ids[mine])
        if mine.all():
            return out
        step = rows_per_command(self.n_embd, self.n_vocab)
        for j in range(0, len(ids), step):
            chunk = ids[j:j + step]
            self._command(ROWS, chunk.astype(np.float32))
            self._wait()
            got = np.empty((len(chunk), self.n_embd), np.float32)
            self.block.read(out_at(self.n_embd), got)
            theirs = chunk >= hi0
            out[j:j + len(chunk)][theirs] = got[theirs]
        return out

    def ping(self, n: int = 50) -> float:
        """Seconds of one command that does nothing (write, notify, every shard wakes and answers,
        wait): the cost of a sync point, the median of ``n``."""
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            self._command(PING, np.empty(0, np.float32))
            self._wait()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    def close(self) -> None:
        """Send the shards out of their loop (they free their rows and wait for the next load)."""
        send_exit(self.block)

    def _command(self, cmd: int, a: np.ndarray) -> None:
        self.block.write(0, a)
        self.block.store(CMD, cmd)
        self.block.store(NROWS, len(a))
        self.seq += 1
        self.block.store(SEQ, self.seq)
        self.block.notify(SEQ)

    def _wait(self) -> None:
        """Until every shard has done command ``self.seq``; bounded waits so Stop gets through."""
        t0 = time.monotonic()
        for i in range(len(self.ranges) - 1):
            while (done := self.block.load(DONE + i)) != self.seq:
                if time.monotonic() - t0 > TIMEOUT_S:
                    raise PyEngineError(f"worker {i + 2} did not answer in {TIMEOUT_S:.0f} s")
                self.block.wait(DONE + i, done, WAIT_MS)
            if self.block.load(FAIL + i) == self.seq:
                raise PyEngineError(f"worker {i + 2} failed (see the browser console)")


# ---------------------------------------------------------------------------
# A shard's side
# ---------------------------------------------------------------------------

def send_exit(block: Any) -> None:
    """Command EXIT: every shard on ``block`` leaves its loop (now, or as soon as it has loaded)."""
    block.store(CMD, EXIT)
    block.store(SEQ, block.load(SEQ) + 1)
    block.notify(SEQ)


class ShardServer:
    """One shard: rows ``[lo, hi)`` of the vocabulary matrix (``local``), serving commands from the block.

    ``index``: its place among the shards (0 for the main worker's first helper).
    It serves every command after number 0 (a fresh block's SEQ): an EXIT sent
    while it was still loading is seen as soon as it starts serving.
    """

    def __init__(self, local: Linear, index: int, lo: int, hi: int, block: Any, n_embd: int):
        self.local, self.index, self.lo, self.hi, self.block = local, index, lo, hi, block
        self.n_embd = n_embd
        self.seq = 0

    def serve_one(self) -> bool:
        """Serve the newest command if there is one; False once told to EXIT."""
        seq = self.block.load(SEQ)
        if seq == self.seq:
            return True
        self.seq = seq
        cmd, r = self.block.load(CMD), self.block.load(NROWS)
        alive = cmd != EXIT
        try:
            if cmd == MATVEC:
                x = np.empty((r, self.n_embd), np.float32)
                self.block.read(0, x)
                y = np.ascontiguousarray(self.local(x), dtype=np.float32)  # (r, hi - lo)
                self.block.write(out_at(self.n_embd) + R_MAX * self.lo, y)
            elif cmd == ROWS:
                ids = np.empty(r, np.float32)
                self.block.read(0, ids)
                ids = ids.astype(np.int64)
                for k in np.flatnonzero((ids >= self.lo) & (ids < self.hi)):
                    row = self.local.rows([ids[k] - self.lo])[0]           # (n_embd,)
                    self.block.write(out_at(self.n_embd) + int(k) * self.n_embd, row)
        except Exception:  # noqa: BLE001 (the main worker reports it; the traceback goes to the console)
            import traceback
            traceback.print_exc()
            self.block.store(FAIL + self.index, seq)
        self.block.store(DONE + self.index, seq)
        self.block.notify(DONE + self.index)
        return alive

    def serve(self) -> None:
        """Serve commands until EXIT (blocks this worker's thread; ``Atomics.wait`` between commands)."""
        while self.serve_one():
            self.block.wait(SEQ, self.seq, 1000)


# ---------------------------------------------------------------------------
# The entry points: the main worker's and a shard worker's
# ---------------------------------------------------------------------------

def plan(model, tensor_names, n_workers: int) -> dict | None:
    """What every shard must load to split ``model.output`` over ``n_workers`` workers, or None when
    it cannot be split (see :func:`weight_form`).

    ``{"tensor", "ranges", "form", "n_embd", "n_vocab"}``: ``ranges[0]`` stays in
    the main worker, ``ranges[i]`` goes to shard i - 1; ``form`` is the weight
    form of the main model's matrix. Raises PyEngineError for a bad split.
    """
    form = weight_form(model.output)
    n_vocab, n_embd = model.output.shape
    if form is None:
        return None
    if n_vocab >= 1 << 24:
        raise PyEngineError(f"n_vocab {n_vocab}: token ids travel as float32, exact below 2**24")
    return {"tensor": vocab_tensor(tensor_names), "ranges": row_ranges(n_vocab, n_workers), "form": form,
            "n_embd": n_embd, "n_vocab": n_vocab}


def install(model, spec: dict, block: Any) -> ShardedLinear:
    """Put a :class:`ShardedLinear` in place of ``model.output`` (and ``model.token_embd`` when they are
    the same object); the rows given away are let go. The shards must have loaded their rows."""
    lo, hi = spec["ranges"][0]
    tied = model.token_embd is model.output
    sharded = ShardedLinear(keep_rows(model, lo, hi), spec["ranges"], block, spec["n_embd"])
    model.output = sharded
    if tied:
        model.token_embd = sharded
    return sharded


def load_shard(files: list, spec: dict, index: int, block: Any) -> ShardServer:
    """Shard ``index``'s server: rows ``spec["ranges"][index + 1]`` of ``spec["tensor"]`` read from
    ``files`` (browser Files, or byte sources) in ``spec``'s weight form. Raises PyEngineError."""
    from pyengine.gguf import open_gguf
    from pyengine.worker import BrowserFileSource

    lo, hi = spec["ranges"][index + 1]
    with open_gguf([f if hasattr(f, "read") else BrowserFileSource(f) for f in files]) as g:
        local = load_rows(g, spec["tensor"], lo, hi, spec["form"])
    return ShardServer(local, index, lo, hi, block, spec["n_embd"])


def serve_shard(files: list, spec: Any, index: int, sab: Any, ready) -> None:
    """A shard worker's job (``web/shard_worker.js``): load its rows, call ``ready(bytes held)``, then
    serve commands until EXIT; its rows are let go on return."""
    import gc

    server = load_shard(files, spec.to_py() if hasattr(spec, "to_py") else spec, index, JsBlock(sab))
    ready(server.local.nbytes)
    try:
        server.serve()
    finally:
        del server
        gc.collect()
