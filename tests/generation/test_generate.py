"""The generation loop and the chat session: stops, streaming, statistics, prefix reuse, llama.cpp goldens."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import GOLDEN, TINY

from pyengine.errors import PyEngineError, TemplateError
from pyengine.generation import ChatSession, Engine, Generation, chat_prompt, generate, load
from pyengine.generation.chat import common_prefix
from pyengine.generation.loop import StopStrings
from pyengine.generation.request import Request
from pyengine.generation.sampling import Sampler, SamplerParams
from pyengine.text.chat_template import ChatTemplate

GREEDY = SamplerParams(temperature=0.0)


# --- a scripted model and a byte tokenizer: the loop's logic without a network ------------------

class FakeCache:
    def __init__(self, n_ctx: int):
        self.n, self.n_ctx = 0, n_ctx

    def truncate(self, n: int) -> None:
        assert 0 <= n <= self.n
        self.n = n


class ScriptedModel:
    """Greedy sampling from this model yields ``script`` in order: the logits after the token at
    position ``first + j`` (``first``: the prompt's last position) pick ``script[j]``, however the
    positions are batched; every forward call is recorded."""

    def __init__(self, script: list[int], n_vocab: int = 300):
        self.script, self.n_vocab, self.calls, self.first = script, n_vocab, [], None

    def new_cache(self, n_ctx=None):
        return FakeCache(n_ctx or 64)

    def forward(self, tokens, cache, logits="last"):
        assert cache.n + len(tokens) <= cache.n_ctx
        if self.first is None:
            self.first = cache.n + len(tokens) - 1
        positions = range(cache.n, cache.n + len(tokens))
        cache.n += len(tokens)
        self.calls.append(list(tokens))
        out = np.zeros((len(tokens), self.n_vocab), np.float32)     # (T, n_vocab)
        for row, pos in zip(out, positions):
            tok = self.script[min(max(pos - self.first, 0), len(self.script) - 1)]
            row[(tok + 1) % self.n_vocab] = 0.75                    # a runner-up, for the repetition penalty
            row[tok] = 1.0
        return out if logits == "all" else out[-1]


class ByteTokenizer:
    """Ids 0..255 are bytes; 256 ends generation; 257 is a two-token '€' start (first two bytes)."""
    eog_ids = frozenset({256})

    def token_bytes(self, tid: int, special: bool = False) -> bytes:
        return {256: b"", 257: "€".encode()[:2], 258: "€".encode()[2:] + b"!"}.get(tid, bytes([tid % 256]))


def ids_of(text: str) -> list[int]:
    return list(text.encode())


def run(script, max_tokens=50, stops=(), n_ctx=64, prompt=(1, 2, 3), **kw):
    model = ScriptedModel(script)
    gen = Generation(Engine(None, model, ByteTokenizer()), list(prompt),
                     Request(Sampler(GREEDY), max_tokens, stop_strings=stops, **kw), model.new_cache(n_ctx))
    return gen, list(gen), model


def test_stop_at_eog_the_eog_is_not_text():
    gen, pieces, model = run(ids_of("Hi!") + [256, 65])
    assert pieces == ["H", "i", "!", ""] and gen.text == "Hi!" and gen.ids == ids_of("Hi!")
    assert gen.stats.stop_reason == "eog" and gen.stats.generated_tokens == 3
    assert model.calls == [[1, 2, 3], [72], [105], [33]]     # one prefill, then one token per step
    assert gen.tokens == [1, 2, 3, 72, 105, 33]                # what the cache holds
    assert (gen.stats.prompt_tokens, gen.stats.prefill_tokens, gen.stats.decode_tokens) == (3, 3, 3)


def test_stop_string_split_across_tokens():
    gen, pieces, _ = run(ids_of("ab</s>cd"), stops=["</s>"])
    assert pieces == ["a", "b", "", "", "", ""] and gen.text == "ab"
    assert gen.stats.stop_reason == "stop_string" and gen.ids == ids_of("ab</s>")


def test_held_back_text_that_is_not_a_stop_is_released():
    gen, pieces, _ = run(ids_of("a</x") + [256], stops=["</s>"])
    assert pieces == ["a", "", "", "</x", ""] and gen.text == "a</x"
    gen, pieces, _ = run(ids_of("a</"), max_tokens=3, stops=["</s>"])   # held at the end: released
    assert pieces == ["a", "", "</"] and gen.stats.stop_reason == "max_tokens"


def test_utf8_is_held_until_the_character_completes():
    gen, pieces, _ = run([257, 258, 256])
    assert pieces == ["", "€!", ""] and gen.text == "€!"
    gen, pieces, _ = run([257], max_tokens=1)                            # cut inside the character
    assert pieces == ["\ufffd"] and gen.stats.stop_reason == "max_tokens"


def test_max_tokens_and_context_limit():
    gen, pieces, model = run(ids_of("abcdefgh"), max_tokens=4)
    assert gen.text == "abcd" and gen.stats.stop_reason == "max_tokens" and len(model.calls) == 4
    gen, _, _ = run(ids_of("abcdefgh"), n_ctx=6)              # 3 prompt tokens + 3 in the cache, a 4th sampled
    assert gen.text == "abcd" and gen.stats.stop_reason == "context" and gen.tokens == [1, 2, 3, 97, 98, 99]
    with pytest.raises(PyEngineError, match="more than the context"):
        run([65], n_ctx=2)


def test_should_stop_and_close_between_tokens():
    answers = iter([False, True])                    # asked before each decode step
    gen, pieces, model = run(ids_of("abcdef"), should_stop=lambda: next(answers))
    assert gen.text == "ab" and gen.stats.stop_reason == "stopped" and len(model.calls) == 2
    model = ScriptedModel(ids_of("abcdef"))
    finished = []
    gen = Generation(Engine(None, model, ByteTokenizer()), [1], Request(Sampler(GREEDY), 50, stop_strings=("cd",)),
                     on_finish=finished.append)
    assert [gen.step(), gen.step(), gen.step()] == ["a", "b", ""]
    gen.close()
    assert gen.text == "ab" and gen.step() is None and finished == [gen]   # the held 'c' was never shown
    assert gen.stats.stop_reason == "stopped"


def test_repetition_penalty_sees_the_prompt():
    params = SamplerParams(temperature=0, repeat_penalty=2.0)
    for prompt, want in (([5], 6), ([4], 5)):        # 5 is in the prompt: 1.0 / 2 < 0.75, its runner-up wins
        gen = Generation(Engine(None, ScriptedModel([5]), ByteTokenizer()), prompt, Request(Sampler(params), 1))
        list(gen)
        assert gen.ids == [want]


def test_empty_prompt_is_an_error():
    with pytest.raises(PyEngineError, match="empty"):
        Generation(Engine(None, ScriptedModel([1]), ByteTokenizer()), [], Request(Sampler(GREEDY), 5))


def test_stop_strings_alone():
    s = StopStrings(["</s>", "STOP"])
    assert s.push("Hello </") == ("Hello ", False) and s.held == "</"
    assert s.push("b>") == ("</b>", False)
    assert s.push("xST") == ("x", False)
    assert s.push("OPyz") == ("", True)
    s = StopStrings(["ab", "bcd"])
    assert s.push("xb") == ("x", False) and s.push("c") == ("", False) and s.flush() == "bc"
    assert StopStrings([]).push("a</s>") == ("a</s>", False)
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and common_prefix([1, 2], [1, 2, 3]) == 2


# --- the tiny fixtures: a real network, llama.cpp's greedy ids --------------------------------

@pytest.fixture(scope="module")
def engines():
    return {name: load(TINY[name]) for name in ("llama", "qwen2", "qwen3", "gemma3")}


@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "gemma3"])
def test_greedy_ids_equal_llama_cpp_on_fixtures(engines, name, fixtures_reference):
    ref = fixtures_reference["fixtures"][name]["reference"]
    e = engines[name]
    gen = generate(e, ref["prompt_ids"], Request(GREEDY, len(ref["greedy_next_ids"])))
    text = "".join(gen)
    assert gen.ids == ref["greedy_next_ids"] and gen.stats.stop_reason == "max_tokens"
    assert text == gen.text == e.tokenizer.decode(gen.ids)
    assert gen.stats.prefill_tokens == 4 and gen.stats.decode_tokens == 7 and gen.stats.generated_tokens == 8


def test_seed_repeats_a_sampled_reply(engines):
    e = engines["qwen2"]
    params = SamplerParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    runs = [generate(e, [72, 101], Request(params, 12)) for _ in range(2)]
    for r in runs:
        list(r)
    assert runs[0].ids == runs[1].ids and len(set(runs[0].ids)) > 2


def test_chat_second_turn_prefills_only_what_is_new(engines):
    e = engines["qwen2"]
    chat = ChatSession(e)
    first = chat.send("hello the world", Request(GREEDY, 6))
    list(first)
    held = list(chat.tokens)                                   # the cache after turn 1
    assert held == first.prompt_ids + first.ids[:-1] and chat.cache.n == len(held)
    second = chat.send("is it the end?", Request(GREEDY, 6))
    reused = common_prefix(held, second.prompt_ids)
    assert reused >= len(first.prompt_ids)                     # at least the whole first prompt
    assert second.stats.cached_tokens == reused
    list(second)
    assert second.stats.prefill_tokens == len(second.prompt_ids) - reused
    assert chat.messages == [{"role": "user", "content": "hello the world"},
                             {"role": "assistant", "content": first.text},
                             {"role": "user", "content": "is it the end?"},
                             {"role": "assistant", "content": second.text}]
    fresh = ChatSession(e)                                     # same conversation, no cache: same reply
    fresh.messages = chat.messages[:3]
    again = fresh.respond(Request(GREEDY, 6))
    list(again)
    assert again.prompt_ids == second.prompt_ids and again.ids == second.ids


def test_chat_stopped_turn_keeps_what_was_shown(engines):
    chat = ChatSession(engines["llama"], system="Be brief.")
    turn = chat.send("hello", Request(GREEDY, 20))
    shown = [turn.step() for _ in range(3)]
    turn.close()
    assert chat.messages[-1] == {"role": "assistant", "content": "".join(shown)}
    nxt = chat.send("again", Request(GREEDY, 2))            # the session goes on from there
    list(nxt)
    assert nxt.stats.cached_tokens > 0 and len(chat.messages) == 4
    assert chat.conversation()[0] == {"role": "system", "content": "Be brief."}
    chat.reset()
    assert chat.messages == [] and chat.cache.n == 0 and chat.system == "Be brief."


def test_chat_keeps_of_a_stopped_reply_what_the_caller_showed(engines):
    """keep_shown: a Stop that landed after a token's text was taken, before it was shown (the page's)."""
    chat = ChatSession(engines["llama"])
    turn = chat.send("hello", Request(GREEDY, 20))
    shown = [turn.step() for _ in range(3)]
    turn.step()                                              # taken, never shown
    turn.close()
    chat.keep_shown("".join(shown))
    assert chat.messages[-1] == {"role": "assistant", "content": "".join(shown)}
    more = chat.resume(Request(GREEDY, 6))
    extra = more.step() + more.step()
    more.close()
    chat.keep_shown(extra)                                   # a resumed reply keeps its start too
    assert chat.messages[-1] == {"role": "assistant", "content": "".join(shown) + extra}


def test_a_reply_that_fails_midway_leaves_the_conversation_as_it_was(engines):
    """A failed reply is not part of the conversation: neither the message nor its partial reply stays."""
    class Broken:
        def __getattr__(self, name):
            return getattr(engines["llama"].model, name)

        def forward(self, *args, **kw):
            raise PyEngineError("the model broke")

    chat = ChatSession(engines["llama"])
    list(chat.send("hello", Request(GREEDY, 4)))
    before = [dict(m) for m in chat.messages]
    turn = chat.send("again", Request(GREEDY, 8))
    turn.step()
    turn.model = Broken()
    with pytest.raises(PyEngineError, match="broke"):
        list(turn)
    assert chat.messages == before and turn.stats.stop_reason == "error"
    with pytest.raises(PyEngineError):
        chat.respond(Request(GREEDY, 4), [{"role": "robot", "content": "x"}])
    assert chat.messages == before                           # messages refused: the conversation stays


def test_special_text_typed_by_the_user_stays_plain_text(engines):
    e = engines["qwen2"]
    tok = e.tokenizer
    im_start, im_end = tok.token_id("<|im_start|>"), tok.token_id("<|im_end|>")
    text, ids = chat_prompt(e.template, tok, [{"role": "user", "content": "a<|im_end|>b"}])
    assert text == "<|im_start|>user\na<|im_end|>b<|im_end|>\n<|im_start|>assistant\n"
    plain = tok.encode("<|im_end|>", add_special=False, parse_special=False)
    assert im_end not in plain and len(plain) > 3
    assert ids == (tok.encode("<|im_start|>user\na", add_special=True, parse_special=True) + plain
                   + tok.encode("b<|im_end|>\n<|im_start|>assistant\n", add_special=False, parse_special=True))
    assert ids.count(im_end) == 1 and ids.count(im_start) == 2
    text, ids = chat_prompt(e.template, tok, [{"role": "user", "content": "a b"}])   # nothing typed: llama.cpp's ids
    assert ids == tok.encode(text, add_special=True, parse_special=True)


def test_chat_failed_render_leaves_the_conversation(engines):
    e = engines["llama"]
    broken = Engine(e.gguf, e.model, e.tokenizer,
                    ChatTemplate("{{ raise_exception('no') }}", None))
    chat = ChatSession(broken)
    with pytest.raises(TemplateError, match="no"):
        chat.send("hello")
    assert chat.messages == []
    with pytest.raises(TemplateError, match="jinja"):
        ChatSession(Engine(e.gguf, e.model, e.tokenizer, None, "needs jinja2"))


def test_chat_that_outgrows_the_context(engines):
    chat = ChatSession(engines["llama"], n_ctx=16)
    with pytest.raises(PyEngineError, match="no longer fits"):
        chat.send("hello the world " * 4)
    assert chat.messages == []


# --- the real models against llama.cpp (tests/golden/chat.json) -------------------------------

# logits: llama.cpp's own runs with an F16 and an F32 KV cache differ by up to 0.38 (SmolLM2) and
# 0.54 (Gemma 3) on the top-40 logits (generate.json, logits_stats.max_abs_diff_f32_kv_top40).
NEAR_TIE = 0.5


class RecordingSampler(Sampler):
    """Greedy, and keeps each step's top-2 ids and their logit margin."""

    def __init__(self):
        super().__init__(GREEDY)
        self.steps = []

    def sample(self, logits, history=()):
        top2 = np.argsort(-logits)[:2]
        self.steps.append((int(top2[0]), int(top2[1]), float(logits[top2[0]] - logits[top2[1]])))
        return super().sample(logits, history)


def check_chat(engine: Engine, case: dict, jinja: bool, limit: int) -> Generation:
    """The rendered prompt and its ids equal llama.cpp's (``prompt``, ``prompt_ids``, or their
    ``_jinja`` forms for the GGUF's template rendered by llama-cpp-python); so do the greedy ids, up
    to ``limit`` tokens, unless they part at a close call, where llama.cpp's F16 KV cache and
    quantized activations may decide the other way: llama.cpp's top-2 margin under NEAR_TIE, or
    ours under NEAR_TIE with llama.cpp's pick as our runner-up."""
    key = (lambda k: f"{k}_jinja") if jinja else (lambda k: k)
    chat = ChatSession(engine)
    chat.messages = list(case["messages"])
    want = case[key("ids")] + ([case[key("stop_id")]] if case[key("stop_id")] is not None else [])
    margins = case.get(key("margins")) or []
    sampler = RecordingSampler()
    gen = chat.respond(Request(sampler, limit))
    list(gen)
    assert chat.prompt == case[key("prompt")]
    assert gen.prompt_ids == case["prompt_jinja_ids" if jinja else "prompt_ids"]
    got = [first for first, _, _ in sampler.steps]
    n = common_prefix(got, want)
    if n < min(limit, len(want)):
        _, second, margin = sampler.steps[n]
        theirs = margins[n] if n < len(margins) else float("inf")
        assert theirs < NEAR_TIE or (margin < NEAR_TIE and second == want[n]), \
            f"step {n}: ours (top, runner-up, margin) {sampler.steps[n]}, llama.cpp's {want[n]}"
    return gen


@pytest.fixture(scope="module")
def golden_chat():
    return json.loads((GOLDEN / "chat.json").read_text())


@pytest.mark.real_model
def test_smollm2_chats_through_its_own_template(smollm2_path, golden_chat):
    engine = load(smollm2_path)
    assert engine.template.name == "jinja"
    cases = golden_chat[smollm2_path.name]
    for case in cases[1:]:                               # its Jinja template, as llama-cpp-python renders it
        check_chat(engine, case, jinja=True, limit=12)
    answer = check_chat(engine, cases[0], jinja=True, limit=12)
    assert answer.text == cases[0]["text_jinja"] == "The capital of France is Paris."
    assert answer.ids == cases[0]["ids_jinja"] and answer.stats.stop_reason == "eog"
    chatml = Engine(engine.gguf, engine.model, engine.tokenizer,
                    ChatTemplate.from_metadata(engine.gguf.metadata, "<|im_start|>", "<|im_end|>", use_jinja=False))
    for case in cases:                                   # llama.cpp's built-in chatml
        assert chat_prompt(chatml.template, chatml.tokenizer, case["messages"]) == (case["prompt"], case["prompt_ids"])
    reply = check_chat(chatml, cases[1], jinja=False, limit=8)
    assert reply.text == cases[1]["text"] and reply.stats.stop_reason == "eog"


@pytest.mark.real_model
def test_gemma3_chats_through_the_builtin_gemma_format(gemma3_path, golden_chat):
    engine = load(gemma3_path)
    assert engine.template.name == "gemma"
    for case in golden_chat[gemma3_path.name]:
        check_chat(engine, case, jinja=False, limit=8)
