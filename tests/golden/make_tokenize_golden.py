"""Make tests/golden/tokenize_variants.json: llama.cpp tokenizations for the tokenizer settings the
two real models do not exercise.

``tokenize.json`` (from make_golden.py) covers Gemma 3 (SPM, no space prefix) and SmolLM2 (BPE,
``pre`` = ``smollm``). This script adds, each as a vocab-only GGUF written to a temporary folder
and loaded by llama.cpp (``Llama(vocab_only=True)``):

- SmolLM2's vocab and merges under each other supported pre-tokenizer (``default``, ``llama-bpe``,
  ``qwen2``, ``gpt-2``): the pre-tokenizer regexes, ``ignore_merges`` (llama-bpe);
- Gemma 3's vocab with ``add_space_prefix`` true (the space before each text fragment);
- the tiny fixtures ``tiny-llama`` (SPM, space prefix, byte fallback) and ``tiny-qwen2`` (BPE
  ``qwen2``, a 302-token vocab) unchanged, and tiny-qwen2 under the other pre-tokenizers with one
  token added (its merges join digits, and the added token is reached only by ``ignore_merges``);

over make_golden.py's corpus plus seeded random strings mixing scripts, digits, Unicode
whitespace, marks, emoji, unassigned code points and special-token texts. Each case is tokenized
with add_special=True, parse_special false (``ids``) and true (``ids_special``, stored only where
it differs). Run by hand (needs llama-cpp-python and
models/):

    python tests/golden/make_tokenize_golden.py     # ~20 s
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent.parent)]

from conftest import FIXTURES, GEMMA3, SMOLLM2  # tests/conftest.py
from gguf_write import gguf_bytes  # tests/gguf_write.py
from make_vocab_golden import variant_metadata  # (how a variant changes its vocab)

from pyengine.gguf import open_gguf

# (llama_cpp and make_golden, which imports it, are imported in main(): tests import this module
# for variant_metadata without llama-cpp-python installed.)
N_RANDOM = 60
SEED = 20260

# name -> (source GGUF, metadata changes, normal tokens appended to the vocab)
VARIANTS = {
    **{f"smollm2-pre-{pre}": (SMOLLM2, {"tokenizer.ggml.pre": pre}, [])
       for pre in ("default", "llama-bpe", "qwen2", "gpt-2")},
    "gemma3-space-prefix": (GEMMA3, {"tokenizer.ggml.add_space_prefix": True}, []),
    "tiny-llama": (FIXTURES / "tiny-llama.gguf", {}, []),
    "tiny-qwen2": (FIXTURES / "tiny-qwen2.gguf", {}, []),
    # tiny-qwen2 merges "1 2" (SmolLM2 has no digit merges): digit splitting shows; "Ġzebra" is a
    # token no merge reaches, so llama-bpe's ignore_merges shows
    **{f"tiny-qwen2-pre-{pre}": (FIXTURES / "tiny-qwen2.gguf", {"tokenizer.ggml.pre": pre}, ["\u0120zebra"])
       for pre in ("default", "llama-bpe", "gpt-2", "smollm")},
}
EXTRA = ["a zebra crossing", "zebra", "12 123 1234 12345 1212"]

POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") * 3
        + list(" " * 30 + "\n" * 8 + "\t" * 4 + "\r" * 2 + "\v\f")
        + list("'''''sStTrReEvVmMlLdD") + list(".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\"")
        + list("éèàçñüößÆøåœ") + list("αβγδ Привет мир") + list("中文日本語한국어ひらがなカタカナ")
        + list("٠١٢٣४५६๑๒½²³ⅣⅫ")
        + list("\u00a0\u2009\u3000\u2028\u0085\u200b\u200d\ufeff\u1680\u202f\u205f\u001c")
        + list("\u0301\u0308\u0327") + list("😀🎉👍🏽🇫🇷")
        + ["\U0001F9FF", "\U000E0041", "\U000F0000", "\u0378", "\U0002A6E0"]
        + ["\U00031350", "\U0002EBF0", "\U00011F50", "\U0001FA77", "\U00011F00"])   # Unicode 15.0/15.1
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>", "<bos>",
            "<eos>", "</s>", "<s>", "<unk>", "<table>", "<b>", "  ", "\n\n", "<unused12>", "<reponame>"]
WORDS = ["don't", "I'M", "hello", "world", " the", "12345678", "3.14", "'re", "'ll", "x'S"]


def random_text(rng: random.Random, pool: list[str] = POOL, words: list[str] = WORDS) -> str:
    """1-12 parts: a special-token text, a word, or 1-8 characters of ``pool``."""
    parts = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.15:
            parts.append(rng.choice(SPECIALS))
        elif r < 0.35:
            parts.append(rng.choice(words))
        else:
            parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
    return "".join(parts)


def write_variant(src: Path, changes: dict, add_tokens: list[str], out: Path) -> None:
    """A vocab-only copy of ``src`` (all its metadata, no tensors), changed."""
    g = open_gguf(src)
    meta = variant_metadata(g.metadata, changes, add_tokens)
    out.write_bytes(gguf_bytes([(k, g.value_types[k], v) for k, v in meta.items()], []))


def dumps(result: dict) -> str:
    """JSON with one case per line (compact, readable diffs)."""
    line = lambda x: json.dumps(x, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    blocks = []
    for name, v in result.items():
        head = {k: x for k, x in v.items() if k != "cases"}
        cases = ",\n  ".join(line(c) for c in v["cases"])
        blocks.append(f"{line(name)}: {line(head)[:-1]}, \"cases\": [\n  {cases}\n]}}")
    return "{\n" + ",\n".join(blocks) + "\n}\n"


def main() -> None:
    from llama_cpp import Llama
    from make_golden import CORPUS, CORPUS_SPECIAL

    rng = random.Random(SEED)
    texts = list(CORPUS) + list(CORPUS_SPECIAL) + EXTRA + [random_text(rng) for _ in range(N_RANDOM)]
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (src, changes, add_tokens) in VARIANTS.items():
            path = Path(tmp) / f"{name}.gguf"
            write_variant(src, changes, add_tokens, path)
            llm = Llama(str(path), vocab_only=True, verbose=False)
            cases = []
            for t in texts:   # "ids_special" only where parse_special changes the ids
                case = {"text": t, "ids": llm.tokenize(t.encode(), add_bos=True, special=False)}
                special = llm.tokenize(t.encode(), add_bos=True, special=True)
                if special != case["ids"]:
                    case["ids_special"] = special
                cases.append(case)
            result[name] = {"source": src.name, "changes": changes, "add_tokens": add_tokens,
                            "add_special": True, "cases": cases}
            print(name, len(cases), "cases", flush=True)
    out = HERE / "tokenize_variants.json"
    out.write_text(dumps(result))
    print("wrote", out)


if __name__ == "__main__":
    main()
