"""Gated DeltaNet: the linear-attention layers of qwen35, with a recurrent state instead of a KV cache.

One layer (llama.cpp ``src/models/qwen35.cpp``, ``build_layer_attn_linear``; the math of ggml's
``ssm_conv`` and ``gated_delta_net``)::

    qkv, z, b, a = w_in · x                     (attn_qkv, attn_gate, ssm_beta, ssm_alpha)
    qkv = silu(causal_conv(qkv))                (ssm_conv1d: d_conv taps per channel)
    q, k = l2norm(q), l2norm(k)                 (per key head)
    g = softplus(a + ssm_dt.bias) * ssm_a       (log of the decay, ssm_a = -exp(A_log) < 0)
    beta = sigmoid(b)
    per value head h, reading key head h % Hk (a worker of a split model holds some value heads,
    the key heads they read, and their state):
        S = exp(g) S                            S: (Dv, Dk), the recurrent state
        S = S + beta (v - S k) kᵀ               the delta rule
        o = S q / sqrt(Dk)
    out = ssm_out · (rmsnorm(o, ssm_norm) * silu(z))

Shapes: ``T`` tokens, ``H`` value heads, ``Hk`` key heads, ``Dk`` = ``Dv`` the head size,
``C`` the conv channels (2 Hk Dk + H Dv), ``K`` the conv taps. The state of a layer is its conv
window, the last ``K - 1`` inputs (K - 1, C), and ``S`` for every head (H, Dv, Dk); both float32.
With the C kernel everything between the two products runs a token at a time in one call (kernel.c's
pe_delta_net: the state read once a token; a prompt's tokens run as decode's do). The numpy path runs a
prompt by chunks of ``CHUNK`` tokens (the WY form of the delta rule: a triangular solve per chunk, then
products), and a batch of at most ``ONE_BY_ONE`` tokens token by token, so a checked draft has the bits
of one-token passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pyengine.model.ops import ONE_BY_ONE, rmsnorm

CHUNK = 64              # tokens per chunk of the chunked delta rule (llama.cpp's CS)


@dataclass
class DeltaNet:
    """One Gated DeltaNet layer (``blk.N.*``) over the H value heads this worker holds; its two matrices are
    weight forms. Called on x (T, n_embd), already normed, it stages its new state in the cache."""
    w_in: Any               # (C + H*Dv + 2H, n_embd): attn_qkv, attn_gate, ssm_beta, ssm_alpha
    conv: np.ndarray        # (C, K) ssm_conv1d
    dt_bias: np.ndarray     # (H,) ssm_dt.bias
    a: np.ndarray           # (H,) ssm_a = -exp(A_log)
    norm: np.ndarray        # (Dv,) ssm_norm
    w_out: Any              # (n_embd, H*Dv) ssm_out
    key_of: np.ndarray      # (H,) int: for each value head, which of the Hk key heads held it reads
    il: int = 0             # the layer
    d_state: int = 0        # Dk = Dv, the head size (ssm.state_size)
    eps: float = 1e-6
    split: bool = False     # the value heads are cut over workers: the output is summed over them
    shared: Any = None      # blocks.Shared: the communicator and the products

    TENSORS = ("w_in", "conv", "dt_bias", "a", "norm", "w_out", "key_of")

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f).nbytes for f in self.TENSORS)

    def __call__(self, x: np.ndarray, cache, pos: int) -> np.ndarray:
        """x (T, n_embd) -> (T, n_embd), from the layer's state in ``cache`` (a HybridCache), the new one staged."""
        h, window, s = delta_net(self, x, *cache.state(self.il), self.shared.products)
        cache.stage(self.il, window, s)
        return self.shared.comm.all_reduce(h) if self.split else h


def key_heads(v0: int, v1: int, n_group: int) -> list[int]:
    """The key heads that value heads ``v0..v1-1`` read (value head j reads key head j % n_group), in order:
    what a worker holding those value heads holds of q and k."""
    return sorted({j % n_group for j in range(v0, v1)})


def channels(v0: int, v1: int, n_group: int, d: int) -> list[tuple[int, int]]:
    """The conv channels (rows of attn_qkv and ssm_conv1d: q of every key head, then k, then v of every
    value head) of value heads ``v0..v1-1``, as ``(first, end)`` runs, for heads of size ``d``."""
    nk, out = n_group * d, []
    for base in (0, nk):
        out += [(base + g * d, base + (g + 1) * d) for g in key_heads(v0, v1, n_group)]
    out.append((2 * nk + v0 * d, 2 * nk + v1 * d))
    merged = [out[0]]
    for a, b in out[1:]:
        merged[-1:] = [(merged[-1][0], b)] if a == merged[-1][1] else [merged[-1], (a, b)]
    return merged


# ----------------------------------------------------------------------------
# the pieces

def silu(x: np.ndarray) -> np.ndarray:
    """ggml ``silu``: ``x / (1 + exp(-x))``."""
    with np.errstate(over="ignore"):
        return x / (np.float32(1.0) + np.exp(-x))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """ggml ``sigmoid``: ``1 / (1 + exp(-x))``."""
    with np.errstate(over="ignore"):
        return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


def softplus(x: np.ndarray) -> np.ndarray:
    """ggml ``softplus``: ``log(1 + exp(x))``, ``x`` itself above 20."""
    with np.errstate(over="ignore"):
        return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0)))).astype(np.float32)


def l2norm(x: np.ndarray, eps: float) -> np.ndarray:
    """llama.cpp ``build_gdn_l2_norm``: ``rms_norm(x, eps / n) / sqrt(n)`` = ``x / sqrt(sum(x²) + eps)``
    over the last axis (n its length)."""
    n = x.shape[-1]
    ms = np.add.reduce(x * x, axis=-1, keepdims=True)                    # (..., 1)
    ms /= np.float32(n)
    ms += np.float32(eps / n)
    return x * (np.float32(1.0) / np.sqrt(ms)) * np.float32(1.0 / np.sqrt(n))


def causal_conv(x: np.ndarray, window: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml ``ssm_conv``: each channel's causal convolution over its last K inputs.

    x (T, C) the new inputs, window (K-1, C) the inputs before them, w (C, K) -> (out (T, C), the
    new window (K-1, C)). ``out[t] = sum_i xs[t + i] * w[:, i]`` with ``xs`` the window then x,
    summed tap by tap in float32 as ggml does.
    """
    k = w.shape[1]
    xs = np.concatenate([window, x])                                      # (K-1+T, C)
    t = x.shape[0]
    out = xs[0:t] * w[:, 0]
    for i in range(1, k):
        out += xs[i:i + t] * w[:, i]                                      # (T, C)
    return out, xs[t:].copy()


# ----------------------------------------------------------------------------
# the delta rule

def delta_step(s: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
               gate: tuple) -> tuple[np.ndarray, np.ndarray]:
    """One token of the gated delta rule (ggml ``gated_delta_net``, one step), every head at once.

    s (H, Dv, Dk); q, k (H, Dk) (q already scaled); v (H, Dv); gate (g, beta), each (H,): the log decay and
    the write strength -> (o (H, Dv), new s).
    """
    g, beta = gate
    s = s * np.exp(g)[:, None, None]                                      # (H, Dv, Dk)
    sk = np.einsum("hjd,hd->hj", s, k)                                    # (H, Dv)
    d = (v - sk) * beta[:, None]                                          # (H, Dv)
    s = s + d[:, :, None] * k[:, None, :]                                 # (H, Dv, Dk)
    return np.einsum("hjd,hd->hj", s, q), s


def delta_chunk(s: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                gate: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The gated delta rule over one chunk of L tokens at once (llama.cpp ``build_delta_net_chunking``).

    s (H, Dv, Dk); q, k (H, L, Dk) (q scaled); v (H, L, Dv); gate (g, beta) each (H, L) -> (o (H, L, Dv),
    new s).
    With ``G`` the cumulative log decay and ``D[i, j] = exp(G_i - G_j)`` (j <= i), the L updates
    make one lower-triangular system: ``(I + tril(beta_i k_i·k_j D, -1)) U = [beta v | beta k exp(G)]``.
    """
    s, q, k, v, g, beta = (a.astype(np.float64) for a in (s, q, k, v, *gate))   # the solve is touchy in float32
    cg = np.cumsum(g, axis=1)                                             # (H, L)
    diff = cg[:, :, None] - cg[:, None, :]                                # (H, L, L): G_i - G_j
    lower = np.tril(np.ones(diff.shape[1:], bool))                        # (L, L) j <= i
    decay = np.where(lower, np.exp(np.where(lower, diff, 0.0)), 0.0)
    kb = k * beta[:, :, None]                                             # (H, L, Dk)
    kt = k.transpose(0, 2, 1)                                             # (H, Dk, L)
    a = (kb @ kt) * decay                                                 # (H, L, L)
    a = np.tril(a, -1) + np.eye(a.shape[1])
    rhs = np.concatenate([v * beta[:, :, None], kb * np.exp(cg)[:, :, None]], axis=2)   # (H, L, Dv + Dk)
    u = np.linalg.solve(a, rhs)                                           # (H, L, Dv + Dk)
    dv = v.shape[2]
    vals, kcd = u[:, :, :dv], u[:, :, dv:]                                # (H, L, Dv), (H, L, Dk)
    st = s.transpose(0, 2, 1)                                             # (H, Dk, Dv)
    v_new = vals - kcd @ st                                               # (H, L, Dv)
    qk = (q @ kt) * decay                                                 # (H, L, L)
    o = (q * np.exp(cg)[:, :, None]) @ st + qk @ v_new                    # (H, L, Dv)
    last = cg[:, -1]                                                      # (H,)
    kg = k * np.exp(last[:, None] - cg)[:, :, None]                       # (H, L, Dk)
    s = s * np.exp(last)[:, None, None] + v_new.transpose(0, 2, 1) @ kg   # (H, Dv, Dk)
    return o.astype(np.float32), s.astype(np.float32)


def delta_rule(s: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
               gate: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The gated delta rule over T tokens: q, k (T, H, Dk) (q scaled), v (T, H, Dv), gate (g, beta) each (T, H),
    s (H, Dv, Dk) -> (o (T, H, Dv), new s): up to ``ONE_BY_ONE`` tokens one at a time, else by chunks."""
    t, (g, beta) = q.shape[0], gate
    if t <= ONE_BY_ONE:
        out = np.empty(v.shape, np.float32)                               # (T, H, Dv)
        for i in range(t):
            out[i], s = delta_step(s, q[i], k[i], v[i], (g[i], beta[i]))
        return out, s
    q, k, v = q.transpose(1, 0, 2), k.transpose(1, 0, 2), v.transpose(1, 0, 2)   # (H, T, D)
    g, beta = g.T, beta.T                                                 # (H, T)
    out = np.empty(v.shape, np.float32)                                   # (H, T, Dv)
    for c0 in range(0, t, CHUNK):
        c = slice(c0, min(t, c0 + CHUNK))
        out[:, c], s = delta_chunk(s, q[:, c], k[:, c], v[:, c], (g[:, c], beta[:, c]))
    return out.transpose(1, 0, 2), s


# ----------------------------------------------------------------------------
# the layer

def delta_net(layer: DeltaNet, x: np.ndarray, window: np.ndarray, s: np.ndarray, products=None) -> tuple:
    """A Gated DeltaNet layer on x (T, n_embd), already normed, from the state (window (K-1, C), s
    (H, Dv, Dk)) -> (out (T, n_embd), new window, new s), over the H value heads and Hk key heads this
    worker holds (a split model sums ``out`` over the workers). The state passed in is not changed.
    ``products``: the C kernel, which runs everything between the two products a token at a time
    (:meth:`pyengine.weights.kernel.Kernel.delta_net`), or None (numpy)."""
    h, t, d, eps = len(layer.key_of), x.shape[0], layer.d_state, layer.eps
    hk = (layer.conv.shape[0] - h * d) // (2 * d)
    nk, nv = hk * d, h * d
    proj = layer.w_in(x)                                                  # (T, C + nv + 2H)
    if products is not None:
        o, window, s = products.delta_net(np.ascontiguousarray(proj, np.float32), layer, window, s)   # (T, nv)
        return layer.w_out(o), window, s
    qkv, z = proj[:, :2 * nk + nv], proj[:, 2 * nk + nv:2 * nk + 2 * nv]  # (T, C), (T, nv)
    b, a = proj[:, 2 * nk + 2 * nv:2 * nk + 2 * nv + h], proj[:, 2 * nk + 2 * nv + h:]   # (T, H) each
    qkv, window = causal_conv(qkv, window, layer.conv)
    qkv = silu(qkv)                                                       # (T, C)
    q = l2norm(qkv[:, :nk].reshape(t, hk, d), eps)                  # (T, Hk, Dk)
    k = l2norm(qkv[:, nk:2 * nk].reshape(t, hk, d), eps)            # (T, Hk, Dk)
    v = qkv[:, 2 * nk:].reshape(t, h, d)                                  # (T, H, Dv)
    q = (q * np.float32(1.0 / np.sqrt(d)))[:, layer.key_of]               # (T, H, Dk): each value head's key head
    k = k[:, layer.key_of]                                                # (T, H, Dk)
    g = softplus(a + layer.dt_bias) * layer.a                             # (T, H)
    o, s = delta_rule(s, q, k, v, (g, sigmoid(b)))                        # (T, H, Dv)
    o = rmsnorm(o, layer.norm, eps) * silu(z.reshape(t, h, d))      # (T, H, Dv)
    return layer.w_out(o.reshape(t, nv)), window, s
