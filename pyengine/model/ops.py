"""The network's operations in numpy: RMSNorm, the gated FFN activations, rope, attention, the short
convolution.

Each is the math of the ggml CPU op named in its docstring. Shapes: ``T``
tokens in the batch, ``S`` positions of the KV cache attended to, ``H`` query
heads, ``Hkv`` key/value heads, ``G = H / Hkv`` query heads per key/value head
(GQA), ``D`` head size. Activations are float32. The products with weights
live in :mod:`pyengine.weights`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

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


def rmsnorm_split(x: np.ndarray, weight: np.ndarray, eps: float, n: int, reduce, own: bool = True) -> np.ndarray:
    """:func:`rmsnorm` of a vector cut over workers: x (T, this worker's part), weight its part; the sums
    of squares are summed by ``reduce`` (an all-reduce over the workers) and divided by ``n``, the
    whole length. ``own`` False: this worker's part is also another's, which counts it (olmo2's q/k norm)."""
    ss = np.add.reduce(x * x, axis=-1, keepdims=True)                    # (T, 1)
    ms = reduce(ss if own else np.zeros_like(ss))
    ms /= np.float32(n)
    ms += np.float32(eps)
    return x * (np.float32(1.0) / np.sqrt(ms)) * weight


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """ggml ``swiglu``: ``silu(gate) * up`` with ``silu(g) = g / (1 + exp(-g))``; (..., n_ff) each."""
    with np.errstate(over="ignore"):
        return gate / (1.0 + np.exp(-gate)) * up


@cache
def gelu_f16_table() -> np.ndarray:
    """ggml-cpu's ``ggml_table_gelu_f16``: ``gelu(x)`` for every float16 ``x`` (65536, as float32), each
    computed in float32 in ggml's order, ``0.5f*x*(1.0f + tanhf(SQRT_2_OVER_PI*x*(1.0f + GELU_COEF_A*x*x)))``,
    and rounded to float16 (tanh in float64, rounded to float32: glibc's tanhf is that to the last bit
    here)."""
    x = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(all="ignore"):                                       # the infinities and NaNs
        inner = (np.float32(0.7978845608028654) * x) * (np.float32(1.0) + (np.float32(0.044715) * x) * x)
        th = np.tanh(inner.astype(np.float64)).astype(np.float32)
        return ((np.float32(0.5) * x) * (np.float32(1.0) + th)).astype(np.float16).astype(np.float32)


def geglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """ggml ``geglu`` on the CPU: ``gelu_tanh(gate) * up``, gelu looked up in float16 as ggml does.

    ``gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g³)))``. ggml-cpu
    (``GGML_GELU_FP16``) rounds ``gate`` to float16, reads ``gelu(gate)`` from
    its float16 table (:func:`gelu_f16_table`), and passes ``gate`` through
    unchanged at or beyond 10 (0 at or below -10). Reading the same table keeps
    the products bit for bit llama.cpp's, so an 8-bit rounding of them after
    (a quantized ``ffn_down``) rounds the same way. (..., n_ff) each.
    """
    t = gelu(gate)
    t *= up
    return t


def gelu(x: np.ndarray) -> np.ndarray:
    """ggml ``gelu`` on the CPU (tanh approximation, ``GGML_GELU_FP16``): x rounded to float16 and
    looked up in :func:`gelu_f16_table`; x itself at or beyond 10, 0 at or below -10. (...) float32."""
    t = gelu_f16_table()[x.astype(np.float16).view(np.uint16)]
    big = np.abs(x) >= 10.0
    if big.any():
        t[big] = np.where(x[big] > 0, x[big], np.float32(0.0))
    return t


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    """Gemma's soft-capping ``cap * tanh(x / cap)`` as ggml computes it: ``scale(x, 1/cap)``, ``tanh``,
    ``scale(cap)`` (a product with the float32 reciprocal, not a division)."""
    return np.float32(cap) * np.tanh(x * np.float32(1.0 / cap))


def ssm_conv(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """ggml ``ssm_conv``, one sequence: a causal depthwise convolution. x (L - 1 + T, C) holds the L - 1
    inputs before the batch then its T, kernel (C, L) float32 -> (T, C), out[t] = sum_i x[t + i] * kernel[:, i],
    summed in tap order as ggml does."""
    n_taps, t = kernel.shape[1], x.shape[0] - kernel.shape[1] + 1
    out = x[0:t] * kernel[:, 0]                                           # (T, C)
    for i in range(1, n_taps):
        out += x[i:i + t] * kernel[:, i]
    return out


# ----------------------------------------------------------------------------
# rope

class Rope:
    """Rotary position embedding tables for one frequency base (ggml ``rope_ext``, no YaRN).

    Dimension pair ``i`` (``0 <= i < n_rot/2``) of a head at position ``p`` is
    turned by ``theta = freq_scale * p * base^(-2i/n_rot) / freq_factor[i]``.
    NEOX pairs dims ``(i, i + n_rot/2)``; NORM pairs ``(2i, 2i + 1)``. As in
    ggml's ``ggml_rope_cache_init``, ``p * base^(-2i/n_rot)`` is built by
    repeated float32 multiplication, so the angles match llama.cpp's bit for bit.
    Tables grow on demand: cos/sin ``(n_pos, n_rot/2)``. ``text_pairs`` (n_rot/2,) bool: the pairs
    turned by the position (multi-section rope of text tokens, :func:`imrope_text_pairs`); the
    others stay as they are.
    """

    def __init__(self, n_rot: int, base: float, freq_scale: float = 1.0, neox: bool = True,
                 freq_factors: np.ndarray | None = None, text_pairs: np.ndarray | None = None):
        self.n_rot, self.base, self.freq_scale, self.neox = n_rot, base, freq_scale, neox
        self.freq_factors = freq_factors   # (n_rot/2,) or None (llama 3's rope_freqs)
        self.text_pairs = text_pairs       # (n_rot/2,) bool or None (all pairs)
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
        if self.text_pairs is not None:
            theta[:, ~self.text_pairs] = 0.0
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


def imrope_text_pairs(sections: tuple[int, int, int, int], n_pairs: int) -> np.ndarray:
    """Which rope pairs of interleaved multi-section rope (ggml ``rope_multi``, ``GGML_ROPE_TYPE_IMROPE``;
    ``ggml_mrope_cache_init``) a text token turns: (n_pairs,) bool.

    Pair ``i`` is in sector ``i % sum(sections)``; sectors cycle time, height, width (``% 3``) while
    each section lasts, the rest take the extra position. llama.cpp gives a text token at ``p`` the
    positions ``(p, p, p, 0)``, so the pairs of the extra section are not turned.
    """
    t, h, w, _ = sections
    sector = np.arange(n_pairs) % sum(sections)
    return ((sector % 3 == 1) & (sector < 3 * h)) | ((sector % 3 == 2) & (sector < 3 * w)) | \
        ((sector % 3 == 0) & (sector < 3 * t))


# ----------------------------------------------------------------------------
# attention

@dataclass(frozen=True)
class Scoring:
    """How attention's scores are made: soft-capped at ``cap`` before the mask when > 0 (gemma2's
    ``attn_soft_cap``: ``cap * tanh(s / cap)``), the two products over the cache by ``products`` (the C
    kernel, :class:`pyengine.weights.kernel.Kernel`) or numpy's einsum (None)."""
    cap: float = 0.0
    products: Any = None


NUMPY = Scoring()
SCORES_MAX = 1 << 20     # attention scores held at once during prefill (float32 elements: 4 MiB)
ONE_BY_ONE = 16          # a batch of this many queries or fewer attends one query at a time


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, pos: int, window: int,
              scoring: Scoring = NUMPY) -> np.ndarray:
    """Causal (optionally sliding-window) softmax attention with GQA, as ggml ``soft_max_ext`` + ``mul_mat``.

    q (Hkv, G, T, D) already scaled, for queries at positions pos..pos+T-1;
    k (Hkv, pos+T, D), v (Hkv, pos+T, Dv): the cache, position s in row s.
    A query at p sees the keys at s <= p, and with ``window > 0`` only those
    with p - s < window (llama.cpp ``is_masked_swa``, LLAMA_SWA_TYPE_STANDARD).
    Query head h uses key/value head h // G. Returns (Hkv, G, T, Dv).
    Long prompts are cut into query chunks of at most ``SCORES_MAX`` scores. A batch of at most
    ``ONE_BY_ONE`` queries (a draft being checked) attends query by query over exactly its own keys, so each
    row has the bits of a one-token pass (sums over masked zeros would group the floats otherwise).
    ``scoring``: the soft-cap and the products (:class:`Scoring`).
    """
    hkv, g, t, _ = q.shape
    if 1 < t <= ONE_BY_ONE:
        return np.concatenate([attention(q[:, :, i:i + 1], k[:, :pos + i + 1], v[:, :pos + i + 1], pos + i, window,
                                         scoring) for i in range(t)], axis=2)
    step = max(1, SCORES_MAX // (hkv * g * (pos + t)))
    if step >= t:                                                         # one chunk (decode, short prompts)
        return _attend(q, k, v, pos, window, scoring)
    out = np.empty((hkv, g, t, v.shape[2]), np.float32)
    for t0 in range(0, t, step):
        t1 = min(t, t0 + step)
        p0, p1 = pos + t0, pos + t1                                       # queries' positions
        out[:, :, t0:t1] = _attend(q[:, :, t0:t1], k[:, :p1], v[:, :p1], p0, window, scoring)
    return out


def _attend(q, k, v, p0: int, window: int, scoring: Scoring) -> np.ndarray:
    """One chunk: q (Hkv, G, Tc, D) at positions p0.., keys k (Hkv, p0+Tc, D) from 0 -> (Hkv, G, Tc, Dv), over
    the keys from the first any of them sees."""
    hkv, g, tc, _ = q.shape
    s0 = max(0, p0 - window + 1) if window else 0                         # first key any of them sees
    k, v = k[:, s0:], v[:, s0:]
    scores = attention_weights(q, k, p0, s0, window, scoring)            # (Hkv, G, Tc, S)
    if scoring.products is not None:
        return scoring.products.attention_values(scores.reshape(hkv, g * tc, -1), v).reshape(hkv, g, tc, -1)
    return np.einsum("hgts,hsd->hgtd", scores, v)                        # (Hkv, G, Tc, Dv)


def attention_weights(q: np.ndarray, k: np.ndarray, p0: int, s0: int, window: int,
                      scoring: Scoring = NUMPY) -> np.ndarray:
    """The softmax of the scores: q (Hkv, G, Tc, D) scaled, at positions p0.., keys k (Hkv, S, D) at
    s0.. -> (Hkv, G, Tc, S) float32, each row summing to 1 over the keys its query sees (causal, and
    ``window`` > 0: the last ``window`` positions), 0 elsewhere (ggml ``soft_max_ext`` with the mask)."""
    hkv, g, tc, d = q.shape
    if scoring.products is not None:
        scores = scoring.products.attention_scores(np.ascontiguousarray(q.reshape(hkv, g * tc, d), np.float32), k)
        scores = scores.reshape(hkv, g, tc, -1)                           # (Hkv, G, Tc, S)
    else:
        scores = np.einsum("hgtd,hsd->hgts", q, k)                        # (Hkv, G, Tc, S)
    if scoring.cap:
        scores = softcap(scores, scoring.cap)
    s = k.shape[1]
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
    return scores
