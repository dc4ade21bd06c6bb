"""The Structured output setting on the page: the editor checked by Python as you type (line and column),
a reply of SmolLM2-135M-Instruct held to a JSON schema that parses and validates (jsonschema, the oracle),
and the setting saved with the chat and in its export."""

from __future__ import annotations

import json

import pytest

from browser.pages import ask, load_model, new_chat, set_settings

pytestmark = pytest.mark.browser
jsonschema = pytest.importorskip("jsonschema")

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"]}


def check_says(page, text: str) -> None:
    page.wait_for_function("want => document.querySelector('[data-testid=structure-check]').textContent === want",
                           arg=text, timeout=30_000)


def test_the_editor_is_checked_as_you_type(app):
    app.get_by_test_id("structure").select_option("schema")
    editor = app.get_by_test_id("structure-text")
    editor.fill('{"type": "object",\n "properties": {"a": {"type": "strin"}}}')
    check_says(app, "schema at #/properties/a/type: unknown type 'strin'")
    assert editor.get_attribute("aria-invalid") == "true"
    editor.fill('{"type": "object",\n "properties": }')
    check_says(app, "schema: line 2, column 16: Expecting value")
    app.get_by_test_id("structure").select_option("grammar")
    editor.fill('root ::= "yes" | "no"\nextra ::= [a-')
    check_says(app, "grammar: line 2, column 14: unexpected end of input")
    editor.fill('root ::= "yes" | "no"')
    check_says(app, "The grammar (gbnf) is right.")
    assert editor.get_attribute("aria-invalid") == "false"
    app.get_by_test_id("structure").select_option("none")
    assert app.get_by_test_id("structure-text").is_hidden()


def test_a_schema_reply_validates_and_the_setting_is_saved_with_the_chat(app, smollm2_path):
    load_model(app, [smollm2_path], workers="1")
    new_chat(app)
    set_settings(app, temperature=0, max_tokens=64, seed=None)
    app.get_by_test_id("structure").select_option("schema")
    app.get_by_test_id("structure-text").fill(json.dumps(SCHEMA, indent=1))
    check_says(app, "The json schema is right.")
    reply = ask(app, "Describe a person as JSON.")
    jsonschema.validate(json.loads(reply), SCHEMA)
    new_chat(app)
    app.get_by_test_id("structure").select_option("none")        # the new chat says none...
    app.locator(".chat-open").first.click()                     # ...the saved one still says schema
    app.wait_for_function("() => document.querySelector('[data-testid=structure]').value === 'schema'")
    assert json.loads(app.get_by_test_id("structure-text").input_value()) == SCHEMA
    exported = app.evaluate("""async () => {
      const { chatToJSON } = await import('./app/chat_file.js');
      const { getChat, listChats } = await import('./app/store.js');
      return chatToJSON((await listChats())[0]);
    }""")
    assert json.loads(json.loads(exported)["structure"]["text"]) == SCHEMA
