"""A model from a GGUF: the tensors it needs checked against its config, then its weights built.

Every tensor's shape is checked against the hyperparameters before anything
is read (a missing or misshapen tensor is a ModelError naming it). A worker
then builds only its shard (``pyengine.model.shard``): its rows of q, k, v and
the FFN gate and up, its columns of the attention output and FFN down, its
vocabulary rows; the whole model is the one shard of one worker. Each matrix
takes the form the ``weights`` policy and the memory budget give it
(:mod:`pyengine.weights.budget`), after the wasm heap the weights will take has
been reserved at once. Norm weights are used as stored (the gemma3 GGUF
conversion already added 1); a tied output shares the token embedding.
"""

from __future__ import annotations

import numpy as np

from pyengine.errors import ModelError
from pyengine.model.config import ModelConfig
from pyengine.model.delta_net import DeltaNet, channels, key_heads
from pyengine.model.shard import Shard, whole
from pyengine.model.transformer import Layer, Model, PerLayerEmbd
from pyengine.weights.budget import HEAP_HEADROOM, Matrix, default_budget, forms_nbytes, plan_forms, reserve_heap
from pyengine.weights.build import Builder, piece_nbytes
from pyengine.weights.rows import FileRows


def layer_tensors(c: ModelConfig, il: int = 0, fused_qkv: bool = False) -> list[tuple[str, tuple, bool]]:
    """The tensors of block ``il``: (name after ``blk.N.``, ggml ne shape, required), at that layer's head
    sizes and FFN units. ``fused_qkv``: the file holds q, k and v in one ``attn_qkv`` (phi3's GGUFs;
    llama.cpp takes either for any architecture). A Gated DeltaNet block (:func:`delta_net_tensors`) or a
    short convolution (lfm2) stands in place of the attention; a layer reading another's KV (gemma4) has
    no k, v nor k norm of its own."""
    (dk, dv), f, spec = c.head_dims(il), c.n_ff_of(il), c.spec
    e, own_kv = c.n_embd, c.kv_layers[il] == il
    nq, nk, nv, no = c.n_head * dk, c.n_head_kv * dk, c.n_head_kv * dv, c.n_head * dv
    nqg = 2 * nq if spec.q_gate else nq                   # qwen35: each head's query and its gate
    qkv = [("attn_qkv.weight", (e, nq + nk + nv), True), ("attn_qkv.bias", (nq + nk + nv,), False)] if fused_qkv \
        else [("attn_q.weight", (e, nqg), True), ("attn_q.bias", (nqg,), False),
              ("attn_k.weight", (e, nk), True), ("attn_k.bias", (nk,), False),
              ("attn_v.weight", (e, nv), True), ("attn_v.bias", (nv,), False)]
    q_norm, k_norm = ((nq,), (nk,)) if spec.qk_norm_full else ((dk,), (dk,))
    gate_up = [("ffn_up.weight", (e, 2 * f), True)] if spec.ffn_fused_up \
        else [("ffn_gate.weight", (e, f), True), ("ffn_gate.bias", (f,), False),
              ("ffn_up.weight", (e, f), True), ("ffn_up.bias", (f,), False)]
    attn = [*qkv, ("attn_q_norm.weight", q_norm, True), ("attn_k_norm.weight", k_norm, True),
            ("attn_output.weight", (no, e), True), ("attn_output.bias", (e,), False)]
    if not spec.qk_norm:
        attn = [r for r in attn if r[0] not in ("attn_q_norm.weight", "attn_k_norm.weight")]
    if not own_kv:
        attn = [r for r in attn if not r[0].startswith(("attn_k", "attn_v"))]
    mixer = delta_net_tensors(c) if c.recurrent[il] else shortconv_tensors(c) if c.conv_layers[il] else attn
    rows = [("attn_norm.weight", (e,), spec.pre_norms), *mixer,
            ("post_attention_norm.weight", (e,), spec.post_norms),
            (spec.ffn_norm + ".weight", (e,), spec.pre_norms), *gate_up,
            ("ffn_down.weight", (f, e), True), ("ffn_down.bias", (e,), False),
            ("post_ffw_norm.weight", (e,), spec.post_norms), *per_layer_tensors(c)]
    out = {}
    for name, shape, required in rows:                    # a name twice (qwen35's ffn norm) once, required
        if required or name not in out:
            out[name] = (name, shape, required)
    skip = set()
    if not spec.post_norms:
        skip |= {"post_ffw_norm.weight"} | ({"post_attention_norm.weight"} - {spec.ffn_norm + ".weight"})
    if not spec.pre_norms:
        skip |= {"attn_norm.weight", "ffn_norm.weight"}
    return [r for n, r in out.items() if n not in skip]


def per_layer_tensors(c: ModelConfig) -> list[tuple[str, tuple, bool]]:
    """A block's per-layer embedding gate and projection, and its output scale (gemma4)."""
    e, n = c.n_embd, c.n_embd_per_layer
    scale = [("layer_output_scale.weight", (1,), False)] if c.spec.out_scale else []
    if not n:
        return scale
    return [("inp_gate.weight", (e, n), True), ("proj.weight", (n, e), True), ("post_norm.weight", (e,), True), *scale]


def delta_net_tensors(c: ModelConfig) -> list[tuple[str, tuple, bool]]:
    """The tensors of a Gated DeltaNet layer (llama.cpp ``llama_model_qwen35::load_arch_tensors``)."""
    e, h, d = c.n_embd, c.ssm_dt_rank, c.ssm_d_state
    nk, nv = c.ssm_n_group * d, h * d
    return [("attn_qkv.weight", (e, 2 * nk + nv), True), ("attn_gate.weight", (e, nv), True),
            ("ssm_beta.weight", (e, h), True), ("ssm_alpha.weight", (e, h), True),
            ("ssm_conv1d.weight", (c.ssm_d_conv, 2 * nk + nv), True), ("ssm_dt.bias", (h,), True),
            ("ssm_a", (h,), True), ("ssm_norm.weight", (d,), True), ("ssm_out.weight", (nv, e), True)]


def shortconv_tensors(c: ModelConfig) -> list[tuple[str, tuple, bool]]:
    """The tensors of a short-convolution block (llama.cpp ``llama_model_lfm2::load_arch_tensors``)."""
    e = c.n_embd
    return [("shortconv.in_proj.weight", (e, 3 * e), True), ("shortconv.conv.weight", (c.shortconv_l_cache, e), True),
            ("shortconv.out_proj.weight", (e, e), True)]


def model_tensors(c: ModelConfig, tensors=None) -> list[tuple[str, tuple, bool]]:
    """Every tensor the model reads: (GGUF name, ggml ne shape, required); ``tensors`` (the file's) says
    which layers hold a fused ``attn_qkv``."""
    names = [("token_embd.weight", (c.n_embd, c.n_vocab), True),
             (c.spec.output_norm + ".weight", (c.n_embd,), True),
             ("output.weight", (c.n_embd, c.n_vocab), False),
             ("rope_freqs.weight", (c.rope_dim // 2,), False)]
    if c.n_embd_per_layer:                                # gemma4's per-layer token embeddings
        n = c.n_embd_per_layer * c.n_layer
        names += [("per_layer_token_embd.weight", (n, c.n_vocab), True),
                  ("per_layer_model_proj.weight", (c.n_embd, n), True),
                  ("per_layer_proj_norm.weight", (c.n_embd_per_layer,), True)]
    for il in range(c.n_layer):
        fused = tensors is not None and f"blk.{il}.attn_qkv.weight" in tensors and not c.recurrent[il]
        names += [(f"blk.{il}.{n}", shape, req) for n, shape, req in layer_tensors(c, il, fused)]
    return names


def _squeeze(shape) -> tuple:
    """A ggml ne shape without trailing 1s (ggml pads every shape to 4 dims with 1s)."""
    shape = tuple(shape)
    while len(shape) > 1 and shape[-1] == 1:
        shape = shape[:-1]
    return shape



def load_model(gguf_file, progress=None, weights: str = "auto", ggml_rounding: bool = False,
               shard: Shard | None = None, budget: int | None = None, forms: dict | None = None,
               comm=None) -> Model:
    """Build the model that ``gguf_file`` (a :class:`pyengine.gguf.GGUFFile`, or any object with
    ``metadata``, ``tensors`` and ``tensor(name)``) holds, or only ``shard`` of it.

    ``weights``: one of ``weights.budget.CHOICES``; "auto" keeps float32 within
    ``budget`` bytes of weights (this worker's; default ``weights.budget.default_budget``), else the
    file's own codes (``plan_forms``);
    ``forms``: the form of each matrix, as ``plan_forms`` gave it (a helper worker takes the main
    worker's). ``progress(done_tensors, total_tensors, done_bytes, total_bytes)`` is called as
    tensors are read (bytes as stored in the file). ``ggml_rounding`` rounds each float32 matmul's
    activations as ggml's CPU backend does for the weight's type (``matmul.round_activations``):
    logits then equal llama.cpp's to float rounding on small models; off by default.
    ``comm`` sums a split model's partial results (``pyengine.parallel``).
    Raises ModelError for an unsupported architecture, a missing key or tensor, or a tensor of the
    wrong shape; PyEngineError for an unknown ``weights``.
    """
    config = ModelConfig.from_metadata(gguf_file.metadata, gguf_file.tensors)
    shard = shard or whole(config)
    if budget is None:
        budget = default_budget(held_nbytes(gguf_file.tensors), shard.count)
    return _Loader(gguf_file, config, shard, progress, ggml_rounding).load(weights, budget, forms, comm)


UNSUPPORTED_TENSORS = ("rope_factors_long.weight", "rope_factors_short.weight")
IN_FILE = "per_layer_token_embd.weight"   # left in the file, its rows read per token (gemma4)
MOE_TENSORS = (".ffn_gate_inp.weight", "_exps.weight")   # a router, experts (llama.cpp LLM_TENSOR_FFN_*_EXPS)


def held_nbytes(tensors) -> int:
    """Bytes (as stored) of the tensors a load brings into memory: all but those left in the file; what the
    memory budget is measured against."""
    return sum(t.n_bytes for name, t in tensors.items() if name != IN_FILE)


def check_tensors(gguf_file, config: ModelConfig) -> list[str]:
    """The names of the tensors the model reads, in load order, each checked against ``config``.
    Raises ModelError for a required tensor missing or any tensor of the wrong shape."""
    for name in UNSUPPORTED_TENSORS:
        if name in gguf_file.tensors:
            raise ModelError(f"tensor {name!r}: LongRoPE (Phi-3.5, Phi-4-mini) is not supported")
    experts = next((n for n in gguf_file.tensors if n.endswith(MOE_TENSORS)), None)
    if experts is not None:                               # (gemma4's 26B-A4B: the dense layers would run alone)
        raise ModelError(f"tensor {experts!r}: mixture-of-experts layers are not supported")
    wanted = model_tensors(config, gguf_file.tensors)
    for name, ne, required in wanted:
        info = gguf_file.tensors.get(name)
        if info is None and required:
            raise ModelError(f"missing tensor {name!r} (the {config.arch} architecture needs it)")
        if info is not None and _squeeze(info.shape) != _squeeze(ne):
            raise ModelError(f"tensor {name!r} has shape {tuple(info.shape)}, expected {ne} "
                             f"from the metadata")
    return [n for n, _, _ in wanted if n in gguf_file.tensors]


def shard_matrices(config: ModelConfig, tensors, shard: Shard) -> dict[tuple, tuple]:
    """Every matrix of ``shard``: ``{key: (pieces, cols)}`` in load order, the key ``("token_embd",)``,
    ``("output",)`` (untied only), ``("per_layer_model_proj",)`` (gemma4) or ``(layer, field)``; pieces are
    ``(tensor, first row, end row)`` stacked by rows, ``cols`` the columns kept (None: all)."""
    c = config
    (h0, h1), (g0, g1), (v0, v1) = shard.heads, shard.kv_heads, shard.vocab
    out = {("token_embd",): ([("token_embd.weight", v0, v1)], None)}
    if "output.weight" in tensors:
        out[("output",)] = ([("output.weight", v0, v1)], None)
    if c.n_embd_per_layer:                                # held whole by every worker, as the per-layer path
        out[("per_layer_model_proj",)] = ([("per_layer_model_proj.weight", 0, c.n_embd_per_layer * c.n_layer)], None)
    for il in range(c.n_layer):
        p, (dk, dv) = f"blk.{il}.", c.head_dims(il)
        if c.conv_layers[il]:
            out.update(conv_matrices(c, il, shard))
        elif c.recurrent[il]:                             # a Gated DeltaNet layer: this shard's value heads
            (j0, j1), d = shard.ssm, c.ssm_d_state
            qkv = [(p + "attn_qkv.weight", a, b) for a, b in channels(j0, j1, c.ssm_n_group, d)]
            out[(il, "wqkv")] = (qkv + [(p + "attn_gate.weight", j0 * d, j1 * d), (p + "ssm_beta.weight", j0, j1),
                                        (p + "ssm_alpha.weight", j0, j1)], None)
            out[(il, "wo")] = ([(p + "ssm_out.weight", 0, c.n_embd)], (j0 * d, j1 * d))
        elif c.spec.q_gate:                               # each head's query rows, then its gate rows
            out[(il, "wqkv")] = ([(p + "attn_q.weight", 2 * h0 * dk, 2 * h1 * dk), (p + "attn_k.weight", g0 * dk,
                                  g1 * dk), (p + "attn_v.weight", g0 * dv, g1 * dv)], None)
        elif c.kv_layers[il] != il:                       # the KV of an earlier layer: q only (first if fused)
            q = p + "attn_qkv.weight" if p + "attn_qkv.weight" in tensors else p + "attn_q.weight"
            out[(il, "wqkv")] = ([(q, h0 * dk, h1 * dk)], None)
        elif p + "attn_qkv.weight" in tensors:            # q, k, v stacked in one tensor
            nq, nk, fused = c.n_head * dk, c.n_head_kv * dk, p + "attn_qkv.weight"
            out[(il, "wqkv")] = ([(fused, h0 * dk, h1 * dk), (fused, nq + g0 * dk, nq + g1 * dk),
                                  (fused, nq + nk + g0 * dv, nq + nk + g1 * dv)], None)
        else:
            out[(il, "wqkv")] = ([(p + "attn_q.weight", h0 * dk, h1 * dk), (p + "attn_k.weight", g0 * dk, g1 * dk),
                                  (p + "attn_v.weight", g0 * dv, g1 * dv)], None)
        if not c.conv_layers[il] and not c.recurrent[il]:
            out[(il, "wo")] = ([(p + "attn_output.weight", 0, c.n_embd)], (h0 * dv, h1 * dv))
        out.update(ffn_matrices(c, il, shard))
        if c.n_embd_per_layer:
            out[(il, "inp_gate")] = ([(p + "inp_gate.weight", 0, c.n_embd_per_layer)], None)
            out[(il, "proj")] = ([(p + "proj.weight", 0, c.n_embd)], None)
    return out


def ffn_matrices(c: ModelConfig, il: int, shard: Shard) -> dict[tuple, tuple]:
    """Block ``il``'s FFN for ``shard``: its units' rows of gate and up, their columns of down (a layer of
    ``ffn_mult`` times n_ff units holds as many times the shard's units)."""
    p, m = f"blk.{il}.", c.ffn_mult[il]
    f0, f1 = shard.ffn[0] * m, shard.ffn[1] * m
    gate, up, n = (p + "ffn_up.weight", p + "ffn_up.weight", c.n_ff_of(il)) if c.spec.ffn_fused_up \
        else (p + "ffn_gate.weight", p + "ffn_up.weight", 0)
    return {(il, "w_gate_up"): ([(gate, f0, f1), (up, n + f0, n + f1)], None),
            (il, "w_down"): ([(p + "ffn_down.weight", 0, c.n_embd)], (f0, f1))}


def conv_matrices(c: ModelConfig, il: int, shard: Shard) -> dict[tuple, tuple]:
    """The matrices of lfm2's short-convolution block ``il`` for ``shard``'s channels ``e0..e1``: the rows
    of in_proj's three parts (b, c, x), the columns of out_proj."""
    (e0, e1), n, p = shard.conv, c.n_embd, f"blk.{il}.shortconv."
    rows = [(p + "in_proj.weight", part * n + e0, part * n + e1) for part in range(3)]
    return {(il, "conv_in"): (rows, None), (il, "conv_out"): ([(p + "out_proj.weight", 0, n)], (e0, e1))}


def budget_matrices(matrices: dict, tensors) -> list[Matrix]:
    """The matrices as the budget sees them: their parts (runs of pieces of one type, as the Builder
    holds them) with their rows, their columns."""
    out = []
    for key, (pieces, cols) in matrices.items():
        parts: list[list] = []
        for name, a, b in pieces:
            t = tensors[name].type.name
            if parts and parts[-1][0] == t:
                parts[-1][1] += b - a
            else:
                parts.append([t, b - a])
        n_in = (cols[1] - cols[0]) if cols else tensors[pieces[0][0]].shape[0]
        out.append(Matrix(key, tuple(map(tuple, parts)), n_in))
    return out


# 2-D tensors read whole as float32, not matrices of a product: the DeltaNet and short-convolution kernels
WHOLE = ("ssm_conv1d.weight", ".shortconv.conv.weight")


def vector_names(gguf_file, names: list[str]) -> list[str]:
    """The 1-D tensors among ``names``, and those of ``WHOLE``, read whole (norms, biases, rope
    factors, the DeltaNet's and the short convolutions' kernels)."""
    return [n for n in names if len(_squeeze(gguf_file.tensors[n].shape)) == 1 or n.endswith(WHOLE)]


def load_nbytes(gguf_file, config: ModelConfig, shard: Shard) -> int:
    """The file's bytes a load of ``shard`` stands for (its progress' total): its rows' share of each
    matrix, and the 1-D tensors whole."""
    pieces = [(p, cols) for ps, cols in shard_matrices(config, gguf_file.tensors, shard).values() for p in ps]
    vectors = vector_names(gguf_file, check_tensors(gguf_file, config))
    return sum(piece_nbytes(gguf_file.tensors[n], a, b, cols) for (n, a, b), cols in pieces) + \
        sum(gguf_file.tensors[n].n_bytes for n in vectors)


class _Loader:
    """Reads this shard's tensors once, reports progress, and lays the weights out for the hot loop."""

    def __init__(self, gguf_file, config: ModelConfig, shard: Shard, progress, ggml_rounding: bool):
        self.gf, self.config, self.shard, self.progress = gguf_file, config, shard, progress
        self.names = check_tensors(gguf_file, config)
        self.checked = set(self.names)           # only these are read: each was checked against the config
        self.matrices = shard_matrices(config, gguf_file.tensors, shard)
        self.total_bytes = load_nbytes(gguf_file, config, shard)
        self.total = sum(len(ps) for ps, _ in self.matrices.values()) + len(self.vectors()) + \
            bool(config.n_embd_per_layer)                # the per-layer token table, left in the file
        self.done, self.done_bytes = 0, 0
        self.build = Builder(gguf_file, ggml_rounding, tick=self._tick)

    def vectors(self) -> list[str]:
        return vector_names(self.gf, self.names)

    def _tick(self, name: str, nbytes: int) -> None:
        self.done += 1
        self.done_bytes += nbytes
        if self.progress is not None:
            self.progress(self.done, self.total, self.done_bytes, self.total_bytes)

    def vector(self, name: str, rows: tuple[int, int] | None = None) -> np.ndarray | None:
        """A 1-D tensor as float32 (elements ``rows`` only when given), or None when absent (optional) or
        not one the model reads (check_tensors did not list it)."""
        if name not in self.checked:
            return None
        a = np.ascontiguousarray(self.gf.tensor(name), dtype=np.float32).reshape(-1)
        self._tick(name, self.gf.tensors[name].n_bytes)
        return a if rows is None else a[rows[0]:rows[1]].copy()

    def bias(self, pieces: list) -> np.ndarray | None:
        """The biases of stacked pieces, zeros for a part without one; None when no part has one."""
        names = [n.replace(".weight", ".bias") for n, _, _ in pieces]
        if not any(n in self.checked for n in names):
            return None
        return np.concatenate([self.vector(n, (a, b)) if n in self.checked else np.zeros(b - a, np.float32)
                               for n, (_, a, b) in zip(names, pieces)])

    def kernel(self, name: str) -> np.ndarray | None:
        """A short convolution's kernel, this shard's channels: (e1 - e0, l_cache) float32; None if absent."""
        if name not in self.checked:
            return None
        (e0, e1), a = self.shard.conv, self.gf.tensor(name)
        self._tick(name, self.gf.tensors[name].n_bytes)
        return np.ascontiguousarray(np.asarray(a, np.float32).reshape(-1, self.config.shortconv_l_cache)[e0:e1])

    def matrix(self, key: tuple, forms: dict) -> tuple:
        """Matrix ``key`` of the shard in its form, and its bias (rows of it; whole for a column cut);
        (None, None) when this block has no such matrix (a short convolution's q, k, v)."""
        if key not in self.matrices:
            return None, None
        pieces, cols = self.matrices[key]
        w = self.build.build(pieces, forms[key], cols)
        if cols is None:
            return w, self.bias(pieces)
        return w, self.vector(pieces[0][0].replace(".weight", ".bias"))

    def delta_layer(self, il: int, forms: dict) -> Layer:
        """A Gated DeltaNet block: its own tensors, then the FFN's."""
        p, c, (j0, j1) = f"blk.{il}.", self.config, self.shard.ssm
        attn_norm = self.vector(p + "attn_norm.weight")
        w_in, _ = self.matrix((il, "wqkv"), forms)
        conv = self.vector(p + "ssm_conv1d.weight").reshape(-1, c.ssm_d_conv)     # (C, K)
        conv = np.concatenate([conv[a:b] for a, b in channels(j0, j1, c.ssm_n_group, c.ssm_d_state)])
        held = key_heads(j0, j1, c.ssm_n_group)
        key_of = np.array([held.index(j % c.ssm_n_group) for j in range(j0, j1)])
        delta = DeltaNet(w_in, conv, self.vector(p + "ssm_dt.bias", (j0, j1)), self.vector(p + "ssm_a", (j0, j1)),
                         self.vector(p + "ssm_norm.weight"), self.matrix((il, "wo"), forms)[0], key_of)
        ffn_norm = self.vector(p + c.spec.ffn_norm + ".weight")
        w_gate_up, b_gate_up = self.matrix((il, "w_gate_up"), forms)
        w_down, b_down = self.matrix((il, "w_down"), forms)
        return Layer(attn_norm, None, None, None, None, None, None, None, ffn_norm, w_gate_up, b_gate_up,
                     w_down, b_down, None, swa=False, rope=False, delta=delta)

    def layer(self, il: int, forms: dict) -> Layer:
        p, c = f"blk.{il}.", self.config
        if c.recurrent[il]:
            return self.delta_layer(il, forms)
        attn_norm = self.vector(p + "attn_norm.weight")
        wqkv, bqkv = self.matrix((il, "wqkv"), forms)
        (h0, h1), (g0, g1) = self.shard.heads, self.shard.kv_heads
        rows = ((h0 * c.head_dim_k, h1 * c.head_dim_k), (g0 * c.head_dim_k, g1 * c.head_dim_k)) \
            if c.spec.qk_norm_full else (None, None)            # olmo2: this shard's part of the norms
        q_norm, k_norm = self.vector(p + "attn_q_norm.weight", rows[0]), self.vector(p + "attn_k_norm.weight", rows[1])
        wo, bo = self.matrix((il, "wo"), forms)
        post_attn_norm = self.vector(p + "post_attention_norm.weight") if c.spec.post_norms else None
        ffn_norm = self.vector(p + c.spec.ffn_norm + ".weight")
        w_gate_up, b_gate_up = self.matrix((il, "w_gate_up"), forms)
        w_down, b_down = self.matrix((il, "w_down"), forms)
        conv_in, conv_out = self.matrix((il, "conv_in"), forms)[0], self.matrix((il, "conv_out"), forms)[0]
        return Layer(attn_norm, wqkv, bqkv, q_norm, k_norm, wo, bo, post_attn_norm,
                     ffn_norm, w_gate_up, b_gate_up, w_down, b_down, self.vector(p + "post_ffw_norm.weight"),
                     swa=c.swa_layers[il], rope=c.rope_layers[il],
                     conv_in=conv_in, conv=self.kernel(p + "shortconv.conv.weight"), conv_out=conv_out,
                     inp_gate=self.matrix((il, "inp_gate"), forms)[0], proj=self.matrix((il, "proj"), forms)[0],
                     post_norm=self.vector(p + "post_norm.weight"),
                     out_scale=self.vector(p + "layer_output_scale.weight"))

    def per_layer(self, forms: dict) -> PerLayerEmbd | None:
        """gemma4's per-layer embeddings: the token table left in the file, the projection and its norm."""
        if not self.config.n_embd_per_layer:
            return None
        self._tick(IN_FILE, 0)
        return PerLayerEmbd(FileRows(self.gf, IN_FILE),
                            self.matrix(("per_layer_model_proj",), forms)[0], self.vector("per_layer_proj_norm.weight"))

    def load(self, weights: str, budget: int, forms: dict | None, comm) -> Model:
        listed = budget_matrices(self.matrices, self.gf.tensors)
        policy, forms = (weights, forms) if forms is not None else plan_forms(listed, weights, budget)
        reserve_heap(forms_nbytes(listed, forms) + HEAP_HEADROOM)
        if self.progress is not None:
            self.progress(0, self.total, 0, self.total_bytes)
        token_embd, _ = self.matrix(("token_embd",), forms)
        output_norm = self.vector(self.config.spec.output_norm + ".weight")
        output = self.matrix(("output",), forms)[0] if ("output",) in self.matrices else token_embd
        rope_freqs = self.vector("rope_freqs.weight")
        per_layer = self.per_layer(forms)
        layers = [self.layer(il, forms) for il in range(self.config.n_layer)]
        model = Model(self.config, token_embd, layers, output_norm, output, rope_freqs, self.shard, comm, per_layer)
        model.weights, model.forms = policy, forms
        return model
