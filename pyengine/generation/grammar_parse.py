"""GBNF, llama.cpp's grammar format, parsed into rules (llama.cpp ``src/llama-grammar.cpp``,
``llama_grammar_parser``; the format: ``grammars/README.md``).

    root   ::= "{" ws pair ("," ws pair)* "}"      # a rule: a name, ::=, alternatives split by |
    pair   ::= [a-z]+ ":" ws [0-9]{1,3}            # literals, classes, references, groups, repetitions
    ws     ::= [ \\t\\n]*

A :class:`Rules` holds, for each rule id, its alternatives; an alternative is a tuple of elements,
each a :class:`CharClass` (one code point out of ranges, or out of everything but them) or an int
(a rule id). Groups become rules of their own and repetitions are rewritten into rules exactly as
llama.cpp's ``handle_repetitions`` does::

    S{m,n} -> S ... S (m times) S'(n-m)      S'(x) ::= S S'(x-1) |     S'(1) ::= S |
    S{m,}  -> S ... S (m times) S'           S'    ::= S S' |
    S* = S{0,}   S+ = S{1,}   S? = S{0,1}

Names are ``[a-zA-Z0-9-]+``; escapes ``\\x..`` ``\\u....`` ``\\U........`` ``\\t \\r \\n \\\\ \\" \\[ \\]
\\-``; ``.`` is any character; ``#`` starts a comment; a rule ends at a newline outside brackets. A
grammar that does not parse, names an undefined rule, has no ``root`` or is left-recursive raises
:class:`GrammarError` naming the line and column (1-based, in characters).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyengine.errors import PyEngineError

MAX_REPETITION = 2000          # llama.cpp's MAX_REPETITION_THRESHOLD: a larger {m,} is refused, {,n} unbounded
MAX_GRAMMAR_CHARS = 1 << 20    # a grammar longer than 1 MiB of text is refused
MAX_RULES = 100_000            # rules after the rewrite of groups and repetitions
MAX_ELEMENTS = 100_000         # elements one repetition may write out
MAX_NESTING = 100              # groups within groups
ESCAPES = {"t": 9, "r": 13, "n": 10, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}
HEX_DIGITS = {"x": 2, "u": 4, "U": 8}


class GrammarError(PyEngineError):
    """A GBNF grammar (or a schema turned into one) that cannot be used; names the line and column."""


@dataclass(frozen=True)
class CharClass:
    """One code point: within one of ``ranges`` (inclusive (lo, hi) pairs), or, when ``negated``,
    within none of them (``.`` is the negated empty class)."""
    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def matches(self, cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in self.ranges) != self.negated

    def may_match(self, lo: int, hi: int) -> bool:
        """Whether some code point in ``lo..hi`` may match (a partial UTF-8 sequence's possible
        characters; llama.cpp ``llama_grammar_match_partial_char``)."""
        if not self.negated:
            return any(a <= hi and lo <= b for a, b in self.ranges)
        return not any(a <= lo and hi <= b for a, b in self.ranges)


Element = CharClass | int       # a character, or a reference to a rule by id


@dataclass
class Rules:
    """A parsed grammar: ``names[i]`` and ``alts[i]`` (tuples of elements) of rule ``i``; ``root`` its id."""
    names: list[str] = field(default_factory=list)
    alts: list[list[tuple[Element, ...]]] = field(default_factory=list)
    root: int = 0


class _Parser:
    """A recursive-descent reader of GBNF text (llama.cpp's ``parse_*`` functions, one by one)."""

    def __init__(self, text: str, source: str):
        self.text, self.source, self.pos = text, source, 0
        self.rules = Rules()
        self.ids: dict[str, int] = {}
        self.defined: set[int] = set()
        self.used_at: dict[int, int] = {}
        self.depth = 0

    # --- errors and positions
    def error(self, message: str, pos: int | None = None) -> GrammarError:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return GrammarError(f"{self.source}: line {line}, column {col}: {message}")

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    # --- symbols
    def symbol(self, name: str) -> int:
        if name not in self.ids:
            self.ids[name] = self.new_rule(name)
        return self.ids[name]

    def new_rule(self, name: str) -> int:
        if len(self.rules.names) >= MAX_RULES:
            raise self.error(f"more than {MAX_RULES} rules once groups and repetitions are rewritten")
        self.rules.names.append(name)
        self.rules.alts.append([])
        return len(self.rules.names) - 1

    def generated(self, base: str) -> int:
        """A rule for a group or a repetition: ``base_N`` as llama.cpp's ``generate_symbol_id``."""
        return self.new_rule(f"{base}_{len(self.rules.names)}")

    # --- lexing
    def space(self, newline_ok: bool) -> None:
        t = self.text
        while self.pos < len(t) and (t[self.pos] in " \t#" or (newline_ok and t[self.pos] in "\r\n")):
            if t[self.pos] == "#":
                while self.pos < len(t) and t[self.pos] not in "\r\n":
                    self.pos += 1
            else:
                self.pos += 1

    def name(self) -> str:
        start = self.pos
        while self.peek() and (self.peek().isascii() and (self.peek().isalnum() or self.peek() == "-")):
            self.pos += 1
        if self.pos == start:
            raise self.error("expecting a rule name")
        return self.text[start:self.pos]

    def int_(self) -> int:
        start = self.pos
        while self.peek() and self.peek() in "0123456789":
            self.pos += 1
        if self.pos == start:
            raise self.error("expecting an integer")
        if self.pos - start > 9:
            raise self.error(f"repetition count over {MAX_REPETITION}", start)
        return int(self.text[start:self.pos])

    def char(self) -> int:
        """One character of a literal or class, escapes decoded: its code point."""
        c = self.peek()
        if not c:
            raise self.error("unexpected end of input")
        if c != "\\":
            self.pos += 1
            return ord(c)
        e = self.peek(1)
        if e in HEX_DIGITS:
            n, start = HEX_DIGITS[e], self.pos
            digits = self.text[self.pos + 2:self.pos + 2 + n]
            if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"expecting {n} hex digits after \\{e}", start)
            self.pos += 2 + n
            cp = int(digits, 16)
            if cp > 0x10FFFF:
                raise self.error(f"\\{e}{digits} is past the last code point U+10FFFF", start)
            return cp
        if e in ESCAPES:
            self.pos += 2
            return ESCAPES[e]
        raise self.error("unknown escape" if e else "unexpected end of input")

    # --- the grammar
    def parse(self) -> Rules:
        if len(self.text) > MAX_GRAMMAR_CHARS:
            raise GrammarError(f"{self.source}: {len(self.text)} characters, more than {MAX_GRAMMAR_CHARS}")
        self.space(True)
        while self.pos < len(self.text):
            self.rule()
        for rid, at in self.used_at.items():
            if rid not in self.defined:
                raise self.error(f"undefined rule '{self.rules.names[rid]}'", at)
        if "root" not in self.ids or self.ids["root"] not in self.defined:
            raise GrammarError(f"{self.source}: no 'root' rule")
        self.rules.root = self.ids["root"]
        check_left_recursion(self.rules, self.source)
        return self.rules

    def rule(self) -> None:
        start = self.pos
        name = self.name()
        self.space(False)
        if self.text[self.pos:self.pos + 3] != "::=":
            raise self.error("expecting ::=")
        rid = self.symbol(name)
        if rid in self.defined:
            raise self.error(f"rule '{name}' defined twice", start)
        self.defined.add(rid)
        self.pos += 3
        self.space(True)
        self.rules.alts[rid] = self.alternates(name, nested=False)
        if self.peek() == "\r":
            self.pos += 2 if self.peek(1) == "\n" else 1
        elif self.peek() == "\n":
            self.pos += 1
        elif self.peek():
            raise self.error("expecting a newline or the end")
        self.space(True)

    def alternates(self, name: str, nested: bool) -> list[tuple[Element, ...]]:
        alts = [self.sequence(name, nested)]
        while self.peek() == "|":
            self.pos += 1
            self.space(True)
            alts.append(self.sequence(name, nested))
        return alts

    def sequence(self, name: str, nested: bool) -> tuple[Element, ...]:
        seq: list[Element] = []
        last = len(seq)                       # where the last item starts: what a repetition repeats
        while self.pos < len(self.text):
            c, start = self.peek(), self.pos
            if c == '"':
                self.pos += 1
                last = len(seq)
                while self.peek() != '"':
                    cp = self.char()
                    seq.append(CharClass(((cp, cp),)))
                self.pos += 1
            elif c == "[":
                last = len(seq)
                seq.append(self.char_class())
            elif c == ".":
                self.pos += 1
                last = len(seq)
                seq.append(CharClass((), negated=True))
            elif c.isascii() and (c.isalnum() or c == "-"):
                rid = self.symbol(self.name())
                self.used_at.setdefault(rid, start)
                last = len(seq)
                seq.append(rid)
            elif c == "(":
                if self.depth >= MAX_NESTING:
                    raise self.error(f"groups nested more than {MAX_NESTING} deep")
                self.depth += 1
                self.pos += 1
                self.space(True)
                sub = self.generated(name)
                self.rules.alts[sub] = self.alternates(name, nested=True)
                if self.peek() != ")":
                    raise self.error("expecting ')'")
                self.pos += 1
                self.depth -= 1
                last = len(seq)
                seq.append(sub)
            elif c in "*+?{":
                lo, hi = self.repetition()
                if last == len(seq):
                    raise self.error(f"'{c}' with nothing before it to repeat", start)
                seq[last:] = self.repeat(tuple(seq[last:]), lo, hi, name)
                last = len(seq)               # a repeated item is not repeated again (as llama.cpp)
                self.space(nested)
                continue
            else:
                break
            self.space(nested)
        return tuple(seq)

    def char_class(self) -> CharClass:
        self.pos += 1
        negated = self.peek() == "^"
        self.pos += negated
        ranges = []
        while self.peek() != "]":
            lo = self.char()
            hi = lo
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                hi = self.char()
            ranges.append((lo, hi))
        self.pos += 1
        return CharClass(tuple(ranges), negated)

    def repetition(self) -> tuple[int, int | None]:
        """``*``, ``+``, ``?`` or ``{m}``, ``{m,}``, ``{m,n}``: (min, max or None)."""
        c = self.peek()
        self.pos += 1
        if c != "{":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        self.space(False)
        lo = self.int_()
        self.space(False)
        hi: int | None = lo
        if self.peek() == ",":
            self.pos += 1
            self.space(False)
            hi = self.int_() if self.peek() and self.peek() in "0123456789" else None
            self.space(False)
        if self.peek() != "}":
            raise self.error("expecting '}'")
        self.pos += 1
        if lo > MAX_REPETITION:
            raise self.error(f"a repetition over {MAX_REPETITION} times")
        hi = None if hi is not None and hi > MAX_REPETITION else hi          # as llama.cpp: no bound
        if hi is not None and hi < lo:
            raise self.error(f"{{{lo},{hi}}}: the most is fewer than the least")
        return lo, hi

    def repeat(self, item: tuple[Element, ...], lo: int, hi: int | None, name: str) -> list[Element]:
        """``item`` repeated lo..hi times (hi None: no bound), as llama.cpp's ``handle_repetitions``."""
        if len(item) * max(lo, 1 if hi is None else hi) > MAX_ELEMENTS:
            raise self.error(f"a repetition of {len(item)} elements {lo}..{hi} times: over {MAX_ELEMENTS}")
        out: list[Element] = list(item * lo)
        n_opt = 1 if hi is None else hi - lo
        last = None
        for _ in range(n_opt):
            rid = self.generated(name)
            tail = (rid,) if hi is None else ((last,) if last is not None else ())
            self.rules.alts[rid] = [item + tail, ()]
            last = rid
        if last is not None:
            out.append(last)
        return out


def check_left_recursion(rules: Rules, source: str) -> None:
    """Raise GrammarError if a rule can reach itself without consuming a character (llama.cpp
    ``llama_grammar_detect_left_recursion``): matching would loop forever."""
    n = len(rules.alts)
    nullable = [False] * n
    changed = True
    while changed:                                   # least fixed point: which rules can match ""
        changed = False
        for r in range(n):
            if not nullable[r] and any(all(isinstance(e, int) and nullable[e] for e in a) for a in rules.alts[r]):
                nullable[r] = changed = True
    firsts: list[set[int]] = [set() for _ in range(n)]   # rules reachable at the start of a rule
    for r in range(n):
        for alt in rules.alts[r]:
            for e in alt:
                if not isinstance(e, int):
                    break
                firsts[r].add(e)
                if not nullable[e]:
                    break
    state = [0] * n                                  # 0 unseen, 1 on the path, 2 done
    for start in range(n):
        if state[start]:
            continue
        stack = [(start, iter(firsts[start]))]
        state[start] = 1
        while stack:
            r, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[r] = 2
                stack.pop()
            elif state[nxt] == 1:
                raise GrammarError(f"{source}: rule '{rules.names[nxt]}' is left-recursive")
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(firsts[nxt])))


def parse_gbnf(text: str, source: str = "grammar") -> Rules:
    """Parse GBNF ``text``; ``source`` names it in errors. Raises :class:`GrammarError`."""
    if not isinstance(text, str):
        raise GrammarError(f"{source}: a grammar is text, got {type(text).__name__}")
    return _Parser(text, source).parse()
