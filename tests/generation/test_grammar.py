"""GBNF grammars (pyengine.generation.grammar_parse) and grammar-constrained sampling
(pyengine.generation.grammar): the parse, its errors, the byte-level matcher held to a separate
recognizer (gbnf_recognizer.py), masks over real vocabularies, and replies under a grammar."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import TINY

from generation.gbnf_recognizer import accepts, viable
from pyengine.generation import Engine, generate, load, load_tokenizer
from pyengine.generation.grammar import FAR, Grammar, VocabTrie, vocab_trie
from pyengine.generation.grammar_parse import CharClass, GrammarError, parse_gbnf
from pyengine.generation.request import Request
from pyengine.generation.sampling import SamplerParams

GREEDY = SamplerParams(temperature=0, top_k=1)
ANY = 'root ::= .*'

# --- the parse -------------------------------------------------------------------------------------

def test_rules_and_repetitions_as_llama_cpp_rewrites_them():
    r = parse_gbnf('root ::= "ab" [x-z]{1,3} item?\nitem ::= ( "-" | [^\\n] )+ # comment\n')
    assert r.names[r.root] == "root" and r.names[1] == "root_1"
    a, b, xz = CharClass(((97, 97),)), CharClass(((98, 98),)), CharClass(((120, 122),))
    root = r.alts[r.root]
    assert len(root) == 1 and root[0][:3] == (a, b, xz)
    # {1,3}: S S'(2), S'(2) ::= S S'(1) |, S'(1) ::= S |
    s2 = root[0][3]
    assert r.alts[s2] == [(xz, s2 - 1), ()] and r.alts[s2 - 1] == [(xz,), ()]
    item = r.names.index("item")
    group = r.alts[item][0][0]                                   # + : S S', S' ::= S S' |
    assert r.alts[group] == [(CharClass(((45, 45),)),), (CharClass(((10, 10),), negated=True),)]
    rep = r.alts[item][0][1]
    assert r.alts[rep] == [(group, rep), ()]


def test_escapes_classes_and_any():
    r = parse_gbnf(r'root ::= "\x41\u00e9\U0001F600\t\"\\" [^\]\-a-c] .')
    alt = r.alts[r.root][0]
    assert [c.ranges[0][0] for c in alt[:6]] == [0x41, 0xE9, 0x1F600, 9, 34, 92]
    assert alt[6] == CharClass(((93, 93), (45, 45), (97, 99)), negated=True)
    assert alt[7] == CharClass((), negated=True) and alt[7].matches(0) and alt[7].matches(0x10FFFF)


@pytest.mark.parametrize("text, where", [
    ('root ::= "a"\nx ::= b', "line 2, column 7: undefined rule 'b'"),
    ('root ::= "a" |\n  [a-', "line 2, column 6: unexpected end of input"),
    ('root := "a"', "line 1, column 6: expecting ::="),
    ('root ::= ("a" "b"\n', "line 2, column 1: expecting ')'"),
    ('root ::= "a"{2,1}', "line 1, column 18: {2,1}: the most is fewer than the least"),
    ('root ::= * "a"', "line 1, column 10: '*' with nothing before it to repeat"),
    ('root ::= "\\q"', "line 1, column 11: unknown escape"),
    ('root ::= "\\x4"', "line 1, column 11: expecting 2 hex digits after \\x"),
    ('root ::= "a"{3000}', "line 1, column 19: a repetition over 2000 times"),
    ('root ::= "a" )', "line 1, column 14: expecting a newline or the end"),
    ('\n\n  root ::= "a"\nroot ::= "b"', "line 4, column 1: rule 'root' defined twice"),
])
def test_errors_name_line_and_column(text, where):
    with pytest.raises(GrammarError) as e:
        parse_gbnf(text)
    assert str(e.value) == "grammar: " + where


def test_no_root_and_left_recursion_are_refused():
    with pytest.raises(GrammarError, match="no 'root' rule"):
        parse_gbnf('a ::= "x"')
    with pytest.raises(GrammarError, match="rule 'expr' is left-recursive"):
        parse_gbnf('root ::= expr\nexpr ::= ws expr "+" | "1"\nws ::= " "*')


def test_hostile_repetitions_are_refused_in_bounded_time():
    t = time.perf_counter()
    for text in ['root ::= ' + "(" * 5000 + '"a"' + ")" * 5000, 'root ::= "' + "a" * (2 << 20) + '"',
                 'root ::= "' + "x" * 60 + '"{2000}']:
        with pytest.raises(GrammarError):
            parse_gbnf(text)
    assert len(parse_gbnf('root ::= ("abcdefghij"{2000}){2000}').alts) == 2    # bounded: the group is one rule
    assert time.perf_counter() - t < 10


# --- the matcher against the recognizer -------------------------------------------------------------

ARITH = 'root ::= expr\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]+ | "(" expr ")"'
UNICODE = 'root ::= "é" [ぁ-ゟ]+ ("ü" | [^a-z\\n]){0,2}'


def walk(grammar: Grammar, text: str) -> int:
    return grammar.walk(grammar.start, text.encode("utf-8"))


@pytest.mark.parametrize("gbnf, texts", [
    (ARITH, ["1+2", "(1*(2-3))/4", "1+", "(", "", "1++2", "a", "12)", "((((7))))"]),
    (UNICODE, ["éあ", "éああü", "éあü!?", "éあa", "e", "éあ\n", "éあüüü"]),
])
def test_walk_agrees_with_the_recognizer(gbnf, texts):
    g, rules = Grammar.from_gbnf(gbnf), parse_gbnf(gbnf)
    for text in texts:
        sid = walk(g, text)
        assert (sid != 0) == viable(rules, text), text
        assert (sid != 0 and g.complete(sid)) == accepts(rules, text), text


def test_partial_utf8_lives_only_while_a_character_can_match():
    g = Grammar.from_gbnf(UNICODE)
    e_acute, a_hira = "é".encode(), "あ".encode()
    assert g.walk(g.start, e_acute[:1]) != 0                     # the first byte of é
    assert g.walk(g.start, "ü".encode()[:1]) != 0                # could be é or ü: same lead byte
    assert g.walk(g.start, "ā".encode()[:1]) == 0                # 0xC4: U+0100..U+013F, no é there
    assert g.walk(g.start, b"\xe0") == 0                         # 3 bytes: U+0800.., not é (no overlong)
    sid = g.walk(g.start, e_acute + a_hira[:2])
    assert sid != 0 and not g.complete(sid)
    assert g.walk(sid, a_hira[2:]) != 0 and g.complete(g.walk(sid, a_hira[2:]))
    assert g.walk(g.start, e_acute + "ア".encode()[:2]) != 0        # E3 82: U+3080..U+30BF, some in ぁ-ゟ
    assert g.walk(g.start, e_acute + "ヲ".encode()[:2]) == 0        # E3 83: U+30C0..U+30FF, none
    assert g.walk(g.start, b"\xc3\xc3") == 0 and g.walk(g.start, b"\x80") == 0
    anything = Grammar.from_gbnf(ANY)
    # overlong, surrogate, past U+10FFFF
    for bad in (b"\xc0\xaf", b"\xe0\x80", b"\xed\xa0", b"\xf4\x90", b"\xf5", b"\xff"):
        assert anything.walk(anything.start, bad) == 0, bad
    for good in ("é", "あ", "😀", "\U0010FFFF"):
        assert anything.complete(anything.walk(anything.start, good.encode()))


@pytest.fixture(scope="module")
def tiny():
    return load(TINY["qwen2"])


def test_masks_equal_the_recognizer_on_every_token(tiny):
    tok = tiny.tokenizer
    trie = vocab_trie(tok)
    for gbnf, prefix in [(ARITH, "(1"), (ARITH, ""), ('root ::= "hello" " world"? "!"', "hel"),
                         ('root ::= [a-z ]{0,12} "."', "a b")]:
        g, rules = Grammar.from_gbnf(gbnf), parse_gbnf(gbnf)
        mask = g.mask(walk(g, prefix), trie) < FAR
        for tid, piece in enumerate(trie.pieces):
            if tid in trie.eog_set:
                assert mask[tid] == accepts(rules, prefix)
                continue
            try:
                text = piece.decode("utf-8")
            except UnicodeDecodeError:
                continue
            assert mask[tid] == (bool(piece) and viable(rules, prefix + text)), (gbnf, prefix, piece)


def test_a_grammar_that_allows_everything_changes_no_greedy_reply(tiny):
    ids = tiny.tokenizer.encode("Once upon a time")
    plain = generate(tiny, ids, Request(GREEDY, 24))
    free = generate(tiny, ids, Request(GREEDY, 24, grammar=Grammar.from_gbnf(ANY)))
    assert "".join(free) == "".join(plain) and free.ids == plain.ids and len(free.ids) > 0


def test_replies_follow_the_grammar_with_and_without_lookup(tiny):
    g = Grammar.from_gbnf(ARITH)
    ids = tiny.tokenizer.encode("1+1 (2*3)")
    runs = [generate(tiny, ids, Request(GREEDY, 16, grammar=g, lookup=k))
            for k in (0, 4)]
    texts = ["".join(r) for r in runs]
    assert texts[0] == texts[1] and runs[0].ids == runs[1].ids
    assert all(accepts(parse_gbnf(ARITH), r.text) for r in runs)        # at the limit too: closed by it


def test_probabilities_are_those_after_the_mask(tiny):
    g = Grammar.from_gbnf('root ::= ("yes" | "no") "."')
    ids = tiny.tokenizer.encode("Answer:")
    gen = generate(tiny, ids, Request(SamplerParams(temperature=0.7, seed=1), 8, grammar=g, probs=5))
    text = "".join(gen)
    assert text in ("yes.", "no.") and gen.stats.stop_reason == "eog"
    first = gen.token_probs[0]
    assert first["masked"] is True
    allowed = g.matcher(tiny.tokenizer).allowed()
    assert all(allowed[t["id"]] or t["p"] == 0 for t in first["top"])
    assert sum(t["p"] for t in first["top"] if allowed[t["id"]]) <= 1 + 1e-9
    assert first["p"] > 0 and tiny.tokenizer.token_bytes(first["id"]) in (b"yes", b"no", b"y", b"n", b"ye")


@pytest.mark.real_model
def test_a_grammar_that_allows_everything_changes_no_greedy_chat_reply(smollm2_path):
    from pyengine.generation import ChatSession
    e = load(smollm2_path)
    replies = []
    for grammar in (None, Grammar.from_gbnf(ANY)):
        chat = ChatSession(e, grammar=grammar)
        turn = chat.send("Name three colors.", Request(GREEDY, 20))
        replies.append(("".join(turn), turn.ids))
    assert replies[0] == replies[1] and replies[0][0]


def test_vocab_trie_holds_every_token_with_bytes():
    tok = load_tokenizer(TINY["llama"])
    trie = vocab_trie(tok)
    assert vocab_trie(tok) is trie
    held = np.concatenate([lv.tokens for lv in trie.levels] + [trie.twins])
    want = [t for t, p in enumerate(trie.pieces) if p and t not in trie.eog_set]
    assert sorted(held.tolist()) == want
    for lv in trie.levels:
        assert (np.diff(lv.parent) >= 0).all() and (lv.token_at[lv.ends] == lv.tokens).all()


def test_a_model_split_over_workers_gives_the_same_reply_under_a_grammar(tiny):
    from split_threads import start, stop
    g = Grammar.from_gbnf(ARITH)
    ids = tiny.tokenizer.encode("1+1 (2*3)")
    whole = generate(tiny, ids, Request(GREEDY, 12, grammar=g))
    "".join(whole)
    model, _, threads = start(TINY["qwen2"], 2)
    assert threads                                                    # split: a helper thread computes too
    try:
        split = generate(Engine(None, model, tiny.tokenizer), ids, Request(GREEDY, 12, grammar=g, lookup=3))
        "".join(split)
    finally:
        stop(model, threads)
    assert split.ids == whole.ids and viable(parse_gbnf(ARITH), split.text)


class ByteVocab:
    """A tokenizer's face as the trie sees it: token bytes and end-of-generation ids."""

    def __init__(self, pieces: list[bytes], eog: tuple[int, ...] = ()):
        self.pieces, self.n_vocab, self.eog_ids = pieces, len(pieces), frozenset(eog)

    def token_bytes(self, tid: int) -> bytes:
        return self.pieces[tid]


@pytest.mark.parametrize("dense", [1, 4, 10**9])      # 1: children only where any is dead; 10**9: whole levels
def test_masks_equal_a_walk_of_each_token_long_and_twin_tokens_too(dense, monkeypatch):
    from pyengine.generation import grammar
    monkeypatch.setattr(grammar, "DENSE", dense)
    long = b"ab" * 50 + b"c"                                           # past the trie's 64-byte grid
    pieces = [b"", b"a", b"ab", b"abc", b"ab", b"b", long, long[:-1] + b"d", long, "é".encode(), "é".encode()[:1],
              b"\xa9", b"ca", b"cab" * 30, b"x"]
    vocab = ByteVocab(pieces, eog=(0,))
    trie = VocabTrie(vocab)
    for gbnf in ('root ::= ("ab" | "c")* "x"?', 'root ::= [a-c]{0,70}', 'root ::= "é"+ | "a" .*'):
        g = Grammar.from_gbnf(gbnf)
        for prefix in (b"", b"ab", "é".encode()[:1]):
            sid = g.walk(g.start, prefix)
            if sid == 0:
                continue
            mask = g.mask(sid, trie) < FAR
            want = [bool(p) and g.walk(sid, p) != 0 for p in pieces]
            want[0] = g.complete(sid)
            assert mask.tolist() == want, (gbnf, prefix)


def test_the_shortest_completion_of_each_state_in_bytes():
    g = Grammar.from_gbnf('root ::= "ab" x | "c" | "é" y\nx ::= "d"+\ny ::= [^\\x00-\\x7F] | "zz"')

    def dist(text: bytes) -> int:
        return int(g.dist[g.walk(g.start, text)])
    assert [dist(t) for t in (b"", b"a", b"ab", b"abd", b"c")] == [1, 2, 1, 0, 0]
    assert [dist(t) for t in ("é".encode()[:1], "é".encode(), "éz".encode())] == [3, 2, 1]   # y: "zz" or 2 bytes
    assert int(Grammar.from_gbnf('root ::= "a" r\nr ::= "b" r').dist[1]) == FAR - 1             # no end at all
    assert g.dist[0] == FAR                                                                      # the dead state


def test_near_the_limit_only_tokens_that_still_fit_are_allowed(tiny):
    g = Grammar.from_gbnf('root ::= "(" [a-z]* ")"')
    m = g.matcher(tiny.tokenizer)
    m.feed(b"(abc")
    free, tight = m.allowed(), m.allowed(left=1)
    pieces = vocab_trie(tiny.tokenizer).pieces
    assert {pieces[t] for t in np.flatnonzero(tight)} == {b")"}                 # the last token closes it
    assert free.sum() > tight.sum() and (free | tight).sum() == free.sum()
