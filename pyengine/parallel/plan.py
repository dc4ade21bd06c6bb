"""Who holds which rows: each split matrix cut into one contiguous row range per worker.

Split are the vocabulary matrix (``model.output``: ``token_embd`` when tied,
else ``output.weight``) and, with ``layers``, each layer's ``wqkv``, ``wo``,
``w_gate_up`` and ``w_down`` (4 sync points per layer). The main worker keeps
the first range of each; helper i holds range i + 1, in the main model's exact
weight form (:func:`weight_spec`), read from the same file.
"""

from __future__ import annotations

from typing import Any

from pyengine.errors import PyEngineError
from pyengine.parallel.channel import MAX_SHARDS
from pyengine.weights.budget import vocab_tensor
from pyengine.weights.forms import F32, Int8Blocks, Int8Rows, Packed, RowSplit

R_MAX = 8               # rows of x per command on the vocabulary matrix (a longer batch: several commands)
LAYER_ROWS = 512        # rows of x per command on a layer's matrix (model UBATCH: a prompt step in one)

# a layer's matrices (pyengine.model.transformer.Layer fields) and the GGUF tensors stacked in each, by rows
LAYER_MATRICES = {
    "wqkv": ("attn_q", "attn_k", "attn_v"),
    "wo": ("attn_output",),
    "w_gate_up": ("ffn_gate", "ffn_up"),
    "w_down": ("ffn_down",),
}


def row_ranges(n_rows: int, n_workers: int, align: int = 1) -> list[tuple[int, int]]:
    """``n_rows`` cut into ``n_workers`` contiguous ``(lo, hi)`` ranges, sizes differing by at most
    ``align`` (every bound but the last a multiple of ``align``: 3 for packed rows).

    Range 0 (the main worker's) comes first. Raises PyEngineError for fewer than 1
    worker, more than ``MAX_SHARDS + 1``, or more workers than groups of rows.
    """
    groups = -(-n_rows // align)
    if not 1 <= n_workers <= MAX_SHARDS + 1 or n_workers > groups:
        raise PyEngineError(f"cannot split {n_rows} rows over {n_workers} workers (1..{MAX_SHARDS + 1})")
    base, extra = divmod(groups, n_workers)
    bounds = [0]
    for i in range(n_workers):
        bounds.append(bounds[-1] + base + (i < extra))
    bounds = [min(n_rows, b * align) for b in bounds]
    return list(zip(bounds[:-1], bounds[1:]))


def weight_spec(w: Any) -> dict | None:
    """How weight ``w`` holds its rows, for a helper to build its rows alike
    (:func:`pyengine.parallel.server.load_rows`): ``{"form": the Form's name, ...}`` with what that
    form needs (``act``; ``block``; ``col`` as a list; ``levels``; a RowSplit's ``parts``, each
    ``(first row, end row, spec)``). None for a weight that cannot be split."""
    if isinstance(w, RowSplit):
        specs = [weight_spec(p) for p in w.parts]
        bounds = w.starts.tolist()
        return None if None in specs else {"form": w.form.name, "parts": list(zip(bounds, bounds[1:], specs))}
    if isinstance(w, Packed):
        return {"form": w.form.name, "block": w.block, "levels": w.levels}
    if isinstance(w, Int8Rows):
        return {"form": w.form.name, "col": w.col.tolist(), "act": w.act}
    if isinstance(w, Int8Blocks):
        return {"form": w.form.name, "block": w.block, "act": w.act}
    if isinstance(w, F32):
        return {"form": w.form.name, "act": w.act}
    return None


def plan(model, tensor_names, n_workers: int, layers: bool = True) -> dict | None:
    """What every shard must load to split the model over ``n_workers`` workers, or None when
    ``model.output`` cannot be split (see :func:`weight_spec`).

    Returns ``{"matrices", "x_size", "out_size"}``. ``matrices[0]`` is the
    vocabulary matrix (``model.output``), then, with ``layers``, each layer's
    ``LAYER_MATRICES`` in order (None for one that cannot be split): each
    ``{"names": GGUF tensors stacked by rows, "ranges": (lo, hi) per worker,
    "form": weight_spec, "cap": rows of x per command, "n_in"}``. ``ranges[0]``
    stays in the main worker, ``ranges[i]`` goes to shard i - 1. ``x_size`` /
    ``out_size``: float32 elements of the input and output areas. Raises
    PyEngineError for a bad split.
    """
    out = model.output
    form = weight_spec(out)
    if form is None:
        return None
    n_vocab, n_embd = out.shape
    if n_vocab >= 1 << 24:
        raise PyEngineError(f"n_vocab {n_vocab}: token ids travel as float32, exact below 2**24")
    mats = [{"names": [vocab_tensor(tensor_names)], "ranges": row_ranges(n_vocab, n_workers, out.align),
             "form": form, "cap": R_MAX, "n_in": n_embd}]
    for il, layer in enumerate(model.layers if layers else []):
        for attr, parts in LAYER_MATRICES.items():
            w, names = getattr(layer, attr, None), [f"blk.{il}.{p}.weight" for p in parts]
            form = weight_spec(w)
            ok = form is not None and all(n in tensor_names for n in names) and -(-w.shape[0] // w.align) >= n_workers
            mats.append({"names": names, "ranges": row_ranges(w.shape[0], n_workers, w.align), "form": form,
                         "cap": LAYER_ROWS, "n_in": w.shape[1]} if ok else None)
    return {"matrices": mats,
            "x_size": max(m["cap"] * m["n_in"] for m in mats if m),
            "out_size": max(m["cap"] * m["ranges"][-1][1] for m in mats if m)}


def layer_matrix(model, i: int) -> tuple[Any, str]:
    """Matrix ``i`` (from 1) of a plan: (the layer, the field name)."""
    return model.layers[(i - 1) // len(LAYER_MATRICES)], list(LAYER_MATRICES)[(i - 1) % len(LAYER_MATRICES)]
