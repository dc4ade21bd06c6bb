"""The tokenizer under Pyodide 0.27.7 (Python 3.12, Unicode 15.0, no ``regex`` module) gives llama.cpp's ids.

One Node run (tests/node/run_pyodide.mjs, from the built static/) encodes every case of
tests/golden/tokenize.json (both real models, parse_special off and on) and of
tests/golden/tokenize_variants.json (the pre-tokenizer and space-prefix variants), and decodes the
``llama_detokenize`` cases; the test asserts that nothing differs and that every case was run.
A second run does what tests/text/test_tokenizer_vocabs.py does, for llama.cpp's vocab files (.cache/vocab/)
and the first name of each pre-tokenizer: their ids, pieces and split-oracle ids.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, GOLDEN, MODELS, ROOT
from static_build import current_static

pytestmark = pytest.mark.node

HARNESS = Path(__file__).resolve().parent / "run_pyodide.mjs"

CODE = '''
import json, os
from pyengine.gguf import open_gguf
from pyengine.text.tokenizer import Tokenizer

def path(source):
    return ("/fx/" if source.startswith("tiny-") else "/models/") + source

def run(tok, cases, special_key):
    wrong = [c["text"] for c in cases if tok.encode(c["text"]) != c["ids"]]
    wrong += [c["text"] for c in cases if tok.encode(c["text"], parse_special=True) != c.get(special_key, c["ids"])]
    return wrong

result = {}
for name, ref in json.load(open("/golden/tokenize.json")).items():
    if os.path.exists(path(name)):
        tok = Tokenizer(open_gguf(path(name)).metadata)
        wrong = [c["text"] for c in ref["cases"] if tok.encode(c["text"]) != c["ids"]]
        wrong += [c["text"] for c in ref["cases_special"] if tok.encode(c["text"], parse_special=True) != c["ids"]]
        wrong += [c["ids"] for c in ref["detok"] if tok.decode(c["ids"]) != c["text"]]
        result[name] = [len(ref["cases"]) + len(ref["cases_special"]) + len(ref["detok"]), wrong]
for name, v in json.load(open("/golden/tokenize_variants.json")).items():
    if os.path.exists(path(v["source"])):
        meta = {**open_gguf(path(v["source"])).metadata, **v["changes"]}
        if v["add_tokens"]:
            meta["tokenizer.ggml.tokens"] = meta["tokenizer.ggml.tokens"] + v["add_tokens"]
            types = [int(t) for t in meta["tokenizer.ggml.token_type"]]
            meta["tokenizer.ggml.token_type"] = types + [1] * len(v["add_tokens"])
        result[name] = [len(v["cases"]), run(Tokenizer(meta), v["cases"], "ids_special")]
result
'''


def test_tokenizer_in_pyodide_matches_llama_cpp():
    if shutil.which("node") is None:
        pytest.skip("node is not installed (build_scripts/install_test_deps.sh)")
    static = current_static()
    args = ["node", str(HARNESS), "--static", str(static), "--mount", f"{FIXTURES}:/fx",
            "--mount", f"{GOLDEN}:/golden"]
    if MODELS.is_dir():
        args += ["--mount", f"{MODELS}:/models"]
    proc = subprocess.run(args, input=CODE, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"Pyodide run failed:\n{proc.stderr[-4000:]}"
    result = json.loads(proc.stdout)
    variants = json.loads((GOLDEN / "tokenize_variants.json").read_text())
    tiny = [name for name, v in variants.items() if v["source"].startswith("tiny-")]
    assert set(tiny) <= set(result) and len(tiny) == 6
    for name, (n_cases, wrong) in result.items():
        assert n_cases > 100 and wrong == [], name


VOCAB_CODE = '''
import json, sys
sys.path.insert(0, "/golden")
from make_vocab_golden import oracle_metadata, oracle_wrong, pyengine_digest, read_inp, variant_metadata
from pyengine.gguf import open_gguf
from pyengine.text.bpe import PRE_TOKENIZERS
from pyengine.text.tokenizer import Tokenizer

gold = json.load(open("/golden/tokenize_vocabs.json"))
metas = {}

def meta(name):
    if name not in metas:
        metas[name] = open_gguf(f"/vocab/ggml-vocab-{name}.gguf").metadata
    return metas[name]

def wrong_texts(tok, digests):
    return [t for t, d in zip(gold["texts"], digests) if pyengine_digest(tok, t) != d]

result = {}
for name, entry in gold["vocabs"].items():
    tok = Tokenizer(meta(name))
    wrong = wrong_texts(tok, entry["texts"])
    if "inp" in entry:
        texts = read_inp(__import__("pathlib").Path(f"/vocab/ggml-vocab-{name}.gguf.inp"))
        wrong += [t for t, ids in zip(texts, entry["inp"]) if tok.encode(t, add_special=False) != ids]
    result["vocab " + name] = [len(entry["texts"]) + len(entry.get("inp", [])), wrong]
seen = set()
for name, pre in PRE_TOKENIZERS.items():
    if pre in seen:
        continue
    seen.add(pre)
    spec = gold["variants"][name]
    tok = Tokenizer(variant_metadata(meta(spec["base"]), spec["changes"], spec["add_tokens"]))
    result["pre " + name] = [len(spec["texts"]), wrong_texts(tok, spec["texts"])]
    oracle = Tokenizer(oracle_metadata(name, pre.byte_encode))
    result["oracle " + name] = [len(spec["oracle"]) // 8, oracle_wrong(oracle, spec["oracle"])]
result
'''


def test_vocab_files_and_every_pre_tokenizer_in_pyodide_match_llama_cpp():
    if shutil.which("node") is None:
        pytest.skip("node is not installed (build_scripts/install_test_deps.sh)")
    vocab = ROOT / ".cache" / "vocab"
    if not (vocab / "ggml-vocab-qwen2.gguf").exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{vocab} is missing: run build_scripts/fetch_vocabs.py")
        pytest.skip("llama.cpp's vocab files not fetched (python build_scripts/fetch_vocabs.py)")
    static = current_static()
    args = ["node", str(HARNESS), "--static", str(static), "--mount", f"{GOLDEN}:/golden",
            "--mount", f"{vocab}:/vocab"]
    proc = subprocess.run(args, input=VOCAB_CODE, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"Pyodide run failed:\n{proc.stderr[-4000:]}"
    result = json.loads(proc.stdout)
    gold = json.loads((GOLDEN / "tokenize_vocabs.json").read_text())
    assert {k for k in result if k.startswith("vocab ")} == {"vocab " + n for n in gold["vocabs"]}
    assert sum(k.startswith("oracle ") for k in result) == sum(k.startswith("pre ") for k in result) >= 30
    for name, (n_cases, wrong) in result.items():
        assert n_cases >= 157 and wrong == [], name
