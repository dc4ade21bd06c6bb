"""The protocol over the shared buffer: commands, a barrier, the sums and the gather of a split forward pass.

Every worker runs the same forward pass on its shard; they meet only where the
math needs every shard (``pyengine.parallel.split``): each all-reduce writes this
worker's partial sums to its slot, waits at a barrier, and adds every slot in
worker order (so every worker gets the same bits), and the logits gather writes
each shard's vocabulary slice for the main worker to read. Slots alternate
between two halves from one meeting to the next, so a worker may write the next
sums while a slower one still reads the last.

The buffer, ``Int32`` control words then ``Float32`` data::

    ctl[SEQ]                  the command number; a helper runs each new one once
    ctl[CMD], ctl[ARGS..]     FORWARD (n tokens, position, logits mode, cache id, n_ctx, trace), PING or EXIT
    ctl[COUNT], ctl[GEN]      the barrier: workers arrived, generation
    ctl[ABORT]                a command the main worker gave up (Stop): helpers leave it at once
    ctl[TRACE]                0, or 1 + the q heads a traced step keeps (pyengine.model.trace)
    ctl[STAMP + i]            the last barrier generation worker i reached (who is missing)
    ctl[DONE + i], [FAIL + i] the last command helper i finished, and failed (DEAD: it serves no more)
    ctl[LOADED + 3i ..]       worker i's load: tensors read, bytes read (low 31 bits, the rest)
    ctl[HEAP + i]             helper i's wasm heap after its last command, in 64 KiB pages
    ints[TOKENS ..]           the command's token ids
    data[reduce slots]        2 x workers x REDUCE_ROWS x n_embd floats
    data[gather slots]        workers x GATHER_ROWS x the largest vocabulary slice

A block is anything with ``load``, ``store``, ``add``, ``notify``, ``wait``,
``write``, ``read``, ``write_ints`` and ``read_ints`` (and may have ``sum``, a whole
meeting of :meth:`Channel.all_reduce` in one call): :class:`ThreadBlock` in
CPython (threads stand in for workers in the tests), ``JsBlock`` in a browser
(``pyengine.browser.shared_memory``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from pyengine.errors import PyEngineError
from pyengine.model.transformer import LOGITS_MODES  # the LOGITS word is an index into it
from pyengine.parallel.split import MAX_WORKERS

WAIT_MS = 20            # one bounded wait; a Stop (KeyboardInterrupt) lands between two
TIMEOUT_S = 120.0       # a worker silent this long is dead: PyEngineError
MAX_TOKENS = 4096       # token ids a command carries (a longer forward takes several)
REDUCE_ROWS = 512       # rows of one sum (at least the model's UBATCH: a prompt step meets once a sum)
GATHER_ROWS = 16        # rows of logits gathered at once

# control words (Int32)
SEQ, CMD, N_TOKENS, POS, LOGITS, CACHE, N_CTX, COUNT, GEN, ABORT, TRACE = range(11)
STAMP = 16
DONE = STAMP + MAX_WORKERS
FAIL = DONE + MAX_WORKERS
LOADED = FAIL + MAX_WORKERS
HEAP = LOADED + 3 * MAX_WORKERS
TOKENS = HEAP + MAX_WORKERS
CTL_WORDS = TOKENS + MAX_TOKENS
FORWARD, PING, EXIT = 1, 2, 3
PAGE = 2**16            # bytes of a wasm page: the unit of ctl[HEAP + i]
DEAD = -2               # ctl[FAIL + i] of a helper whose serving ended for good (killed): mark_dead


class AbortError(Exception):
    """The main worker gave up the command (Stop): a helper leaves it."""


def layout(n_workers: int, n_embd: int, vocab_slice: int) -> dict:
    """Where the slots are: float32 offsets and sizes for ``n_workers`` workers."""
    reduce_size = REDUCE_ROWS * n_embd
    gather_size = GATHER_ROWS * vocab_slice
    return {"n_workers": n_workers, "reduce": 0, "reduce_size": reduce_size,
            "gather": 2 * n_workers * reduce_size, "gather_size": gather_size,
            "n_floats": 2 * n_workers * reduce_size + n_workers * gather_size}


class ThreadBlock:
    """The buffer as numpy arrays shared by threads, for CPython: one condition variable stands in for
    ``Atomics.wait`` / ``notify``."""

    def __init__(self, n_floats: int):
        self.ctl = np.zeros(CTL_WORDS, np.int32)
        self.data = np.zeros(n_floats, np.float32)
        self.cond = threading.Condition()

    def load(self, i: int) -> int:
        return int(self.ctl[i])

    def store(self, i: int, v: int) -> None:
        with self.cond:
            self.ctl[i] = v

    def add(self, i: int, v: int) -> int:
        """ctl[i] += v atomically; returns the old value (``Atomics.add``)."""
        with self.cond:
            old = int(self.ctl[i])
            self.ctl[i] = old + v
            return old

    def notify(self, i: int) -> None:
        with self.cond:
            self.cond.notify_all()

    def wait(self, i: int, v: int, ms: float) -> None:
        with self.cond:
            if self.ctl[i] == v:
                self.cond.wait(ms / 1000)

    def write(self, at: int, a: np.ndarray) -> None:
        self.data[at:at + a.size] = a.reshape(-1)

    def read(self, at: int, out: np.ndarray) -> None:
        out.reshape(-1)[:] = self.data[at:at + out.size]

    def write_ints(self, at: int, a: np.ndarray) -> None:
        self.ctl[at:at + a.size] = a

    def read_ints(self, at: int, n: int) -> np.ndarray:
        return self.ctl[at:at + n].astype(np.int64)


class Channel:
    """One worker's end of the shared buffer: its index, the workers' count, the slots' layout."""

    def __init__(self, block: Any, index: int, lay: dict, widths: list[int]):
        self.block, self.index, self.lay = block, index, lay
        self.count = lay["n_workers"]
        self.widths = widths           # each shard's vocabulary rows: the logits' columns it gathers
        self.meetings = 0              # all-reduces of the running command (the slot half alternates)
        self.seq = 0                   # the running command
        self.reported = 0              # the last command a helper's failure was raised for
        self.waited = 0.0              # seconds spent waiting at barriers for the other workers

    # --- loading: every worker reads its shard at once
    def report_load(self, tensors: int, done_bytes: int) -> None:
        """This worker has read ``tensors`` tensors, ``done_bytes`` bytes of its shard."""
        at = LOADED + 3 * self.index
        for i, v in enumerate((tensors, done_bytes & 0x7FFFFFFF, done_bytes >> 31)):
            self.block.store(at + i, v)

    def load_progress(self) -> tuple[int, int]:
        """The whole load so far: the fewest tensors any worker has read, and the bytes read by all."""
        words = [[self.block.load(LOADED + 3 * i + j) for j in range(3)] for i in range(self.count)]
        return min(w[0] for w in words), sum(w[1] + (w[2] << 31) for w in words)

    # --- meeting the other workers
    def barrier(self) -> None:
        """Wait until every worker has arrived. Raises AbortError (a helper, when the main worker gave the
        command up or a helper failed it), PyEngineError (the main worker) naming a helper that failed
        the command or the workers missing after ``TIMEOUT_S`` (a helper waits for as long as the main
        worker does, which then gives the command up); KeyboardInterrupt (Stop) gets through between
        bounded waits."""
        gen = self._arrive()
        if gen is not None:
            self._await(gen)

    def _arrive(self) -> int | None:
        """The arriving half of :meth:`barrier`: None when this worker came last (the others are released),
        else the generation to wait for."""
        b = self.block
        gen = b.load(GEN)
        b.store(STAMP + self.index, gen + 1)
        if b.add(COUNT, 1) == self.count - 1:                             # the last to arrive
            b.store(COUNT, 0)
            b.store(GEN, gen + 1)
            b.notify(GEN)
            return None
        return gen

    def _await(self, gen: int) -> None:
        """The waiting half of :meth:`barrier` (counted in ``waited``)."""
        t0 = time.monotonic()
        try:
            self._wait_generation(gen, t0)
        finally:
            self.waited += time.monotonic() - t0

    def _wait_generation(self, gen: int, t0: float) -> None:
        """The waiting half of :meth:`barrier`: until ctl[GEN] moves past ``gen`` (raises as it says)."""
        b = self.block
        while b.load(GEN) == gen:
            if self.index and b.load(ABORT) == self.seq:
                raise AbortError()
            failed = [i + 1 for i in range(1, self.count) if b.load(FAIL + i) in (self.seq, DEAD)]
            if failed:                                                    # a helper failed this command
                if self.index:
                    raise AbortError()
                self.reported = self.seq
                raise self.failure(failed[0] - 1)
            if self.index == 0 and time.monotonic() - t0 > TIMEOUT_S:        # helpers wait for the main worker
                missing = [i + 1 for i in range(self.count) if b.load(STAMP + i) <= gen]
                raise PyEngineError(f"worker {', '.join(map(str, missing))} did not answer in {TIMEOUT_S:.0f} s")
            b.wait(GEN, gen, WAIT_MS)

    def all_reduce(self, a: np.ndarray) -> np.ndarray:
        """The sum over the workers of ``a`` (R, n) float32, in worker order (the same bits everywhere).
        A block with ``sum`` (``JsBlock`` with web/meeting.js) writes, meets and adds in one call; when
        the others are late, this worker waits here as :meth:`barrier` does."""
        lay = self.lay
        size = lay["reduce_size"]
        rows = size // a.shape[-1]
        out = np.empty(a.shape, np.float32)
        for r in range(0, len(a), rows):                                  # a longer sum takes several meetings
            half, self.meetings = self.meetings % 2, self.meetings + 1
            part = np.ascontiguousarray(a[r:r + rows], np.float32)
            slots = lay["reduce"] + half * self.count * size
            acc = out[r:r + rows]
            if hasattr(self.block, "sum"):
                t0 = time.monotonic()
                gen = self.block.sum(part, acc, slots, size, self.index, self.count)
                self.waited += time.monotonic() - t0
                if gen < 0:
                    continue
                self._await(gen)
            else:
                self.block.write(slots + self.index * size, part)
                self.barrier()
            got = np.empty_like(part)
            for w in range(self.count):
                self.block.read(slots + w * size, got if w else acc)
                if w:
                    acc += got
        return out

    def gather(self, a: np.ndarray) -> np.ndarray | None:
        """Each worker's columns ``a`` (R, widths[index]) side by side: (R, sum of widths) on the main worker,
        None on a helper. Only the main worker reads the slots, and the next command waits for it."""
        lay, widths = self.lay, self.widths
        out = np.empty((len(a), sum(widths)), np.float32) if self.index == 0 else None
        for r in range(0, len(a), GATHER_ROWS):
            if r:
                self.barrier()                                            # the main worker has read the last rows
            part = np.ascontiguousarray(a[r:r + GATHER_ROWS], np.float32)
            self.block.write(lay["gather"] + self.index * lay["gather_size"], part)
            self.barrier()
            if out is not None:
                c = 0
                for w, width in enumerate(widths):
                    got = np.empty((len(part), width), np.float32)
                    self.block.read(lay["gather"] + w * lay["gather_size"], got)
                    out[r:r + len(part), c:c + width] = got
                    c += width
        return out

    # --- commands: the main worker writes them, helpers serve them
    def send(self, cmd: int, tokens: np.ndarray | None = None, pos: int = 0, logits: str = "none",
             cache: Any = None, trace: int = 0) -> None:
        """Post command ``cmd`` (the main worker), once every helper has finished the last one: ``tokens``
        at position ``pos`` of the KV cache ``cache`` (its ``id`` and ``n_ctx`` go; None: 0 and 0). Raises
        PyEngineError when a helper serves no more (EXIT still goes to the others)."""
        if cmd != EXIT and self.dead():
            raise self.failure(self.dead()[0] - 1)
        self.wait_idle()
        b = self.block
        n = 0 if tokens is None else len(tokens)
        if n:
            b.write_ints(TOKENS, np.asarray(tokens, np.int32))
        cache_id, n_ctx = (0, 0) if cache is None else (cache.id, cache.n_ctx)
        for word, v in ((CMD, cmd), (N_TOKENS, n), (POS, pos), (LOGITS, LOGITS_MODES.index(logits)),
                        (CACHE, cache_id), (N_CTX, n_ctx), (TRACE, trace)):
            b.store(word, v)
        self.seq = b.load(SEQ) + 1
        self.meetings = 0
        b.store(SEQ, self.seq)
        b.notify(SEQ)

    def wait_idle(self) -> None:
        """Until every helper has finished the last command (a Stop may have left some mid-way: they see
        ABORT and leave it). Raises PyEngineError naming a helper silent for ``TIMEOUT_S`` or failed."""
        b, t0 = self.block, time.monotonic()
        for i in range(1, self.count):
            while (done := b.load(DONE + i)) != self.seq and b.load(FAIL + i) != DEAD:
                if time.monotonic() - t0 > TIMEOUT_S:
                    raise PyEngineError(f"worker {i + 1} did not answer in {TIMEOUT_S:.0f} s")
                b.wait(DONE + i, done, WAIT_MS)
        b.store(COUNT, 0)                                                 # a barrier left mid-way starts anew
        failed = [i for i in range(1, self.count) if b.load(FAIL + i) == self.seq]
        for i in failed:
            b.store(FAIL + i, -1)
        if failed and self.seq and self.reported != self.seq:          # not yet said at a barrier
            raise PyEngineError(f"worker {failed[0] + 1} failed (see the browser console)")

    def heaps(self) -> list[int]:
        """Each helper's wasm heap in bytes after its last command (0 where it does not know it)."""
        return [self.block.load(HEAP + i) * PAGE for i in range(1, self.count)]

    def dead(self) -> list[int]:
        """The workers (numbered from 1, the main worker) whose helper serves no more (:func:`mark_dead`)."""
        return [i + 1 for i in range(1, self.count) if self.block.load(FAIL + i) == DEAD]

    def failure(self, i: int) -> PyEngineError:
        """The error for helper ``i``'s failure: a command it failed, or its serving ended."""
        if self.block.load(FAIL + i) == DEAD:
            return PyEngineError(f"worker {i + 1} stopped (see the browser console)")
        return PyEngineError(f"worker {i + 1} failed (see the browser console)")

    def abort(self) -> None:
        """Give the running command up (the main worker, on Stop or an error): helpers leave it."""
        self.block.store(ABORT, self.seq)
        self.block.notify(GEN)

    def next_command(self, last: int) -> int:
        """Wait for a command newer than ``last`` (a helper); returns its number."""
        b = self.block
        while (seq := b.load(SEQ)) == last:
            b.wait(SEQ, last, 1000)
        self.seq, self.meetings = seq, 0
        return seq

    def finish(self, failed: bool, heap: int = 0) -> None:
        """A helper is done with the running command; ``heap``: its wasm heap now, in bytes (0: unknown)."""
        self.block.store(HEAP + self.index, heap // PAGE)
        if failed:
            self.block.store(FAIL + self.index, self.seq)
        self.block.store(DONE + self.index, self.seq)
        self.block.notify(DONE + self.index)


def mark_dead(block: Any, index: int) -> None:
    """Helper ``index``'s serving ended for good (its Python was killed or died): the main worker's
    barrier and every later command fail at once, not after TIMEOUT_S. web/shard_worker.js does the
    same in JavaScript with the words of :func:`dead_words` when its Python throws out of its loop."""
    block.store(FAIL + index, DEAD)
    block.notify(GEN)
    block.notify(DONE + index)


def dead_words(index: int) -> dict:
    """Where :func:`mark_dead` writes, for JavaScript: ``{fail, value, gen, done}`` (Int32 word indices)."""
    return {"fail": FAIL + index, "value": DEAD, "gen": GEN, "done": DONE + index}


def ping(chan: Channel, n: int = 20) -> float:
    """Seconds of one meeting (a PING command: every helper arrives at one barrier), the median of ``n``."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        chan.send(PING)
        chan.barrier()
        chan.wait_idle()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))
