"""The blocks of the forward pass: a :class:`Block` runs a mixer and an :class:`FFN` between its norms.

A mixer is one of :class:`Attention`, :class:`ShortConv` (lfm2) or
:class:`~pyengine.model.delta_net.DeltaNet` (qwen35); each takes x (T, n_embd), already normed, at
positions pos.., and returns what it adds to the stream (T, n_embd), summed over the workers of a split
model, keeping its state in the cache. Their tensors are the fields of the tables in
:mod:`pyengine.model.tensors`; what the architecture and the layer say (head sizes, rope, window, KV
source, activation) is resolved once, when the block is built (:func:`build_block`), so the hot loop
does not branch on the architecture. The math is llama.cpp's ``build_attn``, ``build_ffn`` and
``src/models/<arch>.cpp``; the shape of a block is mlx-lm's ``TransformerBlock.__call__``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pyengine.model.delta_net import DeltaNet, key_heads, sigmoid
from pyengine.model.ops import Rope, Scoring, attention, geglu, gelu, rmsnorm, rmsnorm_split, ssm_conv, swiglu
from pyengine.model.tensors import ATTENTION, BLOCK, FFN_TENSORS, SHORTCONV
from pyengine.weights.forms import add_bias


@dataclass
class Shared:
    """What every block of one model (or worker's shard) uses: ``comm`` sums the workers' partial results
    (``all_reduce``); ``products`` is the C kernel for attention's and the delta rule's float32 products
    when the weights are in its blocks form, else None (numpy's)."""
    comm: Any
    products: Any = None


def tensor_nbytes(obj, table: list) -> int:
    """Bytes held by the fields of ``obj`` that ``table`` fills."""
    return sum(getattr(getattr(obj, f), "nbytes", 0) for f in dict.fromkeys(r.field for r in table))


@dataclass
class Attention:
    """Self-attention over this shard's q heads ``n_head`` and KV heads ``n_head_kv`` (llama.cpp ``build_attn``)::

        q, k, v = split(wqkv · x + bqkv)        (qwen35: each head's query, then its output gate)
        q, k = q_norm(q), k_norm(k)             (per head: qwen3, gemma; over all heads: olmo2); v normed: gemma4
        q, k = rope(q), rope(k)                 (NORM or NEOX pairs; sections: qwen35; not every layer)
        h = wo · softmax(scale q·kᵀ) v + bo     (causal, windowed on sliding layers; * sigmoid(gate): qwen35)

    k and v go to the cache of this layer; a layer sharing an earlier one's (gemma4) reads them from there."""
    wqkv: Any                       # (H*Dq + Hkv*Dk + Hkv*Dv, n_embd) attn_q, attn_k, attn_v (or attn_qkv)
    wo: Any                         # (n_embd, H*Dv) attn_output: this shard's columns
    bqkv: np.ndarray | None = None  # (H*Dq + Hkv*Dk + Hkv*Dv,) their biases (qwen2)
    q_norm: np.ndarray | None = None  # (Dk,) attn_q_norm; this shard's (H*Dk,) when it norms all heads (olmo2)
    k_norm: np.ndarray | None = None  # (Dk,) attn_k_norm; this shard's (Hkv*Dk,) likewise
    bo: np.ndarray | None = None    # (n_embd,) attn_output.bias
    il: int = 0                     # the layer
    src: int = 0                    # the layer whose keys and values it reads (itself, or shared: gemma4)
    n_head: int = 0                 # H: q heads of this shard
    n_head_kv: int = 0              # Hkv: KV heads of this shard
    d_k: int = 0                    # Dk, Dv: head sizes of this layer
    d_v: int = 0
    rope: Rope | None = None        # None: q and k not rotated (smollm3's every 4th layer, exaone4's global)
    window: int = 0                 # sliding window in tokens (0: none)
    scale: float = 1.0              # q times this before q·k
    q_gate: bool = False            # attn_q holds each head's query then its output gate (qwen35)
    v_norm: bool = False            # v RMS-normed per head, without a weight (gemma4)
    full_norm: tuple | None = None  # olmo2: (q, k whole widths, this worker counts its KV heads' squares)
    eps: float = 1e-6
    scoring: Scoring = Scoring()    # the scores' soft-cap (gemma2) and the products over the cache
    shared: Shared | None = None

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self, ATTENTION)

    def __call__(self, x: np.ndarray, cache, pos: int) -> np.ndarray:
        """x (T, n_embd) -> (T, n_embd); writes this layer's keys and values into the cache."""
        q, gate, kv = self.project(x)                                    # (T, H, Dk), (T, H*Dk) or None, (T, ...)
        if self.src == self.il:                                          # this layer's own keys and values
            q = self.store(q, kv, cache, pos)
        if self.q_norm is not None and self.full_norm is None:
            q = rmsnorm(q, self.q_norm, self.eps)
        if self.rope is not None:
            q = self.rope(q, pos)
        t, hkv = x.shape[0], self.n_head_kv
        q = (q * np.float32(self.scale)).reshape(t, hkv, -1, self.d_k).transpose(1, 2, 0, 3)   # (Hkv, G, T, Dk)
        o = self.attend(q, cache.k[self.src][:, :pos + t], cache.v[self.src][:, :pos + t], pos, self.window)
        o = o.transpose(2, 0, 1, 3).reshape(t, self.n_head * self.d_v)  # (T, H*Dv)
        if gate is not None:
            o = o * sigmoid(gate)
        return add_bias(self.shared.comm.all_reduce(self.wo(o)), self.bo)   # (T, n_embd)

    def project(self, x: np.ndarray) -> tuple:
        """q (T, H, Dk), the output gate (T, H*Dk) (qwen35; else None) and the k, v rows (T, Hkv*(Dk+Dv))."""
        t, nq = x.shape[0], self.n_head * self.d_k
        qkv = add_bias(self.wqkv(x), self.bqkv)                          # (T, nq + nk + nv)
        if self.q_gate:                                                  # each head's query, then its gate
            qg = qkv[:, :2 * nq].reshape(t, self.n_head, 2, self.d_k)    # (T, H, 2, Dk)
            return qg[:, :, 0], qg[:, :, 1].reshape(t, nq), qkv[:, 2 * nq:]
        return qkv[:, :nq].reshape(t, self.n_head, self.d_k), None, qkv[:, nq:]

    def store(self, q: np.ndarray, kv: np.ndarray, cache, pos: int) -> np.ndarray:
        """k and v of kv (T, Hkv*(Dk+Dv)) normed, k rotated, into the cache at pos..; returns q, normed with
        k when the norm spans all heads (olmo2)."""
        t, hkv, nk = kv.shape[0], self.n_head_kv, self.n_head_kv * self.d_k
        k = kv[:, :nk].reshape(t, hkv, self.d_k)                         # (T, Hkv, Dk)
        v = kv[:, nk:].reshape(t, hkv, self.d_v)                         # (T, Hkv, Dv)
        if self.q_norm is not None and self.full_norm is not None:
            q, k = self.norm_heads(q, k)
        elif self.k_norm is not None:
            k = rmsnorm(k, self.k_norm, self.eps)
        if self.v_norm:                                                  # gemma4: v normed, no weight
            v = rmsnorm(v, np.float32(1.0), self.eps)
        cache.k[self.il][:, pos:pos + t] = (k if self.rope is None else self.rope(k, pos)).transpose(1, 0, 2)
        cache.v[self.il][:, pos:pos + t] = v.transpose(1, 0, 2)          # (Hkv, T, Dv)
        return q

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, pos: int, window: int) -> np.ndarray:
        """:func:`pyengine.model.ops.attention` with this model's soft-cap and products: q (Hkv, G, T, Dk)
        scaled, k (Hkv, pos+T, Dk), v (Hkv, pos+T, Dv) -> (Hkv, G, T, Dv)."""
        return attention(q, k, v, pos, window, self.scoring)

    def norm_heads(self, q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """olmo2's q and k norms, each over all heads at once: q (T, H, Dk), k (T, Hkv, Dk) of this shard,
        their sums of squares summed over the workers (a KV head held by several counted once)."""
        (nq, nk, first), t = self.full_norm, q.shape[0]
        parts = [(q.reshape(t, -1), self.q_norm, nq, True), (k.reshape(t, -1), self.k_norm, nk, first)]
        out = [rmsnorm_split(x, w, self.eps, n, self.shared.comm.all_reduce, own) for x, w, n, own in parts]
        return out[0].reshape(q.shape), out[1].reshape(k.shape)


@dataclass
class ShortConv:
    """lfm2's short-convolution block over this shard's C channels: ``out_proj(c * conv(b * x))``, the
    convolution seeing the l_cache - 1 inputs before each token (kept in the cache, zeros before 0)."""
    conv_in: Any                    # (3*C, n_embd) shortconv.in_proj: b, c, x of this shard's channels
    conv: np.ndarray                # (C, l_cache) shortconv.conv, the kernel
    conv_out: Any                   # (n_embd, C) shortconv.out_proj
    il: int = 0
    shared: Shared | None = None

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self, SHORTCONV)

    def __call__(self, x: np.ndarray, cache, pos: int) -> np.ndarray:
        t, n_ch, taps = x.shape[0], self.conv.shape[0], self.conv.shape[1]
        bcx = self.conv_in(x)                                            # (T, 3C): b, c, x
        cache.conv[self.il][pos:pos + t] = bcx[:, :n_ch] * bcx[:, 2 * n_ch:]   # b * x, (T, C)
        first = pos - (taps - 1)
        seen = cache.conv[self.il][max(first, 0):pos + t]                # (L - 1 + T, C) once past the start
        if first < 0:
            seen = np.concatenate([np.zeros((-first, n_ch), np.float32), seen])
        y = bcx[:, n_ch:2 * n_ch] * ssm_conv(seen, self.conv)            # (T, C)
        return self.shared.comm.all_reduce(self.conv_out(y))             # (T, n_embd)


@dataclass
class FFN:
    """The gated feed-forward over this shard's FFN units: ``w_down · act(w_gate · x) * (w_up · x)``, act
    SiLU (SwiGLU) or GELU (GEGLU). Every architecture here gates; phi3's fused ffn_up and gemma4's
    double-wide layers differ only in their tables' rows and sizes."""
    w_gate_up: Any                  # (2*F, n_embd): ffn_gate then ffn_up, F this shard's units of the layer
    w_down: Any                     # (n_embd, F) ffn_down: this shard's columns
    b_gate_up: np.ndarray | None = None  # (2*F,) ffn_gate/up.bias
    b_down: np.ndarray | None = None     # (n_embd,) ffn_down.bias
    act: Any = swiglu
    shared: Shared | None = None

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self, FFN_TENSORS)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x (R, n_embd), already normed -> (R, n_embd)."""
        gate_up = add_bias(self.w_gate_up(x), self.b_gate_up)            # (R, 2F)
        f = gate_up.shape[1] // 2
        h = self.w_down(self.act(gate_up[:, :f], gate_up[:, f:]))        # (R, n_embd)
        return add_bias(self.shared.comm.all_reduce(h), self.b_down)


@dataclass
class Block:
    """One block (``blk.N``): norm, mixer, residual, norm, FFN, residual, then gemma4's per-layer input and
    output scale. A norm weight of None is no norm (olmo2, exaone4 have no pre-norms; only gemma, olmo2 and
    exaone4 post-norm)."""
    mixer: Any                      # Attention, ShortConv or DeltaNet
    ffn: FFN
    attn_norm: np.ndarray | None = None       # (n_embd,)
    post_attn_norm: np.ndarray | None = None  # (n_embd,) post_attention_norm
    ffn_norm: np.ndarray | None = None        # (n_embd,)
    post_ffn_norm: np.ndarray | None = None   # (n_embd,) post_ffw_norm
    inp_gate: Any = None            # (n_embd_per_layer, n_embd) the per-layer embedding's gate (gemma4)
    proj: Any = None                # (n_embd, n_embd_per_layer)
    post_norm: np.ndarray | None = None       # (n_embd,) norm of what the per-layer embedding adds
    out_scale: np.ndarray | None = None       # (1,) layer_output_scale
    eps: float = 1e-6
    residual_scale: float = 0.0     # what the mixer and FFN add times this when > 0 (granite)

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self, BLOCK) + self.mixer.nbytes + self.ffn.nbytes

    def __call__(self, x: np.ndarray, cache, pos: int, rows: slice | None = None, e: np.ndarray | None = None):
        """The stream x (T, n_embd) at positions pos.. -> (R, n_embd): only ``rows`` of it when given (past the
        last mixer only the output rows matter). ``e`` (T, n_embd_per_layer): gemma4's per-layer input."""
        h = self.mixer(self.norm(x, self.attn_norm), cache, pos)         # attention, conv or delta rule
        if rows is not None:
            x, h, e = x[rows], h[rows], None if e is None else e[rows]
        x = x + self.residual(h, self.post_attn_norm)                    # the mixer's residual
        h = self.ffn(self.norm(x, self.ffn_norm))                        # the FFN
        x = x + self.residual(h, self.post_ffn_norm)
        if e is not None:                                                # gemma4's per-layer input
            x = x + rmsnorm(self.proj(gelu(self.inp_gate(x)) * e), self.post_norm, self.eps)
        if self.out_scale is not None:
            x *= self.out_scale
        return x

    def norm(self, x: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
        """The RMSNorm before the mixer and the FFN; the identity where there is none."""
        return x if weight is None else rmsnorm(x, weight, self.eps)

    def residual(self, h: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
        """What the mixer or the FFN adds to the stream: RMS-normed after (post-norms), scaled (granite)."""
        h = h if weight is None else rmsnorm(h, weight, self.eps)
        return h * np.float32(self.residual_scale) if self.residual_scale else h


# ----------------------------------------------------------------------------
# building the blocks from their tables' fields, the architecture resolved once

def build_attention(c, il: int, fields: dict, shard, shared: Shared, ropes: tuple[Rope, Rope]) -> Attention:
    """Layer ``il``'s attention over ``shard``'s heads, as config ``c``'s plan of the layer says."""
    (h0, h1), (g0, g1), plan = shard.heads, shard.kv_heads, c.layers[il]
    full = None
    if c.spec.qk_norm_full:                      # the first worker of its KV heads counts them
        full = (c.n_head * c.head_dim_k, c.n_head_kv * c.head_dim_k, h0 == g0 * (c.n_head // c.n_head_kv))
    return Attention(**fields, il=il, src=plan.kv_source, n_head=h1 - h0, n_head_kv=g1 - g0, d_k=plan.d_k,
                     d_v=plan.d_v, rope=ropes[plan.swa] if plan.rope else None, window=plan.window,
                     scale=c.attn_scale, q_gate=c.spec.q_gate, v_norm=c.spec.v_norm, full_norm=full, eps=c.rms_eps,
                     scoring=Scoring(c.attn_logit_softcap, shared.products), shared=shared)


def build_delta_net(c, il: int, fields: dict, shard, shared: Shared, ropes=None) -> DeltaNet:
    """Layer ``il``'s Gated DeltaNet over ``shard``'s value heads (each reading its key head, of those held)."""
    j0, j1 = shard.ssm
    held = key_heads(j0, j1, c.ssm_n_group)
    key_of = np.array([held.index(j % c.ssm_n_group) for j in range(j0, j1)])
    return DeltaNet(**fields, key_of=key_of, il=il, d_state=c.ssm_d_state, eps=c.rms_eps,
                    split=j1 - j0 < c.ssm_dt_rank, shared=shared)


def build_short_conv(c, il: int, fields: dict, shard, shared: Shared, ropes=None) -> ShortConv:
    """Layer ``il``'s short convolution over ``shard``'s channels (its tensors cut already)."""
    return ShortConv(**fields, il=il, shared=shared)


MIXERS = {"attention": build_attention, "shortconv": build_short_conv, "delta": build_delta_net}   # LayerPlan.kind


def build_block(c, il: int, parts: dict[str, dict], shard, shared: Shared, ropes: tuple[Rope, Rope]) -> Block:
    """Block ``il`` of config ``c`` from its tables' fields ``parts`` ({"mixer", "ffn", "block"} -> fields),
    for ``shard``; ``ropes``: the rope of the full-attention layers and that of the sliding ones."""
    mixer = MIXERS[c.layers[il].kind](c, il, parts["mixer"], shard, shared, ropes)
    ffn = FFN(**parts["ffn"], act=geglu if c.spec.ffn_gelu else swiglu, shared=shared)
    return Block(mixer, ffn, **parts["block"], eps=c.rms_eps, residual_scale=c.residual_scale)
