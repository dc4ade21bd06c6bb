"""The transformer: one forward pass for llama, qwen2, qwen3 and gemma3, filling a KV cache.

The forward pass follows llama.cpp's graphs (``src/models/llama.cpp``,
``qwen2.cpp``, ``qwen3.cpp``, ``gemma3.cpp``); what differs between them is
data in :data:`pyengine.model.config.ARCHITECTURES`, not code::

    x = token_embd[tokens]                      (* sqrt(n_embd) for gemma3)
    for each layer:
        h = attn_norm(x)
        q, k, v = split(wqkv · h)               (+ biases: qwen2)
        q, k = q_norm(q), k_norm(k)             (qwen3, gemma3: RMSNorm per head)
        q, k = rope(q), rope(k)                 (NORM pairs for llama, NEOX halves otherwise)
        h = wo · attention(q, K, V)             (causal; sliding window on gemma3's local layers)
          or, in a short-convolution block (lfm2, src/models/lfm2.cpp):
        b, c, x' = split(in_proj · h); h = out_proj · (c * conv(b * x'))   (conv over the last l_cache inputs)
        x = x + post_attention_norm(h)          (post-norm: gemma3 only)
        h = w_down · act(w_gate · ffn_norm(x)) * (w_up · ffn_norm(x))   (SiLU, or GELU for gemma3)
        x = x + post_ffw_norm(h)
    logits = output · output_norm(x)            (output = token_embd when tied)

qwen35 (``src/models/qwen35.cpp``) is a hybrid: most layers are Gated DeltaNet layers
(:mod:`pyengine.model.delta_net`) in place of the attention, each keeping a recurrent state in a
:class:`~pyengine.model.kv_cache.HybridCache`; every 4th is attention whose q rows carry a
per-head output gate, ``h = wo · (attention(q, K, V) * sigmoid(gate))``, with rope on sections of
the pairs (:func:`~pyengine.model.ops.imrope_text_pairs`).

gemma4 (``src/models/gemma4.cpp``) adds to gemma3's block: heads of another size in the full-attention
layers (rope on part of them, through ``rope_freqs``), v RMS-normed, q·k unscaled, double-wide FFNs in
the last layers, which read the keys and values of the last earlier layer of their kind
(``ModelConfig.kv_layers``), and a per-layer embedding added after each block,
``x += post_norm(proj(gelu(inp_gate · x) * per_layer[il]))`` (:meth:`Model.per_layer_inputs`), before
the block's output scale.

The weights are ``(n_out, n_in)`` matrices in one of the forms of
:mod:`pyengine.weights`, with q/k/v stacked into one ``wqkv`` and gate/up into
one ``w_gate_up`` so each stage is one product; :mod:`pyengine.model.load`
builds them from the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyengine.errors import PyEngineError
from pyengine.model.config import ModelConfig
from pyengine.model.delta_net import DeltaNet, delta_net, key_heads, sigmoid
from pyengine.model.kv_cache import HybridCache, KVCache
from pyengine.model.ops import (
    Rope,
    attention,
    geglu,
    gelu,
    imrope_text_pairs,
    rmsnorm,
    rmsnorm_split,
    softcap,
    ssm_conv,
    swiglu,
)
from pyengine.model.shard import whole
from pyengine.weights import kernel
from pyengine.weights.forms import add_bias

# tokens per forward step of a long prompt (llama.cpp's n_ubatch, 512 there: 128 keeps a step's arrays, and so a
# worker's wasm heap, ~90 MiB smaller on a 0.5B model at the same prefill speed)
UBATCH = 128
LOGITS_MODES = ("last", "all", "none")


@dataclass
class Layer:
    """One transformer block's weights (names as in the GGUF, ``blk.N.*``); matrices are weight forms."""
    attn_norm: np.ndarray           # (n_embd,)
    wqkv: Any                       # (n_head*Dk + n_head_kv*Dk + n_head_kv*Dv, n_embd): attn_q, attn_k, attn_v
                                    # (qwen35: 2*n_head*Dk rows of q, each head's query then its gate)
    bqkv: np.ndarray | None         # (n_head*Dk + n_head_kv*Dk + n_head_kv*Dv,) attn_q/k/v.bias (qwen2)
    q_norm: np.ndarray | None       # (Dk,) attn_q_norm; this shard's (H*Dk,) when it norms all heads (olmo2)
    k_norm: np.ndarray | None       # (Dk,) attn_k_norm; this shard's (Hkv*Dk,) when it norms all heads
    wo: Any                         # (n_embd, n_head*Dv) attn_output
    bo: np.ndarray | None           # (n_embd,) attn_output.bias
    post_attn_norm: np.ndarray | None  # (n_embd,) post_attention_norm
    ffn_norm: np.ndarray            # (n_embd,)
    w_gate_up: Any                  # (2*n_ff, n_embd): ffn_gate then ffn_up
    b_gate_up: np.ndarray | None    # (2*n_ff,) ffn_gate/up.bias
    w_down: Any                     # (n_embd, n_ff) ffn_down
    b_down: np.ndarray | None       # (n_embd,) ffn_down.bias
    post_ffn_norm: np.ndarray | None  # (n_embd,) post_ffw_norm
    swa: bool                       # sliding-window layer (local rope base, windowed mask)
    rope: bool = True               # q and k are rotated (not on smollm3's every 4th layer)
    conv_in: Any = None             # (3*C, n_embd) shortconv.in_proj: b, c, x of this shard's C channels (lfm2)
    conv: np.ndarray | None = None  # (C, l_cache) shortconv.conv, the kernel; None: an attention block
    conv_out: Any = None            # (n_embd, C) shortconv.out_proj
    delta: DeltaNet | None = None   # a Gated DeltaNet layer's tensors, in place of the attention (qwen35)
    inp_gate: Any = None            # (n_embd_per_layer, n_embd) inp_gate: the per-layer embedding's gate (gemma4)
    proj: Any = None                # (n_embd, n_embd_per_layer) proj
    post_norm: np.ndarray | None = None  # (n_embd,) post_norm of what the per-layer embedding adds
    out_scale: np.ndarray | None = None  # (1,) layer_output_scale: the block's output times this (gemma4)


@dataclass
class PerLayerEmbd:
    """Gemma 4's per-layer embeddings (``llama_model_gemma4::graph::build_inp_per_layer``,
    ``project_per_layer_inputs``): each token's row of ``per_layer_token_embd`` (read from the file when
    asked: it is most of the model's bytes) and a projection of its embedding, one vector of
    ``n_embd_per_layer`` for each layer."""
    token_embd: Any                 # (n_vocab, n_layer * n_embd_per_layer): rows(ids) only
    model_proj: Any                 # (n_layer * n_embd_per_layer, n_embd) per_layer_model_proj
    proj_norm: np.ndarray           # (n_embd_per_layer,) per_layer_proj_norm


class Solo:
    """The communicator of a model held whole by one worker: nothing to sum or gather."""
    count = 1

    def all_reduce(self, a: np.ndarray) -> np.ndarray:
        return a

    def gather(self, a: np.ndarray) -> np.ndarray:
        return a


class Model:
    """A loaded model, or one worker's shard of it: ``forward`` turns token ids into logits, using and
    filling a :class:`KVCache`.

    ``shard`` (``pyengine.parallel.split.Shard``) names the q heads, KV heads, FFN units and vocabulary
    rows this worker holds; ``comm`` sums the workers' partial results (``all_reduce``) and gathers the
    logits (``gather``: None on a helper). A whole model has ``Solo()``.
    """

    def __init__(self, config: ModelConfig, token_embd: Any, layers: list[Layer], output_norm: np.ndarray,
                 output: Any, rope_freqs: np.ndarray | None = None, shard: Any = None, comm: Any = None,
                 per_layer: PerLayerEmbd | None = None):
        self.config = config
        self.weights = "f32"            # the weight policy, a key of weights.budget.WEIGHT_FORMS (set by the loader)
        self.token_embd = token_embd    # (vocab rows of this shard, n_embd)
        self.layers = layers
        self.output_norm = output_norm  # (n_embd,)
        self.output = output            # (vocab rows, n_embd); the same object as token_embd when tied
        self.shard = shard or whole(config)
        self.comm = comm or Solo()
        self.per_layer = per_layer      # gemma4's per-layer embeddings, None for the others
        self.reads_file = per_layer is not None   # the model reads rows from the file as it runs
        c = config
        pairs = imrope_text_pairs(c.rope_sections, c.rope_dim // 2) if c.spec.imrope else None
        self.rope = Rope(c.rope_dim, c.rope_freq_base, c.rope_freq_scale, c.spec.rope_neox, rope_freqs, pairs)
        self.rope_swa = Rope(c.rope_dim_swa, c.rope_freq_base_swa, 1.0, c.spec.rope_neox,
                             None if c.spec.rope_freqs_full else rope_freqs)

    @property
    def weights_nbytes(self) -> int:
        """Bytes held by the weights (a tied output counted once)."""
        held = [self.token_embd, self.output_norm] + ([] if self.output is self.token_embd else [self.output])
        if self.per_layer is not None:
            held += [self.per_layer.model_proj, self.per_layer.proj_norm]
        for layer in self.layers:
            held += [a for a in vars(layer).values() if hasattr(a, "nbytes")]
        return sum(a.nbytes for a in held)

    def new_cache(self, n_ctx: int | None = None) -> KVCache:
        """An empty KV cache for ``n_ctx`` positions (default: the training context), for this shard's KV heads."""
        c = self.config
        n_ctx = c.n_ctx_train if n_ctx is None else n_ctx
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx <= 0:
            raise PyEngineError(f"context size must be a positive number of tokens, got {n_ctx!r}")
        g0, g1 = self.shard.kv_heads
        if any(c.recurrent):                                             # this shard's value heads' state
            (j0, j1), d = self.shard.ssm, c.ssm_d_state
            window = (c.ssm_d_conv - 1, 2 * len(key_heads(j0, j1, c.ssm_n_group)) * d + (j1 - j0) * d)
            return HybridCache(c.recurrent, g1 - g0, c.head_dim_k, c.head_dim_v, n_ctx, window, (j1 - j0, d, d))
        conv = tuple(0 if layer.conv is None else layer.conv.shape[0] for layer in self.layers)
        heads = tuple(g1 - g0 if c.kv_layers[il] == il else 0 for il in range(c.n_layer))
        dims = [c.head_dims(il) for il in range(c.n_layer)]
        return KVCache(c.n_layer, heads, [k for k, _ in dims], [v for _, v in dims], n_ctx, conv)

    # ------------------------------------------------------------------------
    # the forward pass: the hot loop

    def forward(self, tokens: list[int], cache: KVCache, logits: str = "last", recorder: Any = None) -> np.ndarray:
        """Run ``tokens`` at the cache's next positions; return their logits.

        logits="last": (n_vocab,) float32 for the last token; "all": (T,
        n_vocab); "none": (0, n_vocab) (prefill only). The cache advances by
        ``len(tokens)``. A prompt longer than ``UBATCH`` runs in steps of
        ``UBATCH`` tokens. Raises PyEngineError when the tokens would pass the
        cache's ``n_ctx`` or an id is outside the vocabulary. A helper's shard
        returns None (the main worker gathers the logits). ``recorder``
        (:class:`pyengine.model.trace.Recorder`, None when off: one check per
        layer) sees the stream after the embedding, after each layer and at the end.
        """
        tokens = self._check_tokens(tokens, cache, logits)
        outs = []
        for i in range(0, len(tokens), UBATCH):
            step = tokens[i:i + UBATCH]
            last = i + UBATCH >= len(tokens)
            mode = logits if logits == "all" or last else "none"
            prefill = i == 0 and logits == "last" and len(tokens) > 1   # a hybrid cache keeps a checkpoint
            outs.append(self._forward(step, cache, mode, prefill, recorder))
        if outs[-1] is None:
            return None
        if logits == "last":
            return outs[-1][0]
        return outs[0] if len(outs) == 1 else np.concatenate(outs)

    def _forward(self, tokens: np.ndarray, cache: KVCache, logits: str, prefill: bool = False,
                 recorder: Any = None) -> np.ndarray | None:
        try:
            return self._layers(tokens, cache, logits, prefill, recorder)
        finally:
            if isinstance(cache, HybridCache):
                cache.drop_staged()                      # a pass that did not finish leaves no state

    def _layers(self, tokens: np.ndarray, cache: KVCache, logits: str, prefill: bool,
                recorder: Any = None) -> np.ndarray | None:
        c = self.config
        t, pos = len(tokens), cache.n
        cache.reserve(pos + t)
        rows = {"last": slice(t - 1, t), "all": slice(0, t), "none": slice(0, 0)}[logits]
        x = self.embed(tokens)                                           # (T, n_embd)
        if c.spec.embd_scale:
            x *= np.float32(math.sqrt(c.n_embd))
        if c.embedding_scale:                                            # granite
            x *= np.float32(c.embedding_scale)
        per_layer = None if self.per_layer is None else self.per_layer_inputs(tokens, x)   # (L, T, n_pl)
        if recorder is not None:
            recorder.embedded(x)
        for il, layer in enumerate(self.layers):
            mix = self.shortconv if layer.conv is not None else self.recurrent if layer.delta is not None \
                else self.attention
            h = mix(layer, self.pre_norm(x, layer.attn_norm), cache, il, pos)   # (T, n_embd)
            if il == c.n_layer - 1:                      # past the last attention only the output rows matter
                x, h = x[rows], h[rows]
                per_layer = None if per_layer is None else per_layer[:, rows]
            x = x + self.post_norm(h, layer.post_attn_norm)
            h = self.ffn(layer, self.pre_norm(x, layer.ffn_norm))        # (R, n_embd)
            x = x + self.post_norm(h, layer.post_ffn_norm)
            if per_layer is not None:
                x = x + rmsnorm(layer.proj(gelu(layer.inp_gate(x)) * per_layer[il]), layer.post_norm, c.rms_eps)
            if layer.out_scale is not None:
                x *= layer.out_scale
            if recorder is not None:
                recorder.layer(il, x, cache)
        cache.advance(pos + t, prefill)
        if logits == "none":
            return np.empty((0, c.n_vocab), np.float32)
        out = self.head(x)
        if recorder is not None:
            recorder.finished()
        return out

    def head(self, x: np.ndarray) -> np.ndarray | None:
        """The logits (R, n_vocab) of the stream x (R, n_embd): output · output_norm(x), gathered over the
        workers (None on a helper), soft-capped (gemma2, gemma4) and scaled (granite) as the model does."""
        c = self.config
        out = self.comm.gather(self.output(rmsnorm(x, self.output_norm, c.rms_eps)))   # (R, n_vocab)
        if out is not None and c.final_logit_softcap:
            out = softcap(out, c.final_logit_softcap)
        if out is not None and c.logit_scale:                            # granite
            out *= np.float32(1.0 / c.logit_scale)
        return out

    def per_layer_inputs(self, tokens: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Gemma 4's per-layer inputs (n_layer, T, n_embd_per_layer) of tokens (T,) whose scaled embeddings
        are x (T, n_embd): ``(rmsnorm(model_proj · x / sqrt(n_embd)) + token_embd[tokens] * sqrt(n_pl)) / sqrt(2)``
        (llama.cpp ``project_per_layer_inputs``; every worker computes them whole)."""
        c, pl = self.config, self.per_layer
        n, big = c.n_embd_per_layer, len(tokens)
        proj = pl.model_proj(x) * np.float32(1.0 / math.sqrt(c.n_embd))    # (T, L * n_pl)
        proj = rmsnorm(proj.reshape(big, c.n_layer, n), pl.proj_norm, c.rms_eps)   # (T, L, n_pl)
        rows = pl.token_embd.rows(tokens).reshape(big, c.n_layer, n) * np.float32(math.sqrt(n))
        out = (proj + rows) * np.float32(1.0 / math.sqrt(2.0))
        return np.ascontiguousarray(out.transpose(1, 0, 2))               # (L, T, n_pl)

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        """The token embeddings (T, n_embd): this shard's vocabulary rows, the others' summed in."""
        v0, v1 = self.shard.vocab
        if self.comm.count == 1:
            return self.token_embd.rows(tokens)
        x = np.zeros((len(tokens), self.config.n_embd), np.float32)       # (T, n_embd)
        mine = (tokens >= v0) & (tokens < v1)
        if mine.any():
            x[mine] = self.token_embd.rows(tokens[mine] - v0)
        return self.comm.all_reduce(x)

    def products(self):
        """The C kernel for attention's and the delta rule's float32 products when the weights are in its
        blocks form, else None (numpy's)."""
        return kernel.get() if self.weights == "blocks" else None

    def attention(self, layer: Layer, x: np.ndarray, cache: KVCache, il: int, pos: int) -> np.ndarray:
        """Self-attention of x (T, n_embd), already normed, at positions pos.. over this shard's heads, summed
        over the workers -> (T, n_embd); fills the cache."""
        c = self.config
        (h0, h1), (g0, g1), (dk, dv) = self.shard.heads, self.shard.kv_heads, c.head_dims(il)
        t, hq, hkv, src = x.shape[0], h1 - h0, g1 - g0, c.kv_layers[il]
        nq, nk, gate = hq * dk, hkv * dk, None
        qkv = add_bias(layer.wqkv(x), layer.bqkv)                        # (T, nq + nk + nv)
        if c.spec.q_gate:                                                # qwen35: each head's query, then its gate
            qg = qkv[:, :2 * nq].reshape(t, hq, 2, dk)                   # (T, H, 2, Dk)
            q, gate, qkv = qg[:, :, 0], qg[:, :, 1].reshape(t, nq), qkv[:, nq:]
        else:
            q = qkv[:, :nq].reshape(t, hq, dk)                           # (T, H, Dk)
        rope = (self.rope_swa if layer.swa else self.rope) if layer.rope else None
        if src == il:                                                    # this layer's own keys and values
            k = qkv[:, nq:nq + nk].reshape(t, hkv, dk)                   # (T, Hkv, Dk)
            v = qkv[:, nq + nk:].reshape(t, hkv, dv)                     # (T, Hkv, Dv)
            if layer.q_norm is not None and c.spec.qk_norm_full:
                q, k = self.norm_heads(q, k, layer)
            elif layer.k_norm is not None:
                k = rmsnorm(k, layer.k_norm, c.rms_eps)
            if c.spec.v_norm:                                            # gemma4: v normed, no weight
                v = rmsnorm(v, np.float32(1.0), c.rms_eps)
            cache.k[il][:, pos:pos + t] = (k if rope is None else rope(k, pos)).transpose(1, 0, 2)  # (Hkv, T, Dk)
            cache.v[il][:, pos:pos + t] = v.transpose(1, 0, 2)           # (Hkv, T, Dv)
        if layer.q_norm is not None and not c.spec.qk_norm_full:
            q = rmsnorm(q, layer.q_norm, c.rms_eps)
        if rope is not None:
            q = rope(q, pos)
        q = (q * np.float32(c.attn_scale)).reshape(t, hkv, -1, dk).transpose(1, 2, 0, 3)  # (Hkv, G, T, Dk)
        o = self.attend(q, cache.k[src][:, :pos + t], cache.v[src][:, :pos + t], pos,
                        c.sliding_window if layer.swa else 0)                          # (Hkv, G, T, Dv)
        o = o.transpose(2, 0, 1, 3).reshape(t, hq * dv)                  # (T, H*Dv)
        if gate is not None:
            o = o * sigmoid(gate)
        h = self.comm.all_reduce(layer.wo(o))                            # (T, n_embd)
        return add_bias(h, layer.bo)

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, pos: int, window: int) -> np.ndarray:
        """:func:`pyengine.model.ops.attention` with this model's soft-cap and products: q (Hkv, G, T, Dk)
        scaled, k (Hkv, pos+T, Dk), v (Hkv, pos+T, Dv) -> (Hkv, G, T, Dv)."""
        return attention(q, k, v, pos, window, self.config.attn_logit_softcap, self.products())

    def shortconv(self, layer: Layer, x: np.ndarray, cache: KVCache, il: int, pos: int) -> np.ndarray:
        """lfm2's short-convolution block on x (T, n_embd), already normed, at positions pos.. over this
        shard's C channels, summed over the workers -> (T, n_embd): ``out_proj(c * conv(b * x))``, the
        convolution seeing the l_cache - 1 inputs before each token (kept in the cache, zeros before 0)."""
        t, n_ch, taps = x.shape[0], layer.conv.shape[0], layer.conv.shape[1]
        bcx = layer.conv_in(x)                                           # (T, 3C): b, c, x
        cache.conv[il][pos:pos + t] = bcx[:, :n_ch] * bcx[:, 2 * n_ch:]  # b * x, (T, C)
        first = pos - (taps - 1)
        seen = cache.conv[il][max(first, 0):pos + t]                     # (L - 1 + T, C) once past the start
        if first < 0:
            seen = np.concatenate([np.zeros((-first, n_ch), np.float32), seen])
        y = bcx[:, n_ch:2 * n_ch] * ssm_conv(seen, layer.conv)           # (T, C)
        return self.comm.all_reduce(layer.conv_out(y))                   # (T, n_embd)

    def recurrent(self, layer: Layer, x: np.ndarray, cache: HybridCache, il: int, pos: int) -> np.ndarray:
        """A Gated DeltaNet layer on x (T, n_embd), already normed, over this shard's value heads, summed over
        the workers (unless every worker holds them all) -> (T, n_embd); stages its new state in the cache."""
        h, window, s = delta_net(layer.delta, x, *cache.state(il), self.config, self.products())
        cache.stage(il, window, s)
        j0, j1 = self.shard.ssm
        return self.comm.all_reduce(h) if j1 - j0 < self.config.ssm_dt_rank else h

    def ffn(self, layer: Layer, x: np.ndarray) -> np.ndarray:
        """Gated feed-forward of x (R, n_embd), already normed, over this shard's FFN units, summed over the
        workers -> (R, n_embd)."""
        gate_up = add_bias(layer.w_gate_up(x), layer.b_gate_up)          # (R, 2 * n_ff of the shard)
        act, f = geglu if self.config.spec.ffn_gelu else swiglu, gate_up.shape[1] // 2
        h = layer.w_down(act(gate_up[:, :f], gate_up[:, f:]))            # (R, n_embd)
        return add_bias(self.comm.all_reduce(h), layer.b_down)

    def norm_heads(self, q: np.ndarray, k: np.ndarray, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
        """olmo2's q and k norms, each over all heads at once: q (T, H, Dk), k (T, Hkv, Dk) of this shard,
        their sums of squares summed over the workers (a KV head held by several counted once)."""
        c, (h0, _), (g0, _) = self.config, self.shard.heads, self.shard.kv_heads
        t, first = q.shape[0], h0 == g0 * (c.n_head // c.n_head_kv)     # the first worker of its KV heads
        parts = [(q.reshape(t, -1), layer.q_norm, c.n_head, True), (k.reshape(t, -1), layer.k_norm, c.n_head_kv, first)]
        out = [rmsnorm_split(x, w, c.rms_eps, n * c.head_dim_k, self.comm.all_reduce, own)
               for x, w, n, own in parts]
        return out[0].reshape(q.shape), out[1].reshape(k.shape)

    def pre_norm(self, x: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
        """The RMSNorm before attention and FFN; the identity where there is none (olmo2, exaone4)."""
        return x if weight is None else rmsnorm(x, weight, self.config.rms_eps)

    def post_norm(self, h: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
        """What a block adds to the stream: RMS-normed after (gemma, olmo2, exaone4), scaled (granite)."""
        h = h if weight is None else rmsnorm(h, weight, self.config.rms_eps)
        return h * np.float32(self.config.residual_scale) if self.config.residual_scale else h

    def _check_tokens(self, tokens, cache: KVCache, logits: str) -> np.ndarray:
        if logits not in LOGITS_MODES:
            raise PyEngineError(f"logits must be one of {', '.join(LOGITS_MODES)}, got {logits!r}")
        try:
            ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        except (TypeError, ValueError, OverflowError):
            raise PyEngineError(f"tokens must be a list of integer ids, got {str(tokens)[:80]}") from None
        if len(ids) == 0:
            raise PyEngineError("forward needs at least one token")
        if ids.min() < 0 or ids.max() >= self.config.n_vocab:
            bad = int(ids[(ids < 0) | (ids >= self.config.n_vocab)][0])
            raise PyEngineError(f"token id {bad} is outside the vocabulary (0..{self.config.n_vocab - 1})")
        if cache.n + len(ids) > cache.n_ctx:
            raise PyEngineError(f"context full: {cache.n} tokens in the cache + {len(ids)} new "
                                f"> n_ctx = {cache.n_ctx}")
        return ids

