"""llama.cpp's example grammars (its grammars/ folder, from the pinned llama-cpp-python sdist:
build_scripts/fetch_vocabs.py) parsed, and SmolLM2's greedy replies under each checked by the
separate recognizer of gbnf_recognizer.py: every reply is a whole sentence of the grammar, whether it
ended by its end token or reached the token limit (near the limit, only tokens after which the grammar's
shortest completion still fits are allowed)."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import ROOT

from generation.gbnf_recognizer import accepts, viable
from pyengine.generation import ChatSession, load
from pyengine.generation.grammar import Grammar
from pyengine.generation.grammar_parse import parse_gbnf
from pyengine.generation.request import Request
from pyengine.generation.sampling import SamplerParams

sys.path.insert(0, str(ROOT / "build_scripts"))
from fetch_vocabs import GRAMMARS, GRAMMARS_DEST  # noqa: E402

GREEDY = SamplerParams(temperature=0, top_k=1)
PROMPTS = {
    "arithmetic.gbnf": "Write two equations, one a line.",
    "c.gbnf": "Write a C function that adds two numbers.",
    "chess.gbnf": "Write the first moves of a chess game.",
    "english.gbnf": "Say hello in one short sentence.",
    "japanese.gbnf": "Say hello in Japanese.",
    "json.gbnf": "Give a person's name and age as JSON.",
    "json_arr.gbnf": "List two colors as a JSON array.",
    "list.gbnf": "List three animals.",
}


def grammar_text(name: str) -> str:
    path = GRAMMARS_DEST / name
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing: run build_scripts/fetch_vocabs.py")
        pytest.skip(f"{name} not fetched (python build_scripts/fetch_vocabs.py)")
    return path.read_text(encoding="utf-8")


def test_every_grammar_of_the_folder_is_tested():
    assert set(PROMPTS) == set(GRAMMARS)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_the_recognizer_and_the_matcher_agree_on_samples(name):
    text = grammar_text(name)
    rules, g = parse_gbnf(text, name), Grammar.from_gbnf(text, name)
    samples = {"arithmetic.gbnf": ["a=1\n", "(x+1)*2= 3\n", "a=\n"], "chess.gbnf": ["1. e4 e5\n2. Nf3 Nc6\n"],
               "c.gbnf": ["int f(int a){return a+1;}"], "json.gbnf": ['{"a": [1, "x"]}', '{"a": 01}'],
               "json_arr.gbnf": ['[\n1,\n2]', '[1]'], "list.gbnf": ["- a\n- b c\n", "- \n"],
               "english.gbnf": ["Hello, world!", "héllo"], "japanese.gbnf": ["こんにちは。", "hello"]}[name]
    for s in samples:
        sid = g.walk(g.start, s.encode())
        assert (sid != 0 and g.complete(sid)) == accepts(rules, s), s
        assert (sid != 0) == viable(rules, s), s


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    return load(smollm2_path)


@pytest.mark.real_model
@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_replies_are_accepted_by_the_recognizer(smollm2, name):
    text = grammar_text(name)
    chat = ChatSession(smollm2, grammar=Grammar.from_gbnf(text, name))
    turn = chat.send(PROMPTS[name], Request(GREEDY, 96))
    reply = "".join(turn)
    rules = parse_gbnf(text, name)
    assert reply and turn.stats.stop_reason in ("eog", "max_tokens")
    assert accepts(rules, reply), reply        # cut or not, a whole sentence: the budget closes it
