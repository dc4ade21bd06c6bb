"""The families added after the shared fixtures (gemma2, phi3, granite, olmo2, smollm3, exaone4, lfm2, gemma4)
against llama.cpp.

Fixtures: tests/fixtures/tiny-<arch>.gguf (tests/fixtures/make_arch_fixtures.py: float32 random weights,
the keys and tensors llama.cpp's loader expects) and their Q8_0 copies (gguf_write.quantized_copy, made
here and checked against the sha256 llama.cpp was shown). Reference: tests/golden/arch_reference.json
(make_arch_golden.py: llama.cpp, F32 KV cache, all logits of the prompt [1, 5, 9, 42], 8 greedy ids).
What each test proves:
- the float32 model gives llama.cpp's logits at every prompt position and after 8 greedy steps within
  1e-3 (measured <= 6e-6) and the same greedy ids (no step's top-2 margin is below 0.02), in every
  weight form;
- the Q8_0 copy, in the forms that keep its codes and round activations as ggml does (the C kernel's
  blocks, numpy's quantized and compact), gives llama.cpp's
  logits for it within 1e-3 (measured <= 1.2e-6) and its greedy ids. (8-bit rounding amplifies: a float
  sum 1 ulp off llama.cpp's, where ggml adds blocks in SIMD lanes, can flip a code of the next product's
  input. The seeds in make_arch_fixtures.py were picked with none flipped and no near-tie;)
- split over 2 workers (the helpers as threads, tests/split_threads.py) the model gives the whole
  model's logits, in every form;
- each family's feature shows in llama.cpp's logits: pyengine without it is farther than 0.05 from them;
- lfm2's convolution state, kept in the cache, carries a conversation: a second turn, and a turn taken
  again from an earlier position (regenerate, edit), give the logits of a fresh prefill of it all.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from conftest import FIXTURES, GOLDEN, need_kernel
from gguf_write import quantized_copy
from split_threads import start, stop

from model.test_model import Edited
from pyengine.gguf import open_gguf
from pyengine.model import load_model
from pyengine.model.blocks import Attention, ShortConv
from pyengine.model.config import ARCHITECTURES
from pyengine.model.ops import rmsnorm

REF = json.loads((GOLDEN / "arch_reference.json").read_text())
ARCHS = list(REF["fixtures"])
PROMPT = REF["prompt_ids"]
FORMS = ["f32", "quantized", "compact"]



@pytest.fixture(scope="module")
def q8(tmp_path_factory) -> dict:
    """Each fixture's Q8_0 copy, the very file llama.cpp was given."""
    out = {}
    for arch in ARCHS:
        path = tmp_path_factory.mktemp("q8") / f"tiny-{arch}-q8_0.gguf"
        quantized_copy(FIXTURES / f"tiny-{arch}.gguf", path)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == REF["fixtures"][arch]["q8_0"]["sha256"]
        out[arch] = path
    return out


def path_of(arch: str) -> str:
    path = FIXTURES / f"tiny-{arch}.gguf"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == REF["fixtures"][arch]["f32"]["sha256"]
    return str(path)


def run(model) -> tuple[np.ndarray, list[int], np.ndarray]:
    """The prompt's logits (4, n_vocab), 8 greedy ids decoded one at a time, the 8th step's logits."""
    cache = model.new_cache(64)
    prompt = model.forward(PROMPT, cache, logits="all")
    logits, ids = prompt[-1], []
    for _ in range(8):
        ids.append(int(np.argmax(logits)))
        logits = model.forward([ids[-1]], cache)
    return prompt, ids, logits


def test_every_added_family_has_a_fixture():
    assert ARCHS == ["gemma2", "phi3", "granite", "olmo2", "smollm3", "exaone4", "lfm2", "gemma4"]
    assert set(ARCHS) <= set(ARCHITECTURES)
    for arch in ARCHS:
        ref = REF["fixtures"][arch]
        assert min(ref["f32"]["margins"]) > 0.02 and min(ref["q8_0"]["margins"]) > 0.02
        assert ref["f32"]["greedy_ids"] == ref["q8_0"]["greedy_ids"] and len(set(ref["f32"]["greedy_ids"])) >= 3


@pytest.mark.parametrize("weights", FORMS)
@pytest.mark.parametrize("arch", ARCHS)
def test_float32_fixture_gives_llama_cpps_logits_and_ids(arch, weights):
    ref = REF["fixtures"][arch]["f32"]
    with open_gguf(path_of(arch)) as g:
        prompt, ids, last = run(load_model(g, weights=weights))
    assert np.abs(prompt - np.array(ref["prompt_logits"])).max() < 1e-3
    assert ids == ref["greedy_ids"]
    assert np.abs(last - np.array(ref["last_logits"])).max() < 1e-3


@pytest.mark.parametrize("weights", ["blocks", "quantized", "compact"])
@pytest.mark.parametrize("arch", ARCHS)
def test_q8_0_copy_gives_llama_cpps_logits_and_ids(arch, weights, q8):
    if weights == "blocks":
        need_kernel()
    ref = REF["fixtures"][arch]["q8_0"]
    with open_gguf(q8[arch]) as g:
        prompt, ids, _ = run(load_model(g, weights=weights, ggml_rounding=True))
    assert np.abs(prompt[-1] - np.array(ref["prompt_logits"][0])).max() < 1e-3
    assert ids == ref["greedy_ids"]


@pytest.mark.parametrize("weights", ["blocks", *FORMS])
@pytest.mark.parametrize("arch", ARCHS)
def test_split_over_two_workers_gives_the_whole_models_logits(arch, weights, q8):
    if weights == "blocks":
        need_kernel()
    path = q8[arch] if weights != "f32" else path_of(arch)
    with open_gguf(path) as g:
        want, want_ids, want_last = run(load_model(g, weights=weights))
    model, helpers, threads = start(path, 2, weights)
    try:
        assert model.workers == 2
        got, ids, last = run(model)
    finally:
        stop(model, threads)
    atol = SPLIT_ATOL.get(arch, 1e-4)
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)
    np.testing.assert_allclose(last, want_last, rtol=0, atol=atol)
    assert ids == want_ids


# gemma4's per-layer gate reads gelu from a float16 table, as ggml does: a sum of the split, 1 ulp off the
# whole model's, can land its input on the next float16 (measured 4.6e-4 off at one position)
SPLIT_ATOL = {"gemma4": 1e-3}


# What each fixture exercises, taken away: metadata changed ("-" drops a key or tensor) ...
WITHOUT_KEYS = {
    "gemma2": [{"gemma2.attn_logit_softcapping": 1e9}, {"gemma2.final_logit_softcapping": 1e9},
               {"gemma2.attention.sliding_window": 64}],
    "granite": [{"-": "granite.embedding_scale"}, {"-": "granite.residual_scale"}, {"granite.logit_scale": 1.0},
                {"-": "granite.attention.scale"}],
    "exaone4": [{"-": "rope_freqs.weight"}],
    "gemma4": [{"-": "rope_freqs.weight"}, {"gemma4.final_logit_softcapping": 1e9},
               {"gemma4.attention.sliding_window": 64}, {"gemma4.rope.freq_base_swa": 1e6}],
}


def per_head_norms(self, q, k):
    """olmo2's q/k norms as if per head (its weights cut per head): what qk_norm_full is not."""
    eps = self.eps
    return rmsnorm(q, self.q_norm.reshape(q.shape[1:]), eps), rmsnorm(k, self.k_norm.reshape(k.shape[1:]), eps)


# ... or the loaded model changed (phi3's fused tensors need no check: cut wrong, nothing would match);
# "arch/what" for a second part of one family
WITHOUT_PARTS = {
    "olmo2": lambda model, mp: mp.setattr(Attention, "norm_heads", per_head_norms),
    "smollm3": lambda model, mp: [mp.setattr(layer.mixer, "rope", model.rope) for layer in model.layers],
    "exaone4": lambda model, mp: [mp.setattr(layer, "post_attn_norm", None) for layer in model.layers],
    "gemma2": lambda model, mp: [mp.setattr(layer, "post_ffn_norm", None) for layer in model.layers],
    # the short convolution seeing its own token only, not the l_cache - 1 before it
    "lfm2": lambda model, mp: [mp.setattr(layer.mixer, "conv", layer.mixer.conv * np.float32([0, 0, 1]))
                               for layer in model.layers if isinstance(layer.mixer, ShortConv)],
    "gemma4": lambda model, mp: mp.setattr(model, "per_layer", None),
    # the shared layers reading the KV of layers 0 and 1 (of their kinds too), not of 2 and 3
    "gemma4/kv_layers": lambda model, mp: [mp.setattr(layer.mixer, "src", src)
                                           for layer, src in zip(model.layers, (0, 1, 2, 3, 0, 1))],
    "gemma4/out_scale": lambda model, mp: [mp.setattr(layer, "out_scale", None) for layer in model.layers],
    "gemma4/v_norm": lambda model, mp: [mp.setattr(layer.mixer, "v_norm", False) for layer in model.layers],
    "gemma4/attn_scale": lambda model, mp: [mp.setattr(layer.mixer, "scale", 0.25) for layer in model.layers],
}
CASES = [(a, json.dumps(c)) for a, cs in WITHOUT_KEYS.items() for c in cs] + \
    [(a.split("/")[0], "model:" + a) for a in WITHOUT_PARTS]


@pytest.mark.parametrize("arch, change", CASES)
def test_each_feature_shows_in_llama_cpps_logits(arch, change, monkeypatch):
    """Taken away, each feature moves pyengine's logits more than 0.05 from llama.cpp's: so they hold it."""
    ref = np.array(REF["fixtures"][arch]["f32"]["prompt_logits"])
    with open_gguf(path_of(arch)) as g:
        if change.startswith("model:"):
            model = load_model(g)
            WITHOUT_PARTS[change[len("model:"):]](model, monkeypatch)
        else:
            edits = json.loads(change)
            drop = [edits.pop("-")] if "-" in edits else []
            model = load_model(Edited(g, drop, **{k.replace(".", "__"): v for k, v in edits.items()}))
        prompt = model.forward(PROMPT, model.new_cache(64), logits="all")
    assert np.abs(prompt - ref).max() > 0.05


# lfm2's state across turns: turn 1 is the prompt and 3 greedy ids, turn 2 five more tokens; going back
# takes turn 2 again from position 2 (an edit of the prompt's end), then from 6 and 3 of what it holds then.
TURN_2 = [7, 300, 12, 64, 5]


@pytest.mark.parametrize("workers", [1, 2])
def test_lfm2_state_carries_across_turns_and_going_back(workers):
    with open_gguf(path_of("lfm2")) as g:
        whole = load_model(g)
        model, _, threads = (whole, [], []) if workers == 1 else start(path_of("lfm2"), 2, "f32")
        try:
            assert getattr(model, "workers", 1) == workers
            cache = model.new_cache(64)
            model.forward(PROMPT, cache, logits="none")
            turn_1 = PROMPT + REF["fixtures"]["lfm2"]["f32"]["greedy_ids"][:3]
            for t in turn_1[len(PROMPT):]:
                model.forward([t], cache)
            held = turn_1                                            # what the cache holds
            for keep in (len(turn_1), 2, 6, 3):
                cache.truncate(keep)
                got = model.forward(TURN_2, cache, logits="all")
                held = held[:keep] + TURN_2
                want = whole.forward(held, whole.new_cache(64), logits="all")[keep:]
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
                assert cache.n == len(held)
        finally:
            stop(model, threads)


def test_gemma4_with_fused_qkv_gives_the_same_logits(tmp_path):
    """A gemma4 file whose blocks hold q, k and v in one attn_qkv (llama.cpp takes either; a layer reading
    another's KV has one too, its k and v rows unused): the fixture's logits, llama.cpp's."""
    from gguf_write import gguf_bytes
    with open_gguf(path_of("gemma4")) as g:
        kvs = [(k, t, g.metadata[k]) for k, t in g.value_types.items()]
        arrays = {n: np.asarray(g.tensor(n), np.float32) for n in g.tensors}
    out = []
    for name, a in arrays.items():
        if not name.endswith((".attn_q.weight", ".attn_k.weight", ".attn_v.weight")):
            out.append((name, a.shape[::-1], 0, a.tobytes()))
        elif name.endswith(".attn_q.weight"):
            p = name[:-len("attn_q.weight")]
            kv = [arrays.get(p + "attn_k.weight"), arrays.get(p + "attn_v.weight")]
            kv = [np.zeros((2 * a.shape[0] // 4, a.shape[1]), np.float32) if x is None else x for x in kv]
            fused = np.concatenate([a, *kv])                               # (nq + nk + nv, n_embd)
            out.append((p + "attn_qkv.weight", fused.shape[::-1], 0, fused.tobytes()))
    path = tmp_path / "tiny-gemma4-fused.gguf"
    path.write_bytes(gguf_bytes(kvs, out))
    with open_gguf(path) as g:
        prompt, ids, _ = run(load_model(g))
    assert np.abs(prompt - np.array(REF["fixtures"]["gemma4"]["f32"]["prompt_logits"])).max() < 1e-3
    assert ids == REF["fixtures"]["gemma4"]["f32"]["greedy_ids"]
