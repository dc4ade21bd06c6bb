"""Sampling: each step of llama.cpp's chain on hand-made logits, greedy, the seed."""

from __future__ import annotations

import base64
import hashlib
import json
import zlib

import numpy as np
import pytest
from conftest import GOLDEN

from pyengine.errors import PyEngineError
from pyengine.generation.sampling import Sampler, SamplerParams, apply_penalties, min_p, top_k, top_p

# probabilities 0.5, 0.3, 0.15, 0.05 at ids 2, 0, 3, 1 (an unsorted vocab)
PROBS = np.array([0.3, 0.05, 0.5, 0.15])
LOGITS = np.log(PROBS).astype(np.float32) + np.float32(7.0)


def all_candidates(logits):
    return np.arange(len(logits)), logits, False


def test_greedy_is_argmax_after_penalties():
    s = Sampler(SamplerParams(temperature=0.0))
    assert s.sample(LOGITS) == 2
    logits = np.array([1.0, 2.9, 3.0], np.float32)
    assert Sampler(SamplerParams(temperature=0, repeat_penalty=1.1)).sample(logits, [2]) == 1  # 3.0/1.1 < 2.9


def test_repetition_penalty_divides_positive_multiplies_negative():
    logits = np.array([2.0, -1.0, 0.5, 3.0, 0.0], np.float32)
    out = apply_penalties(logits, [0, 1, 1, 4], 2.0, 64)
    assert out.tolist() == [1.0, -2.0, 0.5, 3.0, 0.0]       # each recent id once; 0 stays 0
    assert logits.tolist() == [2.0, -1.0, 0.5, 3.0, 0.0]    # the input is not touched
    assert apply_penalties(logits, [0, 3], 2.0, 1).tolist() == [2.0, -1.0, 0.5, 1.5, 0.0]   # last 1 token only
    assert apply_penalties(logits, [0, 3], 2.0, -1).tolist() == [1.0, -1.0, 0.5, 1.5, 0.0]  # -1: all history
    assert apply_penalties(logits, [0, 3], 2.0, 0) is logits                                 # 0: off
    assert apply_penalties(logits, [0, 3], 1.0, 64) is logits                                # 1.0: off


def test_top_k_keeps_the_k_largest_sorted():
    ids, vals, is_sorted = top_k(LOGITS, 2)
    assert ids.tolist() == [2, 0] and is_sorted
    assert vals.tolist() == [LOGITS[2], LOGITS[0]]
    assert top_k(LOGITS, 0)[0].tolist() == [0, 1, 2, 3]
    assert top_k(LOGITS, 10)[0].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("k, scale, ties", [(40, 3.0, False), (1, 0.5, False), (40, 2.0, True), (100, 0.01, False)])
def test_top_k_on_a_wide_vocab_equals_a_full_sort(k, scale, ties):
    logits = (np.random.default_rng(k).standard_normal(262_144) * scale).astype(np.float32)
    if ties:
        logits = np.round(logits)                      # thousands of equal logits at the k-th place
    ids, vals, _ = top_k(logits, k)
    assert vals.tolist() == np.sort(logits)[::-1][:k].tolist()
    assert len(set(ids.tolist())) == k and logits[ids].tolist() == vals.tolist()


@pytest.mark.parametrize("p, kept", [(0.4, [2]), (0.75, [2, 0]), (0.9, [2, 0, 3]), (0.99, [2, 0, 3, 1]),
                                     (1.0, [0, 1, 2, 3])])
def test_top_p_keeps_the_shortest_prefix_reaching_p(p, kept):
    assert top_p(*all_candidates(LOGITS), p)[0].tolist() == kept


def test_top_p_on_a_wide_vocab_looks_past_the_first_256():
    rng = np.random.default_rng(5)
    logits = rng.permutation(np.linspace(0.0, -2.0, 5000)).astype(np.float32)   # flat: p=0.5 needs ~1/3 of it
    ids, _, _ = top_p(*all_candidates(logits), 0.5)
    order = np.argsort(-logits, kind="stable")
    probs = np.exp(logits[order].astype(np.float64)) / np.exp(logits.astype(np.float64)).sum()
    n = int(np.searchsorted(np.cumsum(probs), 0.5)) + 1
    assert n > 256 * 8 // 2 and ids.tolist() == order[:n].tolist()


@pytest.mark.parametrize("p, kept", [(0.05, [0, 1, 2, 3]), (0.2, [0, 2, 3]), (0.5, [0, 2]), (0.7, [2])])
def test_min_p_keeps_tokens_within_p_of_the_top(p, kept):
    # relative to the top (0.5): 0.6, 0.1, 1.0, 0.3
    assert sorted(min_p(*all_candidates(LOGITS), p)[0].tolist()) == kept


def test_chain_order_top_k_then_top_p_renormalizes():
    # after top-k 2 the survivors are 0.5/0.8 = 0.625 and 0.375: top-p 0.6 keeps one token only
    s = Sampler(SamplerParams(temperature=1.0, top_k=2, top_p=0.6, min_p=0.0, seed=0))
    assert {s.sample(LOGITS) for _ in range(50)} == {2}
    s = Sampler(SamplerParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0, seed=0))
    assert {s.sample(LOGITS) for _ in range(200)} == {0, 2, 3}


def test_temperature_sharpens_and_flattens():
    hot = Sampler(SamplerParams(temperature=100.0, top_k=0, top_p=1.0, min_p=0.0, seed=1))
    cold = Sampler(SamplerParams(temperature=0.05, top_k=0, top_p=1.0, min_p=0.0, seed=1))
    assert {hot.sample(LOGITS) for _ in range(200)} == {0, 1, 2, 3}
    assert {cold.sample(LOGITS) for _ in range(200)} == {2}      # 0.5 vs 0.3 at T=0.05: (3/5)^20 odds


def test_seed_repeats_runs():
    logits = np.random.default_rng(0).standard_normal(262_144).astype(np.float32)
    params = SamplerParams(temperature=1.0, top_k=40, top_p=0.95, min_p=0.0, seed=1234)
    runs = [[s.sample(logits, [1, 2]) for _ in range(20)] for s in (Sampler(params), Sampler(params))]
    assert runs[0] == runs[1] and len(set(runs[0])) > 3
    assert set(runs[0]) <= set(np.argsort(-logits)[:40].tolist())
    firsts = [Sampler(SamplerParams(**{**vars(params), "seed": seed})).sample(logits) for seed in range(8)]
    assert len(set(firsts)) > 1


def test_distribution_is_what_sample_draws_from():
    logits = np.random.default_rng(2).standard_normal(5000).astype(np.float32)
    params = SamplerParams(temperature=0.7, top_k=40, top_p=0.9, min_p=0.02, repeat_penalty=1.2, seed=9)
    ids, probs = Sampler(params).distribution(logits, [3, 4])
    assert probs.dtype == np.float64 and abs(probs.sum() - 1) < 1e-12 and len(set(ids.tolist())) == len(ids)
    assert set(ids.tolist()) == set(our_survivors(logits, params, [3, 4]))       # the chain's survivors
    a, b = Sampler(params), Sampler(params)
    assert [a.sample(logits, [3, 4]) for _ in range(30)] == [b.draw(ids, probs) for _ in range(30)]
    ids, probs = Sampler(SamplerParams(temperature=0, repeat_penalty=1.1)).distribution(
        np.array([1.0, 2.9, 3.0], np.float32), [2])
    assert ids.tolist() == [1] and probs.tolist() == [1.0]                        # greedy: a point mass


# --- against llama.cpp's own samplers (src/llama-sampler.cpp; golden/reference.json) -------------
# golden/make_reference_golden.py ran these cases through llama.cpp: the penalties sampler alone, then
# the chain penalties -> top_k -> top_p -> min_p (``llama_sampler_init_*`` through llama-cpp-python).

CHAIN_CASES = [  # (n_vocab, top_k, top_p, min_p, repeat_penalty)
    (5000, 40, 0.95, 0.05, 1.0), (5000, 0, 0.9, 0.0, 1.0), (5000, 0, 1.0, 0.1, 1.3), (3000, 100, 0.5, 0.02, 1.1),
    (300_000, 40, 0.95, 0.05, 1.1), (300_000, 0, 0.8, 0.0, 1.0), (2000, 5, 1.0, 0.0, 0.8)]
REPEAT_LAST_N = 64


def chain_key(n, top_k_, top_p_, min_p_, penalty) -> str:
    return f"{n}-{top_k_}-{top_p_}-{min_p_}-{penalty}"


def chain_inputs(n: int, top_k_: int):
    """The case's logits (float32 ``(n,)``: N(0, 2.5) with a few +8 outliers) and 200 history ids."""
    rng = np.random.default_rng(n + top_k_)
    logits = (rng.standard_normal(n) * 2.5 + np.where(rng.random(n) < 0.002, 8.0, 0.0)).astype(np.float32)
    return logits, rng.integers(0, n, 200).tolist()


def inputs_sha256(logits, history) -> str:
    return hashlib.sha256(logits.tobytes() + np.asarray(history, "<i8").tobytes()).hexdigest()


def survivors_from_golden(rec: dict, logits) -> dict:
    """llama.cpp's surviving ``{id: logit}``: the ids in ``rec["mask"]`` (zlib'd packbits, base64), their
    logits as given except the ``rec["changed"]`` ``[id, logit]`` pairs (the penalized ones)."""
    mask = np.unpackbits(np.frombuffer(zlib.decompress(base64.b64decode(rec["mask"])), np.uint8))[:len(logits)]
    values = logits.copy()
    for i, v in rec["changed"]:
        values[i] = np.float32(v)
    ids = np.flatnonzero(mask)
    assert len(ids) == rec["n"]
    return dict(zip(ids.tolist(), values[ids].tolist()))


def our_survivors(logits, p: SamplerParams, history=()):
    logits = apply_penalties(logits, list(history), p.repeat_penalty, p.repeat_last_n)
    ids, vals, s = top_k(logits, p.top_k)
    ids, vals, s = top_p(ids, vals, s, p.top_p)
    ids, vals, _ = min_p(ids, vals, s, p.min_p)
    return dict(zip(ids.tolist(), vals.tolist()))


@pytest.mark.parametrize("n, top_k_, top_p_, min_p_, penalty", CHAIN_CASES)
def test_chain_survivors_equal_llama_cpp(n, top_k_, top_p_, min_p_, penalty):
    rec = json.loads((GOLDEN / "reference.json").read_text())["sampling"][chain_key(n, top_k_, top_p_, min_p_, penalty)]
    logits, history = chain_inputs(n, top_k_)
    assert inputs_sha256(logits, history) == rec["inputs_sha256"]                # the inputs llama.cpp saw
    params = SamplerParams(top_k=top_k_, top_p=top_p_, min_p=min_p_, repeat_penalty=penalty,
                           repeat_last_n=REPEAT_LAST_N)
    want = survivors_from_golden(rec["penalties"], logits)                       # the penalties alone
    got = apply_penalties(logits, history, penalty, REPEAT_LAST_N)
    assert np.array_equal(got[list(want)], np.array(list(want.values()), np.float32))
    want = survivors_from_golden(rec["chain"], logits)
    mine = our_survivors(logits, params, history)
    assert mine.keys() == want.keys() and len(want) >= 1
    assert all(mine[i] == np.float32(want[i]) for i in want)


@pytest.mark.parametrize("field, value", [("temperature", -1.0), ("top_k", -1), ("top_p", 0.0), ("top_p", 1.5),
                                          ("min_p", 2.0), ("repeat_penalty", 0.0), ("repeat_last_n", -2),
                                          ("seed", -5)])
def test_bad_settings_are_named(field, value):
    with pytest.raises(PyEngineError, match=field):
        SamplerParams(**{field: value}).check()


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_logits_that_are_not_finite_are_an_error_not_a_token(bad, temperature):
    logits = np.array([1.0, bad, 3.0, -np.inf], np.float32)
    with pytest.raises(PyEngineError, match="not all finite"):
        Sampler(SamplerParams(temperature=temperature, seed=1)).sample(logits)
    assert Sampler(SamplerParams(temperature=0.0)).sample(np.array([1.0, 3.0, -np.inf], np.float32)) == 1
