"""Byte-level BPE's tables: the pre-tokenizers ``tokenizer.ggml.pre`` names, and GPT-2's byte map.

The pre-tokenizer regexes are written as in llama.cpp's ``llm_tokenizer_bpe``
constructor; :mod:`pyengine.text.unicode_classes` translates their ``\\p{L}``
classes for Python's ``re``.
"""

from __future__ import annotations

from dataclasses import dataclass

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
# (?i:'s|'t|...) rewritten with explicit cases, as llama.cpp does.
CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA3_REGEX = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_REGEX = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


@dataclass(frozen=True)
class PreTokenizer:
    regexes: tuple[str, ...]     # applied in turn (each splits the pieces of the last)
    ignore_merges: bool = False  # a word that is a whole vocab token is taken as it is
    add_bos: bool = False        # default of add_bos_token when the GGUF has no such key


_DEFAULT = PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", GPT2_REGEX, r"\p{N}+", r"[0-9][0-9][0-9]"))
_LLAMA3 = PreTokenizer((LLAMA3_REGEX,), ignore_merges=True, add_bos=True)
_LLAMA3_PLAIN = PreTokenizer((LLAMA3_REGEX,))
_QWEN2 = PreTokenizer((QWEN2_REGEX,))
_SMOLLM = PreTokenizer((r"\p{N}", GPT2_REGEX))
_GPT2 = PreTokenizer((GPT2_REGEX,))

PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "default": _DEFAULT,
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                     "lfm2", "jina-v5-nano"), _LLAMA3),
    **dict.fromkeys(("dbrx", "smaug-bpe"), _LLAMA3_PLAIN),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                     "solar-open"), _QWEN2),
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b",
                     "mellum2"), _SMOLLM),
    **dict.fromkeys(("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                     "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt",
                     "olmo", "jais", "exaone4", "trillion", "granite-docling"), _GPT2),
}


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte -> printable character map: printable Latin-1 bytes map to themselves,
    the other 68 (controls, space, 0x7F-0xA0, 0xAD) to U+0100, U+0101, ... in byte order."""
    keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    chars, n = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(0x100 + n))
            n += 1
    return chars


BYTE_TO_CHAR = _bytes_to_unicode()                          # byte -> mapped character
CHAR_TO_BYTE = {c: b for b, c in enumerate(BYTE_TO_CHAR)}   # and back
LATIN1_TO_MAPPED = dict(enumerate(BYTE_TO_CHAR))           # str.translate table over latin-1


def unmap_bytes(text: str) -> bytes:
    """A byte-level BPE token's bytes (llama.cpp's ``llama_decode_text``): each character maps
    back to its byte; a character outside the map gives llama.cpp's ``[UNK_BYTE_0x..]`` marker."""
    try:
        return bytes([CHAR_TO_BYTE[c] for c in text])
    except KeyError:
        out = bytearray()
        for c in text:
            b = CHAR_TO_BYTE.get(c)
            if b is not None:
                out.append(b)
            else:
                utf8 = c.encode("utf-8", "surrogateescape")
                out += b"[UNK_BYTE_0x" + utf8.hex().encode() + text.encode("utf-8", "surrogateescape") + b"]"
        return bytes(out)
