"""Prompt lookup: the n-gram index, drafts checked in one pass, replies equal to plain decoding's (the
cache and its bookkeeping too), the stop rules inside a draft, and the sampling rule's exactness."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from conftest import TINY

from generation.test_generate import GREEDY, ByteTokenizer, FakeCache, ScriptedModel, ids_of
from pyengine.errors import PyEngineError
from pyengine.generation import ChatSession, Engine, Generation, generate, load
from pyengine.generation import lookup as lookup_module
from pyengine.generation.lookup import NgramIndex
from pyengine.generation.request import Request
from pyengine.generation.sampling import Sampler, SamplerParams

DEFAULT_NGRAMS = (lookup_module.NGRAM_MIN, lookup_module.NGRAM_MAX)      # before short_ngrams sets them

# --- the n-gram index --------------------------------------------------------------------------


def test_draft_copies_what_followed_the_latest_occurrence():
    idx = NgramIndex([1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3], n_min=1, n_max=4)
    assert idx.draft(3) == [7, 5, 1]            # [1, 2, 3] last seen before 7, not before 9
    assert idx.draft(1) == [7] and idx.draft(0) == []


def test_the_longest_ngram_wins_over_a_more_recent_shorter_one():
    idx = NgramIndex([4, 1, 2, 8, 3, 2, 9, 4, 1, 2], n_min=1, n_max=4)
    assert idx.draft(1) == [8]                  # [4, 1, 2] before 8; [2] alone was last before 9
    assert NgramIndex([4, 1, 2, 8, 3, 2, 9, 4, 1, 2], n_min=1, n_max=1).draft(1) == [9]


def test_no_draft_without_a_long_enough_match():
    assert NgramIndex([5, 6, 7, 5], n_min=1, n_max=4).draft(4) == [6, 7, 5, 6]
    assert NgramIndex([5, 6, 7, 5], n_min=2, n_max=4).draft(4) == []
    assert NgramIndex([1, 2, 3], n_min=1, n_max=4).draft(4) == []
    assert NgramIndex([], n_min=1, n_max=4).draft(4) == []


def test_a_draft_runs_on_into_the_tokens_it_copies():
    assert NgramIndex([1, 2, 1, 2], n_min=1, n_max=4).draft(5) == [1, 2, 1, 2, 1]
    assert NgramIndex([3, 3], n_min=1, n_max=4).draft(3) == [3, 3, 3]


def test_the_default_drafts_from_4_grams_only():
    assert DEFAULT_NGRAMS == (4, 4)
    assert NgramIndex([5, 6, 7, 5], *DEFAULT_NGRAMS).draft(4) == []
    assert NgramIndex([1, 2, 3, 4, 9, 1, 2, 3, 4], *DEFAULT_NGRAMS).draft(2) == [9, 1]


def test_appending_equals_building_at_once():
    toks = np.random.default_rng(3).integers(0, 5, 300).tolist()
    grown = NgramIndex(toks[:10], n_min=1, n_max=3)
    for i in range(10, len(toks)):
        grown.append(toks[i])
        whole = NgramIndex(toks[:i + 1], n_min=1, n_max=3)
        assert grown.draft(6) == whole.draft(6)
    assert grown.where == whole.where and grown.tokens == toks


# --- the loop on a scripted model: with lookup as without ---------------------------------------

@pytest.fixture(autouse=True)
def short_ngrams(monkeypatch):
    """Replies draft from n-grams of 1 to 4 tokens (the default takes 4 only): short scripts draft,
    and real networks reject drafts often."""
    monkeypatch.setattr(lookup_module, "NGRAM_MIN", 1)

def reply(script, prompt, lookup, max_tokens=40, stops=(), n_ctx=64, params=GREEDY):
    model = ScriptedModel(script)
    gen = Generation(Engine(None, model, ByteTokenizer()), prompt,
                     Request(Sampler(params), max_tokens, stop_strings=stops, lookup=lookup), FakeCache(n_ctx))
    pieces = []
    for piece in gen:
        pieces.append(piece)
        assert gen.cache.n == len(gen.tokens) and gen.tokens == (gen.prompt_ids + gen.ids)[:gen.cache.n]
        if gen.stats.stop_reason != "eog":                      # the cache holds all but the last token
            assert gen.tokens == gen.prompt_ids + gen.ids[:-1]
    return gen, "".join(pieces), model


CASES = {  # name: (script, prompt, max_tokens, stop strings, n_ctx)
    "repetitive": (ids_of("abcabcabcabcab") + [256], ids_of("abcabc"), 40, (), 64),
    "rejected drafts": (ids_of("abdabxabyabzab"), ids_of("abcabc"), 12, (), 64),
    "eog inside a draft": (ids_of("ab") + [256], ids_of("qab") + [256] + ids_of("q"), 40, (), 64),
    "stop string inside a draft": (ids_of("ab</s>c more"), ids_of("ab</s>c "), 40, ("</s>",), 64),
    "max_tokens inside a draft": (ids_of("abcabcabcabc"), ids_of("abcabc"), 5, (), 64),
    "context inside a draft": (ids_of("abcabcabcabc"), ids_of("abcabc"), 40, (), 11),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("lookup", [1, 3, 8])
def test_a_reply_with_lookup_is_the_reply_without(name, lookup):
    script, prompt, max_tokens, stops, n_ctx = CASES[name]
    plain, plain_text, plain_model = reply(script, prompt, 0, max_tokens, stops, n_ctx)
    gen, text, model = reply(script, prompt, lookup, max_tokens, stops, n_ctx)
    assert (gen.ids, gen.text, text) == (plain.ids, plain.text, plain_text)
    assert gen.tokens == plain.tokens and gen.cache.n == plain.cache.n         # the cache as plain decoding's
    s, p = gen.stats, plain.stats
    assert (s.stop_reason, s.generated_tokens, s.decode_tokens) == (p.stop_reason, p.generated_tokens, p.decode_tokens)
    assert all(len(call) <= 1 + lookup for call in model.calls[1:])
    passes = len(model.calls) - 1                       # each samples its accepted tokens and one more,
    assert passes - (s.decode_tokens - s.accepted_tokens) in (0, 1)   # but the last may end on an accepted one
    assert len(plain_model.calls) - 1 == p.decode_tokens
    assert s.accepted_tokens <= s.drafted_tokens and s.lookup == lookup and p.drafted_tokens == 0


def test_drafts_are_checked_in_one_pass_and_cut_at_the_limits():
    gen, text, model = reply(*CASES["repetitive"][:2], lookup=8)
    assert text == "abcabcabcabcab" and gen.stats.stop_reason == "eog"
    assert model.calls[:2] == [ids_of("abcabc"), ids_of("abcabcabc")]          # 'a' and a draft of 8
    assert gen.stats.accepted_tokens == 8 + 4 and len(model.calls) == 3     # the 5th of the 2nd draft: eog
    gen, _, model = reply(*CASES["max_tokens inside a draft"][:2], lookup=8, max_tokens=5)
    assert gen.ids == ids_of("abcab") and [len(c) for c in model.calls] == [6, 4]   # 1 + at most 5 - 1 - 1
    gen, _, model = reply(*CASES["context inside a draft"][:2], lookup=8, n_ctx=11)
    assert gen.stats.stop_reason == "context" and max(len(c) for c in model.calls[1:]) == 11 - 6
    gen, _, _ = reply(*CASES["eog inside a draft"][:2], lookup=8)
    assert gen.ids == ids_of("ab") and gen.stats.stop_reason == "eog" and gen.stats.accepted_tokens == 2


def test_rejected_drafts_are_counted_and_dropped():
    gen, _, model = reply(*CASES["rejected drafts"][:2], lookup=4, max_tokens=12)
    assert gen.ids == ids_of("abdabxabyabz")
    assert gen.stats.drafted_tokens > gen.stats.accepted_tokens > 0
    assert gen.stats.as_dict()["drafted_tokens"] == gen.stats.drafted_tokens
    assert "lookup 4: " in gen.stats.summary() and "lookup" not in reply([65], [1], 0, 2)[0].stats.summary()


def test_repetition_penalty_history_advances_inside_a_draft():
    params = SamplerParams(temperature=0, repeat_penalty=2.0, repeat_last_n=3)
    script = ids_of("abcabcabcabcab")
    plain, _, _ = reply(script, ids_of("abcabc"), 0, 14, params=params)
    gen, _, _ = reply(script, ids_of("abcabc"), 8, 14, params=params)
    assert gen.ids == plain.ids and gen.ids != script and gen.stats.drafted_tokens > 0


def test_bad_lookup_is_an_error():
    for bad in (-1, 1.5, True):
        with pytest.raises(PyEngineError, match="lookup"):
            Generation(Engine(None, ScriptedModel([1]), ByteTokenizer()), [1], Request(Sampler(GREEDY), 5, lookup=bad))


# --- sampling: the accepted-or-resampled token is distributed as plain decoding's ----------------

class MarkovModel:
    """Logits that depend on the last token only: row ``TABLE[t]`` after token t (V = 4); a cycle
    0 -> 1 -> 2 -> 3 -> 0 is likely, not sure, so drafts copied from a cyclic prompt are accepted
    and rejected."""
    TABLE = np.log(np.array([[0.1, 0.6, 0.2, 0.1], [0.15, 0.1, 0.55, 0.2],
                             [0.2, 0.1, 0.1, 0.6], [0.5, 0.2, 0.15, 0.15]])).astype(np.float32)

    def new_cache(self, n_ctx=None):
        return FakeCache(n_ctx or 64)

    def forward(self, tokens, cache, logits="last"):
        cache.n += len(tokens)
        out = self.TABLE[np.asarray(tokens)]                      # (T, 4)
        return out if logits == "all" else out[-1]


SAMPLED = SamplerParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.5, repeat_last_n=3)
PROMPT = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
N_TOKENS = 4


def sampled_reply(seed: int, lookup: int) -> Generation:
    params = SamplerParams(**{**vars(SAMPLED), "seed": seed})
    gen = Generation(Engine(None, MarkovModel(), ByteTokenizer()), PROMPT,
                     Request(Sampler(params), N_TOKENS, lookup=lookup))
    list(gen)
    return gen


def exact_probability(seq: tuple[int, ...]) -> float:
    """Plain decoding's probability of the reply ``seq``: each token from the sampler's distribution
    after the tokens before it (the penalties' history included)."""
    sampler, p, hist = Sampler(SAMPLED), 1.0, list(PROMPT)
    for tok in seq:
        ids, probs = sampler.distribution(MarkovModel.TABLE[hist[-1]], hist)
        p *= float(probs[list(ids).index(tok)]) if tok in ids else 0.0
        hist.append(tok)
    return p


def chi_square_bound(df: int, z: float = 4.265) -> float:
    """The chi-square quantile with ``df`` degrees of freedom at the normal quantile ``z`` (4.265: a
    1e-5 chance for an exact rule to fail), by Wilson and Hilferty's cube-root approximation."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_seeded_replies_with_lookup_are_plain_decodings():
    for seed in range(200):
        assert sampled_reply(seed, 3).ids == sampled_reply(seed, 0).ids


def test_lookup_samples_replies_with_plain_decodings_distribution():
    """4,000 seeded replies of 4 tokens with lookup against the exact probabilities of the 256
    replies (cells expected under 5 times pooled): Pearson's chi-square within its 1e-5 bound."""
    n = 4000
    counts, drafted, accepted = Counter(), 0, 0
    for seed in range(n):
        gen = sampled_reply(10_000 + seed, 3)
        counts[tuple(gen.ids)] += 1
        drafted, accepted = drafted + gen.stats.drafted_tokens, accepted + gen.stats.accepted_tokens
    assert drafted > accepted > 0.2 * drafted                      # drafts were accepted and rejected
    cells = [(c, exact_probability(c)) for c in np.ndindex(*(4,) * N_TOKENS)]
    assert math.isclose(sum(p for _, p in cells), 1.0, rel_tol=1e-9)
    big = [(counts[c], n * p) for c, p in cells if n * p >= 5]
    pooled = (sum(counts[c] for c, p in cells if n * p < 5), sum(n * p for _, p in cells if n * p < 5))
    bins = big + ([pooled] if pooled[1] > 0 else [])
    chi2 = sum((o - e) ** 2 / e for o, e in bins)
    assert chi2 < chi_square_bound(len(bins) - 1), (chi2, len(bins))


# --- the tiny fixtures: a real network, batched ------------------------------------------------

@pytest.fixture(scope="module")
def engines():
    return {name: load(TINY[name]) for name in ("llama", "llama-q4km", "qwen2", "qwen3", "gemma3")}


class MarginSampler(Sampler):
    """Greedy; keeps each step's top-2 logit margin."""

    def __init__(self):
        super().__init__(GREEDY)
        self.margins = []

    def sample(self, logits, history=()):
        top2 = np.sort(logits)[-2:]
        self.margins.append(float(top2[1] - top2[0]))
        return super().sample(logits, history)


def same_up_to_a_near_tie(plain: list[int], margins: list[float], got: list[int]) -> bool:
    """``got`` equals ``plain``, or parts from it first where plain decoding's top-2 margin was under 0.01."""
    n = next((i for i, (a, b) in enumerate(zip(plain, got)) if a != b), min(len(plain), len(got)))
    return (n == len(plain) == len(got)) or margins[n] < 0.01


@pytest.mark.parametrize("name", ["llama", "llama-q4km", "qwen2", "qwen3", "gemma3"])
def test_greedy_on_fixtures_equals_plain_decoding(engines, name):
    e = engines[name]
    ids = e.tokenizer.encode("the cat sat on the mat. the cat sat on the mat. the cat", add_special=True,
                             parse_special=True)
    sampler = MarginSampler()
    plain = Generation(e, ids, Request(sampler, 40, lookup=0))
    list(plain)
    gen = generate(e, ids, Request(GREEDY, 40, lookup=8))
    list(gen)
    assert same_up_to_a_near_tie(plain.ids, sampler.margins, gen.ids)
    assert gen.stats.drafted_tokens > 0 and gen.stats.decode_tokens == plain.stats.decode_tokens
    assert gen.cache.n == len(gen.tokens) == len(plain.tokens)


@pytest.mark.parametrize("name, weights", [("llama", "f32"), ("gemma3", "f32"), ("llama-q4km", "quantized"),
                                           ("llama-q4km", "compact")])
def test_a_drafts_rows_are_one_token_passes_bit_for_bit(engines, name, weights):
    """model/ops.py attends a short batch query by query: a draft's rows are one-token passes' bits."""
    e = engines[name] if weights == "f32" else load(TINY[name], weights=weights)
    seq = e.tokenizer.encode("the cat sat on the mat. the cat sat on the mat. the cat sat on", add_special=True,
                             parse_special=True)
    caches = [e.model.new_cache(128) for _ in range(2)]
    for cache in caches:
        e.model.forward(seq[:-5], cache)
    single = np.stack([e.model.forward([t], caches[0]) for t in seq[-5:]])       # (5, n_vocab)
    assert np.array_equal(e.model.forward(seq[-5:], caches[1], logits="all"), single)


def test_chat_turns_with_lookup_keep_the_cache_as_plain_decoding(engines):
    e = engines["qwen2"]
    chats = {k: ChatSession(e) for k in (0, 6)}
    for text in ("the cat sat on the mat", "the cat sat on the mat again", "and again"):
        turns = {k: chat.send(text, Request(GREEDY, 16, lookup=k)) for k, chat in chats.items()}
        for t in turns.values():
            list(t)
        assert turns[6].ids == turns[0].ids and turns[6].stats.cached_tokens == turns[0].stats.cached_tokens
        assert chats[6].tokens == chats[0].tokens and chats[6].cache.n == chats[0].cache.n == len(chats[0].tokens)
    assert chats[6].messages == chats[0].messages


# --- the real models: greedy replies that copy from the prompt ---------------------------------

CODE = ("def area(width, height):\n    return width * height\n\n\n"
        "def perimeter(width, height):\n    return 2 * (width + height)\n")


def copying_reply(e, which: str, sampler: Sampler, lookup: int) -> Generation:
    """A reply that copies ``CODE``: through the chat template for the instruct model (SmolLM2), from
    a raw prompt for the base model (Gemma 3 270M)."""
    if which == "smollm2":
        chat = ChatSession(e)
        chat.messages = [{"role": "user", "content": f"Repeat this code exactly:\n```python\n{CODE}```"}]
        gen = chat.respond(Request(sampler, 48, lookup=lookup))
    else:
        ids = e.tokenizer.encode(f"Code:\n```python\n{CODE}```\nThe same code again:\n```python\n",
                                 add_special=True, parse_special=True)
        gen = Generation(e, ids, Request(sampler, 48, lookup=lookup))
    list(gen)
    return gen


@pytest.mark.real_model
@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_greedy_on_real_models_equals_plain_decoding(which, request):
    e = load(request.getfixturevalue(f"{which}_path"))
    sampler = MarginSampler()
    plain = copying_reply(e, which, sampler, 0)
    gen = copying_reply(e, which, Sampler(GREEDY), 8)
    assert same_up_to_a_near_tie(plain.ids, sampler.margins, gen.ids)
    assert gen.stats.accepted_tokens > 10
