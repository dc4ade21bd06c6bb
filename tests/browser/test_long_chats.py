"""Long chats on the page with the tiny llama fixture (a context of 256 tokens): a conversation too long for
the context keeps the system prompt and the newest turns, says so under the reply, and the reply equals the
CPython engine's under the same policy; a reply cut by its token limit goes on with Continue."""

from __future__ import annotations

import json

import pytest
from conftest import TINY

from browser.pages import ask, load_model, messages, new_chat, set_settings
from pyengine.generation import ChatSession, load
from pyengine.generation.request import Request
from pyengine.generation.sampling import SamplerParams

pytestmark = pytest.mark.browser

GREEDY = SamplerParams(temperature=0)
SYSTEM = "SYSTEM RULES"
LAST = "the last question"


def long_talk(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "words " * 12}
            for i in range(n)]


@pytest.fixture(scope="module")
def tiny(app):
    load_model(app, [TINY["llama"]], drop=True)
    set_settings(app, temperature=0, max_tokens=8, seed=None)
    return app


@pytest.fixture(scope="module")
def engine():
    return load([str(TINY["llama"])], weights="f32")


def import_chat(page, chat: dict) -> None:
    page.get_by_test_id("import-file").set_input_files(
        files=[{"name": "long.json", "mimeType": "application/json", "buffer": json.dumps(chat).encode()}])
    page.wait_for_function("() => document.querySelector('[data-testid=chats-note]').textContent.startsWith('Imp')")


def test_a_long_chat_keeps_the_system_prompt_and_the_newest_turns(tiny, engine):
    import_chat(tiny, {"messages": [{"role": "system", "content": SYSTEM}, *long_talk(12)]})
    assert tiny.get_by_test_id("system-prompt").input_value() == SYSTEM
    assert tiny.get_by_test_id("temperature").input_value() == "0.8"   # a chat without settings: the defaults
    set_settings(tiny, temperature=0, max_tokens=8, seed=None)
    reply = ask(tiny, LAST)
    want = ChatSession(engine, system=SYSTEM, n_ctx=256)
    want.messages = long_talk(12)
    turn = want.send(LAST, Request(GREEDY, 8))
    assert reply == "".join(turn) and turn.stats.dropped_messages > 0
    stats = json.loads(tiny.get_by_test_id("stats").get_attribute("data-stats"))
    assert stats["dropped_messages"] == turn.stats.dropped_messages
    note = tiny.locator(".message.assistant:last-child .context-note").text_content()
    assert note == (f"The conversation no longer fit the model's context: the {turn.stats.dropped_messages} oldest "
                    "messages were left out of this reply's prompt (the system prompt and the newest turns were "
                    "kept).")
    assert len(messages(tiny)) == 14                      # the page keeps every message


def test_continue_goes_on_with_a_reply_cut_by_its_limit(tiny, engine):
    new_chat(tiny)
    tiny.get_by_test_id("system-prompt").fill("")
    set_settings(tiny, max_tokens=4)
    first = ask(tiny, "hello")
    last = tiny.locator(".message.assistant:last-child")
    assert last.get_attribute("data-stop") == "max_tokens"
    last.get_by_role("button", name="Continue this reply").click()
    tiny.wait_for_function("() => document.querySelector('.message.assistant:last-child').dataset.text.length > "
                           f"{len(first)} && document.querySelector('[data-testid=status]').textContent === 'ready'")
    whole = messages(tiny)[-1][1]
    want = ChatSession(engine, n_ctx=256)
    want.messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": first}]
    assert whole == first + "".join(want.resume(Request(GREEDY, 4)))
    assert len(messages(tiny)) == 2
