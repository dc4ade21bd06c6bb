"""A model from a GGUF: the tensors it needs checked against its config, then its weights built.

Every tensor's shape is checked against the hyperparameters before anything
is read (a missing or misshapen tensor is a ModelError naming it). The weights
are then built in the forms the ``weights`` policy names
(:data:`pyengine.weights.budget.WEIGHT_FORMS`), after the wasm heap they will
take has been reserved at once. Norm weights are used as stored (the gemma3
GGUF conversion already added 1); a tied output shares the token embedding.
"""

from __future__ import annotations

import numpy as np

from pyengine.errors import ModelError
from pyengine.model.config import ModelConfig
from pyengine.model.transformer import Layer, Model
from pyengine.weights.budget import (
    HEAP_HEADROOM,
    WEIGHT_FORMS,
    form_nbytes,
    mixed_rows_for,
    pick_weights,
    reserve_heap,
    vocab_forms,
)
from pyengine.weights.build import Builder
from pyengine.weights.forms import Form


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



def load_model(gguf_file, progress=None, weights: str = "auto", ggml_rounding: bool = False) -> Model:
    """Build the model that ``gguf_file`` (a :class:`pyengine.gguf.GGUFFile`, or any object with
    ``metadata``, ``tensors`` and ``tensor(name)``) holds, in the weight policy ``weights``
    ("auto", or a key of ``WEIGHT_FORMS``).

    ``progress(done_tensors, total_tensors, done_bytes, total_bytes)`` is called as
    tensors are read (bytes as stored in the file). ``ggml_rounding`` rounds each
    matmul's activations as ggml's CPU backend does for the weight's type (8-bit
    blocks for quantized weights, ``matmul.round_activations``): logits then
    equal llama.cpp's to float rounding on small models. Deep quantized models
    turn any rounding difference into about 0.5 logit, so it is off by default;
    the packed forms round activations their own way and ignore it.
    Raises ModelError for an unsupported architecture, a missing key or tensor,
    or a tensor of the wrong shape; PyEngineError for an unknown ``weights``.
    """
    config = ModelConfig.from_metadata(gguf_file.metadata, gguf_file.tensors)
    return _Loader(gguf_file, config, progress, weights, ggml_rounding).load()


def check_tensors(gguf_file, config: ModelConfig) -> list[str]:
    """The names of the tensors the model reads, in load order, each checked against ``config``.
    Raises ModelError for a required tensor missing or any tensor of the wrong shape."""
    wanted = model_tensors(config)
    for name, ne, required in wanted:
        info = gguf_file.tensors.get(name)
        if info is None and required:
            raise ModelError(f"missing tensor {name!r} (the {config.arch} architecture needs it)")
        if info is not None and _squeeze(info.shape) != _squeeze(ne):
            raise ModelError(f"tensor {name!r} has shape {tuple(info.shape)}, expected {ne} "
                             f"from the metadata")
    return [n for n, _, _ in wanted if n in gguf_file.tensors]


class _Loader:
    """Reads every tensor once, reports progress, and lays the weights out for the hot loop."""

    def __init__(self, gguf_file, config: ModelConfig, progress, weights: str, ggml_rounding: bool):
        self.gf, self.config, self.progress = gguf_file, config, progress
        self.names = check_tensors(gguf_file, config)
        self.total_bytes = sum(gguf_file.tensors[n].n_bytes for n in self.names)
        self.done, self.done_bytes = 0, 0
        self.shapes = [(n, tuple(gguf_file.tensors[n].shape)) for n in self.names]
        self.weights = pick_weights(weights, self.shapes)
        file_bytes = sum(t.n_bytes for t in gguf_file.tensors.values())
        self.q8_0 = {n for n in self.names if gguf_file.tensors[n].type.name == "Q8_0"}
        self.packed_vocab_rows = mixed_rows_for(self.shapes, file_bytes, self.q8_0)
        self.build = Builder(gguf_file, ggml_rounding, tick=self._tick)

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

    def bias(self, names: list[str], weights: list[str]) -> np.ndarray | None:
        """The biases of stacked weights, zeros for a part without one; None when no part has one."""
        if not any(n in self.gf.tensors for n in names):
            return None
        return np.concatenate([self.vector(n) if n in self.gf.tensors else
                               np.zeros(self.gf.tensors[w].shape[1], np.float32) for n, w in zip(names, weights)])

    def matrix(self, form: Form, *parts: str, prefix: str = "") -> tuple:
        """The weights ``prefix + part + ".weight"`` stacked by rows in ``form``, and their biases."""
        names = [f"{prefix}{p}.weight" for p in parts]
        w = self.build.build(names, form, self.packed_vocab_rows)
        return w, self.bias([f"{prefix}{p}.bias" for p in parts], names)

    def layer(self, il: int) -> Layer:
        p, form = f"blk.{il}.", WEIGHT_FORMS[self.weights].layers
        attn_norm = self.vector(p + "attn_norm.weight")
        wqkv, bqkv = self.matrix(form, "attn_q", "attn_k", "attn_v", prefix=p)
        q_norm, k_norm = self.vector(p + "attn_q_norm.weight"), self.vector(p + "attn_k_norm.weight")
        wo, bo = self.matrix(form, "attn_output", prefix=p)
        post_attn_norm, ffn_norm = self.vector(p + "post_attention_norm.weight"), self.vector(p + "ffn_norm.weight")
        w_gate_up, b_gate_up = self.matrix(form, "ffn_gate", "ffn_up", prefix=p)
        w_down, b_down = self.matrix(form, "ffn_down", prefix=p)
        return Layer(attn_norm, wqkv, bqkv, q_norm, k_norm, wo, bo, post_attn_norm,
                     ffn_norm, w_gate_up, b_gate_up, w_down, b_down, self.vector(p + "post_ffw_norm.weight"),
                     swa=self.config.swa_layers[il])

    def load(self) -> Model:
        reserve_heap(form_nbytes(self.shapes, self.weights, self.packed_vocab_rows, self.q8_0) + HEAP_HEADROOM)
        if self.progress is not None:
            self.progress(0, len(self.names), 0, self.total_bytes)
        embd_form, out_form = vocab_forms(self.weights, self.gf.tensors)
        token_embd = self.build.build(["token_embd.weight"], embd_form, self.packed_vocab_rows)
        output_norm = self.vector("output_norm.weight")
        untied = "output.weight" in self.gf.tensors
        output = self.build.build(["output.weight"], out_form, self.packed_vocab_rows) if untied else token_embd
        rope_freqs = self.vector("rope_freqs.weight")
        layers = [self.layer(il) for il in range(self.config.n_layer)]
        model = Model(self.config, token_embd, layers, output_norm, output, rope_freqs)
        model.weights = self.weights
        return model
