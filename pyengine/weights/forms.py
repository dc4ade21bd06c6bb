"""The weight forms: one class for each way a matrix ``W (n_out, n_in)`` can be held in memory.

Every form has the same small interface, and the forward pass sees nothing else:

- ``w(x)``: ``W x``, (n_in,) -> (n_out,) or (T, n_in) -> (T, n_out), float32;
- ``w.rows(ids)``: rows ``ids`` of W as float32 (R, n_in): the embedding lookup, ggml ``get_rows``;
- ``w.shape`` (n_out, n_in) and ``w.nbytes`` (bytes held);
- ``w.form``: its :class:`Form`, and ``w.take_rows(lo, hi, copy=True)``: rows ``lo..hi-1`` in the
  same form, copied or as views (a worker keeps its share of a matrix split over several workers;
  ``w.align`` rows must stay together).

``act``, where a form has it, is the ggml vec_dot_type that the activations are
rounded to before the product (``matmul.round_activations``; the
``ggml_rounding`` option of :meth:`pyengine.model.Model.from_gguf`), None for none.
"""

from __future__ import annotations

import enum

import numpy as np

from pyengine.weights.lanes import LANES, matmul_packed, unpack_lanes
from pyengine.weights.matmul import matmul, matmul_int8, round_activations


class Form(enum.Enum):
    """How one matrix holds its weights."""
    F32 = "float32"
    INT8_BLOCKS = "int8 codes, a float32 scale per block of a row"
    INT8_ROWS = "int8 codes, a float32 scale per row and one per column"
    PACKED = "int8 codes three rows to an int64, a float32 scale per block"
    ROW_SPLIT = "consecutive rows held in parts of different forms"


class F32:
    """``W`` as float32 (n_out, n_in): 4 bytes a weight, the fastest form."""
    form = Form.F32
    align = 1                                                              # rows a split keeps together

    def __init__(self, w: np.ndarray, act: str | None = None):
        self.w = w                        # (n_out, n_in) float32
        self.act = act

    @property
    def shape(self) -> tuple[int, int]:
        return self.w.shape

    @property
    def nbytes(self) -> int:
        return self.w.nbytes

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return matmul(self.w, round_activations(x, self.act))

    def rows(self, ids) -> np.ndarray:
        return self.w[ids].astype(np.float32)                              # (R, n_in)

    def take_rows(self, lo: int, hi: int, copy: bool = True) -> F32:
        return F32(_rows(self.w, lo, hi, copy), self.act)


class BlockScaled:
    """Integer codes ``q`` with a float32 scale per block of a row (``scale``: (rows, B)): the part of
    the int8 and packed forms that is the same."""

    @property
    def block(self) -> int:
        """Weights of a row sharing one scale."""
        return self.q.shape[1] // self.scale.shape[1]

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.scale.nbytes


class Int8Blocks(BlockScaled):
    """``W ≈ q * scale`` per block of a row: q (n_out, n_in) int8 in -127..127, scale (n_out, B) float32
    (B blocks of n_in / B weights; B = 1 is a scale per row). About a quarter of float32's memory,
    converted per use inside the einsum (``matmul.matmul_int8``)."""
    form = Form.INT8_BLOCKS
    align = 1

    def __init__(self, q: np.ndarray, scale: np.ndarray, act: str | None = None):
        self.q = q                        # (n_out, n_in) int8
        self.scale = scale                # (n_out, B) float32
        self.act = act

    @property
    def shape(self) -> tuple[int, int]:
        return self.q.shape

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return matmul_int8(self.q, self.scale, round_activations(x, self.act))

    def rows(self, ids) -> np.ndarray:
        r = self.q[ids].astype(np.float32)                                 # (R, n_in)
        nb = self.scale.shape[1]
        return (r.reshape(len(r), nb, -1) * self.scale[ids, :, None]).reshape(len(r), -1)

    def take_rows(self, lo: int, hi: int, copy: bool = True) -> Int8Blocks:
        return Int8Blocks(_rows(self.q, lo, hi, copy), _rows(self.scale, lo, hi, copy), self.act)


class Int8Rows(Int8Blocks):
    """``W[n, k] ≈ scale[n] * q[n, k] * col[k]``: int8 codes with a scale per row and one per column
    (the vocabulary matrices of the low-memory forms). The column scale is folded into x, one
    multiply of n_in values; ``pyengine.weights.build.column_scale`` makes it."""
    form = Form.INT8_ROWS

    def __init__(self, q: np.ndarray, scale: np.ndarray, col: np.ndarray, act: str | None = None):
        super().__init__(q, scale, act)   # scale (n_out, 1)
        self.col = col                    # (n_in,) float32 in (0, 1]

    @property
    def nbytes(self) -> int:
        return super().nbytes + self.col.nbytes

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return matmul_int8(self.q, self.scale, round_activations(x, self.act) * self.col)

    def rows(self, ids) -> np.ndarray:
        r = super().rows(ids)
        r *= self.col
        return r

    def take_rows(self, lo: int, hi: int, copy: bool = True) -> Int8Rows:
        return Int8Rows(_rows(self.q, lo, hi, copy), _rows(self.scale, lo, hi, copy), self.col, self.act)


class Packed(BlockScaled):
    """int8 codes three rows to an int64 (``lanes.pack_rows``), a float32 scale per block of a row:
    2.7 bytes a weight. ``W x`` rounds x to integer codes per block, up to ``levels``
    (``lanes.x_levels`` of the codes), and multiplies three rows exactly in one int64 einsum
    (``lanes.matmul_packed``); the activation rounding is its own, whatever ``act`` would say."""
    form = Form.PACKED
    align = LANES

    def __init__(self, q: np.ndarray, scale: np.ndarray, n_out: int, levels: int = 127):
        self.q = q                        # (ceil(n_out / 3), n_in) int64: three rows of codes in each
        self.scale = scale                # (3 ceil(n_out / 3), B) float32; 0 past the n_out real rows
        self.n_out = n_out
        self.levels = levels              # the largest activation code

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_out, self.q.shape[1])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return matmul_packed(self.q, self.scale, x, self.levels)[..., :self.n_out]

    def rows(self, ids) -> np.ndarray:
        ids = np.asarray(ids)
        lanes = unpack_lanes(self.q[ids // LANES][:, None, :])            # (R, 3, n_in): the three rows of each
        r = lanes[np.arange(len(ids)), ids % LANES]                       # (R, n_in) codes
        nb = self.scale.shape[1]
        return (r.reshape(len(r), nb, -1) * self.scale[ids, :, None]).reshape(len(r), -1)

    def take_rows(self, lo: int, hi: int, copy: bool = True) -> Packed:
        """Rows ``lo..hi-1``, ``lo`` a multiple of 3: the int64 rows ``lo/3 .. ceil(hi/3)`` and their scales."""
        a, b = lo // LANES, -(-hi // LANES)
        return Packed(_rows(self.q, a, b, copy), _rows(self.scale, LANES * a, LANES * b, copy), hi - lo, self.levels)


class RowSplit:
    """One matrix whose rows are held in consecutive parts, each a weight form of its own (the
    "mixed" vocabulary matrix: packed up to a memory budget, int8 rows past it). ``W x`` is the
    parts' products one after the other; ``rows`` picks each id's part."""
    form = Form.ROW_SPLIT

    def __init__(self, parts: list):
        self.parts = parts                                                # rows in order
        self.starts = np.cumsum([0] + [p.shape[0] for p in parts])        # (len(parts) + 1,) first rows

    @property
    def align(self) -> int:
        return max(p.align for p in self.parts)

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.starts[-1]), self.parts[0].shape[1])

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate([p(x) for p in self.parts], axis=-1)

    def rows(self, ids) -> np.ndarray:
        ids = np.asarray(ids)
        out = np.empty((len(ids), self.shape[1]), np.float32)             # (R, n_in)
        for part, a, b in zip(self.parts, self.starts[:-1], self.starts[1:]):
            mine = (ids >= a) & (ids < b)
            if mine.any():
                out[mine] = part.rows(ids[mine] - a)
        return out

    def pieces(self, lo: int, hi: int) -> list[tuple]:
        """Rows ``lo..hi-1`` as ``(part, first, end)`` row ranges of the parts, in order."""
        bounds = self.starts.tolist()
        return [(p, max(lo, a) - a, min(hi, b) - a) for p, a, b in zip(self.parts, bounds, bounds[1:])
                if max(lo, a) < min(hi, b)]

    def take_rows(self, lo: int, hi: int, copy: bool = True):
        return row_split([part.take_rows(a, b, copy) for part, a, b in self.pieces(lo, hi)])


def _rows(a: np.ndarray, lo: int, hi: int, copy: bool) -> np.ndarray:
    """Rows ``lo..hi-1`` of ``a``: a copy, or a view (``copy=False``)."""
    return a[lo:hi].copy() if copy else a[lo:hi]


def row_split(parts: list):
    """``parts`` (consecutive rows of one matrix) as one weight: the part itself when there is one."""
    return parts[0] if len(parts) == 1 else RowSplit(parts)


def add_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """``y += b`` (ggml ``add`` after ``mul_mat``) when the weight has a bias; y (..., n_out)."""
    if b is not None:
        y += b
    return y
