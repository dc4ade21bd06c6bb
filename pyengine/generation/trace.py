"""The trace of one step of a conversation, as the CLI prints it and the page draws it.

:func:`trace` runs :func:`pyengine.model.trace.trace_step` on a model and a token sequence (the
conversation's cache, or a fresh one) and turns its ids into the tokenizer's pieces::

    {"position": n, "token": piece read at n, "next": [id, piece] (the step's greedy answer),
     "tokens": [piece at 0, ..., piece at n],
     "layers": [{"layer", "kind", "note", "top": [[id, piece, prob], ...], "answer": [rank, prob],
                 "attention": heads x positions (from "first"), "first", "kv_layer", "state_norm",
                 "seconds", "ops": {kind: seconds}}, ...],
     "stages": {"embed": {...}, "output": {...}}, "ops": {kind: seconds}, "bytes": {matrix: bytes},
     "total_seconds", "weights", "workers"}
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyengine.errors import PyEngineError
from pyengine.model.trace import trace_step


def piece(tokenizer: Any, tid: int) -> str:
    """Token ``tid``'s own text (special tokens as their text), bad UTF-8 replaced."""
    return tokenizer.token_bytes(tid, special=True).decode("utf-8", "replace")


def trace(model: Any, tokenizer: Any, ids: list[int], position: int | None = None, heads: int | None = None,
          cache: Any = None) -> dict:
    """The trace of the step that reads ``ids[position]`` (default: the last id) on the keys and values of
    the ids before it: ``cache`` when given (left as it was), else a fresh cache. ``heads``: the q heads
    kept (the first ones). Raises PyEngineError for no ids, a position outside ``ids`` or the context (a fresh
    cache's: the model's trained context, ``n_ctx_train``), or heads < 1; before any step is run."""
    if not len(ids):
        raise PyEngineError("nothing to trace: the prompt gives no tokens")
    n = len(ids) - 1 if position is None else position
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < len(ids):
        raise PyEngineError(f"the position to trace must be 0..{len(ids) - 1} (the tokens' positions), got {n!r}")
    if heads is not None and (isinstance(heads, bool) or not isinstance(heads, int) or heads < 1):
        raise PyEngineError(f"heads must be a number of heads >= 1, got {heads!r}")
    n_ctx = model.config.n_ctx_train if cache is None else cache.n_ctx
    if n >= n_ctx:
        raise PyEngineError(f"position {n} is past the context of {n_ctx} tokens")
    cache = model.new_cache(n + 1) if cache is None else cache
    rec, logits = trace_step(model, cache, ids, n, heads)
    for layer in rec["layers"]:
        layer["top"] = [[i, piece(tokenizer, i), p] for i, p in layer["top"]]
        if "attention" in layer:
            layer["attention"] = layer["attention"].tolist()
        if "state_norm" in layer:
            layer["state_norm"] = [float(x) for x in layer["state_norm"]]
    final = int(np.argmax(logits))
    rec.pop("final")
    return {"position": n, "token": piece(tokenizer, int(ids[n])), "next": [final, piece(tokenizer, final)],
            "tokens": [piece(tokenizer, int(i)) for i in ids[:n + 1]], **rec,
            "weights": model.weights, "workers": getattr(model, "workers", 1)}
