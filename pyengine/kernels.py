"""The transformer's kernels in numpy: matmul, RMSNorm, rope, attention, gated FFN activations.

Each kernel is the math of the ggml CPU op named in its docstring, written for
numpy *without BLAS* (Pyodide): every product with a weight is an
``np.einsum`` over the weight as stored in the GGUF, ``W`` of shape
``(n_out, n_in)`` with rows contiguous. ``x @ W`` with ``W`` as ``(n_in, n_out)``
runs 5-10x slower in Pyodide and appears nowhere (see ``shared/RUNTIME.md``);
only CPython's prefill hands ``X @ W.T`` to BLAS (see ``matmul``).

Weights come float32, int8 with scales, or packed: int8 codes three rows to an
int64, multiplied exactly by integer activation codes (``matmul_packed``).

Shapes: ``T`` tokens in the batch, ``S`` positions of the KV cache attended to,
``H`` query heads, ``Hkv`` key/value heads, ``G = H / Hkv`` query heads per
key/value head (GQA), ``D`` head size. Activations are float32.
"""

from __future__ import annotations

import math
import sys

import numpy as np

EINSUM_MAX = 1 << 30    # elements one einsum may iterate over: wasm32 numpy fails past 2**31
USE_BLAS = sys.platform != "emscripten"   # CPython's numpy wheels link OpenBLAS (prefill); Pyodide's has none
BLAS_MIN_TOKENS = 64    # smaller batches stay einsum: OpenBLAS's threads cost ~20 ms a call when cores are busy


# ----------------------------------------------------------------------------
# matmul: where nearly all the time goes

# ggml's CPU matmul first converts the activations to the weight type's "vec_dot_type"
# (ggml-cpu.c type_traits_cpu): 8-bit blocks for the quantized types. With
# Model.from_gguf(..., ggml_rounding=True) pyengine rounds the same way, and the tiny
# Q4_K_M fixture's logits then equal llama.cpp's to float rounding.
VEC_DOT_TYPE = {
    "F32": None, "F16": "F16", "BF16": "BF16",
    "Q4_0": "Q8_0", "Q5_0": "Q8_0", "Q8_0": "Q8_0", "IQ4_NL": "Q8_0", "MXFP4": "Q8_0",
    "Q4_1": "Q8_1", "Q5_1": "Q8_1",
    "Q2_K": "Q8_K", "Q3_K": "Q8_K", "Q4_K": "Q8_K", "Q5_K": "Q8_K", "Q6_K": "Q8_K",
    "IQ2_XXS": "Q8_K", "IQ2_XS": "Q8_K", "IQ2_S": "Q8_K", "IQ3_XXS": "Q8_K", "IQ3_S": "Q8_K",
    "IQ1_S": "Q8_K", "IQ1_M": "Q8_K", "IQ4_XS": "Q8_K", "TQ1_0": "Q8_K", "TQ2_0": "Q8_K",
}


def round_activations(x: np.ndarray, vec_dot_type: str | None) -> np.ndarray:
    """x (..., K) as ggml's matmul sees it after converting it to ``vec_dot_type`` (float32 out).

    Q8_0 / Q8_1 (ggml-cpu x86 ``quantize_row_q8_0``): blocks of 32,
    ``q = round(x * 127 / amax)`` half to even, scale ``fp16(amax / 127)``.
    Q8_K (``quantize_row_q8_K_ref``): blocks of 256, ``q = min(127, round(-127 / max * x))``
    where ``max`` is the signed value of largest magnitude, scale ``max / -127``.
    F16 / BF16: x rounded to that float type. None: x unchanged.
    """
    if vec_dot_type is None:
        return x
    if vec_dot_type == "F16":
        return x.astype(np.float16).astype(np.float32)
    if vec_dot_type == "BF16":   # round to nearest even on the top 16 bits
        b = x.astype(np.float32).view(np.uint32)
        b = (b + 0x7FFF + ((b >> 16) & 1)) & np.uint32(0xFFFF0000)
        return b.view(np.float32)
    block = 256 if vec_dot_type == "Q8_K" else 32
    xb = x.reshape(*x.shape[:-1], -1, block)                              # (..., K/block, block)
    if vec_dot_type == "Q8_K":
        i = np.abs(xb).argmax(axis=-1)[..., None]
        mx = np.take_along_axis(xb, i, axis=-1)                           # (..., K/256, 1) signed
        with np.errstate(divide="ignore", invalid="ignore"):
            iscale = np.float32(-127.0) / mx
            q = np.minimum(np.rint(xb * iscale), 127)
            xq = np.where(mx != 0, q * (np.float32(1.0) / iscale), np.float32(0.0))
    else:
        amax = np.abs(xb).max(axis=-1, keepdims=True)                     # (..., K/32, 1)
        d = (amax / np.float32(127.0)).astype(np.float16).astype(np.float32)
        with np.errstate(divide="ignore"):
            inv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0))
        xq = np.rint(xb * inv) * d
    return xq.reshape(x.shape)


class Linear:
    """``y = W x (+ b)`` for a weight ``W (n_out, n_in)``: float32, or int8 with a float32 scale per block.

    ``act`` is the ggml vec_dot_type the activations are rounded to first
    (see ``round_activations``); when rows of different types were stacked,
    ``groups`` lists ``(first_row, end_row, act)`` and each group gets its own.
    The int8 form (``W ≈ q * scale`` per block of a row, ``model.INT8_BLOCK``
    weights, ``q`` in -127..127) is the low-memory policy of
    :mod:`pyengine.model`: about a quarter of the memory, converted per use
    inside the einsum (see ``matmul_int8``). With ``col`` (the vocabulary
    matrices of the default "mixed" form) ``W[n, k] ≈ scale[n] * q[n, k] * col[k]``:
    the column scale is folded into x, so it costs one multiply of n_in values.
    The packed form (``w`` int64, see ``matmul_packed``) holds three rows of
    int8 codes in each row of ``w``: ``n_out`` says how many rows are real.
    """
    __slots__ = ("w", "scale", "b", "act", "groups", "col", "n_out", "levels")

    def __init__(self, w: np.ndarray, b: np.ndarray | None = None, scale: np.ndarray | None = None,
                 act: str | None = None, groups: list | None = None, col: np.ndarray | None = None,
                 n_out: int | None = None, levels: int = 127):
        self.n_out = len(w) if n_out is None else n_out
        self.levels = levels  # packed: the largest activation code (kernels.x_levels)
        self.w = w            # (n_out, n_in) float32 or int8; packed: (ceil(n_out / 3), n_in) int64
        self.scale = scale    # (n_out, n_in / block) float32, for int8 weights
        self.b = b            # (n_out,) float32 or None
        self.act = act        # vec_dot_type of all rows, or None
        self.groups = groups  # [(r0, r1, vec_dot_type)] when rows differ, else None
        self.col = col        # (n_in,) float32 scale per column of int8 weights (W ≈ scale · q · col), or None

    @property
    def shape(self) -> tuple:
        return (self.n_out, self.w.shape[1])

    @property
    def packed(self) -> bool:
        return self.w.dtype == np.int64

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.w, self.scale, self.b, self.col) if a is not None)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """(n_in,) -> (n_out,), or (T, n_in) -> (T, n_out)."""
        if self.groups is None:
            y = self._product(0, len(self.w), round_activations(x, self.act))
        else:
            y = np.concatenate([self._product(r0, r1, round_activations(x, act))
                                for r0, r1, act in self.groups], axis=-1)
        if self.b is not None:
            y += self.b
        return y

    def _product(self, r0: int, r1: int, x: np.ndarray) -> np.ndarray:
        if self.packed:                          # rounds x itself (8 bits a block), whatever ``act`` says
            return matmul_packed(self.w, self.scale, x, self.levels)[..., :self.n_out]
        if self.scale is None:
            return matmul(self.w[r0:r1], x)
        return matmul_int8(self.w[r0:r1], self.scale[r0:r1], x if self.col is None else x * self.col)

    def rows(self, ids) -> np.ndarray:
        """Rows ``ids`` of W as float32 (the embedding lookup, ggml ``get_rows``): (len(ids), n_in)."""
        if self.packed:
            ids = np.asarray(ids)
            lanes = unpack_lanes(self.w[ids // LANES][:, None, :])        # (R, 3, n_in): the three rows of each
            r = lanes[np.arange(len(ids)), ids % LANES]                   # (R, n_in) codes
        else:
            r = self.w[ids].astype(np.float32)                            # (R, n_in)
        if self.scale is not None:
            nb = self.scale.shape[1]
            r = (r.reshape(len(r), nb, -1) * self.scale[ids, :, None]).reshape(len(r), -1)
        if self.col is not None:
            r *= self.col
        return r


class RowSplit:
    """One weight matrix whose rows are held in consecutive parts of different forms, each a
    :class:`Linear`: the "mixed" form's vocabulary matrix, packed up to a memory budget and int8
    past it. ``W x`` is the parts' products one after the other; ``rows`` picks each id's part."""
    __slots__ = ("parts", "starts")

    def __init__(self, parts: list):
        self.parts = parts                                                # [Linear], rows in order
        self.starts = np.cumsum([0] + [p.n_out for p in parts])           # (len(parts) + 1,) first rows

    @property
    def shape(self) -> tuple:
        return (int(self.starts[-1]), self.parts[0].shape[1])

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """(n_in,) -> (n_out,), or (T, n_in) -> (T, n_out)."""
        return np.concatenate([p(x) for p in self.parts], axis=-1)

    def rows(self, ids) -> np.ndarray:
        """Rows ``ids`` as float32: (len(ids), n_in)."""
        ids = np.asarray(ids)
        out = np.empty((len(ids), self.shape[1]), np.float32)             # (R, n_in)
        for part, a, b in zip(self.parts, self.starts[:-1], self.starts[1:]):
            mine = (ids >= a) & (ids < b)
            if mine.any():
                out[mine] = part.rows(ids[mine] - a)
        return out


def row_split(parts: list[Linear]) -> Linear | RowSplit:
    """``parts`` (consecutive rows of one matrix) as one: the Linear itself when there is one."""
    return parts[0] if len(parts) == 1 else RowSplit(parts)


def matmul(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``W (N, K)`` times ``x (K,)`` -> ``(N,)``, or times each row of ``X (T, K)`` -> ``(T, N)``.

    One einsum per call (the decode mat-vec runs 2.3-3 GFLOP/s in Pyodide,
    ``x @ W.T`` 0.2-0.6), split over rows of W or tokens when N·K·T would
    pass ``EINSUM_MAX``. In CPython a batch of at least ``BLAS_MIN_TOKENS``
    tokens (prefill) with float32 weights goes to BLAS, ``X @ W.T`` without a
    copy: 5-10x faster on one thread. Smaller batches and the decode mat-vec
    stay einsums: memory-bound either way, and OpenBLAS's threads, when the
    cores are busy with other work, cost more than the product itself.
    """
    if x.ndim == 2 and x.shape[0] == 1:                  # one token: the mat-vec
        return matmul(w, x[0])[None]
    if USE_BLAS and x.ndim == 2 and len(x) >= BLAS_MIN_TOKENS and w.dtype == np.float32:
        return x @ w.T
    n, k = w.shape
    if x.ndim == 1:
        if n * k <= EINSUM_MAX:
            return np.einsum("nk,k->n", w, x)
        step = max(1, EINSUM_MAX // k)
        return np.concatenate([np.einsum("nk,k->n", w[i:i + step], x) for i in range(0, n, step)])
    t = x.shape[0]
    if n * k * t <= EINSUM_MAX:
        return np.einsum("nk,tk->tn", w, x)
    step = EINSUM_MAX // (n * k)                          # tokens per einsum
    if step == 0:                                         # one token is already too much: rows per token
        return np.stack([matmul(w, xi) for xi in x])
    return np.concatenate([np.einsum("nk,tk->tn", w, x[j:j + step]) for j in range(0, t, step)])


def matmul_int8(q: np.ndarray, scale: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``W x`` for ``W = q * scale`` in blocks: q (N, K) int8, scale (N, B) float32, x (K,) or (T, K).

    Each row's K weights form B blocks of K/B, each with its own scale: an
    einsum gives the B partial dot products per row, in float32 (numpy casts
    the int8 codes chunk by chunk), and a second weighs them by the scales.
    In Pyodide this runs nearly as fast as int8 with one scale per row (blocks
    of 64: 1.6 ms against 1.1-1.5 for 2048 x 640; float32 0.5 ms) and moves
    the real models' logits 2-3x less.
    """
    n, k = q.shape
    nb = scale.shape[1]
    if nb == 1:                                  # a scale per row: one einsum over the int8 rows, then scale
        y = matmul(q, x)                         # gemma3's 262144 x 640 output: 1.3x faster than blocks of 128
        y *= scale[:, 0]                         # in place: the logits are the only vocabulary-sized array
        return y
    qb = q.reshape(n, nb, k // nb)                                        # (N, B, K/B)
    if x.ndim == 1:
        part = np.einsum("nbk,bk->nb", qb, x.reshape(nb, -1))             # (N, B)
        return np.einsum("nb,nb->n", part, scale)
    step = max(1, PACK_TMP // (n * nb))                                   # tokens per einsum: few MiB of parts
    out = []
    for j in range(0, x.shape[0], step):
        part = np.einsum("nbk,tbk->tnb", qb, x[j:j + step].reshape(-1, nb, k // nb))  # (T, N, B)
        out.append(np.einsum("tnb,nb->tn", part, scale))
    return out[0] if len(out) == 1 else np.concatenate(out)


def absmax(x: np.ndarray) -> np.ndarray:
    """``max |x|`` over the last axis: float32 (..., n) -> (...,).

    Taken on the bit patterns as int32 with the sign bit cleared, which order
    non-negative floats as their values do (a NaN stays a NaN): Pyodide's
    float max reduction costs ~9 ns an element, its int32 one ~1.3.
    """
    bits = np.ascontiguousarray(x, np.float32).view(np.int32) & np.int32(0x7FFFFFFF)   # (..., n)
    return bits.max(axis=-1).view(np.float32)


def quantize_int8(w: np.ndarray, block: int, out: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``W (N, K)`` -> (``q (N, K)`` int8, ``scale (N, K/block)`` float32), ``W ≈ q * scale`` per block.

    ``scale = absmax / 127`` of each block of ``block`` weights of a row
    (one block per row when ``block`` does not divide K), ``q = rint(W / scale)``.
    With ``out = (q, scale)`` the result is written there and ``w`` is used
    as scratch (overwritten): no temporaries of W's size, the same bits.
    """
    n, k = w.shape
    block = block if k % block == 0 else k
    wb = w.reshape(n, k // block, block)                                  # (N, B, block)
    amax = absmax(wb)                                                     # (N, B)
    scale = np.divide(amax, np.float32(127.0), out=None if out is None else out[1])   # (N, B)
    inv = np.divide(np.float32(1.0), scale, out=np.zeros_like(scale), where=scale > 0)
    if out is None:
        return np.rint(wb * inv[:, :, None]).astype(np.int8).reshape(n, k), scale
    wb *= inv[:, :, None]
    np.rint(wb, out=wb)
    out[0][...] = w                                                       # float32 -> int8, exact integers
    return out


# ----------------------------------------------------------------------------
# the packed form: three rows of int8 codes in one int64
#
# Pyodide's einsum costs the same per element for int64 as for float32 (~0.36 ns
# on these machines), and numpy has no int8 dot product that does not first widen
# the codes, which costs more than the float32 product itself. So three rows ride
# in one int64, one LANE_BITS-wide field each: ``W[3m + j, k]``'s code is field j
# of ``P[m, k]``. With the activations rounded to 8 bits per block of the same
# weights (ggml's ``quantize_row_q8_0``, as llama.cpp's own matmuls do), one int64
# einsum gives every block's three integer dot products at once and exactly:
# ``|sum of 64 products of codes in -127..127| <= 64 * 127 * 127 = 1,032,256 < 2**20``,
# so no field spills into the next. Real weights leave room: a matrix whose blocks'
# codes sum to at most L in absolute value takes activation codes up to
# ``(2**20 - 1) // L`` (``x_levels``): ~9-10 bits for the real models instead of 8.
# Fewer elements than float32 by 3 (2.7 bytes a weight instead of 4) and ~2.3x
# faster than float32 in Pyodide.

LANES = 3                       # int8 rows per int64
LANE_BITS = 21                  # bits per field: a signed sum of PACK_BLOCK products of two int8 codes
PACK_BLOCK = 64                 # weights, and activations, sharing one scale (at most 64: the fields' room)
LANE_HALF = 1 << (LANE_BITS - 1)
LANE_MASK = (1 << LANE_BITS) - 1
LANE_BIAS = sum(LANE_HALF << (LANE_BITS * j) for j in range(LANES))   # makes every field non-negative
PACK_TMP = 1 << 18              # int64 lane sums held at once (elements: 2 MiB; few MiB of work arrays)


def pack_block(n_in: int) -> int:
    """The packed form's block for rows of ``n_in`` weights: ``PACK_BLOCK``, or its largest divisor dividing n_in."""
    return math.gcd(n_in, PACK_BLOCK)


def pack_rows(q: np.ndarray, out: np.ndarray, r0: int = 0) -> None:
    """Put int8 codes ``q (R, K)`` as rows ``r0..r0+R-1`` into the packed ``out (M, K)`` int64.

    Row ``r`` goes to field ``r % 3`` of ``out[r // 3]``. Rows must come in
    order, a chunk (or a stacked tensor) at a time from any ``r0``: field 0 is
    written (so ``out`` needs no zeroing), fields 1 and 2 are added to it.
    """
    for j in range(LANES):
        first = (j - r0) % LANES                                          # first row of q that lands in field j
        rows = q[first::LANES]                                            # (R_j, K)
        if len(rows):
            m0 = (r0 + first) // LANES
            if j == 0:
                np.copyto(out[m0:m0 + len(rows)], rows, casting="unsafe")
            else:
                out[m0:m0 + len(rows)] += np.left_shift(rows, LANE_BITS * j, dtype=np.int64)   # (R_j, K)


def unpack_lanes(s: np.ndarray) -> np.ndarray:
    """int64 ``s (..., M, B)`` holding three signed fields each -> float32 ``(..., 3M, B)``, field j of row m at 3m + j.

    Exact while every field is within ±2**20 (sums of packed products, or
    codes). ``s`` is overwritten.
    """
    s += LANE_BIAS                                                        # (..., M, B): every field in [0, 2**21)
    out = np.empty(s.shape[:-1] + (LANES, s.shape[-1]), np.float32)       # (..., M, 3, B)
    f = np.empty_like(s)
    for j in range(LANES):
        np.right_shift(s, LANE_BITS * j, out=f)
        if j < LANES - 1:
            f &= LANE_MASK
        np.subtract(f, LANE_HALF, out=out[..., j, :], casting="unsafe")  # exact: |field| < 2**20
    return out.reshape(s.shape[:-2] + (LANES * s.shape[-2], s.shape[-1]))


def x_levels(codes: np.ndarray, block: int) -> int:
    """The largest activation code a packed matrix of int8 ``codes (R, K)`` can take without a field
    spilling: ``(2**20 - 1) // L`` for L the largest sum of |code| over a block (at least 127)."""
    l1 = np.add.reduce(np.abs(codes.reshape(len(codes), -1, block)), axis=-1, dtype=np.int32)  # (R, B)
    return (LANE_HALF - 1) // max(1, int(l1.max(initial=1)))


def quantize_q8(x: np.ndarray, block: int, levels: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """ggml ``quantize_row_q8_0`` per ``block`` with codes up to ``levels`` (127: ggml's 8 bits):
    x (..., K) float32 -> (codes (..., K) int64 in -levels..levels, d (..., K/block) float32).

    ``d = absmax / levels`` of each block, ``code = rint(x / d)``; ``x ≈ code * d``.
    """
    xb = x.reshape(x.shape[:-1] + (-1, block))                            # (..., B, block)
    d = absmax(xb) / np.float32(levels)                                   # (..., B)
    inv = np.divide(np.float32(1.0), d, out=np.zeros_like(d), where=d > 0)
    return np.rint(xb * inv[..., None]).astype(np.int64).reshape(x.shape), d


def matmul_packed(p: np.ndarray, scale: np.ndarray, x: np.ndarray, levels: int = 127) -> np.ndarray:
    """``W x`` for packed int8 rows: p (M, K) int64 (``pack_rows``), scale (3M, B) float32, x (K,) or (T, K).

    ``W[n, k] ≈ code[n, k] * scale[n, k // block]``. x is rounded per block to
    codes up to ``levels`` (``quantize_q8``; ``x_levels`` of the matrix at
    most), one int64 einsum gives the (M, B) exact integer
    block sums of three rows at once, then ``y[n] = sum_b sum[n, b] *
    scale[n, b] * d_x[b]``. Returns (3M,) or (T, 3M): rows past the matrix's
    own (padding to a multiple of 3, scale 0) are 0.
    """
    m, k = p.shape
    nb = scale.shape[1]
    xq, dx = quantize_q8(x, k // nb, levels)                              # (..., K) int64, (..., B)
    pb = p.reshape(m, nb, -1)                                             # (M, B, block)
    xb = xq.reshape(-1, nb, k // nb)                                      # (T, B, block)
    dx = dx.reshape(-1, 1, nb)                                            # (T, 1, B)
    out = np.empty((len(xb), LANES * m), np.float32)                      # (T, 3M)
    rs = min(m, max(1, PACK_TMP // nb))                                   # packed rows per einsum
    ts = max(1, PACK_TMP // (rs * nb))                                    # tokens per einsum
    for r in range(0, m, rs):
        pr, sr = pb[r:r + rs], scale[LANES * r:LANES * (r + rs)]          # (mr, B, block), (3mr, B)
        for j in range(0, len(xb), ts):
            if x.ndim == 1:
                s = unpack_lanes(np.einsum("mbk,bk->mb", pr, xb[0]))[None]   # (1, 3mr, B) block sums
            else:
                s = unpack_lanes(np.einsum("mbk,tbk->tmb", pr, xb[j:j + ts]))   # (t, 3mr, B)
            s *= dx[j:j + ts]
            out[j:j + ts, LANES * r:LANES * r + s.shape[1]] = np.einsum("tnb,nb->tn", s, sr)
    return out[0] if x.ndim == 1 else out


# ----------------------------------------------------------------------------
# normalization and activations

def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """ggml ``rms_norm`` then ``mul``: ``x * (1 / sqrt(mean(x²) + eps)) * weight`` over the last axis.

    x (..., n) float32, weight (n,) -> (..., n). Used on the residual stream
    (n = n_embd) and per head on q and k (n = head size).
    """
    ms = np.add.reduce(x * x, axis=-1, keepdims=True)                    # (..., 1)
    ms /= np.float32(x.shape[-1])
    ms += np.float32(eps)
    return x * (np.float32(1.0) / np.sqrt(ms)) * weight


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """ggml ``swiglu``: ``silu(gate) * up`` with ``silu(g) = g / (1 + exp(-g))``; (..., n_ff) each."""
    with np.errstate(over="ignore"):
        return gate / (1.0 + np.exp(-gate)) * up


def geglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """ggml ``geglu`` on the CPU: ``gelu_tanh(gate) * up``, gelu looked up in float16 as ggml does.

    ``gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g³)))``. ggml-cpu
    (``GGML_GELU_FP16``) rounds ``gate`` to float16, reads ``gelu(gate)`` from
    a float16 table, and passes ``gate`` through unchanged at or beyond 10 (0
    at or below -10). Rounding the same way keeps greedy choices identical to
    llama.cpp's when two logits are close. (..., n_ff) each.
    """
    g = gate.astype(np.float16).astype(np.float32)
    t = g * g                                                             # in place from here on
    t *= np.float32(0.044715)
    t += np.float32(1.0)
    t *= g
    t *= np.float32(0.7978845608028654)                                   # sqrt(2/pi)
    np.tanh(t, out=t)
    t += np.float32(1.0)
    t *= g
    t *= np.float32(0.5)
    t = t.astype(np.float16).astype(np.float32)
    big = np.abs(gate) >= 10.0
    if big.any():
        t[big] = np.where(gate[big] > 0, gate[big], np.float32(0.0))
    t *= up
    return t


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    """Gemma's logit soft-capping: ``cap * tanh(x / cap)``."""
    return np.float32(cap) * np.tanh(x / np.float32(cap))


# ----------------------------------------------------------------------------
# rope

class Rope:
    """Rotary position embedding tables for one frequency base (ggml ``rope_ext``, no YaRN).

    Dimension pair ``i`` (``0 <= i < n_rot/2``) of a head at position ``p`` is
    turned by ``theta = freq_scale * p * base^(-2i/n_rot) / freq_factor[i]``.
    NEOX pairs dims ``(i, i + n_rot/2)``; NORM pairs ``(2i, 2i + 1)``. As in
    ggml's ``ggml_rope_cache_init``, ``p * base^(-2i/n_rot)`` is built by
    repeated float32 multiplication, so the angles match llama.cpp's bit for bit.
    Tables grow on demand: cos/sin ``(n_pos, n_rot/2)``.
    """

    def __init__(self, n_rot: int, base: float, freq_scale: float = 1.0, neox: bool = True,
                 freq_factors: np.ndarray | None = None):
        self.n_rot, self.base, self.freq_scale, self.neox = n_rot, base, freq_scale, neox
        self.freq_factors = freq_factors   # (n_rot/2,) or None (llama 3's rope_freqs)
        self.cos = self.sin = np.zeros((0, n_rot // 2), np.float32)

    def _grow(self, n_pos: int) -> None:
        n = max(n_pos, 2 * len(self.cos), 64)
        theta_scale = np.float32(self.base) ** np.float32(-2.0 / self.n_rot)
        theta = np.empty((n, self.n_rot // 2), np.float32)             # (n_pos, n_rot/2)
        t = np.arange(n, dtype=np.float32)
        for i in range(self.n_rot // 2):
            theta[:, i] = t
            t = t * theta_scale
        if self.freq_factors is not None:
            theta /= self.freq_factors
        theta *= np.float32(self.freq_scale)
        self.cos, self.sin = np.cos(theta), np.sin(theta)

    def __call__(self, x: np.ndarray, pos: int) -> np.ndarray:
        """Rotate x (T, n_heads, D) at positions pos..pos+T-1 in place; returns x."""
        t = x.shape[0]
        if pos + t > len(self.cos):
            self._grow(pos + t)
        c = self.cos[pos:pos + t, None, :]                               # (T, 1, n_rot/2)
        s = self.sin[pos:pos + t, None, :]
        h = self.n_rot // 2
        if self.neox:
            x0, x1 = x[..., :h].copy(), x[..., h:self.n_rot].copy()      # (T, n_heads, n_rot/2)
            x[..., :h] = x0 * c - x1 * s
            x[..., h:self.n_rot] = x0 * s + x1 * c
        else:
            x0, x1 = x[..., 0:self.n_rot:2].copy(), x[..., 1:self.n_rot:2].copy()
            x[..., 0:self.n_rot:2] = x0 * c - x1 * s
            x[..., 1:self.n_rot:2] = x0 * s + x1 * c
        return x


# ----------------------------------------------------------------------------
# attention

SCORES_MAX = 1 << 20     # attention scores held at once during prefill (float32 elements: 4 MiB)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, pos: int, window: int) -> np.ndarray:
    """Causal (optionally sliding-window) softmax attention with GQA, as ggml ``soft_max_ext`` + ``mul_mat``.

    q (Hkv, G, T, D) already scaled, for queries at positions pos..pos+T-1;
    k (Hkv, pos+T, D), v (Hkv, pos+T, Dv): the cache, position s in row s.
    A query at p sees the keys at s <= p, and with ``window > 0`` only those
    with p - s < window (llama.cpp ``is_masked_swa``, LLAMA_SWA_TYPE_STANDARD).
    Query head h uses key/value head h // G. Returns (Hkv, G, T, Dv).
    Long prompts are cut into query chunks of at most ``SCORES_MAX`` scores.
    """
    hkv, g, t, _ = q.shape
    step = max(1, SCORES_MAX // (hkv * g * (pos + t)))
    if step >= t:                                                         # one chunk (decode, short prompts)
        s0 = max(0, pos - window + 1) if window else 0
        return _attend(q, k[:, s0:], v[:, s0:], pos, s0, window)
    out = np.empty((hkv, g, t, v.shape[2]), np.float32)
    for t0 in range(0, t, step):
        t1 = min(t, t0 + step)
        p0, p1 = pos + t0, pos + t1                                       # queries' positions
        s0 = max(0, p0 - window + 1) if window else 0                     # first key any of them sees
        out[:, :, t0:t1] = _attend(q[:, :, t0:t1], k[:, s0:p1], v[:, s0:p1], p0, s0, window)
    return out


def _attend(q, k, v, p0: int, s0: int, window: int) -> np.ndarray:
    """One chunk: q (Hkv, G, Tc, D) at positions p0.., keys k (Hkv, S, D) at s0.. -> (Hkv, G, Tc, Dv)."""
    scores = np.einsum("hgtd,hsd->hgts", q, k)                            # (Hkv, G, Tc, S)
    tc, s = q.shape[2], k.shape[1]
    if tc > 1 or (window and s > window):
        qp = np.arange(p0, p0 + tc)[:, None]                              # (Tc, 1)
        kp = np.arange(s0, s0 + s)[None, :]                               # (1, S)
        masked = kp > qp
        if window:
            masked |= qp - kp >= window
        scores[..., masked] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.einsum("hgts,hsd->hgtd", scores, v)                        # (Hkv, G, Tc, Dv)
