"""The transformer: one forward pass for the thirteen architectures of
:data:`pyengine.model.config.ARCHITECTURES`, filling a KV cache.

The pass is a spine (:meth:`Model._layers`); each block (:class:`~pyengine.model.blocks.Block`) holds its
mixer and FFN, built at load from the tensor tables (:mod:`pyengine.model.tensors`) with what the
architecture and the layer's plan (:class:`~pyengine.model.config.LayerPlan`) say, so nothing here
branches on the architecture. As llama.cpp's graphs (``src/models/<arch>.cpp``) compute it::

    x = token_embd[tokens]                      (* sqrt(n_embd): gemma; * embedding_scale: granite)
    e = per-layer inputs of the tokens          (gemma4 only: Model.per_layer_inputs)
    for each block:
        h = mixer(attn_norm(x))                 Attention: wo · softmax(rope(q) · rope(k)ᵀ) v, causal,
                                                  windowed on sliding layers; ShortConv (lfm2); DeltaNet (qwen35)
        x = x + post_attention_norm(h)          (post-norms: gemma, olmo2, exaone4; * residual_scale: granite)
        h = ffn(ffn_norm(x))                    w_down · act(w_gate · x) * (w_up · x), act SiLU or GELU
        x = x + post_ffw_norm(h)
        x = x + post_norm(proj(gelu(inp_gate · x) * e[il]));  x *= layer_output_scale    (gemma4)
    logits = output · output_norm(x)            (output = token_embd when tied; soft-capped, scaled)

The weights are ``(n_out, n_in)`` matrices in one of the forms of :mod:`pyengine.weights`, q/k/v stacked
into one ``wqkv`` and gate/up into one ``w_gate_up`` so each stage is one product;
:mod:`pyengine.model.load` builds them from the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyengine.errors import PyEngineError
from pyengine.model.blocks import Block, Shared, ShortConv, build_block
from pyengine.model.config import ModelConfig
from pyengine.model.delta_net import key_heads
from pyengine.model.kv_cache import HybridCache, KVCache
from pyengine.model.ops import Rope, imrope_text_pairs, rmsnorm, softcap
from pyengine.model.shard import Placement, whole_model
from pyengine.weights import kernel

# tokens per forward step of a long prompt (llama.cpp's n_ubatch, 512 there: 128 keeps a step's arrays, and so a
# worker's wasm heap, ~90 MiB smaller on a 0.5B model at the same prefill speed)
UBATCH = 128
LOGITS_MODES = ("last", "all", "none")


@dataclass
class PerLayerEmbd:
    """Gemma 4's per-layer embeddings (``llama_model_gemma4::graph::build_inp_per_layer``,
    ``project_per_layer_inputs``): each token's row of ``per_layer_token_embd`` (read from the file when
    asked: it is most of the model's bytes) and a projection of its embedding, one vector of
    ``n_embd_per_layer`` for each layer."""
    token_embd: Any                 # (n_vocab, n_layer * n_embd_per_layer): rows(ids) only
    model_proj: Any                 # (n_layer * n_embd_per_layer, n_embd) per_layer_model_proj
    proj_norm: np.ndarray           # (n_embd_per_layer,) per_layer_proj_norm


@dataclass
class ModelTensors:
    """One shard's tensors as the loader read them, by the fields of :mod:`pyengine.model.tensors`' tables."""
    model: dict                     # MODEL: token_embd, output_norm, output (None: tied), rope_freqs
    per_layer: dict                 # PER_LAYER_EMBD (gemma4; empty for the others)
    layers: list[dict] = field(default_factory=list)   # per block: {"mixer", "ffn", "block"} -> fields


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

    def __init__(self, config: ModelConfig, tensors: ModelTensors, placement: Placement | None = None,
                 weights: str = "f32"):
        c, m, placement = config, tensors.model, placement or Placement()
        self.config = config
        self.weights = weights          # the weight policy, a key of weights.budget.WEIGHT_FORMS
        self.forms = placement.forms or {}   # the form of each matrix, by shard_matrices' key
        self.token_embd = m["token_embd"]   # (vocab rows of this shard, n_embd)
        self.output_norm = m["output_norm"]  # (n_embd,)
        self.output = self.token_embd if m["output"] is None else m["output"]   # (vocab rows, n_embd); tied: the same
        self.shard = placement.shard or whole_model(config)
        self.comm = placement.comm or Solo()
        self.per_layer = PerLayerEmbd(**tensors.per_layer) if tensors.per_layer else None   # gemma4's
        self.reads_file = self.per_layer is not None   # the model reads rows from the file as it runs
        self.embd_scales = [np.float32(s) for s, on in ((math.sqrt(c.n_embd), c.spec.embd_scale),
                                                        (c.embedding_scale, c.embedding_scale)) if on]
        pairs = imrope_text_pairs(c.rope_sections, c.rope_dim // 2) if c.spec.imrope else None
        freqs = m["rope_freqs"]
        self.rope = Rope(c.rope_dim, c.rope_freq_base, c.rope_freq_scale, c.spec.rope_neox, freqs, pairs)
        self.rope_swa = Rope(c.rope_dim_swa, c.rope_freq_base_swa, 1.0, c.spec.rope_neox,
                             None if c.spec.rope_freqs_full else freqs)
        shared = Shared(self.comm, kernel.get() if weights == "blocks" else None)
        self.layers: list[Block] = [build_block(c, il, parts, self.shard, shared, (self.rope, self.rope_swa))
                                    for il, parts in enumerate(tensors.layers)]

    @property
    def weights_nbytes(self) -> int:
        """Bytes held by the weights (a tied output counted once)."""
        held = [self.token_embd, self.output_norm] + ([] if self.output is self.token_embd else [self.output])
        if self.per_layer is not None:
            held += [self.per_layer.model_proj, self.per_layer.proj_norm]
        return sum(a.nbytes for a in held) + sum(layer.nbytes for layer in self.layers)

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
            return HybridCache(c.recurrent, g1 - g0, c.head_dim_k, c.head_dim_v, n_ctx, (window, (j1 - j0, d, d)))
        conv = tuple(b.mixer.conv.shape[0] if isinstance(b.mixer, ShortConv) else 0 for b in self.layers)
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
        tokens = self.check_tokens(tokens, cache, logits)
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
        t, pos, last = len(tokens), cache.n, len(self.layers) - 1
        cache.reserve(pos + t)
        rows = {"last": slice(t - 1, t), "all": slice(0, t), "none": slice(0, 0)}[logits]
        x = self.embed(tokens)                                           # (T, n_embd)
        for scale in self.embd_scales:                                   # sqrt(n_embd) (gemma), granite's
            x *= scale
        per_layer = None if self.per_layer is None else self.per_layer_inputs(tokens, x)   # (L, T, n_pl)
        if recorder is not None:
            recorder.embedded(x)
        for il, block in enumerate(self.layers):                         # each block: mixer, then FFN
            e = None if per_layer is None else per_layer[il]
            x = block(x, cache, pos, rows if il == last else None, e)    # (T, n_embd); after the last (R, n_embd)
            if recorder is not None:
                recorder.layer(il, x, cache)
        cache.advance(pos + t, prefill)
        if logits == "none":
            return np.empty((0, self.config.n_vocab), np.float32)
        out = self.head(x)                                               # (R, n_vocab)
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

    def check_tokens(self, tokens, cache: KVCache, logits: str) -> np.ndarray:
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

