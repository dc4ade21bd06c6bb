"""Unicode character classes for the BPE pre-tokenizers, with the standard ``re`` module.

llama.cpp splits text before byte-level BPE with regexes such as GPT-2's
``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)``
(``unicode_regex_split`` in llama.cpp's ``unicode.cpp``). Python's ``re`` has
no ``\\p{...}`` and Pyodide has no ``regex`` module, so this module

1. builds each general category the patterns use (``L`` letters, ``N`` numbers,
   ``P`` punctuation, ``S`` symbols, ``M`` marks) as an ``re`` class body of
   code point ranges, from ``unicodedata``, once, on first use;
2. defines ``\\s`` as llama.cpp does: the 25 code points of Unicode's
   ``White_Space`` property (``unicode_set_whitespace``), not ``str.isspace``
   (which adds U+001C..U+001F);
3. translates a llama.cpp pattern into an ``re`` pattern over real classes
   (:func:`translate`), for the regexes llama.cpp splits by hand
   (:mod:`pyengine.text.pretokenize` runs them, and the others).

Cost: the first call scans planes 0-3 and 14 (266,240 code points) with
``unicodedata.category``: ~0.1 s in CPython, a few times that in Pyodide.
Planes 4-13 hold no assigned characters and planes 15-16 only private use
(category ``Co``), so they fall in none of the classes, as in llama.cpp.

The category data is Python's ``unicodedata`` (Unicode 14.0 in CPython 3.11,
15.0 in Pyodide's 3.12) plus the characters Unicode 15.0 and 15.1 added
(:data:`UNICODE_15_ADDITIONS`), which makes both agree with llama.cpp's tables
(Unicode 15.1) on every code point. Constructs ``re``
lacks that the supported pre-tokenizers use are rewritten by hand in their
table (``(?i:'s|...)`` as llama.cpp itself rewrites it: ``'[sS]|...``);
``\\s+(?!\\S)`` and ``{1,3}`` are native ``re``.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

# Unicode's White_Space property: llama.cpp's ``unicode_set_whitespace``.
WHITESPACE = (
    [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680]
    + list(range(0x2000, 0x200B))
    + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
)
CATEGORIES = "LNPSM"                 # the \p{X} classes a pattern may name
SCAN_RANGES = ((0x0, 0x40000), (0xE0000, 0xE1000))   # planes 0-3, start of plane 14

# Characters assigned in Unicode 15.0 and 15.1, the version of llama.cpp's tables
# (``unicode-data.cpp``), by major category, as inclusive ranges: CPython 3.11's
# unicodedata (14.0) calls them unassigned, Pyodide's (15.0) the 15.1 ones. They
# join their class wherever this Python's unicodedata says "Cn" (CJK Extension
# H and I, Kawi, Nag Mundari, ...; new emoji are symbols, which the GPT-2-style
# patterns treat like unassigned code points anyway).
UNICODE_15_ADDITIONS = {
    "L": "1123F-11240 11F02 11F04-11F10 11F12-11F33 1342F 13441-13446 1B132 1B155 1DF25-1DF2A "
         "1E030-1E06D 1E4D0-1E4EB 2B739 2EBF0-2EE5D 31350-323AF",
    "N": "11F50-11F59 1D2C0-1D2D3 1E4F0-1E4F9",
    "P": "11B00-11B09 11F43-11F4F",
    "S": "2FFC-2FFF 31EF 1F6DC 1F774-1F776 1F77B-1F77F 1F7D9 1FA75-1FA77 1FA87-1FA88 1FAAD-1FAAF "
         "1FABB-1FABD 1FABF 1FACE-1FACF 1FADA-1FADB 1FAE8 1FAF7-1FAF8",
    "M": "CF3 ECE 10EFD-10EFF 11241 11F00-11F01 11F03 11F34-11F3A 11F3E-11F42 13440 13447-13455 "
         "1E08F 1E4EC-1E4EF",
}


def _escape(cp: int) -> str:
    return f"\\U{cp:08x}"


def _body(ranges: list[tuple[int, int]]) -> str:
    """An ``re`` class body (no brackets) for inclusive code point ranges."""
    return "".join(_escape(a) if a == b else _escape(a) + "-" + _escape(b) for a, b in ranges)


@cache
def category_ranges() -> dict[str, list[tuple[int, int]]]:
    """Inclusive code point ranges of each major general category in ``CATEGORIES``.

    One pass of ``unicodedata.category`` over ``SCAN_RANGES`` (cached).
    """
    ranges: dict[str, list[tuple[int, int]]] = {c: [] for c in CATEGORIES}
    category = unicodedata.category
    for lo, hi in SCAN_RANGES:
        run_cat, run_start = "", lo
        for cp in range(lo, hi + 1):
            cat = category(chr(cp))[0] if cp < hi else ""   # sentinel closes the last run
            if cat != run_cat:
                if run_cat in ranges:
                    ranges[run_cat].append((run_start, cp - 1))
                run_cat, run_start = cat, cp
    for cat, spans in UNICODE_15_ADDITIONS.items():
        for span in spans.split():
            a, _, b = span.partition("-")
            new = [cp for cp in range(int(a, 16), int(b or a, 16) + 1) if category(chr(cp)) == "Cn"]
            ranges[cat].extend((cp, cp) for cp in new)
        ranges[cat] = _merge(sorted(ranges[cat]))
    return ranges


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted inclusive ranges with touching neighbours joined."""
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


@cache
def class_body(name: str) -> str:
    """The ``re`` class body for ``\\p{name}`` (``name`` in ``CATEGORIES``) or ``"s"`` for ``\\s``.

    Raises ``ValueError`` for any other name.
    """
    if name == "s":
        return _body([(cp, cp) for cp in WHITESPACE])
    if name not in CATEGORIES:
        raise ValueError(f"unsupported class \\p{{{name}}} (supported: {', '.join(CATEGORIES)})")
    return _body(category_ranges()[name])


def translate(pattern: str) -> str:
    """Rewrite a llama.cpp pre-tokenizer regex (PCRE/ECMAScript style) for Python's ``re``.

    ``\\p{X}`` and ``\\s`` become explicit classes (inside ``[...]`` their
    ranges are spliced in); ``\\S`` outside a class becomes ``[^\\s]`` with
    the same whitespace set. Everything else is copied: the patterns in the
    pre-tokenizer table use only syntax ``re`` reads the same way.
    Raises ``ValueError`` for ``\\S`` inside a class or an unknown ``\\p{...}``.
    """
    out: list[str] = []
    inside = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "p" and pattern.startswith("{", i + 2):
                end = pattern.index("}", i + 3)
                body, i = class_body(pattern[i + 3:end]), end + 1
            elif nxt == "s":
                body, i = class_body("s"), i + 2
            elif nxt == "S" and not inside:
                out.append("[^" + class_body("s") + "]")
                i += 2
                continue
            elif nxt == "S":
                raise ValueError(f"\\S inside a character class is not supported: {pattern!r}")
            else:
                out.append(pattern[i:i + 2])
                i += 2
                continue
            out.append(body if inside else "[" + body + "]")
            continue
        if c == "[" and not inside:
            inside = True
        elif c == "]" and inside:
            inside = False
        out.append(c)
        i += 1
    return "".join(out)


@cache
def compile_pattern(pattern: str) -> re.Pattern:
    """``re.compile(translate(pattern))``, cached per pattern."""
    return re.compile(translate(pattern))
