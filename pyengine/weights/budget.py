"""The memory budget: which form each matrix takes, what each form holds, and the wasm heap grown once.

``weights=`` names a policy (:data:`WEIGHT_FORMS`). "auto" holds every matrix
in the file's own blocks when the C kernel is loaded (``blocks``: the least
memory and the fastest). Without it, the numpy forms: every matrix float32 when
that fits the budget, else each ggml type's own codes in compact lanes, buying,
while the budget lasts, the forms that save the most decode time per byte
(:func:`plan_forms`, by the cost model :func:`matrix_ns`).
:func:`matrix_nbytes` says what a form holds before anything is read, so a load
can reserve its wasm heap at once (:func:`reserve_heap`) and a model too big for
any form is refused before the model loaded before it is let go.
"""

from __future__ import annotations

import heapq
import os
import sys
from typing import NamedTuple

import numpy as np

from pyengine.errors import PyEngineError
from pyengine.gguf import quants
from pyengine.gguf.ggml_types import GGML_TYPES_BY_NAME
from pyengine.weights import kernel
from pyengine.weights.forms import Form
from pyengine.weights.quantized import Layout

FILE_RATIO = 3.0                     # in the browser, all workers' wasm heaps within this many times the file
RUNTIME_BYTES = 100 * 2**20          # a worker's heap besides the weights: Python, numpy, KV cache, work arrays
MIN_BUDGET = 64 * 2**20              # the browser's budget is never less: a small model keeps float32
RAM_SHARE = 0.6                      # in CPython, the weights within this share of the memory available
# A wasm32 heap reaches 4 GiB. Past 2 GiB Pyodide 0.27.7's JS read addresses as signed until the build
# patched it (build_scripts/fetch_runtime.py, ADDRESS_FIXES), and file chunks go straight to their array
# (web/file_read.js). A worker's weights stay under the 4 GiB end, with room for the KV cache and growth.
HEAP_LIMIT = 2**32
HEAP_MAX = HEAP_LIMIT - 2**28
ARRAY_MAX = 2**31 - 1                # numpy's largest array on wasm32, in bytes
KV_MARGIN = 128 * 2**20              # heap kept free past a full KV cache: a forward pass's arrays (a prompt's chunk)
MIN_CONTEXT = 256                    # the least context a chat gets, in tokens, however full the heap
# "auto"'s cost model of a decode step in Pyodide (bench/bench_forms.py): ns a weight in each form (x SUB16 for
# codes with a scale every 16 weights: twice the scaling work), and ns of each product's fixed work.
NS_PER_WEIGHT = {Form.F32: 0.5, Form.QUANTIZED: 0.5, Form.COMPACT: 0.7, Form.BLOCKS: 0.15}
SUB16 = 1.3
NS_PER_CALL = {Form.F32: 20_000, Form.QUANTIZED: 130_000, Form.COMPACT: 170_000, Form.BLOCKS: 30_000}


# weights= policies: the form of every matrix, or None where the budget chooses (the page names them:
# pyengine.browser.settings.MEMORY)
WEIGHT_FORMS: dict[str, Form | None] = {
    "blocks": Form.BLOCKS,
    "numpy": None,
    "f32": Form.F32,
    "quantized": Form.QUANTIZED,
    "compact": Form.COMPACT,
    "mixed": None,
}
# what weights= may ask for: "auto", "numpy" (auto's choice among numpy's forms) and each form
CHOICES = ("auto", "numpy") + tuple(k for k, form in WEIGHT_FORMS.items() if form)


class Matrix(NamedTuple):
    """A matrix to place: its key (where it goes), its stacked parts ``(ggml type, rows)`` and its columns
    (of this worker's share)."""
    key: tuple
    parts: tuple
    n_in: int


def part_nbytes(ggml_type: str, n_rows: int, n_in: int, form: Form) -> int:
    """Bytes of ``n_rows`` rows of ``n_in`` weights of ``ggml_type`` in ``form`` (a type without integer
    codes is float32 in any form)."""
    if form is Form.F32 or ggml_type not in quants.QUANT_CODES:
        return 4 * n_rows * n_in
    if form is Form.BLOCKS:
        return GGML_TYPES_BY_NAME[ggml_type].n_bytes(n_in) * n_rows
    t = quants.QUANT_CODES[ggml_type]
    layout = Layout(t.bits, Layout.max_phases(t.bits) if form is Form.COMPACT else 1)
    rows = -(-n_rows // layout.rows) * layout.rows                              # padded to whole int64 rows
    scales = rows * (n_in // t.sub) * 4 * (2 if t.has_min else 1)         # float32 scale (and shift)
    return rows // layout.rows * n_in * 8 + scales


def matrix_nbytes(m: Matrix, form: Form) -> int:
    """Bytes of matrix ``m`` held in ``form``."""
    return sum(part_nbytes(t, n, m.n_in, form) for t, n in m.parts)


def matrix_ns(m: Matrix, form: Form) -> float:
    """The cost model's ns for one product of matrix ``m`` (one token) held in ``form``: float32 as one
    matrix, the codes as one product a part (a RowSplit of runs of one type)."""
    coded = [(quants.QUANT_CODES.get(t), n) for t, n in m.parts]
    if form is Form.F32 or all(c is None for c, _ in coded):
        return NS_PER_CALL[Form.F32] + NS_PER_WEIGHT[Form.F32] * m.n_in * sum(n for _, n in m.parts)
    return sum(NS_PER_CALL[form] + NS_PER_WEIGHT[form] * n * m.n_in * (SUB16 if c is not None and c.sub == 16 else 1)
               for c, n in coded)


def plan_forms(matrices: list[Matrix], weights: str, budget: int) -> tuple[str, dict]:
    """The policy in use and ``{key: Form}`` for ``matrices`` under ``weights`` (one of ``CHOICES``) within
    ``budget`` bytes.

    "auto": "blocks" when the C kernel is loaded (:func:`pyengine.weights.kernel.get`) and some matrix has
    a type it multiplies. Else, and for
    "numpy": "f32" when every matrix fits as float32, else "mixed": compact lanes for all, then the
    upgrades (a matrix to expanded lanes or to float32) in the order of the time they save per byte
    (:func:`matrix_ns`), each one that still fits ("quantized" when every matrix ends expanded,
    "compact" when none is upgraded). A fixed policy ignores the budget. Raises PyEngineError for an
    unknown ``weights``.
    """
    if weights not in CHOICES:
        raise PyEngineError(f"weights must be {', '.join(map(repr, CHOICES))}, got {weights!r}")
    if weights == "auto" and kernel.get() is not None and any(t in kernel.TYPES for m in matrices for t, _ in m.parts):
        weights = "blocks"
    if weights not in ("auto", "numpy"):
        return weights, {m.key: WEIGHT_FORMS[weights] for m in matrices}
    if sum(matrix_nbytes(m, Form.F32) for m in matrices) <= budget:
        return "f32", {m.key: Form.F32 for m in matrices}
    forms = {m.key: Form.COMPACT for m in matrices}
    held_in = (Form.COMPACT, Form.QUANTIZED, Form.F32)
    cost = {(m.key, f): (matrix_nbytes(m, f), matrix_ns(m, f)) for m in matrices for f in held_in}
    total = sum(cost[m.key, Form.COMPACT][0] for m in matrices)

    def gain(key, form) -> tuple[float, int]:
        """(ns saved per byte, bytes more) of moving ``key`` from its form to ``form``."""
        (b0, t0), (b1, t1) = cost[key, forms[key]], cost[key, form]
        return ((t0 - t1) / (b1 - b0) if b1 > b0 else np.inf if t1 < t0 else -np.inf), b1 - b0

    heap = [(-gain(key, f)[0], i, key, f) for i, (key, f) in enumerate((k, f) for k in forms for f in held_in[1:])]
    heapq.heapify(heap)
    while heap:                                  # lazily: an entry whose matrix moved since is weighed again
        neg, i, key, form = heapq.heappop(heap)
        per_byte, extra = gain(key, form)
        if per_byte != -neg:
            heapq.heappush(heap, (-per_byte, i, key, form))
        elif per_byte > 0 and total + extra <= budget:
            forms[key], total = form, total + extra
    held = set(forms.values())
    name = "compact" if held == {Form.COMPACT} else "quantized" if held == {Form.QUANTIZED} else "mixed"
    return name, forms


def default_budget(file_bytes: int, n_workers: int = 1) -> int:
    """Bytes of weights one of ``n_workers`` workers may hold for a model of ``file_bytes`` bytes of tensors:
    in the browser ``FILE_RATIO`` times the file over all workers, less each one's runtime (at least
    ``MIN_BUDGET``, at most a worker's heap); in CPython ``RAM_SHARE`` of the memory available."""
    if sys.platform == "emscripten":
        return browser_budget(file_bytes, n_workers)
    return int(RAM_SHARE * available_memory())


def browser_budget(file_bytes: int, n_workers: int = 1) -> int:
    """The browser's budget of weights a worker (see :func:`default_budget`), in any runtime (tests), at
    least ``MIN_BUDGET`` and at most what a worker's heap holds besides its runtime (``HEAP_MAX`` less
    ``RUNTIME_BYTES``), so that "auto" picks forms that fit."""
    return max(int(min(FILE_RATIO * file_bytes / n_workers, HEAP_MAX)) - RUNTIME_BYTES, MIN_BUDGET)


def available_memory() -> int:
    """Bytes of memory available to this process (Linux ``MemAvailable``; else the physical memory)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(matrices: list[Matrix], forms: dict, nbytes: int, n_workers: int, file_bytes: int,
               names: dict[str, str] | None = None) -> None:
    """In the browser, refuse weights of ``nbytes`` per worker that no worker's heap can hold (``HEAP_MAX``
    with ``RUNTIME_BYTES``), or an array past ``ARRAY_MAX``: a PyEngineError saying what the model needs,
    what the browser allows, and what would fit (``names``: what to say after a ``weights=`` choice's
    form, the page's name for it). Nothing in CPython (the system says)."""
    if sys.platform != "emscripten":
        return
    biggest = max(matrix_nbytes(m, forms[m.key]) for m in matrices)
    if nbytes + RUNTIME_BYTES <= HEAP_MAX and biggest <= ARRAY_MAX:
        return
    least, label = (Form.BLOCKS, "the file's own blocks") if kernel.get() is not None \
        else (Form.COMPACT, "the compact form" + (names or {}).get("compact", ""))
    smallest = forms_nbytes(matrices, dict.fromkeys(forms, least)) + RUNTIME_BYTES
    gib = 2**30
    hint = (f"the smallest form, {label}, would need {smallest / gib:.2f} GiB a worker"
            if smallest <= HEAP_MAX else f"even the smallest form, {label}, needs {smallest / gib:.2f} GiB a worker: "
            f"more workers, or a smaller quantization of the model")
    raise PyEngineError(f"this model ({file_bytes / gib:.2f} GiB of tensors) needs "
                        f"{(nbytes + RUNTIME_BYTES) / gib:.2f} GiB in each of {n_workers} worker(s) in this "
                        f"form, largest array {biggest / gib:.2f} GiB; a browser worker holds at most "
                        f"{HEAP_MAX / gib:.2f} GiB (a wasm32 memory ends at 4 GiB): {hint}")


def context_that_fits(heaps: list[int], position_nbytes: int, state_nbytes: int, n_ctx_train: int) -> int | None:
    """A chat's context in tokens: the positions whose keys and values (``position_nbytes`` each) every worker
    can add to its heap (``heaps``: each worker's bytes now; [] outside the browser), besides the recurrent
    states a hybrid model keeps (``state_nbytes``), before the fullest passes ``HEAP_LIMIT`` less
    ``KV_MARGIN``; at most ``n_ctx_train``, at least ``MIN_CONTEXT`` within it; None (the training context)
    outside the browser."""
    if not heaps:
        return None
    room = (HEAP_LIMIT - KV_MARGIN - max(heaps) - state_nbytes) // max(position_nbytes, 1)
    return min(n_ctx_train, max(MIN_CONTEXT, room))


def forms_nbytes(matrices: list[Matrix], forms: dict) -> int:
    """Bytes of ``matrices`` in ``forms``."""
    return sum(matrix_nbytes(m, forms[m.key]) for m in matrices)


def reserve_heap(nbytes: int) -> None:
    """Under Pyodide, grow the wasm heap once by ``nbytes``: what a load is about to hold.

    The wasm heap never shrinks, and whenever malloc runs out it grows by up to
    4 MiB more than asked (build_scripts/fetch_runtime.py, GROWTH_FIX): a load
    allocating matrix after matrix would leave growth after growth's slack on
    top of its weights. One array of the whole, freed at once, grows the heap
    by exactly that; the weights then fill the space it left. Nothing happens
    in CPython, or when the space cannot be had (the load then fails on its
    own, with its own error).
    """
    if sys.platform == "emscripten":
        try:
            np.empty(nbytes, np.uint8)
        except (MemoryError, ValueError):   # ValueError: past numpy's largest array on wasm32
            pass
