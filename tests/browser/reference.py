"""The CPython engine's replies, to compare with the page's: the same conversation through
pyengine.generation.ChatSession, greedy, in this process."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pyengine import generation
from pyengine.generation.sampling import SamplerParams
from pyengine.gguf import open_gguf
from pyengine.weights.budget import F32_BUDGET_PYODIDE, pick_weights

GREEDY = SamplerParams(temperature=0.0)


@lru_cache(maxsize=2)
def _engine(path: Path, weights: str) -> generation.Engine:
    if weights == "auto":                          # the form the page's "auto" picks (Pyodide's budgets)
        with open_gguf(path) as g:
            shapes = [(n, tuple(t.shape)) for n, t in g.tensors.items()]
        weights = pick_weights("auto", shapes, F32_BUDGET_PYODIDE)
    return generation.load(path, weights=weights)


def cpython_reply(path: Path, turns: list[str], max_tokens: int, system: str | None = None,
                  params: SamplerParams = GREEDY, weights: str = "f32") -> str:
    """The reply to the last of ``turns`` (user, assistant, user, ... ; earlier assistant turns as
    the page showed them), greedy unless ``params`` say otherwise, with the model's weights in
    form ``weights`` (pyengine.weights.budget.WEIGHT_FORMS, or "auto" as the page's default; float32 as the
    tests load by default, see browser/pages.py ``EXACT``)."""
    chat = generation.ChatSession(_engine(Path(path), weights), system=system)
    chat.messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns[:-1])]
    turn = chat.send(turns[-1], params, max_tokens)
    for _ in turn:
        pass
    return turn.text
