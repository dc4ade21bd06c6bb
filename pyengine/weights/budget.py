"""The memory budget: which form the weights take, what each form holds, and the wasm heap grown once.

``weights=`` names a policy (:data:`WEIGHT_FORMS`): one form for the layers'
matrices and one for the vocabulary matrices (``token_embd``, ``output``).
"auto" picks one from the model's size (:func:`pick_weights`).
:func:`form_nbytes` says what a policy holds before anything is read, and a load
first reserves that much of the wasm heap (:func:`reserve_heap`).
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

import numpy as np

from pyengine.errors import PyEngineError
from pyengine.weights.build import INT8_BLOCK, packed_block
from pyengine.weights.forms import Form
from pyengine.weights.lanes import LANES
from pyengine.weights.matmul import USE_BLAS

F32_BUDGET_PYODIDE = 256 * 2**20    # float32 weights up to which "auto" keeps float32 in Pyodide: tiny models
F32_BUDGET = 2 * 2**30 if USE_BLAS else F32_BUDGET_PYODIDE   # in CPython float32 is the fastest (BLAS prefill)
WEIGHTS_BUDGET = int(2.5 * 2**30)   # bytes of "mixed" weights above which "auto" keeps every matrix int8
MIXED_FILE_RATIO = 2.6               # "mixed": all weights within this many times the tensors' bytes in the file
HEAP_HEADROOM = 32 * 2**20           # bytes reserved past the weights: a load's chunks, a forward pass's arrays


class Weights(NamedTuple):
    """One ``weights=`` policy: the forms of the layers' and of the vocabulary matrices, and how the
    page names it (the Memory option, None where only "auto" picks it; the model card's line)."""
    layers: Form
    vocab: Form
    option: str | None
    card: str


WEIGHT_FORMS = {
    "f32": Weights(Form.F32, Form.F32, "fastest, most memory", "f32: float32, the fastest, the most memory"),
    "packed": Weights(Form.PACKED, Form.PACKED, "fast, two thirds of that",
                      "packed: int8 codes three to an int64, two thirds of f32's memory"),
    "mixed": Weights(Form.PACKED, Form.ROW_SPLIT, None,
                     "mixed: packed, the vocabulary partly int8 (under 3x the file)"),
    "int8": Weights(Form.INT8_BLOCKS, Form.INT8_ROWS, "low memory, slower", "int8: low memory, slower"),
}
AUTO_OPTION = "balanced (default)"   # the page's name for weights="auto"


def is_vocab(name: str) -> bool:
    """True for the vocabulary matrices (n_vocab rows): the token embedding and the output layer."""
    return name in ("token_embd.weight", "output.weight")


def vocab_tensor(tensor_names) -> str:
    """The GGUF tensor behind ``model.output``: ``output.weight``, or ``token_embd.weight`` when tied."""
    return "output.weight" if "output.weight" in tensor_names else "token_embd.weight"


def vocab_forms(weights: str, tensor_names) -> tuple[Form, Form]:
    """The forms of (token_embd, output) under ``weights``: an untied token_embd, only looked up by
    rows, is int8 by rows where the output matrix is a row split."""
    vocab = WEIGHT_FORMS[weights].vocab
    untied = "output.weight" in tensor_names
    return (Form.INT8_ROWS if untied and vocab is Form.ROW_SPLIT else vocab), vocab


def pick_weights(weights: str, tensors: list[tuple[str, tuple]], f32_budget: int | None = None) -> str:
    """The policy (a key of ``WEIGHT_FORMS``) that ``weights`` asks for, given (name, GGUF shape).

    "auto": "f32" while every weight as float32 fits ``f32_budget`` (default
    ``F32_BUDGET``: 2 GiB in CPython, 256 MiB in Pyodide), else "mixed" while
    that fits ``WEIGHTS_BUDGET``, else "int8". Raises PyEngineError for an
    unknown ``weights``.
    """
    if weights != "auto" and weights not in WEIGHT_FORMS:
        raise PyEngineError(f"weights must be 'auto', {', '.join(map(repr, WEIGHT_FORMS))}, got {weights!r}")
    if weights != "auto":
        return weights
    f32 = sum(4 * math.prod(shape) for _, shape in tensors)
    f32_budget = F32_BUDGET if f32_budget is None else f32_budget
    return "f32" if f32 <= f32_budget else "mixed" if form_nbytes(tensors, "mixed") <= WEIGHTS_BUDGET else "int8"


def matrix_nbytes(form: Form, shape: tuple, q8_0: bool = False) -> int:
    """Bytes of a weight of GGUF shape ``(n_in, n_out)`` held in ``form`` (ROW_SPLIT counts as
    INT8_ROWS: ``form_nbytes`` adds its packed rows); ``q8_0``: stored as Q8_0 (packed with its
    own blocks of 32)."""
    n_in, n_out = shape
    if form is Form.F32:
        return 4 * n_in * n_out
    if form is Form.PACKED:
        m = -(-n_out // LANES)
        return m * n_in * 8 + LANES * m * (n_in // packed_block(["Q8_0" if q8_0 else "?"], n_in)) * 4
    if form in (Form.INT8_ROWS, Form.ROW_SPLIT):
        return n_out * n_in + 4 * (n_out + n_in)
    return n_out * n_in + 4 * n_out * (n_in // INT8_BLOCK if n_in % INT8_BLOCK == 0 else 1)


def form_nbytes(tensors: list[tuple[str, tuple]], weights: str, vocab_rows: int = 0, q8_0=()) -> int:
    """Bytes of the weights ``(name, GGUF shape)`` held under policy ``weights``, with ``vocab_rows``
    rows of the output matrix packed in "mixed"; ``q8_0``: the names stored as Q8_0."""
    shapes = dict(tensors)
    embd_form, out_form = vocab_forms(weights, shapes)
    out = vocab_tensor(shapes)
    total = 0
    for name, shape in tensors:
        if len(shape) == 1 or min(shape) == 1:
            total += 4 * math.prod(shape)
        elif not is_vocab(name):
            total += matrix_nbytes(WEIGHT_FORMS[weights].layers, shape, name in q8_0)
        elif name == out and out_form is Form.ROW_SPLIT:
            r = min(vocab_rows, shape[1])
            total += matrix_nbytes(Form.PACKED, (shape[0], r), name in q8_0) + \
                matrix_nbytes(Form.INT8_ROWS, (shape[0], shape[1] - r))
        else:
            total += matrix_nbytes(out_form if name == out else embd_form, shape, name in q8_0)
    return total


def mixed_vocab_rows(tensors: list[tuple[str, tuple]], budget: int, q8_0=()) -> int:
    """The rows of the output matrix the "mixed" form packs: as many as keep ``form_nbytes`` within
    ``budget`` bytes, a multiple of 3 (0 when the rest alone passes it)."""
    shapes = dict(tensors)
    out = vocab_tensor(shapes)
    n_in, n_vocab = shapes[out]
    per_row = matrix_nbytes(Form.PACKED, (n_in, 3), out in q8_0) / 3 - (n_in + 4)   # a packed row, less an int8 one
    r = int((budget - form_nbytes(tensors, "mixed", 0, q8_0)) // per_row) // LANES * LANES
    return max(0, min(n_vocab, r))


def mixed_rows_for(tensors: list[tuple[str, tuple]], file_bytes: int, q8_0=()) -> int:
    """:func:`mixed_vocab_rows` within ``MIXED_FILE_RATIO`` times the file's ``file_bytes`` of tensors."""
    return mixed_vocab_rows(tensors, int(MIXED_FILE_RATIO * file_bytes), q8_0)


def reserve_heap(nbytes: int) -> None:
    """Under Pyodide, grow the wasm heap once by ``nbytes``: what a load is about to hold.

    The wasm heap never shrinks, and whenever malloc runs out emscripten grows
    it by 20% more than asked, up to 96 MiB: a load allocating matrix after
    matrix would leave that much unused on top of its weights. One array of the
    whole, freed at once, grows the heap by exactly that; the weights then fill
    the space it left. Nothing happens in CPython, or when the space cannot be
    had (the load then fails on its own, with its own error).
    """
    if sys.platform == "emscripten":
        try:
            np.empty(nbytes, np.uint8)
        except MemoryError:
            pass
