"""The app end to end with SmolLM2-135M-Instruct: pick the file, chat at temperature 0, stop, new chat.

The page's greedy reply must equal the CPython engine's for the same conversation, which also checks
that a stopped reply leaves the model (its KV cache) ready for the next message.
"""

from __future__ import annotations

import pytest

from browser.conftest import fresh_page
from browser.pages import (
    WATCH_REPLY,
    ask,
    error_text,
    load_model,
    messages,
    new_chat,
    send,
    send_error,
    set_settings,
    wait_reply,
    wait_send_error_gone,
    wait_status,
)
from browser.reference import cpython_reply
from pyengine.browser.settings import setting_rules
from pyengine.generation.sampling import SamplerParams
from pyengine.gguf import open_gguf

pytestmark = pytest.mark.browser

QUESTION = "What is the capital of France?"
LONG_QUESTION = "Write a long story about a dragon who learns to cook."
SYSTEM = "You are Captain Hook, a pirate."
WHO = "Who are you?"
FOLLOW_UP = "Name three colors.\nJust the names, please."


@pytest.fixture(scope="module")
def smollm(app, smollm2_path):
    """The app with SmolLM2-135M-Instruct picked and loaded."""
    load_model(app, [smollm2_path])
    return app


def test_model_card(smollm, smollm2_path):
    with open_gguf(smollm2_path) as g:
        name = g.metadata["general.name"]
    card = smollm.get_by_test_id("model-info")
    assert card.locator("dd[data-field=architecture]").text_content() == "llama"
    assert card.locator(".model-name").text_content() == name
    assert "Q4_1" in card.locator("dd[data-field=quant-types]").text_content()
    assert card.locator("dd[data-field=context-length]").text_content() == "8,192 tokens"
    assert card.locator("dd[data-field=file-size]").text_content() == "93.8 MiB"
    assert card.locator("dd[data-field=products]").text_content() == "numpy (the Memory setting)"   # f32 here


def test_inspector_shows_parts_metadata_and_searchable_tensors(smollm, smollm2_path):
    smollm.get_by_role("tab", name="Inspect the file").click()
    inspector = smollm.get_by_test_id("inspector")
    assert inspector.locator(".sections-bar .part").count() == 5
    names = inspector.locator(".sections-table tbody td:first-child").all_text_contents()
    assert names == ["magic", "header", "metadata", "tensor_infos", "tensor_data"]
    ranges = inspector.locator(".sections-table tbody td:nth-child(2)").all_text_contents()
    assert ranges[0] == "0 – 4" and ranges[-1].endswith(f"– {smollm2_path.stat().st_size:,}")
    assert "GGUF version 3" in inspector.locator(".header-line").text_content()
    assert inspector.locator(".types-table tbody td:first-child").all_text_contents() == ["Q4_1", "Q8_0", "F32"]
    assert inspector.locator(".meta-table").get_by_text("tokenizer.ggml.pre", exact=True).count() == 1
    rows = inspector.locator(".tensor-table tbody tr")
    assert rows.count() == 272
    inspector.locator(".tensor-search").fill("blk.0.")
    assert inspector.locator(".tensor-table tbody tr").count() == 9
    assert inspector.locator(".tensor-count").text_content() == "(9 found)"
    inspector.locator(".tensor-search").fill("q8_0")  # by type too
    assert inspector.locator(".tensor-table tbody td:nth-child(3)").all_text_contents() == ["Q8_0"]
    inspector.locator(".tensor-search").fill("")
    smollm.get_by_role("tab", name="Chat").click()


def test_greedy_reply_streams_and_equals_cpython(smollm, smollm2_path):
    new_chat(smollm)
    set_settings(smollm, temperature=0, max_tokens=24, seed=None)
    smollm.evaluate(WATCH_REPLY)
    reply = ask(smollm, QUESTION)
    updates = smollm.evaluate("window.replyUpdates")
    assert len(updates) >= 4, updates                       # the reply grew piece by piece
    assert all(updates[i + 1].startswith(updates[i]) for i in range(len(updates) - 1))
    assert reply == cpython_reply(smollm2_path, [QUESTION], max_tokens=24)
    stats = smollm.get_by_test_id("stats").text_content()
    assert "tok/s" in stats and " generated" in stats
    assert messages(smollm) == [("user", QUESTION), ("assistant", reply)]
    assert error_text(smollm) is None


def test_system_prompt(smollm, smollm2_path):
    new_chat(smollm)
    set_settings(smollm, temperature=0, max_tokens=12)
    smollm.get_by_test_id("system-prompt").fill(SYSTEM)
    try:
        reply = ask(smollm, WHO)
    finally:
        smollm.get_by_test_id("system-prompt").fill("")
    assert reply == cpython_reply(smollm2_path, [WHO], max_tokens=12, system=SYSTEM)
    assert reply != cpython_reply(smollm2_path, [WHO], max_tokens=12)  # the system prompt mattered


def test_sampling_settings_and_seed(smollm, smollm2_path):
    """Every sampling input reaches the sampler: a seeded reply equals CPython's with the same settings."""
    settings = dict(temperature=0.9, top_k=20, top_p=0.9, min_p=0.02, repeat_penalty=1.1, seed=7)
    set_settings(smollm, max_tokens=16, **settings)
    replies = []
    for _ in range(2):
        new_chat(smollm)
        send(smollm, WHO)
        replies.append(wait_reply(smollm))
    set_settings(smollm, seed=None)
    assert replies[0] == replies[1]  # the same seed, the same reply
    assert replies[0] == cpython_reply(smollm2_path, [WHO], max_tokens=16, params=SamplerParams(**settings))
    assert replies[0] != cpython_reply(smollm2_path, [WHO], max_tokens=16)  # not the greedy one


# A field, what is typed in it, and why the message is not sent (SmolLM2: 49152 tokens, a context of 8192).
BAD_SETTINGS = [
    ("temperature", "", "Temperature must be a number from 0 to 5 (it is blank)"),
    ("top_k", "-5", "Top-k must be a whole number from 0 to 49152 (it is -5)"),
    ("top_k", "2.5", "Top-k must be a whole number from 0 to 49152 (it is 2.5)"),
    ("top_k", "e", "Top-k must be a whole number from 0 to 49152 (it is not a number)"),
    ("top_p", "0", "Top-p must be a number above 0 and at most 1 (it is 0)"),
    ("min_p", "", "Min-p must be a number from 0 to 1 (it is blank)"),
    ("repeat_penalty", "-1", "Repeat penalty must be a number above 0 and at most 10 (it is -1)"),
    ("max_tokens", "9000", "Max tokens must be a whole number from 1 to 8192 (it is 9000)"),
    ("seed", "1.5", "Seed must be a whole number from 0 to 4294967295, or blank for a random seed (it is 1.5)"),
]


def test_the_fields_have_the_labels_the_errors_name(smollm):
    for rule in setting_rules(49152, 8192):
        label = smollm.locator("label.field", has=smollm.get_by_test_id(rule["name"].replace("_", "-")))
        assert label.text_content().strip() == rule["label"]


@pytest.mark.parametrize("field, typed, message", BAD_SETTINGS)
def test_a_bad_setting_stops_the_message_and_names_the_field(smollm, field, typed, message):
    """The message is not sent, its text stays in the box, the field is marked and the error names it by its
    label with the range it takes; the error goes once the field is right."""
    before = messages(smollm)
    box = smollm.get_by_test_id(field.replace("_", "-"))
    default = box.input_value()
    box.fill("")
    box.press_sequentially(typed)  # typed as a person does: a number input takes "e" but holds no value
    send(smollm, QUESTION)
    assert send_error(smollm) == f"Not sent: {message}."
    assert box.get_attribute("aria-invalid") == "true"
    assert smollm.get_by_test_id("prompt").input_value() == QUESTION
    assert smollm.get_by_test_id("status").text_content() == "ready" and messages(smollm) == before
    box.fill(default)
    wait_send_error_gone(smollm)  # the worker checks the fields again
    assert send_error(smollm) is None and box.get_attribute("aria-invalid") == "false"
    smollm.get_by_test_id("prompt").fill("")


def stop_mid_reply_then_ask_again(page, model_path) -> None:
    """Stop a long greedy reply after a few pieces; the stopped text stays; the next message (typed
    on two lines with Shift+Enter) gets the CPython reply to the conversation as the page shows it."""
    new_chat(page)
    set_settings(page, temperature=0, max_tokens=200)
    page.evaluate(WATCH_REPLY)
    send(page, LONG_QUESTION)
    page.wait_for_function("() => window.replyUpdates.length >= 3", timeout=120_000)
    # while it replies no file can be loaded (that would end the reply and replace the model), and says so
    assert page.get_by_test_id("file-input").is_disabled() and page.get_by_test_id("load-demo").is_disabled()
    hint = page.get_by_test_id("dropzone-hint")
    assert hint.text_content() == "a reply is running: Stop it to load another model"
    # Enter then keeps the message in the box and says why it was not sent
    page.get_by_test_id("prompt").fill("typed ahead")
    page.get_by_test_id("prompt").press("Enter")
    assert page.get_by_test_id("send-error").text_content().startswith("Not sent yet: a reply is running")
    assert page.get_by_test_id("prompt").input_value() == "typed ahead"
    page.get_by_test_id("stop").click()
    wait_status(page, ("ready",), 60_000)
    last = page.locator("[data-testid=message][data-role=assistant]").last
    assert last.get_attribute("data-note") == "stopped"
    assert page.get_by_test_id("file-input").is_enabled() and hint.text_content().startswith("or click to choose")
    assert page.get_by_test_id("send-error").is_hidden()                  # the reply ended: the message may go
    partial = messages(page)[-1][1]
    stats = page.get_by_test_id("stats").text_content()
    assert partial and stats.endswith("· stopped"), stats
    assert int(stats.split(" generated")[0].rsplit("· ", 1)[1]) < 200

    set_settings(page, max_tokens=16)
    send(page, FOLLOW_UP)
    assert messages(page)[-2] == ("user", FOLLOW_UP)  # Shift+Enter made a new line, Enter sent
    reply = wait_reply(page)
    assert reply == cpython_reply(model_path, [LONG_QUESTION, partial, FOLLOW_UP], max_tokens=16)
    assert error_text(page) is None


def test_stop_mid_reply_then_the_next_message_works(smollm, smollm2_path):
    assert smollm.evaluate("crossOriginIsolated")  # Stop goes through Pyodide's interrupt buffer
    stop_mid_reply_then_ask_again(smollm, smollm2_path)


def test_stop_without_cross_origin_isolation(browser, server, smollm2_path):
    """Without COOP/COEP there is no SharedArrayBuffer: Stop is the cooperative check between tokens."""
    with fresh_page(browser, server, isolated=False) as page:
        load_model(page, [smollm2_path])
        stop_mid_reply_then_ask_again(page, smollm2_path)


def test_new_chat_clears_the_conversation(smollm):
    assert len(messages(smollm)) > 0
    new_chat(smollm)
    assert smollm.get_by_test_id("status").text_content() == "ready"
