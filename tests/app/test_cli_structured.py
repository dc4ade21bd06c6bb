"""The CLI's structured output: --grammar, --json-schema (a file or inline), --json-mode, and --tools with
--json's tool_calls listed as OpenAI's API lists them."""

from __future__ import annotations

import json

import pytest
from conftest import SMOLLM2, TINY
from generation.test_tools import TOOLS, WEATHER, template

from app.test_cli import run

jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture
def cli(monkeypatch, capsys):
    return lambda argv, stdin="": run(argv, stdin, monkeypatch, capsys)


def smollm2() -> str:
    if not SMOLLM2.is_file():
        pytest.skip(f"{SMOLLM2} not fetched")
    return str(SMOLLM2)


@pytest.mark.real_model
def test_json_schema_inline_and_from_a_file(cli, tmp_path):
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                               "count": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["color", "count"]}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    for option in (json.dumps(schema), str(path)):
        rc, out, _ = cli(["chat", smollm2(), "--json-schema", option, "--json", "-n", "48"], "Pick a color.\n")
        reply = json.loads(out)
        assert rc == 0 and reply["stats"]["stop_reason"] == "eog"
        jsonschema.validate(json.loads(reply["text"]), schema)


@pytest.mark.real_model
def test_json_mode_and_a_grammar_file(cli, tmp_path):
    rc, out, _ = cli(["chat", smollm2(), "--json-mode", "--json", "-n", "96"], 'Return {"ok": true} as JSON.\n')
    reply = json.loads(out)
    assert rc == 0 and reply["stats"]["stop_reason"] == "eog" and json.loads(reply["text"]) == {"ok": True}
    # a reply that reaches the token limit is closed by it: a whole object (the model would go on)
    for n in (12, 24):
        rc, out, _ = cli(["chat", smollm2(), "--json-mode", "--json", "-n", str(n)], "Describe a cat in JSON.\n")
        reply = json.loads(out)
        assert reply["stats"]["stop_reason"] == "max_tokens" and reply["stats"]["generated_tokens"] == n
        assert isinstance(json.loads(reply["text"]), dict)
    gbnf = tmp_path / "yesno.gbnf"
    gbnf.write_text('root ::= ("yes" | "no") "."\n')
    rc, out, _ = cli(["generate", smollm2(), "-p", "Is the sky blue? Answer:", "--grammar", str(gbnf), "--json"])
    assert rc == 0 and json.loads(out)["text"] in ("yes.", "no.")


@pytest.mark.parametrize("argv, error", [
    (["--grammar", "{bad}"], "error: {bad}: line 1, column 6: expecting ::="),
    (["--json-schema", '{"type": "object",\n "properties": 3'], "error: --json-schema: line 2, column 17: Expecting"),
    (["--json-schema", '{"type": "nope"}'], "error: schema at #/type: unknown type 'nope'"),
    (["--grammar", "x", "--json-mode"], None),
])
def test_bad_grammars_fail_before_the_model_loads(cli, tmp_path, argv, error):
    bad = tmp_path / "bad.gbnf"
    bad.write_text("root := x")
    argv = [str(bad) if a == "{bad}" else a for a in argv]
    error = error and error.replace("{bad}", str(bad))
    if error is None:                                 # argparse: the options exclude each other
        with pytest.raises(SystemExit):
            cli(["generate", "missing.gguf", "-p", "x", *argv])
        return
    rc, _, err = cli(["generate", "missing.gguf", "-p", "x", *argv])
    assert rc == 1 and err.startswith(error), err


@pytest.mark.real_model
def test_tools_and_tool_calls_as_openai_lists_them(cli, tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    qwen = tmp_path / "qwen.jinja"
    qwen.write_text(template("Qwen-Qwen2.5-7B-Instruct.jinja"))
    argv = ["chat", smollm2(), "--tools", str(tools), "--tool-choice", "required",
            "--chat-template-file", str(qwen), "--json", "-n", "64"]
    rc, out, err = cli(argv, "Weather in Oslo?\nsnow, -3 C\n")
    assert rc == 0, err
    first, second = map(json.loads, out.splitlines())
    (call,) = first["tool_calls"]
    assert call["id"] == "call_0" and call["type"] == "function" and set(call) == {"id", "type", "function"}
    assert isinstance(call["function"]["arguments"], str) and first["content"] == ""
    if call["function"]["name"] == "get_weather":
        jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER)
    assert "<tool_response>\nsnow, -3 C\n</tool_response>" in second["prompt"]
    assert second["tool_calls"][0]["id"] == "call_1"
    rc, _, err = cli(["chat", str(TINY["qwen2"]), "--tools", str(tools), "-n", "4"], "hi\n")
    assert rc == 1 and "takes no tools" in err
