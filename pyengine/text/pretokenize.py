"""Pre-tokenizing: a text cut into words by llama.cpp's regexes, as ``unicode_regex_split`` cuts it.

Each regex of a pre-tokenizer (:data:`pyengine.text.bpe.PRE_TOKENIZERS`) in turn cuts every piece
of the last into its matches *and* the gaps between them. llama.cpp (``src/unicode.cpp``) runs a
regex in one of two ways, and so does this module:

1. **Hand-written splitters**, for the regexes llama.cpp knows by their exact text (GPT-2's,
   Llama 3's, Qwen2's, Qwen3.5's, Kimi K2's, AFMoE's and Tiny Aya's digit groups, newline runs):
   their meaning over the real Unicode classes of each code point (:mod:`unicode_classes`), or, for
   the digit groups, a small function (:func:`digit_groups`).
2. **std::regex** (ECMAScript, the C locale) for every other regex. One that names a ``\\p{..}``
   class runs over a *collapsed* text: each non-ASCII code point is replaced by one byte standing
   for its class (:data:`CLASS_BYTES`; whitespace by ``\\x0B``, anything else by ``\\xD0``), and
   each ``\\p{X}`` becomes that byte plus X's ASCII members (so ``\\p{Lu}`` is every letter, as in
   llama.cpp). One that names no class runs over the code points with non-ASCII whitespace turned
   into ``\\x0B``. Here the same substitution is made, and the regex runs in Python's ``re`` with
   ``re.ASCII`` (``\\s``, ``\\d``, ``\\b`` as in the C locale), ``$`` as ``\\Z``.

The cuts are positions in code points, so each word is the original text between them.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from functools import cache

from pyengine.text.bpe import CONTRACTIONS, GPT2_REGEX, LLAMA3_REGEX, NEWLINE_RUNS, QWEN2_REGEX, QWEN35_REGEX
from pyengine.text.unicode_classes import WHITESPACE, category_ranges, compile_pattern

Cutter = Callable[[str], list[tuple[int, int]]]   # a piece -> the (start, end) spans of its matches

# llama.cpp's collapsed bytes (``k_ucat_cpt``), the major category each stands for, and the
# \p{..} names it accepts (``k_ucat_enum``: the letter subclasses all mean "letter").
CLASS_BYTES = {"N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5"}
OTHER_BYTE, SPACE_BYTE = "\xd0", "\x0b"
CLASS_NAMES = {"N": "N", "L": "L", "P": "P", "M": "M", "S": "S",
               "Lu": "L", "Ll": "L", "Lt": "L", "Lm": "L", "Lo": "L"}
NON_ASCII_SPACES = {cp: ord(SPACE_BYTE) for cp in WHITESPACE if cp >= 0x80}

# Kimi K2's Han ranges (``unicode_cpt_is_han``), and its splitter as one regex over real classes:
# Han runs, letter runs without Han (no case classes, no marks) with an optional contraction, then
# the Llama 3 tail.
HAN = ("\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f"
       "\U0002b820-\U0002ceaf\U0002ceb0-\U0002ebef\uf900-\ufaff\U0002f800-\U0002fa1f")
KIMI_K2 = (f"[{HAN}]+|[^\\r\\n\\p{{L}}\\p{{N}}]?(?:(?![{HAN}])\\p{{L}})+{CONTRACTIONS}?|\\p{{N}}{{1,3}}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _regex_cutter(pattern: re.Pattern) -> Cutter:
    return lambda piece: [m.span() for m in pattern.finditer(piece)]


def digit_groups(piece: str) -> list[tuple[int, int]]:
    """AFMoE's digit splitter (``unicode_regex_split_custom_afmoe``), also Tiny Aya's: each run of
    ``\\p{N}`` is cut into its leading ``len % 3`` digits, then groups of 3; the text before a run
    is joined to the run's first group (as llama.cpp does), the text after the last run is one piece."""
    spans, prev = [], 0
    for m in compile_pattern(r"\p{N}+").finditer(piece):
        start, end = m.span()
        cut = start + (end - start) % 3
        for stop in ([cut] if cut > start else []) + list(range(cut + 3, end + 1, 3)):
            spans.append((prev, stop))
            prev = stop
    if prev < len(piece):
        spans.append((prev, len(piece)))
    return spans


# Regexes llama.cpp splits by hand (``unicode_regex_split_custom``): its text -> the splitter.
# (the value: the regex over real classes that the hand-written code computes, or a function)
CUSTOM: dict[str, str | Cutter] = {
    **{regex: regex for regex in (GPT2_REGEX, LLAMA3_REGEX, QWEN2_REGEX, QWEN35_REGEX, NEWLINE_RUNS)},
    r"\p{Han}+": KIMI_K2,
    r"\p{AFMoE_digits}": digit_groups,
    r"\d{1,3}(?=(?:\d{3})*\b)": digit_groups,
}


# --- std::regex, as llama.cpp runs it ---------------------------------------------------------------

@cache
def _category_starts() -> tuple[list[int], list[tuple[int, str]]]:
    """Sorted (start, (end, collapsed byte)) of every class range, for a bisect per code point."""
    spans = sorted((a, b, CLASS_BYTES[c]) for c, ranges in category_ranges().items() for a, b in ranges)
    return [a for a, _, _ in spans], [(b, byte) for _, b, byte in spans]


class _Collapse(dict):
    """``str.translate`` table for the collapsed text, filled on first sight of each code point."""

    def __missing__(self, cp: int) -> int:
        if cp < 0x80:
            byte = cp
        elif cp in NON_ASCII_SPACES:
            byte = NON_ASCII_SPACES[cp]
        else:
            starts, spans = _category_starts()
            i = bisect.bisect_right(starts, cp) - 1
            byte = ord(spans[i][1]) if i >= 0 and cp <= spans[i][0] else ord(OTHER_BYTE)
        self[cp] = byte
        return byte


COLLAPSE = _Collapse()


def _ascii_members(category: str) -> str:
    """The ASCII characters of a major category, each as ``\\xHH`` (``k_ucat_map``)."""
    return "".join(f"\\x{cp:02x}" for a, b in category_ranges()[category] for cp in range(a, min(b, 0x7F) + 1))


def collapsed_regex(regex: str) -> tuple[str, bool]:
    """A std::regex pattern of llama.cpp's table as a Python ``re`` pattern, and whether it runs
    over the collapsed text (it names a ``\\p{..}`` class). Raises ValueError for a class name
    llama.cpp does not collapse, or a non-ASCII character beside a class (llama.cpp refuses both)."""
    collapsed = any(f"\\p{{{name}}}" in regex for name in CLASS_NAMES)
    out, inside, i = [], False, 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and regex.startswith("p{", i + 1):
            end = regex.index("}", i)
            name = regex[i + 3:end]
            if name not in CLASS_NAMES:
                raise ValueError(f"\\p{{{name}}} is not a class llama.cpp's std::regex path knows: {regex!r}")
            major = CLASS_NAMES[name]
            body = f"\\x{ord(CLASS_BYTES[major]):02x}" + _ascii_members(major)
            out.append(body if inside else f"[{body}]")
            i = end + 1
            continue
        if c == "\\" and i + 1 < len(regex):
            out.append(regex[i:i + 2])
            i += 2
            continue
        if collapsed and ord(c) >= 0x80:
            raise ValueError(f"a regex with \\p{{..}} classes must be ASCII (llama.cpp refuses it): {regex!r}")
        inside = (c == "[") or (inside and c != "]")
        out.append("\\Z" if c == "$" and not inside else c)
        i += 1
    return "".join(out), collapsed


def _stl_cutter(regex: str) -> Cutter:
    pattern, collapsed = collapsed_regex(regex)
    compiled = re.compile(pattern, re.ASCII)
    table = COLLAPSE if collapsed else NON_ASCII_SPACES

    def cut(piece: str) -> list[tuple[int, int]]:
        text = piece if piece.isascii() else piece.translate(table)
        return [m.span() for m in compiled.finditer(text)]
    return cut


@cache
def cutter(regex: str) -> Cutter:
    """The splitter llama.cpp uses for ``regex``: hand-written if it knows the text, else std::regex."""
    custom = CUSTOM.get(regex)
    if custom is None:
        return _stl_cutter(regex)
    return _regex_cutter(compile_pattern(custom)) if isinstance(custom, str) else custom


def split_words(text: str, regexes: tuple[str, ...]) -> list[str]:
    """``text`` cut as llama.cpp's ``unicode_regex_split(text, regexes)`` cuts it (before byte
    encoding): each regex in turn splits every piece into its matches and the non-empty gaps between
    them; a match never crosses a piece's ends (lookarounds see the ends of the piece). The words
    concatenate back to ``text``."""
    pieces = [text] if text else []
    for regex in regexes:
        cut, out = cutter(regex), []
        for piece in pieces:
            pos = 0
            for start, end in cut(piece):
                if start > pos:
                    out.append(piece[pos:start])
                if end > start:
                    out.append(piece[start:end])
                pos = max(pos, end)
            if pos < len(piece):
                out.append(piece[pos:])
        pieces = out
    return pieces

