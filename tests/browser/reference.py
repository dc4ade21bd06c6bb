"""The CPython engine's replies, to compare with the page's: the same conversation through
pyengine.generation.ChatSession, greedy, in this process, or through the CLI (``python -m pyengine chat``)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np
from split_threads import start

from pyengine import generation
from pyengine.generation.engine import Engine, text_parts
from pyengine.generation.request import Request
from pyengine.generation.sampling import SamplerParams
from pyengine.gguf import open_gguf

GREEDY = SamplerParams(temperature=0.0)
NEAR_TIE = 0.1       # a top-2 logit margin under this may flip with the summation order


@lru_cache(maxsize=2)
def _engine(path: Path, weights: str, workers: int) -> Engine:
    """The model in form ``weights`` as the page holds it in ``workers`` workers ("auto": within the page's
    budget; several workers: the helpers are threads of this process, see split_threads.py)."""
    g = open_gguf(path)
    model = start(path, workers, weights)[0]
    return Engine(g, model, *text_parts(g))


def _turn(path: Path, turns: list[str], max_tokens: int, system: str | None = None,
          params: SamplerParams = GREEDY, weights: str = "f32", workers: int = 1):
    chat = generation.ChatSession(_engine(Path(path), weights, workers), system=system)
    chat.messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns[:-1])]
    turn = chat.send(turns[-1], Request(params, max_tokens))
    for _ in turn:
        pass
    return chat, turn


def reply_before_near_tie(path: Path, turns: list[str], max_tokens: int, weights: str, workers: int = 1) -> str:
    """The start of the greedy reply (as :func:`cpython_reply`) up to its first step whose top-2 logit
    margin is under NEAR_TIE: what the page must reply too in a form that rounds activations to 8 bits,
    whose last bits numpy 2.0 (Pyodide) and 2.4 (here) sum differently (see browser/pages.py ``EXACT``)."""
    chat, turn = _turn(path, turns, max_tokens, weights=weights, workers=workers)
    model = chat.engine.model
    cache = model.new_cache(len(turn.prompt_ids) + len(turn.ids) + 1)
    logits = model.forward(list(turn.prompt_ids), cache)
    for k, tid in enumerate(turn.ids):
        top2 = np.partition(logits, -2)[-2:]
        if top2[1] - top2[0] < NEAR_TIE:
            return chat.engine.tokenizer.decode(turn.ids[:k])
        logits = model.forward([tid], cache)
    return turn.text


def cpython_reply(path: Path, turns: list[str], max_tokens: int, system: str | None = None,
                  params: SamplerParams = GREEDY, weights: str = "f32", workers: int = 1) -> str:
    """The reply to the last of ``turns`` (user, assistant, user, ... ; earlier assistant turns as
    the page showed them), greedy unless ``params`` say otherwise, with the model's weights in
    form ``weights`` (pyengine.weights.budget.WEIGHT_FORMS, or "auto" as the page's default; float32 as the
    tests load by default, see browser/pages.py ``EXACT``)."""
    return _turn(path, turns, max_tokens, system, params, weights, workers)[1].text


def cli_chat(path: Path, turns: list[str], max_tokens: int, *options: str) -> dict:
    """What ``python -m pyengine chat PATH --messages FILE --json -n max_tokens --temp 0 --weights f32
    [options]`` prints (its JSON) for the conversation ``turns`` (user, assistant, user, ...): the CLI's
    greedy reply to the last one, as a person would run it."""
    with tempfile.TemporaryDirectory() as tmp:
        messages = Path(tmp) / "messages.json"
        messages.write_text(json.dumps([{"role": "user" if i % 2 == 0 else "assistant", "content": t}
                                        for i, t in enumerate(turns)]))
        out = subprocess.run([sys.executable, "-m", "pyengine", "chat", str(path), "--messages", str(messages),
                              "--json", "-n", str(max_tokens), "--temp", "0", "--weights", "f32", *options],
                             capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], check=True)
    return json.loads(out.stdout)
