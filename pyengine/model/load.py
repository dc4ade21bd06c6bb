"""A model from a GGUF: the tensors it needs checked against its config, then its weights built.

Every tensor the model reads is a row of a table of :mod:`pyengine.model.tensors` (one per block kind);
:func:`model_parts` lists each part's rows for the layer and the shard, and everything here is derived
from that list: the check of every shape before anything is read (a missing or misshapen tensor is a
ModelError naming it), each shard's matrix pieces (:func:`shard_matrices`: its rows of q, k, v and the
FFN gate and up, its columns of the attention output and FFN down, its vocabulary rows; the whole model
is the one shard of one worker) and the blocks' keyword fields. Each matrix takes the form the
``weights`` policy and the memory budget give it (:mod:`pyengine.weights.budget`), after the wasm heap
the weights will take has been reserved at once. Norm weights are used as stored (the gemma3 GGUF
conversion already added 1); a tied output shares the token embedding.
"""

from __future__ import annotations

import weakref

import numpy as np

from pyengine.errors import ModelError
from pyengine.model.config import ModelConfig
from pyengine.model.shard import Placement, Shard, whole_model
from pyengine.model.tensors import BLOCK, FFN_TENSORS, MIXERS, MODEL, PER_LAYER_EMBD, flags, rows_of
from pyengine.model.transformer import Model, ModelTensors
from pyengine.weights.budget import Matrix, default_budget, forms_nbytes, plan_forms, reserve_heap
from pyengine.weights.build import Builder, piece_nbytes
from pyengine.weights.rows import FileRows


def model_parts(c: ModelConfig, tensors=None, shard: Shard | None = None) -> list[tuple[int | None, str, list]]:
    """Every part of the model with its tensors (:class:`pyengine.model.tensors.Tensor`), in load order:
    ``(None, "model")``, ``(None, "per_layer")`` (gemma4's, else empty), then for each layer ``(il, "mixer")``,
    ``(il, "ffn")``, ``(il, "block")``. ``tensors`` (the file's) says which layers hold a fused ``attn_qkv``;
    ``shard`` cuts them (None: not cut)."""
    out = [(None, "model", rows_of(MODEL, c, None, frozenset(), shard)),
           (None, "per_layer", rows_of(PER_LAYER_EMBD, c, None, frozenset(), shard) if c.n_embd_per_layer else [])]
    for il in range(c.n_layer):
        on = flags(c, il, tensors)
        out += [(il, part, rows_of(table, c, il, on, shard))
                for part, table in (("mixer", MIXERS[c.layers[il].kind]), ("ffn", FFN_TENSORS), ("block", BLOCK))]
    return out


def model_tensors(c: ModelConfig, tensors=None) -> list[tuple[str, tuple, bool]]:
    """Every tensor the model reads: (GGUF name, ggml ne shape, required); ``tensors`` (the file's) says
    which layers hold a fused ``attn_qkv``."""
    return [(t.name, t.shape, t.required) for _, _, ts in model_parts(c, tensors) for t in ts]


def by_field(ts: list) -> list[tuple[str, list]]:
    """The tensors of one part grouped by the field they fill, in table order."""
    fields: dict[str, list] = {}
    for t in ts:
        fields.setdefault(t.field, []).append(t)
    return list(fields.items())


def _squeeze(shape) -> tuple:
    """A ggml ne shape without trailing 1s (ggml pads every shape to 4 dims with 1s)."""
    shape = tuple(shape)
    while len(shape) > 1 and shape[-1] == 1:
        shape = shape[:-1]
    return shape


def load_model(gguf_file, progress=None, weights: str = "auto", ggml_rounding: bool = False,
               budget: int | None = None, placement: Placement | None = None) -> Model:
    """Build the model that ``gguf_file`` (a :class:`pyengine.gguf.GGUFFile`, or any object with
    ``metadata``, ``tensors`` and ``tensor(name)``) holds, or only the shard ``placement`` names.

    ``weights``: one of ``weights.budget.CHOICES``; "auto" keeps float32 within
    ``budget`` bytes of weights (this worker's; default ``weights.budget.default_budget``), else the
    file's own codes (``plan_forms``);
    ``placement``: the shard, the forms of its matrices as ``plan_forms`` gave them (a helper worker takes
    the main worker's) and the communicator of a split model (``pyengine.parallel``); None: the whole model.
    ``progress(done_tensors, total_tensors, done_bytes, total_bytes)`` is called as
    tensors are read (bytes as stored in the file). ``ggml_rounding`` rounds each float32 matmul's
    activations as ggml's CPU backend does for the weight's type (``matmul.round_activations``):
    logits then equal llama.cpp's to float rounding on small models; off by default.
    Raises ModelError for an unsupported architecture, a missing key or tensor, or a tensor of the
    wrong shape; PyEngineError for an unknown ``weights``.
    """
    config = ModelConfig.from_metadata(gguf_file.metadata, gguf_file.tensors)
    placement = placement or Placement()
    shard = placement.shard or whole_model(config)
    if budget is None:
        budget = default_budget(held_nbytes(gguf_file.tensors), shard.count)
    loader = _Loader(gguf_file, config, shard, progress, ggml_rounding)
    return loader.load(weights, budget, Placement(shard, placement.forms, placement.comm))


UNSUPPORTED_TENSORS = ("rope_factors_long.weight", "rope_factors_short.weight")
IN_FILE = tuple(r.name for r in PER_LAYER_EMBD if r.read == "file")   # left in the file, read per token (gemma4)
MOE_TENSORS = (".ffn_gate_inp.weight", "_exps.weight")   # a router, experts (llama.cpp LLM_TENSOR_FFN_*_EXPS)


def held_nbytes(tensors) -> int:
    """Bytes (as stored) of the tensors a load brings into memory: all but those left in the file; what the
    memory budget is measured against."""
    return sum(t.n_bytes for name, t in tensors.items() if name not in IN_FILE)


_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()    # a file -> (config, its tensors, names) checked


def check_tensors(gguf_file, config: ModelConfig) -> list[str]:
    """The names of the tensors the model reads, in load order, each checked against ``config`` (once a file
    and config: a load after :func:`pyengine.generation.engine.check` does not check again).
    Raises ModelError for a required tensor missing or any tensor of the wrong shape."""
    done = _CHECKED.get(gguf_file)
    if done is not None and done[0] == config and done[1] == gguf_file.tensors:
        return list(done[2])
    names = _check_tensors(gguf_file, config)
    _CHECKED[gguf_file] = (config, dict(gguf_file.tensors), tuple(names))
    return names


def _check_tensors(gguf_file, config: ModelConfig) -> list[str]:
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
    """Every matrix of ``shard``: ``{key: (pieces, cols)}`` in load order, the key ``(field,)`` for the model's
    (``token_embd``, ``output`` when untied, gemma4's ``model_proj``) and ``(layer, field)`` for a block's;
    pieces are ``(tensor, first row, end row)`` stacked by rows, ``cols`` the columns kept (None: all)."""
    return _matrices(model_parts(config, tensors, shard), tensors)


def _matrices(parts: list, tensors) -> dict[tuple, tuple]:
    """:func:`shard_matrices` of the parts :func:`model_parts` gave: each field read by rows or columns."""
    out = {}
    for il, _, ts in parts:
        for field, group in by_field(ts):
            group = [t for t in group if t.read in ("rows", "cols") and (t.required or t.name in tensors)]
            key = (field,) if il is None else (il, field)
            if group and group[0].read == "cols":
                out[key] = ([(t.name, 0, t.shape[-1]) for t in group], group[0].cut[0])
            elif group:
                out[key] = ([(t.name, a, b) for t in group for a, b in t.cut], None)
    return out


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


def _vectors(parts: list, present) -> list:
    """The float32 tensors of ``parts`` (norms, biases, rope factors, convolution kernels) found in ``present``."""
    return [t for _, _, ts in parts for t in ts if t.read in ("vector", "kernel") and t.name in present]


def _nbytes(matrices: dict, vectors: list, tensors) -> int:
    """Bytes of the file the matrices' pieces and the float32 tensors stand for."""
    return sum(piece_nbytes(tensors[n], a, b, cols) for ps, cols in matrices.values() for n, a, b in ps) + \
        sum(tensors[t.name].n_bytes for t in vectors)


def load_nbytes(gguf_file, config: ModelConfig, shard: Shard) -> int:
    """The file's bytes a load of ``shard`` stands for (its progress' total): its rows' share of each
    matrix, and the float32 tensors whole."""
    parts = model_parts(config, gguf_file.tensors, shard)
    return _nbytes(_matrices(parts, gguf_file.tensors), _vectors(parts, gguf_file.tensors), gguf_file.tensors)


class _Loader:
    """Reads this shard's tensors once, reports progress, and lays the weights out for the hot loop."""

    def __init__(self, gguf_file, config: ModelConfig, shard: Shard, progress, ggml_rounding: bool):
        self.gf, self.config, self.shard, self.progress = gguf_file, config, shard, progress
        self.checked = set(check_tensors(gguf_file, config))   # only these are read: each was checked
        self.parts = model_parts(config, gguf_file.tensors, shard)
        self.matrices = _matrices(self.parts, gguf_file.tensors)
        vectors = _vectors(self.parts, self.checked)
        self.total_bytes = _nbytes(self.matrices, vectors, gguf_file.tensors)
        self.total = sum(len(ps) for ps, _ in self.matrices.values()) + len(vectors) + \
            bool(config.n_embd_per_layer)                # the per-layer token table, left in the file
        self.done, self.done_bytes = 0, 0
        self.build = Builder(gguf_file, ggml_rounding, tick=self._tick)

    def _tick(self, name: str, nbytes: int) -> None:
        self.done += 1
        self.done_bytes += nbytes
        if self.progress is not None:
            self.progress(self.done, self.total, self.done_bytes, self.total_bytes)

    def _read(self, name: str) -> np.ndarray:
        a = np.ascontiguousarray(self.gf.tensor(name), dtype=np.float32).reshape(-1)
        self._tick(name, self.gf.tensors[name].n_bytes)
        return a

    def rows(self, group: list, key: tuple, forms: dict):
        """A matrix in its form (None when this shard has no such matrix: an untied output absent)."""
        if key not in self.matrices:
            return None
        pieces, cols = self.matrices[key]
        return self.build.build(pieces, forms[key], cols)

    cols = rows                                  # a matrix cut by its columns: the same build, _matrices cut it

    def vector(self, group: list, key: tuple, forms: dict) -> np.ndarray | None:
        """The elements the cuts keep of the group's 1-D tensors as float32, stacked, zeros for a tensor absent
        (a bias of q but not of k); None when every one is absent (optional) or not one the model reads."""
        if not any(t.name in self.checked for t in group):
            return None
        runs = []
        for t in group:
            a = self._read(t.name) if t.name in self.checked else None
            runs += [np.zeros(b - r, np.float32) if a is None else a[r:b] for r, b in t.cut]
        if len(runs) == 1 and a is not None and runs[0].size == a.size:
            return a
        return np.concatenate(runs) if len(runs) > 1 else runs[0].copy()

    def kernel(self, group: list, key: tuple, forms: dict) -> np.ndarray | None:
        """A convolution's kernel, the channels the cut keeps: (C, taps) float32; None if absent."""
        t = group[0]
        if t.name not in self.checked:
            return None
        a = self._read(t.name).reshape(-1, t.shape[0])                   # (channels, taps)
        return np.ascontiguousarray(np.concatenate([a[r:b] for r, b in t.cut]))

    def file(self, group: list, key: tuple, forms: dict) -> FileRows:
        """A table left in the file, its rows read per token (gemma4's per-layer token embeddings)."""
        self._tick(group[0].name, 0)
        return FileRows(self.gf, group[0].name)

    def fields(self, il: int | None, ts: list, forms: dict) -> dict:
        """The fields of one part (``il`` None: the model's), each read as its table row says."""
        return {field: getattr(self, group[0].read)(group, (field,) if il is None else (il, field), forms)
                for field, group in by_field(ts)}

    def load(self, weights: str, budget: int, placement: Placement) -> Model:
        listed = budget_matrices(self.matrices, self.gf.tensors)
        forms = placement.forms
        policy, forms = (weights, forms) if forms is not None else plan_forms(listed, weights, budget)
        reserve_heap(forms_nbytes(listed, forms))
        if self.progress is not None:
            self.progress(0, self.total, 0, self.total_bytes)
        read = {(il, part): self.fields(il, ts, forms) for il, part, ts in self.parts}
        layers = [{part: read[il, part] for part in ("mixer", "ffn", "block")} for il in range(self.config.n_layer)]
        tensors = ModelTensors(read[None, "model"], read[None, "per_layer"], layers)
        return Model(self.config, tensors, Placement(self.shard, forms, placement.comm), policy)
