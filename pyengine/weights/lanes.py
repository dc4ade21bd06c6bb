"""The packed weight form's arithmetic: three rows of int8 codes in one int64.

Pyodide's einsum costs the same per element for int64 as for float32, and
numpy has no int8 dot product that does not first widen the codes, which costs
more than the float32 product itself. So three rows ride in one int64, one
``LANE_BITS``-wide field each: ``W[3m + j, k]``'s code is field j of
``P[m, k]``. With the activations rounded to integer codes per block of the
same weights (ggml's ``quantize_row_q8_0``, as llama.cpp's quantized matmuls
round them), one int64 einsum gives every block's three integer dot products
at once and exactly: ``|sum of 64 products of codes in -127..127| <= 64 * 127
* 127 = 1,032,256 < 2**20``, so no field spills into the next. A matrix whose
blocks' codes sum to at most L in absolute value leaves room for activation
codes up to ``(2**20 - 1) // L`` (:func:`x_levels`).
"""

from __future__ import annotations

import math

import numpy as np

from pyengine.weights.matmul import TMP_ELEMENTS, absmax

LANES = 3                       # int8 rows per int64
LANE_BITS = 21                  # bits per field: a signed sum of PACK_BLOCK products of two int8 codes
PACK_BLOCK = 64                 # weights, and activations, sharing one scale (at most 64: the fields' room)
LANE_HALF = 1 << (LANE_BITS - 1)
LANE_MASK = (1 << LANE_BITS) - 1
LANE_BIAS = sum(LANE_HALF << (LANE_BITS * j) for j in range(LANES))   # makes every field non-negative


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
    rs = min(m, max(1, TMP_ELEMENTS // nb))                                   # packed rows per einsum
    ts = max(1, TMP_ELEMENTS // (rs * nb))                                    # tokens per einsum
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
