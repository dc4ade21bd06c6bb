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
from dataclasses import dataclass, field, fields

import numpy as np

from pyengine.errors import ModelError, UnsupportedArchitectureError

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
    ("n_layer",                "{arch}.block_count",                          int,   REQUIRED),
    ("n_ff",                   "{arch}.feed_forward_length",                  None,  REQUIRED),  # int or per layer
    ("n_head",                 "{arch}.attention.head_count",                 int,   REQUIRED),
    ("n_head_kv",              "{arch}.attention.head_count_kv",              None,  None),   # n_head; per layer
    ("head_dim_k",             "{arch}.attention.key_length",                 int,   None),   # n_embd / n_head
    ("head_dim_v",             "{arch}.attention.value_length",               int,   None),   # n_embd / n_head
    ("head_dim_k_swa",         "{arch}.attention.key_length_swa",             int,   None),   # head_dim_k
    ("head_dim_v_swa",         "{arch}.attention.value_length_swa",           int,   None),   # head_dim_v
    ("rms_eps",                "{arch}.attention.layer_norm_rms_epsilon",     float, REQUIRED),
    ("rope_freq_base",         "{arch}.rope.freq_base",                       float, 10000.0),
    ("rope_dim",               "{arch}.rope.dimension_count",                 int,   None),   # head_dim_k
    ("rope_dim_swa",           "{arch}.rope.dimension_count_swa",             int,   None),   # rope_dim
    ("rope_scaling_type",      "{arch}.rope.scaling.type",                    str,   "linear"),
    ("rope_scaling_factor",    "{arch}.rope.scaling.factor",                  float, 0.0),    # 0: none
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


@dataclass
class ModelConfig:
    """Hyperparameters of one model. Sizes are counts; ``head_dim_*`` and ``rope_dim`` are per head."""
    arch: str
    n_vocab: int
    n_ctx_train: int            # tokens the model was trained on
    n_embd: int
    n_layer: int
    n_ff: int                   # the smallest layer's FFN units; layer il has n_ff * ffn_mult[il]
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    head_dim_k_swa: int         # the head sizes of the sliding-window layers (gemma4's differ)
    head_dim_v_swa: int
    rms_eps: float
    rope_freq_base: float
    rope_dim: int               # leading dims of each q/k head that rope rotates
    rope_dim_swa: int           # the same in the sliding-window layers
    rope_scaling_type: str
    rope_scaling_factor: float  # linear: positions are divided by it (0 or 1: none)
    rope_scale_linear: float    # the factor under its older key, used when rope.scaling.factor is absent
    sliding_window: int         # tokens a sliding-window layer sees, itself included (0: none)
    sliding_window_pattern: object  # as in the file: an int, or per layer (an array or list of bools)
    rope_freq_base_swa: float
    final_logit_softcap: float  # logits = c * tanh(logits / c) when c > 0
    attn_logit_softcap: float   # attention scores = c * tanh(scores / c) when c > 0 (gemma2)
    embedding_scale: float      # token embeddings times this when > 0 (granite)
    residual_scale: float       # what attention and FFN add to the stream times this when > 0 (granite)
    logit_scale: float          # logits divided by this when > 0 (granite)
    attention_scale: float      # the file's attention.scale (granite; 0: none), see attn_scale
    shortconv_l_cache: int      # taps of the short convolutions: each sees itself and l_cache - 1 inputs before
    rope_sections: object       # as in the file: 4 counts of rope pairs (time, height, width, extra) or None
    full_attention_interval: int  # hybrid: every this-th layer is full attention
    recurrent_layers: object    # as in the file: per layer True for a Gated DeltaNet layer, or None
    ssm_d_conv: int             # taps of the DeltaNet's causal conv
    ssm_d_inner: int            # DeltaNet value width: v heads * head size
    ssm_d_state: int            # DeltaNet head size (keys and values)
    ssm_dt_rank: int            # DeltaNet value heads (each has its decay and beta)
    ssm_n_group: int            # DeltaNet key heads (value head h reads key head h % ssm_n_group)
    n_kv_shared: int            # the last n layers keep no KV of their own (gemma4)
    n_embd_per_layer: int       # width of each layer's per-layer token embedding (gemma4; 0: none)
    n_layer_nextn: int          # block_count's last layers that predict further tokens (MTP), not run here
    tied_output: bool | None = None  # output reuses token_embd (known from the tensors, None if not given)
    swa_layers: tuple = ()      # per layer: True when it uses the sliding window
    rope_layers: tuple = ()     # per layer: True when q and k are rotated (smollm3, exaone4: not all)
    conv_layers: tuple = ()     # per layer: True when it is a short convolution, not attention (lfm2)
    attn_scale: float = 0.0     # multiplies q before q·k (1/sqrt(head_dim_k) unless the arch says otherwise)
    recurrent: tuple = ()       # per layer: True for a Gated DeltaNet layer (hybrid architectures)
    ffn_mult: tuple = ()        # per layer: its FFN units are n_ff times this (gemma4's double-wide layers: 2)
    kv_layers: tuple = ()       # per layer: the layer whose keys and values it reads (itself, or shared: gemma4)
    spec: ArchSpec = field(default=None, repr=False)

    @property
    def rope_freq_scale(self) -> float:
        """Factor on positions before rope (llama.cpp ``freq_scale = 1 / rope.scaling.factor``)."""
        return 1.0 if self.rope_scaling_factor == 0.0 else 1.0 / self.rope_scaling_factor

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
        values = {"arch": arch}
        for name, key, typ, default in KEYS:
            key = key.format(arch=arch)
            if key in metadata:
                values[name] = _check_value(key, metadata[key], typ)
            elif default is REQUIRED or name in ARCHITECTURES[arch].required:
                raise ModelError(f"missing metadata key {key!r}: the {arch} architecture needs it")
            else:
                values[name] = default
        cfg = cls(**values)
        cfg.spec = ARCHITECTURES[arch]
        _derive(cfg, metadata)
        if tensor_names is not None:
            cfg.tied_output = "output.weight" not in tensor_names
        return cfg

    def head_dims(self, il: int) -> tuple[int, int]:
        """(Dk, Dv) of layer ``il``'s heads (llama.cpp ``n_embd_head_k(il)``, ``n_embd_head_v(il)``)."""
        if self.swa_layers[il]:
            return self.head_dim_k_swa, self.head_dim_v_swa
        return self.head_dim_k, self.head_dim_v

    def n_ff_of(self, il: int) -> int:
        """Layer ``il``'s FFN units (llama.cpp ``n_ff(il)``)."""
        return self.n_ff * self.ffn_mult[il]

    def summary(self) -> dict:
        """The fields as a plain dict (for inspect and the tests)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "spec"}


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


def _derive(cfg: ModelConfig, metadata: dict) -> None:
    """Fill the defaults that depend on other fields, then check the whole config is usable."""
    a = cfg.arch
    for name in ("n_embd", "n_layer", "n_head", "n_ctx_train"):
        if getattr(cfg, name) <= 0:
            raise ModelError(f"metadata: {name} = {getattr(cfg, name)} must be positive")
    if cfg.n_layer > MAX_LAYERS:
        raise ModelError(f"metadata key '{a}.block_count' = {cfg.n_layer}: at most {MAX_LAYERS} layers")
    _drop_nextn_layers(cfg)
    _derive_ffn(cfg)
    _derive_conv_layers(cfg)
    if cfg.n_head_kv is None:
        cfg.n_head_kv = cfg.n_head
    if cfg.n_head_kv <= 0 or cfg.n_head % cfg.n_head_kv:
        raise ModelError(f"metadata key '{a}.attention.head_count_kv' = {cfg.n_head_kv} "
                         f"must divide head_count = {cfg.n_head}")
    if cfg.head_dim_k is None:
        cfg.head_dim_k = cfg.n_embd // cfg.n_head
    if cfg.head_dim_v is None:
        cfg.head_dim_v = cfg.n_embd // cfg.n_head
    if cfg.rope_dim is None:
        cfg.rope_dim = cfg.head_dim_k
    cfg.head_dim_k_swa = cfg.head_dim_k if cfg.head_dim_k_swa is None else cfg.head_dim_k_swa
    cfg.head_dim_v_swa = cfg.head_dim_v if cfg.head_dim_v_swa is None else cfg.head_dim_v_swa
    cfg.rope_dim_swa = cfg.rope_dim if cfg.rope_dim_swa is None else cfg.rope_dim_swa
    for k, v, swa in ((cfg.head_dim_k, cfg.head_dim_v, ""), (cfg.head_dim_k_swa, cfg.head_dim_v_swa, "_swa")):
        if not 0 < k <= 1 << 16 or not 0 < v <= 1 << 16:
            raise ModelError(f"metadata: head sizes key_length{swa} = {k}, value_length{swa} = {v} must be in 1..65536")
    for rope, dk, swa in ((cfg.rope_dim, cfg.head_dim_k, ""), (cfg.rope_dim_swa, cfg.head_dim_k_swa, "_swa")):
        if rope <= 0 or rope % 2 or rope > dk:
            raise ModelError(f"metadata key '{a}.rope.dimension_count{swa}' = {rope} must be even "
                             f"and at most the key head size {dk}")
    if a == "llama" and cfg.rope_dim != cfg.head_dim_k:  # llama.cpp: "invalid n_rot"
        raise ModelError(f"metadata key 'llama.rope.dimension_count' = {cfg.rope_dim}: "
                         f"llama needs it equal to the head size {cfg.head_dim_k}")
    if cfg.rope_scaling_factor == 0.0:
        cfg.rope_scaling_factor = cfg.rope_scale_linear
    if cfg.rope_freq_base <= 0 or cfg.rope_scaling_factor < 0 or cfg.rms_eps < 0:
        raise ModelError("metadata: rope.freq_base, rope.scaling.factor and the rms epsilon must be positive")
    if cfg.rope_scaling_type not in ROPE_SCALING_TYPES:
        raise ModelError(f"metadata key '{a}.rope.scaling.type' = {cfg.rope_scaling_type!r} is not "
                         f"supported (supported: {', '.join(ROPE_SCALING_TYPES)})")
    if cfg.n_vocab is None:
        tokens = metadata.get("tokenizer.ggml.tokens")
        if not isinstance(tokens, list) or not tokens:
            raise ModelError(f"missing metadata key '{a}.vocab_size' and no tokenizer.ggml.tokens to count")
        cfg.n_vocab = len(tokens)
    if cfg.n_vocab <= 0:
        raise ModelError(f"metadata: vocab size {cfg.n_vocab} must be positive")
    _derive_attention(cfg)
    _derive_recurrent(cfg)


def _derive_recurrent(cfg: ModelConfig) -> None:
    """The Gated DeltaNet layers and their sizes, as llama.cpp's qwen35 loader reads them (its
    ``load_arch_hparams``: ``attention.recurrent_layers``, else every layer but each
    ``full_attention_interval``-th), and the rope sections checked."""
    a, n = cfg.arch, cfg.n_layer
    if not cfg.spec.recurrent:
        cfg.recurrent = (False,) * n
        return
    layers = cfg.recurrent_layers
    if layers is not None:
        if len(layers) != n or not all(isinstance(x, (bool, np.bool_)) for x in layers):
            raise ModelError(f"metadata key '{a}.attention.recurrent_layers' must be {n} booleans")
        cfg.recurrent = tuple(bool(x) for x in layers)
    else:
        step = cfg.full_attention_interval
        if step <= 0:
            raise ModelError(f"metadata key '{a}.full_attention_interval' = {step} must be positive")
        cfg.recurrent = tuple((il + 1) % step != 0 for il in range(n))
    for name in ("ssm_d_conv", "ssm_d_state", "ssm_dt_rank", "ssm_n_group"):
        if not 0 < getattr(cfg, name) <= 1 << 16:
            raise ModelError(f"metadata: {name} = {getattr(cfg, name)} must be in 1..65536")
    if cfg.ssm_dt_rank * cfg.ssm_d_state ** 2 > MAX_STATE:
        raise ModelError(f"metadata: a DeltaNet state of ssm.time_step_rank = {cfg.ssm_dt_rank} heads of "
                         f"ssm.state_size = {cfg.ssm_d_state}² is more than {MAX_STATE} floats a layer")
    if cfg.ssm_dt_rank % cfg.ssm_n_group or cfg.ssm_d_inner != cfg.ssm_d_state * cfg.ssm_dt_rank:
        raise ModelError(f"metadata: ssm.group_count = {cfg.ssm_n_group} must divide ssm.time_step_rank = "
                         f"{cfg.ssm_dt_rank}, and ssm.inner_size = {cfg.ssm_d_inner} be their head size "
                         f"{cfg.ssm_d_state} times the latter")
    if cfg.spec.q_gate and cfg.head_dim_k != cfg.head_dim_v:
        raise ModelError(f"metadata: the gated attention of {a} needs key_length = value_length")
    sections = cfg.rope_sections
    if not isinstance(sections, (list, np.ndarray)) or len(sections) != 4 or \
            not all(isinstance(x, (int, np.integer)) and 0 <= x <= cfg.rope_dim for x in sections) or \
            not 0 < sum(int(x) for x in sections) <= cfg.rope_dim // 2:
        raise ModelError(f"metadata key '{a}.rope.dimension_sections' must be 4 counts of rope pairs "
                         f"summing to 1..{cfg.rope_dim // 2}, got {sections!r}")
    cfg.rope_sections = tuple(int(x) for x in sections)


PER_LAYER_FIELDS = ("n_ff", "n_head_kv", "recurrent_layers", "sliding_window_pattern")


def _drop_nextn_layers(cfg: ModelConfig) -> None:
    """The model without its MTP layers (llama.cpp ``n_layer() = n_layer_all - n_layer_nextn``: the last
    ``nextn_predict_layers`` of ``block_count`` draft tokens for speculative decoding; the model's own
    layers come before them): n_layer counts the others, per-layer arrays keep their entries."""
    n_all, nextn = cfg.n_layer, cfg.n_layer_nextn
    if not 0 <= nextn < n_all:
        raise ModelError(f"metadata key '{cfg.arch}.nextn_predict_layers' = {nextn} must be in 0..{n_all - 1}")
    cfg.n_layer = n_all - nextn
    for name in PER_LAYER_FIELDS if nextn else ():
        value = getattr(cfg, name)
        if isinstance(value, (list, np.ndarray)) and len(value) == n_all:
            setattr(cfg, name, value[:cfg.n_layer])


def _per_layer_ints(key: str, value, n_layer: int) -> list[int]:
    """A key's integer for every layer: one for all, or an array (the reader's numpy array, or a list) of
    exactly ``n_layer``, its length checked before its items."""
    if not isinstance(value, (list, np.ndarray)):
        return [_check_value(key, value, int)] * n_layer
    if len(value) != n_layer:
        raise ModelError(f"metadata key {key!r} has {len(value)} values, expected one per layer ({n_layer})")
    return [_check_value(key, v, int) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]


def _derive_ffn(cfg: ModelConfig) -> None:
    """The FFN units of every layer: one ``feed_forward_length``, or one per layer, each a multiple of the
    smallest (gemma4's double-wide layers), so that a split cuts every layer at the same fractions."""
    key = f"{cfg.arch}.feed_forward_length"
    ff = _per_layer_ints(key, cfg.n_ff, cfg.n_layer)
    cfg.n_ff = min(ff)
    if cfg.n_ff <= 0 or max(ff) > 1 << 20:
        raise ModelError(f"metadata key {key!r}: FFN sizes {ff[:8]} must be in 1..{1 << 20}")
    if any(f % cfg.n_ff for f in ff):
        raise ModelError(f"metadata key {key!r}: per-layer FFN sizes {ff[:8]}... must be multiples of the smallest")
    cfg.ffn_mult = tuple(f // cfg.n_ff for f in ff)


def _derive_shared_kv(cfg: ModelConfig) -> None:
    """The layer whose keys and values each layer reads: its own, or, for the last
    ``attention.shared_kv_layers`` (gemma4), the last earlier one of its kind (llama.cpp's ``reuse`` of
    ``llama_model::create_memory``: the layer before the first shared one if full attention, the one
    before that if sliding). Per-layer embeddings checked here too."""
    a, n, shared = cfg.arch, cfg.n_layer, cfg.n_kv_shared if cfg.spec.shared_kv else 0
    if not cfg.spec.per_layer_embd:
        cfg.n_embd_per_layer = 0
    if not 0 <= cfg.n_embd_per_layer <= 1 << 16:
        raise ModelError(f"metadata key '{a}.embedding_length_per_layer_input' = {cfg.n_embd_per_layer} "
                         f"must be in 0..65536")
    first = n + cfg.n_layer_nextn - shared                # llama.cpp counts from block_count, MTP layers in
    if shared < 0 or (shared and first < 2):
        raise ModelError(f"metadata key '{a}.attention.shared_kv_layers' = {shared}: at most block_count - 2 "
                         f"= {n + cfg.n_layer_nextn - 2} layers can share")
    out = []
    for il in range(n):
        src = il if il < first else first - (2 if cfg.swa_layers[il] else 1)
        if cfg.swa_layers[src] != cfg.swa_layers[il] or cfg.head_dims(src) != cfg.head_dims(il):
            raise ModelError(f"metadata: layer {il} shares the KV of layer {src}, which is not of its kind "
                             f"(attention.sliding_window_pattern, attention.shared_kv_layers = {shared})")
        out.append(src)
    cfg.kv_layers = tuple(out)


def _derive_conv_layers(cfg: ModelConfig) -> None:
    """The short-convolution blocks (lfm2: head_count_kv 0, per layer or for all) and the KV heads of the
    attention blocks, which must agree (llama.cpp ``llama_model_lfm2::load_arch_hparams``)."""
    key, kv = f"{cfg.arch}.attention.head_count_kv", cfg.n_head_kv
    cfg.conv_layers = (False,) * cfg.n_layer
    if kv is not None and cfg.spec.shortconv:
        heads = _per_layer_ints(key, kv, cfg.n_layer)
        cfg.conv_layers = tuple(h == 0 for h in heads)
        kv = [h for h in heads if h] or None
        if any(cfg.conv_layers) and cfg.shortconv_l_cache < 2:
            raise ModelError(f"metadata key '{cfg.arch}.shortconv.l_cache' = {cfg.shortconv_l_cache} must be at "
                             f"least 2")
        if cfg.sliding_window:
            raise ModelError(f"metadata key '{cfg.arch}.attention.sliding_window': a sliding window on "
                             f"{cfg.arch} is not supported")
    cfg.n_head_kv = None if kv is None else _check_value(key, kv, int)


def _derive_attention(cfg: ModelConfig) -> None:
    """Sliding-window layers, their rope base, the layers with rope, the soft caps and the query scale,
    as llama.cpp's loaders set them (gemma2, gemma3, olmo2, exaone4, smollm3, granite)."""
    spec = cfg.spec
    if cfg.sliding_window is None:
        cfg.sliding_window = spec.sliding_window
    if cfg.sliding_window < 0:
        raise ModelError(f"metadata key '{cfg.arch}.attention.sliding_window' must not be negative")
    _derive_swa_layers(cfg)
    _derive_shared_kv(cfg)
    if cfg.rope_freq_base_swa is None:
        cfg.rope_freq_base_swa = spec.rope_freq_base_swa or cfg.rope_freq_base
    with_swa = any(cfg.swa_layers)
    cfg.rope_layers = tuple(not (spec.no_rope_step and (il + 1) % spec.no_rope_step == 0)
                            and not (spec.rope_swa_only and with_swa and not cfg.swa_layers[il])
                            for il in range(cfg.n_layer))
    for name, default in (("final_logit_softcap", spec.final_softcap), ("attn_logit_softcap", spec.attn_softcap)):
        if getattr(cfg, name) is None:
            setattr(cfg, name, default)
        if getattr(cfg, name) < 0:
            raise ModelError(f"metadata: {name} = {getattr(cfg, name)} must not be negative")
    # gemma_pytorch config.py: query_pre_attn_scalar is n_embd / n_head for the 27Bs (46, 62 layers)
    if cfg.attention_scale:
        cfg.attn_scale = cfg.attention_scale
    elif spec.query_scale:
        cfg.attn_scale = spec.query_scale
    elif spec.big_n_layer and cfg.n_layer == spec.big_n_layer:
        cfg.attn_scale = 1.0 / math.sqrt(cfg.n_embd // cfg.n_head)
    else:
        cfg.attn_scale = 1.0 / math.sqrt(cfg.head_dim_k)


def _derive_swa_layers(cfg: ModelConfig) -> None:
    """Which layers use the sliding window (llama_hparams::set_swa_pattern, or the file's booleans)."""
    spec, pattern = cfg.spec, cfg.sliding_window_pattern
    if not spec.swa_pattern or cfg.sliding_window == 0 or (spec.swa_n_layer and cfg.n_layer != spec.swa_n_layer):
        cfg.swa_layers = (False,) * cfg.n_layer
        cfg.sliding_window = 0
    elif isinstance(pattern, (list, np.ndarray)):  # the reader's ARRAY[BOOL] is a numpy bool array
        bools = pattern.dtype == bool if isinstance(pattern, np.ndarray) else all(isinstance(p, bool) for p in pattern)
        if len(pattern) != cfg.n_layer or not bools:
            raise ModelError(f"metadata key '{cfg.arch}.attention.sliding_window_pattern' must be "
                             f"{cfg.n_layer} booleans")
        cfg.swa_layers = tuple(bool(p) for p in pattern)
    else:
        n = spec.swa_pattern if pattern is None else _check_value("sliding_window_pattern", pattern, int)
        # llama_hparams::set_swa_pattern: layer il is global when il % n == n - 1 (n = 0: all sliding)
        cfg.swa_layers = tuple(n == 0 or il % n < n - 1 for il in range(cfg.n_layer))
