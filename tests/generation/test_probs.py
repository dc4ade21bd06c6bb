"""Token probabilities: the distribution a token is drawn from after the penalties and the temperature,
before top-k/top-p/min-p (Sampler.probabilities), recorded per reply token (Generation.token_probs) and
printed by the CLI (--json --probs N)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from app.test_cli import run
from conftest import TINY

from pyengine.generation import generate, load
from pyengine.generation.request import Request
from pyengine.generation.sampling import Sampler, SamplerParams, softmax, top_probs

LOGITS = np.array([2.0, -1.0, 0.5, 3.0, 3.0, -4.0], dtype=np.float32)
HISTORY = [3, 5]


def test_probabilities_are_the_softmax_after_penalties_and_temperature_before_truncation():
    penalized = np.array([2.0, -1.0, 0.5, 3.0 / 1.5, 3.0, -4.0 * 1.5], dtype=np.float32)
    greedy = Sampler(SamplerParams(temperature=0, repeat_penalty=1.5, top_k=1))
    np.testing.assert_allclose(greedy.probabilities(LOGITS, HISTORY), softmax(penalized), rtol=1e-6)
    hot = Sampler(SamplerParams(temperature=0.5, repeat_penalty=1.5, top_k=2, top_p=0.5, min_p=0.5))
    p = hot.probabilities(LOGITS, HISTORY)
    np.testing.assert_allclose(p, softmax(penalized / np.float32(0.5)), rtol=1e-6)
    assert p.shape == (6,) and abs(p.sum() - 1) < 1e-12 and (p > 0).all()   # nothing truncated


def test_top_probs_are_the_likeliest_first_ties_by_id():
    p = softmax(LOGITS)
    assert [i for i, _ in top_probs(p, 3)] == [3, 4, 0]
    assert top_probs(p, 10) == sorted(((i, float(x)) for i, x in enumerate(p)), key=lambda t: (-t[1], t[0]))


@pytest.fixture(scope="module")
def engine():
    return load([str(TINY["llama"])], weights="f32")


@pytest.mark.parametrize("params", [SamplerParams(temperature=0), SamplerParams(temperature=0.9, seed=3)])
def test_each_reply_token_has_its_record(engine, params):
    gen = generate(engine, engine.tokenizer.encode("hello"), Request(params, 8, probs=4))
    text = "".join(gen)
    records = gen.token_probs
    assert [r["id"] for r in records] == gen.ids and len(records) == 8
    assert "".join(r["text"] for r in records) == text == gen.text
    for r in records:
        assert len(r["top"]) == 4 and r["top"] == sorted(r["top"], key=lambda t: -t["p"])
        assert r["token"] == engine.tokenizer.token_bytes(r["id"]).decode("utf-8", "replace")
        listed = {t["id"]: t["p"] for t in r["top"]}
        assert listed.get(r["id"], r["p"]) == r["p"] and (r["id"] in listed or r["p"] <= r["top"][-1]["p"])
    if params.temperature == 0:
        assert all(r["top"][0]["id"] == r["id"] for r in records)   # greedy: the likeliest token
    plain = generate(engine, engine.tokenizer.encode("hello"), Request(params, 8))
    assert "".join(plain) == text and plain.token_probs == []        # the records change nothing


def test_the_first_record_is_the_softmax_of_the_prompt_logits(engine):
    ids = engine.tokenizer.encode("hello")
    gen = generate(engine, ids, Request(SamplerParams(temperature=0), 1, probs=3))
    list(gen)
    logits = engine.model.forward(ids, engine.model.new_cache(64)).reshape(-1)
    want = top_probs(softmax(logits), 3)
    assert [(t["id"], t["p"]) for t in gen.token_probs[0]["top"]] == pytest.approx(want, rel=1e-5)


def test_cli_json_probs(monkeypatch, capsys):
    code, out, _ = run(["generate", str(TINY["llama"]), "-p", "hello", "-n", "5", "--json", "--probs", "3",
                        "--weights", "f32"], monkeypatch=monkeypatch, capsys=capsys)
    data = json.loads(out)
    assert code == 0 and [r["id"] for r in data["probs"]] == data["ids"]
    assert all(len(r["top"]) == 3 and r["top"][0]["id"] == r["id"] for r in data["probs"])
    code, _, err = run(["generate", str(TINY["llama"]), "-p", "hello", "--probs", "3"],
                       monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "goes with --json" in err
