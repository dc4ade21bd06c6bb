"""Stop cancels a model load: cross-origin isolated, the worker's Python is interrupted mid-read and says
"load-stopped"; without isolation the worker is started again. Either way the page is back to "no model"
with no error, and the next model loads and answers."""

from __future__ import annotations

import pytest
from conftest import TINY

from browser.conftest import fresh_page
from browser.pages import (
    BOOT_MS,
    EXACT,
    error_text,
    load_model,
    pick_files,
    send,
    set_settings,
    wait_reply,
    wait_status,
)

pytestmark = pytest.mark.browser


def stop_a_load_then_load_another(page, big) -> None:
    pick_files(page, [big], EXACT)
    page.wait_for_function("() => document.querySelector('.progress-text').textContent.startsWith('reading tensors')",
                           timeout=120_000)
    assert page.get_by_test_id("stop").is_enabled()
    page.get_by_test_id("stop").click()
    wait_status(page, ("no model",), BOOT_MS)
    assert page.get_by_test_id("stats").text_content() == "load stopped"
    assert error_text(page) is None and page.get_by_test_id("model-info").is_hidden()
    load_model(page, [TINY["llama"]], drop=True)
    set_settings(page, temperature=0, max_tokens=4, seed=None)
    send(page, "hello")
    assert wait_reply(page)


def test_stop_cancels_a_load(app, gemma3_path):
    assert app.evaluate("crossOriginIsolated")
    stop_a_load_then_load_another(app, gemma3_path)


def test_stop_cancels_a_load_without_isolation(browser, server, gemma3_path):
    with fresh_page(browser, server, isolated=False) as page:
        stop_a_load_then_load_another(page, gemma3_path)
