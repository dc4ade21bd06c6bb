"""The tokenizer on llama.cpp's own vocab test files and under every pre-tokenizer name, against llama.cpp.

Reference: tests/golden/tokenize_vocabs.json (make_vocab_golden.py, llama-cpp-python 0.3.36), over
the vocab-only GGUFs llama.cpp tests its tokenizers with and two built beside them, RWKV World's and a
synthetic PLaMo 2 (build_scripts/fetch_vocabs.py puts them in .cache/vocab/; ``make test`` fetches
them, and under CI a missing file is a failure):

- each file's ``.inp`` texts give llama.cpp's ids exactly (which are also the ids of the model's
  own tokenizer, its ``.out`` file);
- each file, over 157 texts (the project's corpus, chat texts, seeded random strings), gives
  llama.cpp's ids with parse_special off and on, and llama.cpp's pieces for them;
- every ``tokenizer.ggml.pre`` name of llama.cpp's table, on the Qwen2 or Gemma 4 vocab, gives
  llama.cpp's ids, pieces and special-token facts over the same texts.
"""

from __future__ import annotations

import json
import os
import sys
from functools import cache
from pathlib import Path

import pytest
from conftest import GOLDEN, ROOT

from pyengine.gguf import open_gguf
from pyengine.text.bpe import PRE_TOKENIZERS
from pyengine.text.tokenizer import Tokenizer
from pyengine.text.vocab import EOT_TEXTS

sys.path.insert(0, str(GOLDEN))
from make_vocab_golden import (  # noqa: E402
    digest,
    oracle_metadata,
    oracle_texts,
    oracle_wrong,
    pyengine_digest,
    read_inp,
    variant_metadata,
)

VOCAB_DIR = ROOT / ".cache" / "vocab"
GOLD = json.loads((GOLDEN / "tokenize_vocabs.json").read_text())


def vocab_path(name: str) -> Path:
    path = VOCAB_DIR / f"ggml-vocab-{name}.gguf"
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing: run build_scripts/fetch_vocabs.py")
        pytest.skip(f"{path.name} not fetched (python build_scripts/fetch_vocabs.py)")
    return path


@cache
def metadata(name: str) -> dict:
    with open_gguf(vocab_path(name)) as g:
        return g.metadata


@cache
def tokenizer(name: str) -> Tokenizer:
    return Tokenizer(metadata(name))


def wrong_texts(tok: Tokenizer, digests: list[str]) -> list[str]:
    assert len(digests) == len(GOLD["texts"]) == 157
    return [t for t, d in zip(GOLD["texts"], digests) if pyengine_digest(tok, t) != d]


def check_facts(tok: Tokenizer, ref: dict, meta: dict) -> None:
    """The special ids and flags llama.cpp reports. Where several texts could be the EOT token
    and no key names it, llama.cpp takes the first in its hash map's order and pyengine the
    lowest id: then both must be one of them (the ids that end generation agree either way)."""
    none = lambda i: -1 if i is None else i  # noqa: E731  (llama.cpp's LLAMA_TOKEN_NULL)
    got = {"bos_id": none(tok.bos_id), "eos_id": none(tok.eos_id), "eog_ids": sorted(tok.eog_ids),
           "add_bos": tok.add_bos, "add_eos": tok.add_eos}
    assert got == {k: ref[k] for k in got}
    candidates = {tok.token_to_id[t] for t in EOT_TEXTS if t in tok.token_to_id}
    if len(candidates) > 1 and "tokenizer.ggml.eot_token_id" not in meta:
        assert {none(tok.eot_id), ref["eot_id"]} <= candidates
    else:
        assert none(tok.eot_id) == ref["eot_id"]


# --- llama.cpp's vocab files ------------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n, v in GOLD["vocabs"].items() if "inp" in v])
def test_inp_texts_give_llama_cpps_ids(name):
    entry, tok = GOLD["vocabs"][name], tokenizer(name)
    texts = read_inp(Path(str(vocab_path(name)) + ".inp"))
    assert len(texts) == len(entry["inp"]) == entry["inp_equals_out"] >= 46
    for text, ids in zip(texts, entry["inp"]):
        assert tok.encode(text, add_special=False) == ids, text


@pytest.mark.parametrize("name", GOLD["vocabs"])
def test_vocab_file_gives_llama_cpps_ids_and_pieces(name):
    entry, tok = GOLD["vocabs"][name], tokenizer(name)
    assert (tok.model, tok.n_vocab) == (entry["model"], entry["n_vocab"])
    check_facts(tok, entry, metadata(name))
    assert wrong_texts(tok, entry["texts"]) == []


# --- every pre-tokenizer name ----------------------------------------------------------------------

@cache
def with_tokens(base: str, add_tokens: tuple[str, ...]) -> dict:
    return variant_metadata(metadata(base), {}, list(add_tokens))


def variant_meta(name: str) -> dict:
    spec = GOLD["variants"][name]
    meta = dict(with_tokens(spec["base"], tuple(spec["add_tokens"])))
    meta.update(spec["changes"])
    return {k: v for k, v in meta.items() if v is not None}


def config(name: str) -> tuple:
    """What a variant's tokenizer depends on: the names of one pre-tokenizer share it."""
    spec = GOLD["variants"][name]
    changes = {k: v for k, v in spec["changes"].items() if k != "tokenizer.ggml.pre"}
    pre = PRE_TOKENIZERS[spec["changes"]["tokenizer.ggml.pre"]]
    return spec["base"], pre, json.dumps(changes, sort_keys=True), tuple(spec["add_tokens"])


FIRST_OF_CONFIG = {}                     # config -> the first name with it, whose values are checked
for _name in GOLD["variants"]:
    FIRST_OF_CONFIG.setdefault(config(_name), _name)


@cache
def variant_tokenizer(name: str) -> Tokenizer:
    """The tokenizer of the first name of ``name``'s config (built once per config)."""
    first = FIRST_OF_CONFIG[config(name)]
    return Tokenizer(variant_meta(first)) if first == name else variant_tokenizer(first)


def test_every_pre_tokenizer_name_has_golden_values():
    assert set(GOLD["variants"]) == set(PRE_TOKENIZERS) | {"kimi-k2-no-merges"}


@pytest.mark.parametrize("name", GOLD["variants"])
def test_pre_tokenizer_gives_llama_cpps_ids_and_pieces(name):
    spec, tok, first = GOLD["variants"][name], variant_tokenizer(name), FIRST_OF_CONFIG[config(name)]
    assert tok.pre_spec is PRE_TOKENIZERS[spec["changes"]["tokenizer.ggml.pre"]]
    check_facts(tok, spec, variant_meta(name))
    if first == name:
        assert wrong_texts(tok, spec["texts"]) == []
    else:   # the same tokenizer as the first name's: llama.cpp gave the same values too
        assert spec["texts"] == GOLD["variants"][first]["texts"]


# --- the split oracle: where each pre-tokenizer cuts, seen in the ids -----------------------------

@pytest.mark.parametrize("name", PRE_TOKENIZERS)
def test_pre_tokenizer_cuts_where_llama_cpp_cuts(name):
    """On a vocab where every word of up to 3 bytes is one token (make_vocab_golden.oracle_metadata),
    350 texts of letters, cases, digits, marks, punctuation, CJK and whitespace runs give llama.cpp's ids."""
    spec, pre = GOLD["variants"][name], PRE_TOKENIZERS[name]
    first = next(n for n, p in PRE_TOKENIZERS.items() if p is pre)
    if first != name:   # llama.cpp cut the oracle texts the same for every name of a pre-tokenizer
        assert spec["oracle_digest"] == GOLD["variants"][first]["oracle_digest"]
        return
    tok = Tokenizer(oracle_metadata(name, pre.byte_encode))
    want = spec["oracle"]
    assert len(want) == 8 * len(oracle_texts()) == 8 * 350 and digest(want) == spec["oracle_digest"]
    assert oracle_wrong(tok, want) == []


def test_the_oracle_tells_the_pre_tokenizers_apart():
    """llama.cpp's oracle ids differ between every two pre-tokenizers but two pairs: dbrx and
    chatglm-bpe (one regex; they differ in the default BOS) and qwen2 and bailingmoe (one split)."""
    firsts = {name: v["oracle_digest"] for name, v in GOLD["variants"].items() if "oracle" in v}
    same = {(a, b) for a in firsts for b in firsts if a < b and firsts[a] == firsts[b]}
    assert len(firsts) == len(set(PRE_TOKENIZERS.values())) == 34
    assert same == {("chatglm-bpe", "dbrx"), ("bailingmoe", "qwen2")}
