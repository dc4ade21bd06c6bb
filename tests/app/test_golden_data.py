"""The golden data in tests/golden/ (made by make_golden.py from llama.cpp) is whole and self-consistent.

These tests need neither llama.cpp nor the models: they check the committed files, so a bad
regeneration or a hand edit shows up here before it misleads the tests that compare pyengine with
them. The values pinned here (Gemma's France prompt, special-token ids) are llama.cpp's, also
recorded in ../shared/RUNTIME.md.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import GEMMA3, GOLDEN, SMOLLM2

MODELS = (GEMMA3.name, SMOLLM2.name)
N_VOCAB = {GEMMA3.name: 262144, SMOLLM2.name: 49152}
_cache: dict = {}


def golden(name: str):
    if name not in _cache:
        _cache[name] = json.loads((GOLDEN / name).read_text(encoding="utf-8"))
    return _cache[name]


def all_ids(entry: dict) -> list[int]:
    lists = [c["ids"] for key in ("cases", "cases_special", "detok", "detok_special") for c in entry[key]]
    return [i for ids in lists for i in ids]


# --- tokenize.json ----------------------------------------------------------------------------

def test_tokenizer_facts():
    tok = golden("tokenize.json")
    assert set(tok) == set(MODELS)
    g, s = tok[GEMMA3.name], tok[SMOLLM2.name]
    assert (g["model"], g["pre"], g["bos_id"], g["eos_id"], g["eot_id"]) == ("llama", "default", 2, 1, 106)
    assert (g["add_bos"], g["add_eos"], g["eog_texts"]) == (True, False, ["<eos>", "<end_of_turn>", "</s>"])
    assert (s["model"], s["pre"], s["bos_id"], s["eos_id"], s["add_bos"]) == ("gpt2", "smollm", 1, 2, False)
    assert s["eog_ids"] == [0, 2, 4] and s["eog_texts"][:2] == ["<|endoftext|>", "<|im_end|>"]


@pytest.mark.parametrize("name", MODELS)
def test_tokenize_schema_and_corpus(name):
    entry = golden("tokenize.json")[name]
    assert (entry["add_special"], entry["parse_special"], entry["n_vocab"]) == (True, False, N_VOCAB[name])
    texts = [c["text"] for c in entry["cases"]]
    assert len(texts) >= 40 and len(set(texts)) == len(texts)
    for needle in ("", " ", "\r\n", "\t", "1234567890", "café", "中文", "\u200d", "<|im_start|>", "<bos>",
                   "<start_of_turn>", "<end_of_turn>", "<|endoftext|>", "don't", "I'M"):
        assert any(needle in t for t in texts), needle
    assert max(len(t) for t in texts) > 400                                  # the long paragraph
    assert all(0 <= i < entry["n_vocab"] for i in all_ids(entry))
    bos = [entry["bos_id"]] if entry["add_bos"] else []
    for key in ("cases", "cases_special"):
        assert all(c["ids"][:len(bos)] == bos for c in entry[key]), key


@pytest.mark.parametrize("name", MODELS)
def test_detok_round_trips_the_corpus(name):
    """llama_detokenize gave back every corpus text from its ids (BOS removed)."""
    entry = golden("tokenize.json")[name]
    skip = 1 if entry["add_bos"] else 0
    for case, detok in zip(entry["cases"], entry["detok"]):
        assert detok["ids"] == case["ids"][skip:]
        assert detok["text"] == case["text"]
    assert [d["text"] for d in entry["detok"][len(entry["cases"]):]] == ["Hello world"] * 2


def test_special_token_text_parsing():
    g, s = golden("tokenize.json")[GEMMA3.name], golden("tokenize.json")[SMOLLM2.name]
    special = [{c["text"]: c["ids"] for c in e["cases_special"]} for e in (g, s)]
    plain = [{c["text"]: c["ids"] for c in e["cases"]} for e in (g, s)]
    assert special[0]["<start_of_turn>"] == [2, 105] and special[0]["<bos>"] == [2, 2]   # BOS doubled as asked
    assert special[1]["<|im_start|>"] == [1] and special[1]["<|im_start|><|im_start|>"] == [1, 1]
    assert 105 not in plain[0]["<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"]
    assert 1 not in plain[1]["<|im_start|>user\nHi<|im_end|>"]
    assert g["detok_special"][0]["text"] == "<bos><|im_start|>"            # plain text in Gemma's vocab
    assert s["detok_special"][0] == {"ids": [1], "text": "<|im_start|>"}


# --- generate.json and logits_*.npy -------------------------------------------------------------

def test_gemma_france_matches_runtime_md():
    case = golden("generate.json")[GEMMA3.name][0]
    assert case["prompt"] == "The capital of France is"
    assert case["prompt_ids"] == [2, 818, 5279, 529, 7001, 563]
    assert case["text"].startswith(" the capital of the country of France. It is the largest city in France.")


@pytest.mark.parametrize("name", MODELS)
def test_generate_cases(name):
    cases = golden("generate.json")[name]
    assert len(cases) >= 4 and any(len(c["prompt_ids"]) >= 90 for c in cases)
    for c in cases:
        assert len(c["ids"]) == len(c["margins"]) == 32 and all(0 <= i < N_VOCAB[name] for i in c["ids"])
        top = c["top_logits"]
        assert len(top) == 40 and [v for _, v in top] == sorted((v for _, v in top), reverse=True)
        assert top[0][0] == c["ids"][0] == c["logits_stats"]["argmax"]
        assert top[0][1] == c["logits_stats"]["max"]
        assert c["margins"][0] == round(top[0][1] - top[1][1], 5)            # float32 values, 5 decimals
        assert all(m >= 0 for m in c["margins"])
        stats = c["logits_stats"]
        assert stats["n_vocab"] == N_VOCAB[name] and stats["min"] < stats["mean"] < stats["max"] < stats["logsumexp"]
        assert stats["rms_diff_f32_kv"] <= stats["max_abs_diff_f32_kv"] < 2.0


@pytest.mark.parametrize("name", MODELS)
def test_full_logits_file(name):
    """The .npy holds the whole last-position logits of the case that names it, bit for bit."""
    case = next(c for c in golden("generate.json")[name] if "logits_npy" in c)
    path = GOLDEN / case["logits_npy"]
    assert path.stat().st_size <= 1_100_000
    logits = np.load(path)
    assert logits.dtype == np.float32 and logits.shape == (N_VOCAB[name],)
    assert int(np.argmax(logits)) == case["ids"][0]
    for i, v in case["top_logits"]:
        assert logits[i] == np.float32(v)
    x = logits.astype(np.float64)
    assert abs(x.mean() - case["logits_stats"]["mean"]) < 1e-9 and abs(x.std() - case["logits_stats"]["std"]) < 1e-9


# --- chat.json ----------------------------------------------------------------------------------

def test_chat_smollm2_chatml():
    entries = golden("chat.json")[SMOLLM2.name]
    assert len(entries) >= 2 and [m["role"] for m in entries[0]["messages"]] == ["system", "user"]
    for e in entries:
        assert e["prompt"].startswith("<|im_start|>") and e["prompt"].endswith("<|im_start|>assistant\n")
        assert e["prompt_ids"][0] == 1 and e["prompt_ids"][1] != 1          # no BOS added: add_bos false
        assert e["prompt_ids"][-4:] == [1, 520, 9531, 198]                   # <|im_start|> assistant \n
        assert e["stop_id"] in (0, 2, 4) and 0 < len(e["ids"]) <= 64 and "Paris" in entries[0]["text"]
        assert e["prompt"].count("<|im_start|>") == e["prompt_ids"].count(1)
    user_only = entries[1]
    assert "SmolLM" not in user_only["prompt"] and "SmolLM" in user_only["prompt_jinja"]   # built-in vs Jinja
    assert entries[0]["prompt_jinja"] == entries[0]["prompt"]
    assert entries[0]["ids_jinja"] == entries[0]["ids"] and entries[0]["stop_id_jinja"] == 2
    assert user_only["stop_id_jinja"] is None and len(user_only["ids_jinja"]) == len(user_only["margins_jinja"]) == 64


def test_chat_gemma_builtin_template():
    entries = golden("chat.json")[GEMMA3.name]
    for e in entries:
        assert e["template"] == "gemma" and e["prompt"].endswith("<start_of_turn>model\n")
        assert e["prompt_ids"][:3] == [2, 105, 2364]             # BOS, then <start_of_turn>user
        assert e["prompt_ids"].count(2) == 1                     # one BOS
        assert e["prompt"].count("<start_of_turn>") == e["prompt_ids"].count(105)
        assert len(e["ids"]) <= 64
    system, user = entries[0]["messages"]
    turn = f"<start_of_turn>user\n{system['content']}\n\n{user['content']}<end_of_turn>\n"
    assert entries[0]["prompt"] == turn + "<start_of_turn>model\n"


def test_meta_names_the_version():
    meta = golden("meta.json")
    script = (GOLDEN / "make_golden.py").read_text(encoding="utf-8")
    assert meta["llama_cpp_python"] == "0.3.36" and "llama-cpp-python 0.3.36" in script
    assert meta["n_gen"] == 32 and meta["n_top"] == 40
