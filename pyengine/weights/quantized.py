"""The file's own ggml codes, rows packed in the lanes of int64s: the quantized weight form.

A quantized type stores, per sub-block of ``sub`` weights (16 or 32), integer
codes and a float scale (and for some types a min): ``w = scale * code (+ shift)``
(``pyengine.gguf.quants.Codes``). This form keeps exactly those codes and scales
and multiplies by them the way llama.cpp's quantized dot products do: the
activations are rounded to 8-bit codes per sub-block (ggml ``quantize_row_q8_0``),
the products of codes are summed exactly as integers per sub-block, and only
then scaled::

    y[n] = sum_b  scale[n, b] * dx[b] * S[n, b]  +  offset[n, b] * dx[b] * X[b]
    S[n, b] = sum_k (code[n, bk] - c0) * xq[bk]       exact, |S| < 2 ** (L - 1)
    X[b] = sum_k xq[bk]                                offset = c0 * scale + shift

Pyodide's numpy has no SIMD and costs about the same per element of an einsum
whatever its dtype, so several rows ride in one int64, a lane of ``L`` bits
each: ``L = 16`` (4 lanes) for codes of up to 4 bits, ``L = 21`` (3 lanes) for 5
to 8 bits; with codes centered on ``c0 = 2 ** (bits - 1)`` no lane's sum spills
into the next (``sub * c0 * 127 < 2 ** (L - 1)``). One int64 einsum then gives
``lanes`` rows' sub-block sums at once. Stored *expanded* (``phases = 1``) each
lane holds one code, 16 or 21 bits a weight; stored *compact* (``phases > 1``)
each lane holds ``phases`` codes side by side (``phases * bits <= L``), near the
file's own size, and a product first shifts and masks out one phase at a time.

Row ``r`` of the matrix is lane ``j`` of phase ``p`` of int64 row ``m``:
``r = (m * phases + p) * lanes + j``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyengine.gguf import quants
from pyengine.weights.forms import Form
from pyengine.weights.matmul import VEC_DOT_TYPE, absmax, matmul, quantize_activations, round_activations

PHASE_ELEMENTS = 1 << 17            # int64 codes of one phase extracted at once (1 MiB: in L2)
POST_ELEMENTS = 1 << 20             # lane sums scaled at once (tokens x rows x sub-blocks: a few MiB)
FLOAT_TOKENS = 64                   # a product of this many tokens (a prompt) runs on float32 rows instead
FLOAT_ELEMENTS = 1 << 18            # weights dequantized at once for it (1 MiB of float32)


def _wrap(v: int) -> np.int64:
    """A Python int as the int64 with the same low 64 bits."""
    v &= (1 << 64) - 1
    return np.int64(v - (1 << 64) if v >= 1 << 63 else v)


def lane_bits(bits: int) -> int:
    """The lane width for codes of ``bits`` bits: 16 up to 4 bits, else 21."""
    return 16 if bits <= 4 else 21


class Layout:
    """How codes of ``bits`` bits sit in an int64: ``lanes`` lanes of ``L`` bits, ``phases`` codes a lane."""

    def __init__(self, bits: int, phases: int):
        self.bits, self.L = bits, lane_bits(bits)
        self.lanes = 64 // self.L
        if not 1 <= phases <= self.L // bits:
            raise ValueError(f"{phases} phases of {bits}-bit codes do not fit a {self.L}-bit lane")
        self.phases = phases
        self.rows = phases * self.lanes                                    # matrix rows per int64 row
        self.c0 = 1 << (bits - 1)
        self.mask = _wrap(sum(((1 << bits) - 1) << (self.L * j) for j in range(self.lanes)))
        self.ones = _wrap(sum(1 << (self.L * j) for j in range(self.lanes)))
        self.bias = _wrap(sum((1 << (self.L - 1)) << (self.L * j) for j in range(self.lanes)))
        self.sign = _wrap(sum(0x8000 << (16 * j) for j in range(4)))       # L = 16: biased -> int16

    @staticmethod
    def max_phases(bits: int) -> int:
        return lane_bits(bits) // bits


def pack_codes(codes: np.ndarray, out: np.ndarray, r0: int, layout: Layout) -> None:
    """OR the lane codes ``codes (R, K)`` (uint8, each < 2 ** bits) of rows ``r0..r0+R-1`` into the
    zero-initialized packed ``out (M, K)`` int64."""
    for p in range(layout.phases):
        for j in range(layout.lanes):
            first = (p * layout.lanes + j - r0) % layout.rows                    # first row of the chunk in (p, j)
            rows = codes[first::layout.rows]                                  # (R_pj, K)
            if len(rows):
                m0 = (r0 + first) // layout.rows
                out[m0:m0 + len(rows)] |= np.left_shift(rows, layout.L * j + layout.bits * p, dtype=np.int64)


def quantize_x(x: np.ndarray, sub: int, vec_dot_type: str) -> tuple:
    """x (T, K) float32 quantized as ggml quantizes it for the weight type (``matmul.quantize_activations``),
    by sub-block of ``sub`` weights: (codes (T, B, sub) int64, their scale (T, B) float32, the codes'
    sums (T, B) int64, the sums times the scale (T, B) float32 as ggml's Q8_1 ``s`` (in f16, of the scale
    before its rounding to f16: x86 ``quantize_row_q8_1``) or Q8_K ``bsums`` give them to a type's min)."""
    q, d, block = quantize_activations(x, vec_dot_type)                  # (T, K), (T, K/block)
    xq = q.astype(np.int64).reshape(len(x), -1, sub)                      # (T, B, sub)
    dx = np.repeat(d, block // sub, axis=1) if block > sub else d         # (T, B)
    xsum = xq.sum(axis=-1)
    s = dx * xsum
    if vec_dot_type == "Q8_1":               # ggml stores fp16(max|x| / 127 * sum), the scale before its fp16
        d = absmax(x.reshape(len(x), -1, 32)) / np.float32(127)
        s = (d * xsum.astype(np.float32)).astype(np.float16).astype(np.float32)
    return xq, dx, xsum, s


@dataclass(eq=False)
class Quantized:
    """A matrix ``W (n_out, n_in)`` of one ggml type, held as its own codes and sub-block scales.

    ``q (M, n_in)`` int64 packed codes (see the module doc); ``scale (phases, lanes, B, M)`` float32,
    0 for the padding rows (the sub-block axis before the rows, so the scaling runs over long rows of
    M); ``shift (phases, lanes, M, B)`` or None (the types with a min: ``w = scale * code + shift``;
    the sub-blocks last, a dot product a row); ``sub`` weights per scale; ``ggml_type`` the type's name.
    """
    q: np.ndarray
    scale: np.ndarray
    shift: np.ndarray | None
    n_out: int
    layout: Layout
    sub: int
    ggml_type: str

    def __post_init__(self):
        self.vec_dot_type = VEC_DOT_TYPE[self.ggml_type]

    @property
    def form(self) -> Form:
        return Form.COMPACT if self.layout.phases > 1 else Form.QUANTIZED

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_out, self.q.shape[1])

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.scale.nbytes + (0 if self.shift is None else self.shift.nbytes)

    def __call__(self, x: np.ndarray, acts: dict | None = None) -> np.ndarray:
        """(n_in,) -> (n_out,), or (T, n_in) -> (T, n_out): the hot loop of the quantized forms. ``acts``
        keeps x's activation codes for the other parts of a RowSplit, by (vec_dot_type, sub)."""
        xs = x.reshape(-1, x.shape[-1])
        if not len(xs):                                                              # a prompt chunk's last layer
            return np.zeros((0, self.n_out), np.float32)
        if len(xs) >= FLOAT_TOKENS:
            return self._float_product(xs)
        layout, (m, k) = self.layout, self.q.shape
        t, nb = len(xs), k // self.sub
        key = (self.vec_dot_type, self.sub)
        act = None if acts is None else acts.get(key)
        if act is None:
            act = quantize_x(xs, self.sub, self.vec_dot_type)
            if acts is not None:
                acts[key] = act
        xq, dx, xsum, s = act
        corr = (layout.bias - xsum * layout.c0 * layout.ones)[:, None, :, None]              # (T, 1, B, 1): wraps
        # a min's centering, added back as the sums are decoded: c0 * sum(xq) per sub-block
        back = None if self.shift is None else np.repeat(xsum * layout.c0, layout.phases, axis=0)[:, :, None]
        y = np.empty((t, layout.phases, layout.lanes, m), np.float32)                      # (T, P, lanes, M)
        step = max(1, POST_ELEMENTS // (t * layout.phases * layout.lanes * nb))            # int64 rows a chunk
        for a in range(0, m, step):
            b = min(m, a + step)
            sums = self._sums(a, b, xq)                                              # (T, P, B, m) int64
            sums += corr
            v = decode(sums.reshape(-1, nb, b - a), layout, back)                       # (T * P, lanes, B, m)
            v = v.reshape(t, layout.phases, layout.lanes, nb, b - a)
            y[..., a:b] = np.einsum("tpjbm,pjbm,tb->tpjm", v, self.scale[..., a:b], dx)
            if self.shift is not None:                                               # a min: its offsets
                y[..., a:b] += np.einsum("pjmb,tb->tpjm", self.shift[:, :, a:b], s)
        y = y.transpose(0, 3, 1, 2).reshape(t, -1)[:, :self.n_out]                  # rows in order
        return y[0] if x.ndim == 1 else y

    def _sums(self, a: int, b: int, xq: np.ndarray) -> np.ndarray:
        """The biased lane sums of int64 rows a..b-1 with the activation codes ``xq`` (T, B, sub): (T, P, B,
        b - a) int64, each phase's codes taken out of the compact lanes a chunk at a time (in cache)."""
        layout, k = self.layout, self.q.shape[1]
        t, nb = xq.shape[:2]
        if layout.phases == 1:                                    # (an einsum's out= would iterate in its order)
            s = np.einsum("mbk,tbk->tbm", self.q[a:b].reshape(b - a, nb, self.sub), xq)
            return np.ascontiguousarray(s).reshape(t, 1, nb, b - a)
        out = np.empty((t, layout.phases, nb, b - a), np.int64)
        step = max(1, PHASE_ELEMENTS // k)
        buf = np.empty((min(step, b - a), k), np.int64)
        for c in range(a, b, step):
            d = min(b, c + step)
            for p in range(layout.phases):
                e = phase(self.q[c:d], p, layout, buf[:d - c]).reshape(d - c, nb, self.sub)
                out[:, p, :, c - a:d - a] = np.einsum("mbk,tbk->tbm", e, xq)
        return out

    def _float_product(self, xs: np.ndarray) -> np.ndarray:
        """(T, n_in) -> (T, n_out) for a long batch: float32 rows (as :meth:`rows` gives them) a chunk at a
        time, times x rounded as ggml rounds it: the integer product up to float32 rounding, each weight
        unpacked once for all the tokens (and in CPython, BLAS)."""
        xr = round_activations(xs, self.vec_dot_type)
        layout, (m, k) = self.layout, self.q.shape
        y = np.empty((len(xs), m * layout.rows), np.float32)
        step = max(1, FLOAT_ELEMENTS // (k * layout.rows))                             # int64 rows a chunk
        for a in range(0, m, step):
            b = min(m, a + step)
            y[:, a * layout.rows:b * layout.rows] = matmul(self._dequantize(a, b), xr)
        if self.vec_dot_type == "Q8_1":                    # ggml's mins meet the codes' sums as stored, in f16
            _, dx, xsum, s = quantize_x(xs, self.sub, "Q8_1")
            fix = np.einsum("pjmb,tb->tpjm", self.shift, s - dx * xsum)                 # (T, P, lanes, M)
            y += fix.transpose(0, 3, 1, 2).reshape(len(xs), -1)
        return y[:, :self.n_out]

    def _dequantize(self, a: int, b: int) -> np.ndarray:
        """The rows of int64 rows a..b-1 as float32 ((b - a) * rows, n_in), in order, bit for bit as rows()."""
        layout, k = self.layout, self.q.shape[1]
        out = np.empty((b - a, layout.phases, layout.lanes, k), np.float32)
        q = self.q[a:b]
        for p in range(layout.phases):
            for j in range(layout.lanes):
                codes = (q >> (layout.L * j + layout.bits * p)) & ((1 << layout.bits) - 1)     # (m, K) lane codes
                scale = self.scale[p, j, :, a:b].T[:, :, None]                        # (m, B, 1)
                if self.shift is None:
                    v = (codes - layout.c0).astype(np.float32).reshape(b - a, -1, self.sub) * scale
                else:
                    v = codes.astype(np.float32).reshape(b - a, -1, self.sub) * scale
                    v += self.shift[p, j, a:b][:, :, None]
                out[:, p, j] = v.reshape(b - a, k)
        return out.reshape(-1, k)

    def rows(self, ids) -> np.ndarray:
        """Rows ``ids`` as float32 (R, n_in), as ggml ``get_rows`` dequantizes them (the same bits)."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        layout = self.layout
        m, p, j = ids // layout.rows, ids % layout.rows // layout.lanes, ids % layout.lanes
        shift = (layout.L * j + layout.bits * p)[:, None]
        codes = (self.q[m] >> shift) & ((1 << layout.bits) - 1)                       # (R, K) lane codes
        scale = self.scale[p, j, :, m][:, :, None]                                 # (R, B, 1)
        k = self.q.shape[1]
        if self.shift is None:
            v = (codes - layout.c0).astype(np.float32).reshape(len(ids), -1, self.sub)
            return (v * scale).reshape(len(ids), k)
        v = codes.astype(np.float32).reshape(len(ids), -1, self.sub)
        return (v * scale + self.shift[p, j, m][:, :, None]).reshape(len(ids), k)


def phase(codes: np.ndarray, p: int, layout: Layout, out: np.ndarray) -> np.ndarray:
    """Phase ``p`` of compact codes: (codes >> bits * p) & mask, into ``out`` (m, K) int64."""
    if p:
        np.right_shift(codes, layout.bits * p, out=out)
        out &= layout.mask
    else:
        np.bitwise_and(codes, layout.mask, out=out)
    return out


def decode(s: np.ndarray, layout: Layout, add: np.ndarray | None = None) -> np.ndarray:
    """Biased lane sums (T, B, m) int64 (each lane + 2 ** (L - 1), in [0, 2 ** L)) -> (T, lanes, B, m)
    float32 signed sums, exactly, plus ``add`` (T, B, 1) int64 when given. ``s`` is overwritten."""
    t, nb, m = s.shape
    v = np.empty((t, layout.lanes, nb, m), np.float32)
    if layout.L == 16:
        s ^= layout.sign                                                      # biased -> two's complement int16
        s16 = s.view(np.int16).reshape(t, nb, m, 4)
        for j in range(4):
            if add is None:
                np.copyto(v[:, j], s16[..., j])
            else:
                np.add(s16[..., j], add, out=v[:, j], casting="unsafe")
        return v
    f = np.empty_like(s)
    bias = np.int64(1 << (layout.L - 1)) if add is None else (1 << (layout.L - 1)) - add
    for j in range(layout.lanes):
        np.right_shift(s, layout.L * j, out=f)
        if j < layout.lanes - 1:
            f &= (1 << layout.L) - 1
        np.subtract(f, bias, out=v[:, j], casting="unsafe")
    return v


def lane_codes(c: quants.Codes, n_rows: int, n_in: int, bits: int) -> tuple:
    """A chunk's :class:`quants.Codes` as the lane codes (n_rows, n_in) uint8 in [0, 2 ** bits), the
    scales (n_rows, B) float32 and the shifts (n_rows, B) or None. Signed codes are centered on
    ``2 ** (bits - 1)``; unsigned ones (the types with a min) are kept as they are."""
    q = np.ascontiguousarray(c.q).reshape(n_rows, n_in)
    if q.dtype == np.int8:
        q = q.view(np.uint8) + np.uint8(1 << (bits - 1))                   # wraps: v + c0 in [0, 2 ** bits)
    nb = c.scale.size // n_rows
    scale = np.ascontiguousarray(c.scale, np.float32).reshape(n_rows, nb)
    shift = None
    if c.plus is not None:
        shift = np.ascontiguousarray(c.plus, np.float32).reshape(n_rows, nb)
    elif c.minus is not None:
        shift = -np.ascontiguousarray(c.minus, np.float32).reshape(n_rows, nb)
    return q, scale, shift
