"""Make tests/golden/tokenize_vocabs.json: llama.cpp's tokenizations with its own vocab test files,
and with every pre-tokenizer name of its table.

Run by hand (needs llama-cpp-python 0.3.36 and ``python build_scripts/fetch_vocabs.py``; ~1 min):

    python tests/golden/make_vocab_golden.py

Two parts, each loaded by llama.cpp as a vocab-only model (``Llama(vocab_only=True)``):

- ``vocabs``: the 17 ``ggml-vocab-*.gguf`` files of chat models and the two built beside them (RWKV World,
  a synthetic PLaMo 2; build_scripts/fetch_vocabs.py):
  llama.cpp's ids for the texts of each one's ``.inp`` file (``add_special`` and ``parse_special``
  false, as llama.cpp's test-tokenizer-0 asks) in full, and whether they equal its ``.out`` file
  (``inp_equals_out``: the ids of the model's own tokenizer); then the shared ``texts``;
- ``variants``: every name of ``PRE_TOKENIZERS`` on the Qwen2 vocab (byte-level) or, for the
  SentencePiece-style names (``gemma4``, ``sarvam-moe``...), the Gemma 4 vocab, with no BOS id
  key (so the default BOS shows) and one token appended that no merge reaches (so
  ``ignore_merges`` shows); ``kimi-k2`` also without merges.

``texts`` is make_golden.py's corpus and chat texts, make_tokenize_golden.py's extras and 80 seeded
random strings over a wider pool (DeepSeek's letter ranges, CJK, kana, Hangul, full-width
punctuation, Thai, Khmer, Unicode whitespace, cased words, digit runs, 600 spaces...). For each
text, ``digest`` (below) of llama.cpp's ids with add_special true and parse_special false then
true, and of its ``llama_token_to_piece`` bytes for those ids (special false, then true): the
tests compute the same digests from pyengine's ids and pieces.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(ROOT), str(ROOT / "build_scripts")]


SEED = 20261
N_RANDOM = 80
ODD_TOKENS = {True: "\u0120zzyzxq", False: "\u2581zzyzxq"}   # byte-level / SPM-style BPE
EXTRA = ["a zzyzxq b", " zzyzxq", "zzyzxq\n\n\nx", "HelloWORLD fooBar ÀÉÎõü ΣΑΣ σας", "x" + " " * 600 + "y",
         "a" + " " * 20 + "\n\n  b", "1234567 12 123 1234 12345678901", "<sentinel:12> IMGIMGABZ",
         "CamelCaseWords and_snake_case and kebab-case", "\u1d00\u1d2b\u13a0\u10a0 \uff21\uff3a \u2126\u212a"]
MORE = (list("µÀÖØöøƺǄʓᎠᏴႠჅＡＺａｚ！／：～‘’“”　。、，…ぁゟ゠ヿㄱㆎㄅㄯเกขកက।۔،豈𠀀齊龥ᄀ가힣")
        + ["\u0085", "\u180e", "\u200b", "\ufeff", "\u001c", "\u001f", "\x0b", "\x0c", "\u2028", "\u00ad"]
        + list("ABCxyzQWERTYuiop") * 2 + list("0123456789٣५") * 2 + ["'", "'S", "'ll"])


def digest(*values) -> str:
    """The first 16 hex digits of the sha256 of ``values`` as compact JSON (ids, or pieces as hex)."""
    text = json.dumps(values, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# The split oracle: a vocab of every string of 1-3 units (bytes, or characters for SPM-style BPE)
# of these characters, merged left to right, so a word of up to 3 units is one token and where a
# pre-tokenizer cuts a text shows in its ids. Its texts are random strings of the same characters.
ORACLE_CHARS = "abAB12`!'sS.- \n\r\t\u00e9\u0301\u4e2d\uff01\u00a0\u0663\u00bd\uac00\u30ab"
N_ORACLE = 300


def oracle_metadata(pre: str, byte_encode: bool) -> dict:
    """The split-oracle vocab for pre-tokenizer ``pre`` as GGUF metadata (no BOS key, all normal tokens
    but the 256 byte tokens)."""
    from pyengine.text.bpe import BYTE_TO_CHAR
    if byte_encode:
        units = sorted({BYTE_TO_CHAR[b] for b in ORACLE_CHARS.encode()})
        singles, types = list(BYTE_TO_CHAR), [1] * 256
    else:
        units = sorted(set(ORACLE_CHARS.replace(" ", "\u2581")) - {"\n"})
        singles, types = [f"<0x{b:02X}>" for b in range(256)] + ["\n"] + units, [6] * 256 + [1] * (len(units) + 1)
    pairs = [(a, b) for a in units for b in units]
    triples = [(a + b, c) for a, b in pairs for c in units]
    tokens = singles + [a + b for a, b in pairs + triples if a + b not in singles]
    types += [1] * (len(tokens) - len(types))
    return {"general.architecture": "llama", "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.merges": [f"{a} {b}" for a, b in pairs + triples]}


def oracle_texts() -> list[str]:
    """Runs of 1-12 of each whitespace between letters, then random strings of ORACLE_CHARS."""
    runs = [f"a{c * n}b{c * n}" for c in " \n\t\u00a0" for n in range(1, 13)] + ["a \n \r\n\t  b", "1234567 '"]
    rng = random.Random(SEED + 1)
    return runs + ["".join(rng.choice(ORACLE_CHARS) for _ in range(rng.randint(1, 40))) for _ in range(N_ORACLE)]


def oracle_digests(encode) -> str:
    """Per oracle text, the first 8 hex digits of the digest of ``encode(text)`` (add_special true,
    parse_special false), joined."""
    return "".join(digest(encode(text))[:8] for text in oracle_texts())


def variant_metadata(meta: dict, changes: dict, add_tokens: list[str]) -> dict:
    """``meta`` with ``changes`` (a None value removes the key) and ``add_tokens`` (normal tokens
    at the end of the vocab, with score 0 if the vocab has scores)."""
    meta = {k: v for k, v in {**meta, **changes}.items() if v is not None}
    if add_tokens:
        meta["tokenizer.ggml.tokens"] = meta["tokenizer.ggml.tokens"] + add_tokens
        meta["tokenizer.ggml.token_type"] = [int(t) for t in meta["tokenizer.ggml.token_type"]] + [1] * len(add_tokens)
        if "tokenizer.ggml.scores" in meta:
            meta["tokenizer.ggml.scores"] = [float(s) for s in meta["tokenizer.ggml.scores"]] + [0.0] * len(add_tokens)
    return meta


def pyengine_digest(tok, text: str) -> str:
    """The same digest of a pyengine Tokenizer's ids (parse_special off, on) and their pieces."""
    ids, ids_special = tok.encode(text), tok.encode(text, parse_special=True)
    pieces = b"".join(tok.token_bytes(i) for i in ids).hex()
    pieces_special = b"".join(tok.token_bytes(i, special=True) for i in ids_special).hex()
    return digest(ids, ids_special, pieces, pieces_special)


def oracle_wrong(tok, want: str) -> list[str]:
    """The oracle texts on which ``tok`` (a pyengine Tokenizer) differs from the digests ``want``."""
    got = oracle_digests(tok.encode)
    return [t for i, t in enumerate(oracle_texts()) if got[8 * i:8 * i + 8] != want[8 * i:8 * i + 8]]


def texts() -> list[str]:
    from make_golden import CORPUS, CORPUS_SPECIAL
    from make_tokenize_golden import EXTRA as EXTRA0
    from make_tokenize_golden import POOL, random_text
    rng = random.Random(SEED)
    pool = POOL + MORE
    return list(CORPUS) + list(CORPUS_SPECIAL) + EXTRA0 + EXTRA + [random_text(rng, pool) for _ in range(N_RANDOM)]


def variants() -> dict:
    """Each variant: its base vocab and how its metadata changes (``variant_metadata`` arguments)."""
    from pyengine.text.bpe import PRE_TOKENIZERS
    out = {}
    for name, pre in PRE_TOKENIZERS.items():
        base = "qwen2" if pre.byte_encode else "gemma-4"
        changes = {"tokenizer.ggml.pre": name, "tokenizer.ggml.bos_token_id": None}
        if base == "gemma-4":
            changes["tokenizer.ggml.model"] = "gpt2"
            changes["tokenizer.ggml.add_bos_token"] = None
        out[name] = {"base": base, "changes": changes, "add_tokens": [ODD_TOKENS[pre.byte_encode]]}
    out["kimi-k2-no-merges"] = {"base": "qwen2", "changes": {"tokenizer.ggml.pre": "kimi-k2",
                                "tokenizer.ggml.merges": None}, "add_tokens": []}
    return out


# --- llama.cpp -----------------------------------------------------------------------------------

def piece(vocab, tid: int, special: bool) -> bytes:
    import ctypes

    import llama_cpp
    size = 256
    while True:
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_token_to_piece(vocab, tid, buf, size, 0, special)
        if n >= 0:
            return buf.raw[:n]
        size = -n          # too small: llama.cpp says how long the piece is


def text_digests(llm, corpus: list[str]) -> list[str]:
    """Per text: digest of (ids, ids with parse_special, their pieces, special pieces)."""
    import llama_cpp
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    out = []
    for text in corpus:
        ids = llm.tokenize(text.encode(), add_bos=True, special=False)
        ids_special = llm.tokenize(text.encode(), add_bos=True, special=True)
        pieces = b"".join(piece(vocab, i, False) for i in ids).hex()
        pieces_special = b"".join(piece(vocab, i, True) for i in ids_special).hex()
        out.append(digest(ids, ids_special, pieces, pieces_special))
    return out


def read_inp(path: Path) -> list[str]:
    """The texts of a ``.inp`` file (llama.cpp's test-tokenizer-0: split at the separator lines)."""
    return path.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")


def read_out(path: Path) -> list[list[int]]:
    return [[int(x) for x in line.split()] for line in path.read_text().split("\n")]


def vocab_entry(path: Path, corpus: list[str]) -> dict:
    from llama_cpp import Llama
    from make_golden import tokenizer_facts
    llm = Llama(str(path), vocab_only=True, verbose=False)
    entry = {"file": path.name, **tokenizer_facts(llm)}
    del entry["eog_texts"]
    inp = Path(str(path) + ".inp")
    if inp.exists():
        ids = [llm.tokenize(t.encode(), add_bos=False, special=False) for t in read_inp(inp)]
        out = read_out(Path(str(path) + ".out"))
        entry["inp_equals_out"] = sum(a == b for a, b in zip(ids, out))
        entry["inp"] = ids
    entry["texts"] = text_digests(llm, corpus)
    return entry


def variant_entry(src: Path, spec: dict, corpus: list[str], tmp: Path) -> dict:
    from gguf_write import gguf_bytes
    from llama_cpp import Llama
    from make_golden import tokenizer_facts

    from pyengine.gguf import open_gguf
    g = open_gguf(src)
    meta = variant_metadata(g.metadata, spec["changes"], spec["add_tokens"])
    types = {"tokenizer.ggml.pre": "STRING", **g.value_types, "tokenizer.ggml.token_type": "ARRAY[INT32]"}
    path = tmp / "variant.gguf"
    path.write_bytes(gguf_bytes([(k, types[k], v) for k, v in meta.items()], []))
    llm = Llama(str(path), vocab_only=True, verbose=False)
    facts = tokenizer_facts(llm)
    keep = ("bos_id", "eos_id", "eot_id", "eog_ids", "add_bos", "add_eos")
    return {**spec, **{k: facts[k] for k in keep}, "texts": text_digests(llm, corpus)}


ORACLE_TYPES = {"general.architecture": "STRING", "tokenizer.ggml.model": "STRING", "tokenizer.ggml.pre": "STRING",
                "tokenizer.ggml.tokens": "ARRAY[STRING]", "tokenizer.ggml.token_type": "ARRAY[INT32]",
                "tokenizer.ggml.merges": "ARRAY[STRING]"}


def oracle_entry(name: str, tmp: Path) -> str:
    from gguf_write import gguf_bytes
    from llama_cpp import Llama

    from pyengine.text.bpe import PRE_TOKENIZERS
    meta = oracle_metadata(name, PRE_TOKENIZERS[name].byte_encode)
    path = tmp / "oracle.gguf"
    path.write_bytes(gguf_bytes([(k, ORACLE_TYPES[k], v) for k, v in meta.items()], []))
    llm = Llama(str(path), vocab_only=True, verbose=False)
    return oracle_digests(lambda text: llm.tokenize(text.encode(), add_bos=True, special=False))


def dumps(data: dict) -> str:
    """JSON with one entry per line under each section (readable diffs)."""
    line = lambda x: json.dumps(x, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    sep = ",\n  "
    parts = ['"texts": [\n  ' + sep.join(line(t) for t in data["texts"]) + "\n]"]
    for section in ("vocabs", "variants"):
        body = sep.join(f"{line(k)}: {line(v)}" for k, v in data[section].items())
        parts.append(f'"{section}": {{\n  {body}\n}}')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main() -> None:
    from fetch_vocabs import BUILT, DEST, VOCABS

    from pyengine.text.bpe import PRE_TOKENIZERS
    corpus = texts()
    data = {"texts": corpus, "vocabs": {}, "variants": {}}
    for name in [*VOCABS, *BUILT]:
        data["vocabs"][name] = vocab_entry(DEST / f"ggml-vocab-{name}.gguf", corpus)
        print(name, data["vocabs"][name].get("inp_equals_out"), flush=True)
    firsts: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in variants().items():
            data["variants"][name] = variant_entry(DEST / f"ggml-vocab-{spec['base']}.gguf", spec, corpus, Path(tmp))
            if name in PRE_TOKENIZERS:   # each name's split oracle; in full for a pre-tokenizer's first name
                oracle = oracle_entry(name, Path(tmp))
                data["variants"][name]["oracle_digest"] = digest(oracle)
                if firsts.setdefault(PRE_TOKENIZERS[name], name) == name:
                    data["variants"][name]["oracle"] = oracle
            print(name, flush=True)
    out = HERE / "tokenize_vocabs.json"
    out.write_text(dumps(data))
    print("wrote", out, out.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
