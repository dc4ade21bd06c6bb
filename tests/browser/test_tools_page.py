"""Tools on the page: SmolLM2-135M-Instruct with Qwen 2.5's chat template (llama.cpp's copy) and two tool
definitions. A reply to a message is a call (Require a call), drawn as a card whose arguments follow the
tool's schema; the result typed in the card goes back as the tool's message and the model answers; a call
declined says so (after a result the model goes on as it likes: in words or with another call); the calls,
results and tools are saved with the chat and in its export."""

from __future__ import annotations

import json

import pytest
from generation.test_tools import TOOLS, WEATHER, template
from gguf_write import gguf_bytes

from browser.pages import load_model, messages, new_chat, send, set_settings, wait_status
from pyengine.gguf import open_gguf

pytestmark = pytest.mark.browser
jsonschema = pytest.importorskip("jsonschema")

EXPORTED = """async () => {
  const { chatToJSON } = await import('./app/chat_file.js');
  const { listChats } = await import('./app/store.js');
  return chatToJSON((await listChats())[0]);
}"""


def with_template(src, dst, source: str) -> None:
    """``src`` written to ``dst`` with the chat template ``source`` in place of its own."""
    with open_gguf(src) as g:
        kvs = [(k, t, g.metadata[k]) for k, t in g.value_types.items() if k != "tokenizer.chat_template"]
        tensors = [(n, i.shape, i.type.id, g.tensor_bytes(n).tobytes()) for n, i in g.tensors.items()]
    dst.write_bytes(gguf_bytes(kvs + [("tokenizer.chat_template", "STRING", source)], tensors))


@pytest.fixture(scope="module")
def qwen_smollm(app, smollm2_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("tools") / "smollm2-qwen-template.gguf"
    with_template(smollm2_path, path, template("Qwen-Qwen2.5-7B-Instruct.jinja"))
    load_model(app, [path], workers="1")
    return app


def wait_answer(page, replies: int) -> None:
    """Wait until the chat holds ``replies`` replies, the last one ended (a result's reply starts once the
    settings are checked: the status may still say ready for a moment after the click)."""
    page.wait_for_function("""n => document.querySelectorAll('[data-testid=message][data-role=assistant]').length >= n
      && !document.querySelector('.message.streaming')""", arg=replies, timeout=120_000)
    wait_status(page, ("ready",), 120_000)


def last_card(page):
    return page.locator("[data-testid=message][data-role=assistant]").last.locator("[data-testid=tool-call]")


def test_a_call_as_a_card_answered_and_declined(qwen_smollm):
    page = qwen_smollm
    new_chat(page)
    set_settings(page, temperature=0, max_tokens=64, seed=None)
    page.get_by_test_id("tools").fill(json.dumps(TOOLS, indent=1))
    page.wait_for_function("() => document.querySelector('[data-testid=tools-check]').textContent"
                           " === 'The tool definitions are right.'")
    page.get_by_test_id("tool-required").check()
    send(page, "What will the weather be in Rome?")
    wait_status(page, ("ready",), 120_000)
    card = last_card(page)
    assert card.count() == 1
    name = card.locator(".tool-name").text_content().removeprefix("Call: ")
    args = json.loads(card.locator(".tool-args").text_content())
    if name == "get_weather":
        jsonschema.validate(args, WEATHER)
    else:
        assert name == "get_time" and set(args) == {"city"}
    card.get_by_test_id("tool-result").fill("sunny, 22 C")
    card.get_by_role("button", name="Send result").click()
    wait_answer(page, 2)
    roles = [r for r, _ in messages(page)]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert messages(page)[2][1] == "sunny, 22 C"
    assert messages(page)[3][1] or last_card(page).count()      # the model went on: in words, or another call
    send(page, "And in Oslo?")
    wait_status(page, ("ready",), 120_000)
    last_card(page).get_by_role("button", name="Decline").click()
    wait_answer(page, 4)
    assert messages(page)[-2] == ("tool", "The user declined to run this tool.")
    saved = json.loads(page.evaluate(EXPORTED))
    assert [m["role"] for m in saved["messages"]] == ["user", "assistant", "tool", "assistant"] * 2
    call = saved["messages"][1]["tool_calls"][0]
    assert call["function"] == {"name": name, "arguments": args} and saved["messages"][2]["tool_call_id"] == call["id"]
    assert json.loads(saved["tools"]["text"]) == TOOLS and saved["tools"]["required"] is True
