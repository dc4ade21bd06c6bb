"""Tool calls (pyengine.generation.tools): the format a template writes calls in, calls read out of
replies, the grammar of a call whose arguments follow the tool's schema, and a round trip through
ChatSession with Qwen 2.5's and Llama 3.2's own templates (llama.cpp's copies, from the pinned sdist)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import ROOT, TINY

from pyengine.errors import PyEngineError, TemplateError
from pyengine.generation import ChatSession, load
from pyengine.generation.engine import Engine
from pyengine.generation.grammar import Grammar
from pyengine.generation.request import Request
from pyengine.generation.sampling import SamplerParams
from pyengine.generation.tools import (
    TOOL_FORMATS,
    check_tools,
    openai_calls,
    parse_tool_calls,
    tool_call_gbnf,
    tool_format,
)
from pyengine.text.chat_template import ChatTemplate

jsonschema = pytest.importorskip("jsonschema")

TEMPLATES = ROOT / ".cache" / "vocab" / "templates"
GREEDY = SamplerParams(temperature=0, top_k=1)
HERMES, LLAMA3 = TOOL_FORMATS
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather forecast",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "The time in a city",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}]


def template(name: str) -> str:
    path = TEMPLATES / name
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing: run build_scripts/fetch_vocabs.py")
        pytest.skip("templates not fetched (python build_scripts/fetch_vocabs.py)")
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name, fmt", [
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"), ("Qwen-Qwen3-0.6B.jinja", "hermes"),
    ("ibm-granite-granite-4.0.jinja", "hermes"), ("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3"),
    ("meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3"), ("meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3"),
    ("Qwen3-Coder.jinja", None), ("GLM-4.6.jinja", None), ("google-gemma-2-2b-it.jinja", None),
])
def test_the_format_is_the_templates(name, fmt):
    found = tool_format(template(name))
    assert (found.name if found else None) == fmt


def test_calls_are_read_out_of_replies():
    text = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}\n'
            '</tool_call>\n'
            '<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n</tool_call>')
    content, calls = parse_tool_calls(text, HERMES, first_id=3)
    assert content == "Let me look."
    assert calls == [{"id": "call_3", "type": "function",
                      "function": {"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}},
                     {"id": "call_4", "type": "function",
                      "function": {"name": "get_time", "arguments": {"city": "Oslo"}}}]
    assert openai_calls(calls)[0] == {"id": "call_3", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Rome", "days": 2}'}}
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": \n</tool_call>'
    assert parse_tool_calls(broken, HERMES) == (broken, [])
    content, calls = parse_tool_calls('<|python_tag|>{"name": "get_time", "parameters": {"city": "Oslo"}}', LLAMA3)
    assert content == "" and calls[0]["function"] == {"name": "get_time", "arguments": {"city": "Oslo"}}
    assert parse_tool_calls("It is sunny.", LLAMA3) == ("It is sunny.", [])


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_the_call_grammar_holds_arguments_to_the_schema(fmt):
    g = Grammar.from_gbnf(tool_call_gbnf(TOOLS, fmt))

    def ok(call: str) -> bool:
        sid = g.walk(g.start, (fmt.before + call + fmt.after).encode())
        return sid != 0 and g.complete(sid)
    key = fmt.args_key
    assert ok(f'{{"name": "get_weather", "{key}": {{"city": "Paris", "days": 3}}}}')
    assert ok(f'{{"name": "get_time", "{key}": {{"city": "Paris"}}}}')
    assert not ok(f'{{"name": "get_weather", "{key}": {{"city": "Paris", "days": 8}}}}')
    assert not ok(f'{{"name": "get_weather", "{key}": {{"city": "Lyon", "days": 3}}}}')
    assert not ok(f'{{"name": "get_news", "{key}": {{}}}}')


@pytest.mark.parametrize("tools, where", [
    ([], "tools: expecting a list of 1 to 128"), ([{"type": "function"}], "tools[0]: expecting"),
    ([{"function": {"name": "a b"}}], "tools[0].function.name"),
    ([{"function": {"name": "a"}}, {"function": {"name": "a"}}], "tools[1].function.name: 'a' twice"),
    ([{"function": {"name": "a", "parameters": []}}], "tools[0].function.parameters"),
])
def test_bad_tools_are_clear_errors(tools, where):
    with pytest.raises(PyEngineError, match=None) as e:
        check_tools(tools)
    assert where in str(e.value)


def with_template(path, name: str, bos: str, eos: str) -> Engine:
    e = load(path)
    return Engine(e.gguf, e.model, e.tokenizer, ChatTemplate(template(name), None, bos, eos))


@pytest.mark.parametrize("model, name, bos, eos, result_shown", [
    ("qwen2", "Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>", "<tool_response>\n{result}\n</tool_response>"),
    ("llama", "meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>",
     "<|start_header_id|>ipython<|end_header_id|>\n\n\"{result}\"<|eot_id|>"),
])
def test_a_tool_call_round_trip(model, name, bos, eos, result_shown):
    engine = with_template(TINY[model], name, bos, eos)
    chat = ChatSession(engine, tools=TOOLS, tool_choice="required", n_ctx=2048)
    fmt = chat.tool_format
    turn = chat.send("What will the weather be in Rome?", Request(GREEDY, 128))
    text = "".join(turn)
    assert turn.stats.stop_reason == "eog", text
    assert '"name": "get_weather"' in chat.prompt and "The weather forecast" in chat.prompt   # the tools shown
    reply = chat.messages[-1]
    assert reply["role"] == "assistant" and len(reply["tool_calls"]) == 1, text
    call = reply["tool_calls"][0]
    tool = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call["function"]["name"]]
    jsonschema.validate(call["function"]["arguments"], tool)
    assert call["id"] == "call_0" and text.startswith(fmt.before)
    with pytest.raises(PyEngineError, match="no call 'call_9'"):
        chat.add_tool_result("call_9", "?")
    result = "sunny, 22 C" if fmt.name == "hermes" else "sunny"
    chat.add_tool_result("call_0", result)
    assert chat.messages[-1] == {"role": "tool", "tool_call_id": "call_0", "name": call["function"]["name"],
                                 "content": result}
    chat.tool_choice = "auto"
    turn = chat.respond(Request(GREEDY, 4))
    "".join(turn)
    args = json.dumps(call["function"]["arguments"], ensure_ascii=False)
    shown = f'{{"name": "{call["function"]["name"]}", "{fmt.args_key}": {args}}}'
    assert shown in chat.prompt
    assert result_shown.format(result=result) in chat.prompt, chat.prompt[-300:]
    with pytest.raises(PyEngineError, match="no call 'call_0'"):
        chat.add_tool_result("call_0", "again")


def test_a_template_without_tools_refuses_them():
    with pytest.raises(TemplateError, match="takes no tools"):
        ChatSession(load(TINY["qwen2"]), tools=TOOLS)
