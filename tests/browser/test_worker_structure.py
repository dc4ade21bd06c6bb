"""The worker's Structured output in CPython: the editor's text checked with its line and column
(check-structure), a reply held to the setting (chat's structure), the grammar kept while it stays."""

from __future__ import annotations

import json

import pytest

from browser.test_worker_glue import load_tiny, posted, run  # noqa: F401 (posted: a fixture)
from pyengine.browser import worker
from pyengine.browser.settings import structure_gbnf, structure_options

jsonschema = pytest.importorskip("jsonschema")


def checked(posted, kind, text):  # noqa: F811
    run({"type": "check-structure", "kind": kind, "text": text})
    return posted[-1]


def test_the_editor_is_checked_with_line_and_column(posted):  # noqa: F811
    assert [o["value"] for o in structure_options()] == ["none", "json", "schema", "grammar"]
    assert checked(posted, "schema", '{"type": "object"}') == {"type": "structure-checked", "kind": "schema",
                                                                 "ok": True, "message": ""}
    assert checked(posted, "schema", '{"type":\n  "object",}')["message"] == \
        "schema: line 2, column 12: Expecting property name enclosed in double quotes"
    assert checked(posted, "schema", '{"type": "objet"}')["message"] == "schema at #/type: unknown type 'objet'"
    assert checked(posted, "grammar", 'root ::= "a"\nb ::= [a-')["message"] == \
        "grammar: line 2, column 10: unexpected end of input"
    assert checked(posted, "grammar", 'root ::= "yes" | "no"')["ok"] is True
    assert checked(posted, "shape", "")["message"].startswith("Structured output must be one of none, json")
    assert structure_gbnf("none", "anything") is None


def test_a_reply_holds_to_the_setting_and_the_grammar_is_kept(posted):  # noqa: F811
    load_tiny(posted)
    shape = {"kind": "schema", "text": json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}},
                                                   "required": ["ok"]})}
    replies = []
    for _ in range(2):
        start = len(posted)
        run({"type": "chat", "text": "hi", "system": "", "settings": {"temperature": 0, "max_tokens": 200},
             "structure": shape})
        new = posted[start:]
        assert new[-1]["type"] == "done", new[-1]
        replies.append("".join(m["text"] for m in new if m["type"] == "piece"))
        grammar = worker._session.chat.turn.grammar.grammar          # the reply's matcher's
        assert grammar is worker._session.structure(shape["kind"], shape["text"])
        assert new[-1]["stats"]["stop_reason"] == "eog", replies[-1]
    assert set(json.loads(replies[0])) == {"ok"} and json.loads(replies[1]) == json.loads(replies[0])
    start = len(posted)
    run({"type": "chat", "text": "hi", "system": "", "settings": {"temperature": 0, "max_tokens": 4},
         "structure": {"kind": "grammar", "text": "root ::= ("}})
    assert posted[-1]["type"] == "error" and "grammar: line 1, column 11" in posted[-1]["message"]
    run({"type": "chat", "text": "hi", "system": "", "settings": {"temperature": 0, "max_tokens": 4}})
    assert posted[-1]["type"] == "done" and worker._session.chat.turn.grammar is None


@pytest.mark.parametrize("kind", ["json", "schema", "grammar"])
def test_a_huge_editor_is_refused(posted, kind):  # noqa: F811
    assert "more than 200,000" in checked(posted, kind, "x" * 200_001)["message"]


def test_tools_are_checked_and_a_reply_lists_its_calls(posted, tmp_path):  # noqa: F811
    from conftest import TINY
    from generation.test_tools import TOOLS, WEATHER, template

    from browser.test_thinking_page import with_template
    from browser.test_worker_glue import browser_source
    run({"type": "check-tools", "text": '[{"function": {"name": "a"}},\n {"function": {"name": 3}}]'})
    assert posted[-1] == {"type": "tools-checked", "ok": False,
                          "message": "tools[1].function.name: expecting 1-64 letters, digits, _ . or -"}
    run({"type": "check-tools", "text": '[\n  {"function": }]'})
    assert posted[-1]["message"] == "tools: line 2, column 16: Expecting value"
    run({"type": "check-tools", "text": json.dumps(TOOLS)})
    assert posted[-1]["ok"] is True
    path = tmp_path / "qwen-tools.gguf"
    with_template(TINY["qwen2"], path, template("Qwen-Qwen2.5-7B-Instruct.jinja"))
    run({"type": "load", "files": [browser_source(path)]})
    assert posted[-1]["type"] == "model"
    worker._session.chat.cache = worker._session.chat.engine.model.new_cache(2048)   # the tools' prompt > 256
    tools = {"text": json.dumps(TOOLS), "required": True}
    settings = {"temperature": 0, "max_tokens": 128}
    run({"type": "chat", "messages": [{"role": "user", "content": "Weather in Rome?"}], "system": "",
         "settings": settings, "tools": tools})
    done = posted[-1]
    assert done["type"] == "done" and done["content"] == "", done
    (call,) = done["tool_calls"]
    assert call["id"] == "call_0" and call["function"]["name"] in ("get_weather", "get_time")
    if call["function"]["name"] == "get_weather":
        jsonschema.validate(call["function"]["arguments"], WEATHER)
    conversation = [{"role": "user", "content": "Weather in Rome?"},
                    {"role": "assistant", "content": "", "tool_calls": done["tool_calls"]},
                    {"role": "tool", "tool_call_id": "call_0", "name": call["function"]["name"], "content": "sunny"}]
    run({"type": "chat", "messages": conversation, "system": "", "settings": {**settings, "max_tokens": 3},
         "tools": tools})
    assert posted[-1]["type"] == "done" and "tool_calls" not in posted[-1]    # after a result: not required
    assert "<tool_response>\nsunny\n</tool_response>" in worker._session.chat.prompt
