"""The transformer: weights from a GGUF, a KV cache, and one forward pass for llama, qwen2, qwen3 and gemma3.

The forward pass follows llama.cpp's graphs (``src/models/llama.cpp``,
``qwen2.cpp``, ``qwen3.cpp``, ``gemma3.cpp``); what differs between them is
data in :data:`pyengine.config.ARCHITECTURES`, not code::

    x = token_embd[tokens]                      (* sqrt(n_embd) for gemma3)
    for each layer:
        h = attn_norm(x)
        q, k, v = split(wqkv · h)               (+ biases: qwen2)
        q, k = q_norm(q), k_norm(k)             (qwen3, gemma3: RMSNorm per head)
        q, k = rope(q), rope(k)                 (NORM pairs for llama, NEOX halves otherwise)
        h = wo · attention(q, K, V)             (causal; sliding window on gemma3's local layers)
        x = x + post_attention_norm(h)          (post-norm: gemma3 only)
        h = w_down · act(w_gate · ffn_norm(x)) * (w_up · ffn_norm(x))   (SiLU, or GELU for gemma3)
        x = x + post_ffw_norm(h)
    logits = output · output_norm(x)            (output = token_embd when tied)

Weights and memory
------------------
Every weight is dequantized once, at load, into the layout the hot loop
wants: ``(n_out, n_in)`` rows, with q/k/v stacked into one ``wqkv`` and
gate/up into one ``w_gate_up`` so each stage is one einsum. A tied output
shares the token embedding's array. Norm weights are used as stored (the
gemma3 GGUF conversion already added 1). The file is read a chunk of rows at
a time (``LOAD_CHUNK_BYTES``), never a whole tensor at once.

Four weight forms (``WEIGHT_FORMS``, ``Model.from_gguf(weights=...)``):

- ``"f32"``: every matrix float32, 4 bytes a weight: 4-5x the file. The
  fastest, in CPython (where a prompt's matmuls go to BLAS) and in the browser.
- ``"packed"``: every matrix as int8 codes with a float32 scale per block of
  64 weights of a row (Q8_0 weights: their own codes and scales, blocks of
  32), three rows of codes in one int64 (``kernels.pack_rows``: 2.7 bytes a
  weight). One exact int64 einsum multiplies three rows by the activations
  rounded to integer codes per block (``kernels.matmul_packed``), as
  llama.cpp's own quantized matmuls round them. In Pyodide an einsum costs
  the same per element whatever its dtype, so this is a third of float32's
  elements; the blocks' bookkeeping (rounding x, unpacking the lanes, the
  scales) takes most of that back: about float32's speed in two thirds of
  its memory.
- ``"mixed"``: "packed" layers; the output matrix packed for as many rows as
  keep every weight within ``MIXED_FILE_RATIO`` (2.6) times the file's tensor
  bytes, int8 with a scale per row and per column (``column_scale``) past
  them (a ``kernels.RowSplit``); an untied token_embd, only looked up by
  rows, int8 by rows.
- ``"int8"``: the low-memory mode: every matrix int8, about a quarter of
  float32, converted per use inside the einsum: the layers with a float32
  scale per block of 64 weights of a row, the vocabulary matrices by rows
  and columns.

``"auto"`` (the default) picks "f32" while the float32 weights fit
``F32_BUDGET`` (2 GiB in CPython; 256 MiB in Pyodide: the tiny test models),
else "mixed" while that fits ``WEIGHTS_BUDGET`` (2.5 GiB, leaving room for
the KV cache and activations under the 4 GiB wasm32 heap), else "int8".
Quantized forms are made ``LOAD_CHUNK_BYTES`` at a time through one reused
float32 buffer, so a load never builds a float32 matrix; and the load first
reserves the heap it will hold (``reserve_heap``), which the wasm heap would
otherwise overshoot by up to 96 MiB. Against llama.cpp, the last-position
logits of the golden prompts (std 3-5) differ by RMS 0.15 / 0.13 (gemma3 /
SmolLM2) with "f32", 0.28 / 0.25 with "mixed", 0.28 / 0.45 with "packed",
0.17 / 0.26 with "int8": llama.cpp moves from itself by 0.14-0.45 when its
KV cache goes from F16 to F32 (tests/test_model_real.py).

Measured with ``bench/bench_model.py`` (128-token prompt, 64 greedy steps)
on 2 shared cores, 2026-11-30 (Pyodide 0.27.7 under Node; decode in tok/s;
peak memory in MB of 10^6 bytes, the wasm heap or CPython's RSS, "x" the
GGUF's size; bench/RESULTS.md has the browser's, wllama's and llama.cpp's)::

    model             runtime   weights  wts MB  load s  prefill  decode  peak MB (x file)
    gemma-3-270m      Pyodide   f32      1072    1.7     25.6      9.2    1166 (4.6x)
    Q4_K_M, 253 MB              packed    743    2.2     28.5      9.2     837 (3.3x)
                                mixed     641    2.4     28.2      7.7     735 (2.90x)
                                int8      276    3.4      8.7      3.8     370 (1.46x)
                      CPython   f32      1072    0.6-1.8 256-262  18-19   1165 (4.6x)
                                packed    732    1.8     39       17.3     900

In Chromium (``bench/bench_workers.py``, a 119-token chat prompt) one worker
decodes at 11.2 tok/s with "f32", 9.6 with "packed", 8.1 with "mixed".

In Pyodide the vocabulary matrix dominates a decode step (gemma3, "mixed",
``bench/profile_step.py``): its packed rows cost ~0.17 ns a weight, its int8
rows ~0.55 (the int8 -> float32 conversion inside the einsum costs more than
a float32 einsum itself), the layers' packed matmuls ~37 ms a token, and
attention, RMSNorm, GELU, rope and the Python between them ~12 ms: 254 kernel
calls a token. Nothing of the vocabulary's size is allocated but the logits
and the lane sums of ``kernels.PACK_TMP`` rows at a time; the KV cache is
written in place and read as views (copied only when its capacity doubles).
SmolLM2's layers are Q4_1 (4.5 bits a weight): packed layers alone are 3x its
file, so "mixed" keeps its whole vocabulary int8 (3.3x the file).

The KV cache adds ``2 · n_layer · n_ctx · n_head_kv · head_dim · 4`` bytes
(gemma-3-270m: 36 KiB per token; SmolLM2: 45 KiB per token) and grows with the
conversation up to ``n_ctx``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from pyengine import quants
from pyengine.config import ModelConfig
from pyengine.errors import GGUFError, ModelError, PyEngineError
from pyengine.kernels import (LANE_HALF, LANES, USE_BLAS, VEC_DOT_TYPE, Linear, RowSplit, row_split, Rope, attention, geglu, pack_block, pack_rows,
                              quantize_int8, x_levels, rmsnorm, softcap, swiglu)

F32_BUDGET_PYODIDE = 256 * 2**20    # float32 weights up to which "auto" keeps float32 in Pyodide: tiny models
F32_BUDGET = 2 * 2**30 if USE_BLAS else F32_BUDGET_PYODIDE   # in CPython float32 is the fastest (BLAS prefill)
WEIGHTS_BUDGET = int(2.5 * 2**30)   # bytes of "mixed" weights above which "auto" keeps every matrix int8
UBATCH = 512                         # tokens per forward step of a long prompt (llama.cpp's n_ubatch)
LOAD_CHUNK_BYTES = 8 * 2**20        # float32 bytes of rows read and dequantized at once while loading
INT8_BLOCK = 64                      # weights of a row sharing one scale in the int8 form
ROW = 0                              # int8 with one scale per row and one per column (kernels.Linear.col)
PACKED = -1                          # int8 codes three rows to an int64, a scale per kernels.PACK_BLOCK weights
SPLIT = -2                           # PACKED rows within MIXED_FILE_RATIO x the file's tensor bytes, ROW past them
MIXED_FILE_RATIO = 2.6               # "mixed": all weights within this many times the tensors' bytes in the file
COL_SAMPLE = (16, 512)               # the column scales come from 16 chunks of 512 rows spread over the matrix
LOGITS_MODES = ("last", "all", "none")
HEAP_HEADROOM = 32 * 2**20           # bytes reserved past the weights: a load's chunks, a forward pass's arrays

# weights= : (the layers' matrices, the vocabulary matrices token_embd / output):
# None keeps float32, a number keeps int8 with one scale per block of that many weights
WEIGHT_FORMS = {
    "f32": (None, None),
    "packed": (PACKED, PACKED),
    "mixed": (PACKED, SPLIT),               # the default for models past F32_BUDGET
    "int8": (INT8_BLOCK, ROW),               # the low-memory mode
}


@dataclass
class Layer:
    """One transformer block's weights (names as in the GGUF, ``blk.N.*``)."""
    attn_norm: np.ndarray           # (n_embd,)
    wqkv: Linear                    # (n_head*Dk + n_head_kv*Dk + n_head_kv*Dv, n_embd): attn_q, attn_k, attn_v
    q_norm: np.ndarray | None       # (Dk,) attn_q_norm
    k_norm: np.ndarray | None       # (Dk,) attn_k_norm
    wo: Linear                      # (n_embd, n_head*Dv) attn_output
    post_attn_norm: np.ndarray | None  # (n_embd,) post_attention_norm
    ffn_norm: np.ndarray            # (n_embd,)
    w_gate_up: Linear               # (2*n_ff, n_embd): ffn_gate then ffn_up
    w_down: Linear                  # (n_embd, n_ff) ffn_down
    post_ffn_norm: np.ndarray | None  # (n_embd,) post_ffw_norm
    swa: bool                       # sliding-window layer (local rope base, windowed mask)


class KVCache:
    """Keys and values of every layer for the positions seen so far.

    ``k[il]`` is (n_head_kv, capacity, Dk) float32 and ``v[il]`` (n_head_kv,
    capacity, Dv): one head's positions are contiguous rows, so attention reads
    ``k[il][:, :n]`` without a copy. Capacity doubles as needed up to ``n_ctx``.
    ``n`` is the number of positions filled; ``truncate(n)`` forgets the rest
    (a chat reuses the common prefix of the previous turn).
    """

    def __init__(self, n_layer: int, n_head_kv: int, head_dim_k: int, head_dim_v: int, n_ctx: int):
        self.n_ctx, self.n = n_ctx, 0
        cap = min(n_ctx, 256)
        self.k = [np.zeros((n_head_kv, cap, head_dim_k), np.float32) for _ in range(n_layer)]
        self.v = [np.zeros((n_head_kv, cap, head_dim_v), np.float32) for _ in range(n_layer)]

    @property
    def capacity(self) -> int:
        return self.k[0].shape[1]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k + self.v)

    def reserve(self, n: int) -> None:
        """Make room for positions 0..n-1 (n <= n_ctx), keeping what is stored."""
        if n <= self.capacity:
            return
        cap = min(self.n_ctx, max(n, 2 * self.capacity))
        for arrs in (self.k, self.v):
            for il, a in enumerate(arrs):
                b = np.zeros((a.shape[0], cap, a.shape[2]), np.float32)
                b[:, :self.n] = a[:, :self.n]
                arrs[il] = b

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` positions (0 <= n <= self.n)."""
        if not 0 <= n <= self.n:
            raise PyEngineError(f"cannot truncate the KV cache to {n} positions: it holds {self.n}")
        self.n = n


class Model:
    """A loaded model: ``forward`` turns token ids into logits, using and filling a :class:`KVCache`."""

    def __init__(self, config: ModelConfig, token_embd: Linear, layers: list[Layer],
                 output_norm: np.ndarray, output: Linear, rope_freqs: np.ndarray | None = None):
        self.config = config
        self.weights = "f32"            # the weight form, a key of WEIGHT_FORMS (set by from_gguf)
        self.token_embd = token_embd    # (n_vocab, n_embd)
        self.layers = layers
        self.output_norm = output_norm  # (n_embd,)
        self.output = output            # (n_vocab, n_embd); the same object as token_embd when tied
        c = config
        self.rope = Rope(c.rope_dim, c.rope_freq_base, c.rope_freq_scale, c.spec.rope_neox, rope_freqs)
        self.rope_swa = Rope(c.rope_dim, c.rope_freq_base_swa, 1.0, c.spec.rope_neox, rope_freqs)

    @property
    def weights_nbytes(self) -> int:
        """Bytes held by the weights (a tied output counted once)."""
        arrays = [self.token_embd, self.output_norm] + ([] if self.output is self.token_embd else [self.output])
        for layer in self.layers:
            arrays += [a for a in vars(layer).values() if isinstance(a, (np.ndarray, Linear))]
        return sum(a.nbytes for a in arrays)

    @classmethod
    def from_gguf(cls, gguf_file, progress=None, weights: str = "auto", ggml_rounding: bool = False) -> "Model":
        """Build the model that ``gguf_file`` (a :class:`pyengine.gguf.GGUFFile`) holds.

        ``weights``: "f32", "int8", or "auto" (f32 unless that passes
        ``WEIGHTS_BUDGET``). ``progress(done_tensors, total_tensors, done_bytes,
        total_bytes)`` is called as tensors are read (bytes as stored in the
        file). ``ggml_rounding`` rounds each matmul's activations as ggml's
        CPU backend does for the weight's type (8-bit blocks for quantized
        weights, see ``kernels.round_activations``): logits then equal
        llama.cpp's to float rounding on small models, at a few percent of
        speed. Deep quantized models turn any rounding difference into about
        0.5 logit (a float64 matmul moves gemma-3-270m's logits by 1.0 with
        that rounding, by 0.007 without), so it is off by default. The packed
        forms round activations their own way (``kernels.matmul_packed``) and
        ignore it.
        Raises ModelError for an unsupported architecture, a missing key or
        tensor, or a tensor of the wrong shape.
        """
        config = ModelConfig.from_metadata(gguf_file.metadata, gguf_file.tensors)
        return _Loader(gguf_file, config, progress, weights, ggml_rounding).load()

    def new_cache(self, n_ctx: int | None = None) -> KVCache:
        """An empty KV cache for ``n_ctx`` positions (default: the training context)."""
        c = self.config
        n_ctx = c.n_ctx_train if n_ctx is None else n_ctx
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx <= 0:
            raise PyEngineError(f"context size must be a positive number of tokens, got {n_ctx!r}")
        return KVCache(c.n_layer, c.n_head_kv, c.head_dim_k, c.head_dim_v, n_ctx)

    # ------------------------------------------------------------------------
    # the forward pass: the hot loop

    def forward(self, tokens: list[int], cache: KVCache, logits: str = "last") -> np.ndarray:
        """Run ``tokens`` at the cache's next positions; return their logits.

        logits="last": (n_vocab,) float32 for the last token; "all": (T,
        n_vocab); "none": (0, n_vocab) (prefill only). The cache advances by
        ``len(tokens)``. A prompt longer than ``UBATCH`` runs in steps of
        ``UBATCH`` tokens. Raises PyEngineError when the tokens would pass the
        cache's ``n_ctx`` or an id is outside the vocabulary.
        """
        tokens = self._check_tokens(tokens, cache, logits)
        outs = []
        for i in range(0, len(tokens), UBATCH):
            step = tokens[i:i + UBATCH]
            last = i + UBATCH >= len(tokens)
            mode = logits if logits == "all" or last else "none"
            outs.append(self._forward(step, cache, mode))
        if logits == "last":
            return outs[-1][0]
        return outs[0] if len(outs) == 1 else np.concatenate(outs)

    def _forward(self, tokens: np.ndarray, cache: KVCache, logits: str) -> np.ndarray:
        c = self.config
        t, pos = len(tokens), cache.n
        cache.reserve(pos + t)
        rows = {"last": slice(t - 1, t), "all": slice(0, t), "none": slice(0, 0)}[logits]
        x = self.token_embd.rows(tokens)                                 # (T, n_embd)
        if c.spec.embd_scale:
            x *= np.float32(math.sqrt(c.n_embd))
        for il, layer in enumerate(self.layers):
            h = self.attention(layer, rmsnorm(x, layer.attn_norm, c.rms_eps), cache, il, pos)  # (T, n_embd)
            if il == c.n_layer - 1:                      # past the last attention only the output rows matter
                x, h = x[rows], h[rows]
            x = x + self.post_norm(h, layer.post_attn_norm)
            h = self.ffn(layer, rmsnorm(x, layer.ffn_norm, c.rms_eps))   # (R, n_embd)
            x = x + self.post_norm(h, layer.post_ffn_norm)
        cache.n = pos + t
        if logits == "none":
            return np.empty((0, c.n_vocab), np.float32)
        out = self.output(rmsnorm(x, self.output_norm, c.rms_eps))      # (R, n_vocab)
        if c.final_logit_softcap:
            out = softcap(out, c.final_logit_softcap)
        return out

    def attention(self, layer: Layer, x: np.ndarray, cache: KVCache, il: int, pos: int) -> np.ndarray:
        """Self-attention of x (T, n_embd), already normed, at positions pos.. -> (T, n_embd); fills the cache."""
        c = self.config
        t, hkv, dk, dv = x.shape[0], c.n_head_kv, c.head_dim_k, c.head_dim_v
        nq, nk = c.n_head * dk, hkv * dk
        qkv = layer.wqkv(x)                                              # (T, nq + nk + nv)
        q = qkv[:, :nq].reshape(t, c.n_head, dk)                         # (T, H, Dk)
        k = qkv[:, nq:nq + nk].reshape(t, hkv, dk)                       # (T, Hkv, Dk)
        v = qkv[:, nq + nk:].reshape(t, hkv, dv)                         # (T, Hkv, Dv)
        if layer.q_norm is not None:
            q = rmsnorm(q, layer.q_norm, c.rms_eps)
            k = rmsnorm(k, layer.k_norm, c.rms_eps)
        rope = self.rope_swa if layer.swa else self.rope
        q, k = rope(q, pos), rope(k, pos)
        cache.k[il][:, pos:pos + t] = k.transpose(1, 0, 2)               # (Hkv, T, Dk)
        cache.v[il][:, pos:pos + t] = v.transpose(1, 0, 2)               # (Hkv, T, Dv)
        q = (q * np.float32(c.attn_scale)).reshape(t, hkv, -1, dk).transpose(1, 2, 0, 3)  # (Hkv, G, T, Dk)
        o = attention(q, cache.k[il][:, :pos + t], cache.v[il][:, :pos + t], pos,
                      c.sliding_window if layer.swa else 0)             # (Hkv, G, T, Dv)
        return layer.wo(o.transpose(2, 0, 1, 3).reshape(t, c.n_head * dv))

    def ffn(self, layer: Layer, x: np.ndarray) -> np.ndarray:
        """Gated feed-forward of x (R, n_embd), already normed -> (R, n_embd)."""
        n_ff = self.config.n_ff
        gate_up = layer.w_gate_up(x)                                     # (R, 2*n_ff)
        act = geglu if self.config.spec.ffn_gelu else swiglu
        return layer.w_down(act(gate_up[:, :n_ff], gate_up[:, n_ff:]))  # (R, n_embd)

    def post_norm(self, h: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
        """gemma3's post-attention / post-FFN RMSNorm; the identity for the other architectures."""
        return h if weight is None else rmsnorm(h, weight, self.config.rms_eps)

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


# ----------------------------------------------------------------------------
# loading

def layer_tensors(c: ModelConfig) -> list[tuple[str, tuple, bool]]:
    """The tensors of one block: (name after ``blk.N.``, ggml ne shape, required)."""
    e, f, dk, dv = c.n_embd, c.n_ff, c.head_dim_k, c.head_dim_v
    nq, nk, nv, no = c.n_head * dk, c.n_head_kv * dk, c.n_head_kv * dv, c.n_head * dv
    qk, post = c.spec.qk_norm, c.spec.post_norms
    rows = [
        ("attn_norm.weight", (e,), True),
        ("attn_q.weight", (e, nq), True), ("attn_q.bias", (nq,), False),
        ("attn_k.weight", (e, nk), True), ("attn_k.bias", (nk,), False),
        ("attn_v.weight", (e, nv), True), ("attn_v.bias", (nv,), False),
        ("attn_q_norm.weight", (dk,), True), ("attn_k_norm.weight", (dk,), True),
        ("attn_output.weight", (no, e), True), ("attn_output.bias", (e,), False),
        ("post_attention_norm.weight", (e,), True),
        ("ffn_norm.weight", (e,), True),
        ("ffn_gate.weight", (e, f), True), ("ffn_gate.bias", (f,), False),
        ("ffn_up.weight", (e, f), True), ("ffn_up.bias", (f,), False),
        ("ffn_down.weight", (f, e), True), ("ffn_down.bias", (e,), False),
        ("post_ffw_norm.weight", (e,), True),
    ]
    skip = set()
    if not qk:
        skip |= {"attn_q_norm.weight", "attn_k_norm.weight"}
    if not post:
        skip |= {"post_attention_norm.weight", "post_ffw_norm.weight"}
    return [r for r in rows if r[0] not in skip]


def model_tensors(c: ModelConfig) -> list[tuple[str, tuple, bool]]:
    """Every tensor the model reads: (GGUF name, ggml ne shape, required)."""
    names = [("token_embd.weight", (c.n_embd, c.n_vocab), True),
             ("output_norm.weight", (c.n_embd,), True),
             ("output.weight", (c.n_embd, c.n_vocab), False),
             ("rope_freqs.weight", (c.rope_dim // 2,), False)]
    for il in range(c.n_layer):
        names += [(f"blk.{il}.{n}", shape, req) for n, shape, req in layer_tensors(c)]
    return names


def _squeeze(shape) -> tuple:
    """A ggml ne shape without trailing 1s (ggml pads every shape to 4 dims with 1s)."""
    shape = tuple(shape)
    while len(shape) > 1 and shape[-1] == 1:
        shape = shape[:-1]
    return shape


def is_vocab(name: str) -> bool:
    """True for the vocabulary matrices (n_vocab rows): the token embedding and the output layer."""
    return name in ("token_embd.weight", "output.weight")


def pick_weights(weights: str, tensors: list[tuple[str, tuple]], f32_budget: int | None = None) -> str:
    """The weight form (a key of ``WEIGHT_FORMS``) that ``weights`` asks for, given (name, GGUF shape).

    "auto": "f32" while every weight as float32 fits ``f32_budget`` (default
    ``F32_BUDGET``: 2 GiB in CPython, 256 MiB in Pyodide), else "mixed" while
    that form fits ``WEIGHTS_BUDGET``, else "int8". Raises PyEngineError for
    an unknown ``weights``.
    """
    if weights != "auto" and weights not in WEIGHT_FORMS:
        raise PyEngineError(f"weights must be 'auto', {', '.join(map(repr, WEIGHT_FORMS))}, got {weights!r}")
    if weights != "auto":
        return weights
    f32 = sum(4 * math.prod(shape) for _, shape in tensors)
    f32_budget = F32_BUDGET if f32_budget is None else f32_budget
    return "f32" if f32 <= f32_budget else "mixed" if form_nbytes(tensors, "mixed") <= WEIGHTS_BUDGET else "int8"


def matrix_nbytes(block: int | None, shape: tuple, q8_0: bool = False) -> int:
    """Bytes of a weight of GGUF shape ``(n_in, n_out)`` held in ``block`` form (a value of
    ``WEIGHT_FORMS``; ``SPLIT`` counts as ``ROW``, its packed rows are added by ``form_nbytes``);
    ``q8_0``: stored as Q8_0 (packed with its own blocks of 32)."""
    n_in, n_out = shape
    if block is None:
        return 4 * n_in * n_out
    if block == PACKED:
        m = -(-n_out // LANES)
        return m * n_in * 8 + LANES * m * (n_in // packed_block(["Q8_0" if q8_0 else "?"], n_in)) * 4
    if block in (ROW, SPLIT):
        return n_out * n_in + 4 * (n_out + n_in)
    return n_out * n_in + 4 * n_out * (n_in // block if n_in % block == 0 else 1)


def form_nbytes(tensors: list[tuple[str, tuple]], form: str, vocab_rows: int = 0, q8_0=()) -> int:
    """Bytes of the weights ``(name, GGUF shape)`` held in weight ``form`` (a key of ``WEIGHT_FORMS``),
    with ``vocab_rows`` rows of the output matrix packed in "mixed"; ``q8_0``: the names stored as Q8_0."""
    layer_block, vocab_block = WEIGHT_FORMS[form]
    out = vocab_tensor(dict(tensors))
    total = 0
    for name, shape in tensors:
        if len(shape) == 1 or min(shape) == 1:
            total += 4 * math.prod(shape)
        elif not is_vocab(name):
            total += matrix_nbytes(layer_block, shape, name in q8_0)
        elif name == out and vocab_block == SPLIT:
            r = min(vocab_rows, shape[1])
            total += matrix_nbytes(PACKED, (shape[0], r), name in q8_0) + matrix_nbytes(ROW, (shape[0], shape[1] - r))
        else:
            total += matrix_nbytes(ROW if vocab_block == SPLIT else vocab_block, shape, name in q8_0)
    return total


def vocab_tensor(tensor_names) -> str:
    """The GGUF tensor behind ``model.output``: ``output.weight``, or ``token_embd.weight`` when tied."""
    return "output.weight" if "output.weight" in tensor_names else "token_embd.weight"


def mixed_vocab_rows(tensors: list[tuple[str, tuple]], budget: int, q8_0=()) -> int:
    """The rows of the output matrix the "mixed" form packs: as many as keep ``form_nbytes`` within
    ``budget`` bytes, a multiple of 3 (0 when the rest alone passes it)."""
    shapes = dict(tensors)
    out = vocab_tensor(shapes)
    n_in, n_vocab = shapes[out]
    per_row = matrix_nbytes(PACKED, (n_in, 3), out in q8_0) / 3 - (n_in + 4)   # a packed row, less an int8 one
    r = int((budget - form_nbytes(tensors, "mixed", 0, q8_0)) // per_row) // LANES * LANES
    return max(0, min(n_vocab, r))


Q8_0_LEVELS = (LANE_HALF - 1) // (32 * 128)   # 255: activation codes any 32 int8 weight codes leave room for


def packed_block(types: list[str], n_in: int) -> int:
    """The packed form's block for rows stacked from tensors of ggml ``types``: 32 when they are all
    Q8_0 (their own codes and scales are kept as stored), else ``kernels.pack_block(n_in)``."""
    return 32 if n_in % 32 == 0 and all(t == "Q8_0" for t in types) else pack_block(n_in)


def chunk_codes(raw: np.ndarray, info, n_rows: int, block: int, buf: np.ndarray | None = None,
                codes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """``n_rows`` rows of a weight from their stored bytes ``raw`` as the packed form holds them:
    (codes (n_rows, n_in) int8, scale (n_rows, n_in / block) float32, the activation levels they
    leave room for). Q8_0 with a block of 32: the file's own codes and scales (ggml's
    ``dequantize_row_q8_0``: w = d * q), no rounding. Otherwise dequantized (into ``buf``, float32,
    when given) and rounded to int8 per block (``kernels.quantize_int8``, into ``codes``).
    Raises GGUFError for bytes that are not whole blocks.
    """
    n_in = info.shape[0]
    if info.type.name == "Q8_0" and block == 32:
        q, d = quants.q8_0_codes(raw, n_rows * n_in, name=info.name)
        return q.reshape(n_rows, n_in), d.reshape(n_rows, n_in // 32), Q8_0_LEVELS
    rows = quants.dequantize(raw, info.type, n_rows * n_in, name=info.name,
                             out=None if buf is None else buf[:n_rows * n_in]).reshape(n_rows, n_in)
    q = np.empty((n_rows, n_in), np.int8) if codes is None else codes[:rows.size].reshape(n_rows, n_in)
    scale = np.empty((n_rows, n_in // block), np.float32)
    quantize_int8(rows, block, out=(q, scale))
    return q, scale, x_levels(q, block)


def pack_chunks(chunks, n_out: int, n_in: int, block: int, buf: np.ndarray | None = None,
                codes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """A packed matrix of ``n_out`` rows from their stored bytes: ``chunks`` yields ``(r, raw, info,
    n)``, rows r..r+n-1 (in order) of the tensor ``info`` (``chunk_codes``, with its buffers).
    Returns (w (ceil(n_out/3), n_in) int64, scale (3 ceil(n_out/3), n_in/block) float32, 0 past the
    rows, the activation levels the codes leave room for)."""
    m = -(-n_out // LANES)
    w = np.empty((m, n_in), np.int64)                                     # (ceil(n_out/3), n_in)
    scale = np.zeros((LANES * m, n_in // block), np.float32)              # (3 ceil(n_out/3), B)
    levels = LANE_HALF
    for r, raw, info, n in chunks:
        q, scale[r:r + n], lv = chunk_codes(raw, info, n, block, buf, codes)
        pack_rows(q, w, r)                                                # rows in order: see pack_rows
        levels = min(levels, lv)
    return w, scale, levels


def reserve_heap(nbytes: int) -> None:
    """Under Pyodide, grow the wasm heap once by ``nbytes``: what a load is about to hold.

    The wasm heap never shrinks, and whenever malloc runs out emscripten grows
    it by 20% more than asked, up to 96 MiB. A load allocating matrix after
    matrix would leave up to that much unused on top of its weights (gemma3:
    ~100 MB, 0.4x its file). One array of the whole, freed at once, grows the
    heap by exactly that; the weights then fill the space it left. Nothing
    happens in CPython, or when the space cannot be had (the load then fails
    on its own, with its own error).
    """
    if sys.platform == "emscripten":
        try:
            np.empty(nbytes, np.uint8)
        except MemoryError:
            pass


def read_rows(gguf_file, name: str, a: int, b: int) -> np.ndarray:
    """The raw blocks of rows ``a..b-1`` of weight ``name``: uint8 (bytes,), one read of the file.

    Rows are contiguous in a GGUF, so they are bytes ``a * row_bytes`` to
    ``b * row_bytes`` of the tensor. An object without ``parts`` (a test's
    stand-in) is sliced from its ``tensor_bytes``. Raises GGUFError on a short read.
    """
    info = gguf_file.tensors[name]
    row_bytes = info.type.n_bytes(info.shape[0])
    if not hasattr(gguf_file, "parts"):
        return gguf_file.tensor_bytes(name)[a * row_bytes:b * row_bytes]
    src = gguf_file.parts[info.part].source
    at, n = info.offset + a * row_bytes, (b - a) * row_bytes
    data = src.read(at, n)
    if len(data) != n:
        raise GGUFError(f"{src.name}: byte {at}: tensor {name!r}: read {len(data)} of {n} bytes "
                        f"(the file changed or was truncated)")
    return np.frombuffer(data, dtype=np.uint8)


def column_scale(gguf_file, names: list[str]) -> np.ndarray:
    """The column scales of the weights ``names`` stacked by rows, in the int8 ``ROW`` form: (n_in,) float32 in (0, 1].

    Each column's largest |weight| over ``COL_SAMPLE`` chunks of rows spread
    evenly over each matrix (all rows when it is smaller), over the largest of
    them. A row scale then takes each row's largest |weight / col|, so no
    weight is clipped whatever the sample saw. On gemma3's token_embd this
    moves the logits 2.3x less than a row scale alone (RMS 0.037 against 0.086
    from float32; max 0.22 against 0.84), as close as blocks of 128, at the
    speed of one scale per row. Any reader of the file (a shard) gets the same.
    A sampled row far larger than the rest (a hostile or broken file) shrinks
    its columns in every other row: the "packed" form has no column scales.
    """
    n_chunks, rows = COL_SAMPLE
    amax = np.zeros(gguf_file.tensors[names[0]].shape[0], np.float32)    # (n_in,)
    for name in names:
        info = gguf_file.tensors[name]
        n_in, n_rows = info.shape
        starts = [0] if n_rows <= n_chunks * rows else np.linspace(0, n_rows - rows, n_chunks).astype(int).tolist()
        for a in starts:
            b = min(n_rows, a + rows)
            chunk = quants.dequantize(read_rows(gguf_file, name, a, b), info.type, (b - a) * n_in, name=name)
            np.maximum(amax, np.abs(chunk.reshape(b - a, n_in)).max(axis=0), out=amax)
    top = amax.max()
    return np.where(amax > 0, amax / top, np.float32(1.0)).astype(np.float32) if top > 0 else np.ones_like(amax)


class _Loader:
    """Reads and checks every tensor once, reports progress, and lays the weights out for the hot loop."""

    def __init__(self, gguf_file, config: ModelConfig, progress, weights: str, ggml_rounding: bool):
        self.gf, self.config, self.progress = gguf_file, config, progress
        self.ggml_rounding = ggml_rounding
        wanted = model_tensors(config)
        for name, ne, required in wanted:
            info = gguf_file.tensors.get(name)
            if info is None and required:
                raise ModelError(f"missing tensor {name!r} (the {config.arch} architecture needs it)")
            if info is not None and _squeeze(info.shape) != _squeeze(ne):
                raise ModelError(f"tensor {name!r} has shape {tuple(info.shape)}, expected {ne} "
                                 f"from the metadata")
        self.names = [n for n, _, _ in wanted if n in gguf_file.tensors]
        self.total_bytes = sum(gguf_file.tensors[n].n_bytes for n in self.names)
        self.done, self.done_bytes = 0, 0
        self.shapes = [(n, tuple(gguf_file.tensors[n].shape)) for n in self.names]
        self.weights = pick_weights(weights, self.shapes)
        self.layer_block, self.vocab_block = WEIGHT_FORMS[self.weights]
        file_bytes = sum(t.n_bytes for t in gguf_file.tensors.values())
        self.q8_0 = {n for n in self.names if gguf_file.tensors[n].type.name == "Q8_0"}
        self.packed_vocab_rows = mixed_vocab_rows(self.shapes, int(MIXED_FILE_RATIO * file_bytes), self.q8_0)
        self.buf = np.empty(0, np.float32)   # float32 rows of one load chunk, reused tensor after tensor
        self.codes = np.empty(0, np.int8)    # their int8 codes (the packed form)

    def _tick(self, name: str) -> None:
        self.done += 1
        self.done_bytes += self.gf.tensors[name].n_bytes
        if self.progress is not None:
            self.progress(self.done, len(self.names), self.done_bytes, self.total_bytes)

    def vector(self, name: str) -> np.ndarray | None:
        """A 1-D tensor as float32, or None when absent (optional)."""
        if name not in self.gf.tensors:
            return None
        a = np.ascontiguousarray(self.gf.tensor(name), dtype=np.float32).reshape(-1)
        self._tick(name)
        return a

    def matrix(self, names: list[str], bias_names: list[str] | None = None, block: int | None = None,
               rows: tuple[int, int] | None = None) -> Linear | RowSplit:
        """The weights ``names`` stacked by rows into one Linear (n_out, n_in), with their biases if any.

        ``block``: None keeps float32, else int8 with a scale per ``block``
        weights of a row (``ROW``, or a block that does not divide n_in: one
        per row). Each part is dequantized straight into its rows of the
        stacked array, so a load never holds two float32 copies of a weight.
        """
        infos = [self.gf.tensors[n] for n in names]
        n_in, n_out = infos[0].shape[0], sum(i.shape[1] for i in infos)
        if block == PACKED:
            return self.packed_matrix(names, bias_names)
        if block == SPLIT:
            return self.split_matrix(names[0])
        int8 = block is not None
        col = column_scale(self.gf, names) if block == ROW else None            # (n_in,)
        lo, hi = rows or (0, n_out)
        w = np.empty((hi - lo, n_in), np.int8 if int8 else np.float32)          # (n_out, n_in)
        blocks = n_in // block if int8 and block and n_in % block == 0 else 1
        scale = np.empty((hi - lo, blocks), np.float32) if int8 else None      # (n_out, blocks)
        groups, r0 = [], 0
        for name, info in zip(names, infos):
            r1 = r0 + hi - lo if rows else r0 + info.shape[1]
            self._read_rows(name, w[r0:r1], scale[r0:r1] if int8 else None, col, lo)
            act = VEC_DOT_TYPE.get(info.type.name) if self.ggml_rounding else None
            groups = groups[:-1] + [(groups[-1][0], r1, act)] if groups and groups[-1][2] == act else \
                groups + [(r0, r1, act)]
            r0 = r1
            if not rows:
                self._tick(name)
        act, groups = (groups[0][2], None) if len(groups) == 1 else (None, groups)
        return Linear(w, self.bias(bias_names, infos), scale, act, groups, col)

    def split_matrix(self, name: str) -> Linear | RowSplit:
        """A vocabulary matrix in the "mixed" form: its first ``self.packed_vocab_rows`` rows packed,
        the rest int8 with row and column scales (``ROW``)."""
        n_out = self.gf.tensors[name].shape[1]
        r = min(n_out, self.packed_vocab_rows)
        parts = ([self.packed_matrix([name], rows=(0, r))] if r else []) + \
            ([self.matrix([name], block=ROW, rows=(r, n_out))] if r < n_out else [])
        self._tick(name)
        return row_split(parts)

    def packed_matrix(self, names: list[str], bias_names: list[str] | None = None,
                      rows: tuple[int, int] | None = None) -> Linear:
        """The weights ``names`` stacked by rows into a packed Linear (``kernels.matmul_packed``).

        Each chunk of rows becomes int8 codes with a scale per block
        (``chunk_codes``: Q8_0's own, or rounded per ``kernels.pack_block(n_in)``
        weights through the reused buffers), put into their fields of the
        int64 rows. The activations then take the most levels the codes leave
        room for (``kernels.x_levels``). ``rows=(lo, hi)``: only those rows of a single
        weight (not counted as a tensor read: the caller ticks).
        """
        infos = [self.gf.tensors[n] for n in names]
        lo, hi = rows or (0, None)
        n_in = infos[0].shape[0]
        n_out = hi - lo if rows else sum(i.shape[1] for i in infos)
        block = packed_block([i.type.name for i in infos], n_in)
        self.ensure_buffers(min(n_out, max(1, LOAD_CHUNK_BYTES // (4 * n_in))) * n_in)

        def chunks():
            r0 = 0
            for name, info in zip(names, infos):
                for a, b, raw, _ in self.raw_chunks(name, lo, hi):
                    yield r0 + a - lo, raw, info, b - a
                r0 += info.shape[1]
                if not rows:
                    self._tick(name)

        w, scale, levels = pack_chunks(chunks(), n_out, n_in, block, self.buf, self.codes)
        return Linear(w, self.bias(bias_names, infos), scale, n_out=n_out, levels=levels)

    def raw_chunks(self, name: str, lo: int = 0, hi: int | None = None):
        """Yield ``(a, b, raw, info)``: the stored bytes of rows a..b-1 of tensor ``name`` (of rows
        ``lo..hi-1``, default all), one read each.

        ``LOAD_CHUNK_BYTES`` of float32 rows at a time, so a load holds one
        chunk of the raw tensor, never all of it (gemma3's token_embd is 178
        MB as Q8_0).
        """
        info = self.gf.tensors[name]
        n_in, n_rows = info.shape
        hi = n_rows if hi is None else hi
        step = max(1, LOAD_CHUNK_BYTES // (4 * n_in))                          # rows per chunk
        for a in range(lo, hi, step):
            b = min(hi, a + step)
            yield a, b, read_rows(self.gf, name, a, b), info                    # (bytes of rows a..b-1,) uint8

    def ensure_buffers(self, n: int) -> None:
        """The reused float32 rows and int8 codes of a load chunk: at least ``n`` elements each."""
        if self.buf.size < n:
            self.buf, self.codes = np.empty(n, np.float32), np.empty(n, np.int8)

    def dequantized_chunks(self, name: str, lo: int = 0, hi: int | None = None):
        """Yield ``(a, b, rows)``: rows a..b-1 of tensor ``name`` as float32 ``(b-a, n_in)`` in one reused
        buffer (valid until the next chunk)."""
        n_in = self.gf.tensors[name].shape[0]
        for a, b, raw, info in self.raw_chunks(name, lo, hi):
            n = (b - a) * n_in
            self.ensure_buffers(n)
            yield a, b, quants.dequantize(raw, info.type, n, name=name, out=self.buf[:n]).reshape(b - a, n_in)

    def bias(self, bias_names: list[str] | None, infos: list) -> np.ndarray | None:
        """The biases of stacked weights, zeros for a part without one; None when no part has one."""
        if not bias_names or not any(n in self.gf.tensors for n in bias_names):
            return None
        return np.concatenate([self.vector(n) if n in self.gf.tensors else np.zeros(i.shape[1], np.float32)
                               for n, i in zip(bias_names, infos)])

    def _read_rows(self, name: str, w: np.ndarray, scale: np.ndarray | None, col: np.ndarray | None,
                   lo: int = 0) -> None:
        """Dequantize rows ``lo..lo+len(w)-1`` of tensor ``name`` into ``w`` (n_rows, n_in): float32, or
        int8 and its block ``scale`` (of the weights divided by the column scale ``col`` when given).

        float32 rows are dequantized in place, int8 rows through the reused
        float32 buffer of ``dequantized_chunks``.
        """
        hi = lo + len(w)
        if scale is None:
            for a, b, raw, info in self.raw_chunks(name, lo, hi):
                out = w[a - lo:b - lo]
                quants.dequantize(raw, info.type, out.size, name=name, out=out.reshape(-1))
            return
        for a, b, rows in self.dequantized_chunks(name, lo, hi):              # rows (b-a, n_in) float32
            if col is not None:
                rows /= col
            quantize_int8(rows, w.shape[1] // scale.shape[1], out=(w[a - lo:b - lo], scale[a - lo:b - lo]))

    def layer(self, il: int) -> Layer:
        c, p = self.config, f"blk.{il}."
        return Layer(
            attn_norm=self.vector(p + "attn_norm.weight"),
            wqkv=self.matrix([p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"],
                             [p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"], self.layer_block),
            q_norm=self.vector(p + "attn_q_norm.weight"),
            k_norm=self.vector(p + "attn_k_norm.weight"),
            wo=self.matrix([p + "attn_output.weight"], [p + "attn_output.bias"], self.layer_block),
            post_attn_norm=self.vector(p + "post_attention_norm.weight"),
            ffn_norm=self.vector(p + "ffn_norm.weight"),
            w_gate_up=self.matrix([p + "ffn_gate.weight", p + "ffn_up.weight"],
                                  [p + "ffn_gate.bias", p + "ffn_up.bias"], self.layer_block),
            w_down=self.matrix([p + "ffn_down.weight"], [p + "ffn_down.bias"], self.layer_block),
            post_ffn_norm=self.vector(p + "post_ffw_norm.weight"),
            swa=c.swa_layers[il],
        )

    def load(self) -> Model:
        reserve_heap(form_nbytes(self.shapes, self.weights, self.packed_vocab_rows, self.q8_0) + HEAP_HEADROOM)
        if self.progress is not None:
            self.progress(0, len(self.names), 0, self.total_bytes)
        untied = "output.weight" in self.gf.tensors
        token_embd = self.matrix(["token_embd.weight"],       # only rows are read from it when untied
                                 block=ROW if untied and self.vocab_block == SPLIT else self.vocab_block)
        output_norm = self.vector("output_norm.weight")
        output = self.matrix(["output.weight"], block=self.vocab_block) if untied else token_embd
        rope_freqs = self.vector("rope_freqs.weight")
        layers = [self.layer(il) for il in range(self.config.n_layer)]
        model = Model(self.config, token_embd, layers, output_norm, output, rope_freqs)
        model.weights = self.weights
        return model
