"""The tensors of each block kind: one table per kind, from which the rest is derived.

A row names a tensor as the GGUF does (after ``blk.{i}.`` for a block's), its ggml ``ne`` shape in the
terms of :func:`dims`, whether the model needs it (``REQ``) or takes it when present (``OPT``), the field of
the block object it fills (rows of one field are stacked, in table order: q, k, v into ``wqkv``), how one
worker's shard (:class:`~pyengine.model.shard.Shard`) reads it, and the layer flags it needs (:func:`flags`).
From these tables :mod:`pyengine.model.load` derives the tensor check, each shard's matrix pieces and the
blocks' keyword fields (picoGPT's ``**block``; tinygrad's ``convert_from_gguf`` key map). The names and
shapes follow llama.cpp's ``load_arch_tensors`` (``src/models/<arch>.cpp``).

How a shard reads a tensor (``read``), ``how [cut]``; ``cut`` (a key of :data:`CUTS`, none: all of it):

- ``rows``: a matrix (a weight form of :mod:`pyengine.weights`) of the rows ``cut`` gives;
- ``cols``: a matrix of all its rows and the columns ``cut`` gives (its product is summed over workers);
- ``vector``: float32, the elements ``cut`` gives (norms, biases);
- ``kernel``: a convolution's taps, float32 ``(channels, taps)``, the channels ``cut`` gives;
- ``file``: left in the file, its rows read per token (gemma4's per-layer token embeddings).
"""

from __future__ import annotations

from typing import NamedTuple

from pyengine.model.delta_net import channels


class Row(NamedTuple):
    name: str        # GGUF name; "{ffn_norm}", "{output_norm}": the ArchSpec's names of those norms
    shape: tuple     # ggml ne (columns first), in the names of dims()
    required: bool   # REQ: a file without it is refused; OPT: read when present
    field: str       # the block field it fills
    read: str        # how a shard reads it: "rows|cols|vector|kernel|file [cut]"
    when: str = ""   # the layer flags it needs, space-separated ("": every layer)


REQ, OPT = True, False

# the model's own tensors: Model fields
MODEL = [
    Row("token_embd.weight",           ("n_embd", "n_vocab"),    REQ, "token_embd",  "rows vocab"),
    Row("{output_norm}.weight",        ("n_embd",),              REQ, "output_norm", "vector"),
    Row("output.weight",               ("n_embd", "n_vocab"),    OPT, "output",      "rows vocab"),  # absent: tied
    Row("rope_freqs.weight",           ("n_rot/2",),             OPT, "rope_freqs",  "vector"),
]

# gemma4's per-layer embeddings: PerLayerEmbd fields, every worker holding them whole
PER_LAYER_EMBD = [
    Row("per_layer_token_embd.weight", ("n_pl_all", "n_vocab"),  REQ, "token_embd",  "file"),
    Row("per_layer_model_proj.weight", ("n_embd", "n_pl_all"),   REQ, "model_proj",  "rows"),
    Row("per_layer_proj_norm.weight",  ("n_pl",),                REQ, "proj_norm",   "vector"),
]

# what every block holds around its mixer and FFN: Block fields
BLOCK = [
    Row("attn_norm.weight",            ("n_embd",),              REQ, "attn_norm",      "vector", "pre_norms"),
    Row("post_attention_norm.weight",  ("n_embd",),              REQ, "post_attn_norm", "vector", "post_norms"),
    Row("{ffn_norm}.weight",           ("n_embd",),              REQ, "ffn_norm",       "vector", "pre_norms"),
    Row("post_ffw_norm.weight",        ("n_embd",),              REQ, "post_ffn_norm",  "vector", "post_norms"),
    Row("inp_gate.weight",             ("n_embd", "n_pl"),       REQ, "inp_gate",       "rows",   "per_layer"),
    Row("proj.weight",                 ("n_pl", "n_embd"),       REQ, "proj",           "rows",   "per_layer"),
    Row("post_norm.weight",            ("n_embd",),              REQ, "post_norm",      "vector", "per_layer"),
    Row("layer_output_scale.weight",   (1,),                     OPT, "out_scale",      "vector", "out_scale"),
]

def linear(name: str, n_out: str, fields: tuple[str, str], cut: str, when: str = "") -> list[Row]:
    """``name.weight`` (n_embd -> ``n_out``) cut by its rows, and ``name.bias``, optional, cut alike."""
    return [Row(f"{name}.weight", ("n_embd", n_out), REQ, fields[0], f"rows {cut}", when),
            Row(f"{name}.bias", (n_out,), OPT, fields[1], f"vector {cut}", when)]


def output(name: str, n_in: str, fields: tuple[str, str], cut: str) -> list[Row]:
    """``name.weight`` (``n_in`` -> n_embd) cut by its columns (summed over workers), and ``name.bias``, optional."""
    return [Row(f"{name}.weight", (n_in, "n_embd"), REQ, fields[0], f"cols {cut}"),
            Row(f"{name}.bias", ("n_embd",), OPT, fields[1], "vector")]


QKV, GATE_UP = ("wqkv", "bqkv"), ("w_gate_up", "b_gate_up")

# the mixers: Attention, ShortConv, DeltaNet fields
ATTENTION = [
    *linear("attn_q", "n_qg", QKV, "heads_q", "split_qkv"),
    *linear("attn_k", "n_k", QKV, "heads_k", "split_qkv own_kv"),
    *linear("attn_v", "n_v", QKV, "heads_v", "split_qkv own_kv"),
    *linear("attn_qkv", "n_qkv", QKV, "qkv", "fused_qkv"),
    Row("attn_q_norm.weight",  ("d_k",),            REQ, "q_norm", "vector",           "qk_norm"),
    Row("attn_k_norm.weight",  ("d_k",),            REQ, "k_norm", "vector",           "qk_norm own_kv"),
    Row("attn_q_norm.weight",  ("n_q",),            REQ, "q_norm", "vector heads_qn",  "qk_norm_full"),
    Row("attn_k_norm.weight",  ("n_k",),            REQ, "k_norm", "vector heads_k",   "qk_norm_full own_kv"),
    *output("attn_output", "n_o", ("wo", "bo"), "heads_o"),
]

SHORTCONV = [                      # lfm2 (llama_model_lfm2::load_arch_tensors)
    Row("shortconv.in_proj.weight",  ("n_embd", "3n_embd"), REQ, "conv_in",  "rows conv3"),
    Row("shortconv.conv.weight",     ("l_cache", "n_embd"), REQ, "conv",     "kernel conv"),
    Row("shortconv.out_proj.weight", ("n_embd", "n_embd"),  REQ, "conv_out", "cols conv"),
]

DELTA_NET = [                      # qwen35 (llama_model_qwen35::load_arch_tensors)
    Row("attn_qkv.weight",   ("n_embd", "ssm_c"),  REQ, "w_in",    "rows ssm_qkv"),
    Row("attn_gate.weight",  ("n_embd", "ssm_nv"), REQ, "w_in",    "rows ssm_v"),
    Row("ssm_beta.weight",   ("n_embd", "ssm_h"),  REQ, "w_in",    "rows ssm"),
    Row("ssm_alpha.weight",  ("n_embd", "ssm_h"),  REQ, "w_in",    "rows ssm"),
    Row("ssm_conv1d.weight", ("d_conv", "ssm_c"),  REQ, "conv",    "kernel ssm_qkv"),
    Row("ssm_dt.bias",       ("ssm_h",),           REQ, "dt_bias", "vector ssm"),
    Row("ssm_a",             ("ssm_h",),           REQ, "a",       "vector ssm"),
    Row("ssm_norm.weight",   ("ssm_d",),           REQ, "norm",    "vector"),
    Row("ssm_out.weight",    ("ssm_nv", "n_embd"), REQ, "w_out",   "cols ssm_v"),
]

# the FFNs: FFN fields (gated: SwiGLU or GEGLU; fused: phi3's ffn_up holding the gate rows, then the up rows)
FFN_TENSORS = [
    *linear("ffn_gate", "n_ff", GATE_UP, "ffn", "ffn_gated"),
    *linear("ffn_up", "n_ff", GATE_UP, "ffn", "ffn_gated"),
    Row("ffn_up.weight",     ("n_embd", "2n_ff"),  REQ, "w_gate_up", "rows ffn_fused",  "ffn_fused_up"),
    *output("ffn_down", "n_ff", ("w_down", "b_down"), "ffn"),
]

MIXERS = {"attention": ATTENTION, "shortconv": SHORTCONV, "delta": DELTA_NET}


def _run(a: int, b: int, unit: int, base: int = 0) -> tuple[int, int]:
    return base + a * unit, base + b * unit


# cut -> (shard, dims, rows of the tensor) -> the (first, end) runs of rows (or columns, or elements) it keeps
CUTS = {
    "":         lambda s, d, n: [(0, n)],
    "vocab":    lambda s, d, n: [s.vocab],
    "heads_q":  lambda s, d, n: [_run(*s.heads, d["d_q"])],          # (qwen35: each head's query and gate)
    "heads_qn": lambda s, d, n: [_run(*s.heads, d["d_k"])],
    "heads_o":  lambda s, d, n: [_run(*s.heads, d["d_v"])],
    "heads_k":  lambda s, d, n: [_run(*s.kv_heads, d["d_k"])],
    "heads_v":  lambda s, d, n: [_run(*s.kv_heads, d["d_v"])],
    "qkv":      lambda s, d, n: [_run(*s.heads, d["d_k"])] + ([_run(*s.kv_heads, d["d_k"], d["n_q"]),
                                  _run(*s.kv_heads, d["d_v"], d["n_q"] + d["n_k"])] if d["own_kv"] else []),
    "ffn":      lambda s, d, n: [_run(*s.ffn, d["ffn_mult"])],
    "ffn_fused": lambda s, d, n: [_run(*s.ffn, d["ffn_mult"], base) for base in (0, d["n_ff"])],
    "conv":     lambda s, d, n: [s.conv],
    "conv3":    lambda s, d, n: [_run(*s.conv, 1, part * d["n_embd"]) for part in range(3)],   # b, c, x
    "ssm":      lambda s, d, n: [s.ssm],
    "ssm_v":    lambda s, d, n: [_run(*s.ssm, d["ssm_d"])],
    "ssm_qkv":  lambda s, d, n: channels(*s.ssm, d["n_group"], d["ssm_d"]),
}


def dims(c, il: int = 0) -> dict[str, int]:
    """The sizes the tables' shapes and cuts name, at layer ``il`` of config ``c`` (its head sizes and FFN units)."""
    (dk, dv), spec, d, h = c.head_dims(il), c.spec, c.ssm_d_state, c.ssm_dt_rank
    nq, nk, nv, f = c.n_head * dk, c.n_head_kv * dk, c.n_head_kv * dv, c.n_ff_of(il)
    return {"n_embd": c.n_embd, "3n_embd": 3 * c.n_embd, "n_vocab": c.n_vocab, "n_rot/2": c.rope_dim // 2,
            "d_k": dk, "d_v": dv, "d_q": 2 * dk if spec.q_gate else dk, "n_q": nq, "n_k": nk, "n_v": nv,
            "n_qg": 2 * nq if spec.q_gate else nq, "n_o": c.n_head * dv, "n_qkv": nq + nk + nv,
            "n_ff": f, "2n_ff": 2 * f, "ffn_mult": c.ffn_mult[il], "n_pl": c.n_embd_per_layer,
            "n_pl_all": c.n_embd_per_layer * c.n_layer, "l_cache": c.shortconv_l_cache, "d_conv": c.ssm_d_conv,
            "ssm_c": 2 * c.ssm_n_group * d + h * d, "ssm_nv": h * d, "ssm_h": h, "ssm_d": d,
            "n_group": c.ssm_n_group, "own_kv": c.kv_layers[il] == il}


def flags(c, il: int, tensors=None) -> frozenset[str]:
    """The flags of layer ``il`` that pick its rows; ``tensors`` (the file's) says whether it holds q, k and v
    fused in one ``attn_qkv`` (phi3's GGUFs; llama.cpp takes either for any architecture)."""
    s = c.spec
    fused = tensors is not None and f"blk.{il}.attn_qkv.weight" in tensors
    on = {"pre_norms": s.pre_norms, "post_norms": s.post_norms, "per_layer": c.n_embd_per_layer > 0,
          "out_scale": s.out_scale, "qk_norm": s.qk_norm and not s.qk_norm_full,
          "qk_norm_full": s.qk_norm and s.qk_norm_full, "own_kv": c.kv_layers[il] == il,
          "fused_qkv": fused, "split_qkv": not fused, "ffn_fused_up": s.ffn_fused_up, "ffn_gated": not s.ffn_fused_up}
    return frozenset(k for k, v in on.items() if v)


class Tensor(NamedTuple):
    """A row of a table as it applies to one layer (or the model): its full name and ne shape."""
    name: str
    shape: tuple
    required: bool
    field: str
    read: str                      # rows, cols, vector, kernel or file
    cut: list                      # (first, end) runs of its rows, columns or elements this shard keeps


def rows_of(table: list[Row], c, il: int | None, on: frozenset[str], shard) -> list[Tensor]:
    """The rows of ``table`` that layer ``il`` (None: the model) with flags ``on`` holds, resolved at its sizes
    and cut for ``shard`` (None: not cut)."""
    d = dims(c, il or 0)
    prefix = "" if il is None else f"blk.{il}."
    out = []
    for row in table:
        if not set(row.when.split()) <= on:
            continue
        shape = tuple(d[x] if isinstance(x, str) else x for x in row.shape)
        how, *cut = row.read.split()
        runs = [] if shard is None else CUTS[cut[0] if cut else ""](shard, d, shape[-1])
        name = prefix + row.name.format(ffn_norm=c.spec.ffn_norm, output_norm=c.spec.output_norm)
        out.append(Tensor(name, shape, row.required, row.field, how, runs))
    return out
