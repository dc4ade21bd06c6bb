"""qwen35 (Qwen3.5, dense): the Gated DeltaNet hybrid against llama.cpp, and its recurrent state across turns.

Fixture: tests/fixtures/tiny-qwen35.gguf (make_arch_fixtures.py: 5 layers, DeltaNet in 0-2 and 4, gated
full attention in 3; float32) and its Q8_0 copy (gguf_write.quantized_copy, its sha256 checked).
Reference: tests/golden/qwen35_reference.json (make_arch_golden.py: llama.cpp 0.3.36, F32 KV cache, all
logits of the prompt [1, 5, 9, 42], 8 greedy ids, all logits of an 80-token prompt). What each test proves:
- the float32 model gives llama.cpp's logits at every position of both prompts within 1e-3 (measured: the
  short one 1e-5, the 80 tokens, run by DeltaNet chunks of 64 then 16 in numpy or token by token in the
  C kernel, 3.2e-4) and its 8 greedy ids (no
  step's top-2 margin under 0.1), in every weight form;
- the Q8_0 copy, rounding activations as ggml does, gives llama.cpp's logits for it within 1e-3 (measured
  1.2e-6) and its greedy ids; its 80 tokens run in two passes of 40 (a pass of 64 tokens or more takes the
  float32 rows, whose 1-ulp differences flip an 8-bit activation code of this prompt: 0.29 off);
- split over 2 and 3 workers (the DeltaNet layers cut by value heads, each worker keeping its heads'
  state; whole in every worker where ssm_out's blocks cannot be cut) it gives the whole model's logits;
- under Pyodide in Node (static/ as built) the same logits within 1e-3 and the same greedy ids;
- the chunked delta rule is the token-by-token one; a turn continuing a cache (the state carried over)
  gives the logits of a fresh prefill of the whole conversation; going back (regenerate, edit, a rejected
  draft) lands on a held state and gives the same logits again; chat turns and lookup replies equal plain
  ones.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from conftest import FIXTURES, GOLDEN, need_kernel
from generation.test_lookup import MarginSampler, same_up_to_a_near_tie
from gguf_write import quantized_copy
from node.test_node_pyodide import in_pyodide, static_ready  # noqa: F401  (static_ready: a fixture)
from split_threads import start, stop

from model.test_arch_families import run  # the prompt's logits, 8 greedy ids, the 8th step's logits
from pyengine.generation import ChatSession, Generation, load
from pyengine.generation.request import Request
from pyengine.generation.sampling import Sampler, SamplerParams
from pyengine.gguf import open_gguf
from pyengine.model import blocks as blocks_module
from pyengine.model import load_model
from pyengine.model.blocks import FFN
from pyengine.model.delta_net import delta_rule, delta_step
from pyengine.model.kv_cache import HybridCache
from pyengine.model.ops import imrope_text_pairs

REF = json.loads((GOLDEN / "qwen35_reference.json").read_text())
PATH = FIXTURES / "tiny-qwen35.gguf"
PROMPT, LONG = REF["prompt_ids"], REF["long_ids"]
FORMS = ["f32", "quantized", "compact"]
GREEDY = SamplerParams(temperature=0)


@pytest.fixture(scope="module")
def q8(tmp_path_factory):
    path = tmp_path_factory.mktemp("q8") / "tiny-qwen35-q8_0.gguf"
    quantized_copy(PATH, path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == REF["q8_0"]["sha256"]
    return path


@pytest.fixture(scope="module")
def model():
    assert hashlib.sha256(PATH.read_bytes()).hexdigest() == REF["f32"]["sha256"]
    with open_gguf(PATH) as g:
        return load_model(g, weights="f32")


def test_the_fixture_is_the_hybrid_llama_cpp_was_given(model):
    c = model.config
    assert c.recurrent == (True, True, True, False, True) and c.rope_sections == (2, 1, 1, 0)
    assert (c.ssm_n_group, c.ssm_dt_rank, c.ssm_d_state, c.ssm_d_conv) == (2, 4, 8, 4)
    assert isinstance(model.new_cache(8), HybridCache)
    assert min(REF["f32"]["margins"]) > 0.1 and min(REF["q8_0"]["margins"]) > 0.1
    assert len(set(REF["f32"]["greedy_ids"])) >= 3


def test_a_file_with_an_mtp_layer_runs_the_model_without_it(tmp_path):
    """Qwen3.5 GGUFs converted with their multi-token-prediction block have it as a last layer
    (``block_count`` + 1, ``nextn_predict_layers`` = 1, ``blk.N.nextn.*``): llama.cpp's model is the
    layers before it (``n_layer()``), and so is pyengine's: the fixture's logits, llama.cpp's."""
    from gguf_write import gguf_bytes
    with open_gguf(PATH) as g:
        n = g.metadata["qwen35.block_count"]
        kvs = [(k, t, n + 1 if k == "qwen35.block_count" else g.metadata[k]) for k, t in g.value_types.items()]
        tensors = [(name, i.shape, i.type.id, g.tensor_bytes(name).tobytes()) for name, i in g.tensors.items()]
    e = 64
    mtp = [(f"blk.{n}.nextn.eh_proj.weight", (2 * e, e)), (f"blk.{n}.nextn.enorm.weight", (e,)),
           (f"blk.{n}.nextn.hnorm.weight", (e,)), (f"blk.{n}.attn_norm.weight", (e,))]
    tensors += [(name, shape, 0, np.ones(int(np.prod(shape)), "<f4").tobytes()) for name, shape in mtp]
    path = tmp_path / "tiny-qwen35-mtp.gguf"
    path.write_bytes(gguf_bytes(kvs + [("qwen35.nextn_predict_layers", "UINT32", 1)], tensors))
    with open_gguf(path) as g:
        m = load_model(g, weights="f32")
        assert m.config.n_layer == n and len(m.layers) == n
        prompt, ids, _ = run(m)
    assert np.abs(prompt - np.array(REF["f32"]["prompt_logits"])).max() < 1e-3
    assert ids == REF["f32"]["greedy_ids"]


@pytest.mark.parametrize("weights", FORMS)
def test_float32_fixture_gives_llama_cpps_logits_and_ids(weights):
    with open_gguf(PATH) as g:
        m = load_model(g, weights=weights)
    prompt, ids, last = run(m)
    assert np.abs(prompt - np.array(REF["f32"]["prompt_logits"])).max() < 1e-3
    assert ids == REF["f32"]["greedy_ids"]
    assert np.abs(last - np.array(REF["f32"]["last_logits"])).max() < 1e-3
    long = m.forward(LONG, m.new_cache(128), logits="all")                    # numpy: chunks of 64 and 16
    assert np.abs(long - np.array(REF["f32"]["long"])).max() < 1e-3


@pytest.mark.parametrize("weights", ["blocks", "quantized", "compact"])
def test_q8_0_copy_gives_llama_cpps_logits_and_ids(weights, q8):
    if weights == "blocks":
        need_kernel()
    with open_gguf(q8) as g:
        m = load_model(g, weights=weights, ggml_rounding=True)
    prompt, ids, _ = run(m)
    assert np.abs(prompt[-1] - np.array(REF["q8_0"]["prompt_logits"][0])).max() < 1e-3
    assert ids == REF["q8_0"]["greedy_ids"]
    cache = m.new_cache(128)
    m.forward(LONG[:40], cache, logits="none")
    assert np.abs(m.forward(LONG[40:], cache) - np.array(REF["q8_0"]["long"][0])).max() < 1e-3
    if weights == "blocks":                   # the kernel's batches are ggml's products at any length: one pass
        assert np.abs(m.forward(LONG, m.new_cache(128)) - np.array(REF["q8_0"]["long"][0])).max() < 1e-3


# (weights, workers, the DeltaNet value heads of each worker): float32 cuts the 4 heads (3 workers: the
# key heads each holds are {0, 1}, {0}, {1}); the Q8_0 copy's ssm_out cannot be cut within a head of 8
# (a block is 32 columns), so every worker holds them all
SPLITS = [("f32", 2, [(0, 2), (2, 4)]), ("f32", 3, [(0, 2), (2, 3), (3, 4)]),
          ("quantized", 2, [(0, 4), (0, 4)]), ("compact", 2, [(0, 4), (0, 4)]), ("blocks", 2, [(0, 4), (0, 4)])]


@pytest.mark.parametrize("weights, workers, heads", SPLITS)
def test_split_over_workers_gives_the_whole_models_logits(weights, workers, heads, q8):
    """The DeltaNet layers are cut by value heads, each worker keeping its heads' state; attention and FFN
    are cut as for every model."""
    if weights == "blocks":
        need_kernel()
    path = q8 if weights != "f32" else PATH
    with open_gguf(path) as g:
        whole = load_model(g, weights=weights)
    split, helpers, threads = start(path, workers, weights)
    try:
        assert split.workers == workers
        assert [m.shard.ssm for m in [split.model] + [h.model for h in helpers]] == heads
        got = [run(split), split.forward(LONG[:40], split.new_cache(64), logits="all")]
    finally:
        stop(split, threads)
    want = [run(whole), whole.forward(LONG[:40], whole.new_cache(64), logits="all")]
    assert got[0][1] == want[0][1]
    for a, b in zip([got[0][0], got[0][2], got[1]], [want[0][0], want[0][2], want[1]]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)


PYODIDE_CODE = f'''
from pyengine.model import load_model
m = load_model(open_gguf(f"{{FX}}/tiny-qwen35.gguf"), weights="f32")
c = m.new_cache(128)
prompt = m.forward({PROMPT!r}, c, logits="all")
ids, logits = [], prompt[-1]
for _ in range(8):
    ids.append(int(np.argmax(logits)))
    logits = m.forward([ids[-1]], c)
{{"prompt": prompt.tolist(), "ids": ids, "long": m.forward({LONG!r}, m.new_cache(128), logits="all").tolist()}}
'''


@pytest.mark.node
def test_pyodide_gives_llama_cpps_logits_and_ids(static_ready):  # noqa: F811
    got = in_pyodide(PYODIDE_CODE)
    assert got["ids"] == REF["f32"]["greedy_ids"]
    assert np.abs(np.array(got["prompt"]) - np.array(REF["f32"]["prompt_logits"])).max() < 1e-3
    assert np.abs(np.array(got["long"]) - np.array(REF["f32"]["long"])).max() < 1e-3


def test_the_output_gate_shows_in_llama_cpps_logits(model, monkeypatch):
    """Without the attention's output gate, the logits move more than 0.05 from llama.cpp's."""
    monkeypatch.setattr(blocks_module, "sigmoid", np.ones_like)
    prompt = model.forward(PROMPT, model.new_cache(64), logits="all")
    assert np.abs(prompt - np.array(REF["f32"]["prompt_logits"])).max() > 0.05


# --- the pieces -------------------------------------------------------------------------------

def test_imrope_sections_of_a_text_token():
    assert imrope_text_pairs((11, 11, 10, 0), 32).all()                     # Qwen3.5's: every pair turns
    assert imrope_text_pairs((1, 1, 1, 1), 4).tolist() == [True, True, True, False]   # the extra section's not


def test_the_chunked_delta_rule_is_the_token_by_token_one():
    rng = np.random.default_rng(1)
    t, h, d = 150, 3, 8                                                       # chunks of 64, 64 and 22

    def unit(*shape):
        x = rng.standard_normal(shape).astype(np.float32)
        return x / np.linalg.norm(x, axis=-1, keepdims=True)
    q, k, v = unit(t, h, d) / np.sqrt(d), unit(t, h, d), rng.standard_normal((t, h, d)).astype(np.float32)
    g = -rng.uniform(0.0, 0.3, (t, h)).astype(np.float32)
    beta = rng.uniform(0.0, 1.0, (t, h)).astype(np.float32)
    s0 = rng.standard_normal((h, d, d)).astype(np.float32)
    o, s = delta_rule(s0, q, k, v, (g, beta))
    want, ws = np.empty_like(o), s0
    for i in range(t):
        want[i], ws = delta_step(ws, q[i], k[i], v[i], (g[i], beta[i]))
    np.testing.assert_allclose(o, want, rtol=0, atol=1e-4)
    np.testing.assert_allclose(s, ws, rtol=0, atol=1e-4)


# --- the recurrent state across turns ---------------------------------------------------------

TURN1, TURN2 = LONG[:30], LONG[30:50]


def fresh(model, ids) -> np.ndarray:
    return model.forward(ids, model.new_cache(128), logits="all")


def test_a_second_turn_on_the_carried_state_is_a_fresh_prefill(model):
    cache = model.new_cache(128)
    model.forward(TURN1, cache)
    reply = [int(np.argmax(model.forward([t], cache))) for t in (7, 8, 9)]    # decode steps
    got = model.forward(TURN2, cache, logits="all")
    want = fresh(model, TURN1 + [7, 8, 9] + TURN2)[-len(TURN2):]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    assert cache.n == len(TURN1) + 3 + len(TURN2) and len(reply) == 3


def test_going_back_lands_on_a_held_state_and_gives_the_same_logits(model):
    cache = model.new_cache(128)
    model.forward(TURN1, cache)                                               # a checkpoint at 30
    assert sorted(cache.checkpoints) == [len(TURN1)]                          # (at 0: the empty state, made anew)
    for t in (7, 8, 9):
        model.forward([t], cache)
    model.forward(TURN2, cache)                                               # checkpoints at 33 and 53
    conversation = TURN1 + [7, 8, 9] + TURN2
    for n, lands in ((52, 33), (40, 33), (33, 33), (32, 30), (29, 0)):        # regenerate, edits
        cache.truncate(n)
        assert cache.n == lands
        edit = conversation[:n] + [3, 1, 4, 1, 5]
        got = model.forward(edit[cache.n:], cache, logits="all")[-5:]
        np.testing.assert_allclose(got, fresh(model, edit)[-5:], rtol=0, atol=1e-4)
        conversation = edit


def test_a_pass_stopped_midway_leaves_the_state_as_it_was(model, monkeypatch):
    cache = model.new_cache(64)
    model.forward(TURN1[:10], cache)
    calls = []

    def ffn_then_stop(self, x):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_ffn(self, x)
    real_ffn = FFN.__call__
    monkeypatch.setattr(FFN, "__call__", ffn_then_stop)
    with pytest.raises(KeyboardInterrupt):
        model.forward(TURN1[10:], cache)
    monkeypatch.undo()
    assert cache.n == 10
    got = model.forward(TURN1[10:], cache, logits="all")
    np.testing.assert_allclose(got, fresh(model, TURN1)[10:], rtol=0, atol=1e-4)


class Drafts:
    """Drafts that know the plain reply: its next two tokens, then a wrong one (so each pass accepts two
    and rejects the third, and the state goes back into the pass)."""

    def __init__(self, reply: list[int], n_vocab: int):
        self.reply, self.n, self.n_vocab = reply, 0, n_vocab

    def append(self, tok: int) -> None:
        self.n += 1

    def draft(self, room: int) -> list[int]:
        d = self.reply[self.n:self.n + 3]
        if len(d) == 3:
            d[2] = (d[2] + 1) % self.n_vocab
        return d[:room]


def test_lookup_replies_are_plain_replies():
    e = load(str(PATH), weights="f32")
    ids = e.tokenizer.encode("the cat sat on the mat", add_special=True, parse_special=True)
    sampler = MarginSampler()
    plain = Generation(e, ids, Request(sampler, 24, lookup=0))
    list(plain)
    gen = Generation(e, ids, Request(Sampler(GREEDY), 24, lookup=4))
    gen._ngrams = Drafts(plain.ids, e.model.config.n_vocab)
    list(gen)
    assert same_up_to_a_near_tie(plain.ids, sampler.margins, gen.ids)
    assert gen.stats.accepted_tokens > 10 and gen.stats.drafted_tokens > gen.stats.accepted_tokens
    assert gen.cache.n == len(gen.tokens) == len(plain.tokens)
    np.testing.assert_allclose(e.model.forward([gen.ids[-1]], gen.cache),       # the same state after
                               e.model.forward([plain.ids[-1]], plain.cache), rtol=0, atol=1e-4)


def test_chat_turns_and_regenerate_reuse_the_state():
    e = load(str(PATH), weights="f32")
    chats = {k: ChatSession(e) for k in (0, 6)}
    for text in ("the cat sat on the mat", "the cat sat on the mat again"):
        turns = {k: chat.send(text, Request(GREEDY, 12, lookup=k)) for k, chat in chats.items()}
        for t in turns.values():
            list(t)
        assert turns[6].ids == turns[0].ids and turns[6].stats.cached_tokens == turns[0].stats.cached_tokens
        assert chats[6].cache.n == len(chats[6].tokens)
    assert turns[0].stats.cached_tokens > 0                                    # the second turn: carried over
    chat = chats[0]
    first = chat.messages.pop()                                                # regenerate the last reply
    again = chat.respond(Request(GREEDY, 12))
    list(again)
    assert again.stats.cached_tokens > 0 and again.text == first["content"]
    alone = ChatSession(e)
    alone.messages = list(chat.messages[:-1])
    plain = alone.respond(Request(GREEDY, 12))
    list(plain)
    assert plain.ids == again.ids and plain.stats.cached_tokens == 0


# --- hostile metadata -------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    ({"-": "qwen35.ssm.state_size"}, "missing metadata key 'qwen35.ssm.state_size'"),
    ({"qwen35.ssm.group_count": 3}, "group_count = 3 must divide"),
    ({"qwen35.ssm.state_size": 4096, "qwen35.ssm.inner_size": 4 * 4096}, "more than 16777216 floats"),
    ({"qwen35.rope.dimension_sections": [9, 0, 0, 0]}, "dimension_sections"),
    ({"qwen35.attention.recurrent_layers": [True, False]}, "must be 5 booleans"),
    ({"qwen35.full_attention_interval": 0}, "must be positive"),
])
def test_bad_hybrid_metadata_is_a_clear_error(change, message):
    from pyengine.errors import ModelError
    from pyengine.model.config import ModelConfig
    with open_gguf(PATH) as g:
        md = dict(g.metadata)
    md.pop(change.pop("-", None), None)
    with pytest.raises(ModelError, match=message):
        ModelConfig.from_metadata({**md, **change})
