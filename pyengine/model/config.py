"""The model's hyperparameters, read from GGUF metadata through one table.

Two tables say everything pyengine knows about an architecture:

* ``KEYS`` maps each GGUF key (``{arch}.…``, as llama.cpp's ``LLM_KV_*`` names
  them) to a :class:`ModelConfig` field, with its default or ``REQUIRED``;
* ``ARCHITECTURES`` holds what differs between the supported architectures
  (rope pairing, q/k norms, post-norms, activation, sliding window), as data,
  so that :mod:`pyengine.model` has one forward pass for all of them.

Defaults follow llama.cpp's ``llama_model_base::load_hparams`` and each
architecture's ``load_arch_hparams`` (``src/models/<arch>.cpp``):
``head_count_kv`` defaults to ``head_count``; ``key_length`` and
``value_length`` to ``n_embd / n_head``; ``rope.dimension_count`` to the key
head size; ``rope.freq_base`` to 10000; ``rope.scaling.type`` to linear with
factor 1. A key that llama.cpp refuses to load without is ``REQUIRED`` here
(``context_length``, ``embedding_length``, ``block_count``,
``layer_norm_rms_epsilon``), and so are ``head_count`` and
``feed_forward_length``, which llama.cpp only reports later as a tensor of the
wrong shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pyengine.errors import ModelError, UnsupportedArchitectureError
from pyengine.gguf.header import SkippedArray

REQUIRED = object()  # marks a key without a default
MAX_LAYERS = 512     # llama.cpp's LLAMA_MAX_LAYERS: a hostile block_count must not make us list 10^9 layers
MAX_STATE = 1 << 24  # floats of one DeltaNet layer's recurrent state (64 MiB; Qwen3.5-0.8B: 16 x 128² = 1 MiB)


@dataclass(frozen=True)
class ArchSpec:
    """What one architecture does differently (llama.cpp ``src/models/<arch>.cpp``)."""
    rope_neox: bool             # rope pairs (i, i + n_rot/2) (NEOX) instead of (2i, 2i+1) (NORM)
    qk_norm: bool               # RMSNorm each q and k head (attn_q_norm, attn_k_norm)
    post_norms: bool            # RMSNorm the attention and FFN outputs (post_attention_norm, post_ffw_norm)
    ffn_gelu: bool              # FFN is GELU(tanh)-gated (GEGLU) instead of SiLU-gated (SwiGLU)
    embd_scale: bool            # token embeddings are multiplied by sqrt(n_embd)
    swa_pattern: int = 0        # with a sliding window: every swa_pattern-th layer is global
    rope_freq_base_swa: float = 0.0  # rope base of the sliding-window layers (0: the model's)
    pre_norms: bool = True      # RMSNorm before attention and FFN (attn_norm, ffn_norm); olmo2, exaone4: none
    qk_norm_full: bool = False  # the q/k norm runs over all heads at once (olmo2), not per head
    ffn_fused_up: bool = False  # ffn_up holds the gate rows, then the up rows (phi3); no ffn_gate
    no_rope_step: int = 0       # every no_rope_step-th layer has no rope (smollm3: 4)
    rope_swa_only: bool = False  # with a sliding window, only its layers use rope (exaone4)
    sliding_window: int = 0     # the window when the file names none (gemma2: 4096)
    swa_n_layer: int = 0        # the window applies only to models of this many layers (exaone4: the 32B)
    attn_softcap: float = 0.0   # attention scores soft-capped at this when the file says nothing (gemma2)
    final_softcap: float = 0.0  # logits soft-capped at this when the file says nothing (gemma2)
    big_n_layer: int = 0        # a model of this many layers scales q by 1/sqrt(n_embd / n_head) (the 27Bs)
    required: tuple = ()        # fields whose key this architecture cannot do without (granite: logit_scale)
    shortconv: bool = False     # blocks whose head_count_kv is 0 are short convolutions (lfm2)
    output_norm: str = "output_norm"  # the final norm's tensor (lfm2: token_embd_norm, llama.cpp's name for it)
    recurrent: bool = False     # hybrid: Gated DeltaNet layers, full attention every full_attention_interval-th
    q_gate: bool = False        # attn_q holds each head's query then its output gate (sigmoid) (qwen35)
    ffn_norm: str = "ffn_norm"  # the name of the norm before the FFN (qwen35: post_attention_norm)
    imrope: bool = False        # rope.dimension_sections interleaved over the pairs (llama.cpp IMROPE)
    query_scale: float = 0.0    # q times this before q·k (gemma4: 1, its q norm scales); 0: 1/sqrt(Dk)
    v_norm: bool = False        # v RMS-normed per head, without a weight (gemma4)
    shared_kv: bool = False     # the last attention.shared_kv_layers layers read earlier layers' KV (gemma4)
    per_layer_embd: bool = False  # per-layer token embeddings (embedding_length_per_layer_input; gemma4)
    out_scale: bool = False     # each block's output times its layer_output_scale (gemma4)
    rope_freqs_full: bool = False  # rope_freqs turns the full-attention layers only (gemma4's proportional rope)


ARCHITECTURES: dict[str, ArchSpec] = {
    #         rope_neox qk_norm post_norms ffn_gelu embd_scale
    "llama":  ArchSpec(False, False, False, False, False),
    "qwen2":  ArchSpec(True,  False, False, False, False),
    "qwen3":  ArchSpec(True,  True,  False, False, False),
    "gemma3": ArchSpec(True,  True,  True,  True,  True, swa_pattern=6, rope_freq_base_swa=10000.0, big_n_layer=62),
    "gemma2": ArchSpec(True,  False, True,  True,  True, swa_pattern=2, sliding_window=4096, attn_softcap=50.0,
                       final_softcap=30.0, big_n_layer=46),
    "phi3":   ArchSpec(True,  False, False, False, False, ffn_fused_up=True),
    "granite": ArchSpec(False, False, False, False, False, required=("logit_scale",)),
    "olmo2":  ArchSpec(True,  True,  True,  False, False, swa_pattern=4, pre_norms=False, qk_norm_full=True),
    "smollm3": ArchSpec(False, False, False, False, False, no_rope_step=4),
    "exaone4": ArchSpec(True,  True,  True,  False, False, swa_pattern=4, pre_norms=False, rope_swa_only=True,
                        sliding_window=4096, swa_n_layer=64),
    "lfm2":   ArchSpec(True,  True,  False, False, False, shortconv=True, output_norm="token_embd_norm",
                       required=("shortconv_l_cache",)),
    "qwen35": ArchSpec(True,  True,  False, False, False, recurrent=True, q_gate=True, ffn_norm="post_attention_norm",
                       imrope=True, required=("rope_sections", "ssm_d_conv", "ssm_d_inner", "ssm_d_state",
                                              "ssm_dt_rank", "ssm_n_group")),
    "gemma4": ArchSpec(True,  True,  True,  True,  True, swa_pattern=5, rope_freq_base_swa=10000.0, final_softcap=30.0,
                       query_scale=1.0, v_norm=True, shared_kv=True, rope_freqs_full=True, per_layer_embd=True,
                       out_scale=True,
                       required=("sliding_window", "sliding_window_pattern", "n_embd_per_layer", "head_dim_k_swa",
                                 "head_dim_v_swa")),
}

# field                      GGUF key ("{arch}" is general.architecture)    type   default
KEYS = [
    ("n_ctx_train",            "{arch}.context_length",                       int,   REQUIRED),
    ("n_embd",                 "{arch}.embedding_length",                     int,   REQUIRED),
    ("block_count",            "{arch}.block_count",                          int,   REQUIRED),
    ("feed_forward_length",    "{arch}.feed_forward_length",                  None,  REQUIRED),  # int or per layer
    ("n_head",                 "{arch}.attention.head_count",                 int,   REQUIRED),
    ("head_count_kv",          "{arch}.attention.head_count_kv",              None,  None),   # n_head; per layer
    ("head_dim_k",             "{arch}.attention.key_length",                 int,   None),   # n_embd / n_head
    ("head_dim_v",             "{arch}.attention.value_length",               int,   None),   # n_embd / n_head
    ("head_dim_k_swa",         "{arch}.attention.key_length_swa",             int,   None),   # head_dim_k
    ("head_dim_v_swa",         "{arch}.attention.value_length_swa",           int,   None),   # head_dim_v
    ("rms_eps",                "{arch}.attention.layer_norm_rms_epsilon",     float, REQUIRED),
    ("rope_freq_base",         "{arch}.rope.freq_base",                       float, 10000.0),
    ("rope_dim",               "{arch}.rope.dimension_count",                 int,   None),   # head_dim_k
    ("rope_dim_swa",           "{arch}.rope.dimension_count_swa",             int,   None),   # rope_dim
    ("rope_scaling_type",      "{arch}.rope.scaling.type",                    str,   "linear"),
    ("rope_scaling_factor",    "{arch}.rope.scaling.factor",                  float, 0.0),    # rope_scale_linear
    ("rope_scale_linear",      "{arch}.rope.scale_linear",                    float, 0.0),    # older name of it
    ("sliding_window",         "{arch}.attention.sliding_window",             int,   None),   # ARCHITECTURES
    ("sliding_window_pattern", "{arch}.attention.sliding_window_pattern",     None,  None),   # int or [bool]
    ("rope_freq_base_swa",     "{arch}.rope.freq_base_swa",                   float, None),   # ARCHITECTURES
    ("final_logit_softcap",    "{arch}.final_logit_softcapping",              float, None),   # ARCHITECTURES
    ("attn_logit_softcap",     "{arch}.attn_logit_softcapping",               float, None),   # ARCHITECTURES
    ("embedding_scale",        "{arch}.embedding_scale",                      float, 0.0),    # 0: none (granite)
    ("residual_scale",         "{arch}.residual_scale",                       float, 0.0),    # 0: none (granite)
    ("logit_scale",            "{arch}.logit_scale",                          float, 0.0),    # 0: none (granite)
    ("attention_scale",        "{arch}.attention.scale",                      float, 0.0),    # 0: 1/sqrt(Dk)
    ("n_vocab",                "{arch}.vocab_size",                           int,   None),   # len(tokens)
    ("shortconv_l_cache",      "{arch}.shortconv.l_cache",                    int,   0),      # taps (lfm2)
    ("rope_sections",          "{arch}.rope.dimension_sections",              None,  None),   # 4 ints (qwen35)
    ("full_attention_interval", "{arch}.full_attention_interval",             int,   4),      # qwen35
    ("recurrent_layers",       "{arch}.attention.recurrent_layers",           None,  None),   # [bool] per layer
    ("ssm_d_conv",             "{arch}.ssm.conv_kernel",                      int,   0),      # conv taps
    ("ssm_d_inner",            "{arch}.ssm.inner_size",                       int,   0),      # v heads * head size
    ("ssm_d_state",            "{arch}.ssm.state_size",                       int,   0),      # k and v head size
    ("ssm_dt_rank",            "{arch}.ssm.time_step_rank",                   int,   0),      # v heads
    ("ssm_n_group",            "{arch}.ssm.group_count",                      int,   0),      # k heads
    ("n_kv_shared",            "{arch}.attention.shared_kv_layers",           int,   0),      # gemma4
    ("n_embd_per_layer",       "{arch}.embedding_length_per_layer_input",     int,   0),      # gemma4: 0 none
    ("n_layer_nextn",          "{arch}.nextn_predict_layers",                 int,   0),      # MTP layers at the end
]

ROPE_SCALING_TYPES = ("none", "linear")  # yarn and longrope are not implemented


@dataclass(frozen=True)
class LayerPlan:
    """What one layer is (llama.cpp's per-layer hparams), resolved once from the config by :func:`plan_layers`."""
    kind: str                   # its mixer: "attention", "shortconv" (lfm2) or "delta" (qwen35's Gated DeltaNet)
    d_k: int                    # key head size (llama.cpp n_embd_head_k(il))
    d_v: int                    # value head size
    swa: bool                   # a sliding-window layer (its own head sizes, rope base, window)
    window: int                 # tokens each query sees, itself included (0: all before it)
    rope: bool                  # q and k are rotated (not on smollm3's every 4th layer, nor exaone4's global ones)
    kv_source: int              # the layer whose keys and values it reads (itself, or an earlier one: gemma4)
    ffn_mult: int               # its FFN units are n_ff times this (gemma4's double-wide layers: 2)


@dataclass
class ModelConfig:
    """Hyperparameters of one model as the file gives them (llama.cpp's defaults filled in), and the plan
    of its layers derived from them. Sizes are counts; ``head_dim_*`` and ``rope_dim`` are per head."""
    arch: str
    spec: ArchSpec = field(repr=False)
    n_vocab: int
    n_ctx_train: int            # tokens the model was trained on
    n_embd: int
    block_count: int            # layers in the file, the MTP layers (n_layer_nextn) included
    feed_forward_length: tuple[int, ...]  # FFN units of each layer run (n_layer of them)
    n_head: int
    head_count_kv: tuple[int, ...]        # KV heads of each layer run (0: a short convolution, lfm2)
    head_dim_k: int
    head_dim_v: int
    head_dim_k_swa: int         # the head sizes of the sliding-window layers (gemma4's differ)
    head_dim_v_swa: int
    rms_eps: float
    rope_freq_base: float
    rope_dim: int               # leading dims of each q/k head that rope rotates
    rope_dim_swa: int           # the same in the sliding-window layers
    rope_scaling_type: str
    rope_scaling_factor: float  # linear: positions are divided by it (0 or 1: none); else rope_scale_linear's
    rope_scale_linear: float    # the factor under its older key
    sliding_window: int         # tokens a sliding-window layer sees, itself included (0: none)
    sliding_window_pattern: int | tuple[bool, ...] | None   # every n-th layer global, or per layer; None: the arch's
    rope_freq_base_swa: float
    final_logit_softcap: float  # logits = c * tanh(logits / c) when c > 0
    attn_logit_softcap: float   # attention scores = c * tanh(scores / c) when c > 0 (gemma2)
    embedding_scale: float      # token embeddings times this when > 0 (granite)
    residual_scale: float       # what attention and FFN add to the stream times this when > 0 (granite)
    logit_scale: float          # logits divided by this when > 0 (granite)
    attention_scale: float      # the file's attention.scale (granite; 0: none), see attn_scale
    shortconv_l_cache: int      # taps of the short convolutions: each sees itself and l_cache - 1 inputs before
    rope_sections: tuple[int, ...] | None   # 4 counts of rope pairs (time, height, width, extra) (qwen35)
    full_attention_interval: int  # hybrid: every this-th layer is full attention
    recurrent_layers: tuple[bool, ...] | None  # per layer True for a Gated DeltaNet layer; None: by the interval
    ssm_d_conv: int             # taps of the DeltaNet's causal conv
    ssm_d_inner: int            # DeltaNet value width: v heads * head size
    ssm_d_state: int            # DeltaNet head size (keys and values)
    ssm_dt_rank: int            # DeltaNet value heads (each has its decay and beta)
    ssm_n_group: int            # DeltaNet key heads (value head h reads key head h % ssm_n_group)
    n_kv_shared: int            # the last n layers keep no KV of their own (gemma4)
    n_embd_per_layer: int       # width of each layer's per-layer token embedding (gemma4; 0: none)
    n_layer_nextn: int          # block_count's last layers that predict further tokens (MTP), not run here
    tied_output: bool | None = None  # output reuses token_embd (known from the tensors, None if not given)
    layers: tuple[LayerPlan, ...] = field(default=(), repr=False)   # plan_layers(self)

    def __post_init__(self):
        if not self.layers:                      # (mlx-lm's ModelArgs: derived in __post_init__)
            self.layers = plan_layers(self)

    @classmethod
    def from_metadata(cls, metadata: dict, tensor_names=None) -> ModelConfig:
        """Read the config of ``general.architecture`` from GGUF ``metadata`` (a dict of key -> value).

        ``tensor_names`` (optional) lets the config say whether the output is tied
        (no ``output.weight``). Raises ModelError naming the missing or bad key,
        or listing the supported architectures.
        """
        arch = metadata.get("general.architecture")
        if not isinstance(arch, str) or arch not in ARCHITECTURES:
            raise UnsupportedArchitectureError(arch, tuple(ARCHITECTURES))
        values = file_values(read_keys(metadata, arch), metadata, arch)
        tied = None if tensor_names is None else "output.weight" not in tensor_names
        return cls(arch=arch, spec=ARCHITECTURES[arch], tied_output=tied, **values)

    # --- derived: the layers run and their plan
    @property
    def n_layer(self) -> int:
        """Layers run (llama.cpp ``n_layer() = block_count - nextn_predict_layers``)."""
        return self.block_count - self.n_layer_nextn

    @property
    def n_ff(self) -> int:
        """The smallest layer's FFN units; layer il has ``n_ff * ffn_mult[il]``."""
        return min(self.feed_forward_length)

    @property
    def n_head_kv(self) -> int:
        """KV heads of the attention layers."""
        return next((h for h in self.head_count_kv if h), self.n_head)

    @property
    def attn_scale(self) -> float:
        """q times this before q·k (gemma_pytorch's query_pre_attn_scalar: n_embd / n_head for the 27Bs)."""
        spec = self.spec
        if self.attention_scale:
            return self.attention_scale
        if spec.query_scale:
            return spec.query_scale
        if spec.big_n_layer and self.n_layer == spec.big_n_layer:
            return 1.0 / math.sqrt(self.n_embd // self.n_head)
        return 1.0 / math.sqrt(self.head_dim_k)

    @property
    def rope_freq_scale(self) -> float:
        """Factor on positions before rope (llama.cpp ``freq_scale = 1 / rope.scaling.factor``)."""
        factor = self.rope_scaling_factor or self.rope_scale_linear
        return 1.0 if factor == 0.0 else 1.0 / factor

    def _per_layer(self, name: str) -> tuple:
        return tuple(getattr(layer, name) for layer in self.layers)

    swa_layers = property(lambda self: self._per_layer("swa"), doc="per layer: True when it slides")
    rope_layers = property(lambda self: self._per_layer("rope"), doc="per layer: True when q and k are rotated")
    kv_layers = property(lambda self: self._per_layer("kv_source"), doc="per layer: the layer whose KV it reads")
    ffn_mult = property(lambda self: self._per_layer("ffn_mult"), doc="per layer: its FFN units over n_ff")
    conv_layers = property(lambda self: tuple(k == "shortconv" for k in self._per_layer("kind")),
                           doc="per layer: True for a short convolution (lfm2)")
    recurrent = property(lambda self: tuple(k == "delta" for k in self._per_layer("kind")),
                         doc="per layer: True for a Gated DeltaNet layer (qwen35)")

    def head_dims(self, il: int) -> tuple[int, int]:
        """(Dk, Dv) of layer ``il``'s heads (llama.cpp ``n_embd_head_k(il)``, ``n_embd_head_v(il)``)."""
        return self.layers[il].d_k, self.layers[il].d_v

    def n_ff_of(self, il: int) -> int:
        """Layer ``il``'s FFN units (llama.cpp ``n_ff(il)``)."""
        return self.feed_forward_length[il]


# ----------------------------------------------------------------------------
# reading the file's values: the KEYS table, then llama.cpp's defaults and checks, one step each

def read_keys(metadata: dict, arch: str) -> dict:
    """``{field: value}`` of every key of :data:`KEYS`, typed (``None`` type: as in the file), the default
    when absent; ModelError for a missing key the architecture needs."""
    values = {}
    for name, key, typ, default in KEYS:
        key = key.format(arch=arch)
        if key in metadata:
            values[name] = _check_value(key, metadata[key], typ)
        elif default is REQUIRED or name in ARCHITECTURES[arch].required:
            raise ModelError(f"missing metadata key {key!r}: the {arch} architecture needs it")
        else:
            values[name] = default
    return values


def file_values(values: dict, metadata: dict, arch: str) -> dict:
    """The file's values with llama.cpp's defaults filled in and checked, the per-layer ones as tuples of the
    layers run: a new dict, each step (:data:`STEPS`) filling the fields it names."""
    v = {**values, "arch": arch, "spec": ARCHITECTURES[arch], "metadata": metadata}
    for step in STEPS:
        v.update(step(v))
    del v["arch"], v["spec"], v["metadata"]
    return v


def _check_sizes(v: dict) -> dict:
    """The counts that must be positive, the layers bounded (a hostile block_count must not list 10^9)."""
    for name in ("n_embd", "block_count", "n_head", "n_ctx_train"):
        if v[name] <= 0:
            raise ModelError(f"metadata: {'n_layer' if name == 'block_count' else name} = {v[name]} must be positive")
    if v["block_count"] > MAX_LAYERS:
        raise ModelError(f"metadata key '{v['arch']}.block_count' = {v['block_count']}: at most {MAX_LAYERS} layers")
    nextn = v["n_layer_nextn"]
    if not 0 <= nextn < v["block_count"]:
        raise ModelError(f"metadata key '{v['arch']}.nextn_predict_layers' = {nextn} must be in "
                         f"0..{v['block_count'] - 1}")
    return {}


PER_LAYER_FIELDS = ("feed_forward_length", "head_count_kv", "recurrent_layers", "sliding_window_pattern")


def _drop_nextn_layers(v: dict) -> dict:
    """The per-layer arrays without the MTP layers' entries (llama.cpp ``n_layer() = n_layer_all -
    n_layer_nextn``: the last ``nextn_predict_layers`` of ``block_count`` draft tokens for speculative
    decoding; the model's own layers come before them)."""
    n_all, n = v["block_count"], v["block_count"] - v["n_layer_nextn"]
    out = {}
    for name in PER_LAYER_FIELDS if n < n_all else ():
        if isinstance(v[name], (list, np.ndarray)) and len(v[name]) == n_all:
            out[name] = v[name][:n]
    return out


def _ffn(v: dict) -> dict:
    """The FFN units of every layer: one ``feed_forward_length``, or one per layer, each a multiple of the
    smallest (gemma4's double-wide layers), so that a split cuts every layer at the same fractions."""
    key = f"{v['arch']}.feed_forward_length"
    ff = _per_layer_ints(key, v["feed_forward_length"], v["block_count"] - v["n_layer_nextn"])
    n_ff = min(ff)
    if n_ff <= 0 or max(ff) > 1 << 20:
        raise ModelError(f"metadata key {key!r}: FFN sizes {ff[:8]} must be in 1..{1 << 20}")
    if any(f % n_ff for f in ff):
        raise ModelError(f"metadata key {key!r}: per-layer FFN sizes {ff[:8]}... must be multiples of the smallest")
    return {"feed_forward_length": tuple(ff)}


def _kv_heads(v: dict) -> dict:
    """The KV heads of every layer: head_count_kv for all (head_count when absent), or per layer, where
    0 is a short-convolution block (lfm2), the others agreeing (llama.cpp ``llama_model_lfm2``)."""
    a, key, kv = v["arch"], f"{v['arch']}.attention.head_count_kv", v["head_count_kv"]
    n, per_layer = v["block_count"] - v["n_layer_nextn"], None
    if kv is not None and v["spec"].shortconv:
        per_layer = _per_layer_ints(key, kv, n)
        kv = [h for h in per_layer if h] or None
        if 0 in per_layer and v["shortconv_l_cache"] < 2:
            raise ModelError(f"metadata key '{a}.shortconv.l_cache' = {v['shortconv_l_cache']} must be at least 2")
        if v["sliding_window"]:
            raise ModelError(f"metadata key '{a}.attention.sliding_window': a sliding window on {a} is not supported")
    kv = v["n_head"] if kv is None else _check_value(key, kv, int)
    if kv <= 0 or v["n_head"] % kv:
        raise ModelError(f"metadata key '{key}' = {kv} must divide head_count = {v['n_head']}")
    return {"head_count_kv": tuple(kv if per_layer is None or per_layer[il] else 0 for il in range(n))}


def _head_sizes(v: dict) -> dict:
    """Head sizes (key_length, value_length: n_embd / n_head when absent; the sliding layers' the same when
    not given) and rope dims (rope.dimension_count: the key head size; the sliding layers' the same)."""
    dk = v["n_embd"] // v["n_head"] if v["head_dim_k"] is None else v["head_dim_k"]
    dv = v["n_embd"] // v["n_head"] if v["head_dim_v"] is None else v["head_dim_v"]
    rope = dk if v["rope_dim"] is None else v["rope_dim"]
    given = {"head_dim_k": dk, "head_dim_v": dv, "rope_dim": rope}
    fill = {"head_dim_k_swa": dk, "head_dim_v_swa": dv, "rope_dim_swa": rope}
    return {**given, **{name: default if v[name] is None else v[name] for name, default in fill.items()}}


def _check_heads(v: dict) -> dict:
    """Head sizes in 1..65536, rope dims even and at most the key head size (llama: equal to it)."""
    for dk, dv, swa in ((v["head_dim_k"], v["head_dim_v"], ""), (v["head_dim_k_swa"], v["head_dim_v_swa"], "_swa")):
        if not 0 < dk <= 1 << 16 or not 0 < dv <= 1 << 16:
            raise ModelError(f"metadata: head sizes key_length{swa} = {dk}, value_length{swa} = {dv} must be in "
                             f"1..65536")
    for rope, dk, swa in ((v["rope_dim"], v["head_dim_k"], ""), (v["rope_dim_swa"], v["head_dim_k_swa"], "_swa")):
        if rope <= 0 or rope % 2 or rope > dk:
            raise ModelError(f"metadata key '{v['arch']}.rope.dimension_count{swa}' = {rope} must be even "
                             f"and at most the key head size {dk}")
    if v["arch"] == "llama" and v["rope_dim"] != v["head_dim_k"]:  # llama.cpp: "invalid n_rot"
        raise ModelError(f"metadata key 'llama.rope.dimension_count' = {v['rope_dim']}: "
                         f"llama needs it equal to the head size {v['head_dim_k']}")
    return {}


def _rope(v: dict) -> dict:
    """rope's base, scaling and epsilon checked; the sliding layers' base (the architecture's, else the model's)."""
    factor = v["rope_scaling_factor"] or v["rope_scale_linear"]
    if v["rope_freq_base"] <= 0 or factor < 0 or v["rms_eps"] < 0:
        raise ModelError("metadata: rope.freq_base, rope.scaling.factor and the rms epsilon must be positive")
    if v["rope_scaling_type"] not in ROPE_SCALING_TYPES:
        raise ModelError(f"metadata key '{v['arch']}.rope.scaling.type' = {v['rope_scaling_type']!r} is not "
                         f"supported (supported: {', '.join(ROPE_SCALING_TYPES)})")
    base_swa = v["rope_freq_base_swa"]
    return {"rope_freq_base_swa": v["spec"].rope_freq_base_swa or v["rope_freq_base"] if base_swa is None else base_swa}


def _vocab(v: dict) -> dict:
    """The vocabulary size: vocab_size, else the tokenizer's token count."""
    n = v["n_vocab"]
    if n is None:
        tokens = v["metadata"].get("tokenizer.ggml.tokens")
        if not isinstance(tokens, (list, SkippedArray)) or not len(tokens):
            raise ModelError(f"missing metadata key '{v['arch']}.vocab_size' and no tokenizer.ggml.tokens to count")
        n = len(tokens)
    if n <= 0:
        raise ModelError(f"metadata: vocab size {n} must be positive")
    return {"n_vocab": n}


def _window(v: dict) -> dict:
    """The sliding window (the architecture's when the file names none) and the soft caps (likewise), checked."""
    spec, out = v["spec"], {}
    out["sliding_window"] = spec.sliding_window if v["sliding_window"] is None else v["sliding_window"]
    if out["sliding_window"] < 0:
        raise ModelError(f"metadata key '{v['arch']}.attention.sliding_window' must not be negative")
    for name, default in (("final_logit_softcap", spec.final_softcap), ("attn_logit_softcap", spec.attn_softcap)):
        out[name] = default if v[name] is None else v[name]
        if out[name] < 0:
            raise ModelError(f"metadata: {name} = {out[name]} must not be negative")
    pattern = v["sliding_window_pattern"]
    if isinstance(pattern, (list, np.ndarray)):
        out["sliding_window_pattern"] = tuple(p if isinstance(p, bool) else p.item() if isinstance(p, np.bool_)
                                              else p for p in pattern)
    return out


def _per_layer_embd(v: dict) -> dict:
    """gemma4's per-layer embedding width (0 for an architecture without), bounded."""
    n = v["n_embd_per_layer"] if v["spec"].per_layer_embd else 0
    if not 0 <= n <= 1 << 16:
        raise ModelError(f"metadata key '{v['arch']}.embedding_length_per_layer_input' = {n} must be in 0..65536")
    return {"n_embd_per_layer": n}


def _recurrent(v: dict) -> dict:
    """The Gated DeltaNet sizes (qwen35's ``load_arch_hparams``) and the rope sections, checked; the file's
    recurrent_layers as booleans."""
    a = v["arch"]
    if not v["spec"].recurrent:
        return {"rope_sections": None, "recurrent_layers": None}
    layers = _recurrent_layers(v)
    for name in ("ssm_d_conv", "ssm_d_state", "ssm_dt_rank", "ssm_n_group"):
        if not 0 < v[name] <= 1 << 16:
            raise ModelError(f"metadata: {name} = {v[name]} must be in 1..65536")
    if v["ssm_dt_rank"] * v["ssm_d_state"] ** 2 > MAX_STATE:
        raise ModelError(f"metadata: a DeltaNet state of ssm.time_step_rank = {v['ssm_dt_rank']} heads of "
                         f"ssm.state_size = {v['ssm_d_state']}² is more than {MAX_STATE} floats a layer")
    if v["ssm_dt_rank"] % v["ssm_n_group"] or v["ssm_d_inner"] != v["ssm_d_state"] * v["ssm_dt_rank"]:
        raise ModelError(f"metadata: ssm.group_count = {v['ssm_n_group']} must divide ssm.time_step_rank = "
                         f"{v['ssm_dt_rank']}, and ssm.inner_size = {v['ssm_d_inner']} be their head size "
                         f"{v['ssm_d_state']} times the latter")
    if v["spec"].q_gate and v["head_dim_k"] != v["head_dim_v"]:
        raise ModelError(f"metadata: the gated attention of {a} needs key_length = value_length")
    sections, rope = v["rope_sections"], v["rope_dim"]
    if not isinstance(sections, (list, np.ndarray)) or len(sections) != 4 or \
            not all(isinstance(x, (int, np.integer)) and 0 <= x <= rope for x in sections) or \
            not 0 < sum(int(x) for x in sections) <= rope // 2:
        raise ModelError(f"metadata key '{a}.rope.dimension_sections' must be 4 counts of rope pairs "
                         f"summing to 1..{rope // 2}, got {sections!r}")
    return {"rope_sections": tuple(int(x) for x in sections), "recurrent_layers": layers}


def _recurrent_layers(v: dict) -> tuple[bool, ...] | None:
    layers, n = v["recurrent_layers"], v["block_count"] - v["n_layer_nextn"]
    if layers is None:
        if v["full_attention_interval"] <= 0:
            raise ModelError(f"metadata key '{v['arch']}.full_attention_interval' = {v['full_attention_interval']} "
                             f"must be positive")
        return None
    if len(layers) != n or not all(isinstance(x, (bool, np.bool_)) for x in layers):
        raise ModelError(f"metadata key '{v['arch']}.attention.recurrent_layers' must be {n} booleans")
    return tuple(bool(x) for x in layers)


STEPS = (_check_sizes, _drop_nextn_layers, _ffn, _kv_heads, _head_sizes, _check_heads, _rope, _vocab, _window,
         _per_layer_embd, _recurrent)


# ----------------------------------------------------------------------------
# the plan of the layers: one function, a step per fact

def plan_layers(c: ModelConfig) -> tuple[LayerPlan, ...]:
    """Each layer's :class:`LayerPlan`: its mixer, its sliding window, its head sizes, rope, KV source and FFN
    width, as llama.cpp's loaders set them."""
    kinds, swa = layer_kinds(c), swa_layers(c)
    kv, rope = kv_sources(c, swa), rope_layers(c, swa)
    n_ff = min(c.feed_forward_length)
    return tuple(LayerPlan(kinds[il], *((c.head_dim_k_swa, c.head_dim_v_swa) if swa[il] else (c.head_dim_k,
                           c.head_dim_v)), swa[il], c.sliding_window if swa[il] else 0, rope[il], kv[il],
                           c.feed_forward_length[il] // n_ff) for il in range(c.n_layer))


def layer_kinds(c: ModelConfig) -> tuple[str, ...]:
    """Each layer's mixer: a Gated DeltaNet by ``attention.recurrent_layers``, else all but every
    ``full_attention_interval``-th (qwen35); a short convolution where head_count_kv is 0 (lfm2); else attention."""
    n = c.n_layer
    if c.spec.recurrent:
        delta = c.recurrent_layers or tuple((il + 1) % c.full_attention_interval != 0 for il in range(n))
        return tuple("delta" if d else "attention" for d in delta)
    return tuple("shortconv" if h == 0 else "attention" for h in c.head_count_kv)


def swa_layers(c: ModelConfig) -> tuple[bool, ...]:
    """Which layers use the sliding window (llama_hparams::set_swa_pattern, or the file's booleans)."""
    spec, pattern, n = c.spec, c.sliding_window_pattern, c.n_layer
    if not spec.swa_pattern or c.sliding_window == 0 or (spec.swa_n_layer and n != spec.swa_n_layer):
        return (False,) * n
    if isinstance(pattern, tuple):               # the reader's ARRAY[BOOL] is a numpy bool array
        if len(pattern) != n or not all(isinstance(p, bool) for p in pattern):
            raise ModelError(f"metadata key '{c.arch}.attention.sliding_window_pattern' must be {n} booleans")
        return pattern
    k = spec.swa_pattern if pattern is None else _check_value("sliding_window_pattern", pattern, int)
    # llama_hparams::set_swa_pattern: layer il is global when il % k == k - 1 (k = 0: all sliding)
    return tuple(k == 0 or il % k < k - 1 for il in range(n))


def kv_sources(c: ModelConfig, swa: tuple[bool, ...]) -> tuple[int, ...]:
    """The layer whose keys and values each layer reads: its own, or, for the last
    ``attention.shared_kv_layers`` (gemma4), the last earlier one of its kind (llama.cpp's ``reuse`` of
    ``llama_model::create_memory``: the layer before the first shared one if full attention, the one
    before that if sliding)."""
    n, shared = c.n_layer, c.n_kv_shared if c.spec.shared_kv else 0
    first = c.block_count - shared                # llama.cpp counts from block_count, MTP layers in
    if shared < 0 or (shared and first < 2):
        raise ModelError(f"metadata key '{c.arch}.attention.shared_kv_layers' = {shared}: at most block_count - 2 "
                         f"= {c.block_count - 2} layers can share")
    dims = [(c.head_dim_k_swa, c.head_dim_v_swa) if s else (c.head_dim_k, c.head_dim_v) for s in swa]
    out = []
    for il in range(n):
        src = il if il < first else first - (2 if swa[il] else 1)
        if swa[src] != swa[il] or dims[src] != dims[il]:
            raise ModelError(f"metadata: layer {il} shares the KV of layer {src}, which is not of its kind "
                             f"(attention.sliding_window_pattern, attention.shared_kv_layers = {shared})")
        out.append(src)
    return tuple(out)


def rope_layers(c: ModelConfig, swa: tuple[bool, ...]) -> tuple[bool, ...]:
    """Which layers rotate q and k: not smollm3's every ``no_rope_step``-th, not exaone4's global layers."""
    spec, with_swa = c.spec, any(swa)
    return tuple(not (spec.no_rope_step and (il + 1) % spec.no_rope_step == 0)
                 and not (spec.rope_swa_only and with_swa and not swa[il]) for il in range(c.n_layer))


def _check_value(key: str, value, typ):
    """``value`` as ``typ`` (int or float; bool is not an int here); per-layer arrays must be uniform."""
    if typ is None:
        return value
    if isinstance(value, (list, np.ndarray)) and typ in (int, float):
        value = _same_for_every_layer(key, value)
    if typ is str:
        if not isinstance(value, str):
            raise ModelError(f"metadata key {key!r} must be a string, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"metadata key {key!r} must be a number, got {value!r}")
    if typ is int:
        if value != int(value):
            raise ModelError(f"metadata key {key!r} must be an integer, got {value!r}")
        return int(value)
    if not math.isfinite(value):
        raise ModelError(f"metadata key {key!r} must be finite, got {value!r}")
    return float(value)


def _same_for_every_layer(key: str, value: list | np.ndarray):
    """The one value of a per-layer array (the reader's 1-D numpy array, or a list) whose layers agree."""
    if isinstance(value, np.ndarray):
        same = value.size > 0 and bool((value == value[0]).all())
        shown = value[:8].tolist()
    else:
        same = bool(value) and all(isinstance(v, (int, float)) and v == value[0] for v in value)
        shown = value[:8]
    if not same:
        raise ModelError(f"metadata key {key!r}: per-layer values {shown}... are not supported")
    return shown[0]


def _per_layer_ints(key: str, value, n_layer: int) -> list[int]:
    """A key's integer for every layer: one for all, or an array (the reader's numpy array, or a list) of
    exactly ``n_layer``, its length checked before its items."""
    if not isinstance(value, (list, np.ndarray)):
        return [_check_value(key, value, int)] * n_layer
    if len(value) != n_layer:
        raise ModelError(f"metadata key {key!r} has {len(value)} values, expected one per layer ({n_layer})")
    return [_check_value(key, v, int) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
