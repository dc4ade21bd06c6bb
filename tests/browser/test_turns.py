"""Turn actions with SmolLM2-135M-Instruct (Memory f32, 1 worker, temperature 0): regenerate gives the same
reply, an edited message gets the reply the CPython engine gives the edited conversation and reuses the KV
cache up to the edit, a turn can be deleted, a message copied."""

from __future__ import annotations

import json

import pytest

from browser.pages import CHECK_MS, REPLY_MS, ask, error_text, load_model, messages, new_chat, set_settings, wait_reply
from browser.reference import cli_chat, cpython_reply

pytestmark = pytest.mark.browser

FIRST = "What is the capital of France?"
SECOND = "And of Italy?"
EDITED = "And of Spain?"


@pytest.fixture(scope="module")
def smollm(app, smollm2_path):
    load_model(app, [smollm2_path], workers="1")
    set_settings(app, temperature=0, max_tokens=16, seed=None)
    return app


def stats(page) -> dict:
    return json.loads(page.get_by_test_id("stats").get_attribute("data-stats"))


def action(page, index: int, name: str):
    return page.locator(f"[data-testid=message][data-index='{index}']").get_by_role("button", name=name)


def two_turns(page) -> list[tuple[str, str]]:
    new_chat(page)
    ask(page, FIRST)
    ask(page, SECOND)
    return messages(page)


def test_regenerate_at_temperature_0_gives_the_same_reply(smollm, smollm2_path):
    before = two_turns(smollm)
    old = smollm.get_by_test_id("stats").get_attribute("data-stats")
    action(smollm, 3, "Regenerate: write this reply again").click()
    smollm.wait_for_function("""old => document.querySelector('[data-testid=stats]').dataset.stats !== old
      && document.querySelector('[data-testid=status]').textContent === 'ready'""", arg=old, timeout=REPLY_MS)
    after = messages(smollm)[-1][1]
    assert messages(smollm) == before and after == before[3][1]
    assert after == cpython_reply(smollm2_path, [FIRST, before[1][1], SECOND], max_tokens=16)
    s = stats(smollm)
    assert s["cached_tokens"] == s["prompt_tokens"] - 1  # only the last prompt token ran again
    # only the last reply can be regenerated
    assert action(smollm, 1, "Regenerate: write this reply again").is_hidden()


def test_edit_and_resend_equals_the_cli_reply_to_the_edited_conversation(smollm, smollm2_path):
    before = two_turns(smollm)
    prompt_before = stats(smollm)["prompt_tokens"]
    action(smollm, 2, "Edit this message and send it again").click()
    box = smollm.get_by_role("textbox", name="The message, edited")
    assert box.input_value() == SECOND
    box.fill(EDITED)
    box.press("Enter")
    # the edit goes once the worker has checked the settings: until then the page is still 'ready'
    smollm.wait_for_function("""t => document.querySelector("[data-testid=message][data-index='2']")
      ?.dataset.text === t""", arg=EDITED, timeout=CHECK_MS)
    reply = wait_reply(smollm)
    assert reply == cli_chat(smollm2_path, [FIRST, before[1][1], EDITED], 16)["text"]
    assert messages(smollm) == [*before[:2], ("user", EDITED), ("assistant", reply)]
    s = stats(smollm)
    # the cache held everything up to the edited words: the first turn and the second's opening
    assert s["cached_tokens"] >= prompt_before - 8 and s["prefill_tokens"] <= 8, s
    assert error_text(smollm) is None


def test_an_edit_can_be_cancelled(smollm):
    before = messages(smollm)
    action(smollm, 0, "Edit this message and send it again").click()
    smollm.get_by_role("textbox", name="The message, edited").press("Escape")
    assert messages(smollm) == before
    assert smollm.get_by_role("textbox", name="The message, edited").count() == 0


def test_delete_a_turn_then_the_next_reply_answers_what_is_left(smollm, smollm2_path):
    before = two_turns(smollm)
    action(smollm, 0, "Delete this message and its reply").click()
    assert messages(smollm) == before[2:]
    reply = ask(smollm, EDITED)
    assert reply == cpython_reply(smollm2_path, [SECOND, before[3][1], EDITED], max_tokens=16)


def test_copy_a_message(smollm, server):
    smollm.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.rstrip("/"))
    text = messages(smollm)[1][1]
    action(smollm, 1, "Copy this reply").click()
    smollm.wait_for_function("() => [...document.querySelectorAll('.action')].some((b) => b.textContent === 'Copied')")
    assert smollm.evaluate("navigator.clipboard.readText()") == text
