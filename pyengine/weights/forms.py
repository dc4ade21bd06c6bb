"""The weight forms: one class for each way a matrix ``W (n_out, n_in)`` can be held in memory.

Every form has the same small interface, and the forward pass sees nothing else:

- ``w(x)``: ``W x``, (n_in,) -> (n_out,) or (T, n_in) -> (T, n_out), float32;
- ``w.rows(ids)``: rows ``ids`` of W as float32 (R, n_in): the embedding lookup, ggml ``get_rows``;
- ``w.shape`` (n_out, n_in) and ``w.nbytes`` (bytes held).

The forms: :class:`pyengine.weights.blocks.Blocks` (the file's own blocks, their
products in the C kernel: the least memory and the fastest), :class:`F32`
(float32, 4 bytes a weight), :class:`pyengine.weights.quantized.Quantized` (each
ggml type's own codes and scales in int64 lanes, expanded or compact: numpy's
quantized products), and :class:`RowSplit` (consecutive rows held in parts of
different forms: a stack of tensors of different ggml types).
``act``, where a form has it, is the ggml vec_dot_type that the activations are
rounded to before the product (``matmul.round_activations``; the
``ggml_rounding`` option of :func:`pyengine.model.load_model`), None for none.
"""

from __future__ import annotations

import enum

import numpy as np

from pyengine.weights.matmul import matmul, round_activations


class Form(enum.Enum):
    """How one matrix holds its weights."""
    F32 = "float32"
    QUANTIZED = "the file's codes and scales, a code in each lane of an int64"
    COMPACT = "the file's codes and scales, several codes in each lane of an int64"
    ROW_SPLIT = "consecutive rows held in parts of different forms"
    BLOCKS = "the file's own ggml blocks, multiplied in the C kernel"


class F32:
    """``W`` as float32 (n_out, n_in): 4 bytes a weight."""
    form = Form.F32

    def __init__(self, w: np.ndarray, act: str | None = None):
        self.w = w                        # (n_out, n_in) float32
        self.act = act

    @property
    def shape(self) -> tuple[int, int]:
        return self.w.shape

    @property
    def nbytes(self) -> int:
        return self.w.nbytes

    def __call__(self, x: np.ndarray, acts: dict | None = None) -> np.ndarray:
        """(n_in,) -> (n_out,), or (T, n_in) -> (T, n_out); ``acts`` as the quantized form's (unused)."""
        return matmul(self.w, round_activations(x, self.act))

    def rows(self, ids) -> np.ndarray:
        return self.w[ids].astype(np.float32)                              # (R, n_in)


class RowSplit:
    """One matrix whose rows are held in consecutive parts, each a weight form of its own. ``W x`` is the
    parts' products one after the other; ``rows`` picks each id's part."""
    form = Form.ROW_SPLIT

    def __init__(self, parts: list):
        self.parts = parts                                                # rows in order
        self.starts = np.cumsum([0] + [p.shape[0] for p in parts])        # (len(parts) + 1,) first rows

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.starts[-1]), self.parts[0].shape[1])

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        acts: dict = {}                                                   # x's codes, quantized once a type
        return np.concatenate([p(x, acts) for p in self.parts], axis=-1)

    def rows(self, ids) -> np.ndarray:
        ids = np.asarray(ids)
        out = np.empty((len(ids), self.shape[1]), np.float32)             # (R, n_in)
        for part, a, b in zip(self.parts, self.starts[:-1], self.starts[1:]):
            mine = (ids >= a) & (ids < b)
            if mine.any():
                out[mine] = part.rows(ids[mine] - a)
        return out


def row_split(parts: list):
    """``parts`` (consecutive rows of one matrix) as one weight: the part itself when there is one."""
    return parts[0] if len(parts) == 1 else RowSplit(parts)


def add_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """``y += b`` (ggml ``add`` after ``mul_mat``) when the weight has a bias; y (..., n_out)."""
    if b is not None:
        y += b
    return y
