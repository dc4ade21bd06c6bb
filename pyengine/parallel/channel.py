"""The protocol over the shared buffer: control words, commands, and waiting for the shards.

The buffer (``Int32`` control words, then ``Float32`` data)::

    ctl[SEQ]          command number; a shard serves each new value once
    ctl[CMD]          MATVEC (x -> rows of W x), ROWS (token ids -> embedding rows), PING (nothing) or EXIT
    ctl[MAT]          which matrix of the plan (0: the vocabulary matrix, then 4 per layer)
    ctl[NROWS]        R, the rows of x (or ids) in this command (at most the matrix's ``cap``)
    ctl[DONE + i]     the last command shard i finished (== SEQ: its output is there)
    ctl[FAIL + i]     the last command shard i failed
    data[0 : x_size]                            x (R, n_in), or R token ids (as float32)
    data[x_size + cap*lo : ... + R*(hi-lo)]     MATVEC: shard (lo, hi)'s rows of the output (R, hi - lo)
    data[x_size + k*n_embd : ... + n_embd]      ROWS: the embedding row of id k, written by its owner

Only the main worker writes commands. A stale command (the main worker gave up
waiting, on Stop) needs no cleanup: the next one has a new SEQ, and the main
worker reads only after ``DONE + i == SEQ``. A block is anything with
``load``, ``store``, ``notify``, ``wait``, ``write`` and ``read``:
:class:`NumpyBlock` in CPython (the tests serve the shards in-process),
``pyengine.browser.shared_memory.JsBlock`` in a browser.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pyengine.errors import PyEngineError

MAX_SHARDS = 8          # helper workers a shared buffer has room for
WAIT_MS = 20            # one bounded Atomics.wait; Stop is seen between two
TIMEOUT_S = 120.0       # a shard silent this long is dead: PyEngineError

# control words (Int32) and commands
SEQ, CMD, NROWS, MAT, DONE, FAIL = 0, 1, 2, 3, 8, 8 + MAX_SHARDS
CTL_WORDS = 8 + 2 * MAX_SHARDS
MATVEC, ROWS, EXIT, PING = 1, 2, 3, 4


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
