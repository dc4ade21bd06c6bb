"""Tool calls as the model's chat template defines them (llama.cpp ``common/chat.cpp``'s formats).

The tool definitions are OpenAI's (``[{"type": "function", "function": {"name", "description",
"parameters": <JSON Schema>}}]``) and go to the template as its ``tools`` variable; the template
says, by what its text writes, how the model calls one (:data:`TOOL_FORMATS`):

    hermes  (Qwen 2.5/3, Hermes, SmolLM3...)  <tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>
    llama3  (Llama 3.1/3.2/3.3)               {"name": "f", "parameters": {...}}   (the whole reply)

:func:`parse_tool_calls` reads the calls out of a reply; :func:`tool_call_gbnf` is the grammar of one
call whose arguments follow the tool's own schema (``tool_choice="required"``). In the conversation a
call is kept as the templates read it (``{"role": "assistant", "content", "tool_calls": [{"id",
"type": "function", "function": {"name", "arguments": <object>}}]}``) and a result as ``{"role":
"tool", "tool_call_id", "name", "content"}``; :func:`openai_calls` gives OpenAI's form (arguments as
JSON text).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pyengine.errors import PyEngineError
from pyengine.generation.json_schema import SchemaConverter, literal

MAX_TOOLS = 128


@dataclass(frozen=True)
class ToolFormat:
    """How one family writes a call: ``marker`` matches text its templates hold (how the format is
    recognized), ``before``/``after`` wrap each call's JSON, ``args_key`` names its arguments."""
    name: str
    marker: re.Pattern
    before: str
    after: str
    args_key: str


TOOL_FORMATS = (
    ToolFormat("hermes", re.compile(r'<tool_call>(\\n|\n)?\{\\?"name'), "<tool_call>\n", "\n</tool_call>", "arguments"),
    ToolFormat("llama3", re.compile(r'"parameters": dictionary of argument name'), "", "", "parameters"),
)


def tool_format(template_source: str | None) -> ToolFormat | None:
    """The format a template's text writes calls in (None: it takes no tools that pyengine reads)."""
    if not template_source or "tools" not in template_source:
        return None
    return next((f for f in TOOL_FORMATS if f.marker.search(template_source)), None)


def check_tools(tools: Any, source: str = "tools") -> list[dict]:
    """The tool definitions, checked: a list of ``{"type": "function", "function": {"name": str,
    "parameters": object?}}``. Raises PyEngineError naming the first bad one."""
    if not isinstance(tools, list) or not tools or len(tools) > MAX_TOOLS:
        raise PyEngineError(f"{source}: expecting a list of 1 to {MAX_TOOLS} tool definitions")
    names = set()
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or t.get("type", "function") != "function":
            raise PyEngineError(f"{source}[{i}]: expecting {{\"type\": \"function\", \"function\": {{...}}}}")
        name = fn.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise PyEngineError(f"{source}[{i}].function.name: expecting 1-64 letters, digits, _ . or -")
        if name in names:
            raise PyEngineError(f"{source}[{i}].function.name: {name!r} twice")
        names.add(name)
        if not isinstance(fn.get("parameters", {}), dict):
            raise PyEngineError(f"{source}[{i}].function.parameters: expecting a JSON Schema object")
    return tools


def tool_call_gbnf(tools: list[dict], fmt: ToolFormat) -> str:
    """GBNF of one call of one of ``tools`` in ``fmt``: the name one of theirs, the arguments valid
    under that tool's ``parameters`` schema (:mod:`pyengine.generation.json_schema`), at most one
    space between tokens."""
    conv = SchemaConverter({}, compact=True)
    calls = []
    for i, t in enumerate(tools):
        fn = t["function"]
        schema = {"type": "object", "properties": {"name": {"const": fn["name"]},
                                                   fmt.args_key: fn.get("parameters") or {"type": "object"}},
                  "required": ["name", fmt.args_key]}
        conv.root_schema, conv.refs = schema, {}
        calls.append(conv.visit(schema, f"call-{i}", f"tools[{i}]"))
    conv.rules["call"] = " | ".join(calls)
    conv.rules["root"] = f"{literal(fmt.before)} call {literal(fmt.after)}" if fmt.before else "call"
    return conv.gbnf()


def _call(obj: Any, fmt: ToolFormat, n: int) -> dict | None:
    """One parsed call in the conversation's form (None if ``obj`` is not a call)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get(fmt.args_key, obj.get("arguments", obj.get("parameters", {})))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return {"id": f"call_{n}", "type": "function", "function": {"name": obj["name"], "arguments": args}}


def parse_tool_calls(text: str, fmt: ToolFormat, first_id: int = 0) -> tuple[str, list[dict]]:
    """(the reply's text outside its calls, the calls) of a reply in ``fmt``; a call that is not
    whole JSON stays in the text. Calls are numbered ``call_<first_id + i>``."""
    calls: list[dict] = []
    if fmt.before:
        pattern = re.compile(re.escape(fmt.before.strip()) + r"\s*(\{.*?\})\s*" + re.escape(fmt.after.strip()), re.S)
        kept, last = [], 0
        for m in pattern.finditer(text):
            try:
                call = _call(json.loads(m.group(1)), fmt, first_id + len(calls))
            except json.JSONDecodeError:
                call = None
            if call is not None:
                kept.append(text[last:m.start()])
                last = m.end()
                calls.append(call)
        return ("".join(kept) + text[last:]).strip(), calls
    body = text.strip().removeprefix("<|python_tag|>").strip()
    for part in ([body] if body.startswith("{") else []):
        try:
            obj = json.loads(part)
        except json.JSONDecodeError:
            break
        call = _call(obj, fmt, first_id)
        if call is not None:
            return "", [call]
    return text, []


def openai_calls(calls: list[dict]) -> list[dict]:
    """The calls as OpenAI's API lists them: ``{"id", "type": "function", "function": {"name",
    "arguments": <JSON text>}}``."""
    return [{"id": c["id"], "type": "function",
             "function": {"name": c["function"]["name"],
                          "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False)}} for c in calls]


def tool_result(call: dict, content: str) -> dict:
    """The conversation's message carrying ``content``, the result of ``call`` (the ``tool`` role)."""
    if not isinstance(content, str):
        raise PyEngineError("a tool's result is text")
    return {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": content}
