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
seen before computed in Python, and once few nodes of a level are live only their children are
walked. Tokens sharing a prefix share its walk; a mask already made
for a state is reused (``MASK_BYTES`` of them per grammar). End-of-generation tokens are allowed only
where the grammar is complete; tokens with no bytes (control tokens) never are.
"""

from __future__ import annotations

import bisect
import heapq
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyengine.generation.grammar_parse import CharClass, GrammarError, Rules, parse_gbnf

END = None                   # the end of an alternative in the flat program
NO_PARTIAL = (0, 0, 0)       # (bits so far, bytes still to come, bytes in all) of a UTF-8 character
MAX_STATES = 1 << 16         # states kept before the automaton is forgotten and learnt again
MASK_BYTES = 24 << 20        # masks kept per grammar, in bytes (a mask: 3 bytes a token)
DENSE = 4                    # a trie level is walked whole when over 1/DENSE of it is live
FAR = 0xFFFF                 # a mask's "refused" (and a completion of more bytes than it counts)
GRID_BYTES = 64              # a trie is built from the tokens' first 64 bytes in one array (the rest per token)
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
        self.rest = shortest_rests(self.program, self.alt_starts)
        self._reset()

    @classmethod
    def from_gbnf(cls, text: str, source: str = "grammar") -> Grammar:
        return cls(parse_gbnf(text, source), source)

    def _reset(self) -> None:
        """Forget every state (kept: none); the start state again."""
        self._advanced: dict[Stack, frozenset] = {}
        self._accepted: dict[tuple[frozenset, int], frozenset] = {}
        self._states: list[State] = [(frozenset(), NO_PARTIAL)]     # 0: dead
        self._ids: dict[State, int] = {self._states[0]: 0}
        self.table = np.full((256, 256), -1, dtype=np.int32)         # (capacity, byte) -> state id
        self.table[0] = 0
        self.dist = np.full(256, FAR, dtype=np.uint16)               # (capacity,) bytes to the end at least
        self._masks: OrderedDict[tuple[int, int], Mask] = OrderedDict()
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
        """The stacks after code point ``cp``: each whose top matches it moves on (llama_grammar_accept).
        Kept per (stacks, the span of ``bounds`` that holds cp): every class answers alike within one."""
        key = (stacks, bisect.bisect_right(self.bounds, cp))
        done = self._accepted.get(key)
        if done is not None:
            return done
        out: set[Stack] = set()
        for st in stacks:
            if st and self.program[st[-1]].matches(cp):
                nxt = st[-1] + 1
                out |= self._advance(st[:-1] + ((nxt,) if self.program[nxt] is not END else ()))
        self._accepted[key] = result = frozenset(out)
        return result

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
                self.dist = np.concatenate([self.dist, np.full(self.dist.shape[0], FAR, dtype=np.uint16)])
            self.dist[sid] = self._to_end(state)
        return sid

    def _to_end(self, state: State) -> int:
        """The fewest bytes that complete the grammar from ``state`` (capped at FAR - 1): the bytes a
        partial character still needs, then each stack's frames' shortest rests (:func:`shortest_rests`)."""
        stacks, (bits, left, total) = state
        if left:                                    # only the stacks whose top the character may match
            lo, hi = (-1 - bits, -1 - bits) if bits < 0 else utf8_span(bits, left, total)
            stacks = [st for st in stacks if st and self.program[st[-1]].may_match(lo, hi)]
        best = min((left + sum(self.rest[p + (left and i == len(st) - 1)] for i, p in enumerate(st))
                    for st in stacks), default=FAR - 1)
        return min(best, FAR - 1)

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
        lo, hi = utf8_span(bits, left, total)
        if lo > hi or 0xD800 <= lo <= hi <= 0xDFFF:
            return 0
        if left == 0:
            return self._after(stacks, bits)
        if not any(st and self.program[st[-1]].may_match(lo, hi) for st in stacks):
            return 0
        k = bisect.bisect_right(self.bounds, lo)
        if left < total - 1 and k == bisect.bisect_right(self.bounds, hi):   # all the same to the grammar:
            bits = -1 - (self.bounds[k - 1] if k else 0)                       # keep one of them
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
        """(n_vocab,) uint16: for each token, the fewest bytes that complete the grammar after it
        (:data:`FAR`: the grammar refuses it here); end-of-generation tokens 0 where the grammar is
        complete, FAR elsewhere; tokens with no bytes FAR. ``mask(...) < FAR`` are the tokens allowed.
        Made once per state (``MASK_BYTES`` of them kept)."""
        return self.masks(sid, trie).reach

    def masks(self, sid: int, trie: VocabTrie) -> Mask:
        """The :class:`Mask` of state ``sid`` over ``trie``'s tokens, made once (``MASK_BYTES`` kept)."""
        key = (id(trie), sid)
        kept = self._masks.get(key)
        if kept is not None:
            self._masks.move_to_end(key)
            return kept
        out = self._walk(sid, trie)
        if self.complete(sid):
            out[trie.eog] = 0
        if len(self._states) > MAX_STATES:                             # bounded memory: learn again
            keep = self._states[sid]
            self._reset()
            sid = self.intern(keep)
        allowed = out < FAR
        kept = self._masks[(id(trie), sid)] = Mask(out, allowed, int(out[allowed].max(initial=0)))
        if len(self._masks) * (out.nbytes + allowed.nbytes) > MASK_BYTES:
            self._masks.popitem(last=False)
        return kept

    def _walk(self, sid: int, trie: VocabTrie) -> np.ndarray:
        """(n_vocab,) uint16: the shortest completion after each token's bytes from ``sid`` (FAR: they
        lead nowhere). The hot loop of a
        mask: level by level, each node's state is ``table[its parent's state, its byte]``; a level
        whose live parents are many is gathered whole (``dense``), else only the children of the live
        ones (their ranges in the level below, ``child_start``/``child_end``)."""
        out = np.full(trie.n_vocab, FAR, dtype=np.uint16)
        idx, st = None, np.array([sid], dtype=np.int32)               # None: st holds every node of the level
        for lv in trie.levels:
            live = np.flatnonzero(st > 0)
            if not live.size:
                break
            if live.size * DENSE > st.size or idx is None and live.size * DENSE > lv.n_parents:
                if idx is not None:                                    # back to a whole level
                    full = np.zeros(lv.n_parents, dtype=np.int32)
                    full[idx] = st
                    st = full
                idx, prev, byte = None, st[lv.parent], lv.byte         # (n_d,) every node
            else:
                nodes = live if idx is None else idx[live]             # (k,) live parents
                counts = lv.child_end[nodes] - lv.child_start[nodes]
                idx = np.repeat(lv.child_start[nodes] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
                prev, byte = np.repeat(st[live], counts), lv.byte[idx]  # (m,) their children
            st = self.table[prev, byte]
            unknown = np.flatnonzero(st < 0)
            if unknown.size:
                self._fill(prev[unknown], byte[unknown])
                st = self.table[prev, byte]
            if idx is None:
                out[lv.tokens] = self.dist[st[lv.ends]]
            else:
                tok = lv.token_at[idx]
                ends = (tok >= 0) & (st > 0)
                out[tok[ends]] = self.dist[st[ends]]
        out[trie.twins] = out[trie.twin_of]                           # tokens of the same bytes
        return out

    def matcher(self, tokenizer: Any) -> GrammarMatcher:
        """A new reply's position in this grammar, for ``tokenizer``'s tokens."""
        return GrammarMatcher(self, vocab_trie(tokenizer))


def utf8_span(bits: int, left: int, total: int) -> tuple[int, int]:
    """The code points lo..hi a UTF-8 character of ``total`` bytes may be, its first bits ``bits`` with
    ``left`` bytes to come (none overlong, none past U+10FFFF; lo > hi: none)."""
    lo = max(bits << (6 * left), UTF8_MIN[total])
    return lo, min((bits << (6 * left)) | ((1 << (6 * left)) - 1), 0x10FFFF)


def shortest_rests(program: list, alt_starts: list[list[int]]) -> list[int]:
    """For each position of the flat program, the fewest UTF-8 bytes that finish its alternative from
    there (a class: its smallest character's length; a rule: its shortest alternative; FAR: none).
    The rules' shortest lengths come first, settled in increasing order as Dijkstra's algorithm does
    (Knuth's shortest derivations): an alternative is ready once every rule in it is settled."""
    owner, alts = [], []                                    # per alternative: its rule, its positions
    for r, starts in enumerate(alt_starts):
        for a in starts:
            end = a
            while program[end] is not END:
                end += 1
            owner.append(r)
            alts.append(range(a, end))
    total = [0] * len(alts)                                 # bytes of the classes and settled rules so far
    waiting = [0] * len(alts)                               # rule references not yet settled
    uses: list[list[int]] = [[] for _ in alt_starts]        # rule -> the alternatives that refer to it
    for i, span in enumerate(alts):
        for p in span:
            e = program[p]
            if isinstance(e, CharClass):
                total[i] = min(FAR, total[i] + min_utf8(e))
            else:
                waiting[i] += 1
                uses[e].append(i)
    rule = [FAR] * len(alt_starts)
    heap = [(total[i], owner[i]) for i in range(len(alts)) if not waiting[i]]
    heapq.heapify(heap)
    while heap:
        v, r = heapq.heappop(heap)
        if rule[r] < FAR or v >= FAR:
            continue
        rule[r] = v
        for i in uses[r]:
            total[i] = min(FAR, total[i] + v)
            waiting[i] -= 1
            if not waiting[i]:
                heapq.heappush(heap, (total[i], owner[i]))
    rest = [0] * len(program)
    for p in range(len(program) - 2, -1, -1):
        e = program[p]
        rest[p] = 0 if e is END else min(FAR, (min_utf8(e) if isinstance(e, CharClass) else rule[e]) + rest[p + 1])
    return rest


def min_utf8(c: CharClass) -> int:
    """The UTF-8 length of the smallest character ``c`` matches (FAR: none)."""
    if c.negated:
        covered = sorted(c.ranges)
        cp = 0
        for lo, hi in covered:
            if lo <= cp <= hi:
                cp = hi + 1
        return FAR if cp > 0x10FFFF else len(chr(cp).encode("utf-8", "surrogatepass"))
    return min((len(chr(lo).encode("utf-8", "surrogatepass")) for lo, _ in c.ranges), default=FAR)


@dataclass
class Mask:
    """What a state allows: ``reach`` (n_vocab,) uint16, the shortest completion after each token (FAR:
    refused), ``allowed`` (n_vocab,) bool (reach < FAR), ``farthest`` the largest reach allowed."""
    reach: np.ndarray
    allowed: np.ndarray
    farthest: int


class GrammarMatcher:
    """One reply's place in a :class:`Grammar`: masks the logits of each step (:meth:`apply`) and
    follows the tokens sampled (:meth:`accept`). Holds the state itself, not its id: the grammar may
    forget its ids (``MAX_STATES``)."""

    def __init__(self, grammar: Grammar, trie: VocabTrie):
        self.grammar, self.trie = grammar, trie
        self.state = grammar.state(grammar.start)

    def _sid(self) -> int:
        return self.grammar.intern(self.state)

    def allowed(self, left: int | None = None) -> np.ndarray:
        """(n_vocab,) bool: the tokens the grammar allows next. With ``left``, the tokens the reply may
        still take (this one included), only those after which the grammar can still be completed in
        ``left`` - 1 tokens of a byte each, when there are such tokens: a reply whose budget allows the
        grammar's shortest completion then ends complete within it."""
        m = self.grammar.masks(self._sid(), self.trie)
        if left is None or left - 1 >= m.farthest:
            return m.allowed                                           # every allowed token still fits
        in_time = m.reach <= max(left - 1, 0)
        return in_time if in_time.any() else m.allowed

    def apply(self, logits: np.ndarray, left: int | None = None) -> np.ndarray:
        """A copy of ``logits`` ((n_vocab,) float32) with every token the grammar refuses at -inf
        (``left``: the reply's tokens left, see :meth:`allowed`). Raises GrammarError when it allows
        none (a grammar the vocabulary cannot write)."""
        allowed = self.allowed(left)
        n = min(allowed.shape[0], logits.shape[0])
        if not allowed[:n].any():
            raise GrammarError(f"{self.grammar.source}: no token of the vocabulary can continue the grammar here")
        out = np.full_like(logits, -np.inf)
        np.copyto(out[:n], logits[:n], where=allowed[:n])
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


@dataclass
class TrieLevel:
    """The nodes of one depth d of a :class:`VocabTrie` (n_d of them, in byte order, so the children
    of a node are contiguous): ``parent`` (n_d,) int32, each node's parent's index in level d-1 (the
    root: 0); ``byte`` (n_d,) uint8, the byte it adds; ``child_start``/``child_end`` (n_parents,)
    int64, where each parent's children lie in this level; ``ends`` (m,) int32 and ``tokens`` (m,)
    int64, the nodes where tokens of d+1 bytes end and those tokens; ``token_at`` (n_d,) int64, the
    token ending at each node (-1: none)."""
    parent: np.ndarray
    byte: np.ndarray
    child_start: np.ndarray
    child_end: np.ndarray
    ends: np.ndarray
    tokens: np.ndarray
    token_at: np.ndarray

    @property
    def n_parents(self) -> int:
        return self.child_start.shape[0]


class VocabTrie:
    """A vocabulary's token bytes as a trie stored level by level (:class:`TrieLevel`), for
    :meth:`Grammar.mask`. ``eog``: end-of-generation ids; ``pieces``: each token's bytes (b"" for
    control tokens, which the trie leaves out); ``twins``/``twin_of``: tokens whose bytes another
    token (the one ``token_at`` names) already has."""

    def __init__(self, tokenizer: Any):
        self.n_vocab = tokenizer.n_vocab
        self.pieces = [tokenizer.token_bytes(i) for i in range(self.n_vocab)]
        self.eog_set = frozenset(int(t) for t in tokenizer.eog_ids)
        self.eog = np.array(sorted(self.eog_set), dtype=np.int64)
        held = sorted((p, t) for t, p in enumerate(self.pieces) if p and t not in self.eog_set)
        self.levels: list[TrieLevel] = []
        self.twins = self.twin_of = np.zeros(0, dtype=np.int64)
        if held:
            self._build([p for p, _ in held], np.array([t for _, t in held], dtype=np.int64))

    def _build(self, pieces: list[bytes], ids: np.ndarray) -> None:
        """The levels from the tokens' bytes in byte order (``pieces``, their ``ids``): in that order the
        tokens that share a prefix of d+1 bytes are neighbours, so a node of level d starts at a token
        whose first d+1 bytes are not the previous token's (numpy, a level at a time)."""
        n = len(pieces)
        lens = np.array([len(p) for p in pieces], dtype=np.int64)              # (n,)
        width = int(lens.max())
        wide = min(width, GRID_BYTES)                       # the bytes held in a grid; past them, per row
        grid = np.frombuffer(b"".join(p[:wide].ljust(wide, b"\0") for p in pieces), dtype=np.uint8).reshape(n, wide)

        def column(d: int, rows: np.ndarray) -> np.ndarray:
            if d < wide:
                return grid[rows, d]
            return np.array([pieces[i][d] if len(pieces[i]) > d else 0 for i in rows.tolist()], dtype=np.uint8)
        differs = np.zeros(n, dtype=bool)                   # the prefix so far is not the previous token's
        differs[0] = True
        node = np.zeros(n, dtype=np.int64)                  # each token's node at the level before (root 0)
        twins, twin_of, n_parents = [], [], 1
        for d in range(width):
            rows = np.flatnonzero(lens > d)                                     # tokens with a byte d
            r = rows[rows > 0]
            differs[r] |= (lens[r - 1] <= d) | (column(d, r) != column(d, r - 1))
            new = rows[differs[rows]]                                           # tokens that start a node
            parent = node[new].astype(np.int32)
            node[rows] = np.cumsum(differs[rows]) - 1
            end = rows[lens[rows] == d + 1]                                     # tokens of d+1 bytes
            first = end[differs[end]]
            twin = end[~differs[end]]
            token_at = np.full(new.shape[0], -1, dtype=np.int64)
            token_at[node[first]] = ids[first]
            twins.append(ids[twin])
            twin_of.append(token_at[node[twin]])
            self.levels.append(TrieLevel(
                parent, column(d, new).copy(), np.searchsorted(parent, np.arange(n_parents), side="left"),
                np.searchsorted(parent, np.arange(n_parents), side="right"), node[first].astype(np.int32),
                ids[first], token_at))
            n_parents = new.shape[0]
        self.twins, self.twin_of = np.concatenate(twins), np.concatenate(twin_of)


_TRIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def vocab_trie(tokenizer: Any) -> VocabTrie:
    """The :class:`VocabTrie` of ``tokenizer``, built once per tokenizer."""
    trie = _TRIES.get(tokenizer)
    if trie is None:
        trie = _TRIES[tokenizer] = VocabTrie(tokenizer)
    return trie


__all__ = ["Grammar", "GrammarError", "GrammarMatcher", "Mask", "TrieLevel", "VocabTrie", "vocab_trie"]
