"""The two tokenizers that search the vocab instead of merging: RWKV's (``rwkv``) and PLaMo 2's (``plamo2``).

RWKV (llama.cpp ``llm_tokenizer_rwkv``): token texts are escaped byte strings
(:func:`unescape_rwkv`); a text's UTF-8 bytes are cut from the left, each time into the longest
token that starts there (llama.cpp walks a trie; the longest prefix is the same).

PLaMo 2 (llama.cpp ``llm_tokenizer_plamo2``): the tokens that cover a text with the highest sum
of scores, by dynamic programming from the end of the text (llama.cpp runs it over an
Aho-Corasick table; the candidates at each character, their order and the ties are the same
here): each token's score is ``round(score * 1e4)``, a character no token covers costs
``UNKNOWN_SCORE`` and is spelled in its ``<0xNN>`` byte tokens.
"""

from __future__ import annotations

import math

from pyengine.errors import TokenizerError

MAX_TOKEN_LENGTH = 1024           # bytes (RWKV) or characters (PLaMo 2) of one token: bounds a search


def unescape_rwkv(text: str) -> bytes:
    """A token text of an RWKV vocab as bytes (``llama_unescape_rwkv_token``): ``\\t``, ``\\n``, ``\\r``,
    ``\\xNN`` (lowercase hex, read digit by digit as llama.cpp does), ``\\`` + any other byte for
    that byte."""
    out, escaping, hex_left, acc = bytearray(), False, 0, 0
    for b in text.encode("utf-8", "surrogateescape"):
        if hex_left:
            acc = ((acc << 4) + ((b - 0x57) if 0x61 <= b < 0x80 else (b - 0x30))) & 0xFF
            hex_left -= 1
            if not hex_left:
                out.append(acc)
                acc = 0
        elif escaping:
            escaping = False
            if b == 0x78:                                                  # "x"
                hex_left = 2
            else:
                out.append({0x74: 0x09, 0x6E: 0x0A, 0x72: 0x0D}.get(b, b))   # t, n, r
        elif b == 0x5C:                                                    # "\\"
            escaping = True
        else:
            out.append(b)
    return bytes(out)


def _lengths(keys) -> dict:
    """For each first unit (byte or character), the lengths of the keys starting with it, longest first:
    the only lengths a search there tries."""
    out: dict = {}
    for k in keys:
        if k:
            out.setdefault(k[0], set()).add(len(k))
    return {u: sorted(n, reverse=True) for u, n in out.items()}


def _too_long(lengths: dict) -> bool:
    return max((n[0] for n in lengths.values()), default=0) > MAX_TOKEN_LENGTH


class Rwkv:
    """RWKV's greedy longest-match tokenizer over ``tokens`` (their escaped texts, index = id); ``unk``
    the unknown token's id or None."""

    def __init__(self, tokens: list[str], unk: int | None):
        self.unk = unk                                                    # a byte that starts no token
        self.pieces = [unescape_rwkv(t) for t in tokens]
        self.ids = {p: i for i, p in enumerate(self.pieces)}              # the last of duplicates wins
        self.lengths = _lengths(self.ids)
        if _too_long(self.lengths):
            raise TokenizerError(f"tokenizer.ggml.tokens: an RWKV token of more than {MAX_TOKEN_LENGTH} bytes")

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``'s UTF-8 bytes. A byte that starts no token is the unknown token;
        TokenizerError when the vocab has none."""
        data, out, pos = text.encode("utf-8", "surrogatepass"), [], 0
        while pos < len(data):
            for n in self.lengths.get(data[pos], ()):
                tid = self.ids.get(data[pos:pos + n]) if pos + n <= len(data) else None
                if tid is not None:
                    out.append(tid)
                    pos += n
                    break
            else:       # (llama.cpp loops for ever on a byte that starts tokens but is none alone: not here)
                if self.unk is None:
                    raise TokenizerError(f"tokenizer.ggml.tokens: no RWKV token starts with byte 0x{data[pos]:02x}")
                out.append(self.unk)
                pos += 1
        return out


INVALID_SCORE, UNKNOWN_SCORE = -20_000_000, -10_000_000     # llama.cpp's constants


def plamo2_score(score: float) -> int:
    """A token's score as the table holds it: ``std::round(score * 1e4)`` as int32, INVALID_SCORE for NaN."""
    if not math.isfinite(score):
        return INVALID_SCORE
    x = score * 1e4
    r = math.floor(abs(x) + 0.5) * (1 if x >= 0 else -1)                 # half away from zero
    return max(-(1 << 31), min((1 << 31) - 1, r))


class Plamo2:
    """PLaMo 2's highest-score tokenizer over ``tokens`` (index = id), their ``scores``, and ``is_byte``
    (the ``<0xNN>`` tokens, which stand for the byte and are no candidates)."""

    def __init__(self, tokens: list[str], scores: list[float], is_byte: list[bool]):
        self.table: dict[str, tuple[int, int]] = {}                     # text -> (id, score); the last wins
        self.bytes = [None] * 256
        for tid, (text, score, byte) in enumerate(zip(tokens, scores, is_byte)):
            if byte:
                if len(text) == 6 and text.startswith("<0x") and text.endswith(">") and \
                        all(c in "0123456789abcdefABCDEF" for c in text[3:5]):
                    self.bytes[int(text[3:5], 16)] = tid
                continue
            self.table[text] = (tid, plamo2_score(score))
        missing = [b for b in range(256) if not self.bytes[b]]             # llama.cpp: id 0 is "not set"
        if missing:
            raise TokenizerError(f"tokenizer.ggml.tokens: a plamo2 vocab needs the 256 byte tokens; "
                                 f"<0x{missing[0]:02X}> is not set")
        self.lengths = _lengths(self.table)
        if _too_long(self.lengths):
            raise TokenizerError(f"tokenizer.ggml.tokens: a plamo2 token of more than {MAX_TOKEN_LENGTH} characters")

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (a leading BOM dropped), the best path of ``llm_tokenizer_plamo2::encode``."""
        text = text[1:] if text.startswith("\ufeff") else text
        n = len(text)
        best, step = [1 << 60] * n + [0], [(1, -1)] * (n + 1)               # step[i]: (length, id or -1: bytes)
        for i in range(n - 1, -1, -1):
            for size in self.lengths.get(text[i], ()):                    # longest first, ties: the first
                entry = self.table.get(text[i:i + size]) if i + size <= n else None
                if entry is None or entry[1] <= INVALID_SCORE:
                    continue
                s = best[i + size] - entry[1]
                if s < best[i]:
                    best[i], step[i] = s, (size, entry[0])
                if entry[1] == UNKNOWN_SCORE:                               # llama.cpp's loop ends here
                    break
            else:
                s = best[i + 1] - UNKNOWN_SCORE                             # the character spelled in bytes
                if s < best[i]:
                    best[i], step[i] = s, (1, -1)
        out, i = [], 0
        while i < n:
            size, tid = step[i]
            if tid >= 0:
                out.append(tid)
            else:
                out.extend(self.bytes[b] for b in text[i].encode("utf-8", "surrogatepass"))
            i += size
        return out
