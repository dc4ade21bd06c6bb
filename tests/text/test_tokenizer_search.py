"""RWKV's and PLaMo 2's tokenizers (pyengine/text/greedy.py) on small vocabs: the rules, and hostile vocabs.

Their ids against llama.cpp on real-size vocabs (RWKV World, a synthetic PLaMo 2) are in
tests/text/test_tokenizer_vocabs.py; here, what those cannot show: llama.cpp's unescaping of RWKV token
texts, the ties and the unknown characters of PLaMo 2's best path, and clear errors for vocabs that
cannot work.
"""

from __future__ import annotations

import time

import pytest

from pyengine.errors import TokenizerError
from pyengine.text.greedy import MAX_TOKEN_LENGTH, plamo2_score, unescape_rwkv
from pyengine.text.tokenizer import Tokenizer

BYTES = [f"<0x{b:02X}>" for b in range(256)]


def rwkv(tokens: list[str], **keys) -> Tokenizer:
    return Tokenizer({"tokenizer.ggml.model": "rwkv", "tokenizer.ggml.tokens": tokens, **keys})


def plamo2(pieces: dict[str, float]) -> Tokenizer:
    tokens = ["<|plamo:unk|>", "<|plamo:bos|>", "<|plamo:eos|>", "<|plamo:pad|>"] + BYTES + list(pieces)
    return Tokenizer({
        "tokenizer.ggml.model": "plamo2", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * 260 + list(pieces.values()),
        "tokenizer.ggml.token_type": [2, 3, 3, 3] + [6] * 256 + [1] * len(pieces),
        "tokenizer.ggml.add_bos_token": True})


def test_rwkv_token_texts_are_unescaped_as_llama_cpp_does():
    assert unescape_rwkv(r"a\nb\tc\rd\\e\'f\x41\xff") == b"a\nb\tc\rd\\e'fA\xff"
    assert unescape_rwkv("é") == "é".encode()
    assert unescape_rwkv(r"\x4A") == bytes([(4 << 4) + ord("A") - ord("0")])   # upper case: as llama.cpp reads it


def test_rwkv_takes_the_longest_token_at_each_byte():
    tok = rwkv(["<s>", "a", "b", "ab", "abc", "bcd", r"\n", r"\xe9"], **{"tokenizer.ggml.token_type": [3] + [1] * 7})
    assert tok.encode("ab") == [3] and tok.encode("abab") == [3, 3] and tok.encode("bab") == [2, 3]
    assert tok.encode("a\nb") == [1, 6, 2] and tok.encode("abc\n") == [4, 6]
    assert tok.encode("<s>ab", parse_special=True) == [0, 3]
    assert tok.token_bytes(6) == b"\n" and tok.token_bytes(0) == b"" and tok.token_bytes(0, special=True) == b"<s>"
    with pytest.raises(TokenizerError, match="no RWKV token starts with byte 0x63"):
        tok.encode("c")


def test_rwkv_a_byte_without_token_is_the_unknown_token_when_there_is_one():
    tok = rwkv(["<unk>", "a"], **{"tokenizer.ggml.unknown_token_id": 0})
    assert tok.encode("aza") == [1, 0, 1]


def test_plamo2_takes_the_best_total_score_and_spells_unknown_characters_in_bytes():
    tok = plamo2({"ab": -1.0, "a": -0.1, "b": -0.1, "abc": -5.0, "c": -2.0, "é": -0.5})
    first = 260
    assert tok.encode("ab") == [first + 1, first + 2]                 # -0.2 beats -1.0
    assert tok.encode("abc") == [first + 1, first + 2, first + 4]     # -2.2 beats -5.0
    assert tok.encode("aé") == [first + 1, first + 5]
    assert tok.encode("z") == [4 + ord("z")]                          # no token: its byte
    assert tok.encode("ẞ") == [4 + b for b in "ẞ".encode()]          # three bytes
    assert tok.encode("\ufeffa") == [first + 1]                      # a BOM first is dropped
    assert tok.encode("ab") == tok.encode("ab", add_special=True)     # llama.cpp's plamo2 adds no BOS
    assert tok.add_bos and tok.bos_id == 1 and tok.eos_id == 2
    assert tok.token_bytes(first) == b"ab" and tok.token_bytes(4 + 0xE9) == b"\xe9"


def test_plamo2_ties_go_to_the_longer_token():
    tok = plamo2({"ab": -0.2, "a": -0.1, "b": -0.1})
    assert tok.encode("ab") == [260]
    assert plamo2_score(-0.00005) == -1 and plamo2_score(0.00005) == 1 and plamo2_score(float("nan")) < -10**7


@pytest.mark.parametrize("meta, message", [
    ({"tokenizer.ggml.model": "plamo2", "tokenizer.ggml.tokens": BYTES[:200] + ["a"],
      "tokenizer.ggml.token_type": [6] * 200 + [1]}, r"needs the 256 byte tokens; <0x00> is not set"),
    ({"tokenizer.ggml.model": "plamo2", "tokenizer.ggml.tokens": ["<unk>"] + BYTES + ["a" * (MAX_TOKEN_LENGTH + 1)],
      "tokenizer.ggml.token_type": [2] + [6] * 256 + [1]}, "a plamo2 token of more than 1024 characters"),
    ({"tokenizer.ggml.model": "rwkv", "tokenizer.ggml.tokens": ["a", "b" * (MAX_TOKEN_LENGTH + 1)]},
     "an RWKV token of more than 1024 bytes"),
])
def test_vocabs_that_cannot_work_are_clear_errors(meta, message):
    with pytest.raises(TokenizerError, match=message):
        Tokenizer(meta)


def test_a_hostile_vocab_of_every_length_ends_within_its_bound():
    """Tokens "a" * k for every k up to the limit, and a text of 5,000 "a"s: each position tries only the
    lengths that exist (1,024 at most), so the search ends (5,000 x 1,024 lookups at worst)."""
    tok = plamo2({"a" * k: -1.0 for k in range(1, MAX_TOKEN_LENGTH + 1)})
    t0 = time.perf_counter()
    ids = tok.encode("a" * 5_000)
    assert time.perf_counter() - t0 < 30                            # ~1 s here
    assert sum(len(tok.token_bytes(i)) for i in ids) == 5_000 and len(ids) == -(-5_000 // MAX_TOKEN_LENGTH)
