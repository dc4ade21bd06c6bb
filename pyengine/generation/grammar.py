"""Grammar-constrained sampling: the tokens whose bytes can continue a GBNF grammar
(llama.cpp ``src/llama-grammar.cpp``: stacks, ``llama_grammar_advance_stack``,
``llama_grammar_accept``, ``llama_grammar_reject_candidates``).

A grammar's state is a set of **stacks**, as in llama.cpp: each stack is a tuple of positions in
the flattened rules (bottom first), its top the character class to match next; the empty stack
means the grammar is complete. A character moves every stack whose top matches it and each is
*advanced*, rule references at the top expanded into their alternatives, until every top is a
character class again. Text reaches the grammar as UTF-8 bytes, so a state also carries a partial
character (its bits so far, the bytes still to come); a partial character lives only while some
stack could still match one of the characters it may become (``match_partial_char``). When every
character it may become falls between the same edges of the grammar's classes, the grammar cannot
tell them apart and the partial character keeps only one of them (so a string's many multi-byte
tokens share a few states).

States are interned as ints (0: dead) and a byte's step from a state is kept in a table
(``table[state, byte]``, -1 until computed), so a grammar learns its own automaton as text
walks it. The mask of a step walks the tokenizer's vocabulary as a trie of bytes, level by
level, with numpy: each level's states are ``table[parent states, bytes]``, only the pairs not
seen before computed in Python. Tokens sharing a prefix share its walk; a mask already made
for a state is reused (``MASKS_KEPT`` per grammar). End-of-generation tokens are allowed only
where the grammar is complete; tokens with no bytes (control tokens) never are.
"""

from __future__ import annotations

import bisect
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from pyengine.generation.grammar_parse import CharClass, GrammarError, Rules, parse_gbnf

END = None                   # the end of an alternative in the flat program
NO_PARTIAL = (0, 0, 0)       # (bits so far, bytes still to come, bytes in all) of a UTF-8 character
MAX_STATES = 1 << 16         # states kept before the automaton is forgotten and learnt again
MASKS_KEPT = 64              # masks kept per grammar (each n_vocab bytes)
UTF8_LEADS = tuple((0x1F, 1) if 0xC0 <= b < 0xE0 else (0x0F, 2) if 0xE0 <= b < 0xF0 else
                   (0x07, 3) if 0xF0 <= b < 0xF8 else (0, 0) for b in range(256))   # (bits mask, bytes to come)
UTF8_MIN = (0, 0, 0x80, 0x800, 0x10000)      # the least code point of a character of 2, 3, 4 bytes

Stack = tuple[int, ...]
State = tuple[frozenset, tuple[int, int, int]]       # (stacks, partial character)


class Grammar:
    """A grammar compiled for matching: the rules flattened into one program of elements
    (``CharClass``, a rule id, or ``END``), the states met so far and their byte table.

    ``Grammar.from_gbnf(text)`` parses (raises :class:`GrammarError`); a Grammar is shared by
    every reply that uses it (its table and masks grow with use); :meth:`matcher` starts one reply."""

    def __init__(self, rules: Rules, source: str = "grammar"):
        self.rules, self.source = rules, source
        self.program: list[CharClass | int | None] = []
        self.alt_starts: list[list[int]] = []
        for alts in rules.alts:
            starts = []
            for alt in alts:
                starts.append(len(self.program))
                self.program.extend(alt)
                self.program.append(END)
            self.alt_starts.append(starts)
        edges = {e for c in self.program if isinstance(c, CharClass) for lo, hi in c.ranges for e in (lo, hi + 1)}
        self.bounds = sorted(edges)        # code points where some class's answer may change
        self._reset()

    @classmethod
    def from_gbnf(cls, text: str, source: str = "grammar") -> Grammar:
        return cls(parse_gbnf(text, source), source)

    def _reset(self) -> None:
        """Forget every state (kept: none); the start state again."""
        self._advanced: dict[Stack, frozenset] = {}
        self._states: list[State] = [(frozenset(), NO_PARTIAL)]     # 0: dead
        self._ids: dict[State, int] = {self._states[0]: 0}
        self.table = np.full((256, 256), -1, dtype=np.int32)         # (capacity, byte) -> state id
        self.table[0] = 0
        self._masks: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        start: set[Stack] = set()
        for a in self.alt_starts[self.rules.root]:
            start |= self._advance((a,) if self.program[a] is not END else ())
        self.start = self.intern((frozenset(start), NO_PARTIAL))

    # --- stacks (llama_grammar_advance_stack, llama_grammar_accept)
    def _advance(self, stack: Stack) -> frozenset:
        """The stacks ``stack`` stands for once rule references at its top are expanded: every top a
        character class, or the empty stack. Terminates: left recursion is refused by the parser."""
        done = self._advanced.get(stack)
        if done is not None:
            return done
        out, todo, seen = set(), [stack], set()
        while todo:
            st = todo.pop()
            if st in seen:
                continue
            seen.add(st)
            top = st[-1] if st else None
            elem = self.program[top] if st else None
            if not isinstance(elem, int):                              # a class, or the empty stack
                out.add(st)
                continue
            rest = st[:-1] + ((top + 1,) if self.program[top + 1] is not END else ())
            todo.extend(rest + (a,) if self.program[a] is not END else rest for a in self.alt_starts[elem])
        self._advanced[stack] = result = frozenset(out)
        return result

    def _accept(self, stacks: frozenset, cp: int) -> frozenset:
        """The stacks after code point ``cp``: each whose top matches it moves on (llama_grammar_accept)."""
        out: set[Stack] = set()
        for st in stacks:
            if st and self.program[st[-1]].matches(cp):
                nxt = st[-1] + 1
                out |= self._advance(st[:-1] + ((nxt,) if self.program[nxt] is not END else ()))
        return frozenset(out)

    # --- states and the byte table
    def intern(self, state: State) -> int:
        """The id of ``state`` (0 if it has no stacks: dead), a new one if unseen."""
        if not state[0]:
            return 0
        sid = self._ids.get(state)
        if sid is None:
            sid = self._ids[state] = len(self._states)
            self._states.append(state)
            if sid >= self.table.shape[0]:
                grown = np.full((2 * self.table.shape[0], 256), -1, dtype=np.int32)
                grown[:self.table.shape[0]] = self.table
                self.table = grown
        return sid

    def state(self, sid: int) -> State:
        return self._states[sid]

    def complete(self, sid: int) -> bool:
        """Whether the text so far is a whole sentence of the grammar (an end token may follow)."""
        stacks, partial = self._states[sid]
        return partial == NO_PARTIAL and () in stacks

    def _step(self, sid: int, b: int) -> int:
        """The state after byte ``b``. UTF-8 is decoded strictly: a character's possible code points,
        lo..hi, are kept within its length's (no overlong forms, surrogates or code points past
        U+10FFFF), and a byte that leaves none ends the walk."""
        stacks, (bits, left, total) = self._states[sid]
        if left == 0:
            if b < 0x80:
                return self._after(stacks, b)
            mask, left = UTF8_LEADS[b]
            if left == 0:
                return 0                                               # not a lead byte
            bits, total = b & mask, left + 1
        elif b & 0xC0 != 0x80:
            return 0                                                   # not a continuation byte
        elif bits < 0:                                                 # the character's class is known
            left -= 1
            return self._after(stacks, -1 - bits) if left == 0 else self.intern((stacks, (bits, left, total)))
        else:
            bits, left = (bits << 6) | (b & 0x3F), left - 1
        lo = max(bits << (6 * left), UTF8_MIN[total])
        hi = min((bits << (6 * left)) | ((1 << (6 * left)) - 1), 0x10FFFF)
        if lo > hi or 0xD800 <= lo <= hi <= 0xDFFF:
            return 0
        if left == 0:
            return self._after(stacks, bits)
        if not any(st and self.program[st[-1]].may_match(lo, hi) for st in stacks):
            return 0
        k = bisect.bisect_right(self.bounds, lo)
        if left < total - 1 and k == bisect.bisect_right(self.bounds, hi):   # all the same to the grammar:
            bits = -1 - max(lo, self.bounds[k - 1] if k else 0)               # keep one of them
        return self.intern((stacks, (bits, left, total)))

    def _after(self, stacks: frozenset, cp: int) -> int:
        return self.intern((self._accept(stacks, cp), NO_PARTIAL))

    def _fill(self, states: np.ndarray, bytes_: np.ndarray) -> None:
        """Compute ``table[s, b]`` for the pairs not yet known (arrays of equal length)."""
        for key in np.unique(states.astype(np.int64) * 256 + bytes_):
            s, b = divmod(int(key), 256)
            nxt = self._step(s, b)
            self.table[s, b] = nxt

    def walk(self, sid: int, data: bytes) -> int:
        """The state after the bytes ``data`` from state ``sid`` (0: the grammar refuses them)."""
        for b in data:
            if sid == 0:
                return 0
            nxt = int(self.table[sid, b])
            if nxt < 0:
                nxt = self._step(sid, b)
                self.table[sid, b] = nxt
            sid = nxt
        return sid

    # --- masks over a vocabulary
    def mask(self, sid: int, trie: VocabTrie) -> np.ndarray:
        """(n_vocab,) bool: the tokens allowed in state ``sid``: those whose bytes the grammar can
        take from here, and the end-of-generation tokens where it is complete. Made once per state."""
        key = (id(trie), sid)
        out = self._masks.get(key)
        if out is not None:
            self._masks.move_to_end(key)
            return out
        out = np.zeros(trie.n_vocab, dtype=bool)
        cur = np.array([sid], dtype=np.int32)                          # the root's state
        for parent, byte, ends, tokens in trie.levels:
            prev = cur[parent]                                         # (n_level,) parent states
            cur = self.table[prev, byte]                               # (n_level,)
            unknown = np.flatnonzero(cur < 0)
            if unknown.size:
                self._fill(prev[unknown], byte[unknown])
                cur = self.table[prev, byte]
            out[tokens] = cur[ends] > 0
            if not cur.any():
                break
        if self.complete(sid):
            out[trie.eog] = True
        if len(self._states) > MAX_STATES:                             # bounded memory: learn again
            keep = self._states[sid]
            self._reset()
            sid = self.intern(keep)
        self._masks[(id(trie), sid)] = out
        if len(self._masks) > MASKS_KEPT:
            self._masks.popitem(last=False)
        return out

    def matcher(self, tokenizer: Any) -> GrammarMatcher:
        """A new reply's position in this grammar, for ``tokenizer``'s tokens."""
        return GrammarMatcher(self, vocab_trie(tokenizer))


class GrammarMatcher:
    """One reply's place in a :class:`Grammar`: masks the logits of each step (:meth:`apply`) and
    follows the tokens sampled (:meth:`accept`). Holds the state itself, not its id: the grammar may
    forget its ids (``MAX_STATES``)."""

    def __init__(self, grammar: Grammar, trie: VocabTrie):
        self.grammar, self.trie = grammar, trie
        self.state = grammar.state(grammar.start)

    def _sid(self) -> int:
        return self.grammar.intern(self.state)

    def allowed(self) -> np.ndarray:
        """(n_vocab,) bool: the tokens the grammar allows next."""
        return self.grammar.mask(self._sid(), self.trie)

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """A copy of ``logits`` ((n_vocab,) float32) with every token the grammar refuses at -inf.
        Raises GrammarError when it allows none (a grammar the vocabulary cannot write)."""
        allowed = self.allowed()
        n = min(allowed.shape[0], logits.shape[0])
        if not allowed[:n].any():
            raise GrammarError(f"{self.grammar.source}: no token of the vocabulary can continue the grammar here")
        out = np.full_like(logits, -np.inf)
        out[:n][allowed[:n]] = logits[:n][allowed[:n]]
        return out

    def accept(self, tok: int) -> None:
        """Follow token ``tok`` (an end-of-generation token ends the reply, the state is kept)."""
        if tok in self.trie.eog_set:
            return
        self.feed(self.trie.pieces[tok])

    def complete(self) -> bool:
        return self.grammar.complete(self._sid())

    def feed(self, data: bytes) -> None:
        """Follow text already in the reply (a resumed one). Raises GrammarError if the grammar refuses it."""
        sid = self.grammar.walk(self._sid(), data)
        if sid == 0:
            raise GrammarError(f"{self.grammar.source}: the reply so far does not follow the grammar")
        self.state = self.grammar.state(sid)


class VocabTrie:
    """A vocabulary's token bytes as a trie stored level by level, for :meth:`Grammar.mask`.

    ``levels[d]`` = (parent (n_d,) int32: index of each node's parent in level d-1 (level 0: the
    root, 0), byte (n_d,) uint8: the byte it adds, ends (m_d,) int32: the nodes where tokens of d+1
    bytes end, tokens (m_d,) int64: those tokens). ``eog``: end-of-generation ids; ``pieces``: each
    token's bytes (b"" for control tokens, which the trie leaves out)."""

    def __init__(self, tokenizer: Any):
        self.n_vocab = tokenizer.n_vocab
        self.pieces = [tokenizer.token_bytes(i) for i in range(self.n_vocab)]
        self.eog_set = frozenset(int(t) for t in tokenizer.eog_ids)
        self.eog = np.array(sorted(self.eog_set), dtype=np.int64)
        index: dict[bytes, int] = {b"": 0}
        by_len: dict[int, list[int]] = {}
        for tid, piece in enumerate(self.pieces):
            if piece and tid not in self.eog_set:
                by_len.setdefault(len(piece), []).append(tid)
        prefixes = sorted({p[:k] for p in self.pieces if p for k in range(1, len(p) + 1)}, key=len)
        levels: list[list[tuple[int, int]]] = []
        for p in prefixes:
            d = len(p) - 1
            if d == len(levels):
                levels.append([])
            index[p] = len(levels[d])
            levels[d].append((index[p[:-1]], p[-1]))
        self.levels = []
        for d, nodes in enumerate(levels):
            toks = by_len.get(d + 1, [])
            self.levels.append((np.array([n[0] for n in nodes], dtype=np.int32),
                                np.array([n[1] for n in nodes], dtype=np.uint8),
                                np.array([index[self.pieces[t]] for t in toks], dtype=np.int32),
                                np.array(toks, dtype=np.int64)))


_TRIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def vocab_trie(tokenizer: Any) -> VocabTrie:
    """The :class:`VocabTrie` of ``tokenizer``, built once per tokenizer."""
    trie = _TRIES.get(tokenizer)
    if trie is None:
        trie = _TRIES[tokenizer] = VocabTrie(tokenizer)
    return trie


__all__ = ["Grammar", "GrammarError", "GrammarMatcher", "VocabTrie", "vocab_trie"]
