"""A second, simple recognizer of GBNF grammars for the tests: which texts a parsed grammar accepts,
by the set of positions each rule can end at (memoized recursive descent over code points), with no
stacks, bytes or tables: the engine's answers are held to it."""

from __future__ import annotations

import sys
from functools import cache

from pyengine.generation.grammar_parse import CharClass, Rules

OUT = -1          # an end position meaning "the text ran out while this was still matching"


def ends(rules: Rules, text: str):
    """A function (rule id, start) -> frozenset of the positions the rule can end at in ``text``,
    OUT among them when the text ends inside a match."""
    n = len(text)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 50 * n + 10_000))

    @cache
    def rule(r: int, i: int) -> frozenset:
        out: set[int] = set()
        for alt in rules.alts[r]:
            out |= seq(alt, 0, i)
        return frozenset(out)

    def seq(alt: tuple, k: int, i: int) -> set[int]:
        if k == len(alt):
            return {i}
        if i == OUT:
            return {OUT}
        e = alt[k]
        if isinstance(e, CharClass):
            if i == n:
                return {OUT}
            return seq(alt, k + 1, i + 1) if e.matches(ord(text[i])) else set()
        out: set[int] = set()
        for j in rule(e, i):
            out |= seq(alt, k + 1, j)
        return out

    return rule


def accepts(rules: Rules, text: str) -> bool:
    """Whether ``text`` is a whole sentence of the grammar."""
    return len(text) in ends(rules, text)(rules.root, 0)


def viable(rules: Rules, text: str) -> bool:
    """Whether ``text`` is a sentence or the start of one."""
    found = ends(rules, text)(rules.root, 0)
    return OUT in found or len(text) in found
