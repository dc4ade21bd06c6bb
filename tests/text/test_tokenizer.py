"""pyengine.text.tokenizer against llama.cpp: token ids, decoded text, special tokens, errors.

Reference data (all from llama.cpp through llama-cpp-python 0.3.36):
- tests/golden/tokenize.json (make_golden.py): Gemma 3 (SPM) and SmolLM2 (BPE, pre ``smollm``) over
  a 48-text corpus (spaces, tabs, newlines, digits, code, accents, scripts, emoji, special-token
  text, a long paragraph) and 16 chat-like texts with parse_special, plus ``llama_detokenize`` text;
- tests/golden/tokenize_variants.json (make_tokenize_golden.py): SmolLM2's vocab under the
  ``default``, ``llama-bpe``, ``qwen2`` and ``gpt-2`` pre-tokenizers, Gemma 3 with
  ``add_space_prefix``, and the tiny llama/qwen2 fixtures, over that corpus and 60 random strings;
- tests/fixtures/fixtures-reference.json: each tiny fixture's tokenization of four texts.
"""

from __future__ import annotations

import json
import sys
import warnings

import pytest
from conftest import FIXTURES, GEMMA3, GOLDEN, SMOLLM2, TINY

from pyengine.errors import TokenizerError
from pyengine.gguf import open_gguf
from pyengine.text.bpe import PRE_TOKENIZERS
from pyengine.text.pretokenize import COLLAPSE, CUSTOM, collapsed_regex, cutter, digit_groups, split_words
from pyengine.text.stream import StreamDecoder
from pyengine.text.tokenizer import Tokenizer
from pyengine.text.unicode_classes import category_ranges, compile_pattern, translate

sys.path.insert(0, str(GOLDEN))
from make_tokenize_golden import variant_metadata  # noqa: E402  (how each variant changes its vocab)

REAL = {GEMMA3.name: "gemma3_path", SMOLLM2.name: "smollm2_path"}
_cache: dict = {}


def metadata(path) -> dict:
    key = str(path)
    if key not in _cache:
        with open_gguf(path) as g:
            _cache[key] = g.metadata
    return _cache[key]


def tokenizer(path, **changes) -> Tokenizer:
    key = (str(path), tuple(sorted(changes.items())))
    if key not in _cache:
        meta = dict(metadata(path))
        meta.update(changes)
        _cache[key] = Tokenizer(meta)
    return _cache[key]


def golden(name: str) -> dict:
    if name not in _cache:
        _cache[name] = json.loads((GOLDEN / name).read_text())
    return _cache[name]


def real_tokenizer(request, name: str) -> Tokenizer:
    return tokenizer(request.getfixturevalue(REAL[name]))


# --- the real models against tokenize.json ----------------------------------------------------

@pytest.mark.parametrize("name", REAL)
def test_real_model_facts_match_llama_cpp(request, name):
    tok, ref = real_tokenizer(request, name), golden("tokenize.json")[name]
    assert (tok.model, tok.pre, tok.n_vocab) == (ref["model"], ref["pre"], ref["n_vocab"])
    assert (tok.bos_id, tok.eos_id, tok.eot_id) == (ref["bos_id"], ref["eos_id"], ref["eot_id"])
    assert (tok.add_bos, tok.add_eos) == (ref["add_bos"], ref["add_eos"])
    assert sorted(tok.eog_ids) == ref["eog_ids"]   # Gemma: <eos>, <end_of_turn>, </s>; SmolLM2: 0, 2, 4


@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize("cases,parse_special,count", [("cases", False, 48), ("cases_special", True, 16)])
def test_real_model_encodes_like_llama_cpp(request, name, cases, parse_special, count):
    tok, ref = real_tokenizer(request, name), golden("tokenize.json")[name]
    assert len(ref[cases]) == count
    for case in ref[cases]:
        assert tok.encode(case["text"], add_special=True, parse_special=parse_special) == case["ids"], case["text"]


@pytest.mark.parametrize("name", REAL)
def test_real_model_decodes_like_llama_detokenize(request, name):
    tok, ref = real_tokenizer(request, name), golden("tokenize.json")[name]
    for case in ref["detok"]:
        assert tok.decode(case["ids"]) == case["text"], case["ids"]
    for case in ref["detok_special"]:
        assert tok.decode(case["ids"], special=True) == case["text"], case["ids"]


@pytest.mark.parametrize("name", REAL)
def test_real_model_round_trips_text(request, name):
    tok = real_tokenizer(request, name)
    texts = [c["text"] for c in golden("tokenize.json")[name]["cases"]]
    for text in texts:
        assert tok.decode(tok.encode(text)) == text
    for text in [c["text"] for c in golden("tokenize.json")[name]["cases_special"]]:
        assert tok.decode(tok.encode(text, add_special=False, parse_special=True), special=True) == text


def test_special_token_text_in_user_content_stays_text(gemma3_path, smollm2_path):
    gemma, smol = tokenizer(gemma3_path), tokenizer(smollm2_path)
    assert gemma.encode("<end_of_turn>") == [2, 236820, 643, 236779, 1340, 236779, 887, 236813]
    assert gemma.encode("<end_of_turn>", parse_special=True) == [2, 106]
    assert smol.encode("<|im_end|>") == [44, 108, 306, 79, 486, 108, 46]
    assert smol.encode("<|im_end|>", parse_special=True) == [2]
    # Gemma's user-defined tokens ("\n", runs of spaces, HTML tags) are matched even so
    assert gemma.encode("a\n<table>  b", add_special=False) == \
        [gemma.token_id("a"), 107, 168, 138, gemma.token_id("b")]


def test_unused_tokens_are_found_among_thousands(gemma3_path):
    """Gemma's 6,242 <unusedN> control tokens share their first characters (the big-bucket scan);
    ids from llama.cpp."""
    tok = tokenizer(gemma3_path)
    text = "<under> <unused12><unused6241>x<unused1"
    assert tok.encode(text, add_special=False, parse_special=True) == \
        [236820, 6460, 236813, 236743, 18, 262143, 236781, 236820, 63634, 236770]
    assert tok.encode(text, add_special=False) == \
        [236820, 6460, 236813, 655, 63634, 236770, 236778, 1798, 63634, 236825, 236778, 236812, 236770,
         236813, 236781, 236820, 63634, 236770]


def test_token_bytes_render_pieces_as_llama_cpp(gemma3_path, smollm2_path):
    gemma, smol = tokenizer(gemma3_path), tokenizer(smollm2_path)
    assert gemma.token_bytes(106) == b"" and gemma.token_bytes(106, special=True) == b"<end_of_turn>"
    assert gemma.is_control(106) and not gemma.is_control(9259)
    assert gemma.token_bytes(212) == b""                     # "</s>": user-defined, made control as EOG
    assert gemma.token_bytes(212, special=True) == b"</s>"
    assert gemma.token_bytes(168) == b"<table>"              # user-defined: always its text
    assert gemma.token_bytes(248) == b"\n"                   # <0x0A>
    assert gemma.token_bytes(26352) == b" Hello"             # "▁Hello"
    assert smol.token_bytes(216) == b" " and smol.token_bytes(38699) == b" Hello"   # "Ġ", "ĠHello"
    assert smol.token_bytes(2) == b"" and smol.token_bytes(2, special=True) == b"<|im_end|>"
    with pytest.raises(TokenizerError, match="262144"):
        gemma.token_bytes(262144)


# --- other settings: tokenize_variants.json ----------------------------------------------------

def variant_tokenizer(request, entry: dict) -> Tokenizer:
    source = entry["source"]
    path = request.getfixturevalue(REAL[source]) if source in REAL else FIXTURES / source
    key = (str(path), json.dumps(entry["changes"]), tuple(entry["add_tokens"]))
    if key not in _cache:
        _cache[key] = Tokenizer(variant_metadata(metadata(path), entry["changes"],
                                                               entry["add_tokens"]))
    return _cache[key]


VARIANTS = list(json.loads((GOLDEN / "tokenize_variants.json").read_text()))


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_encodes_like_llama_cpp(request, variant):
    entry = golden("tokenize_variants.json")[variant]
    tok = variant_tokenizer(request, entry)
    # With add_space_prefix, text after a user-defined token (Gemma's "  ", "\n") gets a space of
    # its own that was not in the input: such texts do not round-trip, in llama.cpp either.
    round_trips = not (tok.add_space_prefix and variant.startswith("gemma3"))
    assert len(entry["cases"]) == 127
    for case in entry["cases"]:
        assert tok.encode(case["text"]) == case["ids"], case["text"]
        special = case.get("ids_special", case["ids"])
        assert tok.encode(case["text"], parse_special=True) == special, case["text"]
        if round_trips:
            assert tok.decode(tok.encode(case["text"])) == case["text"]


def test_variants_tell_the_pre_tokenizers_apart():
    """Every two pre-tokenizers give different golden ids on some text of some vocab (so the test
    above can tell them apart). SmolLM2 has no digit merges, so there llama-bpe and qwen2 (which
    differ in splitting digit runs) agree; tiny-qwen2 merges "1 2" and tells them apart."""
    v = golden("tokenize_variants.json")
    pre_of = {name: v[name]["changes"].get("tokenizer.ggml.pre", "qwen2") for name in v
              if name.startswith(("smollm2-pre-", "tiny-qwen2"))}
    differ: dict[tuple[str, str], int] = {}
    for a in pre_of:
        for b in pre_of:
            if a < b and a.split("-")[0] == b.split("-")[0]:      # same vocab
                pair = tuple(sorted((pre_of[a], pre_of[b])))
                n = sum(x["ids"] != y["ids"] for x, y in zip(v[a]["cases"], v[b]["cases"]))
                differ[pair] = differ.get(pair, 0) + n
    assert len(differ) == 10 and min(differ.values()) >= 1, differ
    zebra = {pre_of[n]: next(c["ids"] for c in v[n]["cases"] if c["text"] == "a zebra crossing")
             for n in pre_of if "add_tokens" in v[n] and v[n]["add_tokens"]}
    assert 302 in zebra["llama-bpe"] and 302 not in zebra["gpt-2"]   # ignore_merges


# --- the tiny fixtures ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(TINY))
def test_fixture_tokenizations_match_llama_cpp(fixtures_reference, name):
    tok = tokenizer(TINY[name])
    cases = fixtures_reference["fixtures"][name]["reference"]["tokenize_add_bos"]
    assert len(cases) == 4
    for text, case in cases.items():
        assert tok.encode(text) == case["ids"], text
        assert tok.decode(case["ids"]) == case["detok"] == text


def test_space_prefix_is_dropped_when_decoding():
    tok = tokenizer(TINY["llama"])            # add_space_prefix defaults to true for SPM
    assert tok.add_space_prefix
    ids = tok.encode("hello", add_special=False)
    assert ids[0] == 259 and tok.token_bytes(259) == b" "
    assert tok.decode(ids) == "hello" and tok.decode([tok.bos_id] + ids) == "hello"


# --- streaming ------------------------------------------------------------------------------------

def test_stream_decoder_holds_back_partial_characters():
    tok = tokenizer(TINY["llama"])
    ids = tok.encode("café 日本", add_special=False)   # "日" and "本" fall back to 3 byte tokens each
    assert ids[-6:] == [233, 154, 168, 233, 159, 175]
    stream = StreamDecoder(tok)
    pieces = [stream.push(i) for i in ids]
    assert pieces[-6:] == ["", "", "日", "", "", "本"]
    assert "".join(pieces) + stream.flush() == " café 日本"   # a stream keeps the space prefix
    assert all("\ufffd" not in p for p in pieces)


def test_stream_decoder_releases_invalid_bytes():
    tok = tokenizer(TINY["llama"])
    stream = StreamDecoder(tok)
    assert stream.push(233) == ""                     # 0xE6 opens a 3-byte character...
    assert stream.push(tok.token_id("h")) == "\ufffdh"   # ...that never comes
    assert stream.push(233) == "" and stream.flush() == "\ufffd" and stream.flush() == ""


def test_stream_decoder_on_real_model_emoji(smollm2_path):
    tok = tokenizer(smollm2_path)
    text = "emoji 😀🎉👍🏽 中文"
    ids = tok.encode(text, add_special=False)
    stream = StreamDecoder(tok)
    pieces = [stream.push(i) for i in ids]
    assert "".join(pieces) == text and "" in pieces and all("\ufffd" not in p for p in pieces)


# --- bad vocabs -----------------------------------------------------------------------------------

def tiny_meta(name: str, **changes) -> dict:
    meta = dict(metadata(TINY[name]))
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    return meta


BAD_VOCABS = [
    ("llama", {"tokenizer.ggml.model": "bert"}, "tokenizer.ggml.model = 'bert' .*supported: llama, gpt2"),
    ("llama", {"tokenizer.ggml.model": None}, "tokenizer.ggml.model"),
    ("qwen2", {"tokenizer.ggml.pre": "made-up"}, "tokenizer.ggml.pre = 'made-up' .*llama-bpe.*qwen2.*smollm"),
    ("llama", {"tokenizer.ggml.tokens": None}, "tokenizer.ggml.tokens: missing or empty"),
    ("llama", {"tokenizer.ggml.tokens": []}, "tokenizer.ggml.tokens: missing or empty"),
    ("llama", {"tokenizer.ggml.tokens": ["a", 7]}, "tokenizer.ggml.tokens: entry 1 is a int"),
    ("llama", {"tokenizer.ggml.tokens": "abc"}, "tokenizer.ggml.tokens: expected list"),
    ("llama", {"tokenizer.ggml.scores": [0.0] * 5}, "tokenizer.ggml.scores: 5 entries, but .* 328 tokens"),
    ("llama", {"tokenizer.ggml.token_type": [1] * 329}, "tokenizer.ggml.token_type: 329 entries"),
    ("llama", {"tokenizer.ggml.token_type": [1.0] * 328}, "tokenizer.ggml.token_type: entry 0 is a float"),
    ("llama", {"tokenizer.ggml.bos_token_id": 328}, "tokenizer.ggml.bos_token_id = 328 is outside"),
    ("llama", {"tokenizer.ggml.eos_token_id": -1}, "tokenizer.ggml.eos_token_id = -1 is outside"),
    ("llama", {"tokenizer.ggml.eot_token_id": "2"}, "tokenizer.ggml.eot_token_id: expected int"),
    ("llama", {"tokenizer.ggml.add_bos_token": 1}, "tokenizer.ggml.add_bos_token: expected bool"),
    ("qwen2", {"tokenizer.ggml.merges": None}, "tokenizer.ggml.merges: missing"),
    ("qwen2", {"tokenizer.ggml.merges": ["a b", None]}, "tokenizer.ggml.merges: entry 1"),
    ("qwen2", {"tokenizer.ggml.tokens": ["a", "b"], "tokenizer.ggml.token_type": None,
               "tokenizer.ggml.bos_token_id": None, "tokenizer.ggml.eos_token_id": None,
               "tokenizer.ggml.padding_token_id": None, "tokenizer.ggml.eot_token_id": None,
               "tokenizer.ggml.add_bos_token": True},
     "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set"),
]


@pytest.mark.parametrize("fixture,changes,message", BAD_VOCABS)
def test_bad_vocab_is_a_tokenizer_error_naming_the_key(fixture, changes, message):
    with pytest.raises(TokenizerError, match=message):
        Tokenizer(tiny_meta(fixture, **changes))


def test_missing_byte_token_is_a_tokenizer_error():
    tokens = ["<unk>", "<s>", "</s>", "\u2581a", "a"]
    tok = Tokenizer({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
                                   "tokenizer.ggml.add_space_prefix": False})
    assert tok.encode("a a") == [1, 4, 3]
    with pytest.raises(TokenizerError, match="no byte token <0x62>"):
        tok.encode("b")


def test_missing_pre_means_default_and_types_default_to_normal():
    tok = Tokenizer(tiny_meta("qwen2", **{"tokenizer.ggml.pre": None,
                                                        "tokenizer.ggml.token_type": None}))
    assert tok.pre == "default" and not tok.is_control(0)
    assert tok.is_control(301)       # the EOS: llama.cpp makes every end-of-generation token control


def test_lone_surrogates_encode_as_replacement_character():
    tok = tokenizer(TINY["qwen2"])
    assert tok.encode("a\ud800b") == tok.encode("a\ufffdb")


# --- the pre-tokenizer machinery ------------------------------------------------------------------

def test_every_pre_tokenizer_regex_has_a_splitter():
    """Each regex of the table runs as llama.cpp runs it: hand-written splitters for the ones it
    knows by text, std::regex (emulated) for the rest; none makes ``re`` warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, pre in PRE_TOKENIZERS.items():
            for regex in pre.regexes:
                assert cutter(regex)("x") is not None, name
    hand = {r for pre in PRE_TOKENIZERS.values() for r in pre.regexes if r in CUSTOM}
    assert len(hand) == 8 and r"\p{Han}+" in hand and PRE_TOKENIZERS["qwen35"].regexes[0] in hand
    assert {"default", "llama-bpe", "qwen2", "smollm", "gpt-2", "deepseek-llm", "falcon", "qwen35"} \
        <= set(PRE_TOKENIZERS)


def test_std_regex_runs_over_the_collapsed_text():
    """llama.cpp's std::regex path: \\p{..} classes (the letter subclasses too) become one byte per
    class plus their ASCII members, and the text's non-ASCII code points that byte."""
    pattern, collapsed = collapsed_regex(r"[^\s\p{Lu}]+$")
    assert collapsed and pattern.startswith("[^\\s\\xd2\\x41") and pattern.endswith("]+\\Z")
    assert collapsed_regex("[\r\n]") == ("[\r\n]", False)
    assert "é中½\u3000\u0301!\u0378\u00a0".translate(COLLAPSE) == "\xd2\xd2\xd1\x0b\xd4!\xd0\x0b"
    with pytest.raises(ValueError, match="Han"):
        collapsed_regex(r"\p{Han}")
    with pytest.raises(ValueError, match="must be ASCII"):
        collapsed_regex(r"[\p{L}é]")
    # \p{Lu} is any letter there, small or capital
    assert split_words("éA bC1", (r"\p{Lu}+",)) == ["éA", " ", "bC", "1"]
    # without a class, non-ASCII whitespace is \x0B: DeepSeek's U+3000-U+3002 range loses U+3000
    deepseek = PRE_TOKENIZERS["deepseek-llm"].regexes
    assert split_words("\u3001\u3000\u3002", deepseek[2:3]) == ["\u3001", "\u3000\u3002"]
    assert split_words("a  \n", (r"\s+$",)) == ["a", "  \n"]        # $ is the end of the piece only


def test_digit_groups_glue_the_text_before_a_run_to_its_first_group():
    """AFMoE's digit splitter as llama.cpp has it: "ab" joins the leading 1 of 1234."""
    assert [("ab1234x"[a:b]) for a, b in digit_groups("ab1234x")] == ["ab1", "234", "x"]
    assert split_words("ab1234x 12", (r"\p{AFMoE_digits}",)) == ["ab1", "234", "x 12"]
    assert split_words("1234567", (r"\d{1,3}(?=(?:\d{3})*\b)",)) == ["1", "234", "567"]
def test_translate_spells_classes_out_and_refuses_what_it_cannot():
    ws = translate(r"\s")
    assert ws.startswith("[\\U00000009") and "\\U00003000" in ws and "\\U0000001c" not in ws
    assert translate(r"[^\s\p{N}]").startswith("[^\\U00000009")          # spliced into the class
    assert translate(r"\S").startswith("[^") and translate(r"a\.b") == r"a\.b"
    with pytest.raises(ValueError, match="Han"):
        translate(r"\p{Han}")
    with pytest.raises(ValueError, match="S inside"):
        translate(r"[\S]")


def test_unicode_classes_follow_unicodedata():
    ranges = category_ranges()
    letters = ranges["L"]
    assert (0x41, 0x5A) in letters and (0x61, 0x7A) in letters
    assert any(a <= 0x4E2D <= b for a, b in letters)          # 中
    assert any(a <= 0x0663 <= b for a, b in ranges["N"])      # ARABIC-INDIC DIGIT THREE
    assert not any(a <= 0x0378 <= b for r in ranges.values() for a, b in r)   # unassigned
    # assigned in Unicode 15.0/15.1 (llama.cpp's tables), unknown to CPython 3.11's unicodedata
    assert any(a <= 0x31350 <= b for a, b in letters) and any(a <= 0x2EBF0 <= b for a, b in letters)
    assert any(a <= 0x11F50 <= b for a, b in ranges["N"]) and any(a <= 0x11F00 <= b for a, b in ranges["M"])
    letter = compile_pattern(r"\p{L}+")
    assert letter.fullmatch("Straße中文") and not letter.search("12 _\u0301")


def test_split_words_keeps_gaps_and_matches_like_llama_cpp():
    gpt2 = PRE_TOKENIZERS["gpt-2"].regexes
    # "\t\t" before a letter: \s+(?!\S) takes one tab, the other is a gap of its own
    assert split_words("a\t\tb", gpt2) == ["a", "\t", "\t", "b"]
    assert split_words("it's  12ab!!\n", gpt2) == ["it", "'s", " ", " 12", "ab", "!!", "\n"]
    smollm = PRE_TOKENIZERS["smollm"].regexes
    assert split_words("x 123", smollm) == ["x", " ", "1", "2", "3"]
    assert split_words("", smollm) == []
    assert split_words("\U00031350\U00031351!", gpt2) == ["\U00031350\U00031351", "!"]   # Unicode 15 letters
    assert "".join(split_words("mixed \u3000text\u00a0 42\r\n", smollm)) == "mixed \u3000text\u00a0 42\r\n"
    kimi = PRE_TOKENIZERS["kimi-k2"].regexes      # Han runs apart from other letters
    assert split_words("ab中文cd's 1234", kimi) == ["ab", "中文", "cd's", " ", "123", "4"]
