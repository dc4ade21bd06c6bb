"""Products of float32 weights with activations, and ggml's rounding of activations to 8-bit codes.

Every product with a weight is an ``np.einsum`` over the weight as the GGUF
stores it, ``W`` of shape ``(n_out, n_in)`` with rows contiguous: ``x @ W``
with ``W`` as ``(n_in, n_out)`` runs 5-10x slower in Pyodide and appears
nowhere (``shared/RUNTIME.md``); only CPython's prefill hands ``X @ W.T`` to
BLAS (:func:`matmul`). This is where nearly all the time goes.
"""

from __future__ import annotations

import sys

import numpy as np

EINSUM_MAX = 1 << 30    # elements one einsum may iterate over: wasm32 numpy fails past 2**31
USE_BLAS = sys.platform != "emscripten"   # CPython's numpy wheels link OpenBLAS (prefill); Pyodide's has none
BLAS_MIN_TOKENS = 64    # smaller batches stay einsums (OpenBLAS's threads cost more than they save there)


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


def quantize_activations(x: np.ndarray, vec_dot_type: str) -> tuple[np.ndarray, np.ndarray, int]:
    """x (..., K) float32 as ggml's matmul quantizes it for a weight of that ``vec_dot_type``:
    (codes (..., K) float32 holding integers in -127..127, scale (..., K/block) float32, block).

    Q8_0 / Q8_1 (ggml-cpu x86 ``quantize_row_q8_0``): blocks of 32,
    ``q = round(x * 127 / amax)`` half to even, scale ``fp16(amax / 127)``.
    Q8_K (``quantize_row_q8_K_ref``): blocks of 256 (of K, when K is smaller),
    ``q = min(127, round(-127 / max * x))`` where ``max`` is the signed value of largest
    magnitude, scale ``max / -127``. ``x ≈ q * scale``; a block of zeros has scale 0.
    """
    block = min(256, x.shape[-1]) if vec_dot_type == "Q8_K" else 32
    xb = x.reshape(*x.shape[:-1], -1, block)                              # (..., K/block, block)
    if vec_dot_type == "Q8_K":
        i = np.abs(xb).argmax(axis=-1)[..., None]
        mx = np.take_along_axis(xb, i, axis=-1)                           # (..., K/256, 1) signed
        nonzero = mx != 0                                                 # a block of zeros: scale 0, codes 0
        iscale = np.divide(np.float32(-127.0), mx, out=np.zeros_like(mx), where=nonzero)
        q = np.minimum(np.rint(xb * iscale), np.float32(127.0))
        d = np.divide(np.float32(1.0), iscale, out=np.zeros_like(mx), where=nonzero)
    else:
        amax = absmax(xb)[..., None]                                      # (..., K/32, 1)
        d = (amax / np.float32(127.0)).astype(np.float16).astype(np.float32)
        inv = np.divide(np.float32(127.0), amax, out=np.zeros_like(amax), where=amax > 0)
        q = np.rint(xb * inv)
    return q.reshape(x.shape), d[..., 0], block


def round_activations(x: np.ndarray, vec_dot_type: str | None) -> np.ndarray:
    """x (..., K) as ggml's matmul sees it after converting it to ``vec_dot_type`` (float32 out):
    the codes of :func:`quantize_activations` times their scales; F16 / BF16: x rounded to that float
    type; None: x unchanged."""
    if vec_dot_type is None:
        return x
    if vec_dot_type == "F16":
        return x.astype(np.float16).astype(np.float32)
    if vec_dot_type == "BF16":   # round to nearest even on the top 16 bits
        b = x.astype(np.float32).view(np.uint32)
        b = (b + 0x7FFF + ((b >> 16) & 1)) & np.uint32(0xFFFF0000)
        return b.view(np.float32)
    q, d, block = quantize_activations(x, vec_dot_type)
    return (q.reshape(*x.shape[:-1], -1, block) * d[..., None]).reshape(x.shape)


def matmul(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``W (N, K)`` times ``x (K,)`` -> ``(N,)``, or times each row of ``X (T, K)`` -> ``(T, N)``.

    One einsum per call, split over rows of W or tokens when N·K·T would pass
    ``EINSUM_MAX``. In CPython a batch of at least ``BLAS_MIN_TOKENS`` tokens
    (prefill) with float32 weights goes to BLAS, ``X @ W.T`` without a copy.
    Smaller batches and the decode mat-vec stay einsums: memory-bound either
    way.
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


def absmax(x: np.ndarray) -> np.ndarray:
    """``max |x|`` over the last axis: float32 (..., n) -> (...,).

    Taken on the bit patterns as int32 with the sign bit cleared, which order
    non-negative floats as their values do (a NaN stays a NaN): Pyodide's
    float max reduction costs ~9 ns an element, its int32 one ~1.3.
    """
    bits = np.ascontiguousarray(x, np.float32).view(np.int32) & np.int32(0x7FFFFFFF)   # (..., n)
    return bits.max(axis=-1).view(np.float32)
