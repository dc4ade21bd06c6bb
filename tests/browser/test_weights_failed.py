"""A load that fails while the weights are read, in Chromium: the model file is cut short on disk while its
tensors are read (the browser's File can no longer be read). The page says that the load failed while the
weights were read and that the model before was let go, keeps the conversation, and offers to load that
model again; once it is back it answers the conversation the page kept, as CPython does."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import TINY

from browser.pages import EXACT, LOAD_MS, ask, drop_files, error_text, messages, pick_files, set_settings, wait_ready
from browser.reference import cpython_reply

pytestmark = pytest.mark.browser

READING = "() => document.querySelector('.progress-text').textContent.startsWith('reading tensors')"
FAILED = "() => !document.querySelector('[data-testid=error]').hidden"


def test_a_failure_while_the_weights_are_read_offers_the_model_before_again(app, gemma3_path, tmp_path):
    drop_files(app, [TINY["llama"]], EXACT)
    wait_ready(app)
    name = app.locator("[data-testid=model-info] .model-name").text_content()
    set_settings(app, temperature=0, max_tokens=4, seed=None)
    first = ask(app, "hello")
    big = tmp_path / gemma3_path.name
    shutil.copyfile(gemma3_path, big)
    pick_files(app, [big], EXACT)
    app.wait_for_function(READING, timeout=LOAD_MS)
    os.truncate(big, big.stat().st_size // 2)                 # changed on disk after it was chosen
    app.wait_for_function(FAILED, timeout=LOAD_MS)
    text = error_text(app)
    assert text.startswith(f"the load failed while the weights were read: {big.name}: byte "), text
    assert "the file can no longer be read" in text and "internal error" not in text, text
    assert text.endswith("the model loaded before was let go to make room: the conversation is kept, "
                         "load it again"), text
    assert app.get_by_test_id("status").text_content() == "no model"
    assert messages(app) == [("user", "hello"), ("assistant", first)]
    again = app.get_by_test_id("error-action")
    assert again.is_visible() and again.text_content() == f"Load {name} again"
    again.click()
    wait_ready(app)
    assert error_text(app) is None and app.get_by_test_id("error-action").is_hidden()
    assert ask(app, "again") == cpython_reply(TINY["llama"], ["hello", first, "again"], max_tokens=4)
    assert messages(app)[:2] == [("user", "hello"), ("assistant", first)]
